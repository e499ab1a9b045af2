"""A calculator call computes with the evidence (``agent/gate/operands.py``): the rule on its own, and
through the runtime with the scripted policy -- an invented operand is refused before the call
runs, with feedback naming it and the observed values; evidence operands pass; the shipped and the
generated packs still complete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.contracts.budgets import Budgets
from agent.contracts.decision import Observation
from agent.gate.numbers import numbers_in
from agent.gate.operands import ungrounded_operands
from agent.task.packs import TaskPack, load_pack
from agent.core.run import run_agent
from agent.tools.knowledge import search_knowledge
from agent.families.release_rule.generator import generate_packs
from runtime_helpers import chain_outputs, events_of, run_scripted
from test_eval import computed_policy
from test_general_core import ratio_outputs

DEFAULT = load_pack(None)
HOLD = load_pack("release_hold")
INTEREST_GOAL = "本金 10000 元，年利率 3.5%，按年复利计算 2 年后的本息合计（元），结果保留两位小数。"


def obs(tool: str, result: dict, n: int = 1, ok: bool = True, **extra) -> Observation:
    return Observation(id=f"obs-{tool}-{n}", tool=tool, ok=ok, result=result if ok else None, **extra)


def knowledge(pack: TaskPack) -> Observation:
    return obs("knowledge_search", search_knowledge(pack.knowledge_dir, "Task Success and the release rule", 3))


def observed(observations: list[Observation]) -> set[float]:
    return {abs(n.value) for o in observations if o.ok for n in numbers_in(o.result)}


# -- the rule -------------------------------------------------------------------------------------

def test_the_observed_values_and_their_count_pass():
    record = knowledge(HOLD)
    values = list(record.result["data"]["batches"].values())
    expression = f"({' + '.join(str(v) for v in values)}) / {len(values)}"
    assert ungrounded_operands(expression, [record], [HOLD.task.goal]) == []
    assert ungrounded_operands(" + ".join(str(v) for v in values), [record], [HOLD.task.goal]) == []


def test_an_invented_operand_is_named():
    record = knowledge(HOLD)
    values = list(record.result["data"]["batches"].values())
    assert 12 not in observed([record])  # the premise: the record never states 12
    expression = f"({' + '.join(str(v) for v in values[:-1])} + 12) / {len(values)}"
    assert ungrounded_operands(expression, [record], [HOLD.task.goal]) == ["12"]
    # A rejected attempt's own arguments are no evidence: trying it again does not ground it.
    rejected = obs("calculator", {}, 2, ok=False, attempted_arguments={"expression": expression})
    assert ungrounded_operands(expression, [record, rejected], [HOLD.task.goal]) == ["12"]


def test_facts_a_previous_result_and_its_rounded_copy_pass():
    facts = [obs("lookup_fact", {"fact": "台北人口", "value": 2602418}, 1),
             obs("lookup_fact", {"fact": "纽约人口", "value": 8335897}, 2)]
    assert ungrounded_operands("2602418 / 8335897", facts, ["台北人口 除以 纽约人口"]) == []
    assert ungrounded_operands("2602418 / 8335987", facts, ["台北人口 除以 纽约人口"]) == ["8335987"]
    ratio = facts + [obs("calculator", {"expression": "2602418 / 8335897", "value": 2602418 / 8335897}, 3)]
    assert ungrounded_operands("0.31219411660196855 * 100", ratio, []) == []
    assert ungrounded_operands("0.3122 * 100", ratio, []) == []  # rounded to the decimals written
    assert ungrounded_operands("0.3121 * 100", ratio, []) == ["0.3121"]  # truncated: no rounding of it
    # The three facts' count divides their sum.
    three = facts + [obs("lookup_fact", {"fact": "东京人口", "value": 14086000}, 3)]
    assert ungrounded_operands("(2602418 + 8335897 + 14086000) / 3", three, []) == []


def test_the_goal_its_percentages_and_growth_factors_pass():
    assert ungrounded_operands("10000 * 1.035 * 1.035", [], [INTEREST_GOAL]) == []
    assert ungrounded_operands("10000 * (1 + 0.035) * (1 + 0.035)", [], [INTEREST_GOAL]) == []
    assert ungrounded_operands("10000 * 0.965", [], [INTEREST_GOAL]) == []
    assert ungrounded_operands("10000 * 1.035 * 7", [], [INTEREST_GOAL]) == ["7"]
    assert ungrounded_operands("10000 * 1.35", [], [INTEREST_GOAL]) == ["1.35"]


def test_signs_constants_sums_and_what_the_calculator_refuses_itself():
    cold = [obs("lookup_fact", {"value": -17.6}, 1), obs("lookup_fact", {"value": 13.6}, 2)]
    assert ungrounded_operands("13.6 - (-17.6)", cold, []) == [] and ungrounded_operands("13.6 + 17.6", cold, []) == []
    chunk = [obs("knowledge_search", {"citations": [{"id": "c1", "text": "North 80, South 68, East 74"}]})]
    assert ungrounded_operands("(80 + 68 + 74) / 3", chunk, []) == []  # 3: the terms the sum adds
    assert ungrounded_operands("(80 + 68 + 74) / 4", chunk, []) == ["4"]
    assert ungrounded_operands("(0 + 1) * 2 / 100", [], []) == []
    assert ungrounded_operands("(72 + ", [], []) == []  # not an expression: the calculator says why
    # a whole sum grounds its own count, not its partial sums' (a 7-term sum is no source of 3 to 6)
    written_out = "10000 * (" + " + ".join(f"1.035 * {k}" for k in range(1, 8)) + ") * 7"
    assert set(ungrounded_operands(written_out, [], [])) == {"10000", "1.035", "3", "4", "5", "6"}


# -- through the runtime --------------------------------------------------------------------------

def test_an_invented_operand_is_refused_before_the_call_runs(tmp_path):
    outputs = chain_outputs(DEFAULT)
    invented = json.dumps({"expression": "(72 + 78 + 81 + 12) / 4"})
    outcome, policy = run_scripted(outputs[:1] + [invented] + outputs[1:], tmp_path)
    [rejected] = events_of(outcome, "tool.rejected")
    error = rejected["observation"]["error"]
    assert error["code"] == "invalid_arguments" and rejected["bad_fields"] == ["expression"]
    assert "12 is in no observation" in error["message"]
    batches = outcome.result.observations[0].result["data"]["batches"]
    assert "obs-knowledge_search-1: " in error["message"]  # where the evidence is, and what it holds
    assert ", ".join(str(v) for v in batches.values()) in error["message"]
    started = [e["arguments"]["expression"] for e in events_of(outcome, "tool.started") if e["tool"] == "calculator"]
    assert started == [json.loads(outputs[1])["expression"]]  # the invented one never ran
    assert "12 is in no observation" in policy.requests[2].messages[-1]["content"]  # the model is told
    m = outcome.result.metrics
    assert outcome.result.stop_reason == "completed" and m.task_success is True and m.tool_calls == 3


def test_a_calculator_before_any_evidence_is_refused(tmp_path):
    action = json.dumps({"type": "action", "tool": "calculator",
                         "arguments": json.loads(chain_outputs(DEFAULT)[1])})
    outcome, _ = run_scripted([action, action], tmp_path, mode="free", budgets=Budgets(max_steps=2))
    rejected = events_of(outcome, "tool.rejected")
    assert len(rejected) == 2 and "tool.started" not in [e["type"] for e in outcome.events]
    assert "no observation holds a number yet" in rejected[0]["observation"]["error"]["message"]


def _interest_pack(root: Path) -> TaskPack:
    (root / "knowledge").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "knowledge" / "README.md").write_text("# A calculator-only task\n", encoding="utf-8")
    task = {"id": "compound_interest", "goal": INTEREST_GOAL, "required_tools": ["calculator"], "mode": "guided"}
    (root / "task.json").write_text(json.dumps(task, ensure_ascii=False), encoding="utf-8")
    value = 10000 * 1.035 * 1.035
    expected = {"checks": [{"type": "final_accepted"},
                           {"type": "tool_result", "tool": "calculator", "path": "value", "equals": value, "tolerance": 1e-9},
                           {"type": "answer_numbers", "numbers": [round(value, 2)]}]}
    (root / "data" / "expected.json").write_text(json.dumps(expected), encoding="utf-8")
    return TaskPack.load(root)


def test_a_calculator_only_pack_computes_from_its_goal(tmp_path):
    """The goal states the principal, the rate and the years; a call that multiplies by a 7 nothing
    states is refused, and a Final stating a value no observation holds is refused too."""
    pack = _interest_pack(tmp_path / "pack")
    outputs = [json.dumps({"expression": "10000 * 1.035 * 7"}), json.dumps({"expression": "10000 * 1.035 * 1.035"}),
               json.dumps("本息合计（元）：183412.04"), json.dumps("本息合计（元）：10712.25")]
    outcome, _ = run_scripted(outputs, tmp_path, pack=pack)
    [rejected] = events_of(outcome, "tool.rejected")
    message = rejected["observation"]["error"]["message"]
    assert "7 is in no observation" in message and "the task states 10000, 3.5%, 2" in message
    refused = [e for e in events_of(outcome, "final.validated") if not e["accepted"]]
    assert len(refused) == 1 and "183412.04 appears in no cited observation" in refused[0]["message"]
    assert outcome.result.stop_reason == "completed" and outcome.result.metrics.task_success is True


@pytest.mark.parametrize("name", [None, "release_hold", "population_ratio"])
def test_the_shipped_packs_complete_without_a_refused_operand(tmp_path, name):
    pack = load_pack(name)
    outputs = ratio_outputs() if name == "population_ratio" else chain_outputs(pack)
    outcome, _ = run_scripted(outputs, tmp_path, pack=pack)
    assert outcome.result.stop_reason == "completed" and outcome.result.metrics.task_success is True
    assert events_of(outcome, "tool.rejected") == []


def test_the_generated_packs_complete_without_a_refused_operand(tmp_path):
    for root in generate_packs(tmp_path / "packs", 12, seed=23):
        pack = TaskPack.load(root)
        outcome = run_agent(pack, computed_policy(pack), Budgets(), artifact_dir=tmp_path / root.name)
        assert outcome.result.metrics.task_success is True, (root.name, outcome.result.metrics.checks)
        assert events_of(outcome, "tool.rejected") == [], root.name
