"""The tool calls of one served reply, run together when every one of them is read-only.

A served model that was asked for parallel calls (a free step, ``backends/served.parallel_calls``)
may answer with several: the call its Decision holds and ``Candidate.further_calls``, in the
reply's order. ``plan`` works out what this step does with them::

    every call read-only     each is validated against its tool's contract; the valid ones, as
    (``Tool.read_only``)     many as the tool-call budget allows, start at once, one thread each
                             (``Batch.run``: ``execution.run_attempt`` with the tool's timeout, the
                             run's cancel and deadline), and the batch waits for all of them
    any call not read-only   only the first runs, as it would alone

Then the runtime records the calls one at a time, in the reply's order, on the path of a single
call (validate, guards, dispatch with retry, Observation): a rejected call becomes its rejected
Observation, and a call the batch ran takes its attempt's outcome from it (``Batch.take``) instead
of running again. So retries, timeouts, cancel, the budgets and the loop guards are those of any
call, and every call of the batch counts in the guards. A call that does not run -- beside one that
is not read-only, over the tool-call budget, or with arguments that are not JSON even repaired --
leaves no Observation; a feedback line (``Batch.feedback``) says which and why. A tool that runs
in the worker process (``tools/isolation.py``: knowledge_search, calculator) takes its turn there,
since the one worker serves one attempt at a time; threads (files, MCP, skills) run side by side.

Events: ``tool.batch`` (size, read_only, the calls with their ids, the ones that ran together, the
ones that did not run and why, and ``duration_ms``, how long the calls took together) comes first;
then each call's ``tool.started`` / ``tool.observation`` (or ``tool.rejected``), carrying its
``call_id`` and ``batch_index``, in the reply's order -- one call after another, as every reader of
the trace expects (the terminal lines, the telemetry spans). Their ``elapsed_ms`` is when each was
recorded: the calls ran in the ``duration_ms`` before ``tool.batch``. A reply with one call is
traced as it always was.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from agent.contracts.decision import ActionDecision
from agent.core.execution import run_attempt
from agent.models.model_policy import Candidate, FurtherCall
from agent.tools import ArgumentError, Tool, ToolContext, ToolRegistry

#: the longest feedback line (as the runtime's others)
MAX_FEEDBACK_CHARS = 600


@dataclass(frozen=True)
class Call:
    """One tool call of the reply, at ``index`` in it (0: the call its Decision holds)."""

    index: int
    tool: str
    #: the call as a Decision; None where it names no tool (a name no Decision may have)
    decision: ActionDecision | None
    call_id: str = ""
    #: why its arguments cannot be used (not JSON even repaired); None: they can
    fault: str | None = None
    #: the reply had other calls: its events say which call of it this is
    in_batch: bool = False

    @property
    def where(self) -> dict[str, Any]:
        """What this call's events carry besides a single call's."""
        return {"call_id": self.call_id, "batch_index": self.index} if self.in_batch else {}


@dataclass(frozen=True)
class NotRun:
    """A call of the reply that does not run this step."""

    index: int
    tool: str
    call_id: str
    code: str  # not_read_only | tool_budget | unreadable_arguments
    message: str


@dataclass
class Batch:
    """What one reply's calls come to this step; ``calls`` are recorded in this order."""

    calls: list[Call]
    #: every call of the reply, in its order
    proposed: list[Call]
    read_only: bool = False
    #: the tools of the reply's calls that are not read-only (then only its first call runs)
    blockers: tuple[str, ...] = ()
    #: the calls that start together, with their tools and validated arguments
    runnable: list[tuple[Call, Tool, BaseModel]] = field(default_factory=list)
    not_run: list[NotRun] = field(default_factory=list)
    _ran: dict[int, Future] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.proposed)

    def run(self, ctx: ToolContext, *, deadline: float, cancel: threading.Event,
            emit: Callable[..., Any]) -> float:
        """Run the runnable calls at once and wait for all; trace ``tool.batch``. Returns how long
        they took together, in ms (0 for a reply of one call)."""
        if self.size == 1:
            return 0.0
        started = time.monotonic()
        if self.runnable:
            with ThreadPoolExecutor(max_workers=len(self.runnable), thread_name_prefix="tool-batch") as pool:
                self._ran = {call.index: pool.submit(run_attempt, tool, arguments, ctx, deadline=deadline,
                                                     cancel=cancel)
                             for call, tool, arguments in self.runnable}
            # leaving the pool waited for every attempt: each ends by its own timeout, the deadline or cancel
        duration_ms = (time.monotonic() - started) * 1000 if self.runnable else 0.0
        emit("tool.batch", size=self.size, read_only=self.read_only,
             calls=[{"index": c.index, "tool": c.tool, "call_id": c.call_id} for c in self.proposed],
             ran_together=[call.index for call, _, _ in self.runnable],
             not_run=[{"index": n.index, "tool": n.tool, "call_id": n.call_id, "code": n.code,
                       "message": n.message} for n in self.not_run],
             duration_ms=round(duration_ms, 3) if self.runnable else None)
        return duration_ms

    def take(self, call: Call) -> Future | None:
        """The attempt this batch ran for ``call`` (its first attempt only), or None: run it."""
        return self._ran.pop(call.index, None)

    def feedback(self) -> list[str]:
        """The line that tells the model which of its calls did not run, and why (none: nothing)."""
        if not self.not_run:
            return []
        if self.blockers:
            line = (f"Only the first of the {self.size} tool calls in your reply ran: calls run together only "
                    f"when every one is read-only, and {', '.join(self.blockers)} "
                    f"{'is' if len(self.blockers) == 1 else 'are'} not. Call the others again, one per reply.")
        else:
            line = (f"{len(self.not_run)} of the {self.size} tool calls in your reply did not run: "
                    + "; ".join(f"{n.tool} (call {n.index + 1}): {n.message}" for n in self.not_run) + ".")
        return [line[:MAX_FEEDBACK_CHARS]]


def plan(decision: ActionDecision, reply: Candidate | None, tools: ToolRegistry, *,
         check: Callable[[ActionDecision], BaseModel], budget_left: int) -> Batch:
    """What this step does with the reply's calls (see the module docstring). ``check`` validates a
    call's arguments (the runtime's argument contract; ArgumentError when they break it);
    ``budget_left`` is how many tool calls the run may still dispatch."""
    further = reply.further_calls if reply is not None else ()
    first = Call(0, decision.tool, decision, reply.call_id if reply is not None else "", in_batch=bool(further))
    if not further:
        return Batch([first], [first])
    calls = [first, *(_call(i, c) for i, c in enumerate(further, start=1))]
    blockers = tuple(sorted({c.tool for c in calls if not _read_only(c, tools)}))
    if blockers:
        return Batch([first], calls, blockers=blockers, not_run=[
            _not_run(c, "not_read_only", f"not run beside a call that is not read-only ({', '.join(blockers)})")
            for c in calls[1:]])
    batch = Batch([], calls, read_only=True)
    valid = 0
    for call in calls:
        if call.fault is not None:
            batch.not_run.append(_not_run(call, "unreadable_arguments", call.fault))
            continue
        try:
            arguments = check(call.decision)
        except ArgumentError:
            batch.calls.append(call)  # recorded as its rejected Observation
            continue
        if valid >= max(budget_left, 1):
            batch.not_run.append(_not_run(call, "tool_budget", "over the run's tool-call budget"))
            continue
        batch.calls.append(call)
        if valid < budget_left:  # with no budget left, the first valid call ends the run as it would alone
            batch.runnable.append((call, tools.get(call.tool), arguments))
        valid += 1
    return batch


def _call(index: int, further: FurtherCall) -> Call:
    try:
        decision: ActionDecision | None = ActionDecision(type="action", tool=further.tool, arguments=further.arguments)
    except ValidationError:
        decision = None
    return Call(index, further.tool[:64] or "?", decision, further.call_id, further.fault, in_batch=True)


def _read_only(call: Call, tools: ToolRegistry) -> bool:
    return call.decision is not None and call.tool in tools and tools.get(call.tool).read_only


def _not_run(call: Call, code: str, message: str) -> NotRun:
    return NotRun(call.index, call.tool, call.call_id, code, message)
