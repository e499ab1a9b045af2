"""What the model is asked each step, as one typed value: the ``Prompt`` (and the state and branch it
is built from, with the value schemas a Decision's grammar follows).

Everything about a tool -- its name, description, argument schema, hint and how its results read --
comes from the run's ``ToolRegistry``; everything about the task -- the goal, its hints, its answer
form and checks -- from the pack (or, where the pack declares none, from its family's default guide:
``TaskPack.guide``). The runtime assembles a ``PromptState`` and a ``Branch``; ``build_prompt``
turns them into the ``Prompt``, which says every fact the model is told this step once: the goal,
the Observations (and how many earlier turns showed), the feedback, the budget left, what is asked
(an action for one tool, a final, or a free choice), the value schema, the drafts and a repair's
error. ``rendering.py`` lays one ``Prompt`` out twice: as the continuation of an in-process model
and as the conversation of a served chat model; which fact goes where is its ``SECTIONS`` table.

Ground truth (``data/expected.json``) never reaches this module.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from agent.contracts.decision import Observation
from agent.contracts.task import AnswerGuide
from agent.tools import ToolRegistry
from agent.util.number_text import number_text
from agent.util.paths import PACKAGE_ROOT

PROMPTS_DIR = PACKAGE_ROOT / "prompts"
VISIBLE_OBSERVATIONS = 10
VISIBLE_FEEDBACK = 4
OBSERVATION_CHARS = 3000
HISTORY_CHARS = 16000  # about 5k tokens: past this the prompt is one compact turn again
MODEL_TURN_CHARS = 2000  # a Decision longer than this (a hostile or runaway output) is kept cut
INVALID_TURN = "(an output the runtime rejected; see its feedback below)"
#: an earlier Decision of the kind a step asks for again, when that step is drawn more widely
#: (``Branch.explore``): shown its own failed change in the history, a model writes it again token
#: for token, even at temperature 1.0
FAILED_TURN = "(an earlier attempt of this step that failed; see the observations and feedback)"


def without_failed_turns(history: list[tuple[str, str]], branch: "Branch") -> list[tuple[str, str]]:
    """``history`` with the model's earlier Decisions of ``branch``'s kind (its tool's, or Finals)
    replaced by ``FAILED_TURN``, for a step asked again after they failed (``Branch.again``, or
    drawn more widely); as it is otherwise. Shown its failed call beside the expression worked out
    from the evidence, a small model copies its own failed one."""
    if not (branch.explore or branch.again):
        return history
    mark = f'"tool": "{branch.tool}"' if branch.kind == "action" else '"type": "final"'
    return [(user, FAILED_TURN if mark in model else model) for user, model in history]
# The answer is prose for a person: it starts with a letter (Latin or CJK), has no JSON inside the
# string (a coder model's habit), and no quote, backslash or control character, so a grammar built
# from this pattern always yields valid JSON.
ANSWER_SCHEMA = {"type": "string", "minLength": 1, "maxLength": 600,
                 "pattern": r'^[A-Za-z\u4e00-\u9fff][^{}\[\]"\\\x00-\x1f]*$'}
# A goal written in Chinese is answered in Chinese: the prose starts with a Chinese character
# (only told to, a small model answers a Chinese goal in English).
ANSWER_SCHEMA_ZH = {**ANSWER_SCHEMA, "pattern": r'^[\u4e00-\u9fff][^{}\[\]"\\\x00-\x1f]*$'}


@lru_cache(maxsize=None)
def prompt_text(name: str) -> str:
    return (PROMPTS_DIR / f"{name}.md").read_text(encoding="utf-8").strip()


_SLOT = re.compile(r"\{([^{}]*)\}")
_NUMBER = r"-?[0-9]+([.][0-9]+)?"
_NAME = r"[A-Za-z0-9\u4e00-\u9fff][A-Za-z0-9\u4e00-\u9fff _-]{0,39}"
_BOUND_SLOT = re.compile(r"^(number|name)\s*:")


def _literal(text: str) -> str:
    # Literal dots and the like become character classes so every grammar converter handles them.
    return "".join(c if c.isalnum() or c in " ,;:'" else f"[{c}]" if c not in "^]\\" else "\\" + c for c in text)


def answer_form_pattern(form: str, numbers: tuple[str, ...] = (), bound: tuple[tuple[str, ...] | None, ...] = ()) -> str:
    """Regex for an answer form: literal text kept, ``{number}``, ``{name}`` and ``{a|b}`` slots
    (``{number:EXPR}``/``{name:EXPR}`` bound to an expression are number/name slots here).

    The model fills the slots (the numbers, the names, the verdict); nothing here knows their values.
    With ``numbers`` (the numbers written in the cited Observations), a number slot admits only those,
    so a Final cannot state a number no Observation holds. With ``bound`` (per bound slot, in order,
    the ways its value may be written, or None while the evidence does not give it) a bound slot
    admits only its value.
    """
    number = "(" + "|".join(_literal(n) for n in numbers) + ")" if numbers else _NUMBER
    values = iter(bound)
    out, last = [], 0
    for match in _SLOT.finditer(form):
        out.append(_literal(form[last:match.start()]))
        slot = match.group(1).strip()
        bound = _BOUND_SLOT.match(slot)
        if bound:
            # {number:EXPR} / {name:EXPR}: the claim gate checks the value against EXPR; it may be
            # one no Observation holds (a difference the runtime works out): its own value, or any
            # number while the evidence gives none.
            known = next(values, None)
            if known:  # the value the runtime worked out from the cited evidence
                out.append("(" + "|".join(_literal(v) for v in known) + ")")
            else:
                out.append(_NUMBER if bound.group(1) == "number" else _NAME)
        elif slot == "number":
            out.append(number)
        elif slot == "name":
            out.append(_NAME)
        else:
            out.append("(" + "|".join(_literal(option.strip()) for option in slot.split("|")) + ")")
        last = match.end()
    out.append(_literal(form[last:]))
    return "^" + "".join(out) + "$"


@dataclass(frozen=True)
class Branch:
    """What the runtime asks for this step: an action for one tool, or a final (or a free choice)."""

    kind: str  # "action" | "final" | "free"
    tool: str | None = None
    target: str | None = None  # the subgoal item still missing for ``tool`` (e.g. a fact's name)
    evidence_ids: tuple[str, ...] = ()
    answer_form: str | None = None
    numbers: tuple[str, ...] = ()  # numbers a form's {number} slot may hold
    #: per bound slot ({number:EXPR}, {name:EXPR}) of the form, the ways its worked-out value may be
    #: written (None: not known yet)
    bound: tuple[tuple[str, ...] | None, ...] = ()
    language: str = "en"  # the goal's: a Final without an answer form is prose in this language
    summary: str = ""
    #: an action asked again: argument schemas that replace the tool's own (a failing expectation's)
    narrowed: tuple[tuple[str, Any], ...] = ()
    #: text the arguments will likely copy (the evidence an expectation names), proposed to the
    #: backend as a draft: it only speeds decoding up and never constrains it
    drafts: tuple[str, ...] = ()
    #: the argument that holds source code (a file's content, a function's source): a policy that
    #: can may have the model write it as a fenced code block after the other arguments' JSON,
    #: instead of as an escaped JSON string (small models lose their place in a long escaped string)
    code_field: str | None = None
    #: the code a pack's ``code_prompt`` shows (``workspace_evidence.spec_of``): the code turn is that prompt alone
    spec: str | None = None
    #: the model's likeliest answer already failed (a change that restored failing files): sample
    #: this call (at ``EXPLORE_TEMPERATURE`` when the run is greedy) instead of repeating it
    explore: bool = False
    #: asked again after the same kind of Decision failed (a tool attempt, a wrong result): the
    #: failed Decisions are not shown in the history (``without_failed_turns``); ``explore`` implies it
    again: bool = False

    @property
    def prefix(self) -> str:
        if self.kind == "action":
            # No trailing space: a prompt ending in a lone space token derails unconstrained decoding.
            return f'{{"type": "action", "tool": "{self.tool}", "arguments":'
        if self.kind == "final":
            return f'{{"type": "final", "evidence_ids": {json.dumps(list(self.evidence_ids))}, "answer":'
        return ""

    @property
    def suffix(self) -> str:
        return "}" if self.kind in ("action", "final") else ""

    def value_schema(self, registry: ToolRegistry) -> dict[str, Any]:
        if self.kind == "action":
            schema = tool_schema(registry, self.tool)
            if self.narrowed:
                # A narrowed argument is one the re-ask demands: optional or not, it must be written
                # (a small model leaves an optional argument out of every re-drawn call).
                properties = dict(schema.get("properties", {}))
                chosen = {name: sub for name, sub in self.narrowed if name in properties}
                properties.update(chosen)
                required = list(dict.fromkeys([*schema.get("required", []), *chosen]))
                schema = {**schema, "properties": properties, "required": required}
            return schema
        if self.kind == "final":
            return answer_schema(self.answer_form, self.numbers, self.language, self.bound)
        return free_decision_schema(registry, self.evidence_ids, self.answer_form, self.numbers, self.language,
                                    self.bound)


def tool_schema(registry: ToolRegistry, name: str) -> dict[str, Any]:
    return registry.get(name).compact_schema()


def answer_schema(answer_form: str | None, numbers: tuple[str, ...] = (), language: str = "en",
                  bound: tuple[tuple[str, ...] | None, ...] = ()) -> dict[str, Any]:
    """The Final's answer: the answer form when there is one, else free prose in the goal's language."""
    if answer_form:
        return {"type": "string", "minLength": 1, "maxLength": 600,
                "pattern": answer_form_pattern(answer_form, numbers, bound)}
    return ANSWER_SCHEMA_ZH if language == "zh" else ANSWER_SCHEMA


def free_decision_schema(registry: ToolRegistry, citable_ids: tuple[str, ...] = (), answer_form: str | None = None,
                         numbers: tuple[str, ...] = (), language: str = "en",
                         bound: tuple[tuple[str, ...] | None, ...] = ()) -> dict[str, Any]:
    """Free mode's schema: one alternative per tool (with that tool's full argument schema) and a Final.

    The model still chooses the tool or the Final; the grammar only keeps each choice well typed. A
    Final may cite only ids of successful Observations that exist (``citable_ids``; none yet means no
    Final alternative); whether those are enough evidence is still the runtime's evidence gate to decide.
    """
    def const_object(properties: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "properties": properties, "required": list(properties),
                "additionalProperties": False}

    choices = [const_object({"type": {"const": "action"}, "tool": {"const": tool.name},
                             "arguments": tool.compact_schema()}) for tool in registry]
    if citable_ids:
        choices.append(const_object({
            "type": {"const": "final"},
            "evidence_ids": {"type": "array", "items": {"enum": list(citable_ids)}, "minItems": 1,
                             "maxItems": len(citable_ids)},
            "answer": answer_schema(answer_form, numbers, language, bound)}))
    return {"anyOf": choices}


def full_decision_schema(branch: Branch, registry: ToolRegistry) -> dict[str, Any]:
    """The whole Decision the branch asks for (shown in a repair prompt)."""
    if branch.kind == "action":
        properties = {"type": {"const": "action"}, "tool": {"const": branch.tool},
                      "arguments": tool_schema(registry, branch.tool)}
    elif branch.kind == "final":
        properties = {"type": {"const": "final"}, "answer": answer_schema(branch.answer_form, branch.numbers, branch.language),
                      "evidence_ids": {"type": "array", "items": {"type": "string"}, "minItems": 1}}
    else:
        return free_decision_schema(registry, branch.evidence_ids, branch.answer_form, branch.numbers, branch.language)
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


def system_message(registry: ToolRegistry) -> str:
    """The rules and every tool with its argument schema: the same for every step of a run (and every
    run with the same tools), so it is evaluated once and then read from the KV cache."""
    return system_text(tool_cards(registry))


def system_text(tools: tuple[ToolCard, ...]) -> str:
    """``system_message`` of tools as a ``Prompt`` holds them."""
    tool_list = "\n".join(
        f"- {tool.name}: {tool.description}\n  arguments: "
        + json.dumps(tool.schema, separators=(",", ":"), ensure_ascii=False) for tool in tools)
    return prompt_text("system").format(tool_list=tool_list)


def observation_line(obs: Observation, registry: ToolRegistry) -> str:
    """One Observation as the model sees it: one compact line, at most ~3000 characters.

    A successful result is rendered by its tool (names and numbers exactly as the tool returned
    them, so a small model can copy them); a failure is its structured error.
    """
    if obs.ok:
        render = registry.get(obs.tool).render if obs.tool in registry else None
        body = render(obs.result or {}) if render else json.dumps(obs.result, ensure_ascii=False)
        text = f"[{obs.id}] {obs.tool} ok: " + body
    else:
        error = obs.error.model_dump() if obs.error else {}
        text = f"[{obs.id}] {obs.tool} FAILED: " + json.dumps(error, ensure_ascii=False)
        if obs.attempted_arguments is not None:
            text += " attempted_arguments=" + json.dumps(obs.attempted_arguments, ensure_ascii=False)[:400]
    return text[:OBSERVATION_CHARS]


@dataclass
class PromptState:
    """What the runtime tells the model this step, as it keeps it (``build_prompt`` makes the ``Prompt``)."""

    goal: str
    observations: list[Observation]
    feedback: list[str]
    budget_left: dict[str, Any]
    tool_hints: dict[str, str] = field(default_factory=dict)
    #: the pack's message for a code turn that writes a function the first time (``TaskSpec.code_prompt``)
    code_prompt: str | None = None
    final_hints: list[str] = field(default_factory=list)
    check_lines: list[str] = field(default_factory=list)
    #: what an answer copies from them (``check_drafts``): drafts of a final, never shown
    check_drafts: list[str] = field(default_factory=list)
    #: the earlier model calls of this run: (the user turn, the model's Decision text) each
    history: list[tuple[str, str]] = field(default_factory=list)
    #: how many Observations and feedback lines those turns showed already
    shown_observations: int = 0
    shown_feedback: int = 0


def model_turn(text: str) -> str:
    """The model's Decision text as its history keeps it: cut where it is runaway-long."""
    return text if len(text) <= MODEL_TURN_CHARS else text[:MODEL_TURN_CHARS] + " [cut by the runtime]"


def code_messages(state: PromptState, branch: Branch, registry: ToolRegistry, arguments_text: str = "") -> list[dict[str, str]]:
    """A code turn's conversation (``DecisionRequest.code_turn``): one user message with the task and
    what this step is for (the branch's target: the code as the task gave it or as it is now, how the
    last run failed), asking for the code alone -- no tools, no protocol. The model's own failed
    version is not shown: shown it, a model copies it token for token, even sampled at T=1.

    A function written the first time, in a pack with a ``code_prompt``, is asked with that prompt
    alone: a first version asked the runtime's way can pass the examples and fail the hidden tests
    where the same model, asked the benchmark's way, passes them."""
    if branch.spec is not None and state.code_prompt:
        return [{"role": "user", "content": state.code_prompt.replace("{code}", branch.spec)}]
    field = branch.code_field or "code"
    tool = registry.get(branch.tool)
    parts = [state.goal, ""]
    if branch.target:
        parts += [branch.target.strip(), ""]
    hint = state.tool_hints.get(tool.name, tool.hint)
    try:
        chosen = {k: v for k, v in json.loads(arguments_text).items() if v is not None}
    except (ValueError, AttributeError):
        chosen = {}
    if chosen:
        hint = "; ".join(f"{k}: {v}" for k, v in chosen.items()) + ". " + hint
    parts.append(prompt_text("code").format(field=field, tool=tool.name, hint=hint))
    return [{"role": "user", "content": "\n".join(parts)}]


# --------------------------------------------------------------------------------------------
# The prompt: what the model is asked this step, one value for both renderings
# --------------------------------------------------------------------------------------------

#: the budgets a Decision can act on; token budgets are the runtime's to enforce and cost a small
#: model ~20 prompt tokens a step to read
MODEL_VISIBLE_BUDGETS = ("steps", "tool_calls", "seconds")
COMPARISON_RULE = ('"X >= Y is True" only when X is greater than or equal to Y; '
                   '"X >= Y is False" when X is smaller than Y.')


@dataclass(frozen=True)
class ToolCard:
    """A tool as the model is told of it."""

    name: str
    description: str
    schema: dict[str, Any]  # its compact argument schema


@dataclass(frozen=True)
class Observed:
    """An Observation as the model sees it: its one line, and what a conversation pairs it with."""

    id: str
    tool: str
    ok: bool
    line: str  # ``observation_line``
    attempted_arguments: dict[str, Any] | None


@dataclass(frozen=True)
class ActionAsk:
    """The arguments of one tool."""

    tool: ToolCard
    hint: str  # the task's hint for the tool, else the tool's own
    target: str | None  # the subgoal item still missing (a failing expectation's re-ask says what)
    kind: Literal["action"] = "action"


@dataclass(frozen=True)
class FinalAsk:
    """The final answer, citing the evidence the runtime chose."""

    evidence_ids: tuple[str, ...]
    answer_form: str | None  # None: prose in the goal's language
    #: the comparison rule, unless the runtime states the checks' outcomes itself (then the model
    #: copies "64 >= 70 is False" and the rule only costs tokens); the same for a served model
    rules: tuple[str, ...]
    check_lines: tuple[str, ...]  # ``guide_check_lines``
    hints: tuple[str, ...]  # the pack's hints for the final answer
    kind: Literal["final"] = "final"


@dataclass(frozen=True)
class FreeAsk:
    """The model's choice: an action for the first fact still missing, or the final answer."""

    answer_form: str | None
    target: str | None  # the first declared subgoal item still missing, and its tool
    tool: str | None
    check_lines: tuple[str, ...]
    hints: tuple[str, ...]
    kind: Literal["free"] = "free"


Ask = ActionAsk | FinalAsk | FreeAsk


@dataclass(frozen=True)
class Repair:
    """The previous output was rejected: why, and the complete Decision the branch asks for."""

    error: str
    schema: dict[str, Any]


@dataclass(frozen=True)
class Prompt:
    """Everything the model is asked this step; ``rendering.SECTIONS`` says where each field goes."""

    goal: str
    tools: tuple[ToolCard, ...]
    observations: tuple[Observed, ...]  # all of the run's, oldest first
    shown_observations: int  # how many of them the earlier turns showed
    feedback: tuple[str, ...]  # all of the run's, oldest first
    shown_feedback: int
    budget_left: tuple[tuple[str, Any], ...]  # the model-visible budgets
    history: tuple[tuple[str, str], ...]  # the earlier calls: (the user turn, the model's Decision text)
    compact: bool  # the history passed ``HISTORY_CHARS``: a continuation is one compact turn again
    ask: Ask
    value_schema: dict[str, Any]  # the value after the branch's prefix (``Branch.value_schema``)
    drafts: tuple[str, ...]  # text the arguments will likely copy (``Branch.drafts``)
    repair: Repair | None


def build_prompt(state: PromptState, branch: Branch, registry: ToolRegistry,
                 repair_error: str | None = None) -> Prompt:
    """The one ``Prompt`` of this step, from the runtime's state, the branch and the run's tools."""
    if branch.kind == "action":
        tool = registry.get(branch.tool)
        ask: Ask = ActionAsk(ToolCard(tool.name, tool.description, tool.compact_schema()),
                             state.tool_hints.get(tool.name, tool.hint), branch.target)
    elif branch.kind == "final":
        ask = FinalAsk(branch.evidence_ids, branch.answer_form, () if state.check_lines else (COMPARISON_RULE,),
                       tuple(state.check_lines), tuple(state.final_hints))
    else:
        ask = FreeAsk(branch.answer_form, branch.target, branch.tool, tuple(state.check_lines),
                      tuple(state.final_hints))
    return Prompt(
        goal=state.goal, tools=tool_cards(registry),
        observations=tuple(Observed(o.id, o.tool, o.ok, observation_line(o, registry), o.attempted_arguments)
                           for o in state.observations),
        shown_observations=state.shown_observations,
        feedback=tuple(state.feedback), shown_feedback=state.shown_feedback,
        budget_left=tuple((k, v) for k, v in state.budget_left.items() if k in MODEL_VISIBLE_BUDGETS),
        history=tuple(state.history),
        compact=sum(len(user) + len(model) for user, model in state.history) > HISTORY_CHARS,
        ask=ask, value_schema=branch.value_schema(registry),
        drafts=branch.drafts + (tuple(state.check_drafts) if branch.kind != "action" else ()),
        repair=None if repair_error is None else Repair(repair_error, full_decision_schema(branch, registry)))


def tool_cards(registry: ToolRegistry) -> tuple[ToolCard, ...]:
    return tuple(ToolCard(tool.name, tool.description, tool.compact_schema()) for tool in registry)


def guide_check_lines(guide: AnswerGuide | None,
                      resolved: list[tuple[str, float | None, str, float | None, bool | None]]) -> list[str]:
    """The checks the answer must state, with the values the evidence gives for each side and the
    comparison worked out by the runtime (as the calculator works out a sum): a small model copies
    "64 >= 70 is False" far more reliably than it compares two numbers itself."""
    if guide is None or not guide.checks:
        return []
    statements, verdict = _worked_checks(guide, resolved)
    lines = [f"- {label}: {statement}{f' ({name})' if name else ''}" for label, statement, name in statements]
    if verdict is not None:
        lines.append(f"- so the verdict (every check must be True): {verdict}")
    return (["Checks to state, worked out by the runtime from the observations:"] + lines) if lines else []


def check_drafts(guide: AnswerGuide | None,
                 resolved: list[tuple[str, float | None, str, float | None, bool | None]]) -> list[str]:
    """What an answer copies from ``guide_check_lines``: each check's statement ("64 >= 70 is
    False") and the verdict, offered to the backend as drafts (speed only: a draft never changes
    what is sampled)."""
    if guide is None or not guide.checks:
        return []
    statements, verdict = _worked_checks(guide, resolved)
    return [statement for _, statement, _ in statements] + ([verdict] if verdict is not None else [])


def _worked_checks(guide: AnswerGuide, resolved: list[tuple[str, float | None, str, float | None, bool | None]]
                   ) -> tuple[list[tuple[str, str, str | None]], str | None]:
    """Each check whose sides the evidence gives: (label, "64 >= 70 is False", the right side's
    name); and the verdict the pack declares (every check must hold) once every check is worked out."""
    statements = [(label, f"{number_text(left)} {op} {number_text(right)} is {holds}", check.right_label)
                  for check, (label, left, op, right, holds) in zip(guide.checks, resolved)
                  if left is not None and right is not None]
    verdict = None
    if guide.verdict is not None and statements and len(statements) == len(guide.checks):
        met = all(holds for *_, holds in resolved)
        verdict = guide.verdict.positive[0] if met else guide.verdict.negative[0]
    return statements, verdict

