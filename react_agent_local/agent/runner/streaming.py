"""Server-Sent Events of a run's trace: the frames, the cap on open streams, the timeouts.

``GET /agent/runs/{id}/events`` (``agent/runner/routes/runs.py``, behind the same browser boundary as every
route) answers ``text/event-stream``, framed by sse-starlette:

- each stored trace event is one SSE event: ``id: <seq>``, ``data: <the event's stored JSON>`` (the
  same bytes a poll returns), and a comment ``: t=<unix time the runner recorded it>`` that
  EventSource ignores and a load check uses to measure delivery latency;
- the first frame sets ``retry:``, so a browser whose stream is cut reconnects after a second and
  sends ``Last-Event-ID``; the stream resumes after it (or after ``?after_seq=`` on a first
  connection; Last-Event-ID wins because a reconnect keeps the original URL) -- no gap, no repeat;
- a keep-alive comment every ``ping_seconds``; the stream ends after ``run.finished``; a resume with
  nothing left after a finished run gets ``204``, which tells EventSource to stop reconnecting.

Slow or idle clients delay no one: the stream reads the job store without waiting on the worker,
each send has ``send_seconds`` to complete (a client that stopped reading is cut off once its socket
buffers fill), a client that accepts no byte of a heartbeat or an event within the connection's
write deadline is disconnected (``connections.py``; small frames would never fill those buffers),
a stream lives at most ``max_seconds`` (then the browser resumes it), and at most ``limit`` streams
are open at once (one more gets ``429 too_many_streams``; polling still works). However a stream
ends, its slot comes back.
"""

from __future__ import annotations

import logging
from typing import Any, AsyncIterator, Callable

from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError

log = logging.getLogger(__name__)

RETRY_MS = 1000
MAX_AFTER_SEQ = 10**9


class StreamSlots:
    """Counts open streams. Used only on the event loop's thread, so it needs no lock."""

    def __init__(self, limit: int):
        self.limit = limit
        self.open = 0

    def take(self) -> bool:
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1


def parse_seq(value: str | None) -> int | None:
    """An after_seq / Last-Event-ID value: an integer 0..10**9 in plain digits, else None."""
    if value is None or not (1 <= len(value) <= 10) or not value.isascii() or not value.isdigit():
        return None
    seq = int(value)
    return seq if seq <= MAX_AFTER_SEQ else None


async def _frames(events: AsyncIterator[tuple[int, bytes, float]]) -> AsyncIterator[ServerSentEvent]:
    yield ServerSentEvent(retry=RETRY_MS)  # no data: sets the reconnect delay, dispatches nothing
    async for seq, line, recorded in events:
        yield ServerSentEvent(data=line.decode("utf-8"), id=str(seq), comment=f"t={recorded:.6f}")


class _SlotStream(EventSourceResponse):
    """An EventSourceResponse that gives its slot back however it ends, and ends quietly when the
    client stopped reading (the connection is then closed by the server)."""

    def __init__(self, *args: Any, release: Callable[[], None], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        except SendTimeoutError:
            log.info("closed an event stream whose client stopped reading")
        finally:
            self._release()


def event_stream(events: AsyncIterator[tuple[int, bytes, float]], *, release: Callable[[], None],
                 ping_seconds: float, send_seconds: float) -> EventSourceResponse:
    """The response for one stream; ``release`` runs exactly once when it ends."""
    return _SlotStream(_frames(events), release=release, ping=ping_seconds, send_timeout=send_seconds)
