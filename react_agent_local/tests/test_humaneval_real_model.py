"""The HumanEval family with the real 1.5B (greedy): a few problems through ``react-agent eval``.

What must hold whatever the model writes: every run ends in a terminal state; a Final is accepted
only after a passing example run on the files as they are, after the last change; the hidden tests
never reach the workspace or any prompt; and the accepted runs that the hidden tests fail are counted
(accepted-but-wrong), not hidden. The first problem of the seed-0 subset (``count_distinct_characters``)
the 1.5B solves greedily; a wrong answer there fails CI.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from server_support import PACKAGE_ROOT, require_e2e_model

RUN_SECONDS = 900
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * RUN_SECONDS + 600)]


def test_the_real_model_implements_humaneval_functions_behind_the_gate(tmp_path):
    out = tmp_path / "eval"
    proc = subprocess.run([sys.executable, "-m", "agent", "eval", "--packs", "generated:humaneval:2", "--seed", "0",
                           "--model", str(require_e2e_model()), "--temperature", "0", "--max-seconds", str(RUN_SECONDS),
                           "--no-progress", "--out", str(out)],
                          cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=2 * RUN_SECONDS + 300)
    assert (out / "runs.jsonl").is_file(), proc.stderr[-3000:]
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines() if line.strip()]
    assert [r["pack"] for r in runs] == ["humaneval-016", "humaneval-019"]
    for run in runs:
        assert run["status"] in ("completed", "stopped", "failed"), run
        events = [json.loads(line) for line in
                  (out / "artifacts" / run["pack"] / "run-0" / "events.jsonl").read_text().splitlines()]
        observations = [e["observation"] for e in events if e["type"] == "tool.observation"]
        accepted = [e for e in events if e["type"] == "run.finished" and e["status"] == "completed"]
        if accepted:  # the gate: the latest test run passed, after the latest change
            tests = [i for i, o in enumerate(observations) if o["tool"] == "bash" and o["ok"]
                     and o["result"]["command"] == "python -m doctest tests/examples.txt"]
            changes = [i for i, o in enumerate(observations) if o["ok"] and o["tool"] == "replace_function"]
            assert tests and changes and tests[-1] > changes[-1], run["pack"]
            assert observations[tests[-1]]["result"]["exit_code"] == 0
        text = (out / "artifacts" / run["pack"] / "run-0" / "events.jsonl").read_text()
        assert "def check(" not in text and "hidden_check" not in text
        workspace = out / "artifacts" / run["pack"] / "run-0" / "workspace"
        assert not any(p.name == "hidden_check.py" for p in workspace.rglob("*"))
    first = runs[0]
    assert first["task_success"] and first["independent_success"], json.dumps(first)[:2000]
    report = json.loads((out / "report.json").read_text())
    assert "accepted_but_wrong" in json.dumps(report)
