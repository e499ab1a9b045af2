"""The HumanEval family's own grader, independent of ``metrics.py``: the benchmark's hidden ``check``
run on the final ``solution.py`` alone, in a fresh folder and a sandbox of its own.

Failure families: ``stopped:<stop_reason>``, ``no_solution``, ``unchanged`` (still the stub),
``hidden_tests_fail``, ``hidden_tests_timeout``, ``sandbox_unavailable``.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from agent.contracts.result import RunResult
from agent.families.humaneval.generator import STUB_BODY
from agent.families.humaneval.problems import all_problems, hidden_check

TIMEOUT_SECONDS = 60.0


def check_solution(source: str, task_id: str, timeout_s: float = TIMEOUT_SECONDS) -> list[str]:
    """Failure families of one solution's source against the hidden tests (empty: it passes)."""
    problem = next(p for p in all_problems() if p.task_id == task_id)
    from agent.sandbox import SandboxPolicy, SandboxUnavailable, interpreter, open_sandbox

    folder = Path(tempfile.mkdtemp(prefix="react-agent-humaneval-")).resolve()
    try:
        (folder / "solution.py").write_text(source, encoding="utf-8")
        (folder / "hidden_check.py").write_text(hidden_check(problem), encoding="utf-8")
        try:
            sandbox = open_sandbox(SandboxPolicy(workspace=folder, read_only=(), cpu_seconds=int(timeout_s)))
        except SandboxUnavailable:
            return ["sandbox_unavailable"]
        run = sandbox.run([interpreter(), "-E", "-s", "hidden_check.py"], timeout_s=timeout_s, stdin=b"",
                          env={"PYTHONDONTWRITEBYTECODE": "1"})
        if run.timed_out:
            return ["hidden_tests_timeout"]
        return [] if run.exit_code == 0 else ["hidden_tests_fail"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def grade_run(pack: Any, workspace_root: Path | None, result: RunResult) -> list[str] | None:
    expected = pack.load_expected()
    if expected.get("family") != "humaneval":
        return None
    if result.status != "completed":
        return [f"stopped:{result.stop_reason}"]
    solution = Path(workspace_root or "") / "solution.py"
    if workspace_root is None or not solution.is_file() or solution.is_symlink():
        return ["no_solution"]
    source = solution.read_text(encoding="utf-8", errors="replace")
    failures = check_solution(source, expected["task_id"])
    if source.rstrip().endswith(STUB_BODY.strip()):
        failures.append("unchanged")
    return failures
