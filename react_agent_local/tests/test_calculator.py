"""calculator: exact values and the SECURITY.md 11-15 attack inputs (R-TOOL-2)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from agent.tools.calculator import MAX_LENGTH, evaluate
from agent.tools import ToolContext, ToolError, default_registry


@pytest.mark.parametrize(
    "expression, value",
    [
        ("(72 + 78 + 81 + 85) / 4", 79),
        ("(70 + 62 + 75 + 81 + 77) / 5", 73),
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 / 2", 3.5),
        ("1 / 3", 1 / 3),
        ("0.1 + 0.2", 0.3),
        ("1 / 3 * 3", 1),
        ("-5 + +2", -3),
        ("2 * -3", -6),
        ("-(-(4))", 4),
        ("-0", 0),
        (".5 * 4", 2),
        ("5. / 2", 2.5),
        ("  10 - 2.5 ", 7.5),
        ("999999999999999 + 1", 10**15),
        ("0.0000001 * 0.0000001", 1e-14),
        ("0." + "0" * 28 + "1" + " * 1000000000000000", 1e-14),
        ("2 ** 3", 8),
        ("2 ** -2", 0.25),
        ("(-2) ** 3", -8),
        ("-2 ** 2", -4),
        ("2 ** 3 ** 2", 512),
        ("1.5 ** 0", 1),
        ("0 ** 0", 1),
    ],
)
def test_values(expression, value):
    result = evaluate(expression)
    assert result == value
    assert type(result) is type(value)


def test_exact_division_is_an_int():
    result = evaluate("(72 + 78 + 81 + 85) / 4")
    assert result == 79 and type(result) is int


SECURITY_CASES = [
    # 11: a power's exponent is a whole number of at most 64, checked before anything is raised to it;
    # shifts never reach the parser
    ("9**9**9", "calculator_invalid_expression"),
    ("2**10**10", "calculator_invalid_expression"),
    ("2 ** 10000", "calculator_invalid_expression"),
    ("2 ** 0.5", "calculator_invalid_expression"),
    ("2 ** (1 / 3)", "calculator_invalid_expression"),
    ("2 ** 65", "calculator_invalid_expression"),
    ("2 ** 64", "calculator_out_of_range"),
    ("10 ** 16", "calculator_out_of_range"),
    ("0.001 ** -64", "calculator_out_of_range"),
    ("0 ** -1", "calculator_division_by_zero"),
    ("(1.000001 ** 64) ** 64", "calculator_too_complex"),
    ("1<<10**9", "calculator_invalid_expression"),
    ("7 // 2", "calculator_invalid_expression"),
    ("7 % 2", "calculator_invalid_expression"),
    # 12: huge numbers and results
    ("1" + "0" * 1000, "calculator_too_complex"),
    ("9" * 31, "calculator_too_complex"),
    ("9" * 20, "calculator_out_of_range"),
    ("999999999999999 * 10", "calculator_out_of_range"),
    ("100000000 * 100000000", "calculator_out_of_range"),
    ("-1000000000000000 - 1", "calculator_out_of_range"),
    ("1e308*1e308", "calculator_invalid_expression"),
    ("1/0", "calculator_division_by_zero"),
    ("5 / (3 - 3)", "calculator_division_by_zero"),
    ("1 / 0.0", "calculator_division_by_zero"),
    # 13: length and depth before ast.parse
    ("(" * 1000 + "1" + ")" * 1000, "calculator_too_complex"),
    ("-" * 100000 + "1", "calculator_too_complex"),
    ("(" * 21 + "1" + ")" * 21, "calculator_too_complex"),
    ("-" * 239 + "1", "calculator_too_complex"),
    ("1+" * 119 + "1", "calculator_too_complex"),
    ("1" * (MAX_LENGTH + 1), "calculator_too_complex"),
    ("(1 + 2", "calculator_invalid_expression"),
    ("1 + 2)", "calculator_invalid_expression"),
    ("1 2", "calculator_invalid_expression"),
    ("1..2", "calculator_invalid_expression"),
    ("01", "calculator_invalid_expression"),
    ("()", "calculator_invalid_expression"),
    ("", "calculator_invalid_expression"),
    ("   ", "calculator_invalid_expression"),
    # 14: names, calls, attributes, lambdas, comprehensions, strings
    ("__import__('os')", "calculator_invalid_expression"),
    ("().__class__.__mro__", "calculator_invalid_expression"),
    ("(lambda: 1)()", "calculator_invalid_expression"),
    ("[x for x in (1, 2)]", "calculator_invalid_expression"),
    ("abs(-1)", "calculator_invalid_expression"),
    ("x + 1", "calculator_invalid_expression"),
    ("f'{1}'", "calculator_invalid_expression"),
    ("'1' + '1'", "calculator_invalid_expression"),
    ("1j * 1j", "calculator_invalid_expression"),
    ("1 < 2", "calculator_invalid_expression"),
    ("1_000 + 1", "calculator_invalid_expression"),
    ("1,2", "calculator_invalid_expression"),
    ("1\n+1", "calculator_invalid_expression"),
    ("1\t+ 1", "calculator_invalid_expression"),
    # 15: Unicode digits and identifiers are rejected by the ASCII allowlist (documented)
    ("１＋１", "calculator_invalid_expression"),
    ("١+١", "calculator_invalid_expression"),
    ("𝟏+𝟏", "calculator_invalid_expression"),
    ("ｘ", "calculator_invalid_expression"),
    ("𝐱 + 1", "calculator_invalid_expression"),
    ("1\u00a0+ 1", "calculator_invalid_expression"),
    ("\ufeff1+1", "calculator_invalid_expression"),
]


@pytest.mark.parametrize("expression, code", SECURITY_CASES)
def test_attacks_fail_cleanly_and_quickly(expression, code):
    started = time.perf_counter()
    with pytest.raises(ToolError) as info:
        evaluate(expression)
    elapsed = time.perf_counter() - started
    assert info.value.code == code, info.value.message
    assert info.value.retryable is False
    assert len(info.value.message) < 200
    assert elapsed < 1.0  # every input is bounded; this is orders of magnitude above the real cost


def test_unicode_digits_are_named_not_echoed():
    with pytest.raises(ToolError) as info:
        evaluate("１＋１")
    assert "U+FF11" in info.value.message


@pytest.mark.parametrize("value", [None, 7, 1.5, b"1+1", ["1"]])
def test_non_string_input(value):
    with pytest.raises(ToolError) as info:
        evaluate(value)  # type: ignore[arg-type]
    assert info.value.code == "calculator_invalid_expression"


def test_largest_allowed_input_is_fast():
    # 20 levels of parentheses and ~100 numbers: the worst shapes the limits still allow.
    nested = "(" * 20 + "1" + ")" * 20
    long_sum = "+".join(["1"] * 99)
    for expression in (nested, long_sum, "-" * 150 + "1"):
        assert len(expression) <= MAX_LENGTH
        started = time.perf_counter()
        evaluate(expression)
        assert time.perf_counter() - started < 1.0


def test_through_the_registry(tmp_path: Path):
    registry = default_registry()
    tool = registry.get("calculator")
    args = registry.validate("calculator", {"expression": "(72 + 78 + 81 + 85) / 4"})
    result = tool.execute(ToolContext(knowledge_dir=tmp_path, artifact_dir=tmp_path), args, threading.Event())
    assert result["value"] == 79 and type(result["value"]) is int
    assert result["expression"] == "(72 + 78 + 81 + 85) / 4"
    with pytest.raises(ToolError) as info:
        tool.execute(ToolContext(tmp_path, tmp_path), registry.validate("calculator", {"expression": "1/0"}), threading.Event())
    assert info.value.code == "calculator_division_by_zero"


@pytest.mark.parametrize("expression, admitted", [
    ("9" * 30 + " * 2", True),
    ("9" * 31 + " * 2", False),  # the validator's literal-digit limit, now in the contract too
    ("2602418 / 8335897." + "0" * 23, True),
    ("2602418 / 8335897." + "0" * 24, False),  # the 1.5B's runaway zeros, stopped by the grammar
    ("(72 + 78.5) / 2", True),
    ("1 + x", False),
])
def test_the_contract_pattern_bounds_every_number_like_the_validator(expression, admitted):
    """Where the pattern admits a number, the validator does not refuse it for its digits; where the
    pattern refuses one, the validator does too (so decoding never produces a value the tool refuses)."""
    import re

    from agent.tools.calculator import CALCULATOR_PATTERN, MAX_LITERAL_DIGITS

    assert bool(re.match(CALCULATOR_PATTERN, expression)) is admitted
    digits = max(sum(c.isdigit() for c in run) for run in re.findall(r"[0-9.]+", expression))
    if "x" not in expression:
        assert (digits <= MAX_LITERAL_DIGITS) is admitted
    if not admitted:
        with pytest.raises(ToolError):
            evaluate(expression)


def test_compound_interest_is_exact():
    """``principal * (1 + rate) ** years``: the power is exact (Fraction), so the result is the float
    nearest to the true value, not a float power's rounding."""
    from fractions import Fraction

    for principal, rate, years in ((10000, "0.035", 7), (2500, "0.0125", 30), (1, "0.5", 64 // 2)):
        exact = principal * (1 + Fraction(rate)) ** years
        assert evaluate(f"{principal} * (1 + {rate}) ** {years}") == float(exact)


def test_a_power_is_bounded_before_it_is_computed():
    for expression in ("999999999999999 ** 64", "(1.00000000000001 ** 64) ** 64", "(0.5 ** 64) ** -64"):
        started = time.perf_counter()
        with pytest.raises(ToolError):
            evaluate(expression)
        assert time.perf_counter() - started < 0.5
