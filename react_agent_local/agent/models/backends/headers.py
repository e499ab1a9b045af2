"""Bounded header readers: GGUF key/values and tensor table, the safetensors JSON header, small JSON
files -- by bytes read and by work done (a sparse GGUF declaring millions of entries costs bounded CPU)."""

from __future__ import annotations

import ctypes
import functools
import json
import os
import struct
import time
from pathlib import Path
from typing import Any, BinaryIO

from agent.models.model_policy import ModelUnavailable

from agent.models.backends.locate import GGUF_MAGIC, ModelLocation, _refuse, _regular_member

MAX_JSON_BYTES = 4 << 20  # config.json, tokenizer_config.json, provenance.json
MAX_SAFETENSORS_HEADER = 100 << 20  # the format's own limit
MAX_GGUF_META_BYTES = 256 << 20  # key/values + tensor table; a real model's is a few MB
MAX_GGUF_STRING = 16 << 20
#: The work budget of one GGUF header read, besides its bytes: strings are parsed one by one, so a
#: tiny sparse file declaring a 4-million-entry string array would cost seconds of CPU. Real models
#: declare a few hundred thousand (their tokens and merges). Checked when declared.
MAX_GGUF_STRING_ENTRIES = 1 << 20
#: A backstop on the whole read, in this thread's CPU seconds: on a machine whose cores other
#: processes hold, a valid header's read waits for the CPU far longer than it uses it (niced beside a
#: busy model server, many seconds of wall time), and the waiting is not the file's fault.
MAX_GGUF_SECONDS = 5.0


class _Corrupt(Exception):
    pass


class _BoundedReader:
    """Reads a file front to back within a budget: bytes, declared string entries and time."""

    _U64 = struct.Struct("<Q")

    def __init__(self, f: BinaryIO, size: int, budget: int):
        self.f, self.size, self.budget = f, size, budget
        self.strings_left = MAX_GGUF_STRING_ENTRIES
        self.deadline = time.thread_time() + MAX_GGUF_SECONDS

    def spend_strings(self, count: int) -> None:
        """Reserve ``count`` strings of work before parsing them; refuse at once past the budget."""
        if count > self.strings_left:
            raise _Corrupt(f"declares more than {MAX_GGUF_STRING_ENTRIES} strings, past the reading budget")
        self.strings_left -= count
        self.check_time()

    def check_time(self) -> None:
        if time.thread_time() > self.deadline:
            raise _Corrupt(f"reading its metadata took more than {MAX_GGUF_SECONDS:g} s of CPU")

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


@functools.cache  # one table a process: it is read for every GGUF header
def _ggml_type_sizes() -> dict[int, tuple[int, int]]:
    """Elements per block and bytes per block of each ggml tensor type, from the ggml that will read
    the file (llama-cpp-python's own build); else from the ``gguf`` package; else none, and tensor
    extents are not checked. (The ``gguf`` package alone costs a CLI run ~3 MiB resident.)"""
    try:
        from agent.models.backends.llama_cpp import _import_llama_cpp

        llama_cpp = _import_llama_cpp()  # as the backend imports it (the OpenMP setting first)
        from llama_cpp._ggml import libggml

        libggml.ggml_blck_size.argtypes = libggml.ggml_type_size.argtypes = [ctypes.c_int]
        libggml.ggml_blck_size.restype, libggml.ggml_type_size.restype = ctypes.c_int64, ctypes.c_size_t
        # the bindings and the library are one build: GGML_TYPE_COUNT bounds its type table
        blocks = {t: (int(libggml.ggml_blck_size(t)), int(libggml.ggml_type_size(t)))
                  for t in range(int(llama_cpp.GGML_TYPE_COUNT))}
        return {t: sizes for t, sizes in blocks.items() if sizes[0] > 0}  # removed types have no block
    except Exception:
        pass
    try:
        from gguf.constants import GGML_QUANT_SIZES

        return {int(k): v for k, v in GGML_QUANT_SIZES.items()}
    except Exception:
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
        alignment = _alignment(meta.get("general.alignment", 32))
        data_start = (r.pos + alignment - 1) // alignment * alignment
    if data_start + end_of_data > size:
        raise _Corrupt("truncated (tensor data ends past the end of the file)")
    return {"version": version, "tensor_count": n_tensors, "kv_count": n_kv, "metadata": meta,
            "data_bytes": end_of_data}


MAX_GGUF_ALIGNMENT = 1 << 20


def _alignment(value: Any) -> int:
    """``general.alignment``: a power of two, as llama.cpp requires; anything else -- a string, a
    float, a bool, an array, zero, a huge number -- makes the file corrupt, not a bug of ours."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_GGUF_ALIGNMENT \
            or value & (value - 1):
        raise _Corrupt("general.alignment is not a power of two")
    return value


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


