"""The execution trace (R-TR): numbered events, a size cap, and the privacy rules.

Every event has ``seq`` (monotonic from 1), ``type``, ``step``, ``attempt``, ``phase`` and
``elapsed_ms`` plus its payload. Payloads pass through ``redact`` before they are stored: absolute
paths and the user's name never reach a trace, an error or an export. Raw model text never gets
here at all -- the runtime only hands over its SHA-256.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import re
import threading
import time
from collections import deque
from typing import Any, Callable

MAX_EVENTS = 800
HIDDEN_REASONING_KEYS = frozenset({"thought", "thoughts", "reasoning", "analysis", "chain_of_thought"})

# POSIX absolute paths of two or more segments, Windows drive paths, UNC paths, file:// URLs.
# A POSIX segment must start like a file name (letter, _, ., ~), so arithmetic such as
# "(72 + 78) / 4 / 2" or "((a)/4)/78" is never mistaken for a path.
_ABS_PATH = re.compile(
    r"(file://)?(?:(?<![\w])[A-Za-z]:[\\/][^\s'\"]*|\\\\[^\s'\"]+"
    r"|(?<![\w.)])/(?:[A-Za-z_.~][^\s/'\"]*/)+[^\s'\"]*)"
)


def _user_names() -> set[str]:
    names = set()
    try:
        names.add(getpass.getuser())
    except Exception:  # no user database in some containers
        pass
    home = os.path.expanduser("~")
    if home not in ("", "/", "~"):
        names.add(os.path.basename(home.rstrip("/")))
    return {n for n in names if len(n) >= 3 and n not in {"root", "user"}}


_USERS = _user_names()


def redact_text(text: str) -> str:
    text = _ABS_PATH.sub("<path>", text)
    for name in _USERS:
        text = re.sub(rf"\b{re.escape(name)}\b", "<user>", text)
    return text


def redact(value: Any) -> Any:
    """Return a copy with paths and user names replaced; dict keys are kept."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value


def strip_hidden_reasoning(value: Any) -> Any:
    """Trace export filter: drop thought/reasoning/analysis keys at any depth."""
    if isinstance(value, dict):
        return {k: strip_hidden_reasoning(v) for k, v in value.items() if k.lower() not in HIDDEN_REASONING_KEYS}
    if isinstance(value, list):
        return [strip_hidden_reasoning(v) for v in value]
    return value


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def path_hash(path: str | os.PathLike[str]) -> str:
    """The public name of a model path: a short hash, never the path."""
    return hashlib.sha256(os.fspath(path).encode("utf-8", "surrogatepass")).hexdigest()[:16]


class Trace:
    """Append-only event log of one run with an 800-event cap.

    When full, the oldest events are dropped (``dropped`` counts them); ``run.finished`` is always
    kept. ``sink`` receives each stored event (the runner's job store streams them to pollers).
    """

    def __init__(self, sink: Callable[[dict[str, Any]], None] | None = None, max_events: int = MAX_EVENTS,
                 clock: Callable[[], float] = time.monotonic):
        self._events: deque[dict[str, Any]] = deque()
        self._seq = 0
        self._lock = threading.Lock()
        self._clock = clock
        self._started = clock()
        self.max_events = max_events
        self.dropped = 0
        self.sink = sink

    def emit(self, type: str, phase: str, step: int = 0, attempt: int = 0, **payload: Any) -> dict[str, Any]:
        with self._lock:
            self._seq += 1
            event = {
                "seq": self._seq,
                "type": type,
                "step": step,
                "attempt": attempt,
                "phase": phase,
                "elapsed_ms": round((self._clock() - self._started) * 1000, 3),
                **redact(payload),
            }
            room = self.max_events - (0 if type == "run.finished" else 1)
            while len(self._events) >= room and self._events:
                self._events.popleft()
                self.dropped += 1
            self._events.append(event)
        if self.sink is not None:
            self.sink(event)
        return event

    @property
    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._events)

    @property
    def last_seq(self) -> int:
        return self._seq
