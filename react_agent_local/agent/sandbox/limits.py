"""Resource limits for one sandboxed command, and the pids cgroup that caps processes for root.

Two mechanisms bound what a command may consume:

- **rlimits** (CPU seconds, file size, address space, processes), set inside the sandbox just
  before the command runs (by ``prlimit`` under bubblewrap, by ``confine.py`` otherwise), so they bind
  the command and everything it starts but not the runner or bubblewrap's own set-up. Under
  bubblewrap ``RLIMIT_NPROC`` is set *after* the user namespace exists: the kernel counts it per
  (namespace, uid), so in a fresh namespace the count is exactly the sandbox's processes. Set before,
  it would also be checked against every process the runner's user owns on the host, which is why
  the Landlock fallback (no user namespace) adds that number to the cap.
- **a pids cgroup**, because the kernel never enforces ``RLIMIT_NPROC`` for the global root user:
  a runner started as root (a CI container, this project's VMs) would otherwise leave a fork bomb
  bounded only by the timeout. When a writable pids controller exists (cgroup v1 ``pids``, or a
  cgroup v2 directory with ``pids`` in its ``subtree_control``), each run gets its own cgroup with
  ``pids.max``; ``/bin/sh`` writes its own pid into it and ``exec``s the sandbox, so nothing the
  sandbox forks is ever outside it.
"""

from __future__ import annotations

import itertools
import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

_SEQUENCE = itertools.count()


@dataclass(frozen=True)
class Rlimits:
    """The limits ``confine.py`` applies in the child (soft and hard set together)."""

    cpu_seconds: int
    max_processes: int
    max_file_bytes: int
    max_memory_bytes: int

    def as_spec(self) -> dict[str, int]:
        return {"cpu": self.cpu_seconds, "nproc": self.max_processes,
                "fsize": self.max_file_bytes, "as": self.max_memory_bytes}

    def prlimit_argv(self) -> list[str] | None:
        """The same limits as a ``prlimit`` prefix (util-linux), or None where the system has none.

        Under bubblewrap this replaces ``confine.py``: a C program that sets four limits and execs
        costs ~2 ms inside the sandbox, a Python start ~15 ms. Values are cut to the runner's own hard
        limits, which nothing in the sandbox may raise."""
        binary = next((p for p in ("/usr/bin/prlimit", "/bin/prlimit") if os.access(p, os.X_OK)), None)
        if binary is None:
            return None
        cpu_soft, cpu_hard = _within_hard(resource.RLIMIT_CPU, self.cpu_seconds, self.cpu_seconds + 1)
        return [binary, f"--cpu={cpu_soft}:{cpu_hard}",
                "--fsize={}:{}".format(*_within_hard(resource.RLIMIT_FSIZE, self.max_file_bytes, self.max_file_bytes)),
                "--as={}:{}".format(*_within_hard(resource.RLIMIT_AS, self.max_memory_bytes, self.max_memory_bytes)),
                "--nproc={}:{}".format(*_within_hard(resource.RLIMIT_NPROC, self.max_processes, self.max_processes)),
                "--"]


def _within_hard(which: int, soft: int, hard: int) -> tuple[int, int]:
    _, current = resource.getrlimit(which)
    if current == resource.RLIM_INFINITY:
        return soft, hard
    return min(soft, current), min(hard, current)


def processes_of_current_user() -> int:
    """How many processes the runner's real uid owns now (Landlock mode has no user namespace, so
    ``RLIMIT_NPROC`` counts all of them and the cap must sit on top of this number)."""
    uid = os.getuid()
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat(follow_symlinks=False).st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count


class PidsCgroup:
    """One run's pids cgroup: created before the run, removed after it."""

    def __init__(self, directory: Path, limit: int) -> None:
        self.directory = directory
        directory.mkdir()
        try:
            (directory / "pids.max").write_text(f"{limit}\n")
        except OSError:
            directory.rmdir()
            raise

    @property
    def procs_file(self) -> Path:
        return self.directory / "cgroup.procs"

    def trampoline(self) -> list[str]:
        """The argv prefix that joins the cgroup and then becomes the sandbox process itself."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.procs_file)]

    def remove(self) -> None:
        # The kernel releases a dead task's cgroup membership a moment after its parent reaps it (after a
        # fork bomb, a few hundred ms for the whole pid namespace).
        for _ in range(300):
            try:
                self.directory.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)


@dataclass(frozen=True)
class PidsController:
    """Where this runner may create per-run pids cgroups."""

    parent: Path

    def create(self, limit: int) -> PidsCgroup:
        name = f"react-agent-sandbox-{os.getpid()}-{next(_SEQUENCE)}"
        return PidsCgroup(self.parent / name, limit)


def find_pids_controller(root: Path = Path("/sys/fs/cgroup")) -> PidsController | None:
    """A writable pids controller for this process, or None (then ``RLIMIT_NPROC`` is the only cap)."""
    own = _own_cgroups()
    candidates: list[Path] = []
    if "pids" in own:  # cgroup v1: the pids hierarchy is its own mount
        candidates.append(root / "pids" / own["pids"].lstrip("/"))
    if "" in own:      # cgroup v2 (unified), mounted at the root or under unified/ in hybrid set-ups
        for base in (root, root / "unified"):
            directory = base / own[""].lstrip("/")
            controls = directory / "cgroup.subtree_control"
            try:
                if "pids" in controls.read_text().split():
                    candidates.append(directory)
            except OSError:
                continue
    for directory in candidates:
        if (directory / "cgroup.procs").exists() and os.access(directory, os.W_OK):
            probe = PidsController(directory)
            try:
                probe.create(1).remove()
            except OSError:
                continue
            return probe
    return None


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per controller ('' is the unified hierarchy)."""
    result: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return result
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(","):
            result[controller] = parts[2]
    return result
