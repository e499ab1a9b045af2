"""What a run starts from and ends with: a session's earlier turns (``PriorTurns``), its limits and
loop guards as the loop checks them (``Limits``, ``Guards``), the loop's stop (``Stop``), and the
result with its one ``run.finished`` event (``finish``, ``RunOutcome``)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from agent.contracts.budgets import Budgets, Usage
from agent.contracts.decision import FinalDecision, Observation, ToolErrorInfo
from agent.contracts.result import TERMINAL_STATUS, RunResult, UnverifiedFinal
from agent.contracts.trace import Trace
from agent.core.metrics import RunRecord, compute_metrics
from agent.task.packs import TaskPack
from agent.models.model_policy import Policy

#: a loaded policy, or the callable that loads it (traced as the run's model load)
PolicySource = Policy | Callable[[], Policy]


@dataclass
class RunOutcome:
    result: RunResult
    events: list[dict[str, Any]]


@dataclass(frozen=True)
class PriorTurns:
    """What the earlier turns of a session leave to this run (built by ``agent/sessions/turns.py``).

    ``observations`` keep their ids: a Final may cite them and the evidence gate and the claim check
    read them like this run's own, and this run's ids continue their numbering. ``history`` is the
    conversation so far as (user turn, model turn) pairs, shown before this run's first turn;
    ``notes`` are lines that turn shows as feedback (the new message, since a prompt with history
    states the task only in its first turn).
    """

    observations: tuple[Observation, ...] = ()
    history: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()


class Stop(Exception):
    """Ends the loop with a terminal stop_reason (the loop's control flow only, never a fault)."""

    def __init__(self, stop_reason: str, error: ToolErrorInfo | None = None):
        self.stop_reason = stop_reason
        self.error = error


@dataclass(frozen=True)
class Limits:
    """The run's budgets, its usage so far, its deadline and its cancel, checked where the loop and
    a tool dispatch need them: each check raises ``Stop`` with the limit's stop_reason."""

    budgets: Budgets
    usage: Usage
    deadline: float
    cancel: threading.Event

    def cancelled(self) -> None:
        if self.cancel.is_set():
            raise Stop("cancelled")

    def _stop(self, reason: str | None) -> None:
        if reason is not None:
            raise Stop(reason)

    def before_step(self, needs_tool: bool) -> None:
        self.cancelled()
        self._stop(self.budgets.check_before_step(self.usage, now=time.monotonic(), deadline=self.deadline,
                                                  needs_tool=needs_tool))

    def before_dispatch(self) -> None:
        self.cancelled()
        self._stop(self.budgets.check_before_dispatch(self.usage, now=time.monotonic(), deadline=self.deadline))

    def may_dispatch(self) -> bool:
        return self.budgets.check_before_dispatch(self.usage, now=time.monotonic(), deadline=self.deadline) is None

    def time_and_tokens(self) -> None:
        self.cancelled()
        self._stop(self.budgets.check_time_and_tokens(self.usage, now=time.monotonic(), deadline=self.deadline))

    def remaining(self) -> dict[str, Any]:
        return self.budgets.remaining(self.usage, now=time.monotonic(), deadline=self.deadline)


@dataclass
class Guards:
    """The loop guards: each signature counted; seen ``limit`` times, its guard fires (an event) and
    the loop stops with the guard's stop_reason."""

    trace: Trace
    record: RunRecord
    seen: Counter = field(default_factory=Counter)

    def count(self, event_type: str, limit: int, signature: tuple[str, ...], step: int, *,
              stop_reason: str = "loop_detected", **payload: Any) -> None:
        self.seen[signature] += 1
        if self.seen[signature] >= limit:
            self.record.guard_fired = True
            self.trace.emit(event_type, "run", step, **payload, count=self.seen[signature])
            raise Stop(stop_reason)


def finish(pack: TaskPack, trace: Trace, record: RunRecord, step: int, started: float, stop_reason: str,
           final: FinalDecision | None, unverified: UnverifiedFinal | None, observations: list[Observation],
           error: ToolErrorInfo | None) -> RunOutcome:
    """The run's result, its metrics (none for a run the model or the runtime failed) and its
    ``run.finished`` event; ``unverified`` is reported only where no Final was accepted."""
    status = TERMINAL_STATUS[stop_reason]
    metrics = None
    if stop_reason not in ("model_unavailable", "runtime_error"):
        record.total_ms = (time.monotonic() - started) * 1000
        metrics = compute_metrics(pack, record, stop_reason, final)
    unverified = unverified if final is None else None
    result = RunResult(status=status, stop_reason=stop_reason, final=final, metrics=metrics,
                       observations=observations, error=error, unverified=unverified)
    trace.emit("run.finished", "run", step, status=status, stop_reason=stop_reason,
               final=final.model_dump() if final else None,
               **({"unverified": unverified.model_dump()} if unverified else {}),
               metrics=metrics.model_dump() if metrics else None,
               error=error.model_dump() if error else None, trace_dropped=trace.dropped)
    return RunOutcome(result=result, events=trace.events)
