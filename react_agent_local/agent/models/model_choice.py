"""Which model a command or a request names: flags or an HTTP body become a ``ModelSpec``, checked,
and the loader of its Policy.

The terminal (``react-agent run``, ``eval``, ``chat``): ``add_model_arguments`` declares the model
flags, ``model_spec`` turns them into a spec -- a provider's prefix (``openai:URL#NAME``,
``anthropic:NAME``, one per entry of ``agent/models/providers.py``), ``--served KIND`` with ``--base-url``
and ``--model-name``, a local path, or the default download (``default_model``) -- and ``load_spec``
loads it with ``terminal_access``: the one typing is the operator, so the origin on the command line
is allowed and gets the key of ``--api-key-env``.

The runner (``agent/runner/server.py``) gets the spec from a parsed body and calls ``check_request_model``
before it queues a job (a local path is checked without reading it; a served model's host against
the operator's allowlist, and a body may not choose a key) and ``policy_loader`` to load it inside
the job, through the same allowlist.

Exceptions::

    ModelChoiceError   (ValueError) the flags name no usable model: one operator-facing sentence
    ModelRefused       a request's model is refused before any job: ``status``, ``code``, ``message``
                       and the error body's ``extra`` fields (the runner sends them as they are)
    ModelUnavailable   (agent.models.model_policy) raised by the loaders when the model cannot be used
"""

from __future__ import annotations

import argparse
import os
import re
import stat
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from pydantic import ValidationError

from agent.models.model_policy import ModelUnavailable
from agent.util.paths import user_cache
from agent.models.providers import LocalModelSpec, ModelSpec, by_prefix, provider, served_kinds

MODEL_CACHE = Path(os.environ.get("REACT_AGENT_MODEL_DIR", user_cache("models")))
DEFAULT_MODEL_CANDIDATES = (
    "qwen2.5-coder-1.5b-gguf/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "qwen2.5-1.5b-instruct",
    "qwen2.5-coder-0.5b-gguf/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "qwen2.5-0.5b-instruct",
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ModelChoiceError(ValueError):
    """The model flags name no usable model (the message is one operator-facing sentence)."""


class ModelRefused(Exception):
    """A request's model is refused before a job is queued; ``extra`` holds the error body's other fields."""

    def __init__(self, status: int, code: str, message: str, **extra: Any):
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra


def default_model() -> Path | None:
    """The first downloaded model of ``DEFAULT_MODEL_CANDIDATES`` in ``MODEL_CACHE``, else None."""
    for candidate in DEFAULT_MODEL_CANDIDATES:
        path = MODEL_CACHE / candidate
        if path.exists():
            return path
    return None


# --------------------------------------------------------------------------------------------
# The terminal: flags -> spec -> Policy
# --------------------------------------------------------------------------------------------


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The model flags of ``run``, ``eval`` and ``chat``: a local file or folder, or a served model."""
    parser.add_argument("--model", default=None,
                        help="GGUF file or model directory (default: the downloaded 1.5B); or a served model: "
                             "openai:BASE_URL#NAME (an OpenAI-compatible server, e.g. openai:http://127.0.0.1:8080/v1#qwen) "
                             "or anthropic:NAME")
    parser.add_argument("--served", default=None, choices=served_kinds(),
                        help="a served model given by --base-url and --model-name instead of --model")
    parser.add_argument("--base-url", default=None, help="the served model's base URL (e.g. http://127.0.0.1:8000/v1)")
    parser.add_argument("--model-name", default=None, help="the served model's name, as its server lists it")
    parser.add_argument("--api-key-env", default=None, metavar="NAME",
                        help="environment variable holding the served model's key (default OPENAI_API_KEY / "
                             "ANTHROPIC_API_KEY); the key itself is never an argument")
    parser.add_argument("--strict-tools", action="store_true", help="send strict tool schemas (OpenAI's API)")
    parser.add_argument("--backend", default="auto", choices=["auto", "llama_cpp", "transformers"])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])


def provider_spec(args: argparse.Namespace) -> Any:
    """The spec a provider's prefix names (``--model openai:URL#NAME``, ``--model anthropic:NAME``)
    or ``--served KIND --base-url URL --model-name NAME`` does; None for a local model. ValueError
    (or pydantic's ValidationError) when the flags do not make a valid spec."""
    model = args.model or ""
    entry = by_prefix(model)
    if entry is not None:
        data: dict[str, Any] = {"base_url": args.base_url, **entry.from_prefix(model[len(entry.prefix or ""):])}
    elif args.served is not None:
        entry = provider(args.served)
        data = {"base_url": args.base_url, "model": args.model if args.model_name is None else args.model_name}
    else:
        return None
    if not data.get("model"):
        raise ValueError("a served model needs its name (--model-name NAME)")
    base_url = data.pop("base_url")
    served = entry.served
    if base_url:
        data["base_url"] = base_url
    elif served is not None and served.default_base_url is None:
        raise ValueError(f"an {entry.label} model needs --base-url (e.g. http://127.0.0.1:8080/v1)")
    if args.api_key_env:
        if served is not None:
            origin = _origin_of(base_url or served.default_base_url)
            if origin.scheme != "https" and not origin.loopback:
                raise ValueError(f"--api-key-env: a key is sent over https only (or to a loopback host), not to {origin}")
        data["api_key_env"] = args.api_key_env
    if args.strict_tools:
        data["strict_tools"] = True
    return entry.spec.model_validate({"kind": entry.kind, **data})


def model_spec(args: argparse.Namespace) -> ModelSpec:
    """The ModelSpec the model flags name: a provider's model, the given local path, or the default download."""
    try:
        named = provider_spec(args)
        if named is not None:
            return named
        model = Path(args.model).expanduser() if args.model else default_model()
        if model is None:
            raise ModelChoiceError("no local model found. Download one first, e.g.\n"
                                   "  python download_model.py --preset qwen2.5-coder-1.5b-gguf\n"
                                   "then run again (or pass --model PATH)")
        return LocalModelSpec(path=str(model), backend=args.backend, device=args.device, dtype=args.dtype)
    except ValidationError as exc:
        raise ModelChoiceError(f"--model: {exc.errors()[0]['msg']}") from None
    except ModelChoiceError:
        raise
    except ValueError as exc:
        raise ModelChoiceError(f"--model: {exc}") from None


def terminal_access(spec: Any) -> Any:
    """What a terminal command may reach: the origin on its command line, which gets the key of
    ``--api-key-env`` (default OPENAI_API_KEY / ANTHROPIC_API_KEY) -- over https, or to loopback.
    The one typing is the operator; a plain-http remote origin is reached without a key
    (``provider_spec`` refuses ``--api-key-env`` for one)."""
    from agent.models.backends.served import base_url_of
    from agent.models.backends.served_access import ServedAccess

    if provider(spec.kind).served is None:
        return ServedAccess()
    origin = _origin_of(base_url_of(spec))
    if origin.scheme != "https" and not origin.loopback:
        return ServedAccess.of([str(origin)])
    return ServedAccess.of([str(origin)], [f"{spec.kind}@{origin}={spec.api_key_env}"])


def load_spec(spec: Any) -> Any:
    """Load the model a terminal command named: the origin on its command line is allowed (and gets the key)."""
    from agent.models.backends import load_model

    return load_model(spec, terminal_access(spec))


def _origin_of(base_url: str) -> Any:
    from agent.models.backends.served_access import parse_origin

    parts = urlsplit(base_url)
    return parse_origin(f"{parts.scheme}://{parts.netloc}")


# --------------------------------------------------------------------------------------------
# The runner: a body's spec, checked before the job, loaded inside it
# --------------------------------------------------------------------------------------------


def check_local_path(raw: str, *, must_exist: bool = True) -> None:
    """Refuse paths that no backend should touch, reading nothing (not even the first byte).

    The message never repeats the path: it may name a private folder.
    """
    if _CONTROL.search(raw):
        raise ModelRefused(400, "model_unavailable", "the model path contains a NUL or control character",
                           reason="invalid_model_path")
    if not must_exist:
        return
    try:
        st = os.stat(os.path.expanduser(raw))  # follows links; a loop raises ELOOP
    except (OSError, ValueError):
        raise ModelRefused(400, "model_unavailable", "the model path does not exist or cannot be accessed",
                           reason="invalid_model_path") from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise ModelRefused(400, "model_unavailable",
                           "the model path is not a regular file or directory (devices, FIFOs and sockets are refused)",
                           reason="not_a_model")


def check_served_model(spec: Any, access: Any) -> None:
    """A served model's origin is checked before the job is queued (and again when it loads); the
    request may not name a key's variable: which key goes where is the operator's configuration."""
    from agent.models.backends.served import ServedModelError, base_url_of

    if "api_key_env" in spec.model_fields_set:
        raise ModelRefused(422, "validation_error", "model.api_key_env: a request cannot choose a key; which key "
                           "goes to which provider and host is the runner operator's configuration (--model-key)",
                           fields=[{"loc": ["body", "model", "api_key_env"], "msg": "not accepted in a request",
                                    "type": "key_not_requestable"}])
    try:
        access.endpoint(base_url_of(spec))
    except ServedModelError as exc:
        raise ModelRefused(400, "model_unavailable", exc.message, reason=exc.code) from None


def check_request_model(spec: Any, access: Any, *, must_exist: bool = True) -> None:
    """The checks a request's model passes before its job is queued: a local path (``must_exist``
    False for the runner's test policy, which opens nothing), or a served model's host and key."""
    if spec.kind == "local":
        check_local_path(spec.path, must_exist=must_exist)
    elif provider(spec.kind).served is not None:
        check_served_model(spec, access)


def policy_loader(spec: Any, access: Any = None) -> Callable[[], Any]:
    """What a job calls to load (or reuse) its model, so the HTTP side never waits on it; a served
    model may live on loopback or on an origin ``access`` (a ``ServedAccess``; default: loopback
    only, no keys) allows."""

    def load() -> Any:
        try:
            from agent.models.backends import load_model
        except ImportError as exc:
            raise ModelUnavailable(f"model backends cannot be imported ({type(exc).__name__})") from None
        return load_model(spec, access)

    return load
