"""The session file's format: the records a session holds, and how a file's bytes read back.

A session is ``<sessions_dir>/session-<id>.jsonl`` (``file_name``); its id is ``<UTC timestamp>-<uuid4
hex>`` (``20250501T101500123456Z-1b4e...``, to the microsecond), so names sort by creation. Each line is
one record, a JSON object with ``uuid``, ``parent_uuid`` (the record before it; None for the
first), ``type`` and ``at`` (UTC time), then its payload:

    session_meta     first, once: ``id``, ``created_at``, ``format``, ``pack`` and caller metadata
    turn.started     ``turn`` (1, 2, ...), the user's ``message`` and its ``question``: ``pack`` (the
                     pack's own) or ``follow_up`` (the turn's own; ``agent/sessions/turns.py``)
    event            ``turn`` and one event of that turn: its ``session.compacted`` first when a
                     compaction ran before it, then its run's trace events (``agent/contracts/trace.py``)
    observation      ``turn`` and one Observation, kept when compaction drops a turn's events
    turn.finished    ``turn``, ``status``, ``stop_reason``, ``final``, ``error``, ``observation_ids``
    turn.interrupted ``turn`` and ``reason``: the process ended inside the turn (written on resume)
    compacted        the conversation carried into later turns, as compaction left it
                     (``agent/sessions/compaction.py``), with its sizes before and after

A record is one line of strict JSON (``record_line``); one larger than ``MAX_RECORD_BYTES`` is stored
as a stub that says so. Reading (``SessionLog.parse``) parses every line; one that is cut off or not
a record is skipped, so a file torn at its tail reads up to its last good record, and ``good_end``
says where that record ends. How the file is written, kept and locked is ``store.py``'s.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from agent.contracts.decision import Observation
from agent.sessions.errors import SessionCorrupt

FORMAT = 1
SESSION_ID = re.compile(r"^[0-9]{8}T[0-9]{12}Z-[0-9a-f]{32}$")
FILE_NAME = re.compile(r"^session-([0-9]{8}T[0-9]{12}Z-[0-9a-f]{32})\.jsonl$")
MAX_RECORD_BYTES = 1024 * 1024  # a record larger than this is stored as a stub that says so
PREVIEW_CHARS = 80
OBSERVATION_EVENTS = ("tool.observation", "tool.rejected")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_session_id() -> str:
    # microseconds: sessions created in the same second still sort in the order they were made
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ") + "-" + uuid.uuid4().hex


def file_name(session_id: str) -> str:
    return f"session-{session_id}.jsonl"


def record_line(record: dict[str, Any]) -> bytes:
    return json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8") + b"\n"


@dataclass
class TurnView:
    """One turn as its records tell it. ``state``: ``finished``, ``interrupted`` or ``open`` (its
    process may still be running it, or died and nobody has resumed the session yet)."""

    number: int
    message: str
    state: str
    started: dict[str, Any]
    ended: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)

    @property
    def final(self) -> dict[str, Any] | None:
        return (self.ended or {}).get("final")

    @property
    def stop_reason(self) -> str | None:
        return (self.ended or {}).get("stop_reason")

    @property
    def question(self) -> str | None:
        """``pack`` or ``follow_up`` (None for a turn recorded before turns said which)."""
        return self.started.get("question")


@dataclass
class SessionLog:
    """A session file as read: its good records in order, and what was skipped."""

    id: str
    records: list[dict[str, Any]]
    size: int
    #: lines that were not records (cut off by a crash, or damaged) and were skipped
    skipped_lines: int = 0
    #: byte offset just after the last good record: what a resumed session keeps
    good_end: int = 0

    @classmethod
    def parse(cls, session_id: str, data: bytes) -> "SessionLog":
        records: list[dict[str, Any]] = []
        seen: set[str] = set()
        skipped = good_end = offset = 0
        for raw in data.split(b"\n"):
            end = offset + len(raw) + 1
            whole = end <= len(data)  # the last piece has no newline: a record cut off mid-write
            offset = end
            if not raw.strip():
                continue
            record = _record(raw) if whole else None
            if record is None or record["uuid"] in seen:
                skipped += 1
                continue
            seen.add(record["uuid"])
            records.append(record)
            good_end = end
        if not records or records[0].get("type") != "session_meta":
            raise SessionCorrupt(f"session {session_id} has no readable session_meta record")
        return cls(id=session_id, records=records, size=len(data), skipped_lines=skipped, good_end=good_end)

    @property
    def meta(self) -> dict[str, Any]:
        return self.records[0]

    @property
    def last_uuid(self) -> str | None:
        return self.records[-1]["uuid"] if self.records else None

    def turns(self) -> list[TurnView]:
        turns: dict[int, TurnView] = {}
        for record in self.records:
            kind, number = record.get("type"), record.get("turn")
            if kind == "turn.started" and isinstance(number, int) and number not in turns:
                turns[number] = TurnView(number=number, message=str(record.get("message", "")), state="open",
                                         started=record)
                continue
            turn = turns.get(number) if isinstance(number, int) else None
            if turn is None:
                continue
            if kind in ("turn.finished", "turn.interrupted") and turn.ended is None:
                turn.ended, turn.state = record, "finished" if kind == "turn.finished" else "interrupted"
            elif kind == "event" and isinstance(record.get("event"), dict):
                turn.events.append(record["event"])
                obs = observation_of(record["event"])
                if obs is not None:
                    turn.observations.append(obs)
            elif kind == "observation":
                obs = _observation(record.get("observation"))
                if obs is not None:
                    turn.observations.append(obs)
        return [turns[n] for n in sorted(turns)]

    def observations(self) -> list[Observation]:
        """Every Observation of the session, in the order recorded (each id once)."""
        seen: dict[str, Observation] = {}
        for turn in self.turns():
            for obs in turn.observations:
                seen.setdefault(obs.id, obs)
        return list(seen.values())

    def open_turn(self) -> int | None:
        """The turn started and never finished or marked interrupted, if any."""
        open_turns = [t.number for t in self.turns() if t.state == "open"]
        return open_turns[-1] if open_turns else None

    def next_turn(self) -> int:
        return max((t.number for t in self.turns()), default=0) + 1

    def compaction(self) -> dict[str, Any] | None:
        """The latest ``compacted`` record: the conversation carried through its ``through_turn``."""
        return next((r for r in reversed(self.records) if r.get("type") == "compacted"), None)

    def summary(self) -> dict[str, Any]:
        """The public list entry: id, created, turns, last message preview, size (no path)."""
        turns = self.turns()
        last = turns[-1] if turns else None
        preview = last.message if last else ""
        return {
            "id": self.id,
            "created_at": self.meta.get("created_at"),
            "pack": self.meta.get("pack"),
            "turns": len(turns),
            "finished_turns": sum(1 for t in turns if t.state == "finished"),
            "last_message": preview if len(preview) <= PREVIEW_CHARS else preview[:PREVIEW_CHARS - 1] + "…",
            "last_state": last.state if last else None,
            "updated_at": self.records[-1].get("at"),
            "bytes": self.size,
            "compactions": sum(1 for r in self.records if r.get("type") == "compacted"),
        }


def _record(raw: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("uuid"), str) \
            or not isinstance(record.get("type"), str):
        return None
    return record


def _observation(value: Any) -> Observation | None:
    try:
        return Observation.model_validate(value)
    except (ValueError, TypeError):
        return None


def observation_of(event: dict[str, Any]) -> Observation | None:
    """The Observation a trace event carries (a tool's observation or rejection), if it holds a valid one."""
    return _observation(event.get("observation")) if event.get("type") in OBSERVATION_EVENTS else None
