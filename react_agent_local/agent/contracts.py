"""Typed contracts: the single source of truth for Decisions, Observations, budgets and task packs.

Everything else is generated from these classes: ``schemas/decision.schema.json``
(``python -m agent schemas --write``) and the HTTP bodies of the runner. Tool argument models live
with their tools (``agent/tools/``) and reach ``schemas/tool_registry.json``, the prompts and the
grammar through the tool registry. A test proves the committed schema files match the code.

The model proposes a ``Decision``; it is a closed union of two branches, each with a ``Literal``
type tag. Unknown fields are rejected (``extra="forbid"``), so a model that adds ``reasoning`` or
``thought`` produces an invalid Decision, never a silently accepted one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

# The model specs and their union are the provider registry's (one entry per kind); the bodies
# below use them, and the served specs are importable from here like every other body's model.
from .providers import AnthropicSpec, LocalModelSpec, ModelSpec, OpenAICompatibleSpec  # noqa: F401

if TYPE_CHECKING:
    from .model_policy import Candidate

# --------------------------------------------------------------------------------------------
# Decisions
# --------------------------------------------------------------------------------------------

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


class ActionDecision(_Strict):
    """Ask the runtime to run one tool with these arguments."""

    type: Literal["action"]
    tool: str = Field(min_length=1, max_length=64, description="One of the run's registered tools.")
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
# Observations
# --------------------------------------------------------------------------------------------


class ToolErrorInfo(BaseModel):
    """A structured tool or validation error. ``retryable`` is absent for argument rejections."""

    code: str
    message: str
    retryable: bool = False


class Observation(BaseModel):
    """What the runtime (never the model) records after a tool attempt or an argument rejection."""

    id: str = Field(pattern=r"^obs-[a-z0-9_.\-]+-[0-9]+$")
    tool: str
    ok: bool
    result: dict[str, Any] | None = None
    error: ToolErrorInfo | None = None
    attempted_arguments: dict[str, Any] | None = None


CallRepairKind = Literal["envelope", "double_encoded", "in_content", "json_repaired", "parallel_dropped",
                         "evidence_ids_text"]


class CallRepair(BaseModel):
    """One fix a served model's tool call needed before it could become a Decision
    (``backends/call_repair.py`` makes them; the trace's ``model.call.repaired`` lists them).
    It never holds the model's text, only the text's SHA-256."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: CallRepairKind = Field(description="What was repaired: arguments wrapped in a call envelope, encoded "
                                             "twice, a call written in the text, malformed JSON, extra parallel "
                                             "calls dropped, or evidence_ids written as one string.")
    original_sha256: str = Field(pattern=r"^[0-9a-f]{64}$",
                                 description="SHA-256 of the text the repair started from (never the text).")
    fields: tuple[str, ...] = Field(default=(), max_length=32,
                                    description="Argument fields that the repair added, removed or changed.")


# --------------------------------------------------------------------------------------------
# Budgets
# --------------------------------------------------------------------------------------------


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

    def add_call(self, call: Candidate) -> None:
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

# --------------------------------------------------------------------------------------------
# Task packs and run results
# --------------------------------------------------------------------------------------------


CompareOp = Literal[">=", ">", "<=", "<", "=="]


class CheckSpec(BaseModel):
    """One check a verdict needs: ``left op right``. An operand is a number or a reference to the
    evidence: ``TOOL.path`` (the latest successful Observation of TOOL, e.g. ``calculator.value``) or
    ``min(...)``/``max(...)``/``mean(...)``/``sum(...)``/``count(...)`` of such a reference, or
    ``matches(A, B)``: how many positions of list A hold the same item as list B (a record's groups
    stand for their names), e.g. a chart's labels against the observed group names."""

    model_config = ConfigDict(extra="forbid")

    label: str = Field(min_length=1, max_length=60, description="A short name, e.g. average.")
    left: float | str
    op: CompareOp = ">="
    right: float | str
    right_label: str | None = Field(default=None, max_length=60, description="What the right side is called.")
    hint: str | None = Field(default=None, max_length=300, description="Feedback when an expectation fails.")
    arguments: dict[str, dict[str, Any]] | None = Field(
        default=None, max_length=8,
        description="An expectation only: when the tool is asked again because its result fails this check, "
                    "these JSON schemas replace its arguments' own in the decoding grammar (the tool still "
                    "validates the value), e.g. an expression that must end in a division. A \"const\" "
                    "may be an evidence reference (\"calculator.value\"), resolved when the tool is asked.")


class VerdictSpec(BaseModel):
    """How the answer states its verdict; the positive one needs every check to hold."""

    model_config = ConfigDict(extra="forbid")

    positive: list[str] = Field(min_length=1, max_length=8)
    negative: list[str] = Field(min_length=1, max_length=8)
    requires: Literal["all"] = "all"


_FORM_PATTERN = r'^[^"\\\x00-\x1f]+$'


class AnswerGuide(BaseModel):
    """How the Final is written and checked: a form with slots, the checks, the verdict, hints."""

    model_config = ConfigDict(extra="forbid")

    answer_form: str | None = Field(
        default=None, max_length=600, pattern=_FORM_PATTERN,
        description="Form of the answer with slots: {number}, {name}, {a|b}. The model fills the slots; "
        "constrained decoding keeps the rest of the sentence as written.")
    checks: list[CheckSpec] = Field(default_factory=list, max_length=8)
    verdict: VerdictSpec | None = None
    hints: list[str] = Field(default_factory=list, max_length=8)
    expect: list[CheckSpec] = Field(
        default_factory=list, max_length=8,
        description="Checks a tool's result must pass before a Final (left is TOOL.path): a result that fails "
                    "one is feedback, and guided mode asks that tool again.")


class McpServerSpec(BaseModel):
    """An MCP server a pack needs: started over stdio by the runtime, never named by an HTTP
    request. ``command`` runs with ``args`` in the pack's folder; only ``env`` (and a small allowlist
    of the runner's own variables, see ``tools/mcp.py``) reaches its environment."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9_\-]{0,31}$", description="Prefix of its tools: name.tool.")
    command: str = Field(min_length=1, max_length=200,
                         description="The program; 'python' means the runner's own interpreter.")
    args: list[str] = Field(default_factory=list, max_length=32)
    env: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: float = Field(default=10.0, ge=1.0, le=600.0, description="Per call of one of its tools.")
    covers: dict[str, str] = Field(
        default_factory=dict,
        description="Per tool (its name on the server), the result field naming the subgoal item a "
                    "successful call covers, e.g. {\"lookup_fact\": \"fact\"} (see TaskSpec.subgoals).")


def _relative_path(value: str) -> str:
    """A workspace-relative path: not absolute, no ``..``, no NUL or backslash."""
    if (not value or len(value) > 300 or value.startswith(("/", "~")) or "\x00" in value or "\\" in value
            or ".." in value.split("/")):
        raise ValueError("must be a relative path inside the pack or workspace, without '..'")
    return value


class WorkspaceSpec(BaseModel):
    """A pack's workspace (see ``agent/workspace.py``): the repository each run works in, what must
    not change, and the command whose passing run is the evidence a Final needs."""

    model_config = ConfigDict(extra="forbid")

    template: str | None = Field(
        default="workspace",
        description="Folder of the pack copied into a fresh workspace for each run (unless the operator "
                    "names one with --workspace); null: the operator must name one.")
    protected: list[str] = Field(
        default_factory=list, max_length=64,
        description="Workspace-relative files or folders the run must not change (the tests): the file "
                    "tools refuse them, the sandbox mounts them read-only, the Final gate checks them.")
    test_command: str = Field(
        min_length=1, max_length=400,
        description="The command that proves the task done: a Final is accepted only after a run of exactly "
                    "this command exited 0 on the current files, later than the last change.")
    allow_test_config: bool = Field(
        default=False,
        description="The goal is about the test set-up itself: conftest.py, pytest's configuration (pytest.ini, "
                    "pyproject.toml, setup.cfg, tox.ini) and start-up files (*.pth, sitecustomize.py) may change. "
                    "Otherwise they are protected like the tests, so no run can make a failing test pass by them.")

    @field_validator("template")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        return None if value is None else _relative_path(value)

    @field_validator("protected")
    @classmethod
    def _protected(cls, value: list[str]) -> list[str]:
        return [_relative_path(v) for v in value]


class TaskSpec(BaseModel):
    """``task.json`` of a task pack: everything task-specific, as data."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_\-]{0,63}$")
    goal: str = Field(min_length=1, max_length=2000)
    required_tools: list[str] = Field(min_length=1, max_length=16,
                                      description="Tools whose Observations a Final must cite, in guided order.")
    tools: list[str] | None = Field(default=None, max_length=32,
                                    description="Tools the model may use (default: the required tools).")
    mode: Literal["guided", "free"] = "guided"
    family: str | None = Field(
        default=None, pattern=r"^[a-z][a-z0-9_]{0,31}$",
        description="The task family of the pack (a folder of agent/families/): its default guide, computed "
                    "from the latest Observations, completes how the Final is written and checked. Each of "
                    "answer_form, checks, verdict, final_hints and expect that this file sets replaces the "
                    "family's default, even set empty ([] or null switch that default off). Left out: the "
                    "registry's default family (agent/families/__init__.py), as for packs written before "
                    "families existed; null: no family.")
    subgoals: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Per tool, the items its Observations must cover (e.g. the facts to look up).")
    answer_form: str | None = Field(default=None, max_length=600, pattern=_FORM_PATTERN,
                                    description="Form of the final answer (see AnswerGuide).")
    checks: list[CheckSpec] = Field(default_factory=list, max_length=8)
    verdict: VerdictSpec | None = None
    final_hints: list[str] = Field(default_factory=list, max_length=8)
    expect: list[CheckSpec] = Field(default_factory=list, max_length=8,
                                    description="Checks of tool results (see AnswerGuide.expect).")
    hints: dict[str, str] = Field(default_factory=dict, description="Per tool, a hint that replaces the tool's own.")
    code_prompt: str | None = Field(
        default=None, max_length=2000,
        description="The whole message of the code turn that writes a function still to be written, the first "
                    "time: {code} stands for its file with the function's def line and docstring and no body "
                    "(a benchmark's own prompt, so the agent's first version is the model's own). Left out: the "
                    "goal, the step's target and the runtime's instruction.")
    summaries: dict[str, str] = Field(default_factory=dict,
                                      description="Per tool (or 'final'), the Decision Summary wording.")
    mcp_servers: list[McpServerSpec] = Field(default_factory=list, max_length=8,
                                             description="MCP servers whose tools join the run's registry.")
    workspace: WorkspaceSpec | None = Field(
        default=None, description="The repository the workspace tools work in (fix-the-failing-test packs).")
    budgets: Budgets | None = Field(
        default=None, description="The budgets the task needs where they differ from the defaults (e.g. tool "
                                  "calls for a fix and its test runs); each one the caller sets wins.")
    skills: list[str] = Field(
        default_factory=list, max_length=8,
        description="Folders of the pack holding skills (<name>/SKILL.md, see agent/skills.py): the model "
                    "may load them with load_skill; they never add a tool.")

    @field_validator("code_prompt")
    @classmethod
    def _one_code_slot(cls, prompt: str | None) -> str | None:
        if prompt is not None and prompt.count("{code}") != 1:
            raise ValueError("code_prompt must hold {code} exactly once")
        return prompt

    @field_validator("skills")
    @classmethod
    def _skill_folders(cls, folders: list[str]) -> list[str]:
        return [_relative_path(folder) for folder in folders]

    @property
    def tool_names(self) -> list[str]:
        names = list(self.required_tools)
        names += [t for t in (self.tools or []) if t not in names]
        return names

    def guide_over(self, defaults: AnswerGuide | None) -> AnswerGuide | None:
        """The pack's guide over its family's ``defaults``: a field this task.json sets (even empty)
        in place of the default's, the default's for the others; None when nothing is left."""
        fields: dict[str, Any] = {}
        for own, name in _GUIDE_FIELDS.items():
            declared = own in self.model_fields_set or defaults is None
            fields[name] = getattr(self, own) if declared else getattr(defaults, name)
        return AnswerGuide(**fields) if any(fields.values()) else None


#: TaskSpec field -> the AnswerGuide field it declares
_GUIDE_FIELDS = {"answer_form": "answer_form", "checks": "checks", "verdict": "verdict", "final_hints": "hints",
                 "expect": "expect"}


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


# --------------------------------------------------------------------------------------------
# Runner HTTP bodies
# --------------------------------------------------------------------------------------------

_PACK_NAME = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
_LEGACY_MODEL_FIELDS = {"model_path": "path", "backend": "backend", "device": "device", "dtype": "dtype"}


def _legacy_model(data: Any) -> Any:
    """The first round's flat fields (model_path, device, dtype, backend) become ``model``; a
    ``model`` object without ``kind`` is a local one."""
    if isinstance(data, dict) and "model" not in data and "model_path" in data:
        data = dict(data)
        data["model"] = {new: data.pop(old) for old, new in _LEGACY_MODEL_FIELDS.items() if old in data}
    if isinstance(data, dict) and isinstance(data.get("model"), dict) and "kind" not in data["model"]:
        data = {**data, "model": {"kind": "local", **data["model"]}}
    return data


class _ModelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: ModelSpec

    @property
    def model_path(self) -> str:
        """The local model's path ("" for a served model, which has none)."""
        return self.model.path if isinstance(self.model, LocalModelSpec) else ""


class InspectRequest(_ModelRequest):
    """``POST /models/inspect``: ``{"model": {...}}`` or the flat ``model_path``/``device``/``dtype``/``backend``."""

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        return _legacy_model(data)


class ExplainRequest(_ModelRequest):
    """``POST /agent/runs/{id}/explain``: which local model explains the run, in which language."""

    language: Literal["en", "zh"] = "zh"

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        return _legacy_model(data)


class RunRequest(_ModelRequest):
    """``POST /agent/runs``. Sampling settings are accepted inside ``budgets`` as before
    (``temperature``, ``top_p``, ``top_k``, ``seed``) and top-level ``temperature``; they land in ``sampling``."""

    pack: str | None = Field(default=None, description="Name of a task pack known to the runner.")
    budgets: Budgets = Field(default_factory=Budgets)
    sampling: Sampling = Field(default_factory=Sampling)
    tools: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        default=None, max_length=32,
        description="Narrow the pack's tools to these (never widen): others are unknown to the model.")
    approval: Literal["never_ask", "ask_on_risk", "always_ask"] | None = Field(
        default=None,
        description="A stricter approval policy for this run's bash commands than the runner's (never a looser "
                    "one); default: the runner operator's.")
    goal: str | None = Field(
        default=None, min_length=1, max_length=1500,
        description="A goal in words on the runner operator's --workspace folder (instead of a pack): the runtime "
                    "finds the test command, the failing tests and the code they point at (agent/coding/).")

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        data = _legacy_model(data)
        if not isinstance(data, dict):
            return data
        data = dict(data)
        sampling = dict(data.get("sampling") or {}) if isinstance(data.get("sampling") or {}, dict) else data["sampling"]
        budgets = data.get("budgets")
        if isinstance(budgets, dict) and isinstance(sampling, dict):
            budgets = dict(budgets)
            for key in SAMPLING_FIELDS:
                if key in budgets:
                    sampling.setdefault(key, budgets.pop(key))
            data["budgets"] = budgets
        if "temperature" in data and isinstance(sampling, dict):
            value = data.pop("temperature")
            if value is not None:
                sampling["temperature"] = value
        if sampling:
            data["sampling"] = sampling
        return data

    @field_validator("pack")
    @classmethod
    def _pack_name(cls, value: str | None) -> str | None:
        if value is not None and not _PACK_NAME.match(value):
            raise ValueError("pack must be a pack name (letters, digits, _ and -)")
        return value
