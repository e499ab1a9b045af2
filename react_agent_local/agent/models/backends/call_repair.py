"""Repairs of a served model's tool call, against the called tool's JSON schema: the one place
where what a weak model sent is turned into the call it meant.

What models and chat templates send instead of one clean call, and what becomes of it:

    envelope           the call wrapped around its own arguments -- ``{"name": T, "arguments": {...}}``,
                       ``{"tool": T, "parameters": {...}}``, ``{"function": {...}}``, ``{"type":
                       "function", ...}``, ``{"name": T, <the arguments>}``: unwrapped only when the
                       inner object fits the tool's schema better than the outer one, and the name, if
                       one is given, is the called tool's (a tool that has a ``name`` field keeps it)
    double_encoded     the arguments as a JSON string inside the JSON string
    in_content         the call written in the message text instead of a native tool call: a JSON
                       object, a ```json block, ``<tool_call>...</tool_call>`` as Qwen writes it, or
                       (in a branch that forces a tool) the bare arguments of that tool
    json_repaired      malformed JSON (single quotes, a trailing comma, a missing bracket) repaired
                       with ``json-repair`` -- never a value that was cut: a text that stops inside a
                       string, after a key or inside a bare number stays invalid, so half a command
                       or half a file is never run; and what a repair gives is used only when it fits
                       the tool's schema (a badly broken text is read into invented fields)
    parallel_dropped   several calls where one was asked for: the first one is used (where parallel
                       calls were asked for, ``served.further_calls`` repairs each of the others
                       like the first, and the runtime decides whether they run)
    evidence_ids_text  ``final_answer``'s evidence_ids written as one string (``"a, b"``, ``'["a"]'``)

Each repair is a ``CallRepair`` (``contracts.py``): its kind, the SHA-256 of the text it started
from and the argument fields it added, removed or changed -- never the text, which does not reach
the trace. What cannot be repaired is a ``CallFault`` with the code the runtime's repair prompt
names (``invalid_json``, ``wrong_type``).

``json-repair`` is imported here and nowhere else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Iterable

from agent.contracts.decision import CallRepair, CallRepairKind
from agent.models.model_policy import ModelUnavailable
from agent.contracts.trace import sha256_text
from agent.util.canonical import canonical_json

FINAL_TOOL = "final_answer"
#: the most text searched for a call written in the content
MAX_RECOVER_CHARS = 64 * 1024
#: the most text handed to json-repair (pure Python: a megabyte takes seconds)
MAX_REPAIR_CHARS = 256 * 1024
MAX_FIELDS = 32

# The keys of a call envelope: where a model puts the tool's name, where its arguments, and which
# keys hold a whole call nested one level down.
NAME_KEYS = ("name", "tool", "tool_name", "function_name", "recipient_name", "function")
ARGUMENT_KEYS = ("arguments", "parameters", "args", "input", "tool_input", "params", "kwargs")
NESTED_KEYS = ("function", "tool_call", "call")
ENVELOPE_KEYS = frozenset(NAME_KEYS + ARGUMENT_KEYS + NESTED_KEYS + ("type", "id"))
MAX_ENVELOPE_DEPTH = 4

_FENCE = re.compile(r"```[A-Za-z]*\s*(.*?)```", re.S)
_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_LEADING_FENCE = re.compile(r"^```[A-Za-z]*\s*")


class CallFault(Exception):
    """A call that could not be repaired: ``code`` and ``message`` go back to the model."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


@dataclass
class Repairs:
    """The repairs of one reply, in the order they were made."""

    made: list[CallRepair] = field(default_factory=list)

    def add(self, kind: CallRepairKind, original: Any, before: Any, after: Any) -> None:
        self.made.append(CallRepair(kind=kind, original_sha256=sha256_text(_text(original)),
                                    fields=changed_fields(before, after)))


def _text(value: Any) -> str:
    """What a repair started from, as text: a string as it came, anything else as canonical JSON."""
    return value if isinstance(value, str) else canonical_json(value)


def changed_fields(before: Any, after: Any) -> tuple[str, ...]:
    """Top-level fields present in one of the two objects only, or with different values (a value
    that was not an object counts as no fields)."""
    old = before if isinstance(before, dict) else {}
    new = after if isinstance(after, dict) else {}
    try:
        names = {k for k in old.keys() | new.keys() if k not in old or k not in new or old[k] != new[k]}
    except RecursionError:  # values nested past the interpreter's limit: named as changed
        names = set(old) | set(new)
    return tuple(sorted(str(k)[:64] for k in names)[:MAX_FIELDS])


# --------------------------------------------------------------------------------------------
# How well an object fits a tool's schema
# --------------------------------------------------------------------------------------------

_JSON_TYPES: dict[str, Any] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _types(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    kind = schema.get("type")
    listed = kind if isinstance(kind, list) else [kind]
    out = {k for k in listed if isinstance(k, str)}
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key) or []:
            out |= _types(sub)
    return out


def misfit(value: Any, schema: dict[str, Any]) -> int:
    """How badly ``value`` fits an object schema, counted: required fields missing, fields the
    schema does not name, named fields of the wrong JSON type. 0 is a fit; not an object, the worst."""
    if not isinstance(value, dict):
        return 10_000
    properties = schema.get("properties")
    count = sum(1 for name in schema.get("required") or [] if name not in value)
    if isinstance(properties, dict):
        for name, item in value.items():
            if name not in properties:
                count += 1
            else:
                kinds = _types(properties[name])
                count += bool(kinds) and not any(_JSON_TYPES[k](item) for k in kinds if k in _JSON_TYPES)
    elif schema.get("additionalProperties") is False:
        count += len(value)
    return count


# --------------------------------------------------------------------------------------------
# JSON text: strict, else repaired unless a value was cut
# --------------------------------------------------------------------------------------------

def cut_inside_value(text: str) -> bool:
    """Whether ``text`` stops before its closing brackets *inside* a value: in a string, after a
    key or a colon, or in a bare number or word. A text that stops between values (only closers
    missing) or that is complete is not cut. In doubt, it is."""
    stack: list[str] = []
    expect = "value"  # key | colon | value | comma
    quote, escaped, bare = "", False, False

    def end_of_value() -> str:
        return "colon" if expect == "key" else "comma"

    for ch in text:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote, expect = "", end_of_value()
            continue
        if ch.isspace() or ch in "{}[],:\"'":
            if bare:
                bare, expect = False, end_of_value()
            if ch in "\"'":
                quote = ch
            elif ch == "{":
                stack.append(ch)
                expect = "key"
            elif ch == "[":
                stack.append(ch)
                expect = "value"
            elif ch in "}]":
                if stack:
                    stack.pop()
                expect = "comma"
            elif ch == ":":
                expect = "value"
            elif ch == ",":
                expect = "key" if stack and stack[-1] == "{" else "value"
        else:
            bare = True
    if quote:
        return True
    if not stack:
        return False
    return bare or expect == "colon" or (expect == "value" and stack[-1] == "{")


def _json_repair(text: str) -> Any:
    try:
        import json_repair
    except ImportError:
        raise ModelUnavailable("the json-repair package is not installed (pip install json-repair==0.64.6)",
                               code="dependency_missing") from None
    try:
        return json_repair.repair_json(text, return_objects=True, skip_json_loads=True)
    except Exception:  # noqa: BLE001 -- a parser of a model's malformed text may raise anything
        return None


def decode(text: str, repairs: Repairs) -> Any:
    """The JSON value of ``text``: strict if it parses, else what json-repair makes of it (a
    ``json_repaired`` repair); raises ``CallFault`` when it is neither, or when a value was cut."""
    try:
        return json.loads(text)
    except RecursionError:
        raise CallFault("invalid_json", "nested too deeply") from None
    except ValueError:
        pass
    stripped = _LEADING_FENCE.sub("", text.strip(), count=1).removesuffix("```").strip()
    if not stripped.startswith(("{", "[")) or len(stripped) > MAX_REPAIR_CHARS or cut_inside_value(stripped):
        raise CallFault("invalid_json", "not valid JSON")
    value = _json_repair(stripped)
    if not isinstance(value, (dict, list)) or (not value and len(stripped) > 2):  # nothing recognisable
        raise CallFault("invalid_json", "not valid JSON")
    repairs.add("json_repaired", text, None, value)
    return value


# --------------------------------------------------------------------------------------------
# Envelopes
# --------------------------------------------------------------------------------------------

def bare_name(name: str) -> str:
    return name.strip().removeprefix("functions.")


def _peel(value: Any) -> tuple[Any, str | None] | None:
    """One layer of a call envelope: (what it wraps, the name it gives or None); None for a value
    that is not an envelope."""
    if not isinstance(value, dict) or not value:
        return None
    name = next((value[k] for k in NAME_KEYS if isinstance(value.get(k), str)), None)
    if set(value) - ENVELOPE_KEYS:
        # ``{"name": T, <the arguments>}``: the rest of the object, when a name is given
        if name is None:
            return None
        return _without_name(value), name
    held = [k for k in NESTED_KEYS if isinstance(value.get(k), dict)] + [k for k in ARGUMENT_KEYS if k in value]
    if len(held) != 1:
        return None
    return value[held[0]], name


def _without_name(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k not in NAME_KEYS and k not in ("type", "id")}


def _strings_decoded(value: Any) -> Any:
    """A value that is JSON text, decoded (strictly: an envelope's inner text is not repaired)."""
    for _ in range(3):
        if not isinstance(value, str):
            return value
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return None
    return value


def unwrap(arguments: Any, names: Collection[str], schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The arguments inside a call envelope, or None: the layer that fits ``schema`` best, when it
    fits better than ``arguments`` as they are and every name the envelope gives is in ``names``."""
    if schema is None or not isinstance(arguments, dict):
        return None
    accepted = {bare_name(n) for n in names}
    layers: list[dict[str, Any]] = []
    current = arguments
    for _ in range(MAX_ENVELOPE_DEPTH):
        peeled = _peel(current)
        if peeled is None:
            break
        inner, name = peeled
        if name is not None and bare_name(name) not in accepted:
            return None  # a call of another tool: not ours to rewrite
        current = _strings_decoded(inner)
        if not isinstance(current, dict):
            break
        layers.append(current)
    if not layers:
        return None
    best = min(layers, key=lambda layer: misfit(layer, schema))  # the first of the best ones
    return best if misfit(best, schema) < misfit(arguments, schema) else None


# --------------------------------------------------------------------------------------------
# A call's arguments, and a Final's
# --------------------------------------------------------------------------------------------

def repair_arguments(raw: Any, names: Collection[str], schema: dict[str, Any] | None,
                     repairs: Repairs) -> dict[str, Any]:
    """The arguments of a call to the tool called ``names`` (its wire name and tool name) as an
    object, repaired where they came double-encoded, malformed or in an envelope; raises ``CallFault``."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    start = len(repairs.made)
    value = decode(raw, repairs) if isinstance(raw, str) else raw
    if isinstance(value, str):  # a JSON string holding the JSON object: encoded twice (or more)
        for _ in range(3):
            value = decode(value, repairs)
            if not isinstance(value, str):
                break
        repairs.add("double_encoded", raw, None, value)
    inner = unwrap(value, names, schema)
    if inner is not None:
        repairs.add("envelope", raw, value, inner)
        value = inner
    if not isinstance(value, dict):
        raise CallFault("wrong_type", "must be a JSON object")
    if schema is not None and misfit(value, schema) and any(r.kind == "json_repaired" for r in repairs.made):
        # json-repair reads a badly broken text (JSON inside a string, unescaped) into invented
        # fields: what it gives (here or in a block of the content) is used only when it fits the
        # tool, else the model writes it again.
        del repairs.made[start:]
        raise CallFault("invalid_json", "not valid JSON")
    return value


def repair_final(arguments: dict[str, Any], repairs: Repairs) -> dict[str, Any]:
    """``final_answer``'s evidence_ids as a list where the model wrote ``["a", "b"]`` or ``a, b`` as one string."""
    ids = arguments.get("evidence_ids")
    if not isinstance(ids, str):
        return arguments
    try:
        parsed = json.loads(ids)
    except ValueError:
        parsed = [part for part in re.split(r"[\s,]+", ids) if part]
    repaired = {**arguments, "evidence_ids": parsed}
    repairs.add("evidence_ids_text", ids, arguments, repaired)
    return repaired


# --------------------------------------------------------------------------------------------
# A call written in the content
# --------------------------------------------------------------------------------------------

@dataclass
class WrittenCall:
    name: str
    arguments: Any


def _objects(text: str, limit: int = 20) -> Iterable[Any]:
    """The JSON objects in ``text``, outer ones first (an object's inner objects follow it)."""
    decoder = json.JSONDecoder()
    start, seen = 0, 0
    while seen < limit:
        start = text.find("{", start)
        if start < 0:
            return
        seen += 1
        try:
            value, _ = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            start += 1
            continue
        yield value
        start += 1


def _call_of(value: Any) -> WrittenCall | None:
    """A call in one of the shapes models write: ``{"name", "arguments"}`` (or ``tool`` /
    ``parameters`` and the other envelope keys), nested under ``function`` / ``tool_call``, a
    ``tool_calls`` list, or a Decision (``{"type": "final", ...}``, ``{"type": "action", "tool", ...}``)."""
    if not isinstance(value, dict):
        return None
    if value.get("type") == "final" and "answer" in value:
        return WrittenCall(FINAL_TOOL, {k: v for k, v in value.items() if k != "type"})
    listed = value.get("tool_calls")
    if isinstance(listed, list) and listed:
        return _call_of(listed[0])
    for key in NESTED_KEYS:
        if isinstance(value.get(key), dict) and set(value) <= ENVELOPE_KEYS:
            return _call_of(value[key])
    name = next((value[k] for k in NAME_KEYS if isinstance(value.get(k), str) and value[k].strip()), None)
    if name is None:
        return None
    held = next((k for k in ARGUMENT_KEYS if k in value), None)
    arguments = value[held] if held else _without_name(value)
    return WrittenCall(bare_name(name), arguments)


def _pieces(text: str) -> list[tuple[str, bool]]:
    """Where a call may be written: inside tags, inside fences, the whole text; and whether the
    piece is meant as JSON (then a malformed one may be repaired)."""
    return [(p, True) for p in _TAG.findall(text)] + [(p, True) for p in _FENCE.findall(text)] + [(text, False)]


def recover_call(text: str, known: Collection[str], forced: str | None, forced_schema: dict[str, Any] | None,
                 repairs: Repairs) -> WrittenCall | None:
    """A tool call written in the content: the first one that names a known tool, else (when the
    step forces a tool) an object that fits the forced tool's schema exactly, else the first one
    that names any tool (the runtime then says the tool is unknown). None when there is none."""
    text = text[:MAX_RECOVER_CHARS]
    accepted = {bare_name(n) for n in known}
    named: list[tuple[WrittenCall, Repairs]] = []
    fitting: list[tuple[WrittenCall, Repairs]] = []
    for piece, meant_as_json in _pieces(text):
        found = [(value, Repairs()) for value in _objects(piece)]
        if not found and meant_as_json:
            decoded = Repairs()
            try:
                found = [(decode(piece, decoded), decoded)]
            except CallFault:
                pass
        for value, made in found:
            call = _call_of(value)
            if call is not None:
                named.append((call, made))
            elif forced is not None and forced_schema is not None and misfit(value, forced_schema) == 0:
                fitting.append((WrittenCall(forced, value), made))
    chosen = next((c for c in named if c[0].name in accepted), None) or next(iter(fitting), None) \
        or next(iter(named), None)
    if chosen is None:
        return None
    call, made = chosen
    repairs.add("in_content", text, None, call.arguments)
    repairs.made += made.made  # a malformed block json-repair fixed
    return call
