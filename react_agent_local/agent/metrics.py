"""Per-run metrics (R-MET; seed 000 §19), computed after the run from counters, usage and the
pack's ``data/expected.json``. This is the only module that reads ground truth, and only after the
run has ended: nothing here reaches a prompt or a tool.

A zero denominator gives ``None`` (shown as N/A), never 0.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .contracts import FinalDecision, Metrics, Observation
from .packs import PackError

if TYPE_CHECKING:
    from .packs import TaskPack

DEFAULT_PROTECTED = ("cancelled", "max_steps", "tool_budget", "token_budget", "timeout", "loop_detected",
                     "invalid_decision")

# Verdict words. Negative forms are checked first: "not eligible" contains "eligible".
_NEGATIVE = re.compile(
    r"(?:\bnot|n't|\bnever|\bcannot)\s+(?:\w+\s+){0,3}?(?:meet|met|eligible|satisf\w*|pass\w*|qualif\w*|release\w*|approv\w*)\b"
    r"|\bineligible\b|\bfail(?:s|ed)?\s+to\s+(?:meet|satisfy|pass)\b"
    r"|不满足|未满足|不符合|不能发布|不可发布|不予发布|不发布|未达到|不达标",
    re.IGNORECASE,
)
_POSITIVE = re.compile(
    r"\b(?:meets?|met|eligible|pass(?:es|ed)?|satisf(?:y|ies|ied)|qualif(?:y|ies|ied)|can be released|approved?)\b"
    r"|满足|符合|可以发布|可发布|达标",
    re.IGNORECASE,
)


@dataclass
class RunRecord:
    """What the runtime counted during the run (filled by ``runtime.Run``)."""

    observations: list[Observation] = field(default_factory=list)
    successes: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # (obs id, tool, result)
    action_attempts: int = 0
    valid_actions: int = 0
    recoverable: int = 0
    recovered: int = 0
    pending_recoverable: int = 0
    guard_fired: bool = False
    final_step: int | None = None
    usage: Any = None
    total_ms: float = 0.0


def _close(a: Any, b: Any, tol: float = 1e-6) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=tol, abs_tol=tol)
    except (TypeError, ValueError):
        return False


def _same_numbers(xs: Any, ys: Any) -> bool:
    return isinstance(xs, list) and isinstance(ys, list) and len(xs) == len(ys) and all(
        _close(x, y) for x, y in zip(xs, ys))


def is_accurate(tool: str, result: dict[str, Any], expected: dict[str, Any]) -> bool:
    """Is a successful result semantically right against the ground truth?"""
    if tool == "knowledge_search":
        want = expected.get("knowledge") or {}
        data = result.get("data") or {}
        got_batches, want_batches = data.get("batches") or {}, want.get("batches") or {}
        got_rule, want_rule = data.get("release_rule") or {}, want.get("release_rule") or {}
        return (set(got_batches) == set(want_batches) and all(_close(got_batches[k], v) for k, v in want_batches.items())
                and set(want_rule) <= set(got_rule) and all(_close(got_rule[k], v) for k, v in want_rule.items()))
    if tool == "calculator":
        return "value" in (expected.get("calculator") or {}) and _close(result.get("value"), expected["calculator"]["value"])
    if tool == "plot":
        want = expected.get("plot") or {}
        spec = result.get("spec") or {}
        average_ok = want.get("average") is None or _close(spec.get("average"), want["average"])
        return spec.get("labels") == want.get("labels") and _same_numbers(spec.get("values"), want.get("values")) and average_ok
    return False


def answer_verdict(answer: str) -> bool | None:
    """True (eligible), False (not eligible) or None (no verdict stated)."""
    if _NEGATIVE.search(answer):
        return False
    if _POSITIVE.search(answer):
        return True
    return None


def _mentions(answer: str, token: str) -> bool:
    # "79" must appear as a number, not inside "179" or "7.9".
    return re.search(rf"(?<![\d.]){re.escape(str(token))}(?![\d]|\.\d)", answer) is not None


def task_success_checks(record: RunRecord, expected: dict[str, Any], final: FinalDecision | None) -> dict[str, bool]:
    order = expected.get("causal_order") or ["knowledge_search", "calculator", "plot"]
    first_accurate: dict[str, int] = {}
    for position, (_, tool, result) in enumerate(record.successes):
        if tool not in first_accurate and is_accurate(tool, result, expected):
            first_accurate[tool] = position
    checks = {"final_accepted": final is not None}
    for tool in order:
        checks[f"{tool}_correct"] = tool in first_accurate
    positions = [first_accurate.get(t) for t in order]
    checks["causal_order"] = all(p is not None for p in positions) and positions == sorted(positions)
    answer = final.answer if final else ""
    want_final = expected.get("final") or {}
    checks["answer_mentions_required_values"] = bool(final) and all(
        _mentions(answer, t) for t in want_final.get("must_include", []))
    if "release_eligible" in want_final:
        checks["answer_verdict_correct"] = bool(final) and answer_verdict(answer) == bool(want_final["release_eligible"])
    return checks


def compute_metrics(pack: "TaskPack", record: RunRecord, stop_reason: str, final: FinalDecision | None) -> Metrics:
    usage = record.usage
    try:
        expected = pack.load_expected()
    except PackError:
        expected = None
    accurate_actions = 0
    checks: dict[str, bool] = {}
    task_success: bool | None = None
    protected = DEFAULT_PROTECTED
    if expected is not None:
        accurate_actions = sum(1 for _, tool, result in record.successes if is_accurate(tool, result, expected))
        checks = task_success_checks(record, expected, final)
        task_success = all(checks.values()) if stop_reason == "completed" else False
        protected = tuple(expected.get("protected_stop_reasons") or DEFAULT_PROTECTED)

    attempts = record.action_attempts
    rate = (lambda n: round(n / attempts, 4)) if attempts else (lambda n: None)
    if stop_reason == "completed":
        termination = final is not None
    else:
        termination = stop_reason in protected
    return Metrics(
        task_success=task_success,
        valid_action_rate=rate(record.valid_actions),
        tool_argument_accuracy=rate(accurate_actions) if expected is not None else None,
        recovery_rate=round(record.recovered / record.recoverable, 4) if record.recoverable else None,
        loop_rate=rate(1 if record.guard_fired else 0),
        termination_correctness=termination,
        steps=usage.steps,
        model_calls=usage.model_calls,
        tool_calls=usage.tool_calls,
        action_attempts=attempts,
        model_latency_ms=round(usage.model_ms, 3),
        tool_latency_ms=round(usage.tool_ms, 3),
        total_latency_ms=round(record.total_ms, 3),
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost_units=round((usage.input_tokens + 2 * usage.output_tokens) / 1000, 4),
        checks=checks,
    )
