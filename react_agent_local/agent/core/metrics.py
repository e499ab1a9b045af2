"""Per-run metrics, computed after the run from counters, usage and the
pack's ``data/expected.json``. This is the only module that reads ground truth, and only after the
run has ended: nothing here reaches a prompt or a tool.

Task Success is the conjunction of the pack's grading ``checks``, each of a generic type:
``final_accepted``; ``tool_result`` (a successful result of ``tool`` ``equals`` a value at ``path``
or ``includes`` these keys); ``causal_order`` (the first correct results of these tools came in this
order); ``answer_numbers`` (the answer states these numbers, by value whatever the format: ``8,189,137``,
``818.9137万`` and ``8 189 137`` all state 8189137, within the check's ``tolerance`` if it has one);
``answer_verdict`` (the answer's verdict, by the pack's positive/negative patterns, is the expected
one); ``answer_comparisons`` (every comparison the answer states is true, and none compares the wrong
value with a listed threshold; answers are read as the claim gate reads them, ``numbers.py``);
``workspace_tests`` (after the run, the check's ``command`` passes in the sandbox on a copy of the
final files with the pack's ``hidden`` tests laid over them, and the protected files are unchanged:
``workspace_grading.py``).

A zero denominator gives ``None`` (shown as N/A), never 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from agent.gate.claims import stated_comparisons, stated_verdict
from agent.contracts.decision import FinalDecision
from agent.contracts.result import Metrics
from agent.contracts.budgets import Usage
from agent.gate.numbers import close, read_numbers
from agent.task.packs import PackError, TaskPack
from agent.tools import ToolContext

DEFAULT_PROTECTED = ("cancelled", "max_steps", "tool_budget", "token_budget", "timeout", "loop_detected",
                     "final_unverified", "invalid_decision")


@dataclass
class RunRecord:
    """What a run leaves for grading (filled by ``runtime.Run``); its counters are in ``usage``."""

    successes: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # (obs id, tool, result)
    guard_fired: bool = False
    usage: Usage = field(default_factory=Usage)
    total_ms: float = 0.0
    context: ToolContext | None = None  # the run's tool context (its workspace, for a workspace_tests check)


def _close(a: Any, b: Any, tol: float = 1e-6) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=tol, abs_tol=tol)
    except (TypeError, ValueError):
        return False


def _matches(got: Any, want: Any, tol: float) -> bool:
    """Numbers within ``tol``; lists item by item; objects key by key (``want``'s keys, exactly)."""
    if isinstance(want, bool) or want is None or isinstance(want, str):
        return got == want
    if isinstance(want, (int, float)):
        return not isinstance(got, bool) and _close(got, want, tol)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(_matches(g, w, tol) for g, w in zip(got, want))
    if isinstance(want, dict):
        return isinstance(got, dict) and set(got) == set(want) and all(_matches(got[k], v, tol) for k, v in want.items())
    return False


def _at(value: Any, path: str) -> Any:
    for part in [p for p in path.split(".") if p]:
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


_MISSING = object()


def result_matches(check: dict[str, Any], result: dict[str, Any]) -> bool:
    """Does one successful result satisfy a ``tool_result`` check (``equals`` the value at ``path``,
    or ``includes`` these keys of the object at ``path`` with these values)?"""
    got = _at(result, check.get("path", ""))
    tol = float(check.get("tolerance", 1e-6))
    if got is _MISSING:
        return False
    if "equals" in check:
        return _matches(got, check["equals"], tol)
    want = check.get("includes") or {}
    return isinstance(got, dict) and all(k in got and _matches(got[k], v, tol) for k, v in want.items())


def states_number(answer: str, want: Any, tolerance: float | None = None) -> bool:
    """Does the answer state ``want`` (a number, or one written as text: ``"0.3122"``, ``"8,189,137"``)
    by value? A percentage matches by its fraction too (``31.22%`` states 0.3122); ``tolerance`` is
    absolute, and without it the values must agree to 1e-9."""
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        targets = [float(want)]
    else:
        written = read_numbers(str(want))
        if not written:
            return str(want) in answer
        targets = written[0].values()

    def near(a: float, b: float) -> bool:
        return abs(a - b) <= tolerance if tolerance is not None else close(a, b)

    return any(near(s, t) for number in read_numbers(answer) for s in number.values() for t in targets)


def answer_verdict(answer: str, positive: list[str], negative: list[str]) -> bool | None:
    """True (positive), False (negative) or None (no verdict stated); negative patterns first."""
    return stated_verdict(answer, positive, negative, patterns=True)


def comparisons_right(answer: str, comparisons: list[list[Any]]) -> bool:
    """Every comparison the answer states is true, and one stated against a listed threshold uses
    the listed value (``79 >= 70`` is true but wrong when the check is ``72 >= 70``)."""
    stated = stated_comparisons(answer)
    if any(c.false for c in stated):
        return False
    for left, op, right in comparisons:
        against = [read[0] for c in stated if (read := c.against(op, float(right))) is not None]
        if against and not any(side.states(float(left)) for side in against):
            return False
    return True


def _check_name(check: dict[str, Any]) -> str:
    if check.get("name"):
        return str(check["name"])
    if check.get("type") == "tool_result":
        return f"{check.get('tool')}_correct"
    return str(check.get("type"))


def _first_matches(record: RunRecord, expected: dict[str, Any]) -> dict[int, int]:
    """Index of each ``tool_result`` check -> position of the first successful result matching it."""
    found: dict[int, int] = {}
    for index, check in enumerate(expected.get("checks", [])):
        if check.get("type") != "tool_result":
            continue
        for position, (_, tool, result) in enumerate(record.successes):
            if tool == check.get("tool") and result_matches(check, result):
                found[index] = position
                break
    return found


def task_success_checks(record: RunRecord, expected: dict[str, Any], final: FinalDecision | None) -> dict[str, bool]:
    """Each grading check of ``expected["checks"]`` by name -> passed."""
    answer = final.answer if final else ""
    checks = expected.get("checks", [])
    first = _first_matches(record, expected)
    # A tool is done when every check about it has been met; its position is the last of those.
    tool_done: dict[str, int | None] = {}
    for index, check in enumerate(checks):
        if check.get("type") == "tool_result":
            tool, position = check.get("tool"), first.get(index)
            previous = tool_done.get(tool, -1)
            tool_done[tool] = None if position is None or previous is None else max(previous, position)
    out: dict[str, bool] = {}
    for index, check in enumerate(checks):
        kind, name = check.get("type"), _check_name(check)
        if kind == "final_accepted":
            out[name] = final is not None
        elif kind == "tool_result":
            out[name] = index in first
        elif kind == "causal_order":
            positions = [tool_done.get(t) for t in check.get("tools", [])]
            out[name] = all(p is not None for p in positions) and positions == sorted(positions)
        elif kind == "answer_numbers":
            tolerance = float(check["tolerance"]) if "tolerance" in check else None
            out[name] = bool(final) and all(states_number(answer, n, tolerance) for n in check.get("numbers", []))
        elif kind == "answer_verdict":
            said = answer_verdict(answer, check.get("positive", []), check.get("negative", []))
            out[name] = bool(final) and said == (check.get("expected") == "positive")
        elif kind == "answer_comparisons":
            out[name] = bool(final) and comparisons_right(answer, check.get("comparisons", []))
        elif kind == "workspace_tests":
            from agent.coding.workspace_grading import grade_workspace

            workspace = record.context.workspace if record.context is not None else None
            out[name] = workspace is not None and grade_workspace(check, workspace).passed
        else:
            raise PackError(f"unknown grading check type '{kind}'")
    return out


def _accurate(tool: str, result: dict[str, Any], expected: dict[str, Any]) -> bool:
    """An action is accurate when its result meets one of the grading checks about its tool."""
    return any(c.get("type") == "tool_result" and c.get("tool") == tool and result_matches(c, result)
               for c in expected.get("checks", []))


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
        accurate_actions = sum(1 for _, tool, result in record.successes if _accurate(tool, result, expected))
        checks = task_success_checks(record, expected, final)
        task_success = all(checks.values()) if stop_reason == "completed" else False
        protected = tuple(expected.get("protected_stop_reasons") or DEFAULT_PROTECTED)

    attempts = usage.action_attempts
    rate = (lambda n: round(n / attempts, 4)) if attempts else (lambda n: None)
    if stop_reason == "completed":
        termination = final is not None
    else:
        termination = stop_reason in protected
    return Metrics(
        task_success=task_success,
        valid_action_rate=rate(usage.valid_actions),
        tool_argument_accuracy=rate(accurate_actions) if expected is not None else None,
        recovery_rate=round(usage.recovered / usage.recoverable, 4) if usage.recoverable else None,
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
