"""End to end with a real local model: the terminal entry point drives the real runtime with
Qwen2.5-Coder-0.5B (GGUF, llama.cpp) and must reach a correct terminal state with a valid trace and
computed metrics. Nothing is scripted here. Skipped only when the model file is absent
(``scripts/test.sh`` downloads it first, so CI always runs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.contracts import TERMINAL_STATUS

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
MODEL = Path(os.environ.get("REACT_AGENT_E2E_MODEL", Path.home() / ".cache/react-agent-local/models/"
                            "qwen2.5-coder-0.5b-gguf/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not MODEL.is_file(), reason="the 0.5B GGUF is not downloaded (scripts/setup.sh --model)")]


def run_cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", "run", "--model", str(MODEL), *args],
                          cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("pack", ["default", "release_hold"])
def test_real_model_run_reaches_a_correct_terminal_state(pack, tmp_path):
    proc = run_cli("--pack", pack, "--json", "--runs-dir", str(tmp_path), "--max-seconds", "240")
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert TERMINAL_STATUS[result["stop_reason"]] == result["status"]
    assert result["status"] in ("completed", "stopped", "failed")
    assert result["stop_reason"] not in ("runtime_error", "model_unavailable"), result["error"]
    metrics = result["metrics"]
    assert metrics["termination_correctness"] is True
    assert metrics["model_calls"] >= metrics["steps"] >= 1 and metrics["input_tokens"] > 0
    assert metrics["cost_units"] == round((metrics["input_tokens"] + 2 * metrics["output_tokens"]) / 1000, 4)
    observations = result["observations"]
    assert [o["id"] for o in observations] == [f"obs-{o['tool']}-{i}" for i, o in enumerate(observations, 1)]
    if result["status"] == "completed":
        assert set(result["final"]["evidence_ids"]) <= {o["id"] for o in observations}
    assert str(MODEL) not in proc.stdout and str(Path.home()) + "/" not in proc.stdout


def test_real_model_trace_is_readable_and_private(tmp_path):
    proc = run_cli("--runs-dir", str(tmp_path), "--max-seconds", "240")
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    out = proc.stdout
    assert "model loaded: qwen2.5-coder-0.5b-instruct-q4_k_m.gguf (llama_cpp" in out
    assert "step  1 decision: action knowledge_search" in out
    assert "run finished:" in out and "Task Success" in out
    assert str(MODEL.parent) not in out
