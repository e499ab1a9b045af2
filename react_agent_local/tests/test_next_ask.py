"""What the runtime asks next, asked directly: ``next_ask`` over a ``StepEvidence``, no model, no run."""

from __future__ import annotations

import json

from agent.contracts.decision import ActionDecision, FinalDecision, Observation, ToolErrorInfo
from agent.core.next_ask import FREE_SUMMARY, decision_summary, next_ask
from agent.task.packs import load_pack
from agent.core.step_evidence import premature, step_evidence
from agent.tools import default_registry, pack_registry
from agent.tools.knowledge import search_knowledge

PACK = load_pack(None)
TOOLS = default_registry()
SEARCH = search_knowledge(PACK.knowledge_dir, "batches release rule", 1)
BATCHES = SEARCH["data"]["batches"]  # {"Batch A": 72, ...}
MEAN = sum(BATCHES.values()) / len(BATCHES)


def obs(tool: str, n: int, result: dict | None = None, error: str | None = None) -> Observation:
    return Observation(id=f"obs-{tool}-{n}", tool=tool, ok=error is None, result=result,
                       error=ToolErrorInfo(code=error, message="(test)") if error else None)


def ask(observations: list[Observation], mode: str = "guided", pack=PACK, tools=TOOLS):
    evidence = step_evidence(pack.task, observations, tools, pack.guide, "en")
    return next_ask(pack.task, evidence, mode=mode, tools=tools, language="en"), evidence


def searched() -> Observation:
    return obs("knowledge_search", 1, SEARCH)


def averaged(value: float = MEAN, n: int = 2) -> Observation:
    return obs("calculator", n, {"expression": "(test)", "value": value})


def plotted(n: int = 3, average: float = MEAN) -> Observation:
    return obs("plot", n, {"spec": {"labels": list(BATCHES), "values": list(BATCHES.values()), "average": average}})


def test_guided_asks_the_first_required_tool_without_an_observation():
    branch, _ = ask([])
    assert (branch.kind, branch.tool) == ("action", "knowledge_search")
    assert branch.summary == PACK.task.summaries["knowledge_search"] and branch.narrowed == ()


def test_an_expectation_is_a_draft_on_the_first_ask_and_narrows_after_a_rejection():
    branch, _ = ask([searched(), averaged()])
    assert (branch.kind, branch.tool) == ("action", "plot") and branch.narrowed == ()
    # the chart's labels, values and the calculator's average, as the JSON the model would copy
    assert f'"average": {json.dumps(MEAN)}' in branch.drafts
    assert any(d.startswith('"labels": ["Batch A"') for d in branch.drafts)
    rejected = obs("plot", 3, error="invalid_arguments")
    branch, _ = ask([searched(), averaged(), rejected])
    assert branch.drafts == () and dict(branch.narrowed)["labels"] == {"const": list(BATCHES)}
    assert dict(branch.narrowed)["average"] == {"const": MEAN}


def test_a_result_that_fails_an_expectation_is_asked_again_with_its_hint_and_narrowing():
    branch, evidence = ask([searched(), averaged(value=sum(BATCHES.values()))])  # a sum, not the mean
    assert (branch.kind, branch.tool) == ("action", "calculator")
    assert branch.target.startswith(f"the average of the {len(BATCHES)} values (compute the average")
    assert dict(branch.narrowed)["expression"]["pattern"].endswith(f"/ {len(BATCHES)}$")
    assert [e.tool for e in evidence.failing()] == ["calculator"]
    assert "the latest calculator result" in " ".join(premature(evidence, ["obs-knowledge_search-1"]))


def test_the_expected_value_worked_out_over_the_evidence_is_a_draft_of_the_expression():
    """Speed only (a draft never changes what is sampled): the calculator's expression as the
    evidence's numbers give it, on the first ask and on an ask after a wrong result."""
    worked = f"({' + '.join(str(v) for v in BATCHES.values())}) / {len(BATCHES)}"
    branch, _ = ask([searched()])
    assert (branch.kind, branch.tool, branch.drafts) == ("action", "calculator", (worked,))
    assert "+" not in (branch.target or "")  # never shown to the model on the first ask
    branch, _ = ask([searched(), averaged(value=sum(BATCHES.values()))])
    assert branch.drafts == (worked,)


def test_with_every_required_observation_the_final_is_asked_with_its_evidence_and_form():
    branch, evidence = ask([searched(), averaged(), plotted()])
    assert branch.kind == "final" and evidence.ready and not evidence.failing()
    assert branch.evidence_ids == ("obs-knowledge_search-1", "obs-calculator-2", "obs-plot-3")
    assert branch.answer_form == PACK.guide(evidence.latest_ok, "en").answer_form
    assert f"{MEAN:g}" in branch.numbers and "70" in branch.numbers  # the average and every_batch_gte
    assert premature(evidence, list(branch.evidence_ids)) == []


def test_free_mode_offers_the_final_only_once_the_gate_could_accept_it():
    branch, _ = ask([searched(), averaged()], mode="free")
    assert (branch.kind, branch.evidence_ids, branch.summary) == ("free", (), FREE_SUMMARY)
    branch, _ = ask([searched(), averaged(), plotted()], mode="free")
    assert branch.evidence_ids == ("obs-knowledge_search-1", "obs-calculator-2", "obs-plot-3")


def test_subgoals_are_asked_item_by_item_and_named_in_free_mode():
    pack = load_pack("population_ratio")
    tools = pack_registry(pack)
    taipei = obs("lookup_fact", 1, {"fact": "台北人口", "value": 2_500_000})
    branch, evidence = ask([taipei], pack=pack, tools=tools)
    assert (branch.kind, branch.tool, branch.target) == ("action", "lookup_fact", "纽约人口")
    assert evidence.required[0] == ("lookup_fact (台北人口)", "obs-lookup_fact-1")
    assert evidence.required[1] == ("lookup_fact (纽约人口)", None) and not evidence.ready
    branch, _ = ask([taipei], mode="free", pack=pack, tools=tools)
    assert (branch.kind, branch.tool, branch.target) == ("free", "lookup_fact", "纽约人口")


def test_the_decision_summary_follows_the_branch():
    guided, _ = ask([])
    action = ActionDecision(type="action", tool="calculator", arguments={"expression": "1 + 1"})
    final = FinalDecision(type="final", answer="x", evidence_ids=["obs-calculator-1"])
    assert decision_summary(guided, action) == guided.summary
    free, _ = ask([], mode="free")
    assert decision_summary(free, action).startswith("Model chose calculator")
    assert decision_summary(free, final).startswith("Model proposes the final answer")


def test_a_wrong_result_is_asked_again_with_its_expected_value_worked_out_from_the_evidence(tmp_path):
    """The re-ask writes the expected value's expression with the evidence numbers put in."""
    from agent.gate.check_language import evaluate
    from agent.families import generator
    from agent.task.packs import TaskPack

    pack = TaskPack.load(generator("record_change")(tmp_path / "packs", 1, 0)[0])
    data = pack.load_expected()["data"]
    keys, group = data["keys"], data["group"]
    found = search_knowledge(pack.knowledge_dir, f"{keys[0]} and {keys[1]} records", 5)
    tools = pack_registry(pack) or TOOLS
    # a difference of two numbers of another group: a wrong change, from observed numbers
    other = next(g for g in data["before"] if g != group)
    wrong = obs("calculator", 2, {"expression": "(test)", "value": data["after"][other] - data["before"][other] + 1000})
    branch, evidence = ask([obs("knowledge_search", 1, found), wrong], pack=pack, tools=tools)
    assert (branch.kind, branch.tool) == ("action", "calculator")
    label = evidence.failing()[0].check.label
    worked = branch.target.split(f"from the evidence, {label} = ", 1)[1]
    assert "records" not in worked and f"{data['after'][group]:g}" in worked and f"{data['before'][group]:g}" in worked
    right = evaluate(pack.guide(evidence.latest_ok, "en").expect[0].right, evidence.latest_ok)
    assert evaluate(worked, {}) == right  # what it shows is what the result must be
    # the default pack's average is written out over the batches
    branch, _ = ask([searched(), averaged(value=sum(BATCHES.values()))])
    assert " + ".join(f"{v:g}" for v in BATCHES.values()) in branch.target


def test_the_first_ask_of_a_tool_with_an_expectation_names_the_numbers_it_reads(tmp_path):
    from agent.families import generator
    from agent.task.packs import TaskPack

    pack = TaskPack.load(generator("record_change")(tmp_path / "packs", 1, 0)[0])
    data = pack.load_expected()["data"]
    keys, group = data["keys"], data["group"]
    found = search_knowledge(pack.knowledge_dir, f"{keys[0]} and {keys[1]} records", 5)
    branch, _ = ask([obs("knowledge_search", 1, found)], pack=pack, tools=pack_registry(pack) or TOOLS)
    assert (branch.kind, branch.tool) == ("action", "calculator")
    assert f"records['{keys[1]}'].values['{group}'] = {data['after'][group]:g}" in branch.target
    assert f"records['{keys[0]}'].values['{group}'] = {data['before'][group]:g}" in branch.target
    # the default pack's expectations read whole lists (a mean), so nothing is named there
    assert ask([searched()])[0].target is None


def test_a_fact_already_looked_up_is_not_offered_again_for_a_missing_one(tmp_path):
    """After a near-miss fact, the lookup's name choice no longer holds the names already observed."""
    from agent.families import generator
    from agent.task.packs import TaskPack
    from agent.tools.facts import load_facts

    pack = next(p for p in (TaskPack.load(r) for r in generator("fact_arithmetic")(tmp_path / "packs", 12, 0))
                if any(n.endswith(")") for n in load_facts(p.knowledge_dir)))  # one with a near-miss unit
    tools = pack_registry(pack)
    names = list(load_facts(pack.knowledge_dir))
    wanted = pack.task.subgoals["lookup_fact"]
    first, second = wanted[0], wanted[1]
    near = next(n for n in names if n not in wanted and n.startswith(second))
    seen = [obs("lookup_fact", 1, {"fact": first, "value": 1}), obs("lookup_fact", 2, {"fact": near, "value": 2})]
    branch, _ = ask(seen, pack=pack, tools=tools)
    assert (branch.tool, branch.target) == ("lookup_fact", second)
    (field, schema), = branch.narrowed
    assert second in schema["enum"] and first not in schema["enum"] and near not in schema["enum"]
    assert set(schema["enum"]) == set(names) - {first, near}
    # the first ask narrows nothing: every name is still a choice
    assert ask([], pack=pack, tools=tools)[0].narrowed == ()


def test_free_mode_keeps_a_required_observation_citable_past_the_visible_window():
    from agent.prompts.prompting import VISIBLE_OBSERVATIONS

    many = [averaged(n=i + 2) for i in range(VISIBLE_OBSERVATIONS + 2)]  # later calculator calls
    seen = [searched(), *many, plotted(n=len(many) + 2)]
    branch, evidence = ask(seen, mode="free")
    assert "obs-knowledge_search-1" not in [o.id for o in seen[-VISIBLE_OBSERVATIONS:]]
    assert branch.evidence_ids[0] == "obs-knowledge_search-1"
    assert branch.evidence_ids[1:] == tuple(o.id for o in seen[-VISIBLE_OBSERVATIONS:])


def test_after_a_failed_attempt_the_expected_value_is_worked_out_or_the_next_one_sampled_wider(tmp_path):
    from agent.gate.check_language import evaluate
    from agent.families import generator
    from agent.task.packs import TaskPack

    pack = TaskPack.load(generator("record_change")(tmp_path / "packs", 1, 0)[0])
    keys = pack.load_expected()["data"]["keys"]
    tools = pack_registry(pack) or TOOLS
    found = obs("knowledge_search", 1, search_knowledge(pack.knowledge_dir, f"{keys[0]} and {keys[1]}", 3))
    failed = obs("calculator", 2, error="calculator_invalid_expression")
    branch, evidence = ask([found, failed], pack=pack, tools=tools)
    assert (branch.tool, branch.explore, branch.again) == ("calculator", False, True)
    label = evidence.expectations[0].check.label
    worked = branch.target.split(f"from the evidence, {label} = ", 1)[1]
    assert evaluate(worked, {}) == evaluate(evidence.expectations[0].spec.right, evidence.latest_ok)
    # a tool without an expectation that failed: its next attempt is sampled more widely
    branch, _ = ask([obs("knowledge_search", 1, error="tool_timeout")])
    assert (branch.tool, branch.explore, branch.target) == ("knowledge_search", True, None)
    # a first ask and an argument rejection are not, and show the history as it is
    assert not ask([])[0].explore and not ask([])[0].again
    rejected = ask([obs("knowledge_search", 1, error="invalid_arguments")])[0]
    assert not rejected.explore and not rejected.again


def test_a_step_asked_again_after_a_failure_is_not_shown_the_failed_decisions():
    from agent.prompts.prompting import FAILED_TURN, Branch, without_failed_turns

    history = [("ask 1", '{"type": "action", "tool": "calculator", "arguments": {"expression": "1 +"}}'),
               ("ask 2", '{"type": "action", "tool": "plot", "arguments": {}}')]
    again = Branch("action", tool="calculator", again=True)
    assert without_failed_turns(history, again) == [("ask 1", FAILED_TURN), history[1]]
    assert without_failed_turns(history, Branch("action", tool="calculator")) == history
    # the default pack's wrong average is asked again with the history of the wrong call left out
    branch, _ = ask([searched(), averaged(value=sum(BATCHES.values()))])
    assert branch.again and not branch.explore
