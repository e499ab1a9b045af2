"""The fix-the-failing-test family's own grader, independent of ``metrics.py``.

``metrics.py`` grades a workspace run through ``workspace_grading.py`` (the final files as they are,
hidden tests laid over them). This grader starts from the pack instead, so a bug in either shows up
as a disagreement in the eval report rather than a wrong success rate:

1. the run must have completed;
2. every protected file of the final workspace -- the tests, and conftest.py / pytest's configuration /
   start-up files unless the task allows them to change -- must equal the pack's template byte for
   byte (and none may be added or removed) -> else ``tests_modified``;
3. a fresh copy of the *template* gets the final workspace's unprotected files laid over it -- so the
   tests that run are the pack's own whatever the run did to them -- then the pack's hidden tests, and
   the official command runs in a sandbox for that copy -> ``official_tests_fail`` unless it exits 0;
4. ``unchanged`` when the final source equals the template (nothing was fixed; informational, the
   official tests fail too in this family).

Failure families: ``stopped:<stop_reason>``, ``no_workspace``, ``tests_modified``, ``unchanged``,
``official_tests_fail``, ``official_tests_timeout``, ``sandbox_unavailable``.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

from agent.contracts.result import RunResult
from agent.coding.tools.shell import TEST_ENV
from agent.coding.workspace import is_test_machinery

_SKIP = ("__pycache__", ".pytest_cache", ".git")


def _files(root: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of the regular files below ``root`` (links: their target; caches skipped)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if any(part in _SKIP for part in rel.split("/")) or rel.endswith(".pyc"):
            continue
        if path.is_symlink():
            out[rel] = "link"
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _protected(rel: str, protected: list[str], allow_test_config: bool = False) -> bool:
    """The task's tests, and (unless the task is about them) what decides how the tests run: such a file
    is taken from the template, never from the run, and any change to it is ``tests_modified``."""
    return (any(rel == p or rel.startswith(p.rstrip("/") + "/") for p in protected)
            or (not allow_test_config and is_test_machinery(rel)))


def grade_run(pack: Any, workspace_root: Path | None, result: RunResult) -> list[str] | None:
    """Failure families of one run (empty: a pass); None for a pack of another family."""
    expected = pack.load_expected()
    if expected.get("family") != "fixtest" or pack.task.workspace is None:
        return None
    if result.status != "completed":
        return [f"stopped:{result.stop_reason}"]
    if workspace_root is None or not Path(workspace_root).is_dir():
        return ["no_workspace"]
    spec = pack.task.workspace
    template = Path(pack.root) / (spec.template or "workspace")
    final, original = _files(Path(workspace_root)), _files(template)
    failures = []
    allow = spec.allow_test_config
    mine = {rel: h for rel, h in final.items() if _protected(rel, spec.protected, allow)}
    theirs = {rel: h for rel, h in original.items() if _protected(rel, spec.protected, allow)}
    if mine != theirs:
        failures.append("tests_modified")
    if {r: h for r, h in final.items() if r not in mine} == {r: h for r, h in original.items() if r not in theirs}:
        failures.append("unchanged")
    check = next((c for c in expected.get("checks", []) if c.get("type") == "workspace_tests"), {})
    command = check.get("command") or spec.test_command
    grading = Path(tempfile.mkdtemp(prefix="react-agent-fixtest-")).resolve()
    try:
        copy = grading / "repo"
        shutil.copytree(template, copy, symlinks=True)
        for rel, digest in final.items():
            if rel in mine or digest == "link":
                continue
            target = copy / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(workspace_root) / rel, target, follow_symlinks=False)
        hidden = Path(pack.root) / str(check.get("hidden") or "data/hidden")
        if hidden.is_dir():
            shutil.copytree(hidden, copy, dirs_exist_ok=True, symlinks=True)
        from agent.sandbox import SandboxPolicy, SandboxUnavailable, open_sandbox

        try:
            sandbox = open_sandbox(SandboxPolicy(workspace=copy.resolve()))
        except SandboxUnavailable:
            return failures + ["sandbox_unavailable"]
        run = sandbox.run(["bash", "-c", command], timeout_s=float(check.get("timeout_seconds") or 120),
                          env=dict(TEST_ENV))
        if run.timed_out:
            failures.append("official_tests_timeout")
        elif run.exit_code != 0:
            failures.append("official_tests_fail")
    finally:
        shutil.rmtree(grading, ignore_errors=True)
    return failures
