"""The fact_arithmetic family's own grader, independent of ``metrics.py`` and ``claims.py``: the
result recomputed from the fact base the generator wrote (kept in ``data/expected.json``).
Failure families (empty: a pass):

    stopped:<stop_reason>   the run did not complete
    wrong_fact              a needed fact was never looked up (a near miss instead, or nothing)
    calculator_value        the last calculator value is not the sum / ratio / density
    answer_lacks_result     the answer does not state the result rounded as asked
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

from agent.families.packkit import last_ok, rounded, states


def right_result(data: dict[str, Any]) -> tuple[Fraction, Fraction]:
    """(the exact result, the result rounded as the goal asks) from the fact base alone."""
    values = [Fraction(repr(v)) if isinstance(v := data["facts"][name]["value"], float) else Fraction(v)
              for name in data["needed"]]
    q = data["question"]
    exact = sum(values) if q == "sum" else values[0] / values[1] * (1000 if q == "per_1000" else 1)
    return exact, rounded(exact, data["digits"])


def grade_run(pack: Any, workspace_root: Path | None, result: Any) -> list[str] | None:
    expected = pack.load_expected()
    if expected.get("family") != "fact_arithmetic":
        return None
    if result.status != "completed":
        return [f"stopped:{result.stop_reason}"]
    data = expected["data"]
    exact, stated = right_result(data)
    failures = []
    looked = {o.result.get("fact") for o in result.observations if o.ok and o.tool == "lookup_fact"}
    if not set(data["needed"]) <= looked:
        failures.append("wrong_fact")
    calc = last_ok(result, "calculator")
    if calc is None or abs(float(calc.get("value", float("nan"))) - float(exact)) > 1e-9 * max(1.0, abs(float(exact))):
        failures.append("calculator_value")
    answer = result.final.answer if result.final else ""
    if not states(answer, float(stated), 1e-6):
        failures.append("answer_lacks_result")
    return failures
