"""The grader of a workspace task: the pack's official test command, after the run, on the final files.

Ground truth for metrics only (``metrics.py``'s ``workspace_tests`` check in ``data/expected.json``)::

    {"type": "workspace_tests", "name": "tests_pass", "command": "python -m pytest",
     "hidden": "data/hidden", "timeout_seconds": 120}

The final files are copied (regular files only: a link the run left fails the grade, it is never followed)
into a fresh grading folder, the pack's ``hidden`` folder -- laid out like the workspace, never
copied into it and never seen by the model or a tool -- is laid over the copy, and ``command`` runs
in a sandbox of its own for that folder (no network). The run passes when the command exits 0 and
the protected files equal their baseline. The grading folder is removed afterwards.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.coding.tools.shell import BASH, TEST_ENV, head_tail
from agent.coding.workspace import Workspace, WorkspaceUnavailable, copy_template, sandbox_for

DEFAULT_TIMEOUT = 120.0


@dataclass
class WorkspaceGrade:
    passed: bool
    failures: list[str] = field(default_factory=list)
    exit_code: int | None = None
    output: str = ""  # the command's output, head and tail


def _overlay(source: Path, dest: Path) -> None:
    """Copy ``source``'s files over ``dest`` (folders merged); links in ``source`` are refused."""
    for path in sorted(source.rglob("*")):
        if path.is_symlink():
            raise WorkspaceUnavailable("pack_invalid", "the pack's hidden tests hold a link")
        target = dest / path.relative_to(source)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif path.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def grade_workspace(check: dict[str, Any], workspace: Workspace) -> WorkspaceGrade:
    """Run the check's command on a copy of ``workspace``'s final files (hidden tests laid over)."""
    failures = []
    if workspace.protected_changes():
        failures.append("tests_modified")
    command = str(check.get("command") or workspace.test_command or "")
    if not command:
        return WorkspaceGrade(False, failures + ["no_command"])
    grading = Path(tempfile.mkdtemp(prefix="react-agent-grade-"))
    try:
        root = grading / "workspace"
        try:
            copy_template(workspace.root, root)
        except WorkspaceUnavailable:
            return WorkspaceGrade(False, failures + ["workspace_not_copyable"])
        hidden = check.get("hidden")
        if hidden and workspace.pack_root is not None:
            source = (workspace.pack_root / str(hidden))
            if source.is_dir() and not source.is_symlink():
                _overlay(source, root)
        try:
            sandbox = sandbox_for(workspace, root=root)
        except WorkspaceUnavailable:
            return WorkspaceGrade(False, failures + ["sandbox_unavailable"])
        result = sandbox.run([BASH, "--noprofile", "--norc", "-c", command], cwd=".",
                             timeout_s=float(check.get("timeout_seconds") or DEFAULT_TIMEOUT), stdin=b"",
                             env=dict(TEST_ENV), max_output_bytes=1 << 20)
        out = result.stdout.decode("utf-8", "replace") if isinstance(result.stdout, bytes) else str(result.stdout)
        output, _ = head_tail(out, int(result.stdout_total))
        if result.timed_out:
            failures.append("tests_timeout")
        elif result.exit_code != 0:
            failures.append("tests_fail")
        return WorkspaceGrade(not failures, failures, result.exit_code, output)
    finally:
        shutil.rmtree(grading, ignore_errors=True)
