"""Conversations that last: sessions of turns, kept as JSONL files, compacted without failing a turn.

- ``records.py``: the session file's format (its records, and how a file's bytes read back);
- ``store.py``: the sessions folder (append, fsync, atomic rewrite, resume, list, retention);
- ``errors.py``: the store's errors, each with a stable ``code``;
- ``compaction.py``: the conversation a turn carries over, and how it shrinks past a threshold;
- ``turns.py``: one turn of a session run by the real runtime (``Conversation.run_turn``).

``react-agent chat`` and ``react-agent sessions`` are ``agent/cli/chat.py``. ``records`` and ``store``
know nothing of the runtime; ``compaction`` reads Observations and the policy seam;
``turns`` wires both to ``runtime.run_agent``. The names below are imported when first used, so
the CLI can register its commands without loading the runtime.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "DEFAULT_SESSIONS_DIR": "store", "Session": "store", "SessionStore": "store",
    "SessionBusy": "errors", "SessionCorrupt": "errors", "SessionError": "errors", "SessionFull": "errors",
    "SessionNotFound": "errors",
    "SessionLog": "records", "TurnView": "records",
    "CompactionSettings": "compaction", "Compaction": "compaction", "Context": "compaction", "Handoff": "compaction",
    "Conversation": "turns", "TurnResult": "turns",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
