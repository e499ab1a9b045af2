"""The HTTP side of served models: the client the SDKs get, sockets that a cancel can shut down from
another thread, and the bounded ``GET {base}/models`` of an inspect.

The client follows no redirect (the runner is no proxy) and reads no proxy variable. Its sockets are
opened through ``Sockets``, httpcore2's network backend that remembers them: closing a socket does
not wake a read blocked on it in another thread, shutting it down does (the read sees the end of the
stream and the call fails at once), so a call the run has left ends within milliseconds instead of
at the server's next byte or the stall timeout.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

from agent.models.backends.served_access import Endpoint
from agent.models.backends.served_errors import ServedModelError, classify

STALL_SECONDS = 90.0  # a CPU server may take this long to read a long prompt before its first byte
CONNECT_SECONDS = 10.0
MAX_MODELS_BYTES = 1 << 20
MODELS_SECONDS = 5.0


class _Stream:
    """A network stream of ``Sockets``: the same stream, forgotten when it closes."""

    def __init__(self, inner: Any, sockets: "Sockets"):
        self._inner, self._sockets = inner, sockets

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._sockets.forget(self)
        self._inner.close()

    def start_tls(self, *args: Any, **kwargs: Any) -> "_Stream":
        self._inner = self._inner.start_tls(*args, **kwargs)  # the TLS socket replaces the plain one
        return self

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)

    def shutdown(self) -> None:
        sock = self._inner.get_extra_info("socket")
        try:
            # socket.socket's own shutdown, not SSLSocket's: no TLS state is touched from this thread
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except (OSError, TypeError):
            pass  # already closed


class Sockets:
    """httpcore2's network backend, remembering the sockets it opens so that ``shutdown`` can end
    the calls on them from another thread."""

    def __init__(self) -> None:
        import httpcore2

        self._backend = httpcore2.SyncBackend()
        self._streams: set[_Stream] = set()
        self._lock = threading.Lock()
        self._shut = False

    def connect_tcp(self, *args: Any, **kwargs: Any) -> _Stream:
        stream = _Stream(self._backend.connect_tcp(*args, **kwargs), self)
        with self._lock:
            if not self._shut:
                self._streams.add(stream)
                return stream
        stream.close()
        import httpcore2

        raise httpcore2.ConnectError("the call was left")

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Any:
        raise OSError("served models are reached over TCP only")

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)

    def forget(self, stream: _Stream) -> None:
        with self._lock:
            self._streams.discard(stream)

    def shutdown(self) -> None:
        """End every call on these sockets now, and refuse new connections."""
        with self._lock:
            self._shut = True
            streams = list(self._streams)
        for stream in streams:
            stream.shutdown()

    @property
    def open_count(self) -> int:
        """Sockets opened and not yet closed."""
        return len(self._streams)


def http_client(transport: Any = None) -> tuple[Any, Sockets | None]:
    """The HTTP client the SDKs get -- no redirects (the runner is no proxy), no proxy variables --
    and its sockets (None with a test transport)."""
    import httpx2

    sockets = None
    if transport is None:
        sockets = Sockets()
        transport = httpx2.HTTPTransport(trust_env=False)
        # httpx2's transport takes no network backend of its own; its pool does, and the pool is
        # built (and idle) here, so swapping the backend now affects every connection it makes.
        transport._pool._network_backend = sockets
    client = httpx2.Client(transport=transport, follow_redirects=False, trust_env=False,
                           timeout=httpx2.Timeout(STALL_SECONDS, connect=CONNECT_SECONDS))
    return client, sockets


def list_models(endpoint: Endpoint, key: str | None, transport: Any = None,
                seconds: float | None = None) -> tuple[int, list[Any]]:
    """(HTTP status, model ids) of ``GET {base}/models``, read whole within ``seconds`` (default
    ``MODELS_SECONDS``) in all and at most ``MAX_MODELS_BYTES``; raises ``ServedModelError``
    otherwise (``network`` past the deadline: the sockets are shut down, so no read outlives it)."""
    import httpx2

    seconds = MODELS_SECONDS if seconds is None else seconds
    client, sockets = http_client(transport)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        if sockets is not None:
            sockets.shutdown()

    late = ServedModelError("network", f"network: GET /models did not finish within {seconds:g} s")
    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    started = time.monotonic()
    headers = {"authorization": f"Bearer {key}"} if key else {}
    try:
        with client.stream("GET", endpoint.base_url + "/models", headers=headers,
                           timeout=httpx2.Timeout(seconds)) as response:
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_MODELS_BYTES:
                    raise ServedModelError("bad_request", f"bad_request: the list of models is larger than "
                                                          f"{MAX_MODELS_BYTES >> 20} MiB")
                if time.monotonic() - started > seconds:  # a test transport has no socket to shut down
                    raise late
            if expired.is_set():  # a body read until the connection closes "ends" at the shutdown
                raise late
            return response.status_code, _model_ids(body) if response.status_code == 200 else []
    except ServedModelError:
        raise
    except Exception as exc:  # noqa: BLE001 -- a call failure is bucketed; a bug is raised again by classify
        raise (late if expired.is_set() else classify(exc)) from None
    finally:
        timer.cancel()
        client.close()


def _model_ids(body: bytes) -> list[Any]:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return []
    listed = data.get("data") if isinstance(data, dict) else None
    return [m.get("id") for m in listed if isinstance(m, dict)] if isinstance(listed, list) else []
