"""The interest family's own grader, independent of ``metrics.py`` and ``claims.py``: the value
recomputed from the problem's numbers in ``data/expected.json``, by the textbook formula of its
kind. Failure families (empty: a pass):

    stopped:<stop_reason>   the run did not complete
    calculator_value        the last calculator value is not the exact value
    answer_lacks_result     the answer does not state the value rounded as the goal asks
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

from agent.families.packkit import last_ok, rounded, states


def right_value(data: dict[str, Any]) -> Fraction:
    n = {k: Fraction(str(v)) for k, v in data["numbers"].items()}
    kind = data["kind"]
    if kind == "compound":
        value = n["principal"]
        for _ in range(int(n["years"])):
            value *= 1 + n["rate"] / 100
        return value
    if kind == "percent_of":
        return n["amount"] * n["rate"] / 100
    if kind == "percent_change":
        return (n["after"] - n["before"]) / n["before"] * 100
    if kind == "discount_tax":
        return n["price"] * (100 - n["discount"]) / 100 * (100 + n["tax"]) / 100
    return n["principal"] * n["rate"] * n["years"] / 100


def grade_run(pack: Any, workspace_root: Path | None, result: Any) -> list[str] | None:
    expected = pack.load_expected()
    if expected.get("family") != "interest":
        return None
    if result.status != "completed":
        return [f"stopped:{result.stop_reason}"]
    data = expected["data"]
    exact = right_value(data)
    failures = []
    calc = last_ok(result, "calculator")
    if calc is None or abs(float(calc.get("value", float("nan"))) - float(exact)) > 1e-9 * max(1.0, abs(float(exact))):
        failures.append("calculator_value")
    answer = result.final.answer if result.final else ""
    if not states(answer, float(rounded(exact, data["digits"])), 1e-6):
        failures.append("answer_lacks_result")
    return failures
