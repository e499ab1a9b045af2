"""Parsing model output into a typed Decision: the one place model text becomes data.

The model writes a continuation of the runtime's JSON prefix. ``parse_decision`` assembles
``prefix + text`` (closing the object with the branch's suffix when the model stopped at the end of
its value, as a grammar-constrained backend does), decodes exactly one JSON object and validates it
against the Decision union. Every failure is a ``DecisionError`` with a stable code and field
*names* only: the invalid text itself is never stored or echoed back to the model.

The JSON is strict, because whatever is accepted here travels on into the trace, the job store and
the page, and must be representable by all of them:

- at most ``MAX_DECISION_CHARS`` characters (``too_large``) and ``MAX_DEPTH`` nested arrays/objects
  (``too_deep``), checked *before* decoding so the decoder's recursion can never blow up;
- no ``NaN``/``Infinity`` and no number that overflows to one (``non_finite_number``), integers of at
  most ``MAX_INT_DIGITS`` digits (``number_out_of_range``);
- every string and key valid Unicode, i.e. no lone surrogate from a ``\\ud800`` escape
  (``invalid_unicode``); no NUL (``invalid_json``); no key twice in one object (``duplicate_key``).

Codes: invalid_json, trailing_text, not_an_object, too_large, too_deep, non_finite_number,
number_out_of_range, invalid_unicode, duplicate_key, unknown_tool, missing_fields,
unexpected_fields, wrong_type.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any

from pydantic import ValidationError

from agent.contracts.decision import DECISION_ADAPTER, ActionDecision, FinalDecision

#: A Decision is at most ``decision_max_new_tokens`` (<= 2048) tokens; 64 Ki characters is far above
#: any real one and keeps the work of one parse small.
MAX_DECISION_CHARS = 64 * 1024
#: A Decision needs 3 levels (object > arguments > a list of labels); 64 leaves room and stays far
#: below the interpreter's recursion limit.
MAX_DEPTH = 64
#: Digits of an integer literal; longer ones cannot be converted or printed by Python's int limits.
MAX_INT_DIGITS = 300

# One left-to-right pass over strings (an unclosed one runs to the end) and brackets, so "[[[" inside
# a value is not depth, and no input makes the scan backtrack.
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.DOTALL)


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


# -- strict JSON ---------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise DecisionError("non_finite_number", f"{name} is not a JSON number; write a finite number")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):
        raise DecisionError("non_finite_number", "a number is too large to represent; write a smaller one")
    return value


def _bounded_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise DecisionError("number_out_of_range", f"an integer has more than {MAX_INT_DIGITS} digits")
    return int(literal)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise DecisionError("duplicate_key", "an object names the same key twice")
    return value


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_bounded_int,
                            object_pairs_hook=_unique_keys)


def _nesting_depth(text: str) -> int:
    depth = deepest = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        if match.group()[0] == '"':
            continue
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(0, depth - 1)
    return deepest


def _check_unicode(value: Any) -> None:
    """Every string and key must encode as UTF-8 (the decoder turns a lone ``\\ud800`` into one)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise DecisionError("invalid_unicode", "a string holds an invalid Unicode escape (a lone surrogate)") from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _decode_object(text: str) -> tuple[Any, str]:
    stripped = text.lstrip()
    value, end = _DECODER.raw_decode(stripped)
    return value, stripped[end:].strip()


def _decode(prefix: str, text: str, suffix: str) -> Any:
    if "\x00" in text:
        raise DecisionError("invalid_json", "output contains a NUL character")
    if len(prefix) + len(text) + len(suffix) > MAX_DECISION_CHARS:
        raise DecisionError("too_large", f"output is longer than {MAX_DECISION_CHARS} characters")
    if _nesting_depth(prefix + text) > MAX_DEPTH:
        raise DecisionError("too_deep", f"output nests arrays or objects deeper than {MAX_DEPTH} levels")
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
    _check_unicode(value)
    return value


def parse_decision(prefix: str, text: str, suffix: str, *,
                   tool_names: Collection[str] | None = None) -> ActionDecision | FinalDecision:
    """``prefix + text`` as a Decision, or ``DecisionError``; never any other exception.

    ``tool_names`` are the tools of this run (default: the built-in ones); another name is
    ``unknown_tool``.
    """
    if tool_names is None:
        from agent.tools import catalog
        tool_names = catalog().names
    names = tuple(tool_names)
    try:
        value = _decode(prefix, text, suffix)
        if not isinstance(value, dict):
            raise DecisionError("not_an_object", "a Decision must be a JSON object")
        if value.get("type") == "action" and isinstance(value.get("tool"), str) and value["tool"] not in names:
            raise DecisionError("unknown_tool", f"unknown tool; allowed tools: {', '.join(names)}")
        try:
            return DECISION_ADAPTER.validate_python(value)
        except ValidationError as exc:
            raise _contract_error(exc) from None
    except DecisionError:
        raise
    except RecursionError:  # the depth check should make this impossible; a repairable error if not
        raise DecisionError("too_deep", "output nests too deeply to decode") from None
    except MemoryError:
        raise DecisionError("too_large", "output is too large to decode") from None
    except (ValueError, TypeError, UnicodeError) as exc:  # anything else the decoder may raise
        raise DecisionError("invalid_json", f"output cannot be decoded ({type(exc).__name__})") from None


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
