"""The session store: one JSONL file per session, appended as a conversation happens.

A session is ``<sessions_dir>/session-<id>.jsonl``, one record a line; what the records hold and how
a file reads back is ``records.py``, the store's errors ``errors.py``.

Durability. Records are appended as they happen (one ``write`` of one whole line) and the file is
fsynced when a turn starts and ends, so a crash loses at most the tail of the turn in progress.
Reading skips a line that is cut off or not a record (``records.SessionLog.parse``), so a file torn
at its tail reads up to its last good record. Opening a session to continue it (``SessionStore.open``)
cuts such a tail off, then marks a turn that was started and never finished with
``turn.interrupted``; it never writes an old record again, so a resumed session holds each uuid once.
Compaction rewrites the file: the new content goes to a temporary file, which is fsynced, locked and
renamed over the old one (``os.replace``), and the folder is fsynced, so a crash leaves either
file whole.

Safety. Everything written passes ``trace.redact`` (the operator's secrets through
``secrets.scrub``, absolute paths, the user's name) and is strict JSON. Files are opened relative to
the sessions folder's descriptor with ``O_NOFOLLOW`` (``agent/util/no_follow.py``, as the run folders
are), so a session file swapped for a symlink is refused, never read or written through. One process
at a time holds a session open for writing (``flock``; ``SessionBusy`` for the next). What ``list``
and ``view`` return holds ids, times, counts and redacted text, never a path.

Caps. ``max_sessions`` and ``max_total_bytes`` bound the folder (the oldest sessions not held open go
first, when a session is created); ``max_session_bytes`` bounds one file: past it no more ``event``
records are appended (turn records still are, and count what was left out), and
``turns.Conversation`` compacts a session past ``compact_bytes`` and refuses a turn (``SessionFull``)
when compaction cannot bring it under ``max_session_bytes``.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import threading
import uuid
from pathlib import Path
from typing import Any

from agent.contracts.trace import redact
from agent.sessions.errors import SessionBusy, SessionCorrupt, SessionError, SessionNotFound
from agent.sessions.records import (
    FILE_NAME, FORMAT, MAX_RECORD_BYTES, SESSION_ID, SessionLog, file_name, new_session_id, now, observation_of,
    record_line,
)
from agent.task.packs import DEFAULT_RUNS_DIR
from agent.util.no_follow import NoFollowFolder, read_fd, write_all

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; one writer per session is then the caller's to keep
    fcntl = None  # type: ignore[assignment]

#: Sessions of the CLI: inside the runs folder (ignored by git in a checkout).
DEFAULT_SESSIONS_DIR = DEFAULT_RUNS_DIR / "sessions"
INTERRUPTED_REASON = "the process ended before the turn finished"
#: a session's private settings (``SessionStore.remember``), in its artifacts folder
SETTINGS_FILE = "settings.json"


def _lock(fd: int) -> bool:
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


# -- an open session -----------------------------------------------------------------------------


class Session:
    """A session held open for writing by this process (``SessionStore.create`` / ``open``).

    ``log`` is the session as written so far. ``append`` writes one record and returns it as stored;
    ``sync`` makes what was written durable; ``rewrite`` replaces the file atomically. Thread-safe.
    """

    def __init__(self, store: "SessionStore", log: SessionLog, fd: int):
        self.store = store
        self.log = log
        self.id = log.id
        self._fd: int | None = fd
        self._lock = threading.Lock()
        self.dropped_events = 0  # event records left out at the size cap, since the last turn record

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def size(self) -> int:
        return self.log.size

    @property
    def closed(self) -> bool:
        return self._fd is None

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                try:
                    os.fsync(self._fd)
                except OSError:
                    pass
                os.close(self._fd)  # releases the lock
                self._fd = None

    def append(self, kind: str, **payload: Any) -> dict[str, Any] | None:
        """Write one record (redacted, strict JSON) after the last one; None when an ``event``
        record was left out at the size cap."""
        with self._lock:
            if self._fd is None:
                raise SessionError(f"session {self.id} is closed")
            if kind == "event" and self.log.size >= self.store.max_session_bytes:
                self.dropped_events += 1
                return None
            record = redact({"uuid": uuid.uuid4().hex, "parent_uuid": self.log.last_uuid, "type": kind,
                             "at": now(), **payload})
            data = record_line(record)
            if len(data) > MAX_RECORD_BYTES:
                record = {key: record[key] for key in ("uuid", "parent_uuid", "type", "at")}
                record.update({k: payload[k] for k in ("turn",) if k in payload},
                              omitted=f"the record had {len(data)} bytes, more than {MAX_RECORD_BYTES}")
                data = record_line(record)
            write_all(self._fd, data)
            self.log.records.append(record)
            self.log.size += len(data)
            self.log.good_end = self.log.size
            return record

    def sync(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)

    def compact(self, through_turn: int, **payload: Any) -> dict[str, Any]:
        """Rewrite the session as a ``compacted`` record through ``through_turn`` leaves it: the
        events of those turns give way to their Observations (the evidence stays), earlier
        ``compacted`` records go (this one supersedes them), every other record is kept as it was.
        Returns the ``compacted`` record."""
        kept: list[dict[str, Any]] = []
        dropped = 0
        for record in self.log.records:
            kind, turn = record.get("type"), record.get("turn")
            if kind == "compacted":
                continue
            if kind == "event" and isinstance(turn, int) and turn <= through_turn:
                dropped += 1
                event = record.get("event") if isinstance(record.get("event"), dict) else {}
                if observation_of(event) is not None:
                    kept.append({"uuid": uuid.uuid4().hex, "parent_uuid": None, "type": "observation",
                                 "at": record.get("at"), "turn": turn, "observation": event["observation"]})
                continue
            kept.append(record)
        compacted = redact({"uuid": uuid.uuid4().hex, "parent_uuid": None, "type": "compacted", "at": now(),
                            "through_turn": through_turn, "dropped_events": dropped, **payload})
        self.rewrite([*kept, compacted])
        return self.log.records[-1]

    def rewrite(self, records: list[dict[str, Any]]) -> None:
        """Replace the file by ``records`` (their uuids kept, each one's parent the record before
        it): written to a temporary file, fsynced, locked, renamed over the session, folder fsynced."""
        with self._lock:
            if self._fd is None:
                raise SessionError(f"session {self.id} is closed")
            folder, name = self.store._folder, file_name(self.id)
            tmp = f".{name}.tmp"
            linked, parent = [], None
            for record in records:
                linked.append({**record, "parent_uuid": parent})
                parent = record["uuid"]
            data = b"".join(record_line(r) for r in linked)
            try:
                folder.unlink(tmp)  # a leftover of a crash during an earlier rewrite
            except FileNotFoundError:
                pass
            fd = folder.open(tmp, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL)
            try:
                write_all(fd, data)
                os.fsync(fd)
                if not _lock(fd):
                    raise SessionBusy(f"session {self.id}: the rewritten file is locked by another process")
                folder.replace(tmp, name)
            except BaseException:
                os.close(fd)
                try:
                    folder.unlink(tmp)
                except OSError:
                    pass
                raise
            folder.sync()
            os.close(self._fd)  # the old file's lock goes with it; the new file is already locked
            self._fd = fd
            self.log = SessionLog(id=self.id, records=linked, size=len(data), good_end=len(data))


# -- the store -----------------------------------------------------------------------------------


class SessionStore:
    """The sessions folder: create, open (resume), read, list, delete, and retention.

    ``create`` and ``open`` return a ``Session`` this process holds for writing; ``read`` and ``list``
    only read (a session another process is writing can be read meanwhile).
    """

    def __init__(self, root: Path, *, max_sessions: int = 100, max_total_bytes: int = 256 * 1024 * 1024,
                 max_session_bytes: int = 8 * 1024 * 1024, compact_bytes: int | None = None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_sessions = max_sessions
        self.max_total_bytes = max_total_bytes
        self.max_session_bytes = max_session_bytes
        #: past this size a conversation compacts its session before the next turn
        self.compact_bytes = compact_bytes if compact_bytes is not None else max_session_bytes * 3 // 4
        self._folder = NoFollowFolder(self.root, file_mode=0o600)
        self._summaries: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}

    def close(self) -> None:
        self._folder.close()

    # -- sessions ------------------------------------------------------------------------------

    def create(self, pack: str | None = None, **meta: Any) -> Session:
        """A new session with its ``session_meta`` record (``pack`` and ``meta`` are public values)."""
        session_id = new_session_id()
        fd = self._folder.open(file_name(session_id), os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL)
        _lock(fd)
        session = Session(self, SessionLog(id=session_id, records=[], size=0), fd)
        session.append("session_meta", id=session_id, created_at=now(), format=FORMAT, pack=pack, **meta)
        session.sync()
        self._folder.sync()
        self.enforce_retention(keep={session_id})
        return session

    def open(self, session_id: str) -> Session:
        """The session held for writing, ready to continue: a torn tail cut off, an unfinished turn
        marked ``turn.interrupted``. ``SessionBusy`` while another process holds it."""
        name = self._name(session_id)
        try:
            fd = self._folder.open(name, os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:
            raise SessionNotFound(f"no session {session_id}") from None
        except OSError as exc:
            code = errno.errorcode.get(exc.errno, "error")
            raise SessionCorrupt(f"session {session_id} cannot be opened ({code})") from None
        try:
            if not _lock(fd):
                raise SessionBusy(f"session {session_id} is open in another process")
            # The file may have been renamed over (compacted) between our open and our lock.
            if not os.path.samestat(os.fstat(fd), self._folder.stat(name)):
                raise SessionBusy(f"session {session_id} was rewritten while it was opened; open it again")
            try:
                self._folder.unlink(f".{name}.tmp")  # a rewrite a crash interrupted: the session file is whole
            except FileNotFoundError:
                pass
            log = SessionLog.parse(session_id, self._read(fd))
            if log.good_end < log.size:  # a record cut off by a crash: drop it before appending
                os.ftruncate(fd, log.good_end)
                os.fsync(fd)
                log.size = log.good_end
        except BaseException:
            os.close(fd)
            raise
        session = Session(self, log, fd)
        unfinished = log.open_turn()
        if unfinished is not None:
            session.append("turn.interrupted", turn=unfinished, reason=INTERRUPTED_REASON)
            session.sync()
        return session

    def read(self, session_id: str) -> SessionLog:
        """The session as it is on disk now (no lock, nothing written)."""
        name = self._name(session_id)
        try:
            fd = self._folder.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            raise SessionNotFound(f"no session {session_id}") from None
        except OSError:
            raise SessionCorrupt(f"session {session_id} cannot be opened") from None
        try:
            return SessionLog.parse(session_id, self._read(fd))
        finally:
            os.close(fd)

    def view(self, session_id: str) -> dict[str, Any]:
        """A session for display: its list entry and its turns (message, state, answer, events)."""
        log = self.read(session_id)
        return {**log.summary(), "turns": [
            {"turn": t.number, "message": t.message, "question": t.question, "state": t.state, "final": t.final,
             "stop_reason": t.stop_reason, "observation_ids": [o.id for o in t.observations],
             "events": t.events} for t in log.turns()]}

    def list(self) -> list[dict[str, Any]]:
        """The list entries of every readable session, newest first (see ``SessionLog.summary``)."""
        out = []
        for session_id in reversed(self.ids()):
            try:
                st = self._folder.stat(file_name(session_id))
                key = (st.st_size, st.st_mtime_ns)
                cached = self._summaries.get(session_id)
                if cached is None or cached[0] != key:
                    cached = (key, self.read(session_id).summary())
                    self._summaries[session_id] = cached
                out.append(cached[1])
            except (SessionError, OSError):
                continue
        return out

    def ids(self) -> list[str]:
        """Ids of the session files in the folder, oldest first (links and other files ignored)."""
        found = []
        for name in self._folder.names():
            match = FILE_NAME.match(name)
            if match:
                try:
                    if stat.S_ISREG(self._folder.stat(name).st_mode):
                        found.append(match.group(1))
                except OSError:
                    continue
        return sorted(found)

    def resolve(self, text: str) -> str:
        """A session id from what a person typed: the whole id, or a prefix only one id has."""
        text = text.strip()
        if text.startswith("session-"):
            text = text[len("session-"):].removesuffix(".jsonl")
        ids = self.ids()
        if text in ids:
            return text
        matches = [i for i in ids if i.startswith(text)] if len(text) >= 4 else []
        if len(matches) == 1:
            return matches[0]
        raise SessionNotFound(f"no session {text}" if not matches else f"{len(matches)} sessions start with {text}")

    def delete(self, session_id: str) -> None:
        """Remove a session and its artifacts; ``SessionBusy`` while a process holds it open."""
        name = self._name(session_id)
        try:
            fd = self._folder.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            raise SessionNotFound(f"no session {session_id}") from None
        try:
            if not _lock(fd):
                raise SessionBusy(f"session {session_id} is open in another process")
            self._folder.unlink(name)
        finally:
            os.close(fd)
        self._summaries.pop(session_id, None)
        artifacts = self.artifact_dir(session_id)
        if artifacts.is_dir() and not artifacts.is_symlink():
            shutil.rmtree(artifacts, ignore_errors=True)

    def remember(self, session_id: str, **settings: Any) -> None:
        """Keep a session's private settings (its model spec, its workspace folder) beside its artifacts,
        so a restarted runner or a resumed chat continues with them: a file readable by this user only,
        never part of the session file (whose records are public) and deleted with the session."""
        folder = self.artifact_dir(session_id)
        if folder.is_symlink():
            raise SessionCorrupt(f"session {session_id}: its artifacts folder is a link")
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        merged = {**(self.remembered(session_id) or {}), **settings}
        data = json.dumps(merged, ensure_ascii=False, allow_nan=False).encode("utf-8")
        # ``artifacts/`` is followed as the sessions folder is; the session's folder in it never is, nor the file
        with NoFollowFolder(folder.parent, folder.name, file_mode=0o600) as private:
            temp = f".{SETTINGS_FILE}.{uuid.uuid4().hex[:8]}.tmp"
            out = private.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            try:
                write_all(out, data)
                os.fsync(out)
            finally:
                os.close(out)
            private.replace(temp, SETTINGS_FILE)

    def remembered(self, session_id: str) -> dict[str, Any] | None:
        """The settings ``remember`` kept for the session, None when none (or they cannot be read)."""
        folder = self.artifact_dir(session_id)
        try:
            with NoFollowFolder(folder.parent, folder.name) as private:
                value = json.loads(private.read(SETTINGS_FILE, 1 << 20))
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def artifact_dir(self, session_id: str) -> Path:
        """Where the turns of a session leave their artifacts (a chart's PNG): ``artifacts/<id>/``."""
        return self.root / "artifacts" / self._checked(session_id)

    def enforce_retention(self, keep: set[str] = frozenset()) -> list[str]:
        """Delete the oldest sessions past ``max_sessions`` or ``max_total_bytes``, never one in
        ``keep`` or one another process holds open. Returns the ids deleted."""
        sizes = {}
        for session_id in self.ids():
            try:
                sizes[session_id] = self._folder.stat(file_name(session_id)).st_size
            except OSError:
                continue
        count, total, deleted = len(sizes), sum(sizes.values()), []
        for session_id in sizes:  # oldest first
            if count <= self.max_sessions and total <= self.max_total_bytes:
                break
            if session_id in keep:
                continue
            try:
                self.delete(session_id)
            except SessionError:
                continue
            count, total = count - 1, total - sizes[session_id]
            deleted.append(session_id)
        return deleted

    # -- helpers -------------------------------------------------------------------------------

    def _checked(self, session_id: str) -> str:
        if not isinstance(session_id, str) or not SESSION_ID.match(session_id):
            raise SessionNotFound(f"no session {str(session_id)[:80]}")
        return session_id

    def _name(self, session_id: str) -> str:
        return file_name(self._checked(session_id))

    def _read(self, fd: int) -> bytes:
        # A file somewhat past the cap (the turn records written after it) is still read.
        try:
            return read_fd(fd, self.max_session_bytes + 4 * MAX_RECORD_BYTES)
        except OSError as exc:
            code = errno.errorcode.get(exc.errno, "error")
            raise SessionCorrupt(f"the session file cannot be read ({code})") from None
