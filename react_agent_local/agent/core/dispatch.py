"""One valid action run, with its retries: the same action replayed on a retryable ``ToolError`` up
to ``max_retries`` times, each attempt traced (``tool.started``, ``tool.retry``, ``tool.failed``) and
counted, run in a thread or the worker process (``execution.py``) for min(tool timeout, time left),
or taken from the step's batch where it ran already (``tool_batch.py``).

A cancel, a broken tool runtime or a spent budget ends the run (``outcome.Stop``); a deadline that
passes during an attempt is a failure the run records before it ends (``Attempted.timed_out``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from agent.contracts.decision import ToolErrorInfo
from agent.contracts.trace import Trace
from agent.core.execution import Cancelled, run_attempt
from agent.core.outcome import Limits, Stop
from agent.core.tool_batch import Batch, Call
from agent.tools import ToolContext, ToolError, ToolRegistry, ToolTransportError


@dataclass(frozen=True)
class Attempted:
    result: dict[str, Any] | None
    failure: ToolErrorInfo | None = None
    #: the run's deadline passed during the attempt: the run ends once the failure is recorded
    timed_out: bool = False


@dataclass
class Dispatch:
    tools: ToolRegistry
    ctx: ToolContext
    limits: Limits
    trace: Trace

    def run(self, call: Call, arguments: Any, normalized: dict[str, Any], batch: Batch, step: int) -> Attempted:
        tool, where = call.tool, call.where
        retries, usage, max_retries = 0, self.limits.usage, self.limits.budgets.max_retries
        for attempt in range(1, max_retries + 2):
            self.limits.before_dispatch()
            usage.tool_calls += 1
            self.trace.emit("tool.started", "tool", step, attempt, tool=tool, arguments=normalized, **where)
            try:
                result = self._attempt(call, arguments, batch, step)
            except ToolError as error:
                info = ToolErrorInfo(code=error.code, message=error.message[:500], retryable=error.retryable)
                timed_out = error.code == "deadline_exceeded"
                can_retry = error.retryable and attempt <= max_retries and not timed_out
                self.trace.emit("tool.retry" if can_retry else "tool.failed", "tool", step, attempt,
                                tool=tool, error=info.model_dump(), **where)
                if not can_retry:
                    return Attempted(None, info, timed_out=timed_out)
                usage.fault()
                retries += 1
                continue
            usage.recover(retries)
            return Attempted(result)
        raise AssertionError("unreachable: the last attempt never retries")

    def _attempt(self, call: Call, arguments: Any, batch: Batch, step: int) -> dict[str, Any]:
        """One attempt, or the one its batch ran already; its time counts however it ends."""
        started = time.monotonic()
        try:
            ran = batch.take(call)
            if ran is not None:
                return ran.result()
            return run_attempt(self.tools.get(call.tool), arguments, self.ctx, deadline=self.limits.deadline,
                               cancel=self.limits.cancel)
        except Cancelled:
            raise Stop("cancelled") from None
        except ToolTransportError as exc:
            # Not a result the model can recover from: the tool's runtime itself is broken.
            info = ToolErrorInfo(code="tool_runtime", message=exc.message[:300])
            self.trace.emit("tool.failed", "tool", step, tool=call.tool, error=info.model_dump(), **call.where)
            raise Stop("runtime_error", info) from None
        finally:
            self.limits.usage.tool_ms += (time.monotonic() - started) * 1000
