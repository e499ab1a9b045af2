"""The record_rules family's own grader, independent of ``metrics.py`` and ``claims.py``: it
recomputes the right answer from the data the generator kept in ``data/expected.json`` and reads
the Final with its own simple reading (``packkit``). Failure families (empty: a pass):

    stopped:<stop_reason>   the run did not complete
    calculator_value        the last calculator value is not the gap / spread / average
    answer_lacks_value      the answer does not state the measured value (lowest, highest, gap, spread,
                            average) where it says what it is ("the gap is ..."; anywhere, without that phrase)
    wrong_group             the first group the answer names is not the lowest (highest) one
    false_claim             a stated "X op Y is True/False" is arithmetically false
    wrong_verdict           the verdict phrase disagrees with the rule, or none is stated
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

from agent.families.packkit import false_claims, last_ok, said, states_as
from agent.families.record_rules.generator import NEGATIVE, POSITIVE


def _f(value: Any) -> Fraction:
    return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)


def right_answer(data: dict[str, Any]) -> dict[str, Any]:
    """What a right answer states, from the record's values and rules alone."""
    values = {k: _f(v) for k, v in data["values"].items()}
    threshold = _f(data["rules"][data["rule"]])
    low_name = min(values, key=values.get)
    high_name = max(values, key=values.get)
    low, high, mean = values[low_name], values[high_name], sum(values.values()) / len(values)
    q = data["question"]
    measured = {"gap": low - threshold, "spread": high - low, "lowest": low, "highest": high, "average": mean}[q]
    holds = {"gap": low >= threshold, "lowest": low >= threshold, "spread": high - low <= threshold,
             "highest": high <= threshold, "average": mean >= threshold}[q]
    group = low_name if q == "lowest" else high_name if q == "highest" else None
    return {"value": measured, "holds": holds, "group": group, "calculator": q in ("gap", "spread", "average")}


def grade_run(pack: Any, workspace_root: Path | None, result: Any) -> list[str] | None:
    expected = pack.load_expected()
    if expected.get("family") != "record_rules":
        return None
    if result.status != "completed":
        return [f"stopped:{result.stop_reason}"]
    data = expected["data"]
    right = right_answer(data)
    answer = result.final.answer if result.final else ""
    failures = []
    if right["calculator"]:
        calc = last_ok(result, "calculator")
        if calc is None or abs(float(calc.get("value", float("nan"))) - float(right["value"])) > 1e-9:
            failures.append("calculator_value")
    phrase = {"gap": "the gap is", "spread": "the spread is", "average": "the average is", "lowest": "with",
              "highest": "with"}[data["question"]]
    if not states_as(answer, phrase, float(right["value"]), 1e-6):
        failures.append("answer_lacks_value")
    if right["group"] is not None:
        positions = {label: answer.find(label) for label in data["values"] if label in answer}
        if not positions or min(positions, key=positions.get) != right["group"]:
            failures.append("wrong_group")
    if false_claims(answer):
        failures.append("false_claim")
    q = data["question"]
    if said(answer, [POSITIVE[q]], [NEGATIVE[q]]) is not right["holds"]:
        failures.append("wrong_verdict")
    return failures
