"""calculator: exact, bounded arithmetic on untrusted text, over literals and named evidence.

The expression comes from the model, so every check that bounds work happens *before* Python's
parser sees it, and the parser's output is then walked against an allowlist. In order:

1. Type and length: a non-empty ``str`` of at most ``MAX_LENGTH`` characters.
2. References to evidence are cut out first (``REFERENCE``), each one of:

   * ``facts['<name>']``: a fact's value -- one this run looked up (``lookup_fact``), else the pack's
     fact base by name or alias;
   * ``cell('<table>', '<row label>', '<column>')``: one number of a table of the pack's knowledge
     (``agent/task/tables.py``: ``<table>`` is its ``sql_name`` as knowledge_search shows it, the row is
     named by its label column -- the first text column --, the column by its name);
   * ``sum|mean|avg|median|min|max|count(col('<table>', '<column>'))``: an aggregate of a whole
     number column (empty cells left out), as ``table_query``'s SQL aggregates compute it;

   names are quoted with ``'`` (up to 80 characters, no quote, backslash or line break inside;
   one optional space after each comma).
   They are resolved by the runtime from the pack's data, never evaluated as Python names.
3. Character allowlist on the rest: ASCII digits, space, ``+ - * / ( ) .`` only. Everything else is
   rejected, deliberately including Unicode digits (``１＋１``, ``١+١``), letters (so ``1e308``, bare
   names, ``__import__``, lambdas, f-strings), quotes, ``%``, ``<``, ``,`` and ``_``.
4. ``//`` is refused by name. ``**`` is allowed with a bounded exponent (step 6).
5. Parentheses must balance and nest at most ``MAX_DEPTH`` deep; every number literal has at
   most ``MAX_LITERAL_DIGITS`` digits. Now ``ast.parse`` is cheap and cannot recurse deeply.
6. AST allowlist: ``Expression``, ``BinOp`` (``+ - * / **``), ``UnaryOp`` (unary ``+ -``),
   ``Constant`` holding an int or float, and the references' placeholders; at most ``MAX_NODES``.
   ``a ** b``: ``b`` must evaluate to a whole number with ``|b| <= MAX_EXPONENT`` (``(1 + 0.035) ** 7``
   is compound interest; ``2 ** 0.5`` and ``9 ** 9 ** 9`` are refused, not approximated), and the
   result stays inside the magnitude limit and ``MAX_RESULT_BITS`` of exact numerator/denominator.
7. Evaluation with ``fractions.Fraction`` from each literal's source text, so ``0.1 + 0.2`` is
   exactly 3/10 and ``(72 + 78 + 81 + 85) / 4`` is exactly 79. Every literal, every reference and
   every intermediate result must satisfy ``|x| <= MAX_MAGNITUDE``.

Result: an integral value is returned as ``int``; otherwise the ``float`` nearest to the exact
rational value (``1/3`` -> ``0.3333333333333333``); no further rounding, so nothing is hidden. With
references the result also holds ``references`` (each one as written, what it named and its value)
and ``resolved`` (the expression with every reference replaced by its value).

Errors, all ``ToolError`` with ``retryable=False`` (the same expression always fails the same way):

* ``calculator_invalid_expression``: wrong type, empty, a character outside the allowlist, ``//``,
  an exponent that is no whole number of at most ``MAX_EXPONENT``, unbalanced parentheses, a syntax
  error, or a node outside the AST allowlist.
* ``calculator_too_complex``: too long, too deeply nested, too many nodes or literal digits, or a
  power whose exact value would need more than ``MAX_RESULT_BITS``.
* ``calculator_out_of_range``: a literal, reference or intermediate result beyond ``MAX_MAGNITUDE``.
* ``calculator_division_by_zero``: a divisor that evaluates to zero.
* ``calculator_unknown_reference``: a fact, table, row or column no evidence has; the message lists
  the ones there are.
"""

from __future__ import annotations

import ast
import math
import re
import statistics
import threading
import time
import unicodedata
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable

from pydantic import Field

from agent.task.tables import Table, column_index, label_column, read_tables
from agent.tools.base import StrictArgs, Tool, ToolContext, ToolError
from agent.tools.facts import FACTS_FILE, load_facts, lookup, looked_up

MAX_LENGTH = 240
MAX_DEPTH = 20
MAX_NODES = 200
MAX_LITERAL_DIGITS = 30
MAX_MAGNITUDE = Fraction(10**15)
MAX_EXPONENT = 64
MAX_RESULT_BITS = 8192  # numerator or denominator of a power's exact value
MAX_REFERENCES = 8
AGGREGATES = ("sum", "mean", "avg", "median", "min", "max", "count")

# A quoted name inside a reference: single quotes, no quote, backslash or line break inside, so it
# can never end early. The forms are spelled tightly (one optional space after a comma): the pattern
# is part of every prompt that offers the calculator.
_NAME = r"'[^'\\\n]{1,80}'"
_AGGREGATE = "|".join(AGGREGATES)
#: the three reference forms, as the contract pattern and the reader below both spell them
REFERENCE = (rf"facts\[{_NAME}\]|cell\({_NAME}, ?{_NAME}, ?{_NAME}\)|"
             rf"(?:{_AGGREGATE})\(col\({_NAME}, ?{_NAME}\)\)")
_REFERENCE = re.compile(REFERENCE)
_QUOTED = re.compile(_NAME)

# The contract: digits, spaces, the operators, parentheses, a decimal point, references -- and no number
# (a run of digits and points) with more than MAX_LITERAL_DIGITS digits, so the decoding grammar stops
# a model that repeats "0" where the validator would refuse it anyway. A number is followed by an
# operator, a space or the end (two runs never join into one longer number); a reference by anything.
_NUMBER_RUN = rf"\.*(?:[0-9]\.*){{1,{MAX_LITERAL_DIGITS}}}"
_OPS = r"[ +\-*/()]"
CALCULATOR_PATTERN = rf"^{_OPS}*(?:(?:{_NUMBER_RUN}{_OPS}|{REFERENCE}){_OPS}*)*(?:{_NUMBER_RUN})?$"

_ALLOWED_CHARS = frozenset("0123456789 +-*/().")
_LITERAL = re.compile(r"[0-9.]+")
_BINARY_OPS = {ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow}
_UNARY_OPS = {ast.UAdd, ast.USub}


def _invalid(message: str) -> ToolError:
    return ToolError("calculator_invalid_expression", message, retryable=False)


def _too_complex(message: str) -> ToolError:
    return ToolError("calculator_too_complex", message, retryable=False)


def _out_of_range() -> ToolError:
    return ToolError(
        "calculator_out_of_range", "a number or intermediate result exceeds 1e15 in magnitude",
        retryable=False,
    )


def _unknown(message: str) -> ToolError:
    return ToolError("calculator_unknown_reference", message[:400], retryable=False)


# --------------------------------------------------------------------------------------------
# References to evidence
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """One reference as written: ``kind`` "fact" (names = (fact,)), "cell" (table, row, column) or
    "column" (table, column) with its ``aggregate``."""

    text: str
    kind: str
    names: tuple[str, ...]
    aggregate: str | None = None


def _reference(text: str) -> Reference:
    names = tuple(q[1:-1].strip() for q in _QUOTED.findall(text))
    if text.startswith("facts"):
        return Reference(text, "fact", names)
    if text.startswith("cell"):
        return Reference(text, "cell", names)
    return Reference(text, "column", names, text.split("(", 1)[0])


#: resolves one reference to its exact value and what it named (the Observation's ``references`` entry)
Resolver = Callable[[Reference], tuple[Fraction, dict[str, Any]]]


# --------------------------------------------------------------------------------------------
# Checks on the raw text (before ast.parse)
# --------------------------------------------------------------------------------------------


def _split_references(expression: str) -> tuple[str, str, list[Reference]]:
    """(the expression with each reference replaced by a placeholder name ``r0``, ``r1``, ...; the
    text outside the references, which the allowlist checks; the references)."""
    references: list[Reference] = []
    parts, outside, last = [], [], 0
    for match in _REFERENCE.finditer(expression):
        parts += [expression[last:match.start()], f"r{len(references)}"]
        outside += [expression[last:match.start()], " "]
        references.append(_reference(match.group(0)))
        last = match.end()
    parts.append(expression[last:])
    outside.append(expression[last:])
    if len(references) > MAX_REFERENCES:
        raise _too_complex(f"an expression may hold at most {MAX_REFERENCES} references")
    return "".join(parts), "".join(outside), references


def _check_text(expression: object) -> tuple[str, list[Reference]]:
    if not isinstance(expression, str):
        raise _invalid("expression must be a string")
    if len(expression) > MAX_LENGTH:
        raise _too_complex(f"expression is longer than {MAX_LENGTH} characters")
    if not expression.strip():
        raise _invalid("expression is empty")
    # A placeholder cannot be forged: letters outside a reference fail the allowlist below.
    source, plain, references = _split_references(expression.strip())
    for ch in plain:
        if ch not in _ALLOWED_CHARS:
            shown = ch if ch.isascii() and ch.isprintable() else f"U+{ord(ch):04X}"
            raise _invalid(
                f"character '{shown}' is not allowed; use ASCII digits, spaces, + - * / ( ) . and references "
                "facts['name'], cell('table', 'row', 'column'), sum(col('table', 'column'))"
            )
    if "//" in plain:
        raise _invalid("'//' (floor division) is not supported")
    depth = 0
    for ch in plain:
        if ch == "(":
            depth += 1
            if depth > MAX_DEPTH:
                raise _too_complex(f"parentheses nest deeper than {MAX_DEPTH}")
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise _invalid("unbalanced parentheses")
    if depth:
        raise _invalid("unbalanced parentheses")
    for literal in _LITERAL.findall(plain):
        if sum(c.isdigit() for c in literal) > MAX_LITERAL_DIGITS:
            raise _too_complex(f"a number has more than {MAX_LITERAL_DIGITS} digits")
    return source, references


def _parse(expression: str, names: frozenset[str] = frozenset()) -> ast.Expression:
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise _invalid("not a valid arithmetic expression") from None
    except (RecursionError, MemoryError):
        raise _too_complex("expression is too complex to parse") from None
    except (ValueError, OverflowError):
        raise _invalid("not a valid arithmetic expression") from None
    nodes = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.Expression, ast.operator, ast.unaryop, ast.expr_context)):
            # operator nodes are checked on their parent BinOp / UnaryOp below
            continue
        nodes += 1
        if nodes > MAX_NODES:
            raise _too_complex(f"expression has more than {MAX_NODES} operations and numbers")
        if isinstance(node, ast.BinOp):
            if type(node.op) not in _BINARY_OPS:
                raise _invalid(f"operator {type(node.op).__name__} is not supported")
        elif isinstance(node, ast.UnaryOp):
            if type(node.op) not in _UNARY_OPS:
                raise _invalid(f"unary operator {type(node.op).__name__} is not supported")
        elif isinstance(node, ast.Constant):
            if type(node.value) not in (int, float):
                raise _invalid("only int and decimal numbers are allowed")
        elif isinstance(node, ast.Name) and node.id in names:
            continue  # a reference's placeholder; its value comes from the resolver
        else:
            raise _invalid(f"{type(node).__name__} is not allowed; only numbers, + - * / **, parentheses "
                           "and references")
    return tree


# --------------------------------------------------------------------------------------------
# Exact evaluation
# --------------------------------------------------------------------------------------------


def _bounded(value: Fraction) -> Fraction:
    if abs(value) > MAX_MAGNITUDE:
        raise _out_of_range()
    return value


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1 or abs(exponent) > MAX_EXPONENT:
        raise _invalid(f"'**' needs a whole-number exponent from -{MAX_EXPONENT} to {MAX_EXPONENT}")
    n = int(exponent)
    if base == 0:
        if n < 0:
            raise ToolError("calculator_division_by_zero", "division by zero (0 to a negative power)", retryable=False)
        return Fraction(int(n == 0))
    # Bound the work before doing it: the magnitude from logarithms, the exact size from bit lengths.
    if abs(n) * math.log10(abs(base)) > math.log10(float(MAX_MAGNITUDE)) + 1e-9:
        raise _out_of_range()
    if abs(n) * max(base.numerator.bit_length(), base.denominator.bit_length()) > MAX_RESULT_BITS:
        raise _too_complex(f"the exact value of the power would need more than {MAX_RESULT_BITS} bits")
    return _bounded(base ** n)


def _eval(node: ast.AST, source: str, values: dict[str, Fraction]) -> Fraction:
    # Recursion depth is bounded by MAX_NODES, far below Python's limit.
    if isinstance(node, ast.Constant):
        # The literal's own text ("0.1") gives the exact decimal; float(0.1) would not.
        text = ast.get_source_segment(source, node) or repr(node.value)
        return _bounded(Fraction(text))
    if isinstance(node, ast.Name):
        return _bounded(values[node.id])
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, source, values)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, source, values), _eval(node.right, source, values)
        if isinstance(node.op, ast.Add):
            return _bounded(left + right)
        if isinstance(node.op, ast.Sub):
            return _bounded(left - right)
        if isinstance(node.op, ast.Mult):
            return _bounded(left * right)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        if right == 0:
            raise ToolError("calculator_division_by_zero", "division by zero", retryable=False)
        return _bounded(left / right)
    raise _invalid(f"{type(node).__name__} is not allowed")  # unreachable after _parse


def parse(expression: str) -> tuple[ast.Expression, str]:
    """The syntax tree of ``expression`` after every check ``evaluate`` makes before evaluating,
    and the source its nodes' positions point into (references replaced by placeholder names, so
    the numbers inside their quoted names are no literals); ToolError as ``evaluate`` raises it."""
    source, references = _check_text(expression)
    return _parse(source, frozenset(f"r{i}" for i in range(len(references)))), source


def references_in(expression: str) -> list[Reference]:
    """The references ``expression`` makes, in order; ToolError where ``evaluate`` would refuse it."""
    return _check_text(expression)[1]


def _number(value: Fraction) -> int | float:
    if value.denominator == 1:
        return int(value)
    result = float(value)
    if result != result or result in (float("inf"), float("-inf")):
        raise _out_of_range()
    return result


def evaluate_with(expression: str, resolve: Resolver | None = None) -> tuple[int | float, list[dict[str, Any]]]:
    """``expression``'s value and, for each reference, what ``resolve`` found for it."""
    source, references = _check_text(expression)
    names = {f"r{i}": ref for i, ref in enumerate(references)}
    tree = _parse(source, frozenset(names))
    if references and resolve is None:
        raise _invalid("references need the run's evidence; this calculator has none")
    values: dict[str, Fraction] = {}
    found: list[dict[str, Any]] = []
    for name, ref in names.items():
        value, entry = resolve(ref)  # type: ignore[misc]
        values[name] = value
        found.append({"text": ref.text, **entry, "value": _number(value)})
    try:
        value = _eval(tree.body, source, values)
        return _number(value), found
    except ToolError:
        raise
    except (RecursionError, MemoryError):
        raise _too_complex("expression is too complex to evaluate") from None
    except (ValueError, OverflowError, ZeroDivisionError, ArithmeticError):
        raise _out_of_range() from None


def evaluate(expression: str, resolve: Resolver | None = None) -> int | float:
    """Evaluate ``expression`` exactly; int when the result is integral, else the nearest float."""
    return evaluate_with(expression, resolve)[0]


# --------------------------------------------------------------------------------------------
# Resolving references from the pack's data
# --------------------------------------------------------------------------------------------


def _key(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", str(text)).casefold().split())


def _exact(value: int | float) -> Fraction:
    # A parsed cell or fact holds the number as written; its repr gives that decimal back exactly.
    return Fraction(value) if isinstance(value, int) else Fraction(repr(value))


def _listed(names: list[str], limit: int = 12) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def context_resolver(ctx: ToolContext) -> Resolver:
    """References resolved from the run's looked-up facts and the pack's fact base and tables."""
    cache: dict[str, list[Table]] = {}

    def tables() -> list[Table]:
        if "tables" not in cache:
            cache["tables"] = read_tables(ctx.knowledge_dir)
        return cache["tables"]

    def fact(name: str) -> tuple[Fraction, dict[str, Any]]:
        seen = looked_up(ctx.artifact_dir)
        hit = next((k for k in seen if _key(k) == _key(name)), None)
        if hit is not None:
            return _exact(seen[hit]), {"kind": "fact", "fact": hit, "source": "lookup_fact"}

        try:
            facts = load_facts(ctx.knowledge_dir)
            found = lookup(facts, name)
        except ToolError:
            known = list(seen) or []
            raise _unknown(f"no fact named '{name}'" + (f"; facts looked up: {_listed(known)}" if known else
                                                       "; look it up with lookup_fact first")) from None
        return _exact(facts[found]["value"]), {"kind": "fact", "fact": found, "source": FACTS_FILE}

    def table(name: str) -> Table:
        found = tables()
        wanted = _key(name)
        for t in found:
            if wanted in (_key(t.sql_name), _key(t.id), _key(t.title), _key(t.source), _key(t.source.rsplit(".", 1)[0])):
                return t
        raise _unknown(f"no table '{name}'; tables: {_listed([t.sql_name for t in found]) or 'none'}")

    def column(t: Table, name: str) -> int:
        index = column_index(t, name)
        if index is None:
            raise _unknown(f"table {t.sql_name} has no column '{name}'; columns: "
                           f"{_listed([c.name for c in t.columns])}")
        return index

    def resolve(ref: Reference) -> tuple[Fraction, dict[str, Any]]:
        if ref.kind == "fact":
            return fact(ref.names[0])
        t = table(ref.names[0])
        col = column(t, ref.names[-1])
        entry: dict[str, Any] = {"kind": ref.kind, "table": t.sql_name, "column": t.columns[col].name,
                                 "source": t.source}
        if t.columns[col].unit:
            entry["unit"] = t.columns[col].unit
        if ref.kind == "cell":
            return _cell(t, ref.names[1], col, entry)
        numbers = [row[col] for row in t.rows if row[col] is not None]
        if ref.aggregate == "count":
            return Fraction(len(numbers)), {**entry, "aggregate": "count"}
        if t.columns[col].kind != "number":
            raise _unknown(f"column '{t.columns[col].name}' of {t.sql_name} holds text, not numbers")
        if not numbers:
            raise _unknown(f"column '{t.columns[col].name}' of {t.sql_name} has no numbers")
        exact = [_exact(v) for v in numbers]
        aggregate = {"avg": "mean"}.get(ref.aggregate or "", ref.aggregate or "")
        value = {"sum": lambda: sum(exact, Fraction(0)), "mean": lambda: sum(exact, Fraction(0)) / len(exact),
                 "median": lambda: statistics.median(exact), "min": lambda: min(exact),
                 "max": lambda: max(exact)}[aggregate]()
        return Fraction(value), {**entry, "aggregate": aggregate, "of": numbers}

    return resolve


def _cell(t: Table, label: str, col: int, entry: dict[str, Any]) -> tuple[Fraction, dict[str, Any]]:
    first = label_column(t)
    text_columns = [first] + [i for i, c in enumerate(t.columns) if c.kind == "text" and i != first] if first is not None else []
    for i in text_columns:
        rows = [row for row in t.rows if row[i] is not None and _key(row[i]) == _key(label)]
        if len(rows) > 1:
            raise _unknown(f"{len(rows)} rows of {t.sql_name} are labelled '{label}'; use table_query")
        if rows:
            value = rows[0][col]
            if not isinstance(value, (int, float)):
                raise _unknown(f"'{t.columns[col].name}' of '{label}' in {t.sql_name} is not a number ({value!r})")
            return _exact(value), {**entry, "row": rows[0][i]}
    labels = [str(row[first]) for row in t.rows if first is not None and row[first] is not None]
    raise _unknown(f"table {t.sql_name} has no row '{label}'; rows: {_listed(labels) or 'none (no label column)'}")


class CalculatorArgs(StrictArgs):
    """Exact arithmetic: numbers, + - * / ** (whole exponent), parentheses, and evidence by name:
    facts['name'], cell('table', 'row', 'column'), sum|mean|median|min|max|count(col('table', 'column'))."""

    expression: str = Field(
        min_length=1,
        max_length=MAX_LENGTH,
        pattern=CALCULATOR_PATTERN,
        description="Arithmetic, e.g. (70 + 80) / 2 or 10000 * 1.035 ** 7; a fact or table number by name, "
                    "e.g. facts['X'] / 2, max(col('table', 'column')) - min(col('table', 'column')). No //.",
    )


def _execute(ctx: ToolContext, args: CalculatorArgs, cancel: threading.Event) -> dict[str, Any]:
    started = time.perf_counter()
    value, references = evaluate_with(args.expression, context_resolver(ctx))
    result: dict[str, Any] = {"expression": args.expression, "value": value}
    if references:
        result["references"] = references
        result["resolved"] = _resolved(args.expression, references)
    result["tool_latency_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return result


def _shown(value: int | float) -> str:
    return str(value) if isinstance(value, int) else repr(value)


def _resolved(expression: str, references: list[dict[str, Any]]) -> str:
    """The expression with each reference replaced by its value (negative values in parentheses)."""
    values = iter(references)

    def value(match: re.Match[str]) -> str:
        v = next(values)["value"]
        return f"({_shown(v)})" if v < 0 else _shown(v)

    return _REFERENCE.sub(value, expression.strip())


def _render(result: dict[str, Any]) -> str:
    text = f"{result.get('expression')} = {result.get('value')}"
    if result.get("references"):
        text += " (" + "; ".join(f"{r['text']} = {_shown(r['value'])}" for r in result["references"]) + \
            f"; so {result.get('resolved')} = {result.get('value')})"
    return text


TOOL = Tool(
    name="calculator",
    args_model=CalculatorArgs,
    execute=_execute,
    timeout_seconds=2.0,
    digest=lambda r: [r.get("expression"), r.get("value")],
    render=_render,
    hint="Write one arithmetic expression over the exact numbers in the observations; "
         "an average is (sum of all values) / count, with parentheses around the sum.",
    summary="Exact arithmetic missing: compute it with the calculator from observed values.",
    import_path="agent.tools.calculator:TOOL",
    read_only=True,
)
