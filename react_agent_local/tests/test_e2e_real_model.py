"""End to end with a real local model: the terminal entry point drives the real runtime with
Qwen2.5-Coder-1.5B (GGUF, llama.cpp, greedy) and must get the task right. Nothing is scripted here.

The answer is checked twice: by the runtime's own metrics (Task Success and every check), and
independently of them, against the task recomputed from the run's own observations
(``server_support.assert_answer_is_right``). A missing model is a failure, not a skip:
``scripts/test.sh`` downloads it and exports ``REACT_AGENT_E2E_MODEL``. A wrong answer fails CI.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from server_support import MODEL_DIR, PACKAGE_ROOT, assert_answer_is_right, require_e2e_model

# Correctness, not speed, is under test: a 2-core machine shared with other jobs can take minutes
# per step, so the run's wall-clock budget is generous and pytest's own timeout more so.
RUN_SECONDS = 1800
SMALL_MODEL = MODEL_DIR / "qwen2.5-coder-0.5b-gguf" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(RUN_SECONDS + 300)]


def run_cli(*args: str, timeout: float = RUN_SECONDS + 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", "run", "--model", str(require_e2e_model()), *args],
                          cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("pack", ["default", "release_hold"])
def test_real_model_gets_the_task_right(pack, tmp_path):
    args = ["--json", "--runs-dir", str(tmp_path), "--temperature", "0", "--max-seconds", str(RUN_SECONDS)]
    proc = run_cli(*args, *(["--pack", pack] if pack != "default" else []))
    assert proc.stdout.strip(), proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    summary = json.dumps({k: result[k] for k in ("status", "stop_reason", "final", "metrics", "error")}, indent=1)
    assert (proc.returncode, result["status"], result["stop_reason"]) == (0, "completed", "completed"), summary
    metrics = result["metrics"]
    assert metrics["task_success"] is True and metrics["checks"], summary
    assert all(metrics["checks"].values()), summary
    assert_answer_is_right(result["final"], result["observations"])
    # the bookkeeping of a real run
    assert metrics["model_calls"] >= metrics["steps"] >= 1 and metrics["input_tokens"] > 0
    assert metrics["cost_units"] == round((metrics["input_tokens"] + 2 * metrics["output_tokens"]) / 1000, 4)
    observations = result["observations"]
    assert [o["id"] for o in observations] == [f"obs-{o['tool']}-{i}" for i, o in enumerate(observations, 1)]
    assert str(Path.home()) + "/" not in proc.stdout


def test_real_model_trace_is_readable_and_private(tmp_path):
    """The readable trace of a run cut short by its step budget (two steps keep it quick)."""
    model = require_e2e_model()
    proc = run_cli("--runs-dir", str(tmp_path), "--max-steps", "2")
    out = proc.stdout
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert f"model loaded: {model.name} (llama_cpp, " in out
    assert re.search(r"step  1 observation obs-[a-z_]+-1 \((ok|FAILED)\): ", out), out[-3000:]
    assert "run finished: stopped/max_steps" in out and "Task Success            FAIL" in out
    assert str(model.parent) not in out and str(Path.home()) + "/" not in out


def test_eval_of_generated_packs_with_the_0_5b(tmp_path):
    """``react-agent eval`` on three generated packs (unseen record formats, rules and languages) with
    the low-resource 0.5B, greedy: every run ends on its own terms, the runtime's grader and the
    independent one agree on every run, and a Final the runtime accepted is right (the claim checks
    let no wrong answer through; a run the model cannot finish ends stopped, not wrong)."""
    model = SMALL_MODEL
    assert model.is_file(), f"{model.name} is missing: scripts/setup.sh --model qwen2.5-coder-0.5b-gguf"
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "agent", "eval", "--model", str(model), "--packs", "generated:3",
                           "--seed", "11", "--max-seconds", str(RUN_SECONDS // 3), "--out", str(out), "--no-progress"],
                          cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=RUN_SECONDS + 120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    runs = report["runs"]
    summary = json.dumps([{k: r[k] for k in ("pack", "case", "stop_reason", "task_success", "answer")} for r in runs],
                         ensure_ascii=False, indent=1)
    assert len(runs) == 3 and not any(r["stop_reason"] in ("runtime_error", "pack_invalid") for r in runs), summary
    assert report["disagreements"] == [], summary
    assert all(r["task_success"] == r["independent_success"] for r in runs), summary
    assert all(r["task_success"] for r in runs if r["stop_reason"] == "completed"), summary
    assert all(r["metrics"]["termination_correctness"] for r in runs), summary
