"""The KV state of a prompt's static prefix, saved once per machine and restored by later processes.

The system message (instructions and every tool's schema) is the same for every run with the same
tools, yet a fresh process would evaluate it again: on two CPU cores that is most of the first
step. After the first evaluation the backend saves llama.cpp's context state for exactly those
tokens; a later process whose prompt starts with the same tokens restores it instead.

A saved state is used only when everything that shapes it is the same (``model_key``: the model
file's identity, llama.cpp's version and build, the context settings) and its tokens are a prefix
of the new prompt, compared token by token; the file carries the SHA-256 of its payload. A
mismatch, a short or corrupt file or a state llama.cpp refuses means "evaluate", never a wrong
state. Files are written to a temporary name and renamed, so a reader never sees half a file; the
folder is capped in bytes, the least recently used files going first.

File layout: one JSON header line, then the tokens (int32, little-endian), then the state bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from agent.util.paths import user_cache

FORMAT = "react-agent-prefix-kv/1"
DEFAULT_CAP_BYTES = 512 << 20
_HEADER_LIMIT = 4096
#: Bytes of the model file hashed for its identity: the GGUF header (metadata and vocabulary) and the tail.
_HEAD_BYTES = 16 << 20
_TAIL_BYTES = 1 << 20


def default_directory() -> Path | None:
    """``$REACT_AGENT_PREFIX_CACHE`` (``0`` or ``off`` disables), else the user's cache folder."""
    configured = os.environ.get("REACT_AGENT_PREFIX_CACHE")
    if configured is not None and configured.strip().lower() in ("", "0", "off", "false", "no"):
        return None
    if configured:
        return Path(configured).expanduser()
    return user_cache("prefix-kv")


def model_identity(path: Path) -> str:
    """The model file's size and the SHA-256 of its head and tail: the file, not where it lies
    (a copy restores the same states; a different file of the same name does not)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        digest.update(f.read(_HEAD_BYTES))
        if size > _HEAD_BYTES + _TAIL_BYTES:
            f.seek(size - _TAIL_BYTES)
        digest.update(f.read(_TAIL_BYTES))
    return f"{size}:{digest.hexdigest()}"


@dataclass(frozen=True)
class SavedPrefix:
    tokens: tuple[int, ...]
    state: bytes


class PrefixCache:
    """Saved prefix states of one model under one configuration (``model_key``)."""

    def __init__(self, directory: Path, model_key: str, cap_bytes: int = DEFAULT_CAP_BYTES):
        self.directory = Path(directory)
        self.model_key = model_key
        self.cap_bytes = cap_bytes
        self._stem = hashlib.sha256(model_key.encode()).hexdigest()[:16]

    def _path_for(self, tokens: tuple[int, ...]) -> Path:
        digest = hashlib.sha256(struct.pack(f"<{len(tokens)}i", *tokens)).hexdigest()[:24]
        return self.directory / f"{self._stem}-{digest}.kv"

    def lookup(self, tokens: list[int], limit: int) -> SavedPrefix | None:
        """The longest saved prefix of ``tokens`` with at most ``limit`` tokens, or None."""
        best: SavedPrefix | None = None
        try:
            candidates = list(self.directory.glob(f"{self._stem}-*.kv"))
        except OSError:
            return None
        for path in candidates:
            saved = self._read(path, tokens, limit)
            if saved is not None and (best is None or len(saved.tokens) > len(best.tokens)):
                best = saved
        if best is not None:
            try:  # the LRU order of the size cap
                os.utime(self._path_for(best.tokens))
            except OSError:
                pass
        return best

    def _read(self, path: Path, tokens: list[int], limit: int) -> SavedPrefix | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            try:
                header = json.loads(f.readline(_HEADER_LIMIT))
                if header.get("format") != FORMAT or header.get("model_key") != self.model_key:
                    return None
                n, size = int(header["n_tokens"]), int(header["state_bytes"])
                if not 0 < n <= limit or size <= 0:
                    return None
                saved = struct.unpack(f"<{n}i", f.read(4 * n))
                if list(saved) != tokens[:n]:
                    return None
                state = f.read(size + 1)
            except (ValueError, KeyError, TypeError, struct.error, OSError):
                return None
        if len(state) != size or hashlib.sha256(state).hexdigest() != header.get("state_sha256"):
            return None
        return SavedPrefix(tokens=tuple(saved), state=state)

    def store(self, tokens: list[int], state: bytes) -> None:
        """Save the state of exactly ``tokens``; failures (a full disk, a read-only home) are ignored:
        the cache only ever saves time."""
        key = tuple(int(t) for t in tokens)
        header = {"format": FORMAT, "model_key": self.model_key, "n_tokens": len(key),
                  "state_bytes": len(state), "state_sha256": hashlib.sha256(state).hexdigest(),
                  "saved_at": int(time.time())}
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".kv")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(json.dumps(header).encode() + b"\n")
                    f.write(struct.pack(f"<{len(key)}i", *key))
                    f.write(state)
                os.replace(tmp, self._path_for(key))
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            self._enforce_cap()
        except OSError:
            return

    def _enforce_cap(self) -> None:
        files = []
        for path in self.directory.glob("*.kv"):
            try:
                st = path.stat()
            except OSError:
                continue
            files.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.cap_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size
