"""Parsing model output into a typed Decision (R-DEC-1, R-RT-3).

The model writes a continuation of the runtime's JSON prefix. ``parse_decision`` assembles
``prefix + text`` (closing the object with the branch's suffix when the model stopped at the end of
its value, as a grammar-constrained backend does), decodes exactly one JSON object and validates it
against the Decision union. Every failure is a ``DecisionError`` with a stable code and field
*names* only: the invalid text itself is never stored or echoed back to the model.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from .contracts import DECISION_ADAPTER, TOOL_NAMES, ActionDecision, FinalDecision

_DECODER = json.JSONDecoder()


class DecisionError(Exception):
    """The model's output is not a valid Decision."""

    def __init__(self, code: str, message: str, missing: list[str] | None = None, unexpected: list[str] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.missing = missing or []
        self.unexpected = unexpected or []

    def public(self) -> dict[str, Any]:
        """For the trace: the code and field counts; names the model invented are not repeated."""
        error = self.message if not self.unexpected else f"{len(self.unexpected)} unexpected field(s)" + (
            f"; missing: {', '.join(self.missing)}" if self.missing else "")
        return {
            "code": self.code,
            "error": error,
            "missing_fields": len(self.missing),
            "unexpected_fields": len(self.unexpected),
        }


def _decode_object(text: str) -> tuple[Any, str]:
    stripped = text.lstrip()
    value, end = _DECODER.raw_decode(stripped)
    return value, stripped[end:].strip()


def parse_decision(prefix: str, text: str, suffix: str) -> ActionDecision | FinalDecision:
    if "\x00" in text:
        raise DecisionError("invalid_json", "output contains a NUL character")
    candidates = [prefix + text]
    if suffix:
        candidates.append(prefix + text.rstrip() + suffix)
    decoded = None
    for candidate in candidates:
        try:
            decoded = _decode_object(candidate)
            break
        except ValueError:
            continue
    if decoded is None:
        raise DecisionError("invalid_json", "output is not one complete JSON object")
    value, trailing = decoded
    if trailing:
        raise DecisionError("trailing_text", "text follows the JSON object; write only the JSON")
    if not isinstance(value, dict):
        raise DecisionError("not_an_object", "a Decision must be a JSON object")
    if value.get("type") == "action" and isinstance(value.get("tool"), str) and value["tool"] not in TOOL_NAMES:
        raise DecisionError("unknown_tool", f"unknown tool; allowed tools: {', '.join(TOOL_NAMES)}")
    try:
        return DECISION_ADAPTER.validate_python(value)
    except ValidationError as exc:
        raise _contract_error(exc) from None


def _contract_error(exc: ValidationError) -> DecisionError:
    missing, unexpected, other = [], [], []
    for err in exc.errors(include_url=False, include_input=False):
        # The discriminated union puts the branch tag first in loc: ('action', 'reasoning').
        loc = [str(p) for p in err["loc"]]
        field = ".".join(loc[1:] if loc and loc[0] in ("action", "final") else loc) or "type"
        if err["type"] == "missing":
            missing.append(field)
        elif err["type"] == "extra_forbidden":
            unexpected.append(field)
        elif err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            other.append("'type' must be \"action\" or \"final\"")
        else:
            other.append(f"'{field}': {err['msg']}")
    parts = []
    if missing:
        parts.append("missing fields: " + ", ".join(missing))
    if unexpected:
        # Field names the model invented are reported by name (e.g. reasoning), never their values.
        parts.append("unexpected fields: " + ", ".join(n[:40] for n in unexpected))
    parts += other
    code = "unexpected_fields" if unexpected else "missing_fields" if missing else "wrong_type"
    return DecisionError(code, "; ".join(parts)[:500], missing, unexpected)
