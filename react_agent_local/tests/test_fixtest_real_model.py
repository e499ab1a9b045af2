"""The fix-the-failing-test family with the real 1.5B (greedy): one generated pack through ``react-agent eval``.

What must hold whatever the model writes: the run ends in a terminal state; a Final is accepted only
after a passing run of the pack's test command on the files as they are, after the last change; the
tests stay as they were; the hidden tests never reach the workspace or the trace; both graders grade
the run and agree. The first pack of seed 0 (a wrong condition in a small function) the 1.5B fixes
greedily; a wrong answer there fails CI.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from server_support import PACKAGE_ROOT, require_e2e_model

RUN_SECONDS = 600
pytestmark = [pytest.mark.slow, pytest.mark.timeout(RUN_SECONDS + 600)]


def test_the_real_model_fixes_a_generated_pack_behind_the_gate(tmp_path):
    out = tmp_path / "eval"
    proc = subprocess.run([sys.executable, "-m", "agent", "eval", "--packs", "generated:fixtest:1", "--seed", "0",
                           "--model", str(require_e2e_model()), "--temperature", "0", "--no-progress", "--out", str(out)],
                          cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=RUN_SECONDS + 300)
    assert (out / "runs.jsonl").is_file(), proc.stderr[-3000:]
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines() if line.strip()]
    assert [r["pack"] for r in runs] == ["fixtest-0-000"]
    run = runs[0]
    assert run["status"] in ("completed", "stopped", "failed"), run
    events = [json.loads(line) for line in (out / "artifacts" / run["pack"] / "run-0" / "events.jsonl").read_text().splitlines()]
    started = next(e for e in events if e["type"] == "run.started")
    assert started["budgets"]["max_tool_calls"] == 16  # the pack's own budgets (no flag set them)
    observations = [e["observation"] for e in events if e["type"] == "tool.observation"]
    pack = out / "packs" / run["pack"]
    command = json.loads((pack / "task.json").read_text())["workspace"]["test_command"]
    if run["status"] == "completed":  # the gate: the latest test run passed, after the latest change
        tests = [i for i, o in enumerate(observations) if o["tool"] == "bash" and o["ok"] and o["result"]["command"] == command]
        changes = [i for i, o in enumerate(observations) if o["ok"] and o["tool"] == "replace_function"]
        assert tests and changes and tests[-1] > changes[-1]
        assert observations[tests[-1]]["result"]["exit_code"] == 0
    hidden = [p.read_text() for p in (pack / "data" / "hidden").rglob("*.py")]
    text = (out / "artifacts" / run["pack"] / "run-0" / "events.jsonl").read_text()
    assert hidden and not any(h.split("def ", 1)[1][:40] in text for h in hidden)  # no hidden test reached the trace
    workspace = out / "artifacts" / run["pack"] / "run-0" / "workspace"
    assert not any("hidden" in p.name for p in workspace.rglob("*"))
    for test in (pack / "workspace" / "tests").glob("test_*.py"):
        assert (workspace / "tests" / test.name).read_text() == test.read_text()  # the tests as they were
    assert run["independent_success"] == run["task_success"], json.dumps(run)[:2000]
    assert run["task_success"], json.dumps(run)[:2000]
