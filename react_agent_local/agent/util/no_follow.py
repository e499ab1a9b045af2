"""Folders whose files are opened without following a link: the one way the session store and the run
folders touch the disk.

``NoFollowFolder(root, *parts)`` opens ``root/<parts>`` once and every file in it relative to that
descriptor with ``O_NOFOLLOW``, so a folder below ``root`` or a file swapped for a symlink makes the
open fail (``ELOOP``) instead of reaching outside. ``root`` itself is the operator's choice and may be
a link. Without ``dir_fd`` (Windows) each component and each file is checked with ``lstat`` before use
instead. Reads are bounded (``read_fd``): only a regular file, of at most the limit asked.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path
from typing import Any, Iterator

log = logging.getLogger(__name__)

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO put where a file was expected must not block the open
_DIR_FD = bool(_NOFOLLOW) and os.open in os.supports_dir_fd


class NoFollowFolder:
    """``root/<parts>`` opened without following a link on any component below ``root``; a context
    manager (or ``close``). Files it creates get ``file_mode`` unless ``open`` is given a mode."""

    def __init__(self, root: Path, *parts: str, file_mode: int = 0o644):
        self.path = Path(root).joinpath(*parts)
        self.file_mode = file_mode
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
        self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def open(self, name: str, flags: int, mode: int | None = None) -> int:
        mode = self.file_mode if mode is None else mode
        if self.fd is not None:
            return os.open(name, flags | _NOFOLLOW | _CLOEXEC, mode, dir_fd=self.fd)
        _refuse_link(self.path / name, directory=False)
        return os.open(self.path / name, flags | getattr(os, "O_BINARY", 0), mode)

    def stat(self, name: str) -> os.stat_result:
        """The entry itself (a link is not followed)."""
        if self.fd is not None:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        return os.lstat(self.path / name)

    def names(self) -> Iterator[str]:
        with os.scandir(self.fd if self.fd is not None else self.path) as entries:
            for entry in entries:
                yield entry.name

    def read(self, name: str, limit: int) -> bytes:
        """A regular file of at most ``limit`` bytes (no FIFO, device or link); OSError otherwise."""
        fd = self.open(name, os.O_RDONLY | _NONBLOCK)
        try:
            return read_fd(fd, limit)
        finally:
            os.close(fd)

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
            write_all(fd, data)
        finally:
            os.close(fd)

    def write_atomic(self, name: str, data: bytes) -> None:
        """``name`` holds ``data`` whole or as it was: written to ``<name>.tmp``, renamed over it."""
        tmp = name + ".tmp"
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
        self.replace(tmp, name)

    def replace(self, src: str, dst: str) -> None:
        if self.fd is not None:
            os.replace(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        else:
            os.replace(self.path / src, self.path / dst)

    def unlink(self, name: str) -> None:
        if self.fd is not None:
            os.unlink(name, dir_fd=self.fd)
        else:
            os.unlink(self.path / name)

    def sync(self) -> None:
        """Make a rename in the folder durable (where the platform can)."""
        if self.fd is not None:
            try:
                os.fsync(self.fd)
            except OSError:  # some filesystems refuse fsync on a directory; the rename still happened
                pass


def read_fd(fd: int, limit: int) -> bytes:
    """The whole of the regular file open at ``fd`` (from its start), at most ``limit`` bytes; OSError
    ``EINVAL`` when it is not a regular file, ``EFBIG`` when it is, or grows while read, past the limit."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file")
    if st.st_size > limit:
        raise OSError(errno.EFBIG, "file over its size limit")
    chunks, offset = [], 0
    while offset <= limit:
        chunk = os.pread(fd, 1 << 20, offset) if hasattr(os, "pread") else _read_at(fd, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    data = b"".join(chunks)
    if len(data) > limit:
        raise OSError(errno.EFBIG, "file grew past its size limit")
    return data


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_at(fd: int, offset: int) -> bytes:
    os.lseek(fd, offset, os.SEEK_SET)
    return os.read(fd, 1 << 20)


def _refuse_link(path: Path, *, directory: bool) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if directory:
            raise
        return  # a file about to be created
    if stat.S_ISLNK(st.st_mode) or (directory and not stat.S_ISDIR(st.st_mode)):
        raise OSError(errno.ELOOP, "a path component is a link")
