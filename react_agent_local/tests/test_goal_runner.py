"""``POST /agent/runs {"goal": ...}`` on the runner's operator folder: in-process (starlette TestClient)
and once over a socket with a real runner process. Real runtime, real sandbox, scripted model. The
folder is never named by a request, a goal without an operator folder is a 400 with a stable code,
tools are narrowed and never widened, the changes route shows the diff and the revert route puts the
files back -- and refuses, changing nothing, once a file changed since."""

from __future__ import annotations

import json

from agent.models.backends.scripted import ScriptedPolicy
from goal_support import GoalModel, make_repo, static_script
from server_support import RunnerProcess, make_client, wait_terminal

MODEL = {"model_path": "scripted"}


def goal_client(tmp_path, repo, **settings):
    return make_client(tmp_path / "runs", workspace=repo.root, test_policy=True,
                       policy_factory=lambda request: ScriptedPolicy([GoalModel(repo.wrong, repo.right)] * 12),
                       **settings)


def test_a_goal_runs_on_the_operators_folder_and_its_changes_can_be_seen_and_reverted(tmp_path):
    repo = make_repo(tmp_path, 11, config="pytest.ini")
    before = (repo.root / repo.source).read_text()
    with goal_client(tmp_path, repo) as client:
        created = client.post("/agent/runs", json={**MODEL, "goal": f"{repo.function} is wrong; fix it"})
        assert created.status_code == 202, created.text
        run_id = created.json()["id"]
        view = wait_terminal(client, run_id, timeout=120)
        assert view["status"] == "completed", (view["stop_reason"], view["error"])
        assert repo.right in (repo.root / repo.source).read_text()
        found = client.get(f"/agent/runs/{run_id}/changes").json()
        assert found["discovery"]["test_command"] == "python -m pytest"
        assert found["discovery"]["found_in"] == "pytest.ini"
        assert found["discovery"]["failing"] == [f"{repo.test}::test_{repo.function}"]
        assert repo.source in found["discovery"]["reads"]
        assert str(repo.root) not in json.dumps(found) and str(repo.root) not in json.dumps(view)
        assert [f["path"] for f in found["changes"]["files"]] == [repo.source]
        assert f"+    {repo.right}" in found["changes"]["diff"]
        reverted = client.post(f"/agent/runs/{run_id}/revert", json={})
        assert reverted.status_code == 200 and reverted.json()["reverted"] == [repo.source]
        assert (repo.root / repo.source).read_text() == before
        again = client.post(f"/agent/runs/{run_id}/revert", json={})
        assert again.status_code == 409 and again.json()["error"]["code"] == "already_reverted"


def test_revert_refuses_after_a_later_change_and_changes_nothing(tmp_path):
    repo = make_repo(tmp_path, 12)
    with goal_client(tmp_path, repo) as client:
        run_id = client.post("/agent/runs", json={**MODEL, "goal": "fix the failing test"}).json()["id"]
        assert wait_terminal(client, run_id, timeout=120)["status"] == "completed"
        later = (repo.root / repo.source).read_text().replace(repo.right, repo.right + "  # reviewed")
        (repo.root / repo.source).write_text(later)
        refused = client.post(f"/agent/runs/{run_id}/revert", json={})
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "changed_since"
        assert repo.source in refused.json()["error"]["message"]
        assert (repo.root / repo.source).read_text() == later


def test_a_goal_without_an_operator_folder_is_refused_with_a_stable_code(tmp_path):
    with make_client(tmp_path / "runs", []) as client:
        refused = client.post("/agent/runs", json={**MODEL, "goal": "fix the failing test"})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "workspace_not_configured"
        assert client.get("/agent/runs").json()["count"] == 0


def test_a_request_never_names_the_folder_nor_widens_the_tools(tmp_path):
    repo = make_repo(tmp_path, 13)
    with goal_client(tmp_path, repo) as client:
        for body, code in (({"workspace": str(tmp_path)}, 422), ({"cwd": "/"}, 422),
                           ({"tools": ["read_file", "replace_function", "bash", "calculator"]}, 400),
                           ({"tools": ["read_file", "bash"]}, 400), ({"pack": "fixtest_shipping"}, 400)):
            refused = client.post("/agent/runs", json={**MODEL, "goal": "fix it", **body})
            assert refused.status_code == code, (body, refused.text)
        assert client.get("/agent/runs").json()["count"] == 0
        narrowed = client.post("/agent/runs", json={**MODEL, "goal": "fix it",
                                                    "tools": ["read_file", "replace_function", "bash"]})
        assert narrowed.status_code == 202
        view = wait_terminal(client, narrowed.json()["id"], timeout=120)
        started = next(e for e in view["events"] if e["type"] == "run.started")
        assert started["tools"] == ["read_file", "replace_function", "bash"]
        assert view["status"] == "completed"


def test_a_folder_with_no_test_command_fails_the_job_with_its_reason(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.py").write_text("X = 1\n")
    with make_client(tmp_path / "runs", [], workspace=tmp_path / "ws") as client:
        run_id = client.post("/agent/runs", json={**MODEL, "goal": "make X two"}).json()["id"]
        view = wait_terminal(client, run_id, timeout=60)
        assert view["status"] == "failed" and view["error"]["code"] == "no_test_command"


def test_over_a_socket_a_goal_run_and_its_revert(tmp_path):
    repo = make_repo(tmp_path, 14)
    before = (repo.root / repo.source).read_text()
    runs = tmp_path / "runs"
    runs.mkdir()
    with RunnerProcess(runs, static_script(repo), extra_args=["--workspace", str(repo.root)]) as runner, \
            runner.client() as client:
        run_id = client.post("/agent/runs", json={**MODEL, "goal": "the function is wrong; fix it"}).json()["id"]
        view = wait_terminal(client, run_id, timeout=120)
        assert view["status"] == "completed", (view["stop_reason"], view["error"])
        assert repo.right in (repo.root / repo.source).read_text()
        assert client.post(f"/agent/runs/{run_id}/revert", json={}).status_code == 200
    assert (repo.root / repo.source).read_text() == before


def test_a_goal_jobs_run_finished_comes_after_its_changes_are_recorded(tmp_path):
    """The store makes a job terminal on its ``run.finished``: by then the changes must be on disk, or
    a page that polls until the run finished asks for its diff and finds none."""
    from agent.coding.goal_run import goal_job, job_changes

    repo = make_repo(tmp_path, 41, config="pytest.ini")
    run_dir = tmp_path / "runs" / "job-1"
    (run_dir / "artifacts").mkdir(parents=True)
    seen = []

    def fake_run(pack, policy, budgets, *, sink, **kwargs):
        (repo.root / repo.source).write_text((repo.root / repo.source).read_text().replace(repo.wrong, repo.right))
        sink({"type": "run.finished", "status": "completed"})
        return "outcome"

    def sink(event):
        if event["type"] == "run.finished":
            seen.append(job_changes(run_dir)["changes"])

    assert goal_job(repo.root, "fix the failing test", fake_run, None)(None, None, None, sink=sink,
                                                                       artifact_dir=run_dir / "artifacts") == "outcome"
    assert len(seen) == 1 and seen[0] is not None
    assert [f["path"] for f in seen[0]["files"]] == [repo.source]
