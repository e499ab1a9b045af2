"""The side-by-side harness's task preparation and grading, without any model: what an arm's folder
holds (never the report, the hidden tests or an exercise's solution), how a task is graded (hidden
tests laid over, test files changed is a failure), and the two arms' commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import aider_bench  # noqa: E402
from goal_support import make_repo  # noqa: E402


def bug_task(tmp_path: Path, seed: int):
    repo = make_repo(tmp_path / "tasks", seed)
    (repo.root / "GOAL.md").write_text(f"{repo.function} forgets its factor.\n")
    (repo.root / "hidden" / "tests").mkdir(parents=True)
    (repo.root / "hidden" / "tests" / "test_more.py").write_text(
        f"from {repo.package}.{repo.module} import {repo.function}\n\n\ndef test_more():\n"
        f"    assert {repo.function}(0, 5) == 5\n")
    return repo


def exercise(tmp_path: Path) -> Path:
    root = tmp_path / "tasks" / "two-fer"
    (root / ".docs").mkdir(parents=True)
    (root / ".meta").mkdir()
    (root / ".docs" / "instructions.md").write_text("Say 'One for X, one for me.'\n")
    (root / ".meta" / "example.py").write_text("def two_fer(name='you'):\n    return f'One for {name}, one for me.'\n")
    (root / "two_fer.py").write_text("def two_fer(name='you'):\n    pass\n")
    (root / "two_fer_test.py").write_text(
        "import unittest\nfrom two_fer import two_fer\n\n\nclass T(unittest.TestCase):\n"
        "    def test_x(self):\n        self.assertEqual(two_fer('Bo'), 'One for Bo, one for me.')\n")
    return root


def test_both_task_shapes_are_read_and_prepared_without_what_only_the_grader_sees(tmp_path):
    repo = bug_task(tmp_path, 51)
    ex = exercise(tmp_path)
    tasks = {t.name: t for t in aider_bench.read_tasks(tmp_path / "tasks")}
    bug, ex_task = tasks[repo.root.name], tasks[ex.name]
    assert bug.kind == "bug_report" and bug.goal.startswith(repo.function) and bug.hidden is not None
    assert bug.editable == (f"{repo.package}/__init__.py", repo.source) and bug.tests == (repo.test,)
    assert ex_task.kind == "exercise" and ex_task.editable == ("two_fer.py",) and ex_task.tests == ("two_fer_test.py",)
    assert "Say 'One for X" in ex_task.goal and "two_fer.py" in ex_task.goal
    for task in (bug, ex_task):
        folder = aider_bench.prepare(task, tmp_path / "arm" / task.name)
        names = {p.name for p in folder.rglob("*")}
        assert not names & {"GOAL.md", "hidden", ".meta", "example.py", "test_more.py"}


def test_grading_uses_the_hidden_tests_and_fails_a_changed_test(tmp_path):
    repo = bug_task(tmp_path, 52)
    task = aider_bench.read_task(repo.root)
    folder = aider_bench.prepare(task, tmp_path / "arm")
    assert aider_bench.grade(task, folder)[0] is False  # the bug is still there
    fixed = (folder / repo.source).read_text().replace(repo.wrong, repo.right)
    (folder / repo.source).write_text(fixed)
    solved, why, changed = aider_bench.grade(task, folder)
    assert solved and changed == [], why
    # a fix that passes the visible test only fails the hidden one
    (folder / repo.source).write_text(fixed.replace(repo.right, repo.right.replace("+ offset", "+ 0 * offset")))
    assert aider_bench.grade(task, folder)[0] is False
    (folder / repo.source).write_text(fixed)
    (folder / repo.test).write_text((folder / repo.test).read_text() + "\n# touched\n")
    solved, _, changed = aider_bench.grade(task, folder)
    assert not solved and changed == [repo.test]


def test_the_commands_and_prepare_only(tmp_path, capsys):
    repo = bug_task(tmp_path, 53)
    task = aider_bench.read_task(repo.root)
    folder = tmp_path / "f"
    aider = aider_bench.aider_command(task, folder, Path("/v"), "http://127.0.0.1:9/v1")
    for flag in ("--edit-format", "--test-cmd", "--auto-test", "--yes-always", "--no-git", "--message"):
        assert flag in aider
    assert aider[aider.index("--edit-format") + 1] == "whole" and aider[-len(task.editable):] == list(task.editable)
    agent = aider_bench.agent_command(task, folder, "m.gguf", 300, tmp_path / "runs")
    assert agent[2:6] == ["agent", "run", "--workspace", str(folder)] and agent[-1] == task.goal
    assert aider_bench.main(["--tasks", str(tmp_path / "tasks"), "--prepare-only", str(tmp_path / "out")]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [p["task"] for p in plan] == [repo.root.name]
    assert (tmp_path / "out" / repo.root.name / repo.source).is_file()


def test_an_unknown_arm_is_refused(tmp_path):
    bug_task(tmp_path, 54)
    with pytest.raises(SystemExit):
        aider_bench.main(["--tasks", str(tmp_path / "tasks"), "--arms", "agent,other", "--model", "m"])


def test_the_table_counts_solved_and_the_median_of_solved_times(tmp_path):
    tasks = [aider_bench.read_task(bug_task(tmp_path, seed).root) for seed in (55, 56)]
    outcomes = [aider_bench.Outcome(tasks[0].name, "agent", True, 10.0), aider_bench.Outcome(tasks[1].name, "agent", True, 30.0),
                aider_bench.Outcome(tasks[0].name, "aider", False, 5.0), aider_bench.Outcome(tasks[1].name, "aider", True, 8.0)]
    text = aider_bench.table(tasks, outcomes, ["agent", "aider"])
    assert f"| {tasks[0].name} | bug_report | yes | 10.0 | no | 5.0 |" in text
    assert text.splitlines()[-1] == "| **total** | | 2/2 | median solved 20.0 | 1/2 | median solved 8.0 |"
