"""Where a served model may live, and which key goes where: the runner operator's configuration.

A request names a provider (its ``kind``) and a base URL, never a key or an environment variable.
The operator decides the rest, on the command line:

- ``--allow-model-host ORIGIN`` (repeatable): a host runs may use besides loopback. An origin pins
  scheme, host and port, all three: ``https://api.anthropic.com`` or ``api.anthropic.com`` means
  ``https://api.anthropic.com:443`` and nothing else (not ``http://``, not ``:8080``);
  ``gpu-box:8000`` means ``https://gpu-box:8000``; ``http://gpu-box:8000`` allows plain http, for a
  server without a key. Without a scheme a loopback host means ``http``, any other ``https``.
- ``--model-key KIND@ORIGIN=VARIABLE`` (repeatable): the key in the runner's environment variable
  ``VARIABLE`` goes to provider ``KIND`` at exactly ``ORIGIN`` (which it allows too). Without one,
  ``OPENAI_API_KEY`` goes to ``openai_compatible`` at ``https://api.openai.com`` and
  ``ANTHROPIC_API_KEY`` to ``anthropic`` at ``https://api.anthropic.com``, when those are allowed
  (each served provider's default, from its entry in ``agent/models/providers.py``).
  An Anthropic key therefore never reaches a loopback server that calls itself ``anthropic``.

A key leaves only over https, except to a loopback host, where nothing crosses a network: an
entry pinning a key to ``http://`` elsewhere is refused when the runner starts. Keys are read once,
when the access is built, and registered with ``agent.util.secrets``, so no text that leaves the process
carries one. A host name is never resolved to decide anything (``127.0.0.1.nip.io`` is not loopback).
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping
from urllib.parse import urlsplit

from agent.models.providers import served_kinds, served_providers
from agent.util.secrets import register
from agent.models.backends.served_errors import ServedModelError

DEFAULT_PORTS = {"http": 80, "https": 443}
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_HOST_NAME = re.compile(r"[a-z0-9](?:[a-z0-9.\-]*[a-z0-9])?")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name is never resolved here: 127.0.0.1.nip.io is not loopback


@dataclass(frozen=True, order=True)
class Origin:
    """Scheme, host (lower case, no brackets) and port: what one allow entry or key entry pins."""

    scheme: str
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def parse_origin(entry: str) -> Origin:
    """An operator's origin entry: ``[scheme://]host[:port][/]``; ValueError with the reason."""
    text = entry.strip().rstrip("/")
    try:
        parts = urlsplit(text if "://" in text else "//" + text)
        port = parts.port
    except ValueError:
        raise ValueError(f"not a host or origin: {entry!r}") from None
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("", "http", "https") or not _valid_host(host) or parts.username is not None \
            or parts.password is not None or parts.path or parts.query or parts.fragment:
        raise ValueError(f"write HOST, HOST:PORT or http(s)://HOST[:PORT] (no path, user or wildcard): {entry!r}")
    scheme = parts.scheme or ("http" if is_loopback(host) else "https")
    return Origin(scheme, host, port if port is not None else DEFAULT_PORTS[scheme])


def _valid_host(host: str) -> bool:
    if ":" in host:  # written in brackets; urllib took them off
        try:
            ipaddress.IPv6Address(host)
            return True
        except ValueError:
            return False
    return bool(_HOST_NAME.fullmatch(host))


@dataclass(frozen=True)
class KeyEntry:
    """One key pinned by the operator: provider ``kind`` at ``origin`` gets ``variable``'s value."""

    kind: str
    origin: Origin
    variable: str
    value: str = field(default="", repr=False, compare=False)  # read once; "" when unset


def default_keys() -> list[str]:
    """Each served provider's default key entry: its spec's default ``api_key_env`` at its key origin
    (``agent/models/providers.py``), e.g. ``anthropic@https://api.anthropic.com=ANTHROPIC_API_KEY``."""
    return [f"{p.kind}@{p.served.key_origin}={p.spec.model_fields['api_key_env'].default}"
            for p in served_providers()]


def parse_key_entry(entry: str, environ: Mapping[str, str] | None = None) -> KeyEntry:
    """``KIND@ORIGIN=VARIABLE`` with the variable's value read from ``environ`` (the process's)."""
    target, sep, variable = entry.strip().rpartition("=")
    kind, at, origin_text = target.partition("@")
    if not sep or not at:
        raise ValueError(f"write KIND@ORIGIN=VARIABLE, e.g. openai_compatible@https://gpu-box:8443=VLLM_API_KEY: {entry!r}")
    if kind not in served_kinds():
        raise ValueError(f"the provider must be one of {', '.join(served_kinds())}: {entry!r}")
    if not _VARIABLE.fullmatch(variable):
        raise ValueError(f"not an environment variable name: {variable!r}")
    origin = parse_origin(origin_text)
    if origin.scheme != "https" and not origin.loopback:
        raise ValueError(f"a key is sent over https only (or to a loopback host): {entry!r}")
    value = (os.environ if environ is None else environ).get(variable, "").strip()
    return KeyEntry(kind, origin, variable, value)


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    host: str  # lower-case host name or address (no brackets)
    netloc: str  # host[:port] as written, lower-case
    loopback: bool
    named: bool  # the operator named this origin (allowed it, or pinned a key to it)
    origin: Origin


@dataclass(frozen=True)
class ServedAccess:
    """The served-model origins this process may contact (loopback, plus ``allowed``) and the keys
    pinned to them. Build it with ``of``, once, from the operator's entries."""

    allowed: frozenset[Origin] = frozenset()
    keys: tuple[KeyEntry, ...] = ()

    @classmethod
    def of(cls, hosts: Iterable[str] = (), keys: Iterable[str] = (),
           environ: Mapping[str, str] | None = None) -> "ServedAccess":
        """From ``--allow-model-host`` and ``--model-key`` entries (ValueError for a malformed one);
        reads and registers the keys now."""
        allowed = {parse_origin(h) for h in hosts if h and h.strip()}
        explicit = [parse_key_entry(k, environ) for k in keys if k and k.strip()]
        pinned = {(e.kind, e.origin) for e in explicit}
        defaults = [e for e in (parse_key_entry(k, environ) for k in default_keys())
                    if (e.kind, e.origin) not in pinned]
        register(e.value for e in [*explicit, *defaults])
        return cls(frozenset(allowed | {e.origin for e in explicit}), tuple(explicit + defaults))

    def endpoint(self, base_url: str) -> Endpoint:
        """The base URL's endpoint, or ``host_not_allowed`` when this process may not contact it."""
        try:  # urllib raises ValueError for a malformed bracketed host ("http://[0]") or port
            parts = urlsplit(base_url)
            host = (parts.hostname or "").lower()
            port = parts.port
        except ValueError:
            raise ServedModelError("host_not_allowed", "the base URL is not a valid http(s) URL") from None
        if parts.scheme not in ("http", "https") or not host or parts.username or parts.password \
                or parts.query or parts.fragment:
            raise ServedModelError("host_not_allowed", "the base URL must be http(s)://host[:port]/path")
        origin = Origin(parts.scheme, host, port if port is not None else DEFAULT_PORTS[parts.scheme])
        named = origin in self.allowed
        if not (origin.loopback or named):
            raise ServedModelError(
                "host_not_allowed",
                f"served models are loopback-only here; {origin} is not an allowed origin (the runner's "
                "operator can allow it with --allow-model-host, which pins scheme and port)")
        return Endpoint(base_url.rstrip("/"), host, parts.netloc.lower(), origin.loopback, named, origin)

    def key_for(self, kind: str, endpoint: Endpoint) -> str | None:
        """The key the operator pinned to ``kind`` at this endpoint's origin; None when none is."""
        entry = next((e for e in self.keys if e.kind == kind and e.origin == endpoint.origin), None)
        if entry is None or (entry.origin.scheme != "https" and not entry.origin.loopback):
            return None
        if not entry.value:
            if endpoint.loopback:
                return None
            raise ServedModelError("auth_failed", f"{entry.variable} is not set in the runner's environment")
        return entry.value

    def public(self) -> dict[str, list[str]]:
        """What /status may show: the allowed origins, and the provider and origin of each key that
        can be sent (never a value)."""
        return {"allowed_hosts": ["loopback", *sorted(str(o) for o in self.allowed)],
                "keys": sorted(f"{e.kind}@{e.origin}" for e in self.keys
                               if e.value and (e.origin in self.allowed or e.origin.loopback))}
