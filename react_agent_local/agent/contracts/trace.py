"""The execution trace: numbered events, a size cap, and the privacy rules.

Every event has ``seq`` (monotonic from 1), ``type``, ``step``, ``attempt``, ``phase`` and
``elapsed_ms`` plus its payload. Payloads pass through ``redact`` before they are stored: the
operator's secret values (``agent/util/secrets.py``), absolute paths and the user's name never reach a
trace, an error or an export, and what is stored is always strict, UTF-8-encodable JSON (a NaN or a
lone surrogate becomes a marker), so the job store can write every event and read it back. Raw
model text never gets here at all -- the runtime only hands over its SHA-256.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import math
import os
import re
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

from agent.util.secrets import scrub

MAX_EVENTS = 800
HIDDEN_REASONING_KEYS = frozenset({"thought", "thoughts", "reasoning", "analysis", "chain_of_thought"})

# Paths are recognised by their structure, in any script:
# - POSIX: "/" + a name + "/" ... ("/2024/models/q.gguf", "/用户/模型/q.gguf"), not preceded by a word
#   character, ")", "]", "}" or "." -- so divisions such as "(72+78)/4", "((a)/4)/78" and "1/2" are
#   never paths -- and holding at least one letter, so "/4/2" stays arithmetic;
# - "~/..." and "~user/...", Windows "C:\..." (or "C:/..."), UNC "\\server\share";
# - spaces: a quoted path runs to its closing quote; an unquoted one continues over up to four words
#   that end in a separator of the same style ("/home/alice/My Models/q.gguf" is one path);
# - URLs: "file://" ones are paths; http(s), ws(s) and ftp URLs ("http://127.0.0.1:4890/status")
#   name a service, not a file here, and are kept, except for paths in their query string.
# Not recognised: relative paths, and a path holding a quote, "<", ">" or "|" unless it is quoted.
_NAME = r"[^\s/\\'\"<>|]"  # a character of one path component
_CHAR = r"[^\s'\"<>|]"  # a character of a path
_LETTER = r"[^\W\d]"


def _continued(sep: str) -> str:
    return rf"(?:(?: (?={_NAME}*{_LETTER}){_NAME}+){{1,4}}{sep}{_CHAR}*)*"


_WINDOWS_CONTINUED, _POSIX_CONTINUED = _continued(r"\\"), _continued("/")
_PATHS = re.compile(
    rf"(?P<url>\b(?i:https?|wss?|ftp)://{_CHAR}*)"
    rf"|\b(?i:file):/{_CHAR}*"
    rf"|(?<=(?P<q>[\"']))(?P<quoted>(?:/|~/|[A-Za-z]:[\\/]|\\\\)[^\"'\n]*)(?=(?P=q))"
    rf"|(?<!\w)[A-Za-z]:[\\/]{_CHAR}*{_WINDOWS_CONTINUED}"
    rf"|\\\\{_NAME}+\\{_CHAR}*{_WINDOWS_CONTINUED}"
    rf"|(?<![\w~/\\])~(?:[A-Za-z_][\w.-]*)?/{_CHAR}*{_POSIX_CONTINUED}"
    rf"|(?<![\w)\]}}.~/\\])(?P<posix>/{_NAME}+(?:(?: (?={_NAME}*{_LETTER}){_NAME}+){{0,4}}/{_CHAR}*)+)"
)
_HAS_LETTER = re.compile(_LETTER)
_SEPARATED = re.compile(r".[^/\\]*[/\\]", re.DOTALL)  # a separator after the first character
PATH_MARK = "<path>"


def _redact_path(match: re.Match[str]) -> str:
    text = match.group()
    if match.group("url") is not None:
        base, question, query = text.partition("?")
        return base + question + _PATHS.sub(_redact_path, query)
    if match.group("quoted") is not None:
        # Without a letter or a second separator no part of it can be a path either.
        return PATH_MARK if _HAS_LETTER.search(text) and _SEPARATED.match(text) else text
    if match.group("posix") is not None and not _HAS_LETTER.search(text):
        return text  # "/4/2": digits and operators only
    return PATH_MARK


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
_USER_NAMES = re.compile("|".join(rf"\b{re.escape(n)}\b" for n in sorted(_USERS))) if _USERS else None


def redact_text(text: str) -> str:
    """``text`` with every secret value (or run of one) replaced by ``[redacted]``, every absolute
    path by ``<path>`` and the user's name by ``<user>``. Secrets go first: a path or a name
    replaced inside a key would split it into pieces too short to be recognised."""
    text = _PATHS.sub(_redact_path, scrub(text))
    if _USER_NAMES is not None:
        text = _USER_NAMES.sub("<user>", text)
    return text


# -- what may leave the process -------------------------------------------------------------------

NON_FINITE_MARK = "<non-finite number>"
HUGE_INT_MARK = "<integer out of range>"
TOO_DEEP_MARK = "<nested too deeply>"
MAX_PUBLIC_DEPTH = 100
_SURROGATE = re.compile("[\ud800-\udfff]")


def _valid_unicode(text: str) -> str:
    """Lone surrogates (which UTF-8 cannot encode) become U+FFFD; everything else is kept."""
    return _SURROGATE.sub("\ufffd", text)


def redact(value: Any, _depth: int = 0) -> Any:
    """A public, JSON-safe copy of ``value``: every string and key redacted and valid Unicode.

    What cannot be written as strict JSON is replaced by a marker, never dropped: NaN and infinite
    numbers become ``<non-finite number>``, lone surrogates U+FFFD, values nested deeper than
    ``MAX_PUBLIC_DEPTH`` ``<nested too deeply>``, other objects their redacted ``str()``; two keys
    that redact alike are kept as ``<path>`` and ``<path>#2``. So
    ``json.dumps(redact(v), allow_nan=False)`` always succeeds and encodes as UTF-8.
    """
    if isinstance(value, str):
        return redact_text(_valid_unicode(value))
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if value.bit_length() <= 1000 else HUGE_INT_MARK  # json.dumps refuses huge ints
    if isinstance(value, float):
        return value if math.isfinite(value) else NON_FINITE_MARK
    if _depth >= MAX_PUBLIC_DEPTH and isinstance(value, (dict, list, tuple)):
        return TOO_DEEP_MARK
    if isinstance(value, dict):
        public: dict[str, Any] = {}
        clashes: dict[str, int] = {}
        for k, v in value.items():
            key = redact(k if isinstance(k, str) else str(k), _depth + 1)
            while key in public:  # two keys redacted alike ("<path>"): both values are kept
                clashes[key] = clashes.get(key, 1) + 1
                key = f"{key}#{clashes[key]}"
            public[key] = redact(v, _depth + 1)
        return public
    if isinstance(value, (list, tuple)):
        return [redact(v, _depth + 1) for v in value]
    return redact(str(value), _depth + 1)


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


def write_events(folder: Path, events: list[dict[str, Any]]) -> bool:
    """A run's trace beside its artifacts, as the runner keeps it (``events.jsonl``); False when it
    could not be written (the caller decides whether that matters)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(e, ensure_ascii=False, allow_nan=False) + "\n" for e in events)
        (folder / "events.jsonl").write_text(text, encoding="utf-8")
        return True
    except (OSError, ValueError):
        return False
