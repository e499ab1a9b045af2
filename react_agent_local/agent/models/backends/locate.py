"""Locating a model safely: a path from the browser becomes a checked ``ModelLocation``:
no NUL, ``~`` expanded, links resolved (a loop refused), only regular files and directories, and no
message with an absolute path -- only the base name or ``path_hash``."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent.models.model_policy import ModelUnavailable
from agent.contracts.trace import path_hash, redact_text

Kind = Literal["gguf", "safetensors"]
MAX_DIR_ENTRIES = 2000
GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class ModelLocation:
    """A resolved, checked model. ``path`` is never shown; ``name`` and ``path_hash`` are public."""

    path: Path  # the GGUF file, or the safetensors directory
    kind: Kind
    name: str
    path_hash: str
    weights: tuple[Path, ...]

    @property
    def folder(self) -> Path:
        return self.path if self.kind == "safetensors" else self.path.parent


def _public_name(text: str) -> str:
    name = "".join(ch for ch in text if ch.isprintable())[:80] or "model"
    return redact_text(name)


def _refuse(name: str, reason: str, code: str = "model_unavailable") -> ModelUnavailable:
    return ModelUnavailable(f"{name}: {reason}", code=code)


def _stat_kind(path: Path, name: str) -> os.stat_result:
    """``os.stat`` (follows links) and refuse anything but a regular file or directory."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise _refuse(name, "not found") from None
    except PermissionError:
        raise _refuse(name, "not readable (permission denied)") from None
    except OSError as exc:
        if exc.errno == 40:  # ELOOP
            raise _refuse(name, "symlink loop") from None
        raise _refuse(name, f"cannot be read ({type(exc).__name__})") from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise _refuse(name, "not a regular file or directory (device, FIFO or socket)")
    return st


def _resolve(raw: str | os.PathLike[str]) -> tuple[Path, str]:
    if isinstance(raw, os.PathLike):
        raw = os.fspath(raw)
    if not isinstance(raw, str) or not raw.strip():
        raise ModelUnavailable("model path is empty", code="invalid_model_path")
    if "\x00" in raw:
        raise ModelUnavailable("model path contains a NUL character", code="invalid_model_path")
    expanded = os.path.expanduser(raw.strip())
    name = _public_name(os.path.basename(expanded.rstrip("/\\")) or expanded)
    try:
        resolved = Path(expanded).resolve(strict=True)
    except FileNotFoundError:
        raise _refuse(name, "not found") from None
    except RuntimeError:  # Python 3.11 reports a symlink loop this way
        raise _refuse(name, "symlink loop") from None
    except OSError as exc:
        if exc.errno == 40:
            raise _refuse(name, "symlink loop") from None
        raise _refuse(name, f"cannot be resolved ({type(exc).__name__})") from None
    return resolved, name


def _list_dir(path: Path, name: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            entries = []
            for entry in it:
                entries.append(entry)
                if len(entries) > MAX_DIR_ENTRIES:
                    raise _refuse(name, f"directory has more than {MAX_DIR_ENTRIES} entries; not a model")
    except PermissionError:
        raise _refuse(name, "directory not readable (permission denied)") from None
    return sorted(entries, key=lambda e: e.name)


def _regular_member(path: Path, name: str) -> Path:
    """A file inside a model folder: resolve links (the hub cache uses them), refuse non-regular."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise _refuse(name, f"{path.name} is a broken link or a symlink loop") from None
    st = _stat_kind(real, name)
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(name, f"{path.name} is not a regular file")
    return real


NOT_A_MODEL = "not a model (expected a GGUF file, or a directory with config.json and *.safetensors)"


def locate_model(model_path: str | os.PathLike[str]) -> ModelLocation:
    """Resolve ``model_path`` safely and decide what it is; raises ``ModelUnavailable``."""
    resolved, name = _resolve(model_path)
    st = _stat_kind(resolved, name)
    if stat.S_ISREG(st.st_mode):
        if not _has_gguf_magic(resolved, name):
            raise _refuse(name, NOT_A_MODEL, code="not_a_model")
        return ModelLocation(resolved, "gguf", _public_name(resolved.name), path_hash(str(resolved)), (resolved,))
    entries = _list_dir(resolved, name)
    names = {e.name for e in entries}
    safetensors = [resolved / e.name for e in entries if e.name.endswith(".safetensors")]
    ggufs = [resolved / e.name for e in entries if e.name.lower().endswith(".gguf")]
    if "config.json" in names and safetensors:
        weights = tuple(_regular_member(p, name) for p in safetensors)
        _regular_member(resolved / "config.json", name)
        return ModelLocation(resolved, "safetensors", name, path_hash(str(resolved)), weights)
    if len(ggufs) == 1:
        real = _regular_member(ggufs[0], name)
        if not _has_gguf_magic(real, name):
            raise _refuse(name, f"{ggufs[0].name} is not a GGUF file", code="not_a_model")
        return ModelLocation(real, "gguf", _public_name(ggufs[0].name), path_hash(str(real)), (real,))
    if len(ggufs) > 1:
        raise _refuse(name, f"holds {len(ggufs)} GGUF files; pass the one to load", code="not_a_model")
    if "config.json" in names:
        raise _refuse(name, "has config.json but no *.safetensors weights", code="not_a_model")
    raise _refuse(name, NOT_A_MODEL, code="not_a_model")


def _has_gguf_magic(path: Path, name: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError as exc:
        raise _refuse(name, f"cannot be read ({type(exc).__name__})") from None


