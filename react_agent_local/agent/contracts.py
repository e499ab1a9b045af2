"""Typed contracts: the single source of truth for Decisions, tool arguments, Observations and budgets.

Everything else is generated from these classes: ``schemas/decision.schema.json`` and
``schemas/tool_registry.json`` (``python -m agent schemas --write``), the HTTP bodies of the
runner, and the argument schema inlined into each prompt. A test proves the committed schema files
match this module.

The model proposes a ``Decision``; it is a closed union of two branches, each with a ``Literal``
type tag. Unknown fields are rejected (``extra="forbid"``), so a model that adds ``reasoning`` or
``thought`` produces an invalid Decision, never a silently accepted one.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

# --------------------------------------------------------------------------------------------
# Decisions (R-DEC-1)
# --------------------------------------------------------------------------------------------

TOOL_NAMES = ("knowledge_search", "calculator", "plot")
ToolName = Literal["knowledge_search", "calculator", "plot"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


class ActionDecision(_Strict):
    """Ask the runtime to run one tool with these arguments."""

    type: Literal["action"]
    tool: ToolName = Field(description="One of the registered tools.")
    arguments: dict[str, Any] = Field(description="Arguments; validated against the tool's schema.")


class FinalDecision(_Strict):
    """Claim the task is done, citing the Observations that support the answer."""

    type: Literal["final"]
    answer: str = Field(min_length=1, max_length=2000, description="The answer for the user.")
    evidence_ids: list[str] = Field(
        min_length=1, max_length=10, description="Ids of the Observations the answer relies on."
    )


Decision = Annotated[Union[ActionDecision, FinalDecision], Field(discriminator="type")]
DECISION_ADAPTER: TypeAdapter[ActionDecision | FinalDecision] = TypeAdapter(Decision)

# --------------------------------------------------------------------------------------------
# Tool arguments (R-TOOL) -- every constraint lives here so the grammar can enforce it too.
# --------------------------------------------------------------------------------------------

# The calculator's character set: digits, spaces, the four operators, parentheses, a decimal point.
CALCULATOR_PATTERN = r"^[0-9 +\-*/().]+$"


class KnowledgeSearchArgs(_Strict):
    """Search the package's own knowledge files (knowledge/*.md) and return cited chunks."""

    query: str = Field(min_length=1, max_length=500, description="What to look for.")
    top_k: int = Field(default=3, ge=1, le=4, description="How many chunks to return (1..4).")


class CalculatorArgs(_Strict):
    """Evaluate one arithmetic expression exactly: numbers, + - * /, unary signs, parentheses."""

    expression: str = Field(
        min_length=1,
        max_length=240,
        pattern=CALCULATOR_PATTERN,
        description="Arithmetic only, e.g. (70 + 80) / 2. No names, calls, ** or //.",
    )


class PlotArgs(_Strict):
    """Draw a bar chart of labelled values, optionally with an average line; returns a PNG artifact."""

    labels: list[Annotated[str, Field(min_length=1, max_length=40)]] = Field(
        min_length=1, max_length=20, description="Bar labels, 1..20."
    )
    values: list[float] = Field(
        min_length=1, max_length=20, description="One finite number per label."
    )
    title: str = Field(min_length=1, max_length=120, description="Chart title.")
    average: float | None = Field(default=None, description="Draw a horizontal average line here.")
    y_label: str = Field(default="value", min_length=1, max_length=60, description="Y axis label.")

    @field_validator("values")
    @classmethod
    def _finite(cls, values: list[float]) -> list[float]:
        for v in values:
            if v != v or v in (float("inf"), float("-inf")):
                raise ValueError("values must be finite numbers")
        return values

    @field_validator("average")
    @classmethod
    def _finite_average(cls, value: float | None) -> float | None:
        if value is not None and (value != value or value in (float("inf"), float("-inf"))):
            raise ValueError("average must be a finite number")
        return value

    @model_validator(mode="after")
    def _same_length(self) -> "PlotArgs":
        if len(self.labels) != len(self.values):
            raise ValueError(
                f"labels and values must have the same length ({len(self.labels)} != {len(self.values)})"
            )
        return self


TOOL_ARGUMENTS: dict[str, type[_Strict]] = {
    "knowledge_search": KnowledgeSearchArgs,
    "calculator": CalculatorArgs,
    "plot": PlotArgs,
}

#: Seconds one attempt of each tool may take (also written to schemas/tool_registry.json).
TOOL_TIMEOUT_SECONDS: dict[str, float] = {"knowledge_search": 5.0, "calculator": 2.0, "plot": 15.0}

# --------------------------------------------------------------------------------------------
# Observations (R-RT-4, R-RT-10, R-TOOL-4)
# --------------------------------------------------------------------------------------------


class ToolErrorInfo(BaseModel):
    """A structured tool or validation error. ``retryable`` is absent for argument rejections."""

    code: str
    message: str
    retryable: bool = False


class Observation(BaseModel):
    """What the runtime (never the model) records after a tool attempt or an argument rejection."""

    id: str = Field(pattern=r"^obs-[a-z_]+-[0-9]+$")
    tool: str
    ok: bool
    result: dict[str, Any] | None = None
    error: ToolErrorInfo | None = None
    attempted_arguments: dict[str, Any] | None = None


# --------------------------------------------------------------------------------------------
# Budgets (R-RT-1)
# --------------------------------------------------------------------------------------------


class Budgets(BaseModel):
    """Every limit of one run; all enforced by the runtime, all part of the request."""

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
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="Sampling temperature (0 = greedy).")
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1, description="Sampling seed, when sampling.")
    # Qwen2.5-Instruct's published generation_config.json samples with temperature 0.7, top_p 0.8,
    # top_k 20; the same nucleus is used here whenever temperature > 0 (it has no effect when greedy).
    top_p: float = Field(default=0.8, gt=0.0, le=1.0, description="Nucleus sampling mass, when sampling.")
    top_k: int = Field(default=20, ge=1, le=1000, description="Candidates kept before top_p, when sampling.")


#: The page's recommended preset (SPEC R-RT-1).
RECOMMENDED_BUDGETS = Budgets()

# --------------------------------------------------------------------------------------------
# Task packs and run results
# --------------------------------------------------------------------------------------------


class TaskSpec(BaseModel):
    """``task.json`` of a task pack."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_\-]{0,63}$")
    goal: str = Field(min_length=1, max_length=2000)
    required_tools: list[ToolName] = Field(min_length=1)
    mode: Literal["guided", "free"] = "guided"
    answer_form: str | None = Field(
        default=None,
        max_length=600,
        pattern=r'^[^"\\\x00-\x1f]+$',
        description="Optional form of the final answer with slots: {number}, {name}, {a|b}. The model "
        "fills the slots; constrained decoding keeps the rest of the sentence as written.",
    )


RunStatus = Literal["queued", "running", "completed", "stopped", "failed", "cancelled"]
StopReason = Literal[
    "completed",
    "max_steps",
    "tool_budget",
    "token_budget",
    "timeout",
    "loop_detected",
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
    "invalid_decision": "failed",
    "cancelled": "cancelled",
    "model_unavailable": "failed",
    "runtime_error": "failed",
}


class Metrics(BaseModel):
    """Per-run metrics (R-MET). ``None`` means the denominator was zero (shown as N/A)."""

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


class RunResult(BaseModel):
    """What a finished run reports (CLI ``--json`` and the runner's terminal job view)."""

    status: RunStatus
    stop_reason: StopReason
    final: FinalDecision | None = None
    metrics: Metrics | None = None
    observations: list[Observation] = Field(default_factory=list)
    error: ToolErrorInfo | None = None


# --------------------------------------------------------------------------------------------
# Runner HTTP bodies (R-API)
# --------------------------------------------------------------------------------------------

Device = Literal["auto", "cpu", "cuda", "mps"]
Dtype = Literal["auto", "float32", "bfloat16", "float16"]
_PACK_NAME = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


class InspectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_path: str = Field(min_length=1, max_length=4096)
    device: Device = "auto"
    dtype: Dtype = "auto"
    backend: Literal["auto", "llama_cpp", "transformers"] = "auto"


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_path: str = Field(min_length=1, max_length=4096)
    device: Device = "auto"
    dtype: Dtype = "auto"
    backend: Literal["auto", "llama_cpp", "transformers"] = "auto"
    pack: str | None = Field(default=None, description="Name of a task pack known to the runner.")
    budgets: Budgets = Field(default_factory=Budgets)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)

    @field_validator("pack")
    @classmethod
    def _pack_name(cls, value: str | None) -> str | None:
        if value is not None and not _PACK_NAME.match(value):
            raise ValueError("pack must be a pack name (letters, digits, _ and -)")
        return value
