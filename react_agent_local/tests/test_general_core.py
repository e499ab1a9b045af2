"""One core for any task, tool and model: a tool registered once reaches every reader; seed 002's
exercise (lookup_fact + calculator) runs through the same runtime; seed 002's test list."""

from __future__ import annotations

import json
import re
import shutil
import threading
from pathlib import Path

from pydantic import Field

from agent.contracts.budgets import Budgets
from agent.task.packs import load_pack
from agent.tools import StrictArgs, Tool, catalog, registry_for
from agent.tools.facts import load_facts
from runtime_helpers import events_of, run_scripted, types
from server_support import BASE_URL, wait_terminal

RATIO = load_pack("population_ratio")
FACTS = load_facts(RATIO.knowledge_dir)


def ratio_outputs(answer: str | None = None) -> list[str]:
    """A correct guided run of the population pack, computed from its fact base (not typed in)."""
    first, second = (FACTS[name]["value"] for name in RATIO.task.subgoals["lookup_fact"])
    ratio = round(first / second, 4)
    return [json.dumps({"query": RATIO.task.subgoals["lookup_fact"][0]}),
            json.dumps({"query": RATIO.task.subgoals["lookup_fact"][1]}),
            json.dumps({"expression": f"{first} / {second}"}),
            json.dumps(answer or f"台北人口除以纽约人口约为 {ratio}")]


# -- seed 002's exercise ----------------------------------------------------------------------------

def test_population_ratio_guided(tmp_path):
    outcome, policy = run_scripted(ratio_outputs(), tmp_path, pack=RATIO)
    m = outcome.result.metrics
    assert (outcome.result.status, outcome.result.stop_reason) == ("completed", "completed")
    assert m.task_success is True and all(m.checks.values()), m.checks
    assert [o.tool for o in outcome.result.observations] == ["lookup_fact", "lookup_fact", "calculator"]
    # The runtime decides which declared fact is still missing and says so in the instruction.
    prompts = [r.messages[-1]["content"] for r in policy.requests]
    assert "Still missing: 台北人口" in prompts[0] and "Still missing: 纽约人口" in prompts[1]
    assert [e["decision_summary"] for e in events_of(outcome, "decision.valid")][:2] == \
        [RATIO.task.summaries["lookup_fact"]] * 2
    assert outcome.result.final.evidence_ids == ["obs-lookup_fact-1", "obs-lookup_fact-2", "obs-calculator-3"]
    # Only the pack's tools reach the model: the system prompt lists lookup_fact and calculator.
    system = policy.requests[0].messages[0]["content"]
    assert "- lookup_fact:" in system and "- calculator:" in system and "knowledge_search" not in system
    # The goal is Chinese and the pack has no answer form: the answer's grammar starts it in Chinese.
    pattern = re.compile(policy.requests[-1].value_schema["pattern"])
    assert pattern.match(json.loads(ratio_outputs()[-1])) and not pattern.match("The ratio is 0.3122.")


def test_population_ratio_free_mode(tmp_path):
    looks = ratio_outputs()
    actions = [json.dumps({"type": "action", "tool": "lookup_fact", "arguments": json.loads(looks[0])}),
               json.dumps({"type": "action", "tool": "lookup_fact", "arguments": json.loads(looks[1])}),
               json.dumps({"type": "action", "tool": "calculator", "arguments": json.loads(looks[2])}),
               json.dumps({"type": "final", "answer": json.loads(looks[3]),
                           "evidence_ids": ["obs-lookup_fact-1", "obs-lookup_fact-2", "obs-calculator-3"]})]
    outcome, policy = run_scripted(actions, tmp_path, pack=RATIO, mode="free")
    assert outcome.result.stop_reason == "completed" and outcome.result.metrics.task_success is True
    tools = {alt["properties"]["tool"]["const"] for alt in policy.requests[0].value_schema["anyOf"]}
    assert tools == {"lookup_fact", "calculator"}
    # A Final is one of the grammar's choices only once the evidence gate could accept it.
    kinds = [[alt["properties"]["type"]["const"] for alt in r.value_schema["anyOf"]] for r in policy.requests]
    assert ["final" in k for k in kinds] == [False, False, False, True]
    # Free mode still says which declared fact no Observation covers yet.
    assert "Still missing: 台北人口 (lookup_fact)" in policy.requests[0].messages[-1]["content"]
    assert "Still missing: 纽约人口 (lookup_fact)" in policy.requests[1].messages[-1]["content"]
    assert "Still missing" not in policy.requests[2].messages[-1]["content"]


def test_unknown_fact_is_a_structured_error_the_model_recovers_from(tmp_path):
    outputs = ratio_outputs()
    outcome, policy = run_scripted([json.dumps({"query": "巴黎人口"})] + outputs, tmp_path, pack=RATIO)
    failed = outcome.result.observations[0]
    assert failed.ok is False and failed.error.code == "unknown_fact" and failed.error.retryable is False
    assert "台北人口" in failed.error.message  # the known names, so the model can recover
    assert "unknown_fact" in policy.requests[1].messages[-1]["content"]
    assert outcome.result.stop_reason == "completed" and outcome.result.metrics.task_success is True


def test_a_final_that_misstates_the_ratio_is_refused(tmp_path):
    outputs = ratio_outputs()
    outcome, _ = run_scripted(outputs[:3] + [json.dumps("台北人口除以纽约人口约为 0.3211")] + outputs[3:],
                              tmp_path, pack=RATIO)
    refused = events_of(outcome, "final.validated")[0]
    assert refused["accepted"] is False and "0.3211 appears in no cited observation" in refused["message"]
    assert outcome.result.metrics.task_success is True


# -- seed 002's test list: invalid tool calls come back as data --------------------------------------

def _free(tool: str, arguments) -> str:
    return json.dumps({"type": "action", "tool": tool, "arguments": arguments})


def test_bad_json_is_repaired(tmp_path):
    outputs = ['{"type": "action", "tool": "lookup_fact", "arguments": {"query": "台北人口"'] + \
        [_free("lookup_fact", {"query": "台北人口"})]
    outcome, _ = run_scripted(outputs, tmp_path, pack=RATIO, mode="free", budgets=Budgets(max_steps=1),
                              complete=True)
    assert events_of(outcome, "decision.invalid")[0]["code"] == "invalid_json"
    assert "decision.repaired" in types(outcome) and outcome.result.stop_reason == "max_steps"


def test_unknown_tool_is_an_invalid_decision_not_a_tool_failure(tmp_path):
    outputs = [_free("knowledge_search", {"query": "x"}), _free("lookup_fact", {"query": "台北人口"})]
    outcome, _ = run_scripted(outputs, tmp_path, pack=RATIO, mode="free", budgets=Budgets(max_steps=1))
    invalid = events_of(outcome, "decision.invalid")[0]
    assert invalid["code"] == "unknown_tool" and "allowed tools: calculator, lookup_fact" in invalid["error"]
    assert "tool.started" not in types(outcome)[: types(outcome).index("decision.repaired")]


def test_extra_parameter_wrong_type_and_empty_string_are_rejected_arguments(tmp_path):
    outputs = [_free("lookup_fact", {"query": "台北人口", "year": 2024}),
               _free("lookup_fact", {"query": 42}),
               _free("lookup_fact", {"query": ""})]
    outcome, _ = run_scripted(outputs, tmp_path, pack=RATIO, mode="free",
                              budgets=Budgets(max_steps=3, repeated_action_limit=4))
    rejected = events_of(outcome, "tool.rejected")
    assert [(r["unexpected_fields"], r["bad_fields"]) for r in rejected] == [(["year"], []), ([], ["query"]),
                                                                              ([], ["query"])]
    assert outcome.result.metrics.tool_calls == 0  # rejections cost no tool call
    assert all(o.error.code == "invalid_arguments" for o in outcome.result.observations)


def test_a_truncated_generation_is_never_a_final(tmp_path):
    outputs = ratio_outputs()
    long_answer = json.dumps("台北人口除以纽约人口约为 0.3122 " + "，".join(["非常详细的说明"] * 40))
    budgets = Budgets(decision_max_new_tokens=20, max_steps=4)
    outcome, _ = run_scripted(outputs[:3] + [long_answer] * 3, tmp_path, pack=RATIO, budgets=budgets)
    assert [e["code"] for e in events_of(outcome, "decision.invalid")] == ["truncated"] * 3
    assert outcome.result.final is None and outcome.result.stop_reason == "invalid_decision"


def test_max_steps_stops_the_loop(tmp_path):
    outputs = [_free("lookup_fact", {"query": q}) for q in ("台北人口", "纽约人口", "东京人口")]
    outcome, _ = run_scripted(outputs, tmp_path, pack=RATIO, mode="free", budgets=Budgets(max_steps=3))
    assert (outcome.result.status, outcome.result.stop_reason) == ("stopped", "max_steps")
    assert outcome.result.metrics.steps == 3 and outcome.result.metrics.termination_correctness is True


# -- a new tool is one registration ------------------------------------------------------------------

class UnitConvertArgs(StrictArgs):
    """Convert a length between metres and feet."""

    value: float = Field(description="The length to convert.")
    unit: str = Field(pattern="^(m|ft)$", description="The unit of value: m or ft.")


def _convert(ctx, args: UnitConvertArgs, cancel: threading.Event) -> dict:
    factor = 0.3048
    value = args.value / factor if args.unit == "m" else args.value * factor
    return {"value": round(value, 4), "unit": "ft" if args.unit == "m" else "m"}


UNIT_CONVERT = Tool(name="unit_convert", args_model=UnitConvertArgs, execute=_convert, timeout_seconds=1.0,
                    digest=lambda r: r, render=lambda r: f"{r['value']} {r['unit']}",
                    hint="Give the value and its unit.", summary="A length in the other unit is missing: convert it.")


def _unit_pack(tmp_path: Path):
    root = tmp_path / "unit_pack"
    (root / "knowledge").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "task.json").write_text(json.dumps({
        "id": "unit_pack", "goal": "How many feet is 100 m?", "required_tools": ["unit_convert"]}), encoding="utf-8")
    feet = round(100 / 0.3048, 4)
    (root / "data" / "expected.json").write_text(json.dumps({"checks": [
        {"type": "final_accepted"},
        {"type": "tool_result", "tool": "unit_convert", "path": "value", "equals": feet},
        {"type": "answer_numbers", "numbers": [str(feet)]}]}), encoding="utf-8")
    return load_pack(root), feet


def test_a_new_tool_reaches_prompt_grammar_parser_and_trace(tmp_path):
    pack, feet = _unit_pack(tmp_path)
    registry = catalog().register(UNIT_CONVERT)
    outputs = [json.dumps({"value": 100, "unit": "m"}), json.dumps(f"100 m is {feet} ft.")]
    outcome, policy = run_scripted(outputs, tmp_path, pack=pack, tools=registry.subset(["unit_convert"]))
    first = policy.requests[0]
    assert "- unit_convert: Convert a length between metres and feet." in first.messages[0]["content"]
    assert first.prefix.endswith('"tool": "unit_convert", "arguments":')
    assert first.value_schema == UNIT_CONVERT.compact_schema()
    assert "Give the value and its unit." in first.messages[-1]["content"]
    assert events_of(outcome, "tool.started")[0]["tool"] == "unit_convert"
    assert events_of(outcome, "decision.valid")[0]["decision_summary"] == UNIT_CONVERT.summary
    assert f"[obs-unit_convert-1] unit_convert ok: {feet} ft" in policy.requests[1].messages[-1]["content"]
    assert outcome.result.metrics.task_success is True


def test_a_new_tool_reaches_the_runner_schema_and_runs(tmp_path):
    from fastapi.testclient import TestClient

    from agent.runner.server import RunnerSettings, create_app, scripted_policy_factory

    pack, feet = _unit_pack(tmp_path)
    packs_dir = tmp_path / "packs"
    shutil.copytree(pack.root, packs_dir / "unit_pack")
    settings = RunnerSettings(runs_dir=tmp_path / "runs", tools=catalog().register(UNIT_CONVERT),
                              policy_factory=scripted_policy_factory(
                                  [json.dumps({"value": 100, "unit": "m"}), json.dumps(f"100 m is {feet} ft.")]),
                              test_policy=True)
    import agent.task.packs

    original = agent.task.packs.PACKS_DIR
    agent.task.packs.PACKS_DIR = packs_dir
    try:
        with TestClient(create_app(settings), base_url=BASE_URL) as client:
            names = [t["name"] for t in client.get("/schema").json()["tools"]]
            assert names[-1] == "unit_convert"
            check = client.post("/schema/validate", json={"tool": "unit_convert", "arguments": {"value": 1, "unit": "yd"}})
            assert check.json()["error"]["bad_fields"] == ["unit"]
            run_id = client.post("/agent/runs", json={"model_path": "scripted", "pack": "unit_pack"}).json()["id"]
            view = wait_terminal(client, run_id)
            assert view["status"] == "completed" and view["metrics"]["task_success"] is True
    finally:
        agent.task.packs.PACKS_DIR = original


def test_a_pack_naming_a_tool_the_run_lacks_fails_clearly(tmp_path):
    pack, _ = _unit_pack(tmp_path)
    outcome, _ = run_scripted([], tmp_path, pack=pack)
    assert (outcome.result.status, outcome.result.stop_reason) == ("failed", "runtime_error")
    assert outcome.result.error.code == "pack_invalid" and "unit_convert" in outcome.result.error.message


def test_registry_for_a_pack_keeps_only_its_tools():
    assert registry_for(RATIO.task.tool_names).names == ("calculator", "lookup_fact")


def test_a_run_request_may_narrow_the_packs_tools_but_never_widen_them(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    import agent.task.packs
    from agent.runner.server import RunnerSettings, create_app, scripted_policy_factory

    pack, feet = _unit_pack(tmp_path)
    task = json.loads((pack.root / "task.json").read_text(encoding="utf-8"))
    (pack.root / "task.json").write_text(json.dumps({**task, "mode": "free", "tools": ["calculator"]}), encoding="utf-8")
    packs_dir = tmp_path / "packs"
    shutil.copytree(pack.root, packs_dir / "unit_pack")
    monkeypatch.setattr(agent.task.packs, "PACKS_DIR", packs_dir)
    script = [_free("calculator", {"expression": "100 / 0.3048"}),  # narrowed away: an unknown tool
              _free("unit_convert", {"value": 100, "unit": "m"}),
              json.dumps({"type": "final", "answer": f"100 m is {feet} ft.", "evidence_ids": ["obs-unit_convert-1"]})]
    settings = RunnerSettings(runs_dir=tmp_path / "runs", tools=catalog().register(UNIT_CONVERT),
                              policy_factory=scripted_policy_factory(script), test_policy=True)
    with TestClient(create_app(settings), base_url=BASE_URL) as client:
        base = {"model_path": "scripted", "pack": "unit_pack"}
        widened = client.post("/agent/runs", json={**base, "tools": ["unit_convert", "plot"]})
        assert widened.status_code == 400 and widened.json()["error"]["code"] == "tools_not_in_pack"
        emptied = client.post("/agent/runs", json={**base, "tools": ["calculator"]})
        assert emptied.status_code == 400 and emptied.json()["error"]["code"] == "required_tool_removed"
        run_id = client.post("/agent/runs", json={**base, "tools": ["unit_convert"]}).json()["id"]
        view = wait_terminal(client, run_id)
        invalid = [e for e in view["events"] if e["type"] == "decision.invalid"]
        assert invalid[0]["code"] == "unknown_tool" and "allowed tools: unit_convert" in invalid[0]["error"]
        assert view["status"] == "completed" and view["request"]["tools"] == ["unit_convert"]


def test_a_draft_follows_the_tokens_written_and_stops_where_the_grammar_does():
    from agent.models.backends.llama_cpp_draft import DRAFT_TOKENS, Drafter

    drafter = Drafter([[10, 11, 12, 13, 14], [20, 21]])
    assert drafter.propose(None, 99) == []  # nothing written yet matches
    drafter.written += [5, 11]
    assert drafter.propose(None, 99) == [12, 13, 14]  # after the last token written, in the draft
    assert drafter.propose(None, 2) == [12, 13]  # at most the tokens still allowed

    class Grammar:
        def valid_prefix(self, tokens):
            return 1
    assert drafter.propose(Grammar(), 99) == [12]  # only what the grammar admits
    long = Drafter([list(range(100, 100 + 3 * DRAFT_TOKENS))])
    long.written += [100]
    assert len(long.propose(None, 999)) == DRAFT_TOKENS
