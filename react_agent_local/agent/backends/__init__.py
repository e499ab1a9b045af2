"""Model backends: find a model safely, inspect it, load one Policy and keep it resident (R-MOD).

``load_model(spec)`` returns the Policy of any ``ModelSpec``: served ones (``served.py``) directly,
local ones through ``load_policy(path, device, dtype, backend)``, the process-wide Policy for that model; a
second call with the same (resolved path, device, dtype, backend) reuses it and loading another
model unloads the previous one first (one resident model). ``inspect_model`` reports, without
loading anything, whether a path holds a usable model and why not. ``unload_all`` frees it.

Backend choice (``backend="auto"``): a ``.gguf`` file, or a directory with exactly one ``.gguf``,
goes to llama.cpp; a directory with ``config.json`` and ``*.safetensors`` goes to transformers.

Paths come from the browser (SECURITY 9-10), so before anything is opened: no NUL, ``~`` expanded,
symlinks resolved (a loop is refused), only regular files and directories (no devices or FIFOs),
at most headers read (GGUF key/values and tensor table, the safetensors JSON header, small JSON
files), and no message carries an absolute path -- only the base name or ``path_hash``.

Exceptions: everything that makes a model unusable raises ``ModelUnavailable`` (from
``agent.model_policy``) with a public message; ``ContextOverflow`` is a ``ModelUnavailable`` raised
at generation time when a prompt does not fit the model's context window.
"""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import stat
import struct
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from ..model_policy import ModelUnavailable, Policy
from ..trace import path_hash, redact_text

Kind = Literal["gguf", "safetensors"]
BackendName = Literal["llama_cpp", "transformers"]

MAX_DIR_ENTRIES = 2000
MAX_JSON_BYTES = 4 << 20  # config.json, tokenizer_config.json, provenance.json
MAX_SAFETENSORS_HEADER = 100 << 20  # the format's own limit
MAX_GGUF_META_BYTES = 256 << 20  # key/values + tensor table; Qwen's is about 6 MB
MAX_GGUF_STRING = 16 << 20
#: The work budget of one GGUF header read, besides its bytes: strings are parsed one by one, so a
#: tiny sparse file declaring a 4-million-entry string array would cost seconds of CPU. Real models
#: declare a few hundred thousand (Qwen2.5: 151k tokens + 151k merges). Checked when declared.
MAX_GGUF_STRING_ENTRIES = 1 << 20
MAX_GGUF_SECONDS = 5.0  # a backstop on the whole read
GGUF_MAGIC = b"GGUF"

INSTALL_HINTS = {
    "llama_cpp": "pip install llama-cpp-python==0.3.36 (builds from source, a few minutes)",
    "torch": "pip install torch (CPU wheel) and transformers",
    "transformers": "pip install transformers",
}


class ContextOverflow(ModelUnavailable):
    """The prompt plus the tokens to generate do not fit the model's context window."""

    def __init__(self, message: str):
        super().__init__(message, code="context_overflow")


_JSON_VALUE_STARTS = frozenset('{["-0123456789tfn')


def complete_json_end(text: str) -> int | None:
    """Index just past the first complete JSON value in ``text`` (after leading space), else None.

    A number/true/false/null only counts once something follows it (``12`` may become ``123``).
    """
    stripped = text.lstrip()
    if not stripped or stripped[0] not in _JSON_VALUE_STARTS:
        return None
    try:
        value, end = json.JSONDecoder().raw_decode(stripped)
    except (ValueError, RecursionError):  # deep nesting is parse_decision's to refuse, not a crash here
        return None
    if not isinstance(value, (dict, list, str)) and end >= len(stripped):
        return None
    return len(text) - len(stripped) + end


# --------------------------------------------------------------------------------------------
# Locating a model safely
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Header readers (bounded)
# --------------------------------------------------------------------------------------------


class _Corrupt(Exception):
    pass


class _BoundedReader:
    """Reads a file front to back within a budget: bytes, declared string entries and time."""

    _U64 = struct.Struct("<Q")

    def __init__(self, f: BinaryIO, size: int, budget: int):
        self.f, self.size, self.budget = f, size, budget
        self.strings_left = MAX_GGUF_STRING_ENTRIES
        self.deadline = time.monotonic() + MAX_GGUF_SECONDS

    def spend_strings(self, count: int) -> None:
        """Reserve ``count`` strings of work before parsing them; refuse at once past the budget."""
        if count > self.strings_left:
            raise _Corrupt(f"declares more than {MAX_GGUF_STRING_ENTRIES} strings, past the reading budget")
        self.strings_left -= count
        self.check_time()

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise _Corrupt("metadata takes longer than the reading budget")

    @property
    def pos(self) -> int:
        return self.f.tell()

    def read(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.size:
            raise _Corrupt("truncated")
        if self.pos + n > self.budget:
            raise _Corrupt("metadata larger than the reading limit")
        data = self.f.read(n)
        if len(data) != n:
            raise _Corrupt("truncated")
        return data

    def skip(self, n: int) -> None:
        if n < 0 or self.pos + n > self.size:
            raise _Corrupt("truncated")
        self.f.seek(n, os.SEEK_CUR)

    def u32(self) -> int:
        return struct.unpack("<I", self.read(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.read(8))[0]

    def skip_strings(self, count: int) -> None:
        """Skip ``count`` strings (already spent), reading their lengths from 1 MiB blocks."""
        pos = base = self.pos
        block = b""
        for i in range(count):
            if pos + 8 > base + len(block):
                if pos + 8 > self.size:
                    raise _Corrupt("truncated")
                if pos + 8 > self.budget:
                    raise _Corrupt("metadata larger than the reading limit")
                self.f.seek(pos)
                base, block = pos, self.f.read(min(1 << 20, self.size - pos))
                if len(block) < 8:  # the file shrank while being read
                    raise _Corrupt("truncated")
            n = self._U64.unpack_from(block, pos - base)[0]
            if n > MAX_GGUF_STRING:
                raise _Corrupt("string length out of range")
            pos += 8 + n
            if not i & 0xFFFF:
                self.check_time()
        if pos > self.size:
            raise _Corrupt("truncated")
        if pos > self.budget:
            raise _Corrupt("metadata larger than the reading limit")
        self.f.seek(pos)

    def string(self, keep: bool = True) -> str | None:
        n = self.u64()
        if n > MAX_GGUF_STRING:
            raise _Corrupt("string length out of range")
        if not keep:
            self.skip(n)
            return None
        return self.read(n).decode("utf-8", errors="replace")


# GGUF value types: size of the fixed-size ones, struct format for the scalars we keep.
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_GGUF_KEEP_STRINGS = ("general.", "tokenizer.chat_template", "tokenizer.ggml.model", "tokenizer.ggml.pre")


def _ggml_type_sizes() -> dict[int, tuple[int, int]]:
    try:
        from gguf.constants import GGML_QUANT_SIZES

        return {int(k): v for k, v in GGML_QUANT_SIZES.items()}
    except Exception:  # the gguf package is optional; without it tensor extents are not checked
        return {}


def read_gguf_header(path: Path) -> dict[str, Any]:
    """Parse a GGUF header: version, key/values (large arrays skipped), tensor table, extents.

    Raises ``_Corrupt`` for anything malformed or truncated. Reads at most ``MAX_GGUF_META_BYTES``,
    parses at most ``MAX_GGUF_STRING_ENTRIES`` strings and stops after ``MAX_GGUF_SECONDS``.
    """
    size = path.stat().st_size
    meta: dict[str, Any] = {}
    with open(path, "rb") as f:
        r = _BoundedReader(f, size, MAX_GGUF_META_BYTES)
        if r.read(4) != GGUF_MAGIC:
            raise _Corrupt("no GGUF magic")
        version = r.u32()
        if version not in (2, 3):
            raise _Corrupt(f"unsupported GGUF version {version}")
        n_tensors, n_kv = r.u64(), r.u64()
        if n_tensors > 100_000 or n_kv > 100_000:
            raise _Corrupt("implausible tensor or key count")
        r.spend_strings(n_kv + n_tensors)  # every key and tensor name is a string
        for _ in range(n_kv):
            r.check_time()
            key = r.string() or ""
            vtype = r.u32()
            keep = key.startswith(_GGUF_KEEP_STRINGS) or key.endswith(
                (".context_length", ".block_count", ".embedding_length", ".attention.head_count"))
            if vtype in _GGUF_SCALARS:
                fmt = _GGUF_SCALARS[vtype]
                meta[key] = struct.unpack(fmt, r.read(struct.calcsize(fmt)))[0]
            elif vtype == _GGUF_STRING:
                value = r.string(keep=keep)
                if value is not None:
                    meta[key] = value
            elif vtype == _GGUF_ARRAY:
                etype, count = r.u32(), r.u64()
                if count > 50_000_000:
                    raise _Corrupt("array length out of range")
                if etype in _GGUF_SCALARS:
                    r.skip(count * struct.calcsize(_GGUF_SCALARS[etype]))
                elif etype == _GGUF_STRING:
                    r.spend_strings(count)
                    r.skip_strings(count)
                else:
                    raise _Corrupt(f"unsupported array element type {etype}")
                meta[key] = f"<array of {count}>"
                if key == "tokenizer.ggml.tokens":
                    meta["_vocab_size"] = count
            else:
                raise _Corrupt(f"unknown value type {vtype}")
        sizes = _ggml_type_sizes()
        end_of_data = 0
        for _ in range(n_tensors):
            r.check_time()
            r.string(keep=False)
            n_dims = r.u32()
            if n_dims > 8:
                raise _Corrupt("tensor rank out of range")
            dims = [r.u64() for _ in range(n_dims)]
            ttype, offset = r.u32(), r.u64()
            if ttype in sizes:
                block, type_size = sizes[ttype]
                elements = 1
                for d in dims:
                    elements *= d
                end_of_data = max(end_of_data, offset + elements // max(block, 1) * type_size)
        alignment = int(meta.get("general.alignment", 32) or 32)
        data_start = (r.pos + alignment - 1) // alignment * alignment
    if data_start + end_of_data > size:
        raise _Corrupt("truncated (tensor data ends past the end of the file)")
    return {"version": version, "tensor_count": n_tensors, "kv_count": n_kv, "metadata": meta,
            "data_bytes": end_of_data}


def read_safetensors_header(path: Path) -> dict[str, Any]:
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise _Corrupt("truncated")
        n = struct.unpack("<Q", head)[0]
        if n > MAX_SAFETENSORS_HEADER or n + 8 > size:
            raise _Corrupt("header length out of range")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise _Corrupt("header is not JSON") from None
    if not isinstance(header, dict):
        raise _Corrupt("header is not a JSON object")
    end, dtypes, count = 0, set(), 0
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        try:
            begin, stop = entry["data_offsets"]
            dtypes.add(str(entry["dtype"]))
        except (KeyError, TypeError, ValueError):
            raise _Corrupt("tensor entry without dtype/data_offsets") from None
        if not (isinstance(begin, int) and isinstance(stop, int) and 0 <= begin <= stop):
            raise _Corrupt("bad data_offsets")
        end, count = max(end, stop), count + 1
    if 8 + n + end > size:
        raise _Corrupt("truncated (tensor data ends past the end of the file)")
    return {"tensor_count": count, "dtypes": sorted(dtypes), "data_bytes": end}


def _read_small_json(path: Path, name: str) -> dict[str, Any] | None:
    try:
        real = _regular_member(path, name)
        if real.stat().st_size > MAX_JSON_BYTES:
            return None
        data = json.loads(real.read_bytes())
        return data if isinstance(data, dict) else None
    except (ModelUnavailable, OSError, ValueError, UnicodeDecodeError):
        return None


def check_weights(loc: ModelLocation) -> dict[str, Any]:
    """Header check of every weights file; raises ``ModelUnavailable`` when one is unusable."""
    try:
        if loc.kind == "gguf":
            return {"format": "gguf", **read_gguf_header(loc.path)}
        reports = [read_safetensors_header(p) for p in loc.weights]
        return {"format": "safetensors", "files": len(reports),
                "tensor_count": sum(r["tensor_count"] for r in reports),
                "dtypes": sorted({d for r in reports for d in r["dtypes"]})}
    except _Corrupt as exc:
        raise _refuse(loc.name, f"weights are corrupt or truncated ({exc})", code="weights_unreadable") from None
    except OSError as exc:
        raise _refuse(loc.name, f"weights cannot be read ({type(exc).__name__})", code="weights_unreadable") from None


# --------------------------------------------------------------------------------------------
# Dependencies, devices
# --------------------------------------------------------------------------------------------

_BACKEND_DEPS: dict[str, tuple[str, ...]] = {"llama_cpp": ("llama_cpp",), "transformers": ("torch", "transformers")}
_DIST_NAMES = {"llama_cpp": "llama-cpp-python", "torch": "torch", "transformers": "transformers"}


def dependency_status(module: str, do_import: bool) -> dict[str, Any]:
    """Version of an inference dependency, imported only when ``do_import`` (a backend needs it)."""
    try:
        version: str | None = importlib.metadata.version(_DIST_NAMES[module])
    except importlib.metadata.PackageNotFoundError:
        version = None
    if importlib.util.find_spec(module) is None:
        return {"version": None, "error": "missing", "hint": INSTALL_HINTS[module]}
    if not do_import:
        return {"version": version, "error": None, "imported": False}
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # a broken build raises anything from OSError to RuntimeError
        return {"version": version, "error": "import_failed", "detail": type(exc).__name__,
                "hint": INSTALL_HINTS[module]}
    return {"version": getattr(mod, "__version__", version), "error": None, "imported": True}


def choose_backend(loc: ModelLocation, backend: str) -> BackendName:
    if backend == "auto":
        return "llama_cpp" if loc.kind == "gguf" else "transformers"
    if backend == "llama_cpp" and loc.kind != "gguf":
        raise _refuse(loc.name, "the llama_cpp backend needs a GGUF file", code="backend_mismatch")
    if backend not in ("llama_cpp", "transformers"):
        raise ModelUnavailable(f"unknown backend {backend!r}", code="backend_mismatch")
    return backend  # type: ignore[return-value]


def _backend_module(backend: BackendName):
    if backend == "llama_cpp":
        from . import llama_cpp as module
    else:
        from . import transformers_backend as module
    return module


# --------------------------------------------------------------------------------------------
# Inspect
# --------------------------------------------------------------------------------------------


def _files_report(loc: ModelLocation) -> list[dict[str, Any]]:
    if loc.kind == "gguf":
        return [{"name": loc.name, "bytes": loc.path.stat().st_size}]
    out = []
    for entry in _list_dir(loc.path, loc.name):
        try:
            st = os.stat(entry.path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            out.append({"name": _public_name(entry.name), "bytes": st.st_size})
    return out


def _config_report(loc: ModelLocation, header: dict[str, Any] | None) -> dict[str, Any]:
    if loc.kind == "gguf":
        meta = (header or {}).get("metadata", {})
        arch = meta.get("general.architecture")
        return {k: v for k, v in {
            "architecture": arch,
            "model_name": meta.get("general.name"),
            "context_length": meta.get(f"{arch}.context_length"),
            "layers": meta.get(f"{arch}.block_count"),
            "hidden_size": meta.get(f"{arch}.embedding_length"),
            "vocab_size": meta.get("_vocab_size"),
            "file_type": meta.get("general.file_type"),
            "tokenizer_model": meta.get("tokenizer.ggml.model"),
        }.items() if v is not None}
    cfg = _read_small_json(loc.path / "config.json", loc.name) or {}
    keys = ("model_type", "architectures", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "vocab_size", "max_position_embeddings", "torch_dtype", "dtype", "tie_word_embeddings")
    return {k: cfg[k] for k in keys if k in cfg}


def _tokenizer_report(loc: ModelLocation, header: dict[str, Any] | None) -> dict[str, bool]:
    if loc.kind == "gguf":
        meta = (header or {}).get("metadata", {})
        return {"present": "tokenizer.ggml.tokens" in meta,
                "chat_template": bool(meta.get("tokenizer.chat_template"))}
    folder = loc.path
    present = any((folder / n).is_file() for n in ("tokenizer.json", "tokenizer.model")) or (
        (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file())
    tok_cfg = _read_small_json(folder / "tokenizer_config.json", loc.name) or {}
    template = bool(tok_cfg.get("chat_template")) or (folder / "chat_template.jinja").is_file() or (
        folder / "chat_template.json").is_file()
    return {"present": present, "chat_template": template}


def _provenance(loc: ModelLocation) -> dict[str, Any] | None:
    data = _read_small_json(loc.folder / "provenance.json", loc.name)
    if not data:
        return None
    keys = ("preset", "source", "repository", "resolved_revision", "created_at")
    return {k: data.get(k) for k in keys if isinstance(data.get(k), (str, type(None)))}


def inspect_model(model_path: str | os.PathLike[str], device: str = "auto", dtype: str = "auto",
                  backend: str = "auto") -> dict[str, Any]:
    """A structured, path-free report on whether ``model_path`` can be loaded here (R-MOD-4)."""
    report: dict[str, Any] = {
        "ok": False, "backend": None, "kind": None, "name": None, "path_hash": None, "files": [],
        "config": {}, "tokenizer": {"present": False, "chat_template": False}, "weights": {"readable": False},
        "dependencies": {}, "python": platform.python_version(), "device": None, "dtype": None,
        "provenance": None, "problems": [],
    }
    problems: list[str] = report["problems"]
    try:
        loc = locate_model(model_path)
    except ModelUnavailable as exc:
        problems.append(exc.message)
        report["code"] = exc.code
        report["dependencies"] = {m: dependency_status(m, False) for m in _DIST_NAMES}
        return report
    report.update(kind=loc.kind, name=loc.name, path_hash=loc.path_hash, files=_files_report(loc),
                  provenance=_provenance(loc))
    header = None
    try:
        weights = check_weights(loc)
        header = weights if loc.kind == "gguf" else None
        report["weights"] = {"readable": True, **{k: v for k, v in weights.items() if k != "metadata"}}
    except ModelUnavailable as exc:
        problems.append(exc.message)
        report["code"] = exc.code
    report["config"] = _config_report(loc, header)
    report["tokenizer"] = _tokenizer_report(loc, header)
    if loc.kind == "safetensors" and not report["config"]:
        problems.append(f"{loc.name}: config.json is missing or unreadable")
    if header is not None or loc.kind == "safetensors":
        if not report["tokenizer"]["present"]:
            problems.append(f"{loc.name}: no tokenizer")
        if not report["tokenizer"]["chat_template"]:
            problems.append(f"{loc.name}: no chat template")
    try:
        chosen = choose_backend(loc, backend)
    except ModelUnavailable as exc:
        problems.append(exc.message)
        report["dependencies"] = {m: dependency_status(m, False) for m in _DIST_NAMES}
        return report
    report["backend"] = chosen
    needed = _BACKEND_DEPS[chosen]
    report["dependencies"] = {m: dependency_status(m, m in needed) for m in _DIST_NAMES}
    if chosen == "transformers" and loc.kind == "gguf" and importlib.util.find_spec("gguf") is None:
        problems.append("transformers needs the gguf package to read GGUF files (pip install gguf)")
    broken = [m for m in needed if report["dependencies"][m]["error"]]
    for m in broken:
        dep = report["dependencies"][m]
        problems.append(f"{m} is {'not installed' if dep['error'] == 'missing' else 'installed but fails to import'}"
                        f" ({INSTALL_HINTS[m]})")
    if not broken:
        try:
            report["device"], report["dtype"] = _backend_module(chosen).resolve_device_dtype(device, dtype)
        except ModelUnavailable as exc:
            problems.append(exc.message)
    if not problems:
        report["ok"] = True
    return report


# --------------------------------------------------------------------------------------------
# The resident model
# --------------------------------------------------------------------------------------------

_LOCK = threading.RLock()
_RESIDENT: tuple[tuple[str, str, str, str], Policy] | None = None


def load_policy(model_path: str | os.PathLike[str], device: str = "auto", dtype: str = "auto",
                backend: str = "auto", **options: Any) -> Policy:
    """The process-wide Policy for this model; loads it (unloading any other) when needed.

    ``options`` go to the backend's constructor (e.g. ``n_ctx`` for llama.cpp).
    Raises ``ModelUnavailable`` (path, weights, dependency, device or dtype).
    """
    global _RESIDENT
    loc = locate_model(model_path)
    chosen = choose_backend(loc, backend)
    with _LOCK:
        key = (str(loc.path), device, dtype, chosen)
        if _RESIDENT is not None and _RESIDENT[0] == key:
            return _RESIDENT[1]
        check_weights(loc)
        module = _backend_module(chosen)
        _unload_locked()
        policy = module.load(loc, device=device, dtype=dtype, **options)
        _RESIDENT = (key, policy)
        return policy


def _unload_locked() -> list[dict[str, Any]]:
    global _RESIDENT
    if _RESIDENT is None:
        return []
    policy = _RESIDENT[1]
    _RESIDENT = None
    freed = [policy.description.public()]
    close = getattr(policy, "close", None)
    if close is not None:
        close()
    del policy
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "cuda", None) is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()
    return freed


def unload_all() -> dict[str, Any]:
    """Free the resident model (waits for a generation in progress to finish)."""
    with _LOCK:
        freed = _unload_locked()
    return {"unloaded": freed, "count": len(freed)}


def loaded_models() -> list[dict[str, Any]]:
    # No lock: /status must answer while a load holds _LOCK; reading one reference is atomic.
    resident = _RESIDENT
    return [] if resident is None else [resident[1].description.public()]


# --------------------------------------------------------------------------------------------
# Any ModelSpec: local models above, served ones (backends/served.py) -- no resident cache for those
# --------------------------------------------------------------------------------------------


def load_model(spec: Any, access: Any = None, **options: Any) -> Policy:
    """The Policy for a ``ModelSpec``: a local spec goes to ``load_policy`` (resident, cached); a
    served one (``openai_compatible``, ``anthropic``) gets a fresh client checked against
    ``access`` (a ``served.ServedAccess``; default: loopback only). Raises ``ModelUnavailable``."""
    if spec.kind == "local":
        return load_policy(spec.path, spec.device, spec.dtype, spec.backend, **options)
    if spec.kind == "openai_compatible":
        from .openai_compatible import load
    elif spec.kind == "anthropic":
        from .anthropic_client import load
    else:
        raise ModelUnavailable(f"unknown model kind {spec.kind!r}", code="backend_mismatch")
    return load(spec, access, **options)


def inspect_served(spec: Any, access: Any = None, *, transport: Any = None) -> dict[str, Any]:
    """Whether a served model can be used from here: the host allowed, the SDK installed, a key
    where one is sent, and (OpenAI-compatible) the server answering ``GET /models`` within 5 s
    and listing the model. Path-free and key-free like ``inspect_model``."""
    from .served import ServedAccess, ServedModelError, api_key, base_url_of, classify

    kind = spec.kind
    sdk = {"openai_compatible": "openai", "anthropic": "anthropic"}[kind]
    report: dict[str, Any] = {"ok": False, "kind": kind, "backend": kind, "name": spec.model, "host": None,
                              "dependencies": {sdk: _sdk_version(sdk)}, "key_sent": False, "served": {},
                              "problems": []}
    problems: list[str] = report["problems"]
    access = access or ServedAccess()
    try:
        endpoint = access.endpoint(base_url_of(spec))
        report["host"] = endpoint.netloc
        report["key_sent"] = api_key(spec.api_key_env, endpoint) is not None
    except ServedModelError as exc:
        report["code"] = exc.code
        problems.append(exc.message)
        return report
    if report["dependencies"][sdk] is None:
        problems.append(f"the {sdk} package is not installed (pip install {sdk})")
        report["code"] = "dependency_missing"
        return report
    if kind == "openai_compatible":
        from .served import http_client
        import httpx2

        client = http_client(transport)
        try:
            response = client.get(endpoint.base_url + "/models", timeout=httpx2.Timeout(5.0))
            listed = [m.get("id") for m in (response.json().get("data") or []) if isinstance(m, dict)] \
                if response.status_code == 200 else []
            report["served"] = {"reachable": True, "status": response.status_code, "models": listed[:20]}
            if response.status_code != 200:
                problems.append(f"GET /models answered HTTP {response.status_code}")
            elif listed and spec.model not in listed:
                problems.append(f"the server does not list the model {spec.model!r} (it lists: {', '.join(map(str, listed[:5]))})")
        except Exception as exc:  # noqa: BLE001 -- any failure is a refusal with its bucket
            error = classify(exc)
            report["served"] = {"reachable": False}
            report["code"] = error.code
            problems.append(f"{endpoint.netloc}: {error.message}")
        finally:
            client.close()
    report["ok"] = not problems
    return report


def _sdk_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


__all__ = [
    "ContextOverflow", "ModelLocation", "check_weights", "choose_backend", "dependency_status",
    "inspect_model", "inspect_served", "load_model", "load_policy", "loaded_models", "locate_model", "unload_all",
]
