"""calculator: exact, bounded arithmetic on untrusted text.

The expression comes from the model, so every check that bounds work happens *before* Python's
parser sees it, and the parser's output is then walked against an allowlist. In order:

1. Type and length: a non-empty ``str`` of at most ``MAX_LENGTH`` characters.
2. Character allowlist: ASCII digits, space, ``+ - * / ( ) .`` only. Everything else is rejected,
   deliberately including Unicode digits (``１＋１``, ``١+١``), letters (so ``1e308``, names,
   ``__import__``, lambdas, f-strings), quotes, ``%``, ``<``, ``,`` and ``_``. Python itself would
   accept ``１+１`` as 2; we do not, so the accepted language is exactly what the contract pattern
   (``CALCULATOR_PATTERN``) says, no matter who calls us.
3. ``**`` and ``//`` are refused by name (``9**9**9`` never reaches the parser).
4. Parentheses must balance and nest at most ``MAX_DEPTH`` deep; every number literal has at
   most ``MAX_LITERAL_DIGITS`` digits. Now ``ast.parse`` is cheap and cannot recurse deeply.
5. AST allowlist: ``Expression``, ``BinOp`` (``+ - * /``), ``UnaryOp`` (unary ``+ -``) and
   ``Constant`` holding an int or float; at most ``MAX_NODES`` of them.
6. Evaluation with ``fractions.Fraction`` from each literal's source text, so ``0.1 + 0.2`` is
   exactly 3/10 and ``(72 + 78 + 81 + 85) / 4`` is exactly 79. Every literal and every intermediate
   result must satisfy ``|x| <= MAX_MAGNITUDE``.

Result: an integral value is returned as ``int``; otherwise the ``float`` nearest to the exact
rational value (``1/3`` -> ``0.3333333333333333``); no further rounding, so nothing is hidden.

Errors, all ``ToolError`` with ``retryable=False`` (the same expression always fails the same way):

* ``calculator_invalid_expression``: wrong type, empty, a character outside the allowlist,
  ``**``/``//``, unbalanced parentheses, a syntax error, or a node outside the AST allowlist.
* ``calculator_too_complex``: too long, too deeply nested, too many nodes or literal digits.
* ``calculator_out_of_range``: a literal or an intermediate result beyond ``MAX_MAGNITUDE``.
* ``calculator_division_by_zero``: a divisor that evaluates to zero.
"""

from __future__ import annotations

import ast
import re
import threading
import time
from fractions import Fraction
from typing import Any

from pydantic import Field

from .base import StrictArgs, Tool, ToolContext, ToolError

MAX_LENGTH = 240
MAX_DEPTH = 20
MAX_NODES = 200
MAX_LITERAL_DIGITS = 30
MAX_MAGNITUDE = Fraction(10**15)

# The contract: digits, spaces, the four operators, parentheses, a decimal point -- and no number
# (a run of digits and points) with more than MAX_LITERAL_DIGITS digits, so the decoding grammar stops
# a model that repeats "0" (the 1.5B once wrote "8335897." and 200 zeros, three times) where the
# validator would refuse it anyway.
_NUMBER_RUN = rf"\.*(?:[0-9]\.*){{1,{MAX_LITERAL_DIGITS}}}"
CALCULATOR_PATTERN = rf"^[ +\-*/()]*(?:{_NUMBER_RUN}[ +\-*/()]+)*(?:{_NUMBER_RUN})?$"

_ALLOWED_CHARS = frozenset("0123456789 +-*/().")
_LITERAL = re.compile(r"[0-9.]+")
_BINARY_OPS = {ast.Add, ast.Sub, ast.Mult, ast.Div}
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


# --------------------------------------------------------------------------------------------
# Checks on the raw text (before ast.parse)
# --------------------------------------------------------------------------------------------


def _check_text(expression: object) -> str:
    if not isinstance(expression, str):
        raise _invalid("expression must be a string")
    if len(expression) > MAX_LENGTH:
        raise _too_complex(f"expression is longer than {MAX_LENGTH} characters")
    if not expression.strip():
        raise _invalid("expression is empty")
    for ch in expression:
        if ch not in _ALLOWED_CHARS:
            shown = ch if ch.isascii() and ch.isprintable() else f"U+{ord(ch):04X}"
            raise _invalid(
                f"character '{shown}' is not allowed; use ASCII digits, spaces, + - * / ( ) and ."
            )
    if "**" in expression:
        raise _invalid("'**' (power) is not supported")
    if "//" in expression:
        raise _invalid("'//' (floor division) is not supported")
    depth = 0
    for ch in expression:
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
    for literal in _LITERAL.findall(expression):
        if sum(c.isdigit() for c in literal) > MAX_LITERAL_DIGITS:
            raise _too_complex(f"a number has more than {MAX_LITERAL_DIGITS} digits")
    return expression


def _parse(expression: str) -> ast.Expression:
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
        if isinstance(node, (ast.Expression, ast.operator, ast.unaryop)):
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
        else:
            raise _invalid(f"{type(node).__name__} is not allowed; only numbers, + - * / and parentheses")
    return tree


# --------------------------------------------------------------------------------------------
# Exact evaluation
# --------------------------------------------------------------------------------------------


def _bounded(value: Fraction) -> Fraction:
    if abs(value) > MAX_MAGNITUDE:
        raise _out_of_range()
    return value


def _eval(node: ast.AST, source: str) -> Fraction:
    # Recursion depth is bounded by MAX_NODES, far below Python's limit.
    if isinstance(node, ast.Constant):
        # The literal's own text ("0.1") gives the exact decimal; float(0.1) would not.
        text = ast.get_source_segment(source, node) or repr(node.value)
        return _bounded(Fraction(text))
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, source)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, source), _eval(node.right, source)
        if isinstance(node.op, ast.Add):
            return _bounded(left + right)
        if isinstance(node.op, ast.Sub):
            return _bounded(left - right)
        if isinstance(node.op, ast.Mult):
            return _bounded(left * right)
        if right == 0:
            raise ToolError("calculator_division_by_zero", "division by zero", retryable=False)
        return _bounded(left / right)
    raise _invalid(f"{type(node).__name__} is not allowed")  # unreachable after _parse


def parse(expression: str) -> tuple[ast.Expression, str]:
    """The syntax tree of ``expression`` after every check ``evaluate`` makes before evaluating,
    and the source its nodes' positions point into; ToolError as ``evaluate`` raises it."""
    source = _check_text(expression).strip()
    return _parse(source), source


def evaluate(expression: str) -> int | float:
    """Evaluate ``expression`` exactly; int when the result is integral, else the nearest float."""
    source = _check_text(expression).strip()
    tree = _parse(source)
    try:
        value = _eval(tree.body, source)
        if value.denominator == 1:
            return int(value)
        result = float(value)
    except ToolError:
        raise
    except (RecursionError, MemoryError):
        raise _too_complex("expression is too complex to evaluate") from None
    except (ValueError, OverflowError, ZeroDivisionError, ArithmeticError):
        raise _out_of_range() from None
    if result != result or result in (float("inf"), float("-inf")):
        raise _out_of_range()
    return result


class CalculatorArgs(StrictArgs):
    """Evaluate one arithmetic expression exactly: numbers, + - * /, unary signs, parentheses."""

    expression: str = Field(
        min_length=1,
        max_length=MAX_LENGTH,
        pattern=CALCULATOR_PATTERN,
        description="Arithmetic only, e.g. (70 + 80) / 2. No names, calls, ** or //.",
    )


def _execute(ctx: ToolContext, args: CalculatorArgs, cancel: threading.Event) -> dict[str, Any]:
    started = time.perf_counter()
    value = evaluate(args.expression)
    return {
        "expression": args.expression,
        "value": value,
        "tool_latency_ms": round((time.perf_counter() - started) * 1000, 3),
    }


TOOL = Tool(
    name="calculator",
    args_model=CalculatorArgs,
    execute=_execute,
    timeout_seconds=2.0,
    digest=lambda r: [r.get("expression"), r.get("value")],
    render=lambda r: f"{r.get('expression')} = {r.get('value')}",
    hint="Write one arithmetic expression over the exact numbers in the observations; "
         "an average is (sum of all values) / count, with parentheses around the sum.",
    summary="Exact arithmetic missing: compute it with the calculator from observed values.",
    import_path="agent.tools.calculator:TOOL",
    read_only=True,
)
