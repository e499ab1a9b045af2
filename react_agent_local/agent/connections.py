"""The runner's connections: slow or idle clients are cut off and delay no one (SECURITY.md 25).

uvicorn's HTTP protocols have no deadline for reading a request, so a client that sends its headers
one byte a second would hold its connection (and a slot) for as long as it likes. Here each
connection gets one timer: a request must be read completely within ``REQUEST_READ_SECONDS`` of the
connection opening or of the previous response; keep-alive is short and websockets are off.
"""

from __future__ import annotations

from typing import Any


REQUEST_READ_SECONDS = 10.0
KEEP_ALIVE_SECONDS = 5


def read_deadline_protocol(seconds: float = REQUEST_READ_SECONDS, http: str = "auto") -> type:
    """uvicorn's HTTP protocol (httptools when installed, else h11) with a deadline for reading each request.

    uvicorn's own timeout only covers idle keep-alive connections; a client that connects and
    sends nothing, or sends its headers or body one byte a second, would hold its socket forever
    (2000 of them were held for over a minute). One timer per connection checks whether the client
    is still sending its request (h11: IDLE with or without bytes, or SEND_BODY; httptools: fewer
    requests read whole than responses finished) past the deadline, and then closes the connection.
    A request being handled, or a response being streamed, is never cut. httptools parses in C:
    the polling page's requests cost the runner about a third less CPU than with h11.
    """
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
            self._read_timer = self.loop.call_later(seconds, self._check_read_deadline)

        def on_response_complete(self) -> None:
            self._read_started = self.loop.time()  # the next request's clock starts now
            super().on_response_complete()  # type: ignore[misc]

        def connection_lost(self, exc: Exception | None) -> None:
            self._read_timer.cancel()
            super().connection_lost(exc)  # type: ignore[misc]

        def _check_read_deadline(self) -> None:
            if self.transport.is_closing():
                return
            waited = self.loop.time() - self._read_started
            if self._reading_request() and waited >= seconds:
                self.transport.close()
                return
            self._read_timer = self.loop.call_later(seconds - waited if waited < seconds else seconds,
                                                    self._check_read_deadline)

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
                  http: str = "auto", **options: Any) -> Any:
    """The runner's uvicorn configuration: a request read deadline, short keep-alive, no websockets.

    ``http`` is "httptools", "h11" or "auto" (httptools when installed); the event loop is uvicorn's
    "auto" (uvloop when installed).
    """
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, http=read_deadline_protocol(read_seconds, http), ws="none",
                          timeout_keep_alive=KEEP_ALIVE_SECONDS, proxy_headers=False, server_header=False,
                          forwarded_allow_ips="", **options)
