"""What the runtime asks the model for next: one pure function of the task, the evidence and the mode.

``next_ask`` returns the ``prompting.Branch`` of a step:

    free mode      the model chooses among the run's tools, and the Final once the evidence gate
                   could accept one; it is told which declared subgoal item nothing covers yet
    guided mode    the first required tool (or subgoal item) without a successful Observation,
                   narrowed or drafted from the expectations on its result; a tool whose result
                   fails an expectation, asked again with what the result must be (a task strategy
                   with steps of its own, ``strategy.py``, asks for those first and for no
                   required tool)
    either         the Final: the evidence to cite, the answer form, and for its slots the numbers
                   and values the cited evidence holds

It reads a ``StepEvidence`` (``step_evidence.py``), calls no model and runs no tool, so a test can ask it directly what a run would ask next
(``tests/test_next_ask.py``).
"""

from __future__ import annotations

import json
from typing import Any

from agent.gate.claims import bound_forms, evidence_numbers, number_forms
from agent.contracts.decision import ActionDecision, FinalDecision
from agent.contracts.task import TaskSpec
from agent.task.packs import item_key
from agent.prompts.prompting import VISIBLE_OBSERVATIONS, Branch
from agent.core.step_evidence import StepEvidence
from agent.tools import ToolRegistry

FREE_SUMMARY = "Free mode: the model chooses the next tool or the final answer."
FINAL_SUMMARY = "All required observations present: answer with evidence."


def next_ask(task: TaskSpec, evidence: StepEvidence, *, mode: str, tools: ToolRegistry, language: str = "en",
             ask_required: bool = True) -> Branch:
    """The Branch of the next step (see the module docstring). ``ask_required``: False where the
    task strategy's own steps replace the required tools' order (when they are done, the Final)."""
    if mode == "free":
        return _free(task, evidence, tools, language)
    for tool in (task.required_tools if ask_required else ()):
        items = task.subgoals.get(tool)
        if items:
            covered = evidence.covered.get(tool, {})
            missing = next((item for item in items if item_key(item) not in covered), None)
            if missing is not None:
                return Branch("action", tool=tool, target=missing, narrowed=_not_again(tools, tool, covered),
                              summary=_summary(task, tools, tool))
        elif tool not in evidence.latest_ok:
            # After a rejected call the tool's expectations narrow the arguments they can (asked
            # again unnarrowed, a small model repeats the rejected call).
            # On the first ask the same evidence is only a draft: it speeds decoding where the
            # model copies it and never constrains what the model writes.
            # The numbers its expected value is computed from are named, as on a re-ask (a model
            # left to find them takes a neighbouring group's number).
            narrowing, rejected = evidence.narrowing(tool), evidence.last_rejected(tool)
            # After a failed attempt (a small model repeats a wrong expression) the expected
            # value is worked out from the evidence, as for a wrong result; where none can be, the
            # next attempt is sampled more widely.
            mine = [e for e in evidence.expectations if e.tool == tool]
            failed = evidence.last_failed(tool)
            worked = [f"{e.check.label} = {e.worked}" for e in mine if e.worked] if failed else []
            target = ("from the evidence, " + "; ".join(worked) if worked else
                      "; ".join(f"{e.check.label}: the evidence gives {e.where_from()}" for e in mine if e.sources))
            return Branch("action", tool=tool, target=target or None, explore=failed and not worked, again=failed,
                          narrowed=narrowing if rejected else (),
                          drafts=() if rejected else draft_texts(narrowing) or _worked_drafts(mine),
                          summary=_summary(task, tools, tool))
        elif failing := evidence.failing(tool):
            # Asked again: the instruction names what the result must be, and an expectation
            # may narrow the arguments' grammar (e.g. an expression ending in a division).
            first = failing[0]
            where = (f"; from the evidence, {first.check.label} = {first.worked}" if first.worked
                     else f"; the evidence gives {first.where_from()}" if first.sources else "")
            return Branch("action", tool=tool,
                          target=first.check.label + (f" ({first.spec.hint})" if first.spec.hint else "") + where,
                          narrowed=evidence.narrowing(tool, failing), again=True, drafts=_worked_drafts(failing),
                          summary=_summary(task, tools, tool))
    cited = tuple(dict.fromkeys(obs_id for _, obs_id in evidence.required if obs_id))
    form, numbers, bound = final_form(evidence, cited)
    return Branch("final", evidence_ids=cited, answer_form=form, numbers=numbers, bound=bound, language=language,
                  summary=task.summaries.get("final", FINAL_SUMMARY))


def _not_again(tools: ToolRegistry, tool: str, covered: dict[str, str]) -> tuple[tuple[str, Any], ...]:
    """The tool's choice arguments (an ``enum``, e.g. the fact names of a bound ``lookup_fact``)
    without the items its Observations already cover: a model asked for one item looks up a covered
    near-namesake of it again. Nothing is narrowed where no choice is left."""
    narrowed = []
    for field, schema in (tools.get(tool).compact_schema().get("properties") or {}).items():
        choices = schema.get("enum") if isinstance(schema, dict) else None
        if not isinstance(choices, list):
            continue
        left = [c for c in choices if not (isinstance(c, str) and item_key(c) in covered)]
        if left and len(left) < len(choices):
            narrowed.append((field, {**schema, "enum": left}))
    return tuple(narrowed)


def _free(task: TaskSpec, evidence: StepEvidence, tools: ToolRegistry, language: str) -> Branch:
    # The Final is one of the choices only once the evidence gate could accept one: until then
    # the grammar offers the tools alone (offered the Final early, a model answers after one of two
    # lookups, inventing the other).
    # The ids a Final must cite stay citable when older than the window of visible Observations (a
    # session's later turn could otherwise only finish by looking a required fact up again).
    required = tuple(obs_id for _, obs_id in evidence.required if obs_id)
    recent = tuple(o.id for o in evidence.observations[-VISIBLE_OBSERVATIONS:] if o.ok)
    citable = tuple(i for i in dict.fromkeys(required) if i not in recent) + recent if evidence.ready else ()
    form, numbers, bound = final_form(evidence, citable)
    # The model chooses, but it is told which declared item no Observation covers yet (left to
    # itself, a model looks the same fact up again).
    tool, item = next(((tool, item) for tool, items in task.subgoals.items() if tool in tools
                       for item in items if item_key(item) not in evidence.covered.get(tool, {})), (None, None))
    return Branch("free", tool=tool, target=item, evidence_ids=citable, answer_form=form, numbers=numbers,
                  bound=bound, language=language, summary=FREE_SUMMARY)


def final_form(evidence: StepEvidence, evidence_ids: tuple[str, ...]) -> tuple[str | None, tuple[str, ...],
                                                                              tuple[tuple[str, ...] | None, ...]]:
    """The answer form; for its number slots, the numbers the cited evidence holds; for its bound
    slots, the value each expression has on that evidence (so the grammar admits only it)."""
    guide = evidence.guide
    if guide is None or not guide.answer_form:
        return None, (), ()
    cited = [o for o in evidence.observations if o.id in evidence_ids and o.ok]
    values = [v for c in evidence.checks for v in (c.left, c.right) if v is not None] + evidence_numbers(cited)
    return guide.answer_form, number_forms(values), bound_forms(guide.answer_form, cited)


def _worked_drafts(expectations: Any) -> tuple[str, ...]:
    """Each expectation's expected value worked out over the evidence numbers (``(72 + 78 + 81) /
    3``, ``check_language.worked_out``): what an expression that meets it copies, offered as a draft
    where the expectations narrow no argument to draft instead (speed only: a draft never changes
    what the model writes, nor is it shown)."""
    return tuple(dict.fromkeys(e.worked for e in expectations if e.worked))


def draft_texts(narrowing: tuple[tuple[str, Any], ...]) -> tuple[str, ...]:
    """Each fixed argument value of a narrowing as the JSON the model would write for it."""
    return tuple(f'"{name}": {json.dumps(sub["const"], ensure_ascii=False)}'
                 for name, sub in narrowing if isinstance(sub, dict) and "const" in sub)


def decision_summary(branch: Branch, decision: ActionDecision | FinalDecision) -> str:
    """The Decision Summary a trace shows for ``decision``, proposed on ``branch``."""
    if branch.kind != "free":
        return branch.summary
    if isinstance(decision, FinalDecision):
        return "Model proposes the final answer; the evidence gate decides."
    return f"Model chose {decision.tool}; the runtime validates the arguments before any dispatch."


def _summary(task: TaskSpec, tools: ToolRegistry, tool: str) -> str:
    return task.summaries.get(tool) or tools.get(tool).summary
