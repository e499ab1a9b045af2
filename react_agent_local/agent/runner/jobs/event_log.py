"""One job's event log: its entries in order, and the readers following it.

An entry is an event as the store keeps it: made public and JSON-safe (``trace.redact``, hidden
reasoning stripped), serialized once as strict JSON -- the bytes a poll splices into its answer,
``events.jsonl`` holds and a stream sends -- with its seq and the wall-clock time it was recorded.
Entries are appended, never mutated. The log keeps the newest ``MAX_EVENTS`` (``dropped`` counts the
others), ends with exactly one run.finished and ignores an event after it or one whose seq does not
grow, so the trace has no gap and no repeat.

``lock`` is the job's lock (the order of the store's locks is in ``agent/runner/job_store.py``): ``add`` and
``since`` are called with it held, so the job's state and its events change and are read together.
``follow`` takes it itself, for microseconds per batch. An async reader waits on an
``asyncio.Event`` of its own, set with ``call_soon_threadsafe`` by ``wake`` after an append, so the
appending thread never waits on a reader.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import threading
import time
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, AsyncIterator

from agent.contracts.trace import MAX_EVENTS, redact, strip_hidden_reasoning

#: What a marker keeps of an event that cannot be stored.
EVENT_FIELDS = ("seq", "type", "step", "attempt", "phase", "elapsed_ms")

_SEQ = attrgetter("seq")


def strict_json(value: Any, **options: Any) -> bytes:
    """The one serialization of what the store keeps: strict JSON (no NaN), encoded as UTF-8."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, **options).encode("utf-8")


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored event."""

    seq: int
    event: dict[str, Any]
    #: ``event`` as strict JSON, without a newline.
    line: bytes
    #: Unix time the store recorded it (a stream sends it so a load check can measure delivery).
    recorded: float


def entry_of(event: dict[str, Any]) -> Entry | None:
    """The entry the log keeps for ``event``; None when it has no integer seq.

    An event that still cannot be serialized is replaced by a marker with its seq and type, so
    the trace never has a gap.
    """
    seq = event.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool):
        return None
    event = strip_hidden_reasoning(redact(event))  # redact first: it bounds the depth
    try:
        line = strict_json(event)
    except (ValueError, TypeError, RecursionError):  # redact() makes this unreachable; the trace still has no gap
        event = {k: event.get(k) for k in EVENT_FIELDS} | {"unstorable": True}
        event["type"] = str(event["type"])
        if event["type"] == "run.finished":
            event.update(status="failed", stop_reason="runtime_error")
        line = strict_json(redact(event))
    return Entry(seq, event, line, time.time())


class EventLog:
    """The entries of one job, oldest first, with ``last_seq``, ``dropped`` and ``finished``."""

    def __init__(self, limit: int = MAX_EVENTS):
        self.lock = threading.Lock()
        self.limit = limit
        self.entries: list[Entry] = []
        self.last_seq = 0
        self.dropped = 0
        #: True once run.finished is in the log; nothing is added after it.
        self.finished = False
        #: Async readers waiting for the next entry, by event loop.
        self.waiters: dict[asyncio.AbstractEventLoop, set[asyncio.Event]] = {}

    def add(self, entry: Entry) -> bool:
        """Append ``entry`` (``lock`` held); False when it comes after run.finished or repeats a seq."""
        if self.finished or entry.seq <= self.last_seq:
            return False
        self.entries.append(entry)
        self.last_seq = entry.seq
        if len(self.entries) > self.limit:  # run.finished is always the newest, so it is never dropped
            del self.entries[0]
            self.dropped += 1
        if entry.event.get("type") == "run.finished":
            self.finished = True
        return True

    def since(self, after_seq: int) -> list[Entry]:
        """The entries with seq > ``after_seq`` (``lock`` held); a new list, safe to read without it."""
        return self.entries[bisect.bisect_right(self.entries, after_seq, key=_SEQ):]

    def wake(self) -> None:
        """Wake every reader waiting for the next entry; called after ``add``, without ``lock``."""
        with self.lock:
            waiting = [(loop, tuple(wakes)) for loop, wakes in self.waiters.items()]
        for loop, wakes in waiting:
            try:
                loop.call_soon_threadsafe(_set_all, wakes)
            except RuntimeError:  # that loop is closed; its readers are gone
                pass

    async def follow(self, after_seq: int, until: float | None = None) -> AsyncIterator[tuple[int, bytes, float]]:
        """(seq, stored JSON, recorded-at unix time) of each entry after ``after_seq`` as it arrives.

        Ends after run.finished, or when the event loop's clock passes ``until``. Waiting costs the
        appending thread nothing: it only schedules a wake-up on this event loop. The wake-up is
        cleared before each read, so an entry added between the read and the wait still wakes the
        reader (no lost wake-up, no busy loop).
        """
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        with self.lock:
            self.waiters.setdefault(loop, set()).add(wake)
        try:
            while True:
                wake.clear()
                with self.lock:
                    batch = self.since(after_seq)
                    done = self.finished
                for entry in batch:
                    yield entry.seq, entry.line, entry.recorded
                    after_seq = entry.seq
                remaining = None if until is None else until - loop.time()
                if done or (remaining is not None and remaining <= 0):
                    return
                try:
                    await asyncio.wait_for(wake.wait(), remaining)
                except asyncio.TimeoutError:
                    return
        finally:
            with self.lock:
                waiting = self.waiters.get(loop)
                if waiting is not None:
                    waiting.discard(wake)
                    if not waiting:
                        del self.waiters[loop]


def _set_all(wakes: tuple[asyncio.Event, ...]) -> None:
    for wake in wakes:
        wake.set()
