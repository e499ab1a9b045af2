"""Disk caps for a sandboxed command: how much the workspace may grow over a run, and the fallback's /tmp.

Neither bubblewrap nor Landlock can put a quota on a host folder without privileges, so a cap is kept
by watching, in three steps:

1. **during** the command, every poll of ``process.run_process`` (50 ms) reads ``statvfs`` of the
   folder's file system (one system call). When the file system grew by more than the cap has left,
   the folder itself is measured (a walk that sums allocated blocks, links not followed); over the
   cap, the command is stopped as for a timeout. Anyone else writing to the same file system only
   costs an extra walk, never a stop.
2. **after** it, the folder is measured again (one walk per command: milliseconds for a repository
   of a few thousand files), so growth that a poll missed is still caught.
3. **over the cap**, the files this command created are removed, largest first, until the folder is
   back under it, and ``CommandResult.limit_exceeded`` says what happened and which files went.

What this does not prevent: between two polls a command may write ~50 ms worth of data beyond the
cap (it is removed afterwards); a file that already existed and grew is reported, not truncated;
``RLIMIT_FSIZE`` (``max_file_bytes``) is what bounds a single file at once. Under bubblewrap the
private ``/tmp`` is a tmpfs of ``max_tmp_bytes`` and the kernel refuses the excess itself; only the
fallback's host-folder ``/tmp`` is watched here.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time
from dataclasses import dataclass, field


_POLL_SECONDS = 0.05


def tree_usage(root: str) -> tuple[int, dict[str, int]]:
    """Allocated bytes under ``root`` (links not followed), and each regular file's share by relative path."""
    total = 0
    files: dict[str, int] = {}
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    used = info.st_blocks * 512
                    total += used
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(entry.path)
                    elif stat.S_ISREG(info.st_mode):
                        files[os.path.relpath(entry.path, root)] = used
        except OSError:
            continue
    return total, files


def _filesystem_used(path: str) -> int:
    try:
        info = os.statvfs(path)
    except OSError:
        return 0
    return (info.f_blocks - info.f_bfree) * info.f_frsize


@dataclass
class DiskCap:
    """One folder's growth against a cap, from a baseline measured when the cap was set."""

    root: str
    cap: int
    what: str  # "the workspace" | "the private /tmp"
    baseline: int = 0
    current: int = 0
    files: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def measured(cls, root: str, cap: int, what: str) -> DiskCap:
        baseline, files = tree_usage(root)
        return cls(root, cap, what, baseline, baseline, files)

    def watch(self) -> CommandWatch:
        """The during-command check for one command (see the module docstring)."""
        return CommandWatch(self)

    def settle(self) -> tuple[str, tuple[str, ...]] | None:
        """After a command: measure, remove what it created if over the cap, and say so with the
        removed files' relative paths (None: under the cap)."""
        with self.lock:
            total, files = tree_usage(self.root)
            breach = None
            if total - self.baseline > self.cap:
                message = f"{self.what} grew by {_mib(total - self.baseline)} in this run, over its cap of {_mib(self.cap)}"
                removed, total = self._remove_new(files, total)
                if removed:
                    names = ", ".join(sorted(removed)[:10]) + (" ..." if len(removed) > 10 else "")
                    message += f"; removed the {len(removed)} file(s) this command created: {names}"
                if total - self.baseline > self.cap:
                    message += "; still over the cap (files that already existed grew): delete or shrink them"
                total, files = tree_usage(self.root)
                breach = message, tuple(sorted(removed))
            self.files, self.current = files, total
            return breach

    def _remove_new(self, files: dict[str, int], total: int) -> tuple[dict[str, int], int]:
        removed: dict[str, int] = {}
        for relative, size in sorted(files.items(), key=lambda item: -item[1]):
            if total - self.baseline <= self.cap:
                break
            if relative in self.files:
                continue
            try:
                os.unlink(os.path.join(self.root, relative))
            except OSError:
                continue
            removed[relative] = size
            total -= size
        return removed, total


class CommandWatch:
    """Called by the process loop at every poll; ``exceeded()`` True means: stop the command."""

    def __init__(self, cap: DiskCap) -> None:
        self.cap = cap
        self.reference = _filesystem_used(cap.root)
        self.checked_at = time.monotonic()
        with cap.lock:
            self.allowance = cap.cap - (cap.current - cap.baseline)

    def exceeded(self) -> bool:
        now = time.monotonic()
        if now - self.checked_at < _POLL_SECONDS:  # the process loop also wakes on every output chunk
            return False
        self.checked_at = now
        grown = _filesystem_used(self.cap.root) - self.reference
        if grown <= self.allowance:
            return False
        total, _files = tree_usage(self.cap.root)
        if total - self.cap.baseline > self.cap.cap:
            return True
        # Someone else wrote to the file system: measure again only once it grew by the rest of the cap.
        self.reference = _filesystem_used(self.cap.root)
        self.allowance = self.cap.cap - (total - self.cap.baseline)
        return False


def remove_tree(path: str) -> None:
    """A folder, a file or a link at ``path``, removed without following a link."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _mib(number: int) -> str:
    return f"{number / (1 << 20):.0f} MiB"
