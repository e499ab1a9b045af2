"""Budgets, sampling and usage: every limit of one run, how its model samples, what it has counted.

``Usage`` counts any model call that reports its tokens and time (``CallCounts``); the seam's
``Candidate`` is one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator


#: the temperature (at least) of a call whose likeliest answer already failed (``Sampling.wider``)
EXPLORE_TEMPERATURE = 1.0


class CallCounts(Protocol):
    """What ``Usage.add_call`` reads of one model call."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int
    forced_tokens: int
    drafted_tokens: int
    latency_ms: float
    protocol_repairs: int


@dataclass
class Usage:
    """Everything a run has counted so far, in one place (budgets check it, metrics read it)."""

    steps: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    forced_tokens: int = 0  # output tokens the grammar forced (appended at prompt speed, not sampled)
    drafted_tokens: int = 0  # sampled tokens a draft proposed (verified in a batch)
    model_ms: float = 0.0
    tool_ms: float = 0.0
    action_attempts: int = 0  # actions proposed (valid or rejected)
    valid_actions: int = 0
    recoverable: int = 0  # model faults and retryable tool failures the run could recover from
    recovered: int = 0
    pending_recoverable: int = 0  # faults not yet followed by progress

    def add_call(self, call: CallCounts) -> None:
        """Count one model call: its tokens and time, and the protocol faults its policy already
        repaired (recoverable and recovered at once)."""
        self.model_calls += 1
        self.input_tokens += call.input_tokens
        self.output_tokens += call.output_tokens
        self.cached_tokens += call.cached_tokens
        self.forced_tokens += call.forced_tokens
        self.drafted_tokens += call.drafted_tokens
        self.model_ms += call.latency_ms
        self.recoverable += call.protocol_repairs
        self.recovered += call.protocol_repairs

    def fault(self, *, until_progress: bool = False) -> None:
        """One model fault or retryable tool failure the run may recover from. ``until_progress``:
        it counts as recovered only when a valid action or an accepted Final follows (``progress``)."""
        self.recoverable += 1
        if until_progress:
            self.pending_recoverable += 1

    def recover(self, count: int = 1) -> None:
        """``count`` faults of this step were recovered within it (a repaired Decision, a retried tool)."""
        self.recovered += count

    def progress(self) -> None:
        """A valid action or an accepted Final: the faults pending before it are recovered."""
        self.recovered += self.pending_recoverable
        self.pending_recoverable = 0


#: tokens a model call that writes source code may use at most (a HumanEval solution with its
#: docstring copied back runs to 300-600 tokens)
CODE_MAX_NEW_TOKENS = 1024


class Budgets(BaseModel):
    """Every limit of one run; all enforced by the runtime, all part of the request.

    The ``check_*`` methods return the stop_reason a limit calls for, or None (pydantic-ai's
    ``UsageLimits.check_before_request`` is the model); cancellation is the runtime's own check.
    """

    model_config = ConfigDict(extra="forbid")

    max_steps: int = Field(default=12, ge=1, le=50, description="Outer decisions (Final and rejections count).")
    max_tool_calls: int = Field(default=10, ge=1, le=50, description="Dispatched tool attempts, retries included.")
    max_seconds: float = Field(default=300.0, gt=0, le=3600, description="Wall-clock deadline of the whole run.")
    max_input_tokens: int = Field(default=32_000, ge=1, le=1_000_000, description="Cumulative prompt tokens.")
    max_output_tokens: int = Field(default=4_000, ge=1, le=100_000, description="Cumulative generated tokens.")
    max_retries: int = Field(default=2, ge=0, le=3, description="Extra Decision repairs / tool attempts per step.")
    repeated_action_limit: int = Field(default=3, ge=2, le=8, description="Same action or invalid arguments N times stops.")
    no_progress_limit: int = Field(default=3, ge=2, le=8, description="Same successful result N times stops.")
    decision_max_new_tokens: int = Field(default=256, ge=16, le=2048, description="Tokens per model call at most.")

    @classmethod
    def layered(cls, *layers: "Budgets | None") -> "Budgets":
        """The budgets of a run: each layer's explicitly set fields over the layers before it and the
        defaults (a pack's own ``TaskSpec.budgets``, then the caller's: a flag or a request field
        the caller sets wins, one it leaves out keeps what the task needs)."""
        fields: dict[str, Any] = {}
        for layer in layers:
            if layer is not None:
                fields.update({name: getattr(layer, name) for name in layer.model_fields_set})
        return cls(**fields)

    def check_time_and_tokens(self, usage: Usage, *, now: float, deadline: float) -> str | None:
        if now >= deadline:
            return "timeout"
        if usage.input_tokens >= self.max_input_tokens or usage.output_tokens >= self.max_output_tokens:
            return "token_budget"
        return None

    def check_before_step(self, usage: Usage, *, now: float, deadline: float, needs_tool: bool) -> str | None:
        """Before a step: time, tokens, steps, and tool calls when the step is known to need a tool."""
        reason = self.check_time_and_tokens(usage, now=now, deadline=deadline)
        if reason:
            return reason
        if usage.steps >= self.max_steps:
            return "max_steps"
        if needs_tool and usage.tool_calls >= self.max_tool_calls:
            return "tool_budget"
        return None

    def check_before_dispatch(self, usage: Usage, *, now: float, deadline: float) -> str | None:
        """Before each tool attempt (retries included)."""
        reason = self.check_time_and_tokens(usage, now=now, deadline=deadline)
        if reason:
            return reason
        return "tool_budget" if usage.tool_calls >= self.max_tool_calls else None

    def new_tokens(self, usage: Usage, code: bool = False) -> int:
        """max_new_tokens of the next model call: tightened by the output tokens left. A call that
        writes source code (a whole file or function) may use ``CODE_MAX_NEW_TOKENS``."""
        limit = max(self.decision_max_new_tokens, CODE_MAX_NEW_TOKENS) if code else self.decision_max_new_tokens
        return max(1, min(limit, self.max_output_tokens - usage.output_tokens))

    def remaining(self, usage: Usage, *, now: float, deadline: float) -> dict[str, Any]:
        return {
            "steps": self.max_steps - usage.steps,
            "tool_calls": self.max_tool_calls - usage.tool_calls,
            "seconds": max(0, round(deadline - now)),
            "input_tokens": self.max_input_tokens - usage.input_tokens,
            "output_tokens": self.max_output_tokens - usage.output_tokens,
        }


class Sampling(BaseModel):
    """How each Decision is sampled (repairs are always greedy)."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="Sampling temperature (0 = greedy).")
    # Qwen2.5-Instruct's published generation_config.json samples with temperature 0.7, top_p 0.8,
    # top_k 20; the same nucleus is used here whenever temperature > 0 (it has no effect when greedy).
    top_p: float = Field(default=0.8, gt=0.0, le=1.0, description="Nucleus sampling mass, when sampling.")
    top_k: int = Field(default=20, ge=1, le=1000, description="Candidates kept before top_p, when sampling.")
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1, description="Sampling seed, when sampling.")

    def wider(self) -> "Sampling":
        """The draw of a call whose likeliest answer already failed: at least ``EXPLORE_TEMPERATURE``,
        top-p 0.95 and top-k 50 (a failed answer is kept token for token by top-p 0.8 alone)."""
        return self.model_copy(update={"temperature": max(self.temperature, EXPLORE_TEMPERATURE),
                                       "top_p": max(self.top_p, 0.95), "top_k": max(self.top_k, 50)})

    def for_call(self, number: int) -> "Sampling":
        """The sampling of a run's model call ``number`` (0 first): the run's seed moved on by the
        call's number, so each call draws afresh and a run stays reproducible from its seed. One seed
        for every call drew the same tokens for the same prompt: a re-asked step answered exactly
        as it had, at any temperature, until the loop guard stopped the run."""
        if self.seed is None or number == 0:
            return self
        return self.model_copy(update={"seed": (self.seed + 7919 * number) % (2**31 - 1)})


SAMPLING_FIELDS = tuple(Sampling.model_fields)


#: The page's recommended preset.
RECOMMENDED_BUDGETS = Budgets()
