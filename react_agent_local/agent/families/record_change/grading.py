"""The record_change family's own grader, independent of ``metrics.py`` and ``claims.py``: the change
recomputed from both records' values in ``data/expected.json``. Failure families (empty: a pass):

    stopped:<stop_reason>   the run did not complete
    calculator_value        the last calculator value is not the change
    answer_lacks_values     the answer does not state the group's two values
    answer_lacks_change     ... or the change (a percentage rounded to one decimal) as "a change of ..."
    false_claim             a stated "X op Y is True/False" is arithmetically false
    wrong_verdict           the verdict phrase disagrees with the allowed drop, or none is stated
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

from agent.families.packkit import false_claims, last_ok, rounded, said, states, states_as
from agent.families.record_change.generator import NEGATIVE, POSITIVE


def right_change(data: dict[str, Any]) -> tuple[Fraction, Fraction, bool]:
    """(the exact change, the change as the answer states it, whether it is within the allowed drop)."""
    before, after = Fraction(data["before"][data["group"]]), Fraction(data["after"][data["group"]])
    if data["variant"] == "difference":
        change = after - before
        return change, change, change >= -data["allowed"]
    change = (after - before) / before * 100
    return change, rounded(change, 1), change >= -data["allowed"]


def grade_run(pack: Any, workspace_root: Path | None, result: Any) -> list[str] | None:
    expected = pack.load_expected()
    if expected.get("family") != "record_change":
        return None
    if result.status != "completed":
        return [f"stopped:{result.stop_reason}"]
    data = expected["data"]
    exact, stated, holds = right_change(data)
    answer = result.final.answer if result.final else ""
    failures = []
    calc = last_ok(result, "calculator")
    if calc is None or abs(float(calc.get("value", float("nan"))) - float(exact)) > 1e-9:
        failures.append("calculator_value")
    group = data["group"]
    if not (states(answer, data["before"][group]) and states(answer, data["after"][group])):
        failures.append("answer_lacks_values")
    if not states_as(answer, "change of", float(stated), 1e-6):
        failures.append("answer_lacks_change")
    if false_claims(answer):
        failures.append("false_claim")
    if said(answer, [POSITIVE], [NEGATIVE]) is not holds:
        failures.append("wrong_verdict")
    return failures
