"""What a finished run reports: its status and stop reason, metrics, the accepted Final (or the best
unverified candidate) and its Observations."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agent.contracts.decision import FinalDecision, Observation, ToolErrorInfo

RunStatus = Literal["queued", "running", "completed", "stopped", "failed", "cancelled"]
StopReason = Literal[
    "completed",
    "max_steps",
    "tool_budget",
    "token_budget",
    "timeout",
    "loop_detected",
    "final_unverified",
    "invalid_decision",
    "cancelled",
    "model_unavailable",
    "runtime_error",
]

TERMINAL_STATUS: dict[str, str] = {
    "completed": "completed",
    "max_steps": "stopped",
    "tool_budget": "stopped",
    "token_budget": "stopped",
    "timeout": "stopped",
    "loop_detected": "stopped",
    "final_unverified": "stopped",
    "invalid_decision": "failed",
    "cancelled": "cancelled",
    "model_unavailable": "failed",
    "runtime_error": "failed",
}


class Metrics(BaseModel):
    """Per-run metrics. ``None`` means the denominator was zero (shown as N/A)."""

    task_success: bool | None
    valid_action_rate: float | None
    tool_argument_accuracy: float | None
    recovery_rate: float | None
    loop_rate: float | None
    termination_correctness: bool | None
    steps: int
    model_calls: int
    tool_calls: int
    action_attempts: int
    model_latency_ms: float
    tool_latency_ms: float
    total_latency_ms: float
    input_tokens: int
    output_tokens: int
    cost_units: float
    checks: dict[str, bool] = Field(default_factory=dict, description="Which Task Success checks passed.")


class UnverifiedFinal(BaseModel):
    """The best Final a run proposed whose claims the runtime could not verify: never an accepted
    answer (``RunResult.final`` stays None), shown so the user gets the candidate and why it failed."""

    answer: str
    evidence_ids: list[str] = Field(default_factory=list)
    #: each claim that failed its check, as the refusal named it
    unverified: list[str] = Field(default_factory=list)


class RunResult(BaseModel):
    """What a finished run reports (CLI ``--json`` and the runner's terminal job view)."""

    status: RunStatus
    stop_reason: StopReason
    final: FinalDecision | None = None
    #: set only when no Final was accepted and one reached the claim check: the best of those
    unverified: UnverifiedFinal | None = None
    metrics: Metrics | None = None
    observations: list[Observation] = Field(default_factory=list)
    error: ToolErrorInfo | None = None
