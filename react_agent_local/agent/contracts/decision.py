"""Decisions and Observations: what the model proposes and what the runtime records.

The model proposes a ``Decision``; it is a closed union of two branches, each with a ``Literal``
type tag. Unknown fields are rejected (``extra="forbid"``), so a model that adds ``reasoning`` or
``thought`` produces an invalid Decision, never a silently accepted one. These classes are the
single source of ``schemas/decision.schema.json`` (``python -m agent schemas --write``); a test
proves the committed file matches the code. Tool argument models live with their tools
(``agent/tools/``) and reach ``schemas/tool_registry.json``, the prompts and the grammar through
the tool registry.
"""

from __future__ import annotations

from typing import Annotated, Any, Iterable, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


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


def latest_ok(observations: Iterable[Observation]) -> dict[str, Observation]:
    """The latest successful Observation of each tool, by the number its id ends in (an earlier
    turn's Observations keep theirs, and this run's continue the numbering)."""
    def position(obs: Observation) -> int:
        tail = obs.id.rsplit("-", 1)[-1]
        return int(tail) if tail.isdigit() else -1

    latest: dict[str, Observation] = {}
    for obs in sorted((o for o in observations if o.ok), key=position):
        latest[obs.tool] = obs
    return latest


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
