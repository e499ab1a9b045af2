"""The runner's half of the workspace tools: which workspace a job gets, what a request may not widen,
and the approval endpoint -- in-process (starlette TestClient), and once over a socket with a real
runner process. Every run here is a real guided fixtest run (scripted test policy, real sandbox)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

import agent.task.packs
from agent.runner.server import RunnerSettings, _parse_args, create_app
from server_support import (PAGE_ORIGIN, RunnerProcess, answer_approval, make_client, operator_headers, operator_token,
                            pending_approvals, wait_for, wait_terminal)
from workspace_support import BASH_STEPS, FIXTEST_PACK, fixtest_script

JSON = {"content-type": "application/json"}
RUN = {"model_path": "scripted", "pack": FIXTEST_PACK}
ALWAYS = {**RUN, "approval": "always_ask"}


def client_for(tmp_path: Path, **settings: Any):
    return make_client(tmp_path / "runs", fixtest_script(), **settings)


def questions(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in view["events"] if e["type"] == "approval.requested"]


def decisions(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in view["events"] if e["type"] == "approval.decided"]


def next_question(client: Any, run_id: str, seen: int = 0, token: str | None = None) -> dict[str, Any]:
    """The run's question number ``seen`` + 1, once it is asked: its event in the trace (which names
    no approval id) with the id the operator reads from the approvals endpoint."""
    view = wait_for(client, run_id, lambda v: len(questions(v)) > seen or v["terminal"], timeout=60)
    assert len(questions(view)) > seen, (view["status"], view["error"])
    event = questions(view)[seen]
    assert "approval_id" not in event
    pending = pending_approvals(client, run_id, token)
    assert len(pending) == 1 and pending[0]["command"] == event["command"], (pending, event)
    return {**event, "approval_id": pending[0]["approval_id"]}


def answer(client: Any, run_id: str, approval_id: str, decision: str = "approve", **kwargs: Any):
    return answer_approval(client, run_id, approval_id, decision, **kwargs)


def run_count(client: Any) -> int:
    return client.get("/agent/runs").json()["count"]


def cancel_and_wait(client: Any, run_id: str) -> dict[str, Any]:
    client.post(f"/agent/runs/{run_id}/cancel", json={})
    return wait_terminal(client, run_id, timeout=60)


@pytest.fixture
def operator_pack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """The runner's packs plus ``fixtest_operator``: the shipping pack without its template, so it works
    in the operator's folder (a copy of the shipping repository made here)."""
    packs = tmp_path / "packs"
    packs.mkdir()
    shutil.copytree(agent.task.packs.PACKS_DIR / FIXTEST_PACK, packs / FIXTEST_PACK)
    shutil.copytree(agent.task.packs.PACKS_DIR / FIXTEST_PACK, packs / "fixtest_operator")
    task_file = packs / "fixtest_operator" / "task.json"
    task = json.loads(task_file.read_text())
    task["id"], task["workspace"]["template"] = "fixtest_operator", None
    task_file.write_text(json.dumps(task))
    folder = tmp_path / "operator-repo"
    shutil.copytree(packs / FIXTEST_PACK / "workspace", folder)
    shutil.rmtree(packs / "fixtest_operator" / "workspace")
    monkeypatch.setattr(agent.task.packs, "PACKS_DIR", packs)
    return "fixtest_operator", folder


# ---------------------------------------------------------------- which workspace a job gets


def test_a_template_pack_runs_on_its_own_copy_and_each_approval_is_answered_over_http(tmp_path):
    template = agent.task.packs.PACKS_DIR / FIXTEST_PACK / "workspace"
    before = {p: p.read_bytes() for p in template.rglob("*") if p.is_file()}
    with client_for(tmp_path) as client:
        created = client.post("/agent/runs", json=ALWAYS)
        assert created.status_code == 202, created.json()
        run_id = created.json()["id"]
        assert created.json()["request"]["workspace"] == {"source": "template", "approval": "always_ask"}
        for n in range(BASH_STEPS):
            question = next_question(client, run_id, n)
            assert (question["tool"], question["command"]) == ("bash", "python -m pytest")
            assert question["level"] == "workspace_write" and question["reason"]
            assert 0 < question["seconds"] <= 120 and question["expires_at"].endswith("Z")
            reply = answer(client, run_id, question["approval_id"])
            assert reply.status_code == 200 and reply.json() == {
                "run_id": run_id, "approval_id": question["approval_id"], "decision": "approve"}
        view = wait_terminal(client, run_id, timeout=60)
    assert (view["status"], view["stop_reason"]) == ("completed", "completed"), view["error"]
    assert [(d["decision"], d["by"]) for d in decisions(view)] == [("run", "operator:approved")] * BASH_STEPS
    # each question comes before its decision in the trace; the command ran only after the yes
    kinds = [e["type"] for e in view["events"] if e["type"].startswith("approval.")]
    assert kinds == ["approval.requested", "approval.decided"] * BASH_STEPS
    copy = tmp_path / "runs" / run_id / "workspace"
    assert (copy / "shop" / "shipping.py").read_text() != (template / "shop" / "shipping.py").read_text()
    assert {p: p.read_bytes() for p in template.rglob("*") if p.is_file()} == before  # the pack is untouched
    trace = json.dumps(view)
    assert str(tmp_path) not in trace and str(agent.task.packs.PACKS_DIR) not in trace  # no host path leaves


def test_a_pack_without_a_template_needs_the_operators_folder(tmp_path, operator_pack):
    name, folder = operator_pack
    with client_for(tmp_path) as client:
        before = run_count(client)
        refused = client.post("/agent/runs", json={**ALWAYS, "pack": name})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "workspace_not_configured"
        assert "--workspace" in refused.json()["error"]["message"] and run_count(client) == before
    with client_for(tmp_path, workspace=folder) as client:
        first = client.post("/agent/runs", json={**ALWAYS, "pack": name}).json()
        assert first["request"]["workspace"] == {"source": "operator", "approval": "always_ask"}
        busy = client.post("/agent/runs", json={**RUN, "pack": name})  # one job at a time in that folder
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "workspace_busy"
        for n in range(BASH_STEPS):
            assert answer(client, first["id"], next_question(client, first["id"], n)["approval_id"]).status_code == 200
        view = wait_terminal(client, first["id"], timeout=60)
        assert view["status"] == "completed", view["error"]
        ready = next(e for e in view["events"] if e["type"] == "workspace.ready")
        assert ready["from_template"] is False and str(folder) not in json.dumps(view)
        assert not (tmp_path / "runs" / first["id"] / "workspace").exists()
    fixed = (folder / "shop" / "shipping.py").read_text()
    assert fixed != (agent.task.packs.PACKS_DIR / FIXTEST_PACK / "workspace" / "shop" / "shipping.py").read_text()


# ---------------------------------------------------------------- what a request can never do

FOLDER_FIELDS = ["workspace", "workspace_dir", "workspace_path", "cwd", "root", "directory", "dir", "path",
                 "repo", "template"]
OPT_OUTS = {"unsandboxed": True, "allow_unsandboxed": True, "sandbox": "none", "network": True,
            "approver": "auto", "approve": True, "approved": ["*"], "approvals": [{"decision": "approve"}],
            "auto_approve": True, "approval_seconds": 3600}


def test_a_request_can_name_no_folder_pre_approve_nothing_and_not_opt_out(tmp_path):
    with client_for(tmp_path) as client:
        before = run_count(client)
        bodies = [{**RUN, name: "/tmp/elsewhere"} for name in FOLDER_FIELDS]
        bodies += [{**RUN, name: value} for name, value in OPT_OUTS.items()]
        bodies += [{**RUN, "model": {"kind": "local", "path": "scripted", "workspace": "/tmp"}},
                   {**RUN, "pack": "/tmp/evil-pack"}, {**RUN, "pack": "../packs/fixtest_shipping"},
                   {**RUN, "approval": "none"}, {**RUN, "approval": "ASK_ON_RISK"}, {**RUN, "budgets": {"workspace": "/"}}]
        for body in bodies:
            reply = client.post("/agent/runs", json=body)
            assert reply.status_code == 422, (body, reply.status_code)
            assert reply.json()["error"]["code"] == "validation_error" and "/tmp" not in reply.text
        assert run_count(client) == before


@pytest.mark.parametrize("operator,allowed", [("ask_on_risk", {"never_ask", "ask_on_risk", "always_ask"}),
                                              ("never_ask", {"never_ask"}), ("always_ask", {"always_ask"})])
def test_a_request_may_only_tighten_the_operators_approval_policy(tmp_path, operator, allowed):
    with client_for(tmp_path, approval=operator) as client:
        assert client.get("/status").json()["workspace"]["approval_modes_allowed"] == sorted(allowed)
        for mode in ("never_ask", "ask_on_risk", "always_ask"):
            reply = client.post("/agent/runs", json={**RUN, "approval": mode})
            if mode in allowed:
                assert reply.status_code == 202 and reply.json()["request"]["workspace"]["approval"] == mode
                cancel_and_wait(client, reply.json()["id"])
            else:
                assert reply.status_code == 400 and reply.json()["error"]["code"] == "approval_not_allowed", mode
        default = client.post("/agent/runs", json=RUN).json()
        assert default["request"]["workspace"]["approval"] == operator
        cancel_and_wait(client, default["id"])


def test_a_request_cannot_widen_the_packs_tools(tmp_path):
    with client_for(tmp_path) as client:
        before = run_count(client)
        for tools in (["read_file", "edit_file", "bash", "write_file"], ["read_file", "edit_file", "bash", "plot"],
                      ["read_file", "edit_file"]):
            reply = client.post("/agent/runs", json={**RUN, "tools": tools})
            assert reply.status_code == 400, tools
            assert reply.json()["error"]["code"] in ("tools_not_in_pack", "required_tool_removed")
        assert run_count(client) == before


def test_status_tells_the_workspace_choices_but_no_folder(tmp_path, operator_pack):
    _, folder = operator_pack
    with client_for(tmp_path, workspace=folder, approval="always_ask", approval_seconds=30) as client:
        status = client.get("/status")
    assert status.json()["workspace"] == {"operator_folder": True, "approval": "always_ask", "approval_seconds": 30.0,
                                          "approval_modes_allowed": ["always_ask"], "sandboxed": True, "network": False}
    assert str(folder) not in status.text


def test_the_runner_flags_offer_no_opt_out_and_check_the_folder(tmp_path, capsys):
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    (tmp_path / "file").write_text("x")
    for argv in (["--unsandboxed"], ["--allow-unsandboxed"], ["--workspace", str(tmp_path / "missing")],
                 ["--workspace", str(link)], ["--workspace", str(tmp_path / "file")], ["--approval", "maybe"],
                 ["--approval-seconds", "0"], ["--approval-seconds", "99999"]):
        with pytest.raises(SystemExit) as exit_info:
            _parse_args(argv)
        assert exit_info.value.code == 2, argv
    args = _parse_args(["--workspace", str(tmp_path), "--approval", "never_ask", "--approval-seconds", "30"])
    assert (args.workspace, args.approval, args.approval_seconds) == (tmp_path, "never_ask", 30.0)
    with pytest.raises(ValueError):  # a folder that vanished before the app was made
        create_app(RunnerSettings(runs_dir=tmp_path / "runs", workspace=tmp_path / "missing"))


# ---------------------------------------------------------------- answering a question


def test_deny_refuses_the_command_and_a_second_answer_is_409(tmp_path):
    with client_for(tmp_path) as client:
        run_id = client.post("/agent/runs", json=ALWAYS).json()["id"]
        question = next_question(client, run_id)
        assert answer(client, run_id, question["approval_id"], "deny").status_code == 200
        view = wait_for(client, run_id, lambda v: decisions(v) or v["terminal"])
        assert (decisions(view)[0]["decision"], decisions(view)[0]["by"]) == ("refuse", "operator:denied")
        refused = wait_for(client, run_id, lambda v: any(e["type"] == "tool.observation" and e["observation"]["tool"] == "bash"
                                                         for e in v["events"]))
        observation = next(e["observation"] for e in refused["events"]
                           if e["type"] == "tool.observation" and e["observation"]["tool"] == "bash")
        assert not observation["ok"] and observation["error"]["code"] == "command_refused"
        again = answer(client, run_id, question["approval_id"], "approve")
        assert again.status_code == 409 and again.json()["error"]["reason"] == "answered"
        cancel_and_wait(client, run_id)


def test_no_answer_before_the_deadline_is_a_refusal_and_a_late_answer_is_409(tmp_path):
    with client_for(tmp_path, approval_seconds=1.0) as client:
        run_id = client.post("/agent/runs", json=ALWAYS).json()["id"]
        question = next_question(client, run_id)
        assert question["seconds"] <= 1.0
        view = wait_for(client, run_id, lambda v: decisions(v) or v["terminal"], timeout=15)
        assert decisions(view)[0]["by"] == "operator:deadline" and decisions(view)[0]["decision"] == "refuse"
        late = answer(client, run_id, question["approval_id"])
        assert late.status_code == 409 and late.json()["error"] == {
            "code": "approval_closed", "reason": "deadline",
            "message": "the deadline of this approval has passed: the command was refused"}
        cancel_and_wait(client, run_id)


def test_the_answer_endpoint_keeps_the_browser_boundary(tmp_path):
    with client_for(tmp_path) as client:
        run_id = client.post("/agent/runs", json=ALWAYS).json()["id"]
        other = client.post("/agent/runs", json={**RUN, "pack": "default"}).json()["id"]  # queued behind it
        question = next_question(client, run_id)
        url = f"/agent/runs/{run_id}/approvals/{question['approval_id']}"
        body = json.dumps({"decision": "approve"})
        waiting = lambda: client.app.state.store.approvals.waiting(run_id)  # noqa: E731
        # The operator's token rides on every attack: the boundary refuses them before any route.
        token = operator_headers(operator_token(client))
        attacks = [
            ({"origin": "https://evil.example", **JSON}, body, 403),
            ({"origin": "null", **JSON}, body, 403),
            ({"origin": "http://127.0.0.1:8017.evil.example", **JSON}, body, 403),
            ({"origin": "https://127.0.0.1:8017", **JSON}, body, 403),
            ({"host": "evil.example:4890", **JSON}, body, 421),
            ({"host": "127.0.0.1.nip.io:4890", **JSON}, body, 421),
            ({"host": "", **JSON}, body, 421),
            ({"content-type": "text/plain"}, body, 415),
            ({"content-type": "application/x-www-form-urlencoded"}, "decision=approve", 415),
            ({"content-type": "multipart/form-data; boundary=x"}, body, 415),
            (JSON, json.dumps({"decision": "approve", "pad": "x" * (300 * 1024)}), 413),
            (JSON, json.dumps({"decision": "yes"}), 422),
            (JSON, json.dumps({"decision": "approve", "approval_id": question["approval_id"]}), 422),
            (JSON, "[]", 422),
        ]
        for headers, content, status in attacks:
            reply = client.post(url, headers={**token, **headers}, content=content)
            assert reply.status_code == status, (headers, reply.status_code, reply.text[:200])
            assert "access-control-allow-origin" not in reply.headers
            assert waiting() == 1, headers  # nothing answered it
        for method in ("GET", "PUT", "PATCH", "DELETE"):
            assert client.request(method, url, headers={**token, **JSON}, content=body).status_code == 405
        preflight = client.options(url, headers={"origin": "https://evil.example", "access-control-request-method": "POST"})
        assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers
        chunked = client.post(url, headers={**token, **JSON}, content=(b"x" * 65536 for _ in range(8)))  # 512 KiB, no length
        assert chunked.status_code == 413
        assert waiting() == 1
        for wrong in (f"/agent/runs/{other}/approvals/{question['approval_id']}",  # another run's question
                      f"/agent/runs/run-000000000000/approvals/{question['approval_id']}",
                      f"/agent/runs/{run_id}/approvals/apr-0000000000000000",
                      f"/agent/runs/{run_id}/approvals/..%2f..%2fcancel", f"/agent/runs/{run_id}/approvals/APR-x"):
            reply = client.post(wrong, json={"decision": "approve"}, headers=token)
            assert reply.status_code == 404 and reply.json()["error"]["code"] == "not_found", wrong
        assert waiting() == 1
        good = client.post(url, headers={"origin": PAGE_ORIGIN, **token}, json={"decision": "approve"})
        assert good.status_code == 200 and good.headers["access-control-allow-origin"] == PAGE_ORIGIN
        assert waiting() == 0
        second = next_question(client, run_id, 1)
        client.post(f"/agent/runs/{run_id}/cancel", json={})
        stopped = answer(client, run_id, second["approval_id"])
        assert stopped.status_code == 409 and stopped.json()["error"]["reason"] == "run_stopped"
        view = wait_terminal(client, run_id, timeout=60)
        assert view["status"] == "cancelled" and decisions(view)[-1]["by"] == "operator:cancelled"
        cancel_and_wait(client, other)


# ---------------------------------------------------------------- once over a socket


def test_a_real_runner_waits_for_the_approval_and_finishes_after_it(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    with RunnerProcess(runs, fixtest_script(), extra_args=["--approval", "always_ask", "--approval-seconds", "60"]) as runner, \
            runner.client(headers={"origin": PAGE_ORIGIN}) as client:
        created = client.post("/agent/runs", json=RUN)
        assert created.status_code == 202 and created.json()["request"]["workspace"]["approval"] == "always_ask"
        run_id = created.json()["id"]
        for n in range(BASH_STEPS):
            question = next_question(client, run_id, n, token=runner.token)
            time.sleep(0.3)
            view = client.get(f"/agent/runs/{run_id}").json()
            assert view["status"] == "running" and len(decisions(view)) == n  # it waits: nothing ran
            reply = answer_approval(client, run_id, question["approval_id"], token=runner.token)
            assert reply.status_code == 200 and reply.headers["access-control-allow-origin"] == PAGE_ORIGIN
        view = wait_terminal(client, run_id, timeout=60)
        assert (view["status"], view["stop_reason"]) == ("completed", "completed"), view["error"]
        assert view["final"]["evidence_ids"] and [d["by"] for d in decisions(view)] == ["operator:approved"] * BASH_STEPS
        assert [d["channel"] for d in decisions(view)] == ["page"] * BASH_STEPS
