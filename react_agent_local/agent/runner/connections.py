"""The runner's connections: slow or idle clients are cut off and delay no one.

uvicorn's HTTP protocols have no deadline for reading a request, so a client that sends its headers
one byte a second would hold its connection (and a slot) for as long as it likes. Here each
connection gets one timer: a request must be read completely within ``REQUEST_READ_SECONDS`` of the
connection opening or of the previous response; keep-alive is short and websockets are off.

Nor do they have one for writing: a client that accepts no byte (its receive window closed) keeps an
event stream open, since heartbeats are too small to fill the buffers that would make a send block.
The same timer therefore checks what the peer has not accepted yet -- the transport's buffer plus the
socket's send queue (``SIOCOUTQ`` on Linux, ``SO_NWRITE`` on macOS) -- and a connection whose
backlog does not shrink for ``WRITE_SECONDS`` is aborted, which ends its response and frees its slot.
"""

from __future__ import annotations

import socket
import struct
import sys
from typing import Any


REQUEST_READ_SECONDS = 10.0
WRITE_SECONDS = 10.0
KEEP_ALIVE_SECONDS = 5
_SO_NWRITE = 0x1024  # macOS: bytes in the send buffer not yet acknowledged


def unaccepted_bytes(transport: Any) -> int:
    """Bytes written to a connection that its peer has not acknowledged yet (0 where the system
    cannot tell): the transport's own buffer plus the socket's send queue."""
    pending = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if sock is None:
        return pending
    try:
        if sys.platform.startswith("linux"):
            import fcntl
            import termios

            # TIOCOUTQ on a TCP socket is SIOCOUTQ: sent but unacknowledged, plus not yet sent.
            return pending + struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
        if sys.platform == "darwin":
            return pending + sock.getsockopt(socket.SOL_SOCKET, _SO_NWRITE)
    except (OSError, ValueError, AttributeError):
        pass
    return pending


def read_deadline_protocol(seconds: float = REQUEST_READ_SECONDS, http: str = "auto",
                           write_seconds: float = WRITE_SECONDS) -> type:
    """uvicorn's HTTP protocol (httptools when installed, else h11) with a deadline for reading each
    request and one for the peer to accept what is written to it.

    uvicorn's own timeout only covers idle keep-alive connections; a client that connects and
    sends nothing, or sends its headers or body one byte a second, would hold its socket forever
    (2000 of them were held for over a minute). One timer per connection checks whether the client
    is still sending its request (h11: IDLE with or without bytes, or SEND_BODY; httptools: fewer
    requests read whole than responses finished) past the deadline, and then closes the connection.
    A request being handled, or a response being streamed, is never cut by the read deadline; the
    same timer, ticking at least every quarter of ``write_seconds``, aborts a connection whose
    peer has accepted nothing of its backlog for ``write_seconds``. httptools parses in C: the
    polling page's requests cost the runner about a third less CPU than with h11.
    """
    tick = write_seconds / 4
    if http == "auto":
        try:
            import httptools  # noqa: F401
            http = "httptools"
        except ImportError:
            http = "h11"

    class ReadDeadline:
        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)  # type: ignore[misc]
            self._read_started = self.loop.time()
            self._backlog, self._stalled_since = 0, None
            self._read_timer = self.loop.call_later(min(seconds, tick), self._check_read_deadline)

        def on_response_complete(self) -> None:
            self._read_started = self.loop.time()  # the next request's clock starts now
            super().on_response_complete()  # type: ignore[misc]

        def connection_lost(self, exc: Exception | None) -> None:
            self._read_timer.cancel()
            super().connection_lost(exc)  # type: ignore[misc]

        def _check_read_deadline(self) -> None:
            if self.transport.is_closing():
                return
            now = self.loop.time()
            waited = now - self._read_started
            if self._write_stalled(now) or (self._reading_request() and waited >= seconds):
                # abort when bytes are waiting: close() would wait for a backlog that never drains
                (self.transport.abort if self._backlog else self.transport.close)()
                return
            self._read_timer = self.loop.call_later(min(seconds - waited if waited < seconds else seconds, tick),
                                                    self._check_read_deadline)

        def _write_stalled(self, now: float) -> bool:
            """True once the peer's backlog has not shrunk for ``write_seconds``."""
            backlog = unaccepted_bytes(self.transport)
            if not backlog:
                self._stalled_since = None
            elif self._stalled_since is None or backlog < self._backlog:
                self._stalled_since = now  # the peer took something: its clock starts again
            self._backlog = backlog
            return self._stalled_since is not None and now - self._stalled_since >= write_seconds

    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        class HttpToolsReadDeadline(ReadDeadline, HttpToolsProtocol):
            _requests_read = 0
            _responses_done = 0

            def on_message_complete(self) -> None:
                self._requests_read += 1
                super().on_message_complete()

            def on_response_complete(self) -> None:
                self._responses_done += 1
                super().on_response_complete()

            def _reading_request(self) -> bool:
                return self._requests_read <= self._responses_done

        return HttpToolsReadDeadline

    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class H11ReadDeadline(ReadDeadline, H11Protocol):
        def _reading_request(self) -> bool:
            return self.conn.their_state in (h11.IDLE, h11.SEND_BODY)

    return H11ReadDeadline


def server_config(app: Any, host: str, port: int, *, read_seconds: float = REQUEST_READ_SECONDS,
                  http: str = "auto", write_seconds: float = WRITE_SECONDS, **options: Any) -> Any:
    """The runner's uvicorn configuration: read and write deadlines, short keep-alive, no websockets.

    ``http`` is "httptools", "h11" or "auto" (httptools when installed); the event loop is uvicorn's
    "auto" (uvloop when installed).
    """
    import uvicorn

    protocol = read_deadline_protocol(read_seconds, http, write_seconds)
    return uvicorn.Config(app, host=host, port=port, http=protocol, ws="none",
                          timeout_keep_alive=KEEP_ALIVE_SECONDS, proxy_headers=False, server_header=False,
                          forwarded_allow_ips="", **options)
