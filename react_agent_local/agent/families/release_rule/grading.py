"""The release-rule family's own grader: a second, independent grade of eval runs, so that a bug in
``metrics.py`` shows up as a disagreement instead of a wrong success rate.

It is modelled on the session hook that grades one random pack, not on ``metrics.py``: it reads
the run's result (status, successful Observations, the Final's text) and the pack's
``expected.json``, and returns the failure families it finds (empty = pass):

    stopped:<stop_reason>         the run did not complete
    calculator_value              the last successful calculator value is not the average
    plot_spec                     the last successful plot has other labels, values or average line
    answer_lacks_average          the answer does not state the average
    answer_lacks_lowest           ... or the lowest group value
    false_claim                   a stated "X >= Y is True/False" is arithmetically false
    claim_compares_wrong_values   a stated comparison is neither average vs average_gte nor a group
                                  value vs every_batch_gte (e.g. the average against the floor)
    wrong_verdict                 the verdict phrase disagrees with the release rule
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from agent.contracts.result import RunResult

_NUMBER = r"-?\d+(?:\.\d+)?"
_NUMBERS = re.compile(rf"(?<![\d.]){_NUMBER}")
_CLAIM = re.compile(
    rf"({_NUMBER})\s*%?\s*(>=|≥|<=|≤|==|>|<)\s*({_NUMBER})\s*%?\s*(?:is\s*|为\s*|是\s*|:\s*)?(True|False)\b")
# The hook's negative phrases, plus a few common English and Chinese refusals.
_NEGATIVE = re.compile(
    r"not (?:be )?(?:eligible|released|met|satisfied)|does not (?:meet|satisfy)|doesn't (?:meet|satisfy)|is not met"
    r"|fail(?:s|ed)? to meet|ineligible|不满足|未满足|不符合|不能发布|不可发布|不可以发布",
    re.IGNORECASE)
_HOLDS = {">=": lambda a, b: a >= b, "≥": lambda a, b: a >= b, "<=": lambda a, b: a <= b,
          "≤": lambda a, b: a <= b, "==": lambda a, b: a == b, ">": lambda a, b: a > b, "<": lambda a, b: a < b}


def _close(a: Any, b: Any) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    except (TypeError, ValueError):
        return False


def _last_ok(result: RunResult, tool: str) -> dict[str, Any] | None:
    found = [o.result for o in result.observations if o.ok and o.tool == tool]
    return found[-1] if found else None


def stated_claims(answer: str) -> list[tuple[float, str, float, bool]]:
    """Every "X op Y is True/False" in the answer, as (X, op, Y, claimed)."""
    return [(float(a), op, float(b), claim == "True") for a, op, b, claim in _CLAIM.findall(answer)]


def grade_run(pack: Any, workspace_root: Path | None, result: RunResult) -> list[str] | None:
    """The family's grade of a run of ``pack`` (``families.grade_run``): ``grade_expected`` on its
    ground truth."""
    return grade_expected(pack.load_expected(), result)


def grade_expected(expected: dict[str, Any], result: RunResult) -> list[str] | None:
    """The failure families of one run against ``expected.json``; an empty list is a pass. None for a
    pack of another family (its ``expected.json`` holds no groups): this grader has nothing to say."""
    batches = (expected.get("knowledge") or {}).get("batches") or {}
    if not batches:
        return None
    if result.status != "completed":
        return [f"stopped:{result.stop_reason}"]
    rule = (expected.get("knowledge") or {}).get("release_rule") or {}
    average = (expected.get("calculator") or {}).get("value")
    lowest = min(batches.values()) if batches else None
    failures = []

    calc = _last_ok(result, "calculator")
    if calc is None or not _close(calc.get("value"), average):
        failures.append("calculator_value")
    want_plot, spec = expected.get("plot") or {}, (_last_ok(result, "plot") or {}).get("spec") or {}
    if (spec.get("labels") != want_plot.get("labels") or len(spec.get("values") or []) != len(want_plot.get("values") or [])
            or not all(_close(a, b) for a, b in zip(spec.get("values") or [], want_plot.get("values") or []))
            or (want_plot.get("average") is not None and not _close(spec.get("average"), want_plot["average"]))):
        failures.append("plot_spec")

    answer = result.final.answer if result.final else ""
    numbers = [float(x) for x in _NUMBERS.findall(answer)]
    if average is None or not any(_close(x, average) for x in numbers):
        failures.append("answer_lacks_average")
    if lowest is None or not any(_close(x, lowest) for x in numbers):
        failures.append("answer_lacks_lowest")
    claims = stated_claims(answer)
    if any(_HOLDS[op](a, b) != claimed for a, op, b, claimed in claims):
        failures.append("false_claim")
    if claims and rule and any(not _right_pair(a, b, average, batches, rule) for a, _, b, _ in claims):
        failures.append("claim_compares_wrong_values")
    eligible = (expected.get("final") or {}).get("release_eligible")
    if eligible is not None and bool(_NEGATIVE.search(answer)) == bool(eligible):
        failures.append("wrong_verdict")
    return failures


def _right_pair(a: float, b: float, average: Any, batches: dict[str, Any], rule: dict[str, Any]) -> bool:
    """Average vs average_gte, or a group value vs every_batch_gte, written either way round."""
    def pair(value: float, threshold: float) -> bool:
        return ((_close(value, average) and _close(threshold, rule.get("average_gte")))
                or (any(_close(value, v) for v in batches.values()) and _close(threshold, rule.get("every_batch_gte"))))
    return pair(a, b) or pair(b, a)


def verdict_case(expected: dict[str, Any]) -> str | None:
    """Which of the four verdict cases a pack's ground truth is (None if it has no release rule)."""
    knowledge = expected.get("knowledge") or {}
    batches, rule = knowledge.get("batches") or {}, knowledge.get("release_rule") or {}
    if not batches or not {"average_gte", "every_batch_gte"} <= set(rule):
        return None
    average = (expected.get("calculator") or {}).get("value", sum(batches.values()) / len(batches))
    avg_ok, floor_ok = average >= rule["average_gte"], min(batches.values()) >= rule["every_batch_gte"]
    return {(True, True): "both", (False, True): "avg_fails", (True, False): "floor_fails",
            (False, False): "both_fail"}[(avg_ok, floor_ok)]
