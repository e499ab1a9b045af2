"""The check language: what a pack may write where the runtime works a value out from the evidence.

A check's operands (``left``/``right`` of ``checks`` and ``expect``), an answer form's bound slot
(``{number:EXPR}``, ``{name:EXPR}``) and a narrowing's ``const`` are expressions of this language.
The text is parsed with Python's ``ast`` and every node is checked against a whitelist before
anything is evaluated; nothing is ever passed to ``eval``, no Python attribute is ever read (a path
only indexes the JSON of an Observation's result) and no name outside the whitelist is callable.

Grammar (``×``, ``÷``, ``−``, ``≥``, ``≤`` may stand for ``*``, ``/``, ``-``, ``>=``, ``<=``)::

    comparison := expression ( ">=" | ">" | "<=" | "<" | "==" | "!=" ) expression
    expression := number | path | "(" expression ")" | ("-" | "+") expression
                | expression ( "+" | "-" | "*" | "/" ) expression
                | expression "**" expression          whole exponent, at most 64 in magnitude
                | function "(" expression { "," expression } ")"
    function   := abs | round | min | max | mean | sum | count | argmin | argmax | matches
    path       := root { "." name | "[" string "]" | "[" integer "]" }
    root       := a tool name (``calculator``, ``knowledge_search``, ``facts.lookup_fact``: the longest
                  name of a tool with a successful Observation the path spells) | record | records | facts

* ``TOOL.a.b`` reads field ``b`` of field ``a`` of TOOL's latest successful result; ``["Team Red"]``
  reads a key that is no identifier; ``[0]``/``[-1]`` an item of a list, or of an object in its
  order (``records[0]`` is the first record).
* ``record`` is the one evaluation record the latest knowledge search read (its ``values``,
  ``rules``, ``columns``, ``title``, ``date``; a release-rule record's ``values`` are its groups and
  its ``rules`` ``average_gte`` and ``every_batch_gte``); ``records`` all of them, by key (date or
  title; the knowledge tool's ``result_records``): ``records["2024-04"].values.North``. ``facts``
  is every fact this run looked up, by name: ``facts["Lisbon population"]``.
* ``min``/``max``/``mean``/``sum`` take one list or object (its values) or several numbers;
  ``count`` the size of a list or object; ``argmin``/``argmax`` the key (group name) of an object's
  smallest/largest value, the first one of equals; ``round(x)``/``round(x, n)`` rounds half away
  from zero, as people round money; ``matches(a, b)`` how many positions of two lists hold the same
  item (an object stands for its keys).

Arithmetic is exact (``fractions.Fraction``; an evidence float counts as the decimal it prints as).
A value the evidence does not give (a tool not run yet, a missing key, a division by zero, a result
beyond 10**18) makes the whole expression unknown: ``evaluate`` returns None. Text that is not in
the language is the pack author's mistake: ``CheckLanguageError``, naming what is not allowed.
"""

from __future__ import annotations

import ast
import math
import re
import unicodedata
from fractions import Fraction
from functools import lru_cache
from typing import Any, Mapping

from agent.gate.numbers import compare
from agent.tools.knowledge import result_records

MAX_TEXT = 500
MAX_NODES = 200
MAX_DEPTH = 100  # a sum of many terms nests one level a term; the evaluator recurses this deep
MAX_EXPONENT = 64
MAX_WRITTEN_POWER = 12  # worked_out writes x ** n as n factors up to this n
MAX_MAGNITUDE = Fraction(10**18)
FUNCTIONS = ("abs", "round", "min", "max", "mean", "sum", "count", "argmin", "argmax", "matches")
ALIASES = ("record", "records", "facts")
COMPARISONS = {ast.GtE: ">=", ast.Gt: ">", ast.LtE: "<=", ast.Lt: "<", ast.Eq: "==", ast.NotEq: "!="}
_SYMBOLS = str.maketrans({"×": "*", "÷": "/", "−": "-", "≥": ">=", "≤": "<="})
_BINARY = {ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow}
_IDENTIFIER_CHAIN = re.compile(r"^[^\W\d]\w*(?:\.[^\W\d]\w*)*$")


class CheckLanguageError(ValueError):
    """The text is not an expression of the check language (the pack's fault, not the model's)."""


class _Unknown(Exception):
    """The evidence does not give this value (yet)."""


# -- parsing ---------------------------------------------------------------------------------------


def _depth(node: ast.AST, level: int = 0) -> int:
    children = list(ast.iter_child_nodes(node))
    return level if not children else max(_depth(c, level + 1) for c in children)


@lru_cache(maxsize=512)
def parse(text: str, *, comparison: bool = False) -> ast.AST:
    """The checked syntax tree of an expression (``comparison``: of ``left op right``)."""
    if not isinstance(text, str) or not text.strip():
        raise CheckLanguageError("an expression must be non-empty text")
    if len(text) > MAX_TEXT:
        raise CheckLanguageError(f"an expression is at most {MAX_TEXT} characters")
    source = unicodedata.normalize("NFKC", text).translate(_SYMBOLS).strip()
    try:
        tree = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: a NUL in the text
        raise CheckLanguageError(f"'{text[:80]}' is not an expression of the check language") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES or _depth(tree) > MAX_DEPTH:
        raise CheckLanguageError(f"'{text[:80]}' is too complex (at most {MAX_NODES} nodes, {MAX_DEPTH} deep)")
    if comparison:
        if not (isinstance(tree, ast.Compare) and len(tree.ops) == 1):
            raise CheckLanguageError(f"'{text[:80]}' is not one comparison 'left op right'")
        _check(tree.left)
        _check(tree.comparators[0])
        if type(tree.ops[0]) not in COMPARISONS:
            raise CheckLanguageError(f"'{text[:80]}': only >= > <= < == != compare")
    else:
        _check(tree)
    return tree


def _check(node: ast.AST) -> None:
    """Every node of an expression is one the grammar allows (module docstring)."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise CheckLanguageError(f"{node.value!r} is not a number (text is allowed only as a key: [\"name\"])")
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BINARY:
            raise CheckLanguageError(f"the operator {type(node.op).__name__} is not part of the check language")
        _check(node.left)
        _check(node.right)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.UAdd, ast.USub)):
            raise CheckLanguageError(f"the operator {type(node.op).__name__} is not part of the check language")
        _check(node.operand)
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            raise CheckLanguageError(f"only {', '.join(FUNCTIONS)} may be called")
        if node.keywords or not 1 <= len(node.args) <= 16 or any(isinstance(a, ast.Starred) for a in node.args):
            raise CheckLanguageError(f"{node.func.id}() takes 1 to 16 plain arguments")
        if node.func.id == "round" and len(node.args) == 2 and not _whole_constant(node.args[1]):
            raise CheckLanguageError("round(x, n): n must be a whole number")
        for arg in node.args:
            _check(arg)
    elif isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        _path(node)
    else:
        raise CheckLanguageError(f"{type(node).__name__} is not part of the check language")


def _whole_constant(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def _path(node: ast.AST) -> list[str | int]:
    """A path as its parts: names and keys as text, positions as ints (checked, not resolved)."""
    parts: list[str | int] = []
    while True:
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                raise CheckLanguageError(f"'{node.attr}': a name in a path may not start with '_'")
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                parts.append(key.value)
            elif _whole_constant(key):
                parts.append(int(ast.literal_eval(key)))
            else:
                raise CheckLanguageError("a path's [key] is a quoted name or a whole number")
            node = node.value
        elif isinstance(node, ast.Name):
            if node.id in FUNCTIONS:
                raise CheckLanguageError(f"{node.id} is a function: call it, {node.id}(...)")
            if node.id.startswith("_"):
                raise CheckLanguageError(f"'{node.id}': a name may not start with '_'")
            parts.append(node.id)
            return parts[::-1]
        else:
            raise CheckLanguageError("a path starts with a tool name, record, records or facts")


# -- evaluating ------------------------------------------------------------------------------------


def _number(value: Any) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        raise _Unknown
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Unknown
        return Fraction(repr(value))
    return Fraction(value)


def _bounded(value: Fraction) -> Fraction:
    if abs(value) > MAX_MAGNITUDE:
        raise _Unknown
    return value


def _items(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return value
    raise _Unknown


def _key(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKC", text).casefold() if c.isalnum())


def _step(value: Any, part: str | int) -> Any:
    if isinstance(part, int):
        items = _items(value)
        if not -len(items) <= part < len(items):
            raise _Unknown
        return items[part]
    if isinstance(value, dict):
        if part in value:
            return value[part]
        # "Team Red" for "team red", "max_spread" for "max-spread": one key that means the same
        near = [k for k in value if isinstance(k, str) and _key(k) == _key(part)]
        if len(near) == 1:
            return value[near[0]]
    raise _Unknown


def _result_of(latest_ok: Mapping[str, Any], tool: str) -> Any:
    obs = latest_ok.get(tool)
    return getattr(obs, "result", obs) if obs is not None else None


def _tool_named(latest_ok: Mapping[str, Any], base: str) -> Any:
    """The latest result of the tool ``base`` (a local one, or ``server.base`` served over MCP)."""
    for name in latest_ok:
        if name == base:
            return _result_of(latest_ok, name)
    for name in latest_ok:
        if name.endswith("." + base):
            return _result_of(latest_ok, name)
    return None


def _alias(root: str, latest_ok: Mapping[str, Any]) -> Any:
    if root == "facts":
        result = _tool_named(latest_ok, "lookup_fact") or {}
        seen = result.get("looked_up")
        if isinstance(seen, dict):
            return seen
        return {result["fact"]: result["value"]} if "fact" in result and "value" in result else None
    # the knowledge tool knows its result: records of any rule, or the one its family's record is
    records = result_records(_tool_named(latest_ok, "knowledge_search") or {})
    if root == "records":
        return records
    return next(iter(records.values())) if records and len(records) == 1 else None


def _resolve_path(parts: list[str | int], latest_ok: Mapping[str, Any]) -> Any:
    names = []
    for part in parts:
        if not isinstance(part, str):
            break
        names.append(part)
    # The longest tool name the path spells (tool names may hold a dot: server.tool).
    for k in range(len(names), 0, -1):
        tool = ".".join(names[:k])
        if tool in latest_ok:
            value, rest = _result_of(latest_ok, tool), parts[k:]
            break
    else:
        if parts[0] not in ALIASES:
            raise _Unknown
        value, rest = _alias(str(parts[0]), latest_ok), parts[1:]
        if value is None:
            raise _Unknown
    for part in rest:
        value = _step(value, part)
    return value


def _round_half_away(value: Fraction, digits: int) -> Fraction:
    scale = Fraction(10) ** digits
    scaled = abs(value) * scale
    whole = math.floor(scaled + Fraction(1, 2))
    return (whole if value >= 0 else -whole) / scale


def _collection_or_numbers(args: list[Any]) -> list[Fraction]:
    items = _items(args[0]) if len(args) == 1 else args
    if not items:
        raise _Unknown
    return [_number(x) for x in items]


def _call(name: str, args: list[Any]) -> Any:
    if name == "abs":
        return abs(_number(args[0]))
    if name == "round":
        digits = int(args[1]) if len(args) == 2 else 0
        if not -12 <= digits <= 12:
            raise _Unknown
        return _round_half_away(_number(args[0]), digits)
    if name in ("min", "max", "sum", "mean"):
        numbers = _collection_or_numbers(args)
        if name == "min":
            return min(numbers)
        if name == "max":
            return max(numbers)
        return sum(numbers) if name == "sum" else sum(numbers) / len(numbers)
    if name == "count":
        return Fraction(len(_items(args[0])))
    if name in ("argmin", "argmax"):
        if len(args) != 1 or not isinstance(args[0], dict) or not args[0]:
            raise _Unknown
        values = {k: _number(v) for k, v in args[0].items()}
        pick = min if name == "argmin" else max
        return pick(values, key=lambda k: values[k])  # the first of equal values, in order
    if name == "matches":
        if len(args) != 2:
            raise _Unknown
        a, b = (list(x) if isinstance(x, dict) else x for x in args)
        if not isinstance(a, list) or not isinstance(b, list):
            raise _Unknown
        return Fraction(sum(1 for x, y in zip(a, b) if x == y))
    raise _Unknown  # unreachable after _check


def _eval(node: ast.AST, latest_ok: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return _bounded(_number(node.value))
    if isinstance(node, ast.UnaryOp):
        value = _number(_eval(node.operand, latest_ok))
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _number(_eval(node.left, latest_ok)), _number(_eval(node.right, latest_ok))
        if isinstance(node.op, ast.Add):
            return _bounded(left + right)
        if isinstance(node.op, ast.Sub):
            return _bounded(left - right)
        if isinstance(node.op, ast.Mult):
            return _bounded(left * right)
        if isinstance(node.op, ast.Div):
            if right == 0:
                raise _Unknown
            return _bounded(left / right)
        if right.denominator != 1 or abs(right) > MAX_EXPONENT or (left == 0 and right < 0):
            raise _Unknown
        return _bounded(left ** int(right))
    if isinstance(node, ast.Call):
        return _call(node.func.id, [_eval(a, latest_ok) for a in node.args])
    return _resolve_path(_path(node), latest_ok)


def _substitute_tool_names(text: str, latest_ok: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """Tool names that are no identifiers (an MCP server may be called ``my-server``) as stand-in
    identifiers, so the text parses; the evidence is renamed the same way."""
    odd = [name for name in latest_ok if not _IDENTIFIER_CHAIN.match(name) and name in text]
    if not odd:
        return text, latest_ok
    renamed = dict(latest_ok)
    for i, name in enumerate(sorted(odd, key=len, reverse=True)):
        stand_in = f"tool{i}ref"
        text = re.sub(rf"(?<![\w.]){re.escape(name)}(?=\.)", stand_in, text)
        renamed[stand_in] = latest_ok[name]
    return text, renamed


def _value(node: ast.AST, latest_ok: Mapping[str, Any]) -> float | str | None:
    try:
        value = _eval(node, latest_ok)
    except (_Unknown, ZeroDivisionError, OverflowError, ValueError, TypeError):
        return None
    if isinstance(value, str):
        return value
    try:
        number = _number(value)
    except _Unknown:
        return None  # a list, an object or text where a number is asked for
    return int(number) if number.denominator == 1 else float(number)


def _tree(text: str, latest_ok: Mapping[str, Any], comparison: bool) -> tuple[ast.AST, Mapping[str, Any]]:
    # subtle: "my-server.tool.x" parses as a subtraction, so such names are replaced before parsing
    substituted, renamed = _substitute_tool_names(text, latest_ok)
    return parse(substituted, comparison=comparison), renamed


def evaluate(text: str, latest_ok: Mapping[str, Any]) -> float | str | None:
    """The value of an expression over the latest successful Observation of each tool (``tool ->
    Observation``, or ``tool -> result``): a number (int when whole), a group name (``argmin``), or
    None where the evidence does not give it. ``CheckLanguageError`` for text outside the language."""
    node, evidence = _tree(text, latest_ok, comparison=False)
    return _value(node, evidence)


def path_values(text: str, latest_ok: Mapping[str, Any], *, skip_roots: tuple[str, ...] = ()) -> tuple[tuple[str, float], ...]:
    """The numbers an expression reads from the evidence: each outermost path that gives a number,
    as (its text, its value), in reading order, each once; paths whose root is in ``skip_roots``
    (e.g. the tool being asked again, ``calculator``) are left out. A number the evidence does not give is left out."""
    if not isinstance(text, str):
        return ()
    node, evidence = _tree(text, latest_ok, comparison=False)
    # a stand-in identifier (``_substitute_tool_names``) is shown as the tool name it stands for
    original = {stand_in: name for stand_in in evidence if stand_in not in latest_ok
                for name in latest_ok if latest_ok[name] is evidence[stand_in]}
    found: dict[str, float] = {}

    def walk(n: ast.AST) -> None:
        if isinstance(n, (ast.Name, ast.Attribute, ast.Subscript)):
            first = str(_path(n)[0])
            shown = ast.unparse(n).replace(first, original.get(first, first), 1)
            value = _value(n, evidence)
            skipped = any(shown == r or shown.startswith((r + ".", r + "[")) for r in skip_roots)
            if not skipped and isinstance(value, (int, float)):
                found.setdefault(shown, value)
            return
        for child in (n.args if isinstance(n, ast.Call) else ast.iter_child_nodes(n)):  # not a function's name
            walk(child)

    walk(node)
    return tuple(found.items())


def worked_out(text: str, latest_ok: Mapping[str, Any]) -> str | None:
    """The expression with the evidence put in: each path replaced by the number it reads, ``min`` /
    ``max`` of a collection by the number it picks, ``sum`` / ``mean`` / ``count`` written out over its
    numbers (``(72 + 78 + 81) / 3``), a whole power as a product (``(1 + 4 / 100) * (1 + 4 / 100)``)
    -- arithmetic a calculator can take; None where a part is not
    known yet or is no number (``argmin``, ``matches``). No path is left in a text it returns."""
    if not isinstance(text, str):
        return None
    node, evidence = _tree(text, latest_ok, comparison=False)

    def literal(value: Fraction) -> ast.AST:
        number = int(value) if value.denominator == 1 else float(value)
        return ast.UnaryOp(ast.USub(), ast.Constant(-number)) if number < 0 else ast.Constant(number)

    def chain(numbers: list[Fraction]) -> ast.AST:
        tree = literal(numbers[0])
        for value in numbers[1:]:
            tree = ast.BinOp(tree, ast.Add(), literal(value))
        return tree

    def put(n: ast.AST) -> ast.AST:
        if isinstance(n, ast.Constant):
            return n
        if isinstance(n, (ast.Name, ast.Attribute, ast.Subscript)):
            return literal(_number(_resolve_path(_path(n), evidence)))
        if isinstance(n, ast.UnaryOp):
            inner = put(n.operand)
            if isinstance(n.op, ast.USub) and isinstance(inner, ast.UnaryOp) and isinstance(inner.operand, ast.Constant):
                return inner.operand  # -(-5.5) is written 5.5, not --5.5
            return ast.UnaryOp(n.op, inner)
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow):
            # the calculator has no power: a whole exponent is written out as a product
            exponent = _eval(n.right, evidence)
            base = put(n.left)
            if _number(exponent).denominator != 1 or not 1 <= exponent <= MAX_WRITTEN_POWER:
                return ast.BinOp(base, n.op, put(n.right))
            product = base
            for _ in range(int(exponent) - 1):
                product = ast.BinOp(product, ast.Mult(), base)
            return product
        if isinstance(n, ast.BinOp):
            return ast.BinOp(put(n.left), n.op, put(n.right))
        name = n.func.id  # a Call: _check admits no other node
        if name in ("min", "max", "sum", "mean", "count") and len(n.args) == 1 and not isinstance(
                n.args[0], (ast.Constant, ast.BinOp, ast.UnaryOp)):
            collection = _eval(n.args[0], evidence)
            numbers = [_number(v) for v in _items(collection)] if name != "count" else list(_items(collection))
            if not numbers:
                raise _Unknown
            if name == "count":
                return literal(Fraction(len(numbers)))
            if name in ("min", "max"):
                return literal(min(numbers) if name == "min" else max(numbers))
            total = chain(numbers)
            return total if name == "sum" else ast.BinOp(total, ast.Div(), literal(Fraction(len(numbers))))
        if name in ("argmin", "argmax", "matches"):
            raise _Unknown
        return ast.Call(n.func, [put(a) for a in n.args], [])

    try:
        return ast.unparse(put(node))
    except (_Unknown, ZeroDivisionError, OverflowError, ValueError, TypeError):
        return None


def holds(text: str, latest_ok: Mapping[str, Any]) -> bool | None:
    """Whether a comparison ``left op right`` holds on the evidence; None where a side is unknown.
    Numbers compare as ``numbers.compare`` does (equal within 1e-9); names compare only by == / !=."""
    node, evidence = _tree(text, latest_ok, comparison=True)
    left, right = _value(node.left, evidence), _value(node.comparators[0], evidence)
    op = COMPARISONS[type(node.ops[0])]
    if left is None or right is None:
        return None
    if isinstance(left, str) or isinstance(right, str):
        if op not in ("==", "!="):
            return None
        return (_key(str(left)) == _key(str(right))) == (op == "==")
    return compare(float(left), op, float(right))


def outer_function(text: str) -> str | None:
    """The function an expression applies last (``round`` for ``round(calculator.value, 2)``), or None."""
    source = text.strip()
    match = re.match(r"^([a-z]+)\s*\(", source)
    if not match or match.group(1) not in FUNCTIONS or not source.endswith(")"):
        return None
    depth = 0
    for i, ch in enumerate(source):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and i >= match.end() - 1:
            return match.group(1) if i == len(source) - 1 else None  # its parenthesis closes last
    return None
