"""``react-agent run --workspace DIR "goal"`` end to end with the real runtime, the real sandbox and a
scripted model: the runtime finds the test command, the failing test and the source it points at,
the guided plan reads that source and changes only it, the report lists the changed files and the
diff, and ``react-agent revert`` puts the files back (and refuses after a later change)."""

from __future__ import annotations

import json

import pytest

import agent.cli.main as cli
from agent.models.backends.scripted import ScriptedPolicy
from agent.cli.main import main
from goal_support import GoalModel, make_repo


def run_goal(tmp_path, monkeypatch, capsys, repo, *extra):
    model = GoalModel(repo.wrong, repo.right)
    monkeypatch.setattr(cli, "load_spec", lambda spec: ScriptedPolicy([model] * 12))
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    status = main(["run", "--workspace", str(repo.root), "--model", str(fake), "--runs-dir", str(tmp_path / "runs"),
                   *extra])
    return status, capsys.readouterr(), model


@pytest.mark.parametrize("seed,layout,config", [(1, "tests", None), (2, "flat", None), (3, "tests", "pyproject.toml")])
def test_a_goal_in_words_fixes_the_code_the_failing_test_points_at(tmp_path, monkeypatch, capsys, seed, layout, config):
    repo = make_repo(tmp_path, seed, layout=layout, config=config)
    test_before = (repo.root / repo.test).read_text()
    goal = f"{repo.function} ignores its factor, so its test fails. Fix it without touching the tests."
    status, out, model = run_goal(tmp_path, monkeypatch, capsys, repo, goal)
    assert status == 0, out.out + out.err
    assert repo.right in (repo.root / repo.source).read_text()
    assert (repo.root / repo.test).read_text() == test_before
    # the read steps named the source the localisation found, and no change step offered a test
    reads = [schema["const"] for tool, schema in model.asked if tool == "read_file"]
    assert repo.source in reads
    offered = [schema for tool, schema in model.asked if tool == "replace_function"]
    assert offered and all(repo.test not in json.dumps(s) for s in offered)
    assert f"to read: {repo.test}, {repo.source}" in out.out
    assert f"changed files: {repo.source} (modified)" in out.out
    assert f"-    {repo.wrong}" in out.out and f"+    {repo.right}" in out.out
    run_id = out.out.split("react-agent revert ")[1].split()[0]
    assert main(["revert", run_id, "--runs-dir", str(tmp_path / "runs")]) == 0
    assert repo.wrong in (repo.root / repo.source).read_text() and repo.right not in (repo.root / repo.source).read_text()


def test_the_goal_as_a_flag_and_the_json_report(tmp_path, monkeypatch, capsys):
    repo = make_repo(tmp_path, 4)
    status, out, _ = run_goal(tmp_path, monkeypatch, capsys, repo, "--json", "--goal", "fix the failing test")
    assert status == 0, out.err
    report = json.loads(out.out)
    assert report["discovery"]["test_command"] == "python -m pytest"
    assert report["discovery"]["failing"] == [f"{repo.test}::test_{repo.function}"]
    assert [f["path"] for f in report["changes"]["files"]] == [repo.source]
    assert report["changes"]["diff"].startswith(f"--- a/{repo.source}")


def test_revert_refuses_when_a_file_changed_since_and_changes_nothing(tmp_path, monkeypatch, capsys):
    repo = make_repo(tmp_path, 5)
    status, out, _ = run_goal(tmp_path, monkeypatch, capsys, repo, "fix the failing test")
    assert status == 0
    run_id = out.out.split("react-agent revert ")[1].split()[0]
    edited = (repo.root / repo.source).read_text() + "\n# the user's own later edit\n"
    (repo.root / repo.source).write_text(edited)
    assert main(["revert", run_id, "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "changed since the run" in err and repo.source in err and "Nothing was changed" in err
    assert (repo.root / repo.source).read_text() == edited


@pytest.mark.parametrize("args,message", [
    (["fix it"], "--workspace DIR"),
    (["--workspace", "{ws}", "--pack", "fixtest_shipping", "fix it"], "not both"),
    (["--workspace", "{ws}", "--goal", "fix it", "also this"], "give the goal once"),
    (["--workspace", "{ws}", "   "], "the goal is empty"),
])
def test_a_goal_run_that_cannot_start_says_why_and_runs_nothing(tmp_path, capsys, args, message):
    repo = make_repo(tmp_path, 6)
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    argv = ["run", "--model", str(fake), "--runs-dir", str(tmp_path / "runs"), *[a.format(ws=repo.root) for a in args]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Nothing was run" in err
    assert not (tmp_path / "runs").exists()


def test_a_folder_with_no_tests_and_no_named_command_is_refused(tmp_path, capsys):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "tool.py").write_text("def f():\n    return 1\n")
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    assert main(["run", "--workspace", str(tmp_path / "ws"), "--model", str(fake), "--runs-dir", str(tmp_path / "r"),
                 "make f return 2"]) == 2
    assert "no test command found" in capsys.readouterr().err
