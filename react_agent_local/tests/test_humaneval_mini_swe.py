"""bench/humaneval_mini_swe.py without a model and without mini-swe-agent's own environment: the
workspace and goal it hands the agent (the family's pack), the report (resume, a line cut short),
the closing lines with the single-shot script's Wilson interval, the grading of a workspace, and
what the driver is told (budget, sampler, loopback server, default config)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agent.contracts.budgets import Budgets
from agent.families.humaneval.generator import STUB_BODY, pack_files
from agent.families.humaneval.problems import subset

from bench_support import load_bench as _load


mini = _load("humaneval_mini_swe")
single_shot = _load("humaneval_single_shot")


def _row(task_id: str, passed: bool, failures=(), exit_status="Submitted", seconds=10.0) -> dict:
    return {"task_id": task_id, "passed": passed, "failures": list(failures), "seconds": seconds,
            "exit_status": exit_status}


def test_the_wilson_interval_is_the_single_shot_scripts():
    assert mini.wilson is single_shot.wilson
    low, high = mini.wilson(5, 10)
    assert low == pytest.approx(0.2366, abs=1e-3) and high == pytest.approx(0.7634, abs=1e-3)
    assert all(v != v for v in mini.wilson(0, 0))  # NaN: no problems


def test_the_workspace_and_goal_are_the_packs(tmp_path):
    problem = subset(1, 0)[0]
    workspace, goal = mini.prepare_workspace(problem, tmp_path)
    files = pack_files(f"humaneval-{problem.number:03d}", problem)
    assert goal == json.loads(files["task.json"])["goal"] and f"`{problem.entry_point}`" in goal
    found = {p.relative_to(workspace).as_posix() for p in workspace.rglob("*") if p.is_file()}
    assert found == {"solution.py", "tests/examples.txt"}
    assert (workspace / "solution.py").read_text() == files["workspace/solution.py"]
    assert (workspace / "tests/examples.txt").read_text() == files["workspace/tests/examples.txt"]
    assert "def check(" not in "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())


def test_a_workspace_is_graded_by_the_familys_grader(tmp_path):
    problem = subset(1, 0)[0]
    workspace, _ = mini.prepare_workspace(problem, tmp_path)
    assert mini.grade_workspace(workspace, problem.task_id) == ["hidden_tests_fail", "unchanged"]
    (workspace / "solution.py").write_text(problem.reference)
    assert mini.grade_workspace(workspace, problem.task_id) == []
    (workspace / "solution.py").unlink()
    assert mini.grade_workspace(workspace, problem.task_id) == ["no_solution"]
    assert STUB_BODY.strip() in pack_files("x", problem)["workspace/solution.py"]


def test_the_report_resumes_and_skips_a_last_line_cut_short(tmp_path, capsys):
    out = tmp_path / "report.jsonl"
    assert mini.load_report(out) == {} and mini.load_report(None) == {}
    mini.append_row(out, _row("HumanEval/1", True))
    mini.append_row(out, _row("HumanEval/2", False, ["hidden_tests_fail"]))
    with out.open("a") as fh:
        fh.write('{"task_id": "HumanEval/3", "pas')  # the run stopped mid-write
    done = mini.load_report(out)
    assert list(done) == ["HumanEval/1", "HumanEval/2"] and done["HumanEval/2"]["failures"] == ["hidden_tests_fail"]
    assert "report.jsonl:3: not a whole JSON line" in capsys.readouterr().err
    mini.append_row(out, _row("HumanEval/3", True))  # starts on a line of its own
    assert list(mini.load_report(out)) == ["HumanEval/1", "HumanEval/2", "HumanEval/3"]
    assert out.read_text().splitlines()[3] == json.dumps(_row("HumanEval/3", True))


def test_the_closing_lines_count_failure_families_and_exit_statuses():
    rows = [_row("HumanEval/1", True, seconds=10), _row("HumanEval/2", True, exit_status="LimitsExceeded", seconds=30),
            _row("HumanEval/3", False, ["hidden_tests_fail"], seconds=20),
            _row("HumanEval/4", False, ["hidden_tests_fail", "unchanged"], "RepeatedFormatError", seconds=40)]
    head, families, exits = mini.summary(rows, model="m.gguf", seed=0, temperature=0.0)
    low, high = single_shot.wilson(2, 4)
    assert head.startswith(f"mini-swe-agent {mini.MINI_VERSION}, m.gguf, seed 0, 4 problems, T=0.0: pass@1 2/4 = 50.0% ")
    assert f"(95 % Wilson {low:.1%}-{high:.1%})" in head and "median 25.0 s per problem" in head
    assert families == "failure families: {'hidden_tests_fail': 2, 'unchanged': 1, 'exit:RepeatedFormatError': 1}"
    assert exits == ("exit statuses: {'Submitted': 2, 'LimitsExceeded': 1, 'RepeatedFormatError': 1} "
                     "(passed without submitting: 1)")


def test_the_driver_gets_the_agents_budget_the_sampler_and_the_loopback_server(tmp_path):
    assert (mini.STEP_LIMIT, mini.TIME_LIMIT_S) == (Budgets().max_steps, int(Budgets().max_seconds)) == (12, 300)
    greedy = mini.model_kwargs("http://127.0.0.1:1234/v1", temperature=0.0, seed=3, max_tokens=1024)
    assert greedy["api_base"].startswith("http://127.0.0.1:") and greedy["temperature"] == 0.0
    assert greedy["max_tokens"] == 1024 and "seed" not in greedy
    assert greedy["extra_body"] == {"top_k": 20, "min_p": 0.0, "repeat_penalty": 1.0} and greedy["top_p"] == 0.8
    sampled = mini.model_kwargs("http://127.0.0.1:1234/v1", temperature=0.7, seed=3, max_tokens=0)
    assert sampled["seed"] == 3 and "max_tokens" not in sampled
    overrides = mini.driver_overrides(alias="m.gguf", workspace=tmp_path, kwargs=greedy, step_limit=12,
                                      time_limit_s=300, trajectory=None)
    assert overrides["agent"] == {"agent_class": "default", "step_limit": 12, "wall_time_limit_seconds": 300}
    assert overrides["model"]["model_name"] == "openai/m.gguf" and overrides["model"]["model_class"] == "litellm_textbased"
    assert overrides["model"]["cost_tracking"] == "ignore_errors"
    assert overrides["environment"] == {"environment_class": "local", "cwd": str(tmp_path)}
    compile(mini.DRIVER_SOURCE, "driver.py", "exec")  # the driver parses (it runs only in mini-swe-agent's venv)
    assert "default.yaml" in mini.DRIVER_SOURCE


def test_failure_families_name_the_exit_status_only_of_failed_problems():
    assert mini.failure_families(_row("a", True, exit_status="LimitsExceeded")) == []
    assert mini.failure_families(_row("a", False, ["no_solution"], "HardTimeout")) == ["no_solution", "exit:HardTimeout"]
    assert mini.failure_families(_row("a", False, ["hidden_tests_fail"])) == ["hidden_tests_fail"]


def test_the_separate_environment_is_never_the_projects(tmp_path):
    with pytest.raises(SystemExit, match="this project's environment"):
        mini.check_venv_path(Path(sys.prefix))
    with pytest.raises(SystemExit):
        mini.check_venv_path(Path(sys.prefix) / "mini")
    assert mini.check_venv_path(tmp_path / "venv") == (tmp_path / "venv").resolve()
    assert mini.installed_version(tmp_path / "venv" / "bin" / "python") is None  # not created: nothing installed


def test_leftover_processes_of_a_workspace_are_ended(tmp_path):
    import subprocess
    import time

    child = subprocess.Popen(["sleep", "60"], cwd=tmp_path, start_new_session=True)
    try:
        time.sleep(0.1)
        assert child.pid in mini.kill_leftovers(tmp_path)
        assert child.wait(timeout=10) == -9
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
