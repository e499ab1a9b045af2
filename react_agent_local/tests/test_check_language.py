"""The check language (agent/gate/check_language.py): what a pack may write where the runtime works a value
out -- arithmetic over evidence paths, named thresholds of a record, the whitelisted functions -- and
everything outside the whitelist refused before anything is evaluated."""

from __future__ import annotations

import pytest

from agent.gate.check_language import CheckLanguageError, evaluate, holds, outer_function, parse, path_values
from agent.gate.claims import resolve
from agent.contracts.decision import Observation


def obs(tool: str, result: dict, n: int = 1) -> Observation:
    return Observation(id=f"obs-{tool}-{n}", tool=tool, ok=True, result=result)


RECORD = {"title": "Q1 review", "date": "2024-03", "source_id": "q1.md", "value_column": "Score",
          "values": {"North": 72, "South": 64.5, "Team Red": 81}, "rules": {"floor": 70, "max_spread": 15}}
LATER = {**RECORD, "date": "2024-04", "values": {"North": 75, "South": 60, "Team Red": 80}, "rules": {"max_drop": 5}}
EVIDENCE = {
    "calculator": obs("calculator", {"expression": "64.5 - 70", "value": -5.5}),
    "knowledge_search": obs("knowledge_search", {"data": {}, "records": {"2024-03": RECORD}}),
    "lookup_fact": obs("lookup_fact", {"fact": "Porto population", "value": 231800,
                                       "looked_up": {"Lisbon population": 545000, "Porto population": 231800}}),
}
TWO_RECORDS = {**EVIDENCE, "knowledge_search": obs("knowledge_search", {"records": {"2024-03": RECORD, "2024-04": LATER}})}


@pytest.mark.parametrize("text,value", [
    ("calculator.value", -5.5),
    ("record.rules.floor", 70),
    ("min(record.values)", 64.5),
    ("max(record.values) - min(record.values)", 16.5),
    ("record.rules.floor - min(record.values)", 5.5),
    ("mean(record.values)", (72 + 64.5 + 81) / 3),
    ("sum(record.values)", 217.5),
    ("count(record.values)", 3),
    ("record.values['Team Red']", 81),
    ("record.values['team red']", 81),  # a key means the same up to case and spaces
    ("record.values.North * 2 + 1", 145),
    ("abs(calculator.value)", 5.5),
    ("round(mean(record.values), 2)", 72.5),
    ("round(2.345, 2)", 2.35),  # half away from zero, as people round money
    ("round(-2.5)", -3),
    ("min(3, 1, 2) + max(4, 9)", 10),
    ("2500 * (1 + 4 / 100) ** 3", 2812.16),
    ("facts['Lisbon population'] + facts['Porto population']", 776800),
    ("sum(facts)", 776800),
    ("lookup_fact.value / 1000", 231.8),
    ("0.1 + 0.2", 0.3),  # exact arithmetic, the float nearest 3/10
    ("−5.5 × 2 ÷ 11", -1),  # the symbols people write
])
def test_expressions_over_the_evidence(text, value):
    got = evaluate(text, EVIDENCE)
    assert got == pytest.approx(value) and type(got) is (int if float(value).is_integer() else float)


def test_records_by_key_and_by_position():
    assert evaluate("records['2024-04'].values.North - records['2024-03'].values.North", TWO_RECORDS) == 3
    assert evaluate("records[-1].rules.max_drop", TWO_RECORDS) == 5
    assert evaluate("records[0].values.South", TWO_RECORDS) == 64.5
    assert evaluate("record.values.North", TWO_RECORDS) is None  # two records: 'record' names none of them


def test_argmin_and_argmax_name_the_group():
    assert evaluate("argmin(record.values)", EVIDENCE) == "South"
    assert evaluate("argmax(record.values)", EVIDENCE) == "Team Red"
    tie = {"knowledge_search": obs("knowledge_search", {"records": {"x": {**RECORD, "values": {"A": 5, "B": 5}}}})}
    assert evaluate("argmin(record.values)", tie) == "A"  # the first of equals, in the record's order


def test_a_release_rule_record_reads_as_a_record():
    release = {"knowledge_search": obs("knowledge_search", {"data": {"batches": {"A": 72, "B": 78},
                                                                     "release_rule": {"average_gte": 75, "every_batch_gte": 70}}})}
    assert evaluate("record.rules.every_batch_gte - min(record.values)", release) == -2
    assert evaluate("mean(knowledge_search.data.batches)", release) == 75


def test_unknown_evidence_is_none_never_an_error():
    for text in ("plot.spec.average", "record.rules.ceiling", "records['2023-01'].values.North", "1 / 0",
                 "record.values", "facts['Paris population']", "10 ** 100 ** 2", "2 ** 0.5", "argmin(1, 2)",
                 "record.values.North.more"):
        assert evaluate(text, EVIDENCE) is None, text
    assert evaluate("calculator.value", {}) is None


def test_tool_names_with_dots_and_dashes():
    served = {"facts.lookup_fact": obs("facts.lookup_fact", {"fact": "A", "value": 4}),
              "my-server.tool": obs("my-server.tool", {"x": [1, 2, 3]})}
    assert evaluate("facts.lookup_fact.value * 2", served) == 8
    assert evaluate("facts['A']", served) == 4  # the lookup of a server counts as the fact lookup
    assert evaluate("sum(my-server.tool.x) - 1", served) == 5


def test_comparisons():
    assert holds("min(record.values) >= record.rules.floor", EVIDENCE) is False
    assert holds("max(record.values) - min(record.values) <= record.rules.max_spread", EVIDENCE) is False
    assert holds("count(record.values) == 3", EVIDENCE) is True
    assert holds("calculator.value != 0", EVIDENCE) is True
    with pytest.raises(CheckLanguageError):
        holds("argmin(record.values) == 'South'", EVIDENCE)  # text is a key only, never an operand
    assert holds("plot.spec.average > 1", EVIDENCE) is None


def test_the_old_operands_mean_what_they_meant():
    plot = {"plot": obs("plot", {"spec": {"labels": ["A", "B", "C"], "values": [1, 2, 3], "average": 2}}),
            "knowledge_search": obs("knowledge_search", {"data": {"batches": {"A": 1, "B": 2, "D": 3}}})}
    assert resolve("matches(plot.spec.labels, knowledge_search.data.batches)", plot) == 2
    assert resolve("count(plot.spec.values)", plot) == 3
    assert resolve("plot.spec.average", plot) == 2
    assert resolve(70, plot) == 70.0 and resolve("70", plot) == 70.0


@pytest.mark.parametrize("text", [
    "__import__('os').system('true')",
    "open('/etc/passwd')",
    "eval('1')",
    "calculator.__class__",
    "record._private",
    "(lambda: 1)()",
    "[x for x in record.values]",
    "{'a': 1}",
    "'text'",
    "True",
    "None",
    "record.values if 1 else 2",
    "1 and 2",
    "not 1",
    "~1",
    "5 % 2",
    "5 // 2",
    "1 << 2",
    "record.values[1:2]",
    "record.values[calculator.value]",
    "round(1.5, ndigits=1)",
    "max(*record.values)",
    "round(1.25, 0.5)",
    "min",
    "f'{1}'",
    "a := 1",
    "1 < 2 < 3",
    "x.y()",
    "getattr(record, 'values')",
    "",
    "1 +",
    "-" * 150 + "1",
    "abs(" * 80 + "1" + ")" * 80,
    "1" + " + 1" * 150,
])
def test_anything_outside_the_whitelist_is_refused(text):
    with pytest.raises(CheckLanguageError):
        evaluate(text, EVIDENCE)


def test_a_comparison_is_one_comparison():
    with pytest.raises(CheckLanguageError):
        holds("1 + 2", EVIDENCE)
    with pytest.raises(CheckLanguageError):
        holds("1 < 2 < 3", EVIDENCE)
    with pytest.raises(CheckLanguageError):
        evaluate("1 < 2", EVIDENCE)  # an operand is an expression, never a comparison


def test_a_long_sum_is_fine():
    assert evaluate(" + ".join(["1"] * 60), EVIDENCE) == 60


def test_long_text_is_refused_before_parsing():
    with pytest.raises(CheckLanguageError):
        parse("1" * 501)


def test_a_bad_operand_in_a_pack_is_the_packs_mistake():
    with pytest.raises(CheckLanguageError):
        resolve("open('x')", EVIDENCE)


def test_the_outer_function():
    assert outer_function("round(calculator.value, 2)") == "round"
    assert outer_function("round(a.b) + 1") is None and outer_function("calculator.value") is None


def test_a_bound_slot_admits_only_the_value_its_expression_has_on_the_evidence():
    import re as _re

    from agent.gate.claims import bound_forms
    from agent.contracts.decision import Observation
    from agent.prompts.prompting import answer_form_pattern

    form = "The gap is {number:calculator.value} and the lowest is {number} in {name:argmin(record.values)}"
    calc = Observation(id="obs-calculator-2", tool="calculator", ok=True, result={"expression": "80 - 12.25", "value": 67.75})
    forms = bound_forms(form, [calc])
    assert forms[0] is not None and "67.75" in forms[0] and "68" in forms[0]
    assert forms[1] is None  # no record was observed: the slot stays open
    pattern = _re.compile(answer_form_pattern(form, ("12.25",), forms))
    assert pattern.match("The gap is 67.75 and the lowest is 12.25 in North")
    assert pattern.match("The gap is 68 and the lowest is 12.25 in North")
    assert not pattern.match("The gap is 12.25 and the lowest is 12.25 in North")
    assert not pattern.match("The gap is -68 and the lowest is 12.25 in North")
    assert bound_forms(form, []) == (None, None)


def test_path_values_are_the_evidence_numbers_an_expression_reads():
    text = "(records['2024-04'].values.North - records['2024-03'].values.North) / records['2024-03'].values.North * 100"
    assert path_values(text, TWO_RECORDS) == (("records['2024-04'].values.North", 75),
                                              ("records['2024-03'].values.North", 72))
    # inside functions, each once, a tool's own result left out when asked, unknown paths left out
    assert path_values("abs(calculator.value) + record.rules.floor + record.rules.floor + record.rules.ceiling",
                       EVIDENCE, skip_roots=("calculator",)) == (("record.rules.floor", 70),)
    assert path_values("mean(record.values)", EVIDENCE) == ()  # a whole object is no number
    served = {"my-server.tool": obs("my-server.tool", {"n": 3})}
    assert path_values("my-server.tool.n * 2", served) == (("my-server.tool.n", 3),)
    assert path_values(12.5, EVIDENCE) == ()


@pytest.mark.parametrize("text,shown", [
    ("(records['2024-04'].values.North - records['2024-03'].values.North) / records['2024-03'].values.North * 100",
     "(75 - 72) / 72 * 100"),
    ("mean(records['2024-03'].values)", "(72 + 64.5 + 81) / 3"),
    ("max(records[0].values) / min(records[0].values)", "81 / 64.5"),
    ("count(records[1].values) * 2", "3 * 2"),
    ("records[1].values.South - records[0].rules.floor", "60 - 70"),
    ("-(records[0].values.South - 70)", "-(64.5 - 70)"),
    ("records[0].values.North * (1 + 4 / 100) ** 3", "72 * ((1 + 4 / 100) * (1 + 4 / 100) * (1 + 4 / 100))"),
])
def test_worked_out_puts_the_evidence_into_an_expression(text, shown):
    from agent.gate.check_language import worked_out

    assert worked_out(text, TWO_RECORDS) == shown
    # what it shows computes what the expression computes, and the calculator takes it
    from agent.tools.calculator import evaluate as calculate

    assert evaluate(shown, {}) == evaluate(text, TWO_RECORDS)
    assert abs(calculate(shown) - evaluate(text, TWO_RECORDS)) < 1e-9


def test_worked_out_is_none_where_a_part_is_unknown_or_no_number():
    from agent.gate.check_language import worked_out

    assert worked_out("argmin(record.values)", EVIDENCE) is None
    assert worked_out("record.rules.ceiling - 1", EVIDENCE) is None
    assert worked_out("-calculator.value", EVIDENCE) == "5.5"
    assert worked_out(3.5, EVIDENCE) is None


@pytest.mark.parametrize("value,expression", [(4.292610957036539, "round(calculator.value, 2)"),
                                              (1194.5978878960195, "round(calculator.value, 1)"),
                                              (8647.52, "round(calculator.value)"), (4.3, "round(calculator.value, 2)")])
def test_a_slot_bound_to_a_rounding_admits_what_the_gate_admits_and_nothing_else(value, expression):
    """The grammar once admitted every rounding of the value; the gate only the one the binding names."""
    import re as _re

    from agent.gate.claims import bound_forms, number_forms, slot_values
    from agent.contracts.decision import Observation
    from agent.prompts.prompting import answer_form_pattern

    form = f"The result is {{number:{expression}}}."
    calc = [Observation(id="obs-calculator-1", tool="calculator", ok=True, result={"expression": "x", "value": value})]
    pattern = _re.compile(answer_form_pattern(form, (), bound_forms(form, calc)))
    writings = list(dict.fromkeys([*number_forms([value]), f"{value:.0f}", f"{value:.2f}"]))
    for written in writings:
        answer = f"The result is {written}."
        if pattern.fullmatch(answer):  # what the grammar lets through, the gate accepts
            assert slot_values(answer, form, calc)[1] == [], written
    admitted = [w for w in writings if pattern.fullmatch(f"The result is {w}.")]
    assert admitted and all(float(w) == float(admitted[0]) for w in admitted)  # one number
