"""Error buckets of served calls: every failure of one call -- an SDK error, a transport
error, a broken stream -- becomes a ``ServedModelError`` whose ``code`` is its bucket, and only the
retryable buckets are retried (by ``served.ServedPolicy``). Duck-typed over both SDKs: their status
errors carry ``status_code``, ``response`` and ``body``.

Exceptions::

    ModelUnavailable (agent.models.model_policy)
      ServedModelError     one served call failed for good; ``code`` is its bucket:
        rate_limited       429, a rate-limit error event              retried (Retry-After honoured)
        server_error       5xx, 529 overloaded, an error event        retried
        network            connect/read failure, stall, cut stream    retried
        auth_failed        401/403, no key in the environment         ends the run
        context_overflow   the prompt does not fit the model          ends the run
        bad_request        any other 4xx, a redirect                  ends the run (runtime_error)
        host_not_allowed   the base URL's host is not allowed here    refused before any call
      (tool_runtime, the seventh bucket, is the tools' side: runtime.py ends a run with it when an
      MCP server breaks)
    StreamCut, ErrorEvent  raised inside one call, classified like the rest

A bug (TypeError, KeyError, ...) is no bucket: ``classify`` raises it again and the run ends with
``runtime_error``. Messages name the bucket and the HTTP status; the server's own message rides
along, without keys or paths (redacted before it is cut).
"""

from __future__ import annotations

import email.utils
import re
import time
from typing import Any, Literal

from agent.models.model_policy import ModelUnavailable
from agent.contracts.trace import redact_text

MAX_RETRY_AFTER = 60.0

BUCKETS = ("rate_limited", "auth_failed", "context_overflow", "network", "bad_request", "server_error",
           "tool_runtime")
RETRYABLE = frozenset({"rate_limited", "server_error", "network"})


class ServedModelError(ModelUnavailable):
    """A served call that failed for good (or, inside the retry loop, one attempt that failed)."""

    def __init__(self, code: str, message: str, *, status: int | None = None, retry_after: float | None = None):
        super().__init__(message, code=code, stop_reason="runtime_error" if code == "bad_request" else "model_unavailable")
        self.status = status
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return self.code in RETRYABLE


class StreamCut(Exception):
    """The stream ended without the protocol's final event (the connection was dropped)."""


class ErrorEvent(Exception):
    """An error object the server sent inside a stream (``{"error": {"message", "code"}}``)."""

    def __init__(self, body: Any):
        super().__init__("error event")
        self.body = body



_OVERFLOW = re.compile(r"context|too long|too many tokens|maximum.{0,40}tokens|exceed", re.I)
_EVENT_TYPES = {  # Anthropic error event types (and their HTTP statuses)
    "overloaded_error": ("server_error", 529), "api_error": ("server_error", 500),
    "rate_limit_error": ("rate_limited", 429), "authentication_error": ("auth_failed", 401),
    "permission_error": ("auth_failed", 403), "not_found_error": ("bad_request", 404),
    "request_too_large": ("context_overflow", 413), "invalid_request_error": ("bad_request", 400),
    "timeout_error": ("network", 504),
}


def _server_message(body: Any) -> str:
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        for key in ("message", "detail", "type"):
            if isinstance(inner.get(key), str):
                return inner[key]
    return body if isinstance(body, str) else ""


def _body_type(body: Any) -> str | None:
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        value = inner.get("type")
        return value if isinstance(value, str) else None
    return None


def retry_after_seconds(headers: Any) -> float | None:
    """Retry-After (seconds or an HTTP date) or retry-after-ms, capped at ``MAX_RETRY_AFTER``."""
    if headers is None:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return min(MAX_RETRY_AFTER, max(0.0, float(ms) / 1000))
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            seconds = float(value)
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            seconds = when.timestamp() - time.time()
        return min(MAX_RETRY_AFTER, max(0.0, seconds))
    except (TypeError, ValueError, OverflowError):
        return None


def bucket_for_status(status: int, message: str) -> str:
    if status == 429:
        return "rate_limited"
    if status in (401, 403):
        return "auth_failed"
    if status == 413 or (400 <= status < 500 and _OVERFLOW.search(message or "")):
        return "context_overflow"
    if status == 408:
        return "network"
    if status >= 500 or status == 409:
        return "server_error"
    return "bad_request"


def classify(exc: BaseException) -> ServedModelError:
    """Any failure of one call (SDK exception, transport error, cut stream) as a bucketed error.

    Duck-typed over both SDKs: status errors carry ``status_code``, ``response`` and ``body``.
    The message names the bucket and the HTTP status; the server's own message rides along,
    redacted and then cut to 200 characters.
    """
    if isinstance(exc, ServedModelError):
        return exc
    if not _is_call_failure(exc):
        raise exc  # a bug (TypeError, KeyError, ...) is no bucket: the run ends with runtime_error
    if isinstance(exc, StreamCut):
        return ServedModelError("network", "the stream ended before the reply was complete")
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    response = getattr(exc, "response", None)
    server = _server_message(body)
    event = _body_type(body)
    if status is not None and status < 400 and event in _EVENT_TYPES:  # an error event in a 200 stream
        code, status = _EVENT_TYPES[event]
        if code == "bad_request" and _OVERFLOW.search(server):
            code = "context_overflow"
        return ServedModelError(code, _describe(code, status, server), status=status,
                                retry_after=retry_after_seconds(getattr(response, "headers", None)))
    if isinstance(status, int) and 300 <= status < 400:  # redirects are never followed: no proxying
        return ServedModelError("bad_request", f"bad_request: the server answered a redirect (HTTP {status}), "
                                               "which is not followed; give the final base URL", status=status)
    if isinstance(status, int) and status >= 400:
        code = bucket_for_status(status, server)
        return ServedModelError(code, _describe(code, status, server), status=status,
                                retry_after=retry_after_seconds(getattr(response, "headers", None)))
    name = type(exc).__name__
    if status is None and body is not None:
        # An error object inside an OpenAI-style stream: {"error": {"message", "code"}}.
        inner = body.get("error", body) if isinstance(body, dict) else {}
        code_value = inner.get("code") if isinstance(inner, dict) else None
        if isinstance(code_value, int) and code_value >= 400:
            code = bucket_for_status(code_value, server)
            return ServedModelError(code, _describe(code, code_value, server), status=code_value)
        return ServedModelError("server_error", _describe("server_error", None, server))
    # Connection refused, DNS, TLS, read timeouts (a stall), a connection dropped mid-stream.
    return ServedModelError("network", f"network: {_plain_name(name)}")


def _is_call_failure(exc: BaseException) -> bool:
    """An SDK error, a transport error or a broken stream -- not a bug in this code."""
    if isinstance(exc, (StreamCut, ErrorEvent, OSError)):
        return True
    return any(getattr(cls, "__module__", "").partition(".")[0] in ("openai", "anthropic", "httpx2", "httpcore2")
               for cls in type(exc).__mro__)


def _plain_name(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", " ", name).lower()


_WHAT = {
    "rate_limited": "the server is rate limiting requests", "auth_failed": "the server refused the credentials",
    "context_overflow": "the prompt does not fit the model's context", "bad_request": "the server refused the request",
    "server_error": "the server failed or is overloaded", "network": "the server could not be reached",
}


def _describe(code: str, status: int | None, server: str) -> str:
    text = f"{code}: {_WHAT.get(code, code)}" + (f" (HTTP {status})" if status else "")
    # Redacted before the cut: a key cut in half would no longer be recognised as one.
    server = redact_text(" ".join(str(server).split()))[:200]
    return text + (f": {server}" if server else "")
