"""One Prompt, two renderings: every field of ``Prompt`` has its row in ``rendering.SECTIONS``, and
every fact the model is told in one rendering is told in the other (the goal, the Observations,
feedback, budget, what is still missing, checks and hints, the answer form, the evidence ids, the
comparison rule, the repair error). The continuation's exact text is pinned here and by the golden
traces (tests/test_runtime.py)."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest

from agent.models.backends.served import FINAL_TOOL, wire_names
from agent.contracts.decision import Observation, ToolErrorInfo
from agent.contracts.budgets import Sampling
from agent.models.model_policy import DecisionRequest
from agent.task.packs import load_pack
from agent.prompts.prompting import COMPARISON_RULE, Branch, Prompt, PromptState
from agent.prompts.rendering import SECTIONS
from agent.tools import registry_for

PACK = load_pack(None)
REGISTRY = registry_for(PACK.task.tool_names)
OBSERVATIONS = [
    Observation(id="obs-knowledge_search-1", tool="knowledge_search", ok=True,
                result={"query": "batches", "summary": "4 batches", "data": {"batches": {"A": 72, "B": 78}}}),
    Observation(id="obs-calculator-2", tool="calculator", ok=False,
                error=ToolErrorInfo(code="division_by_zero", message="division by zero")),
] + [Observation(id=f"obs-calculator-{i}", tool="calculator", ok=True, result={"expression": "1 + 1", "value": 2})
     for i in range(3, 14)]
CHECKS = ["Checks to state, worked out by the runtime from the observations:", "- average: 79 >= 78 is True"]
BRANCHES = {
    "action": Branch("action", tool="knowledge_search"),
    "action with target": Branch("action", tool="calculator", target="the average of the 2 values"),
    "final in a form": Branch("final", evidence_ids=("obs-knowledge_search-1",), answer_form=PACK.task.answer_form),
    "final in prose": Branch("final", evidence_ids=("obs-knowledge_search-1", "obs-calculator-3")),
    "free": Branch("free", evidence_ids=("obs-knowledge_search-1",)),
    "free with target and form": Branch("free", tool="calculator", target="the average", answer_form="A is {number}.",
                                        evidence_ids=("obs-knowledge_search-1",)),
}


def request(branch: Branch, observations: int = 0, checks: bool = False, repair: str | None = None) -> DecisionRequest:
    state = PromptState(goal=PACK.task.goal, observations=OBSERVATIONS[:observations],
                        feedback=[f"feedback line {i}" for i in range(6)] if observations else [],
                        budget_left={"steps": 9, "tool_calls": 4, "seconds": 30, "new_tokens": 900},
                        tool_hints={"calculator": "Write one expression."},
                        check_lines=CHECKS if checks and branch.kind != "action" else [],
                        final_hints=["Name the lowest batch."] if branch.kind != "action" else [])
    return DecisionRequest(branch=branch, state=state, tools=REGISTRY, max_new_tokens=256, sampling=Sampling(),
                           repair_error=repair)


def renderings(req: DecisionRequest) -> tuple[str, str]:
    """(the continuation's text with its prefix, the conversation's text) of one request."""
    continuation = "\n".join(m["content"] for m in req.messages()) + "\n" + req.branch.prefix
    conversation = req.conversation({}, wire_names(REGISTRY.names))
    return continuation, "\n".join([conversation.system, *(t.text for t in conversation.turns)])


CASES = list(itertools.product(BRANCHES, (0, 2, 13), (False, True), (None, "invalid_json: not JSON")))


def test_every_field_of_the_prompt_has_its_section():
    assert set(SECTIONS) == {f.name for f in dataclasses.fields(Prompt)}


@pytest.mark.parametrize("name,observations,checks,repair", CASES)
def test_both_renderings_say_the_same_facts(name, observations, checks, repair):
    req = request(BRANCHES[name], observations, checks, repair)
    prompt = req.prompt()
    facts = [f"TASK: {PACK.task.goal}", "BUDGET LEFT: steps 9, tool_calls 4, seconds 30"]
    facts += [o.line for o in prompt.observations[-10:]]
    facts += [f"- {line}" for line in prompt.feedback[-4:]]
    branch = req.branch
    if branch.target:
        facts.append(f"Still missing: {branch.target}")
    if branch.kind == "action":
        facts.append(REGISTRY.get(branch.tool).hint if branch.tool != "calculator" else "Write one expression.")
    else:
        facts += [*prompt.ask.check_lines, *prompt.ask.hints]
        facts += [branch.answer_form] if branch.answer_form else []
    if branch.kind == "final":
        facts += list(branch.evidence_ids)
        facts += [] if branch.answer_form else ["as plain sentences (not JSON inside the string)"]
    if repair:
        facts.append(repair)
    continuation, conversation = renderings(req)
    for fact in facts:
        assert fact in continuation and fact in conversation, fact
    assert "new_tokens" not in continuation and "new_tokens" not in conversation
    # the comparison rule: only in a final step whose checks the runtime has not worked out
    said = COMPARISON_RULE in continuation, COMPARISON_RULE in conversation
    assert said == ((branch.kind == "final" and not checks),) * 2


def test_the_continuation_turn_is_pinned():
    req = request(BRANCHES["final in prose"], observations=1, checks=True)
    assert req.turn() == req.messages()[-1]["content"] == "\n".join([
        f"TASK: {PACK.task.goal}", "",
        "NEW OBSERVATIONS (written by the runtime):", req.prompt().observations[0].line, "",
        "RUNTIME FEEDBACK:", "- feedback line 2", "- feedback line 3", "- feedback line 4", "- feedback line 5", "",
        "BUDGET LEFT: steps 9, tool_calls 4, seconds 30", "",
        "NEXT DECISION: the final answer (the runtime has written the evidence ids).",
        "Write the answer as one JSON string as plain sentences (not JSON inside the string), in the language of "
        "the task.",
        *CHECKS, "Name the lowest batch."])
    free = request(BRANCHES["free with target and form"])
    assert free.turn().endswith(
        'NEXT DECISION: choose. Either an action {"type": "action", "tool": NAME, "arguments": {...}} for the first '
        'fact still missing, or, when every fact the task needs has a successful Observation, a final '
        '{"type": "final", "evidence_ids": [IDS], "answer": TEXT} in exactly this form: "A is {number}.".\n'
        "Still missing: the average (calculator).\nName the lowest batch.")


def test_the_conversation_forces_the_branch_tool_and_pairs_each_observation():
    names = wire_names(REGISTRY.names)
    action = request(BRANCHES["action with target"], observations=13).conversation({}, names)
    assert action.forced == "calculator" and [t.kind for t in action.turns] == ["user"] + ["call", "result"] * 10 + ["user"]
    assert [t.is_error for t in action.turns if t.kind == "result"] == [False] * 10
    assert request(BRANCHES["final in prose"]).conversation({}, names).forced == FINAL_TOOL
    assert request(BRANCHES["free"]).conversation({}, names).forced is None


def test_the_calls_of_one_reply_go_back_together_then_their_results():
    names = wire_names(REGISTRY.names)
    replies = {"obs-calculator-4": 7, "obs-calculator-5": 7, "obs-calculator-6": 7, "obs-calculator-8": 9}
    turns = request(BRANCHES["free"], observations=8).conversation({}, names, replies).turns
    shape = [(t.kind, t.call_id.rsplit("-", 1)[-1]) for t in turns[1:-1]]
    assert shape == [("call", "1"), ("result", "1"), ("call", "2"), ("result", "2"), ("call", "3"), ("result", "3"),
                     ("call", "4"), ("call", "5"), ("call", "6"), ("result", "4"), ("result", "5"), ("result", "6"),
                     ("call", "7"), ("result", "7"), ("call", "8"), ("result", "8")]


def test_a_narrowed_action_states_its_narrowed_schema_in_both():
    narrowed = {"type": "string", "pattern": "^[(]72 [+] 78[)] / 2$"}
    req = request(Branch("action", tool="calculator", narrowed=(("expression", narrowed),)), observations=2)
    assert req.continuation().value_schema["properties"]["expression"] == narrowed
    turn = req.conversation({}, wire_names(REGISTRY.names)).turns[-1].text
    assert json.dumps(narrowed, separators=(",", ":")) in turn


def test_the_final_answer_tool_follows_the_final_steps_value_schema():
    branch = Branch("final", evidence_ids=("obs-knowledge_search-1",), answer_form="The sum is {number:a + b}.",
                    bound=(("150",),))
    req = request(branch, observations=1)
    final = req.conversation({}, wire_names(REGISTRY.names)).tools[-1]
    assert final.name == FINAL_TOOL
    assert final.schema["properties"]["answer"] == req.continuation().value_schema
    assert "150" in final.schema["properties"]["answer"]["pattern"]
    assert final.schema["properties"]["evidence_ids"]["items"] == {"type": "string", "enum": ["obs-knowledge_search-1"]}
