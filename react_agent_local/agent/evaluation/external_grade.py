"""The independent grade of a pack a user wrote: its ``truth.json``, read by a grader script outside
the project.

A pack written by hand belongs to no generated family, so no family's ``grading.py`` knows it. Such a
pack may carry ``truth.json`` (what a right Final states) and the operator names a grader with
``eval --grader SCRIPT``; the script is run as

    python SCRIPT RUN_JSON TRUTH_JSON

where ``RUN_JSON`` is the run as ``react-agent run --json`` prints it, and its first line of output is
``PASS`` or ``FAIL: reason; reason``. The script is the operator's own choice, run without a shell, with
a time limit, in the run's artifact folder; it never sees the runtime's metrics beyond what the run
prints. A run the grader fails that the runtime completed is *accepted but wrong*.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from agent.contracts.result import RunResult

TRUTH = "truth.json"
TIMEOUT_S = 60


def truth_of(pack_root: Path) -> dict[str, Any] | None:
    """The pack's ``truth.json`` as an object, or None when it has none (or it is no JSON object)."""
    path = Path(pack_root) / TRUTH
    try:
        truth = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return truth if isinstance(truth, dict) else None


def run_json(result: RunResult, run_id: str) -> dict[str, Any]:
    """The run as ``react-agent run --json`` prints it."""
    return {"status": result.status, "stop_reason": result.stop_reason,
            "final": result.final.model_dump() if result.final else None,
            "unverified": result.unverified.model_dump() if result.unverified else None,
            "metrics": result.metrics.model_dump() if result.metrics else None,
            "observations": [o.model_dump() for o in result.observations],
            "error": result.error.model_dump() if result.error else None, "run_id": run_id}


def external_grade(grader: Path, pack_root: Path, result: RunResult, run_dir: Path) -> list[str] | None:
    """The grader's failures for this run (``[]``: PASS), or None when the pack has no ``truth.json``."""
    truth = Path(pack_root) / TRUTH
    if truth_of(pack_root) is None:
        return None
    run_dir.mkdir(parents=True, exist_ok=True)
    record = run_dir / "run.json"
    record.write_text(json.dumps(run_json(result, run_dir.name), ensure_ascii=False), encoding="utf-8")
    try:
        done = subprocess.run([sys.executable, str(grader), str(record), str(truth)], capture_output=True,
                              text=True, timeout=TIMEOUT_S, cwd=run_dir, check=False)
    except subprocess.TimeoutExpired:
        return [f"grader: no verdict within {TIMEOUT_S} s"]
    except OSError as exc:
        return [f"grader: could not run ({type(exc).__name__})"]
    first = (done.stdout.strip().splitlines() or [""])[0].strip()
    if first == "PASS":
        return []
    if first.startswith("FAIL"):
        reasons = [r.strip() for r in first[4:].lstrip(":").split(";") if r.strip()]
        return reasons or ["grader: FAIL"]
    return [f"grader: unreadable verdict (exit {done.returncode})"]


def truth_family(pack_root: Path) -> str | None:
    """The family ``truth.json`` names (how a user groups their packs), or None."""
    truth = truth_of(pack_root)
    family = truth.get("family") if truth else None
    return str(family) if family else None
