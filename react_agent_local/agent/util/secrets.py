"""The operator's secret values never leave the process as text: the one redactor of them.

The keys the runner or the CLI loads for served models (``backends/served_access.py``) are
registered here; ``scrub`` replaces each of them, and every run of ``MIN_RUN`` or more consecutive
characters of one, with ``[redacted]``. A fragment counts because text is cut for display: a key cut
at any length must not survive in the part that is kept, so scrubbing comes before any cut.

Where it is called (the write path of everything a run leaves behind):

- ``trace.redact_text``, which every event, run view, stream frame, ``job.json``, ``events.jsonl``,
  error message and explain prompt passes through;
- the served policy, on the model's output before the runtime or a tool sees it, so nothing a tool
  renders (a chart's title, say) can carry a key a server echoed;
- log records, when they are created (``register`` installs the record factory);
- ``HeldBack``, for text streamed to a page piece by piece.

How runs are found without trying every substring: each secret is cut into ``_GRAM``-character
pieces at offsets 0, ``_GRAM``, 2 * ``_GRAM``, ...; a run of at least 2 * ``_GRAM`` - 1 characters of
the secret holds one piece whole, so the text is searched (``str.find``) for the pieces alone and each
hit is widened to the longest run of the secret through it.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any, Iterable, Mapping

MARK = "[redacted]"
MIN_RUN = 8
_GRAM = 4  # MIN_RUN >= 2 * _GRAM - 1: every run of MIN_RUN characters holds one aligned piece
MAX_DEPTH = 64  # scrub_value leaves deeper values alone (a tool's arguments are flat)

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()
_log_factory_installed = False


#: Environment variable names that carry credentials by convention.
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION)", re.I)


def is_secret_name(name: str) -> bool:
    return SECRET_NAME.search(name) is not None


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables a child process has no business reading: any whose name looks
    like a credential, and any whose value holds a registered secret."""
    return {name: value for name, value in env.items()
            if not is_secret_name(name) and scrub(value) == value}


def register(values: Iterable[str]) -> None:
    """Add secret values; from now on they are scrubbed everywhere. A value shorter than ``MIN_RUN``
    (a placeholder such as ``test``) cannot be told from ordinary text and is left out: scrubbing
    every "test" or "1" would wreck the trace and protect nothing."""
    global _secrets
    new = {value.strip() for value in values if isinstance(value, str) and len(value.strip()) >= MIN_RUN}
    if not new:
        return
    with _lock:
        _secrets = tuple(sorted(set(_secrets) | new, key=len, reverse=True))
    _install_log_factory()


def scrub(text: str) -> str:
    """``text`` with every registered secret, and every run of >= ``MIN_RUN`` of its characters, replaced."""
    secrets = _secrets
    if not secrets or not text:
        return text
    spans: list[tuple[int, int]] = []
    for secret in secrets:
        spans += _runs(text, secret)
    return _replace(text, spans) if spans else text


def scrub_value(value: Any, _depth: int = 0) -> Any:
    """A copy of a JSON-like value with every string (and key) scrubbed."""
    if isinstance(value, str):
        return scrub(value)
    if _depth >= MAX_DEPTH or not _secrets:
        return value
    if isinstance(value, dict):
        return {scrub(k) if isinstance(k, str) else k: scrub_value(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_value(v, _depth + 1) for v in value]
    return value


class HeldBack:
    """Scrubbed pieces of a text that grows (a model's words streamed to a page).

    The last ``MIN_RUN - 1`` characters wait for what follows: they may be the start of a run that
    only the next piece completes, and a piece already sent cannot be taken back.
    """

    def __init__(self) -> None:
        self._sent = 0

    def piece(self, text: str, final: bool = False) -> str:
        """What may be sent now of ``text`` (the whole text so far), scrubbed."""
        clean = scrub(text)
        ready = len(clean) if final else max(self._sent, len(clean) - (MIN_RUN - 1))
        out, self._sent = clean[self._sent:ready], ready
        return out


# -- finding runs ---------------------------------------------------------------------------------


def _runs(text: str, secret: str) -> list[tuple[int, int]]:
    """(start, end) of the runs of ``secret`` in ``text`` that must go."""
    spans = []
    for offset in range(0, len(secret) - _GRAM + 1, _GRAM):
        piece = secret[offset:offset + _GRAM]
        at = text.find(piece)
        while at >= 0:
            start = at - _common_before(text, at, secret, offset)
            end = at + _GRAM + _common_after(text, at + _GRAM, secret, offset + _GRAM)
            if end - start >= MIN_RUN:
                spans.append((start, end))
                # subtle: a later hit of this piece inside the run adds nothing; one that ends past
                # it is still found, so a long repetitive text costs one widening per run
                at = text.find(piece, max(at + 1, end - _GRAM + 1))
            else:
                at = text.find(piece, at + 1)
    return spans


def _common_before(text: str, at: int, secret: str, offset: int) -> int:
    n = 0
    while n < at and n < offset and text[at - 1 - n] == secret[offset - 1 - n]:
        n += 1
    return n


def _common_after(text: str, at: int, secret: str, offset: int) -> int:
    n = 0
    while at + n < len(text) and offset + n < len(secret) and text[at + n] == secret[offset + n]:
        n += 1
    return n


def _replace(text: str, spans: list[tuple[int, int]]) -> str:
    out, last = [], 0
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    for start, end in merged:
        out += [text[last:start], MARK]
        last = end
    out.append(text[last:])
    return "".join(out)


# -- log records ------------------------------------------------------------------------------------


def _install_log_factory() -> None:
    """Scrub every log record as it is created, whatever handler or formatter later writes it."""
    global _log_factory_installed
    with _lock:
        if _log_factory_installed:
            return
        _log_factory_installed = True
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            return _scrub_record(previous(*args, **kwargs))

        logging.setLogRecordFactory(factory)


def _scrub_record(record: logging.LogRecord) -> logging.LogRecord:
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 -- a bad format string is logging's to report, not ours
        return record
    clean = scrub(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and not record.exc_text:
        # subtle: formatters reuse exc_text when it is set, so the traceback is written scrubbed
        record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
    if record.stack_info:
        record.stack_info = scrub(record.stack_info)
    return record
