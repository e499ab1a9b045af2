"""The run folders on disk: ``<runs_dir>/<run-id>/``, opened without following a link, reloaded at a
restart, pruned by retention.

A run folder holds ``job.json`` (the public request, status and result), ``events.jsonl`` (one stored
event a line, appended as they arrive) and ``artifacts/`` (the plot PNGs). Every file is opened
relative to folder descriptors without following a link on any component below ``runs_dir``
(``NoFollowFolder``), so a run folder, ``artifacts/`` or a file swapped for a symlink is refused,
never read or written through. What the files hold is the job store's business
(``agent/runner/job_store.py``); here they are bytes, and a read is bounded in size.

Retention (``over_limits``) picks the oldest finished runs to delete until at most ``max_runs`` runs
and ``max_bytes`` remain; runs still queued or running count, but are never picked.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from agent.contracts.trace import redact

log = logging.getLogger(__name__)

RUN_ID = re.compile(r"^run-[0-9a-f]{12}$")
ARTIFACT_ID = re.compile(r"^art-[0-9a-f]{16}$")
MAX_ARTIFACT_BYTES = 20 * 1024 * 1024
MAX_RECORD_BYTES = 16 * 1024 * 1024  # job.json
RECORD = "job.json"
EVENTS = "events.jsonl"

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIR_FD = bool(_NOFOLLOW) and os.open in os.supports_dir_fd


class NoFollowFolder:
    """``root/<parts>`` opened without following a link on any component below ``root``.

    ``root`` itself is the operator's choice and may be a link. Files are opened relative to the
    folder's descriptor with ``O_NOFOLLOW``, so swapping the folder, ``artifacts/`` or a file for
    a symlink makes the open fail instead of reaching outside (the course site's reader does the same).
    Without ``dir_fd`` (Windows) each component is checked with ``lstat`` before use.
    """

    def __init__(self, root: Path, *parts: str):
        self.path = Path(root).joinpath(*parts)
        self.fd: int | None = None
        if not _DIR_FD:
            for i in range(1, len(parts) + 1):
                _refuse_link(Path(root).joinpath(*parts[:i]), directory=True)
            return
        fds = [os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)]
        try:
            for part in parts:
                fds.append(os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=fds[-1]))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        for fd in fds[:-1]:
            os.close(fd)
        self.fd = fds[-1]

    def __enter__(self) -> "NoFollowFolder":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def open(self, name: str, flags: int, mode: int = 0o644) -> int:
        if self.fd is not None:
            return os.open(name, flags | _NOFOLLOW | _CLOEXEC, mode, dir_fd=self.fd)
        _refuse_link(self.path / name, directory=False)
        return os.open(self.path / name, flags | getattr(os, "O_BINARY", 0), mode)

    def read(self, name: str, limit: int) -> bytes:
        """A regular file of at most ``limit`` bytes (no FIFO, device or link); OSError otherwise."""
        fd = self.open(name, os.O_RDONLY | _NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
                raise OSError(errno.EINVAL, "not a regular file of the expected size")
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise OSError(errno.EFBIG, "file grew past its limit")
        return data

    def read_lines(self, name: str) -> list[bytes]:
        """The lines of a regular file; none when it is missing or is not one (a link, a FIFO)."""
        try:
            fd = self.open(name, os.O_RDONLY | _NONBLOCK)
        except FileNotFoundError:
            return []
        except OSError:
            log.warning("ignoring %s of %s: not a regular file", name, self.path.name)
            return []
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                log.warning("ignoring %s of %s: not a regular file", name, self.path.name)
                return []
            return fh.readlines()

    def append(self, name: str, data: bytes) -> None:
        fd = self.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            _write_all(fd, data)
        finally:
            os.close(fd)

    def write_atomic(self, name: str, data: bytes) -> None:
        tmp = name + ".tmp"
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        if self.fd is not None:
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        else:
            os.replace(self.path / tmp, self.path / name)


@dataclass(frozen=True)
class SavedRun:
    """A run folder as a restarted runner finds it: its job.json (redacted) and its event lines."""

    id: str
    record: dict[str, Any]
    lines: list[bytes]


class RunFolders:
    """``runs_dir`` and its run folders. Every method raises ``OSError`` when the disk says no."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, run_id: str) -> Path:
        return self.root / run_id

    def artifacts(self, run_id: str) -> Path:
        return self.root / run_id / "artifacts"

    def taken(self, run_id: str) -> bool:
        return os.path.lexists(self.path(run_id))

    def create(self, run_id: str) -> None:
        self.artifacts(run_id).mkdir(parents=True, exist_ok=True)

    def write_record(self, run_id: str, data: bytes) -> None:
        with NoFollowFolder(self.root, run_id) as folder:
            folder.write_atomic(RECORD, data)

    def append_event(self, run_id: str, line: bytes) -> None:
        with NoFollowFolder(self.root, run_id) as folder:
            folder.append(EVENTS, line)

    def read_artifact(self, run_id: str, artifact_id: str) -> bytes:
        with NoFollowFolder(self.root, run_id, "artifacts") as folder:
            return folder.read(f"{artifact_id}.png", MAX_ARTIFACT_BYTES)

    def size(self, run_id: str) -> int:
        """Bytes of the files below the run folder (links counted as themselves, never followed)."""
        total = 0
        for root, _dirs, files in os.walk(self.path(run_id)):
            for name in files:
                try:
                    total += os.lstat(os.path.join(root, name)).st_size
                except OSError:
                    pass
        return total

    def delete(self, run_id: str) -> None:
        shutil.rmtree(self.path(run_id), ignore_errors=True)

    def saved(self) -> Iterator[SavedRun]:
        """Each run folder whose job.json can be read and names it; the others are skipped with a warning."""
        for child in self.root.iterdir():
            if not RUN_ID.match(child.name) or child.is_symlink() or not child.is_dir():
                continue
            try:
                with NoFollowFolder(self.root, child.name) as folder:
                    record = redact(json.loads(folder.read(RECORD, MAX_RECORD_BYTES)))
                    lines = folder.read_lines(EVENTS)
                if not isinstance(record, dict) or record.get("id") != child.name:
                    raise ValueError("job.json does not match its folder")
            except (OSError, ValueError, RecursionError):
                log.warning("skipping unreadable run folder %s", child.name)
                continue
            yield SavedRun(child.name, record, lines)


def over_limits(runs: Sequence[tuple[str, bool, int]], *, max_runs: int, max_bytes: int) -> list[str]:
    """The runs to delete, oldest first, so that at most ``max_runs`` runs and ``max_bytes`` remain.

    ``runs`` are (id, finished, bytes), oldest first; one not finished counts but is never picked.
    """
    count, total = len(runs), sum(size for _, _, size in runs)
    victims = []
    for run_id, finished, size in runs:
        if count <= max_runs and total <= max_bytes:
            break
        if finished:
            victims.append(run_id)
            count -= 1
            total -= size
    return victims


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _refuse_link(path: Path, *, directory: bool) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if directory:
            raise
        return  # a file about to be created
    if stat.S_ISLNK(st.st_mode) or (directory and not stat.S_ISDIR(st.st_mode)):
        raise OSError(errno.ELOOP, "a run path component is a link")
