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


# -- references to evidence: facts and table cells or columns by name ---------------------------------

import json as _json
import random as _random
import statistics as _statistics
import string as _string
from fractions import Fraction as _Fraction


def _name(rng: _random.Random, n: int = 6) -> str:
    return "".join(rng.choice(_string.ascii_lowercase) for _ in range(n))


def _run(tmp_path: Path, expression: str) -> dict:
    registry = default_registry()
    args = registry.validate("calculator", {"expression": expression})
    return registry.get("calculator").execute(ToolContext(knowledge_dir=tmp_path / "knowledge",
                                                          artifact_dir=tmp_path / "run"), args, threading.Event())


def _knowledge(tmp_path: Path, seed: int) -> tuple[dict, str, str, str, list]:
    """A fact base and a table of random names and values: (facts, table sql name, label, column, rows)."""
    rng = _random.Random(seed)
    folder = tmp_path / "knowledge"
    folder.mkdir(exist_ok=True)
    facts = {f"{_name(rng)} {rng.randint(1990, 2030)}": {"value": rng.randint(1, 10**12), "unit": "u"} for _ in range(3)}
    (folder / "facts.json").write_text(_json.dumps({"facts": facts}), encoding="utf-8")
    label, column = _name(rng).capitalize(), f"{_name(rng).capitalize()} {_name(rng, 3)}"
    rows = [(f"{_name(rng)}{k}", round(rng.uniform(-100, 900), rng.randint(0, 2))) for k in range(rng.randint(3, 15))]
    stem = _name(rng)
    (folder / f"{stem}.md").write_text(f"| {label} | {column} (%) |\n|---|---|\n"
                                       + "".join(f"| {r} | {v} |\n" for r, v in rows), encoding="utf-8")
    from agent.task.tables import read_tables

    parsed = next(t for t in read_tables(folder) if t.source == f"{stem}.md")
    return facts, parsed.sql_name, label, column, [row[1] for row in parsed.rows]


@pytest.mark.parametrize("seed", range(4))
def test_facts_by_name_are_exact(tmp_path, seed):
    facts, *_ = _knowledge(tmp_path, seed)
    a, b, _c = facts
    result = _run(tmp_path, f"facts['{a}'] / facts['{b}']")
    assert result["value"] == float(_Fraction(facts[a]["value"], facts[b]["value"])) or \
        result["value"] == _Fraction(facts[a]["value"], facts[b]["value"])
    assert [r["fact"] for r in result["references"]] == [a, b]
    assert result["references"][0] == {"text": f"facts['{a}']", "kind": "fact", "fact": a, "source": "facts.json",
                                       "value": facts[a]["value"]}
    assert result["resolved"] == f"{facts[a]['value']} / {facts[b]['value']}"


def test_a_fact_the_run_looked_up_comes_from_its_lookup(tmp_path):
    from agent.tools.facts import LOOKED_UP_FILE

    facts, *_ = _knowledge(tmp_path, 1)
    name = next(iter(facts))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / LOOKED_UP_FILE).write_text(_json.dumps({name: facts[name]["value"]}), encoding="utf-8")
    [reference] = _run(tmp_path, f"facts['{name.upper()}'] * 2")["references"]
    assert reference["source"] == "lookup_fact" and reference["fact"] == name


@pytest.mark.parametrize("seed", range(4))
def test_columns_and_cells_by_name_match_python_over_the_parsed_rows(tmp_path, seed):
    _, table, label, column, values = _knowledge(tmp_path, seed)
    exact = [_Fraction(repr(v)) if isinstance(v, float) else _Fraction(v) for v in values]
    expected = {"sum": sum(exact), "mean": sum(exact) / len(exact), "median": _statistics.median(exact),
                "min": min(exact), "max": max(exact), "count": len(exact)}
    for aggregate, value in expected.items():
        result = _run(tmp_path, f"{aggregate}(col('{table}', '{column}'))")
        want = int(value) if _Fraction(value).denominator == 1 else float(value)
        assert result["value"] == want and type(result["value"]) is type(want), aggregate
        [reference] = result["references"]
        assert reference["kind"] == "column" and reference["table"] == table and reference["column"] == column
        assert reference["aggregate"] == aggregate and reference["unit"] == "%"
        if aggregate != "count":
            assert reference["of"] == values
    spread = _run(tmp_path, f"max(col('{table}', '{column}')) - min(col('{table}', '{column}'))")
    assert spread["value"] == (lambda d: int(d) if d.denominator == 1 else float(d))(max(exact) - min(exact))
    from agent.task.tables import read_tables

    parsed = next(t for t in read_tables(tmp_path / "knowledge") if t.sql_name == table)
    row_label, row_value = parsed.rows[-1]
    cell = _run(tmp_path, f"cell('{table}', '{row_label}', '{column} (%)') * 1")
    assert cell["value"] == row_value and cell["references"][0]["row"] == row_label


def test_the_calculator_and_the_query_tool_agree(tmp_path):
    from agent.task.tables import read_tables
    from agent.tools.table_query import query

    _, table, label, column, values = _knowledge(tmp_path, 9)
    tables = read_tables(tmp_path / "knowledge")
    for aggregate, sql in (("mean", "avg"), ("median", "median"), ("sum", "sum"), ("min", "min"), ("max", "max")):
        by_name = _run(tmp_path, f"{aggregate}(col('{table}', '{column}'))")["value"]
        by_sql = query(tables, f'SELECT {sql}("{column}") FROM {table}')["rows"][0][0]
        assert by_name == pytest.approx(by_sql, rel=1e-12), aggregate


@pytest.mark.parametrize("expression, named", [
    ("facts['no such fact'] + 1", ["no fact named"]),
    ("sum(col('nosuch', 'x'))", ["no table 'nosuch'", "tables:"]),
    ("sum(col('{t}', 'nosuch'))", ["no column 'nosuch'", "columns:"]),
    ("cell('{t}', 'nosuch', '{c}')", ["no row 'nosuch'", "rows:"]),
    ("sum(col('{t}', '{l}'))", ["holds text"]),
])
def test_an_unknown_reference_names_what_there_is(tmp_path, expression, named):
    _, table, label, column, _ = _knowledge(tmp_path, 2)
    with pytest.raises(ToolError) as info:
        _run(tmp_path, expression.format(t=table, c=column, l=label))
    assert info.value.code == "calculator_unknown_reference" and info.value.retryable is False
    assert all(part in info.value.message for part in named), info.value.message
    assert str(tmp_path) not in info.value.message


@pytest.mark.parametrize("expression", [
    "facts['a'] + __import__('os')",
    "facts['a'].__class__",
    "facts['a' + 'b']",
    "facts[0]",
    "col('t', 'c')",  # a whole column is no number: aggregate it
    "sum(col('t', 'c'), 1)",
    "cell('t', 'r')",
    "stdev(col('t', 'c'))",
    "facts['it\\'s']",
    "facts['a'] r0",
    "r0 + 1",
    "open('x')",
    'facts["a"]',  # names are quoted with ' only: the pattern, the grammar and the reader agree
    "median( col( 't' , 'c' ) )",
])
def test_only_the_three_reference_forms_are_names(expression):
    with pytest.raises(ToolError) as info:
        evaluate(expression, resolve=lambda ref: (_Fraction(1), {}))
    assert info.value.code == "calculator_invalid_expression"


def test_a_name_with_digits_is_no_operand_and_references_are_evidence():
    """The operand rule (agent/gate/operands.py) checks the literals a model typed; a reference is resolved
    from the pack's data, so neither it nor the digits in its quoted name are typed operands."""
    from agent.gate.operands import ungrounded_operands

    assert ungrounded_operands("facts['alpha 2031'] / facts['beta 2031']", [], []) == []
    assert ungrounded_operands("max(col('t_2031', 'Q3 share')) - min(col('t_2031', 'Q3 share'))", [], []) == []
    assert ungrounded_operands("facts['alpha 2031'] / 7919", [], []) == ["7919"]  # a typed literal still is one


@pytest.mark.parametrize("expression", [
    "facts['甲市指标'] + facts['乙市指标']",
    "sum(col('rec_2031_02', '得分率')) / 3 - sum(col('rec_2031_01', '得分率')) / 3",
    "cell('t', 'Upper Vale', 'Yield Rate') - 1",
    "10000 * (1 + 0.035) ** 7",
    "median(col('t','c'))*2",
])
def test_the_contract_pattern_admits_the_references(expression):
    import re

    from agent.tools.calculator import CALCULATOR_PATTERN, references_in

    assert re.match(CALCULATOR_PATTERN, expression)
    references_in(expression)  # and the validator reads what the pattern admits
