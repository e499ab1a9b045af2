"""Model backends: find a model safely, inspect it, load one Policy and keep it resident.

``load_model(spec)`` and ``inspect_spec(spec)`` dispatch a spec of any kind to its provider's
loader and inspector (``agent/models/providers.py``). The local provider's are here: ``load_policy(path,
device, dtype, backend)``, the process-wide Policy for that model -- a second call with the same
(resolved path, device, dtype, backend) reuses it and loading another model unloads the previous
one first (one resident model) -- and ``inspect_model``, which reports without loading anything
whether a path holds a usable model and why not. ``unload_all`` frees it. Served providers load
in their own modules; ``inspect_served`` inspects any of them.

Backend choice (``backend="auto"``): a ``.gguf`` file, or a directory with exactly one ``.gguf``,
goes to llama.cpp; a directory with ``config.json`` and ``*.safetensors`` goes to transformers.

Paths come from the browser: ``locate.py`` checks them before anything is opened
and ``headers.py`` reads at most headers, within a budget of bytes and work. What the backends
share with this module (install hints, ``ContextOverflow``, where a generation ends) is ``base.py``'s.
This module chooses the backend, inspects, keeps the resident model and dispatches every spec to
its provider.

Exceptions: everything that makes a model unusable raises ``ModelUnavailable`` (from
``agent.models.model_policy``) with a public message; ``ContextOverflow`` is a ``ModelUnavailable`` raised
at generation time when a prompt does not fit the model's context window.
"""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import importlib.util
import os
import platform
import stat
import sys
import threading
from typing import Any, Literal

from agent.models.model_policy import ModelUnavailable, Policy
from agent.models.providers import provider
from agent.models.backends.base import (  # noqa: F401 -- re-exported: the package's surface
    INSTALL_HINTS, ContextOverflow, code_block_end, complete_json_end
)
from agent.models.backends.headers import (  # noqa: F401 -- re-exported: the package's surface (tests, backends)
    MAX_GGUF_SECONDS, MAX_GGUF_STRING_ENTRIES, _Corrupt, _read_small_json, check_weights, read_gguf_header,
    read_safetensors_header
)
from agent.models.backends.locate import ModelLocation, _list_dir, _public_name, _refuse, locate_model  # noqa: F401

Kind = Literal["gguf", "safetensors"]
BackendName = Literal["llama_cpp", "transformers"]

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
        from agent.models.backends import llama_cpp as module
    else:
        from agent.models.backends import transformers_backend as module
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
    """A structured, path-free report on whether ``model_path`` can be loaded here."""
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
# Any ModelSpec, through its provider's entry (agent/models/providers.py) -- no resident cache for served ones
# --------------------------------------------------------------------------------------------


def load_model(spec: Any, access: Any = None, **options: Any) -> Policy:
    """The Policy for a spec of any registered provider: a local one is the resident model
    (``load_policy``, cached); a served one (``openai_compatible``, ``anthropic``) gets a fresh
    client checked against ``access`` (a ``served.ServedAccess``; default: loopback only). Raises
    ``ModelUnavailable``, also for a kind nobody registered."""
    return provider(spec.kind).load(spec, access, **options)


def inspect_spec(spec: Any, access: Any = None) -> dict[str, Any]:
    """Whether the model a spec names can be used here, without loading it (its provider's inspector)."""
    return provider(spec.kind).inspect(spec, access)


def load_local(spec: Any, access: Any = None, **options: Any) -> Policy:
    """The local provider's loader: a path needs no host allowlist, so ``access`` is not used."""
    return load_policy(spec.path, spec.device, spec.dtype, spec.backend, **options)


def inspect_local(spec: Any, access: Any = None) -> dict[str, Any]:
    """The local provider's inspector (``inspect_model`` of the spec's path and settings)."""
    return inspect_model(spec.path, spec.device, spec.dtype, spec.backend)


def inspect_served(spec: Any, access: Any = None, *, transport: Any = None) -> dict[str, Any]:
    """Whether a served model can be used from here: the host allowed, the SDK installed, a key
    where one is pinned, and (a provider whose server lists its models) the server answering
    ``GET /models`` within 5 s and listing the model. Path-free and key-free like ``inspect_model``."""
    from agent.models.backends.served import ServedAccess, ServedModelError, base_url_of, list_models

    kind = spec.kind
    served = provider(kind).served
    if served is None:
        raise ModelUnavailable(f"a {kind} model is not served", code="backend_mismatch")
    sdk = served.sdk
    report: dict[str, Any] = {"ok": False, "kind": kind, "backend": kind, "name": spec.model, "host": None,
                              "dependencies": {sdk: _sdk_version(sdk)}, "key_sent": False, "served": {},
                              "problems": []}
    problems: list[str] = report["problems"]
    access = access or ServedAccess()
    try:
        endpoint = access.endpoint(base_url_of(spec))
        report["host"] = endpoint.netloc
        key = access.key_for(kind, endpoint)
        report["key_sent"] = key is not None
    except ServedModelError as exc:
        report["code"] = exc.code
        problems.append(exc.message)
        return report
    if report["dependencies"][sdk] is None:
        problems.append(f"the {sdk} package is not installed (pip install {sdk})")
        report["code"] = "dependency_missing"
        return report
    if served.lists_models:
        try:
            status, listed = list_models(endpoint, key, transport)
            report["served"] = {"reachable": True, "status": status, "models": listed[:20]}
            if status != 200:
                problems.append(f"GET /models answered HTTP {status}")
            elif listed and spec.model not in listed:
                problems.append(f"the server does not list the model {spec.model!r} (it lists: {', '.join(map(str, listed[:5]))})")
        except ServedModelError as error:  # any failure is a refusal with its bucket
            report["served"] = {"reachable": False}
            report["code"] = error.code
            problems.append(f"{endpoint.netloc}: {error.message}")
    report["ok"] = not problems
    return report


def _sdk_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


__all__ = [
    "ContextOverflow", "ModelLocation", "check_weights", "choose_backend", "dependency_status", "inspect_local",
    "inspect_model", "inspect_served", "inspect_spec", "load_local", "load_model", "load_policy", "loaded_models",
    "locate_model", "unload_all",
]
