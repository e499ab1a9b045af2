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
from typing import TYPE_CHECKING, Any, Callable, Iterable

from .approvals import APPROVAL_SECONDS, Approver
from .tools import workspace_ops as ops

if TYPE_CHECKING:
    from .contracts import TaskSpec
    from .tools.base import ToolContext

#: read-only inside every sandbox, whatever the task protects
ALWAYS_READ_ONLY = (".git",)
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
        code is, however it is written (the 1.5B wrote a failed fix again with a comment added).
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
        return any(parts == p or parts.startswith(p + "/") for p in self.protected)

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


@dataclass
class WorkspaceOptions:
    """The operator's choices for a run's workspace tools (``agent run`` flags, the runner's start-up)."""

    #: the operator's folder; None: a fresh copy of the pack's template
    directory: Path | None = None
    #: where that copy is made (as ``workspace``, ``workspace-2``, ...); None: the run's folder
    parent: Path | None = None
    #: ``shell_risk.ApprovalPolicy``; None: ask on risk
    approval: Any = None
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


def prepare(task: "TaskSpec", pack_root: Path, options: WorkspaceOptions, run_dir: Path) -> Workspace:
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
    return replace(workspace, baseline=workspace.protected_hashes())


def sandbox_for(workspace: Workspace, *, network: bool = False, root: Path | None = None) -> Any:
    """A sandbox for ``root`` (default the workspace): only it writable, ``.git`` and the existing
    protected paths read-only. Raises WorkspaceUnavailable with the sandbox's message naming the fix."""
    from .sandbox import SandboxPolicy, SandboxUnavailable, open_sandbox

    root = Path(root or workspace.root)
    read_only = tuple(p for p in (*ALWAYS_READ_ONLY, *workspace.protected)
                      if os.path.lexists(root / p) and not (root / p).is_symlink())
    try:
        return open_sandbox(SandboxPolicy(workspace=root, network=network, read_only=read_only,
                                          allow_unsandboxed=workspace.allow_unsandboxed))
    except SandboxUnavailable as exc:
        raise WorkspaceUnavailable("sandbox_unavailable", str(exc)[:300]) from None


def bind(ctx: "ToolContext", task: "TaskSpec", pack_root: Path, options: WorkspaceOptions | None, run_dir: Path, *,
         deadline: float | None = None, emit: Callable[..., None] | None = None) -> "ToolContext":
    """``ctx`` with the run's workspace, its sandbox, the approval policy and the operator's approver."""
    from .shell_risk import ApprovalPolicy

    options = options or WorkspaceOptions()
    workspace = prepare(task, pack_root, options, run_dir)
    sandbox = sandbox_for(workspace, network=options.network)
    approval = options.approval if options.approval is not None else ApprovalPolicy(mode="ask_on_risk")
    return replace(ctx, workspace=workspace, sandbox=sandbox, approval=approval, approver=options.approver,
                   approval_seconds=options.approval_seconds, deadline=deadline, emit=emit)
