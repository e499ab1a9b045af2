"""The example package as the site serves it: a live enumeration, a manifest and a deterministic ZIP.

Everything is built from the package folder on disk at request time (R-SITE-1). A cheap stat
signature (path, size, mtime, ctime, inode of every entry) keys a cached ``Snapshot``; any change to
the tree makes the next request rebuild it, so the bytes served are always the current ones.

What is left out of the enumeration:

* the folders ``.git .runs .venv __pycache__ models .pytest_cache`` (and other caches),
* symlinks, files and folders alike -- they are never followed, so one pointing outside the
  package can be neither listed, served nor zipped (SECURITY 19),
* ``*.pyc``, anything that is not a regular file, names that are not portable (see ``_portable``),
* files over ``MAX_FILE_BYTES`` (reported in ``skipped``).

Too many files or bytes in total is an operator fault: ``PackageTooLarge`` (HTTP 507).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

DEFAULT_PACKAGE_DIR = Path(__file__).resolve().parent.parent / "react_agent_local"
ZIP_ROOT = "react_agent_local"

EXCLUDED_DIRS = frozenset(
    {".git", ".runs", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
     ".hypothesis", "node_modules", ".grimp_cache", ".import_linter_cache"}
)
#: left out at the package's top only: downloaded model weights (``agent/models/`` is code)
EXCLUDED_TOP_DIRS = frozenset({"models"})
EXCLUDED_SUFFIXES = (".pyc", ".pyo")
MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_TOTAL_BYTES = 20 * 1024 * 1024
MAX_FILES = 2000
MAX_ENTRIES_SCANNED = 20_000  # bounds the walk itself, whatever the exclusions drop
MAX_DEPTH = 12
MAX_PATH_CHARS = 400

# 1980-01-01 is the earliest date a ZIP can store; every entry gets it, so the ZIP bytes depend
# only on the paths, modes and contents of the files.
ZIP_DATE_TIME = (1980, 1, 1, 0, 0, 0)

_WINDOWS_RESERVED = re.compile(r"^(con|prn|aux|nul|com[0-9]|lpt[0-9]|conin\$|conout\$)(\..*)?$", re.IGNORECASE)
_UNSAFE_CHARS = re.compile(r'[\x00-\x1f\x7f\\:*?"<>|%]')

LANGUAGES = {
    ".py": "python", ".md": "markdown", ".json": "json", ".sh": "shell", ".ps1": "powershell",
    ".txt": "text", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".cfg": "ini", ".ini": "ini",
    ".csv": "csv", ".html": "html", ".js": "javascript", ".css": "css", ".gbnf": "text",
    ".jsonl": "json", ".png": "binary", ".gguf": "binary",
}


class PackageTooLarge(Exception):
    """The package exceeds the file-count, byte or depth limits (HTTP 507)."""


class PackageUnavailable(Exception):
    """The package folder is missing or unreadable (HTTP 503)."""


def _portable(name: str) -> bool:
    """A name every OS can extract from the ZIP: no separators, drive colons, reserved device
    names, control characters, ``%`` (so no percent-encoded look-alikes) or trailing dot/space."""
    if not name or name in (".", "..") or len(name) > 255:
        return False
    if _UNSAFE_CHARS.search(name) or name.endswith((".", " ")):
        return False
    if _WINDOWS_RESERVED.match(name):
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes came back as surrogates
        return False
    return True


def language_of(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    if name in ("Makefile", "Dockerfile"):
        return name.lower()
    suffix = os.path.splitext(name)[1].lower()
    return LANGUAGES.get(suffix, "text")


def role_of(path: str) -> str:
    """The directory role the page groups files by."""
    if "/" not in path:
        return "root"
    top = path.split("/", 1)[0]
    if top == "agent":
        return "agent"
    if top in ("prompts", "schemas"):
        return "contracts"
    if top in ("knowledge", "data", "packs"):
        return "knowledge"
    if top == "tests":
        return "tests"
    return "other"


def download_path(path: str) -> str:
    return "/api/react-agent/example/file?path=" + quote(path, safe="/") + "&download=1"


@dataclass(frozen=True)
class Entry:
    path: str  # relative, "/"-separated
    size: int
    mode: int
    signature: tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode


@dataclass
class Snapshot:
    files: dict[str, bytes]
    manifest: dict[str, Any]
    zip_bytes: bytes
    signature: tuple[Any, ...]
    modes: dict[str, int] = field(default_factory=dict)


def scan(root: Path) -> tuple[list[Entry], list[dict[str, Any]], tuple[Any, ...]]:
    """Walk the tree without following any symlink; return entries, skipped files, signature."""
    entries: list[Entry] = []
    skipped: list[dict[str, Any]] = []
    scanned = 0
    dir_marks: list[tuple[str, int]] = []

    def walk(directory: str, rel: str, depth: int) -> None:
        nonlocal scanned
        if depth > MAX_DEPTH:
            raise PackageTooLarge(f"the package is nested deeper than {MAX_DEPTH} folders")
        try:
            with os.scandir(directory) as it:
                children = sorted(it, key=lambda e: e.name)
        except OSError:
            skipped.append({"path": rel or ".", "reason": "unreadable folder"})
            return
        for child in children:
            scanned += 1
            if scanned > MAX_ENTRIES_SCANNED:
                raise PackageTooLarge(f"the package folder holds more than {MAX_ENTRIES_SCANNED} entries")
            name = child.name
            child_rel = f"{rel}/{name}" if rel else name
            try:
                if child.is_symlink():  # never followed, never listed
                    continue
                st = child.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if name in EXCLUDED_DIRS or (not rel and name in EXCLUDED_TOP_DIRS) or name.endswith(".egg-info") \
                        or not _portable(name):
                    continue
                dir_marks.append((child_rel, st.st_mtime_ns))
                walk(child.path, child_rel, depth + 1)
                continue
            if not stat.S_ISREG(st.st_mode):  # FIFOs, sockets, devices
                continue
            if name.endswith(EXCLUDED_SUFFIXES) or not _portable(name) or len(child_rel) > MAX_PATH_CHARS:
                continue
            if st.st_size > MAX_FILE_BYTES:
                skipped.append({"path": child_rel, "reason": f"larger than {MAX_FILE_BYTES} bytes", "bytes": st.st_size})
                continue
            entries.append(
                Entry(child_rel, st.st_size, st.st_mode, (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
            )

    try:
        root_stat = os.stat(root)
    except OSError:
        raise PackageUnavailable("the example package folder is not available") from None
    if not stat.S_ISDIR(root_stat.st_mode):
        raise PackageUnavailable("the example package folder is not a directory")
    walk(str(root), "", 0)
    if len(entries) > MAX_FILES:
        raise PackageTooLarge(f"the package has {len(entries)} files; the limit is {MAX_FILES}")
    total = sum(e.size for e in entries)
    if total > MAX_TOTAL_BYTES:
        raise PackageTooLarge(f"the package has {total} bytes; the limit is {MAX_TOTAL_BYTES}")
    signature = (tuple((e.path, e.signature) for e in entries), tuple(dir_marks))
    return entries, skipped, signature


def _read_regular(root: Path, rel: str, limit: int) -> bytes | None:
    """Read a file component by component with ``O_NOFOLLOW``, so a file or folder swapped for a
    symlink after the scan is refused; ``None`` when it vanished, changed type or grew too big."""
    parts = rel.split("/")
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    if not nofollow or os.open not in os.supports_dir_fd:  # pragma: no cover - Windows
        path = os.path.join(root, *parts)
        if os.path.realpath(path) != os.path.join(os.path.realpath(root), *parts):
            return None
        return _read_fd(os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0)), limit)
    dir_flags = os.O_RDONLY | nofollow | getattr(os, "O_DIRECTORY", 0)
    fds: list[int] = []
    try:
        fds.append(os.open(root, dir_flags))
        for part in parts[:-1]:
            fds.append(os.open(part, dir_flags, dir_fd=fds[-1]))
        fd = os.open(parts[-1], os.O_RDONLY | nofollow | getattr(os, "O_NONBLOCK", 0), dir_fd=fds[-1])
    except OSError:
        return None
    finally:
        for d in fds:
            os.close(d)
    return _read_fd(fd, limit)


def _read_fd(fd: int, limit: int) -> bytes | None:
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data if len(data) <= limit else None


def is_text(data: bytes) -> bool:
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def build_zip(files: dict[str, bytes], modes: dict[str, int]) -> bytes:
    """Deterministic ZIP: sorted entries under ``react_agent_local/``, fixed timestamps and modes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for path in sorted(files):
            info = zipfile.ZipInfo(f"{ZIP_ROOT}/{path}", date_time=ZIP_DATE_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # unix, so the permission bits below are honoured
            executable = modes.get(path, 0) & stat.S_IXUSR
            info.external_attr = ((0o100755 if executable else 0o100644) & 0xFFFF) << 16
            zf.writestr(info, files[path], compress_type=zipfile.ZIP_DEFLATED, compresslevel=6)
    return buf.getvalue()


def tree_sha256(files: dict[str, bytes]) -> str:
    """SHA-256 over ``path NUL bytes NUL sha256 LF`` lines in path order: names the content of the
    tree independently of the ZIP format."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(f"{path}\0{len(files[path])}\0{hashlib.sha256(files[path]).hexdigest()}\n".encode("utf-8"))
    return h.hexdigest()


def read_version(files: dict[str, bytes]) -> dict[str, Any]:
    """``manifest.json`` of the package: the static name/version/module declaration."""
    raw = files.get("manifest.json")
    if raw is None:
        return {}
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class ExamplePackage:
    """The live package folder; ``snapshot()`` is cheap when nothing changed."""

    def __init__(self, root: Path | str = DEFAULT_PACKAGE_DIR):
        self.root = Path(root).absolute()
        self._lock = threading.Lock()
        self._cached: Snapshot | None = None

    def snapshot(self) -> Snapshot:
        with self._lock:
            for _ in range(3):
                entries, skipped, signature = scan(self.root)
                if self._cached is not None and self._cached.signature == signature:
                    return self._cached
                snap = self._build(entries, skipped, signature)
                if snap is not None:
                    self._cached = snap
                    return snap
            raise PackageUnavailable("the example package kept changing while it was being read; try again")

    def _build(self, entries: list[Entry], skipped: list[dict[str, Any]], signature: tuple[Any, ...]) -> Snapshot | None:
        files: dict[str, bytes] = {}
        modes: dict[str, int] = {}
        for entry in entries:
            data = _read_regular(self.root, entry.path, MAX_FILE_BYTES)
            if data is None or len(data) != entry.size:
                return None  # changed under us: rescan
            files[entry.path] = data
            modes[entry.path] = entry.mode
        zip_bytes = build_zip(files, modes)
        declared = read_version(files)
        manifest = {
            "name": declared.get("name", ZIP_ROOT),
            "version": declared.get("version"),
            "module": declared.get("module"),
            "zip_sha256": hashlib.sha256(zip_bytes).hexdigest(),
            "zip_bytes": len(zip_bytes),
            "tree_sha256": tree_sha256(files),
            "bytes": sum(len(b) for b in files.values()),
            "file_count": len(files),
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "zip_root": f"{ZIP_ROOT}/",
            "zip_path": "/api/react-agent/example.zip",
            "files": [
                {
                    "path": path,
                    "bytes": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "language": language_of(path),
                    "text": is_text(data),
                    "download_path": download_path(path),
                    "role": role_of(path),
                }
                for path, data in sorted(files.items())
            ],
            "skipped": skipped,
            "limits": {"max_file_bytes": MAX_FILE_BYTES, "max_total_bytes": MAX_TOTAL_BYTES, "max_files": MAX_FILES},
        }
        return Snapshot(files=files, manifest=manifest, zip_bytes=zip_bytes, signature=signature, modes=modes)


# --------------------------------------------------------------------------------------------
# The file endpoint's path check (SECURITY 18)
# --------------------------------------------------------------------------------------------


class BadPath(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def check_request_path(path: str | None) -> str:
    """Reject anything that is not a canonical relative "/"-separated path; the caller then
    requires an exact (case-sensitive) match in the enumeration."""
    if path is None or path == "":
        raise BadPath("path is required")
    if len(path) > MAX_PATH_CHARS:
        raise BadPath("path is too long")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        raise BadPath("path contains control characters")
    if "\\" in path:
        raise BadPath("path must use '/' separators")
    if "%" in path:
        raise BadPath("path must not be percent-encoded")
    if path.startswith("/"):
        raise BadPath("path must be relative")
    if re.match(r"^[A-Za-z]:", path):
        raise BadPath("path must not name a drive")
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            raise BadPath("path must not contain empty, '.' or '..' segments")
        if not _portable(segment):
            raise BadPath("path contains a name that is not allowed")
    return path
