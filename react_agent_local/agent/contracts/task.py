"""The task-pack schema: ``task.json`` as typed data (the task, its answer guide and checks, its
workspace and MCP servers)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent.contracts.budgets import Budgets

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
    """A pack's workspace (see ``agent/coding/workspace.py``): the repository each run works in, what must
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
        description="Folders of the pack holding skills (<name>/SKILL.md, see agent/task/skills.py): the model "
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
