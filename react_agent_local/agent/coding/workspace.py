"""The workspace of a run: the one folder the workspace tools may touch, and how a run gets it.

A run whose tools include a workspace tool (``tools.WORKSPACE_TOOLS``) works in either the folder
its operator named (``agent run --workspace DIR``) or a fresh copy of its pack's template
(``task.json`` ``workspace.template``) made inside the run's folder. Never a folder an HTTP request
names: ``WorkspaceOptions`` come from the code that starts the run.

``bind`` gives the run's ``ToolContext`` the workspace, a sandbox opened for it (``agent.sandbox``:
only the workspace writable, ``.git`` and the task's protected files read-only, no network unless
the operator allows it), the approval policy and the operator's approver. A sandbox that cannot
start is an operator fault: the run ends before any tool runs, with the sandbox's own message
naming the fix -- never a silent fallback to the host (``--unsandboxed`` is the operator's
explicit opt-out, on the CLI only).

The runtime reads the workspace itself only through ``tools/workspace_ops.py`` (descriptor-based,
no link followed): the digest of its files that a test run's evidence is compared with, and the
protected files' hashes against the baseline taken when the run began.

Exceptions::

    WorkspaceUnavailable   operator fault: no workspace, a bad template, no sandbox -> failed run
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

from agent.coding.approvals import APPROVAL_SECONDS, Approver
from agent.coding.tools import workspace_ops as ops
from agent.contracts.task import TaskSpec
from agent import sandbox as sandboxes  # open_sandbox read at call time: a test may replace it
from agent.sandbox import Sandbox, SandboxPolicy, SandboxUnavailable
from agent.shell_risk import ApprovalPolicy

#: read-only inside every sandbox, whatever the task protects
ALWAYS_READ_ONLY = (".git",)
#: what decides how the test command runs and what it reports, so a run never changes it unless its
#: task says the goal is about it: pytest's configuration and plugins (a conftest.py that marks every
#: report passed, a pytest.py that exits 0) and what every interpreter start-up imports
TEST_MACHINERY_NAMES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini",
                                  "pytest.py", "sitecustomize.py", "usercustomize.py"})
TEST_MACHINERY_FOLDERS = frozenset({"pytest", "_pytest"})
MAX_TEMPLATE_FILES = 2000
MAX_TEMPLATE_BYTES = 32 << 20


class WorkspaceUnavailable(Exception):
    """The run cannot have its workspace (operator fault); ``code`` is stable, ``message`` public."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Workspace:
    """One run's workspace folder and what the task says about it."""

    root: Path
    #: workspace-relative files or folders the task forbids changing (the tests)
    protected: tuple[str, ...] = ()
    #: the command whose passing run, after the last change, is the evidence a Final needs
    test_command: str | None = None
    #: protected file -> SHA-256 when the run began
    baseline: dict[str, str] = field(default_factory=dict)
    #: the pack folder whose template this workspace was copied from (None: the operator's folder)
    pack_root: Path | None = None
    #: the operator opted out of the sandbox for this run (the grader then may too)
    allow_unsandboxed: bool = False
    #: the task's goal is about the test set-up itself (``workspace.allow_test_config``): conftest.py and
    #: pytest's configuration may change like any other file
    allow_test_config: bool = False
    #: every entry named ``.git`` or ``.gitmodules`` below the root when the run began (a nested
    #: repository the user already had); anything else of that kind a command leaves is removed
    git_entries: frozenset[str] | None = None
    #: whether the root had a ``.git`` when the run began (where it had none, the sandbox mounts an
    #: empty read-only one, and whatever is left there afterwards is removed)
    had_root_git: bool | None = None

    def __post_init__(self) -> None:
        # Taken when the workspace is made, so what the user's folder already holds is never removed.
        if self.git_entries is None:
            object.__setattr__(self, "git_entries", git_entries(self.root) if self.root.is_dir() else frozenset())
        if self.had_root_git is None:
            object.__setattr__(self, "had_root_git", os.path.lexists(self.root / ".git"))

    def open_root(self) -> int:
        """A descriptor of the root folder (the caller closes it); the root itself is no link."""
        try:
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise WorkspaceUnavailable("workspace_missing", f"the workspace folder cannot be opened ({exc.strerror})") from None

    def hashes(self) -> dict[str, str]:
        fd = self.open_root()
        try:
            return ops.file_hashes(fd)
        finally:
            os.close(fd)

    def digest(self) -> str:
        """One hash of every file (caches left out): equal exactly when the files are."""
        return ops.digest(self.hashes())

    def code_digest(self, hashes: dict[str, str] | None = None) -> str:
        """One hash of the files as code: a Python file by its syntax tree (comments, blank lines and
        layout left out), any other file, or one that does not parse, by its bytes. Equal when the
        code is, however it is written (a failed fix written again with a comment added is the same code).
        ``hashes``: the files' hashes when the caller has them already (``digest`` of the same moment)."""
        hashes = dict(self.hashes() if hashes is None else hashes)
        for rel in hashes:
            if rel.endswith(".py"):
                tree = ops.syntax_hash(self.read_text(rel))
                if tree is not None:
                    hashes[rel] = tree
        return ops.digest(hashes)

    def read_text(self, path: str) -> str | None:
        """A text file of the workspace, or None when it is missing, binary, a link or too large."""
        fd = self.open_root()
        try:
            return ops.read_text(fd, ops.split_path(path))
        except ops.OpError:
            return None
        finally:
            os.close(fd)

    def is_protected(self, path: str) -> bool:
        parts = "/".join(ops.split_path(path, allow_root=True))
        return any(parts == p or parts.startswith(p + "/") for p in self.protected) or self.is_test_machinery(parts)

    def is_test_machinery(self, path: str) -> bool:
        """Whether ``path`` is part of how the tests run (see ``TEST_MACHINERY_NAMES``), unless the task
        allows changing it."""
        return not self.allow_test_config and is_test_machinery(path)

    def protected_hashes(self, hashes: dict[str, str] | None = None) -> dict[str, str]:
        hashes = self.hashes() if hashes is None else hashes
        return {rel: h for rel, h in hashes.items() if self.is_protected(rel)}

    def protected_changes(self) -> list[str]:
        """Protected files that differ from the baseline: changed, added or removed."""
        now = self.protected_hashes()
        return sorted(rel for rel in set(now) | set(self.baseline) if now.get(rel) != self.baseline.get(rel))

    def describe(self) -> dict[str, Any]:
        """What the trace may say about the workspace: no absolute path."""
        return {"files": len(self.hashes()), "protected": list(self.protected), "test_command": self.test_command,
                "from_template": self.pack_root is not None}


def is_test_machinery(path: str) -> bool:
    """A conftest.py or pytest configuration at any depth, a ``*.pth`` file, or a module or package that
    could stand in for pytest itself."""
    parts = [part for part in path.split("/") if part]
    if not parts:
        return False
    return (parts[-1] in TEST_MACHINERY_NAMES or parts[-1].endswith(".pth")
            or any(part in TEST_MACHINERY_FOLDERS for part in parts[:-1]) or parts[0] in TEST_MACHINERY_FOLDERS)


def git_entries(root: Path) -> frozenset[str]:
    """Workspace-relative paths of every ``.git`` and ``.gitmodules`` below the root (the root's own
    ``.git`` left out: the sandbox keeps it read-only). Links are not followed."""
    found: set[str] = set()
    for folder, dirs, names in os.walk(root, followlinks=False):
        rel = Path(folder).relative_to(root)
        for name in [*dirs, *names]:
            if name.casefold() in (".git", ".gitmodules") and not (rel == Path(".") and name == ".git"):
                found.add(str(rel / name) if rel != Path(".") else name)
        dirs[:] = [d for d in dirs if d.casefold() != ".git"]
    return frozenset(found)


def remove_planted_git(workspace: "Workspace") -> list[str]:
    """Remove every ``.git``/``.gitmodules`` below the root that was not there when the run began, and a
    root ``.git`` when the workspace had none (what the sandbox mounted over it). Returns what was
    removed: git run by the operator later in this folder would have read its config and hooks."""
    root = workspace.root
    removed = []
    for rel in sorted(git_entries(root) - (workspace.git_entries or frozenset())):
        _remove(root / rel)
        removed.append(rel)
    path = root / ".git"
    if not workspace.had_root_git and os.path.lexists(path):
        planted = path.is_symlink() or not path.is_dir() or any(path.iterdir())
        _remove(path)
        if planted:  # an empty folder is only the sandbox's mount point
            removed.append(".git")
    return removed


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)  # the fd-based rmtree: a link inside is unlinked, not followed
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


@dataclass
class WorkspaceOptions:
    """The operator's choices for a run's workspace tools (``agent run`` flags, the runner's start-up)."""

    #: the operator's folder; None: a fresh copy of the pack's template
    directory: Path | None = None
    #: where that copy is made (as ``workspace``, ``workspace-2``, ...); None: the run's folder
    parent: Path | None = None
    #: ``shell_risk.ApprovalPolicy``; None: ask on risk
    approval: ApprovalPolicy | None = None
    approver: Approver | None = None
    approval_seconds: float = APPROVAL_SECONDS
    allow_unsandboxed: bool = False
    network: bool = False


def _normalized(paths: Iterable[str]) -> tuple[str, ...]:
    try:
        return tuple(dict.fromkeys("/".join(ops.split_path(p)) for p in paths))
    except ops.OpError as exc:
        raise WorkspaceUnavailable("pack_invalid", f"workspace.protected: {exc.message}") from None


def copy_template(template: Path, dest: Path) -> int:
    """Copy a template folder into the new folder ``dest``: folders and regular files only (a link in
    a template is refused, never copied or followed). Returns the number of files."""
    if template.is_symlink() or not template.is_dir():
        raise WorkspaceUnavailable("pack_invalid", "the pack's workspace template is not a folder")
    files, size = 0, 0
    dest.mkdir(parents=True, exist_ok=False)
    for folder, dirs, names in os.walk(template, followlinks=False):
        rel = Path(folder).relative_to(template)
        for name in sorted(dirs):
            source = Path(folder) / name
            if source.is_symlink():
                raise WorkspaceUnavailable("pack_invalid", f"the workspace template holds a link: {rel / name}")
            if name in ("__pycache__", ".pytest_cache"):
                dirs.remove(name)
                continue
            (dest / rel / name).mkdir()
        for name in sorted(names):
            source = Path(folder) / name
            st = os.lstat(source)
            if not stat.S_ISREG(st.st_mode):
                raise WorkspaceUnavailable("pack_invalid", f"the workspace template holds a non-file: {rel / name}")
            if name.endswith((".pyc", ".pyo")):
                continue
            files += 1
            size += st.st_size
            if files > MAX_TEMPLATE_FILES or size > MAX_TEMPLATE_BYTES:
                raise WorkspaceUnavailable("pack_invalid", "the workspace template is too large")
            shutil.copyfile(source, dest / rel / name, follow_symlinks=False)
            os.chmod(dest / rel / name, stat.S_IMODE(st.st_mode) | stat.S_IRUSR | stat.S_IWUSR)
    return files


def fresh_folder(parent: Path, name: str = "workspace") -> Path:
    """``parent/name``, or ``name-2``, ``name-3``... when taken: a run never reuses a folder."""
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        candidate = parent / (name if n == 1 else f"{name}-{n}")
        if not candidate.exists() and not candidate.is_symlink():
            return candidate
    raise WorkspaceUnavailable("workspace_missing", "no free workspace folder name in the run's folder")


def prepare(task: TaskSpec, pack_root: Path, options: WorkspaceOptions, run_dir: Path) -> Workspace:
    """The run's workspace: the operator's folder, else a fresh copy of the pack's template."""
    spec = task.workspace
    protected = _normalized(spec.protected if spec else ())
    test_command = spec.test_command if spec else None
    if options.directory is not None:
        root = Path(options.directory).expanduser()
        if root.is_symlink() or not root.is_dir():
            raise WorkspaceUnavailable("workspace_missing", "--workspace must name an existing folder (not a link)")
        workspace = Workspace(root=root.resolve(), protected=protected, test_command=test_command,
                              allow_unsandboxed=options.allow_unsandboxed)
    elif spec is not None and spec.template:
        root = fresh_folder(Path(options.parent or run_dir))
        copy_template(Path(pack_root) / spec.template, root)
        workspace = Workspace(root=root.resolve(), protected=protected, test_command=test_command,
                              pack_root=Path(pack_root), allow_unsandboxed=options.allow_unsandboxed)
    else:
        raise WorkspaceUnavailable("workspace_missing", "this pack's tools work in a workspace: start the run with "
                                                        "--workspace DIR, or use a pack that has a workspace template")
    allow = bool(spec.allow_test_config) if spec else False
    workspace = replace(workspace, allow_test_config=allow)
    return replace(workspace, baseline=workspace.protected_hashes())


def sandbox_for(workspace: Workspace, *, network: bool = False, root: Path | None = None) -> Sandbox:
    """A sandbox for ``root`` (default the workspace): only it writable, ``.git`` and the existing
    protected paths read-only. Raises WorkspaceUnavailable with the sandbox's message naming the fix."""

    root = Path(root or workspace.root)
    machinery = tuple(rel for rel in workspace.baseline if workspace.is_test_machinery(rel))
    read_only = tuple(p for p in dict.fromkeys((*ALWAYS_READ_ONLY, *workspace.protected, *machinery))
                      if os.path.lexists(root / p) and not (root / p).is_symlink())
    try:
        return sandboxes.open_sandbox(SandboxPolicy(workspace=root, network=network, read_only=read_only,
                                          allow_unsandboxed=workspace.allow_unsandboxed))
    except SandboxUnavailable as exc:
        raise WorkspaceUnavailable("sandbox_unavailable", str(exc)[:300]) from None
