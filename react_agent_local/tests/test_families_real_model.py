"""Two of the generated families beyond the release rule with the low-resource 0.5B (GGUF,
llama.cpp, greedy), through ``react-agent eval`` exactly as a user runs it: two packs each of
``record_rules`` (a record under another rule, bound answer slots) and ``interest`` (calculator
word problems with an expectation). Nothing is scripted.

What must hold whatever the model manages: every run ends on its own terms (no runtime error, no
pack the runtime cannot read), the runtime's grader and the family's independent grader agree on
every run, and no Final the runtime accepted is wrong (accepted but wrong is 0): a run the model
cannot finish ends stopped, never with a wrong answer handed over as checked.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from server_support import MODEL_DIR, PACKAGE_ROOT

SMALL_MODEL = MODEL_DIR / "qwen2.5-coder-0.5b-gguf" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
# Correctness, not speed, is under test: on 2 shared cores one model call can take a minute.
RUN_SECONDS = 1200
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * RUN_SECONDS + 600)]


@pytest.mark.parametrize("family", ["record_rules", "interest"])
def test_two_packs_of_a_family_with_the_0_5b(tmp_path, family):
    assert SMALL_MODEL.is_file(), f"{SMALL_MODEL.name} is missing: scripts/setup.sh --model qwen2.5-coder-0.5b-gguf"
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "agent", "eval", "--model", str(SMALL_MODEL),
                           "--packs", f"generated:{family}:2", "--seed", "0", "--max-seconds", str(RUN_SECONDS),
                           "--out", str(out), "--no-progress"],
                          cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=2 * RUN_SECONDS + 300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    runs = report["runs"]
    summary = json.dumps([{k: r[k] for k in ("pack", "case", "stop_reason", "task_success", "independent_failures",
                                             "answer")} for r in runs], ensure_ascii=False, indent=1)
    assert len(runs) == 2 and not any(r["stop_reason"] == "runtime_error" for r in runs), summary
    assert all(r["independent_success"] is not None for r in runs), summary  # the family's grader graded each
    assert report["accepted_but_wrong"]["runs"] == 0, summary
    assert report["disagreements"] == [], summary
    assert all(r["metrics"]["termination_correctness"] for r in runs), summary
    assert "**Accepted but wrong**" in (out / "report.md").read_text(encoding="utf-8")
