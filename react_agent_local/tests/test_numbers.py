"""Reading numbers and comparisons in any script (``agent/gate/numbers.py``), and the grader reading
answers the same way (``metrics.py``): by value, whatever the format."""

from __future__ import annotations

from fractions import Fraction

import pytest

from agent.core.metrics import answer_verdict, comparisons_right, states_number, task_success_checks, RunRecord
from agent.contracts.decision import FinalDecision
from agent.gate.numbers import asks_rounding, grounded, normalize, numbers_in, read_comparisons, read_numbers


def values(text: str) -> list[float]:
    return [n.value for n in read_numbers(text)]


# -- numbers --------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,plain", [
    ("三市人口合计为9999999人。", "9999999"),
    ("１２３，４５６．７", "123456.7"),
    ("8,189,137", "8189137"),
    ("8 189 137", "8189137"),
    ("8\u202f189\u202f137", "8189137"),
    ("8\u00a0189", "8189"),
    ("温度为−3.2度", "-3.2"),
    ("温度为－3.2度", "-3.2"),
    ("均值７２．５", "72.5"),
    ("٧٢", "72"),  # Arabic-Indic digits
    ("最低值69.5>=72", "69.5"),
])
def test_the_first_number_is_read_wherever_it_stands(text, plain):
    assert read_numbers(text)[0].exact == Fraction(plain)


@pytest.mark.parametrize("text,exact,decimals,scale", [
    ("8.19万", Fraction("8.19") * 10 ** 4, 2, 10 ** 4),
    ("1.2亿人", Fraction("1.2") * 10 ** 8, 1, 10 ** 8),
    ("3万亿", 3 * 10 ** 12, 0, 10 ** 12),
    ("22.4 million", Fraction("22.4") * 10 ** 6, 1, 10 ** 6),
    ("$83.4 thousand", Fraction("83.4") * 10 ** 3, 1, 10 ** 3),
])
def test_multipliers_scale_the_value_and_keep_the_written_decimals(text, exact, decimals, scale):
    [n] = read_numbers(text)
    assert (n.exact, n.decimals, n.scale) == (exact, decimals, scale)
    assert n.half_unit == Fraction(scale, 2 * 10 ** decimals)
    assert float(Fraction(n.readings()[-1])) == pytest.approx(float(exact / scale))  # as written, before 万


@pytest.mark.parametrize("text", ["12.5%", "12.5 %", "12.5％", "12.5 percent"])
def test_a_percentage_keeps_its_value_and_knows_its_fraction(text):
    [n] = read_numbers(text)
    assert n.percent and n.value == 12.5 and n.values() == [12.5, 0.125]


def test_a_list_separated_by_chinese_commas_is_a_list():
    assert values("分别为 72，78，81") == [72, 78, 81]
    assert values("分别为100，200") == [100, 200]  # "，" groups thousands only between full-width digits
    assert values("72,78,81") == [72, 78, 81]  # not groups of three
    assert values("12 345") == [12, 345]  # one plain-space group is ambiguous: two numbers


def test_digits_inside_names_are_not_numbers():
    assert values("obs-calculator-2 Qwen2.5-1.5B v1 gen-11-004 674b309ac3dad8c0 release_rule") == []
    assert values("79(obs-calculator-2)") == [79]
    assert values("3rd place, 10th run") == [3, 10]


def test_a_minus_after_a_number_subtracts_and_before_one_is_a_sign():
    assert values("80-68") == [80, 68] and values("80 - 68") == [80, 68] and values("80 -68") == [80, 68]
    assert values("= -68") == [-68] and values("(−17.6)") == [-17.6] and values("is −3") == [-3]


def test_normalize_keeps_every_position():
    text = "平均值７８．１２５＞＝７７为True，−3"
    norm = normalize(text)
    assert len(norm) == len(text) and "78.125>=77" in norm and norm.endswith("-3")


def test_numbers_in_a_json_value():
    result = {"data": {"batches": {"A": 72, "B": 78.5}}, "note": "合计8.19万人", "flag": True, "n": None}
    found = list(numbers_in(result))
    assert [n.value for n in found] == [72, 78.5, 81900]
    assert found[2].readings() == [81900, 8.19]


# -- grounding ------------------------------------------------------------------------------------

def test_grounded_by_value_rounding_and_percent():
    [ratio] = read_numbers("0.3122")
    assert grounded(ratio, [2602418 / 8335897]) and not grounded(read_numbers("0.3121")[0], [2602418 / 8335897])
    [whole] = read_numbers("81695")
    assert not grounded(whole, [81695.19]) and grounded(whole, [81695.19], whole=True)
    assert not grounded(read_numbers("81696")[0], [81695.19], whole=True)  # no rounding gives 81696
    assert grounded(read_numbers("12.5%")[0], [0.125]) and grounded(read_numbers("12.5%")[0], [12.5])
    assert grounded(read_numbers("818.9万")[0], [8189137])  # 8189000, written to the thousand
    assert not grounded(read_numbers("819万")[0], [8189137])  # a whole number of 万: only when asked
    assert grounded(read_numbers("819万")[0], [8189137], whole=True)
    assert not grounded(read_numbers("-68")[0], [68])  # the sign is part of the claim


@pytest.mark.parametrize("text,asks", [
    ("What is the balance after 2 years, to the nearest whole dollar?", True),
    ("compute the average, rounded to two decimals", True),
    ("台北人口 除以 纽约人口，答案保留 4 位小数", True),
    ("求平均值（四舍五入到整数）", True),
    ("compute the average Task Success with the calculator", False),
    ("查出三市人口并求合计", False),
])
def test_asks_rounding(text, asks):
    assert asks_rounding(text) is asks


# -- comparisons ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text,left,op,right,claimed", [
    ("最低值69.5>=72为True", 69.5, ">=", 72, True),
    ("average 78 >= 77 is True", 78, ">=", 77, True),
    ("69.5 ≥ 72 不成立", 69.5, ">=", 72, False),
    ("平均值 78.125 ≥ 77 成立", 78.125, ">=", 77, True),
    ("lowest 72 >= 70 (True)", 72, ">=", 70, True),
    ("最低值６９．５＞＝７２为 False", 69.5, ">=", 72, False),
    ("12<=10不成立", 12, "<=", 10, False),
    ("0.3122 < 1/3", 0.3122, "<", 1 / 3, None),
    ("(72 + 78 + 81 + 85) / 4 = 79", 79, "==", 79, None),
    ("80-68=12", 12, "==", 12, None),
    ("−17.6 < 13.6 为真", -17.6, "<", 13.6, True),
    ("0.87 >= 85% is True", 0.87, ">=", 0.85, True),  # a percentage against a plain number: its fraction
    ("87% >= 85% is True", 87, ">=", 85, True),
    ("2 ≠ 3", 2, "!=", 3, None),
])
def test_comparisons_with_or_without_spaces(text, left, op, right, claimed):
    [c] = read_comparisons(text)
    assert (c.left, c.op, c.claimed) == (pytest.approx(left), op, claimed) and c.right == pytest.approx(right)


def test_a_comparison_reads_as_its_check_written_any_way_round():
    [same] = read_comparisons("72 >= 70")
    [mirrored] = read_comparisons("70 <= 72")
    [complement] = read_comparisons("62 < 65")
    assert same.against(">=", 70)[1] is False and same.against(">=", 70)[0].value == 72
    assert mirrored.against(">=", 70)[0].value == 72 and mirrored.against(">=", 70)[1] is False
    assert complement.against(">=", 65)[0].value == 62 and complement.against(">=", 65)[1] is True
    assert same.against(">=", 78) is None


def test_equals_signs_between_labels_are_no_comparison():
    assert read_comparisons("Batch A = 72, Batch B = 78; average = 79") == []
    assert read_comparisons("台北2602418人+纽约8335897人=10938315人") == []
    assert read_comparisons("79 >= 78 -> True")[0].claimed is True


# -- the grader reads answers the same way ----------------------------------------------------------

@pytest.mark.parametrize("answer,want,tolerance,states", [
    ("三市人口合计为8,189,137人。", 8189137, None, True),
    ("合计 8 189 137 人", "8189137", None, True),
    ("合计818.9137万人", 8189137, None, True),
    ("合计818.9万人", 8189137, None, False),
    ("合计818.9万人", 8189137, 500, True),
    ("约为 31.22%", "0.3122", None, True),
    ("约为0.3122。", "0.3122", None, True),
    ("约为 0.31219", "0.3122", None, False),
    ("The average is 79.0", "79", None, True),
    ("The average is 179", "79", None, False),
    ("see obs-calculator-79", "79", None, False),
])
def test_answer_numbers_compare_by_value(answer, want, tolerance, states):
    assert states_number(answer, want, tolerance) is states


def test_an_answer_numbers_check_passes_a_formatted_answer():
    expected = {"checks": [{"type": "answer_numbers", "name": "total", "numbers": [8189137]},
                           {"type": "answer_numbers", "name": "near", "numbers": ["81695"], "tolerance": 0.5}]}
    final = FinalDecision(type="final", answer="合计8,189,137人，约81,695.19元", evidence_ids=["obs-calculator-1"])
    assert task_success_checks(RunRecord(), expected, final) == {"total": True, "near": True}
    final = FinalDecision(type="final", answer="合计8,189,173人", evidence_ids=["obs-calculator-1"])
    assert task_success_checks(RunRecord(), expected, final) == {"total": False, "near": False}


def test_the_grader_reads_glued_comparisons_and_verdicts():
    assert comparisons_right("最低值69.5>=72为False，平均值78.125>=77为True", [[78.125, ">=", 77], [69.5, ">=", 72]])
    assert not comparisons_right("最低值69.5>=72为True", [])
    assert not comparisons_right("最低值81.25>=72为True", [[69.5, ">=", 72]])
    assert comparisons_right("The lowest 62 < 65", [[62, ">=", 65]])  # the complement states the check
    assert answer_verdict("因此不满足发布规则。", ["满足"], ["不满足"]) is False
    assert answer_verdict("So it meets the rule", [r"\bmeets?\b"], [r"\bnot\b"]) is True
    assert answer_verdict("No verdict here", ["meets"], ["not meet"]) is None
