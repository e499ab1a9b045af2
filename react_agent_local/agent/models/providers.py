"""The model providers: one registry entry per ``kind`` of model spec, and everything derived from it.

An entry (``Provider``) names its spec class, the function that loads its Policy and the one that
inspects it (``"module:function"``, imported only when called, so an SDK or a model library is
imported by its backend and nowhere else), its terminal prefix (``openai:``) and, for a model
behind an HTTP API, what the host allowlist and the key routing need (``Served``).

Derived from ``PROVIDERS``, never listed a second time:

- ``ModelSpec``, the union the runner's bodies use (``contracts.py``; built from the providers
  registered when this module is imported, so a provider registered later reaches the terminal and
  ``load_model`` but not the HTTP contract);
- the terminal's ``--model PREFIX...`` and ``--served`` (``model_choice.py``);
- the dispatch of ``backends.load_model`` and ``backends.inspect_spec``;
- the providers a ``--model-key`` may pin and their default keys (``backends/served_access.py``);
- the served kinds ``/status`` lists (``served_kinds``).

Adding a provider is one backend module and one entry here, its spec class beside it; the recipe is
in docs/ARCHITECTURE.md ("A model provider") and ``tests/test_provider_recipe.py`` follows it.

The spec classes live here rather than in their backend modules because ``contracts.py`` builds
its request bodies from the union and must import without the backends package or any SDK.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from agent.models.model_policy import ModelUnavailable

# --------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------


def _named(rest: str) -> dict[str, Any]:
    return {"model": rest}


@dataclass(frozen=True)
class Served:
    """What a provider behind an HTTP API needs beyond loading: its host is checked against the
    operator's allowlist and a key goes only where the operator pins it (``backends/served_access.py``)."""

    #: the distribution its backend imports (reported by ``inspect_spec``, never imported to inspect)
    sdk: str
    #: where the spec's default ``api_key_env`` is sent when the operator pins no key for this provider
    key_origin: str
    #: the base URL of a spec that names none (None: the spec class requires ``base_url``)
    default_base_url: str | None = None
    #: the server answers ``GET /models``: inspecting asks whether it lists the model
    lists_models: bool = False


@dataclass(frozen=True)
class Provider:
    """One kind of model: how a spec of it is written, loaded, inspected and named on the terminal."""

    kind: str
    #: its spec class: a pydantic model with ``kind: Literal[<kind>]``
    spec: type[BaseModel]
    #: ``"module:function"``; ``function(spec, access, **options) -> Policy``, ``ModelUnavailable`` when it cannot
    loader: str
    #: ``"module:function"``; ``function(spec, access) -> dict`` (a path-free and key-free report), or None
    inspector: str | None = None
    #: ``--model PREFIX...`` names a model of this kind (None: only by other flags)
    prefix: str | None = None
    #: what follows the prefix, as spec fields (``ValueError`` with how to write it)
    from_prefix: Callable[[str], dict[str, Any]] = _named
    #: how the terminal's messages call it ("an OpenAI-compatible model needs --base-url")
    label: str = ""
    served: Served | None = None

    def load(self, spec: Any, access: Any = None, **options: Any) -> Any:
        return _resolve(self.loader)(spec, access, **options)

    def inspect(self, spec: Any, access: Any = None) -> dict[str, Any]:
        if self.inspector is None:
            raise ModelUnavailable(f"a {self.kind} model cannot be inspected", code="inspect_failed")
        return _resolve(self.inspector)(spec, access)


PROVIDERS: dict[str, Provider] = {}


def register(entry: Provider) -> Provider:
    """Add a provider; its kind and its prefix must be new (ValueError otherwise)."""
    if entry.kind in PROVIDERS:
        raise ValueError(f"a provider of kind {entry.kind!r} is registered already")
    if entry.prefix is not None and any(p.prefix == entry.prefix for p in PROVIDERS.values()):
        raise ValueError(f"the prefix {entry.prefix!r} names another provider")
    if entry.spec.model_fields.get("kind") is None or entry.spec.model_fields["kind"].annotation != Literal[entry.kind]:
        raise ValueError(f"{entry.spec.__name__} needs kind: Literal[{entry.kind!r}]")
    PROVIDERS[entry.kind] = entry
    return entry


def provider(kind: str) -> Provider:
    """The entry of ``kind``; ``ModelUnavailable`` for one nobody registered."""
    try:
        return PROVIDERS[kind]
    except KeyError:
        raise ModelUnavailable(f"unknown model kind {kind!r}", code="backend_mismatch") from None


def by_prefix(model: str) -> Provider | None:
    """The provider whose terminal prefix ``model`` starts with (``openai:...``), else None."""
    return next((p for p in PROVIDERS.values() if p.prefix and model.startswith(p.prefix)), None)


def served_providers() -> list[Provider]:
    """The providers whose models are reached over HTTP (host allowlist, operator's keys)."""
    return [p for p in PROVIDERS.values() if p.served is not None]


def served_kinds() -> list[str]:
    return [p.kind for p in served_providers()]


def _resolve(reference: str) -> Callable[..., Any]:
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


# --------------------------------------------------------------------------------------------
# The shipped providers, each spec beside its entry
# --------------------------------------------------------------------------------------------

Device = Literal["auto", "cpu", "cuda", "mps"]
Dtype = Literal["auto", "float32", "bfloat16", "float16"]


class LocalModelSpec(BaseModel):
    """A model on this machine, run in-process: a GGUF file (llama.cpp, or transformers) or a
    safetensors directory (transformers)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["local"] = "local"
    path: str = Field(min_length=1, max_length=4096, description="GGUF file or model directory.")
    backend: Literal["auto", "llama_cpp", "transformers"] = "auto"
    device: Device = "auto"
    dtype: Dtype = "auto"


# A local model is named by its path (``--model PATH``), so it has no prefix; it is the one
# resident model of the process (``backends.load_policy``).
register(Provider(kind="local", spec=LocalModelSpec, loader="agent.models.backends:load_local",
                  inspector="agent.models.backends:inspect_local"))

# http(s)://host[:port][/path] -- no user info, query or fragment: a URL is never a place for a key.
_BASE_URL = r"^https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~\-/]*)?$|^https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?(/[A-Za-z0-9._~\-/]*)?$"
# The *name* of an environment variable of the runner; the key itself never travels in a request.
_KEY_ENV = r"^[A-Z][A-Z0-9_]{0,62}_API_KEY$"
_SERVED_MODEL = r"^[^\x00-\x1f\x7f]{1,200}$"


class OpenAICompatibleSpec(BaseModel):
    """A model behind an OpenAI-compatible chat completions endpoint (vLLM, llama.cpp's
    llama-server, llama-cpp-python's server, Ollama, LM Studio, OpenAI). Native tool calling; the
    runner only connects to loopback hosts unless its operator allows more (``--allow-model-host``)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["openai_compatible"]
    base_url: str = Field(max_length=2048, pattern=_BASE_URL, description="e.g. http://127.0.0.1:8000/v1")
    model: str = Field(pattern=_SERVED_MODEL, description="The served model's name, as the server lists it.")
    api_key_env: str = Field(default="OPENAI_API_KEY", pattern=_KEY_ENV,
                             description="Name of the runner's environment variable holding the key (never the key).")
    strict_tools: bool = Field(default=False, description="Send strict tool schemas (OpenAI structured outputs).")
    send_top_k: bool = Field(default=True, description="Send top_k when sampling (vLLM, llama.cpp; not OpenAI's API).")


def _openai_prefix(rest: str) -> dict[str, Any]:
    base_url, sep, name = rest.partition("#")
    if not sep:
        raise ValueError("write openai:BASE_URL#MODEL_NAME, e.g. openai:http://127.0.0.1:8080/v1#qwen")
    return {"base_url": base_url, "model": name}


register(Provider(kind="openai_compatible", spec=OpenAICompatibleSpec,
                  loader="agent.models.backends.openai_compatible:load", inspector="agent.models.backends:inspect_served",
                  prefix="openai:", from_prefix=_openai_prefix, label="OpenAI-compatible",
                  served=Served(sdk="openai", key_origin="https://api.openai.com", lists_models=True)))


class AnthropicSpec(BaseModel):
    """A model behind Anthropic's Messages API (``base_url`` only for tests and gateways; the
    default host api.anthropic.com must be allowed by the runner's operator like any other)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["anthropic"]
    model: str = Field(pattern=_SERVED_MODEL, description="e.g. claude-haiku-4-5")
    api_key_env: str = Field(default="ANTHROPIC_API_KEY", pattern=_KEY_ENV,
                             description="Name of the runner's environment variable holding the key (never the key).")
    base_url: str | None = Field(default=None, max_length=2048, pattern=_BASE_URL)


register(Provider(kind="anthropic", spec=AnthropicSpec, loader="agent.models.backends.anthropic_client:load",
                  inspector="agent.models.backends:inspect_served", prefix="anthropic:", label="Anthropic",
                  served=Served(sdk="anthropic", key_origin="https://api.anthropic.com",
                                default_base_url="https://api.anthropic.com")))

# The runner's bodies accept the specs registered by now, told apart by ``kind``.
ModelSpec = Annotated[Union[tuple(p.spec for p in PROVIDERS.values())], Field(discriminator="kind")]  # type: ignore[valid-type]
