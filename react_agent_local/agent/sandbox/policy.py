"""What the operator allows a sandboxed command, and the environment a command starts with.

Errors, by who is at fault::

    SandboxUnavailable      no sandbox can start on this machine; the message names the fix
                            (an operator fault: raised by open_sandbox, never turned into a host run)
    ValueError              a bad argument to SandboxPolicy or Sandbox.run: a cwd outside the
                            workspace, a secret-looking environment variable, an empty argv
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from agent.util.secrets import is_secret_name

_SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


class SandboxUnavailable(Exception):
    """No sandbox can start here; the message says what to install or enable."""


@dataclass(frozen=True)
class SandboxPolicy:
    """The operator's choices for every command of a session (a request never widens them)."""

    workspace: Path
    """Absolute and resolved; the only tree a command may write."""
    network: bool = False
    """Whether commands may open IPv4/IPv6 sockets (the operator's choice only)."""
    read_only: tuple[str, ...] = (".git",)
    """Workspace-relative paths kept read-only. ``.git`` is always among them, whatever is passed
    (``protected_entries``): a planted hook or config would run on the host at the operator's next git."""
    cpu_seconds: int = 60
    """RLIMIT_CPU of every process of the command."""
    max_processes: int = 256
    """Processes (and threads) the command may have at once: RLIMIT_NPROC in the sandbox's user
    namespace, and a pids cgroup where one is writable (the kernel never applies RLIMIT_NPROC to root)."""
    max_file_bytes: int = 64 << 20
    """RLIMIT_FSIZE: the largest file a command may write."""
    max_memory_bytes: int = 2 << 30
    """RLIMIT_AS of every process (address space, so runtimes that reserve much virtual memory need more)."""
    max_workspace_bytes: int = 256 << 20
    """How much the workspace may grow over the whole run (this Sandbox's life), in allocated bytes.
    Watched during each command and measured after it; see ``quota.py`` for what it does and does not stop."""
    max_tmp_bytes: int = 512 << 20
    """The size of the command's private ``/tmp``: a tmpfs of this size under bubblewrap, a host folder
    watched the same way as the workspace under the fallback."""
    allow_unsandboxed: bool = False
    """The operator's explicit opt-out on the CLI: run on the host when no sandbox starts."""
    readable: tuple[Path, ...] = field(default=())
    """Extra host paths a command may read. Only the system folders, the Python installation and this
    package's ``agent`` code are readable otherwise (not ``/opt``, ``/var``, ``/srv``, the home)."""

    def __post_init__(self) -> None:
        workspace = Path(self.workspace)
        if not workspace.is_absolute() or workspace != workspace.resolve():
            raise ValueError("the workspace must be an absolute, resolved path")
        if not workspace.is_dir():
            raise ValueError("the workspace must be an existing directory")
        if workspace == Path("/"):
            raise ValueError("the workspace cannot be the root directory")
        for entry in self.read_only:
            parts = Path(entry).parts
            if not parts or Path(entry).is_absolute() or ".." in parts:
                raise ValueError(f"read_only entries are workspace-relative paths without '..': {entry!r}")
        for number in (self.cpu_seconds, self.max_processes, self.max_file_bytes, self.max_memory_bytes,
                       self.max_workspace_bytes, self.max_tmp_bytes):
            if number <= 0:
                raise ValueError("resource limits must be positive")


    @property
    def protected_entries(self) -> tuple[str, ...]:
        """``read_only`` with ``.git`` always first (a workspace with none gets an empty read-only one)."""
        return (".git", *(entry for entry in self.read_only if Path(entry).parts != (".git",)))


def interpreter() -> str:
    """This interpreter as a command inside the sandbox names it: its directory resolved (the sandbox
    binds resolved paths, and a virtual environment reached through a symlink under ``/tmp`` or the
    home would not be there), its file name kept (``venv/bin/python`` is itself a symlink to the base
    interpreter; resolving it would leave the virtual environment and its packages behind)."""
    executable = Path(os.path.abspath(sys.executable))
    return str(executable.parent.resolve() / executable.name)


def python_paths() -> tuple[Path, ...]:
    """What the sandbox must be able to read to run this interpreter and this package's code: the
    installation, the virtual environment, and the ``agent`` folder only. Not the folder that holds
    it: beside the code lie the packs (whose ``data/`` holds answer keys and hidden tests), and
    the runs and sessions folders may live there too."""
    paths = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(),
             Path(os.path.realpath(sys.executable)).parent.parent, agent_code()}
    return tuple(sorted(paths))


def package_root() -> Path:
    """The directory that holds the ``agent`` package (not readable in the sandbox, see python_paths)."""
    return Path(__file__).resolve().parent.parent.parent


def agent_code() -> Path:
    """The ``agent`` package's own folder, the one part of ``package_root`` a command may read."""
    return Path(__file__).resolve().parent.parent


def base_environment(home: str, tmpdir: str) -> dict[str, str]:
    """A command's environment: nothing from the runner's except the locale."""
    search = list(_SYSTEM_PATH)
    if sys.prefix != sys.base_prefix:  # a virtual environment: its tools (pytest, python) come first
        search.insert(0, os.path.dirname(interpreter()))
    env = {"PATH": ":".join(search), "HOME": home, "TMPDIR": tmpdir, "TERM": "dumb",
           "LANG": os.environ.get("LANG", "C.UTF-8")}
    if os.environ.get("LC_ALL"):
        env["LC_ALL"] = os.environ["LC_ALL"]
    return env


def merge_environment(base: dict[str, str], extra: dict[str, str] | None) -> dict[str, str]:
    """The base environment plus the caller's additions, refusing names that look like credentials."""
    env = dict(base)
    for name, value in (extra or {}).items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise ValueError(f"invalid environment variable name or value: {name!r}")
        if is_secret_name(name):  # a command never receives a credential, whoever asks
            raise ValueError(f"environment variable {name!r} looks like a credential; commands never get one")
        env[name] = value
    return env


def resolve_cwd(workspace: Path, cwd: str) -> Path:
    """A workspace-relative working directory, refused when it resolves outside the workspace."""
    if "\0" in cwd or os.path.isabs(cwd):
        raise ValueError(f"cwd must be a workspace-relative path: {cwd!r}")
    resolved = (workspace / cwd).resolve()
    if resolved != workspace and workspace not in resolved.parents:
        raise ValueError(f"cwd resolves outside the workspace: {cwd!r}")
    if not resolved.is_dir():
        raise ValueError(f"cwd is not a directory in the workspace: {cwd!r}")
    return resolved


def check_argv(argv: list[str]) -> list[str]:
    if not argv or not all(isinstance(arg, str) and "\0" not in arg for arg in argv):
        raise ValueError("argv must be a non-empty list of strings without NUL bytes")
    return list(argv)
