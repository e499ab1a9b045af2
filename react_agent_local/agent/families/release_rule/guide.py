"""How a Final over a release-rule record is written and checked, and the family's first
ground-truth format.

``answer_guide`` is the family's default guide (``contracts.AnswerGuide``), computed from the latest
Observations: the answer form, the two checks of the release rule, the verdict phrases, hints, and
the expectations on the calculator's average and the chart (with the re-ask grammar that fixes the
arithmetic). A pack's own ``task.json`` fields replace any of them (``TaskSpec.family``). The
knowledge tool reads the record and shows it to the model with ``record.py``; only what a Final over
it must say lives here.

``expected_checks`` translates an ``expected.json`` in the first round's format (the record's
values, the calculator value, the plot, the Final's numbers and verdict) into the generic grading
checks of ``metrics.py``.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from agent.contracts.decision import Observation
from agent.tools.records import lowest_group
from agent.util.number_text import short_text

_FORMS = {
    "en": ("The average is {number} and the lowest value is {number}. "
           "Check: average {number} >= {number} is {True|False}; lowest {number} >= {number} is {True|False}. "
           "So it {meets|does not meet} the release rule."),
    "zh": ("平均值是 {number}，最低值是 {number}。"
           "检查：平均值 {number} >= {number} is {True|False}；最低值 {number} >= {number} is {True|False}。"
           "因此{满足|不满足}发布规则。"),
}
# The first phrase of each list is the form's; the others are how people say the same in prose.
_VERDICTS = {
    "en": {"positive": ["meets the release rule", "release rule is met", "can be released", "is eligible"],
           "negative": ["does not meet the release rule", "release rule is not met", "not be released",
                        "is not eligible", "not meet the release rule"]},
    "zh": {"positive": ["满足发布规则", "可以发布"], "negative": ["不满足发布规则", "不能发布", "未满足发布规则"]},
}


def answer_guide(latest_ok: Mapping[str, Observation], language: str) -> dict[str, Any] | None:
    """How a Final over the release-rule record the latest knowledge search read is written and
    checked (an ``AnswerGuide``), or None when that search read no such record.

    The release rule has two checks: the average (the calculator's value) against ``average_gte``
    and the lowest value against ``every_batch_gte``; the rule is met only when both hold.
    """
    search = latest_ok.get("knowledge_search")
    data = ((search.result or {}) if search is not None else {}).get("data") or {}
    batches, rule = data.get("batches") or {}, data.get("release_rule") or {}
    if not batches or not {"average_gte", "every_batch_gte"} <= set(rule):
        return None
    language = language if language in _FORMS else "en"
    _, low = lowest_group(batches)
    return {
        "answer_form": _FORMS[language],
        "checks": [
            {"label": "average", "left": "calculator.value", "op": ">=", "right": rule["average_gte"],
             "right_label": "average_gte"},
            {"label": "lowest", "left": low, "op": ">=", "right": rule["every_batch_gte"],
             "right_label": "every_batch_gte"},
        ],
        "verdict": {**_VERDICTS[language], "requires": "all"},
        "hints": ["The average is the calculator's value; the lowest value is the smallest of all group values.",
                  "Compare the average with average_gte and the lowest value with every_batch_gte."],
        # The rule is about the mean of the values: a calculator result that is not it (a sum
        # without the division, a value left out) makes every later claim wrong.
        "expect": [{"label": f"the average of the {len(batches)} values", "left": "calculator.value", "op": "==",
                    "right": "mean(knowledge_search.data.batches)",
                    "hint": f"compute the average: the sum of all {len(batches)} values, in parentheses, "
                            f"divided by {len(batches)}",
                    # Asked again, the expression's grammar is the sum of the observed values in the
                    # order observed, in parentheses, divided by their count. The first attempt was the
                    # model's own; the 0.5B, left to pick values again, repeated its wrong pick three
                    # times in four runs (loop_detected), so the re-ask fixes the arithmetic.
                    "arguments": {"expression": {"type": "string", "pattern": _mean_pattern(batches)}}},
                   {"label": f"one bar for each of the {len(batches)} groups", "left": "count(plot.spec.values)",
                    "op": "==", "right": "count(knowledge_search.data.batches)",
                    "hint": "plot every group once, with its label and value as observed",
                    "arguments": _observed_bars(batches)},
                   {"label": "the observed group names as labels, in order",
                    "left": "matches(plot.spec.labels, knowledge_search.data.batches)", "op": "==",
                    "right": "count(knowledge_search.data.batches)",
                    "hint": "label the bars with the group names exactly as observed, in the same order",
                    "arguments": _observed_bars(batches)},
                   {"label": "the sum of the observed values", "left": "sum(plot.spec.values)", "op": "==",
                    "right": "sum(knowledge_search.data.batches)",
                    "hint": "copy every group's value exactly as observed",
                    "arguments": _observed_bars(batches)},
                   {"label": "the calculator's average", "left": "plot.spec.average", "op": "==",
                    "right": "calculator.value", "hint": "put the calculator's value into average",
                    # asked again, average is the calculator's value (the rest of the chart is the model's)
                    "arguments": {"average": {"const": "calculator.value"}}}],
    }


def _mean_pattern(batches: dict[str, int | float]) -> str:
    """The average's expression: the observed values in the order observed, summed in parentheses
    and divided by their count, in the one layout models write (``(72 + 78) / 2``). Asked again, the
    model has nothing left to choose, so every token is forced and evaluated at prompt speed instead
    of sampled one at a time: optional spaces would leave each one a choice. Each value is written as
    the rendered record shows it (``record.render``), which is what the model copies."""
    values = r" \+ ".join(re.escape(short_text(v)) for v in batches.values())
    return rf"^\({values}\) / {len(batches)}$"


def _observed_bars(batches: dict[str, int | float]) -> dict[str, Any]:
    """A chart asked again: its labels and values are the observed groups, in the order observed
    (the title and the rest are still the model's)."""
    return {"labels": {"const": list(batches)}, "values": {"const": list(batches.values())}}


def expected_checks(expected: dict[str, Any]) -> list[dict[str, Any]]:
    """Grading checks for an ``expected.json`` written in the first round's record format.

    That format names the record's values (``knowledge.batches``, ``release_rule``), the calculator
    value, the plot and the Final's numbers and verdict; here it becomes the generic check types of
    ``metrics.py``. ``packs.TaskPack.load_expected`` asks for it for an ``expected.json`` without
    ``checks``: only this family wrote one before checks existed.
    """
    checks: list[dict[str, Any]] = [{"type": "final_accepted"}]
    knowledge = expected.get("knowledge") or {}
    order = expected.get("causal_order") or ["knowledge_search", "calculator", "plot"]
    per_tool: dict[str, dict[str, Any]] = {}
    if knowledge:
        per_tool["knowledge_search"] = {"path": "data", "includes": {
            "batches": knowledge.get("batches") or {}, "release_rule": knowledge.get("release_rule") or {}}}
    if "value" in (expected.get("calculator") or {}):
        per_tool["calculator"] = {"path": "value", "equals": expected["calculator"]["value"]}
    plot = expected.get("plot") or {}
    if plot:
        want = {"labels": plot.get("labels"), "values": plot.get("values")}
        if plot.get("average") is not None:
            want["average"] = plot["average"]
        per_tool["plot"] = {"path": "spec", "includes": want}
    for tool in order:
        checks.append({"type": "tool_result", "name": f"{tool}_correct", "tool": tool,
                       **per_tool.get(tool, {"path": "", "includes": {"__never__": True}})})
    checks.append({"type": "causal_order", "tools": list(order)})
    final = expected.get("final") or {}
    checks.append({"type": "answer_numbers", "name": "answer_mentions_required_values",
                   "numbers": list(final.get("must_include", []))})
    if "release_eligible" in final:
        language_phrases = {"positive": [p for v in _VERDICTS.values() for p in v["positive"]] + list(_POSITIVE_WORDS),
                            "negative": [p for v in _VERDICTS.values() for p in v["negative"]] + list(_NEGATIVE_WORDS)}
        checks.append({"type": "answer_verdict", "name": "answer_verdict_correct",
                       "expected": "positive" if final["release_eligible"] else "negative", **language_phrases})
        batches, rule = knowledge.get("batches") or {}, knowledge.get("release_rule") or {}
        average = (expected.get("calculator") or {}).get("value")
        if batches and {"average_gte", "every_batch_gte"} <= set(rule) and average is not None:
            checks.append({"type": "answer_comparisons", "name": "answer_checks_right",
                           "comparisons": [[average, ">=", rule["average_gte"]],
                                           [min(batches.values()), ">=", rule["every_batch_gte"]]]})
    return checks


# Verdict wording people use for a release decision (regular expressions, negative first: "not
# eligible" contains "eligible").
_NEGATIVE_WORDS = (
    r"(?:\bnot|n't|\bnever|\bcannot)\s+(?:\w+\s+){0,3}?(?:meet|met|eligible|satisf\w*|pass\w*|qualif\w*|release\w*|approv\w*)\b",
    r"\bineligible\b", r"\bfail(?:s|ed)?\s+to\s+(?:meet|satisfy|pass)\b",
    "不满足|未满足|不符合|不能发布|不可发布|不予发布|不发布|未达到|不达标",
)
_POSITIVE_WORDS = (
    r"\b(?:meets?|met|eligible|pass(?:es|ed)?|satisf(?:y|ies|ied)|qualif(?:y|ies|ied)|can be released|approved?)\b",
    "满足|符合|可以发布|可发布|达标",
)
