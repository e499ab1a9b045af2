"""The browser boundary of the runner and of the course site: checks that run before any route.

Any web page the user opens can send requests to 127.0.0.1, so both loopback servers first ask the
same two questions (``LoopbackGate``, one implementation with one code per refusal): is the ``Host``
a loopback name with this server's port (else 421 ``forbidden_host``: DNS rebinding), and is an
``Origin``, when sent, one of the allowed ones (else 403 ``forbidden_origin``)? The course site
(``algolab/app.py``) allows only its own origin and GET; the runner's ``BrowserBoundary`` goes on:
it answers CORS only for the exact allowed origins (never ``*``, never credentials; the one extra
request header a preflight allows is ``Authorization``, for the operator's token), allows only
GET/POST/OPTIONS, requires a JSON content type on writes (no "simple" cross-site POST), and counts
body bytes as they arrive (over the limit: 413 without buffering the whole body). Refusals use the
same structured error body as the routes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    message: str


def request_headers(scope: dict[str, Any]) -> dict[str, list[str]]:
    """The request's headers by lower-case name, each with every value it was sent with."""
    headers: dict[str, list[str]] = {}
    for key, value in scope.get("headers", []):
        headers.setdefault(key.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return headers


class LoopbackGate:
    """The Host and Origin checks every loopback server of this repository makes before routing."""

    def __init__(self, port: int, origins: Iterable[str] | None = None):
        hosts = {f"{name}:{port}" for name in LOOPBACK_NAMES}
        if port == 80:  # a browser leaves the default port out of Host
            hosts |= set(LOOPBACK_NAMES)
        self.hosts = frozenset(hosts)
        #: The allowed origins; by default the server's own (``http://`` and one of its hosts).
        self.origins = frozenset(origins if origins is not None else (f"http://{host}" for host in hosts))

    def refusal(self, headers: dict[str, list[str]]) -> Refusal | None:
        """Why the request is refused, or None. Exactly one Host, and at most one Origin, an allowed one."""
        hosts = headers.get("host", [])
        if len(hosts) != 1 or hosts[0].strip().lower() not in self.hosts:
            return Refusal(421, "forbidden_host", "Host must be 127.0.0.1, localhost or [::1] with this server's port")
        origins = headers.get("origin", [])
        if origins and (len(origins) != 1 or origins[0] not in self.origins):
            return Refusal(403, "forbidden_origin", "this Origin is not allowed to call this server")
        return None


class _BodyTooLarge(Exception):
    pass


class BrowserBoundary:
    WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
    ALLOWED_METHODS = frozenset({"GET", "POST", "OPTIONS"})

    def __init__(self, app: Any, *, port: int, allow_origins: tuple[str, ...], max_body_bytes: int):
        self.app = app
        self.gate = LoopbackGate(port, allow_origins)
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # no websockets here
            await send({"type": "websocket.close", "code": 1008})
            return
        headers = request_headers(scope)
        refusal = self.gate.refusal(headers)
        if refusal is not None:
            await self._reject(send, refusal.status, refusal.code, refusal.message)
            return
        origins = headers.get("origin", [])
        origin = origins[0] if origins else None  # one, and allowed: the gate checked it
        cors = [(b"vary", b"Origin")]
        if origin is not None:
            cors.append((b"access-control-allow-origin", origin.encode("latin-1")))

        method = scope["method"]
        if method == "OPTIONS":
            await self._preflight(send, headers, cors)
            return
        if method in self.WRITE_METHODS:
            media = headers.get("content-type", [""])
            if len(media) != 1 or not _is_json_media_type(media[0]):
                await self._reject(send, 415, "unsupported_media_type",
                                   "writes need Content-Type: application/json", cors)
                return
        if method not in self.ALLOWED_METHODS:
            await self._reject(send, 405, "method_not_allowed", f"{method} is not supported; use GET or POST",
                               cors + [(b"allow", b"GET, POST, OPTIONS")])
            return
        if method == "POST":
            declared = headers.get("content-length", [])
            if declared:
                value = declared[0].strip() if len(declared) == 1 else ""
                if not re.fullmatch(r"[0-9]+", value):
                    await self._reject(send, 400, "bad_request", "invalid Content-Length", cors)
                    return
                if len(value) > 12 or int(value) > self.max_body_bytes:  # no int() of a 5000-digit string
                    await self._reject(send, 413, "payload_too_large",
                                       f"request bodies are limited to {self.max_body_bytes} bytes", cors)
                    return
            try:
                body = await self._read_body(receive)
            except _BodyTooLarge:
                await self._reject(send, 413, "payload_too_large",
                                   f"request bodies are limited to {self.max_body_bytes} bytes", cors)
                return
            if body is None:  # the client went away
                return
            receive = _replay(body, receive)

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}  # the event stream sets its own Cache-Control
                message["headers"] = headers + cors + [h for h in _SECURITY_HEADERS if h[0] not in present]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _read_body(self, receive: Callable) -> bytes | None:
        """Read at most max_body_bytes; stop reading (and refuse) as soon as the stream exceeds it."""
        chunks, total = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > self.max_body_bytes:
                raise _BodyTooLarge()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _preflight(self, send: Callable, headers: dict[str, list[str]], cors: list) -> None:
        if not any(name == b"access-control-allow-origin" for name, _ in cors):  # no Origin: not a preflight
            await self._send(send, 204, b"", cors + [(b"allow", b"GET, POST, OPTIONS")])
            return
        requested = headers.get("access-control-request-method", [""])[0].strip().upper()
        if requested not in ("GET", "POST"):
            await self._reject(send, 405, "method_not_allowed", "only GET and POST are allowed", cors)
            return
        extra = [
            (b"access-control-allow-methods", b"GET, POST"),
            # Authorization carries the operator's token (agent/runner/operator_token.py), for allowed origins only.
            (b"access-control-allow-headers", b"Content-Type, Authorization"),
            (b"access-control-max-age", b"600"),
        ]
        if headers.get("access-control-request-private-network", [""])[0].lower() == "true":
            extra.append((b"access-control-allow-private-network", b"true"))
        await self._send(send, 204, b"", cors + extra)

    async def _reject(self, send: Callable, status: int, code: str, message: str, cors: list | None = None) -> None:
        body = json.dumps(error_body(code, message)).encode()
        await self._send(send, status, body, (cors or []) + [(b"content-type", b"application/json")])

    @staticmethod
    async def _send(send: Callable, status: int, body: bytes, headers: list) -> None:
        headers = headers + _SECURITY_HEADERS + [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


_SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"cache-control", b"no-store")]


def _is_json_media_type(value: str) -> bool:
    media, _, params = value.partition(";")
    if media.strip().lower() != "application/json":
        return False
    for param in params.split(";"):
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset" and val.strip().strip('"').lower() not in ("utf-8", "utf8"):
            return False
    return True


def _replay(body: bytes, receive: Callable) -> Callable:
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # later calls only wait for the disconnect

    return replay
