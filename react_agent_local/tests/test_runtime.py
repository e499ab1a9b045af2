"""The runtime loop driven by the scripted test policy: normal chain, recovery, guards, budgets,
terminal matrix, evidence gate, metrics and trace privacy. No model download needed."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agent.models.backends.scripted import ScriptedPolicy, Slow
from agent.contracts.budgets import Budgets, Sampling
from agent.models.model_policy import ModelUnavailable
from agent.task.packs import PACKAGE_ROOT, load_pack
from agent.contracts.budgets import EXPLORE_TEMPERATURE
from agent.prompts.prompting import FAILED_TURN
from agent.core.run import run_agent
from agent.tools import ToolError, catalog, default_registry
from agent.tools.calculator import CALCULATOR_PATTERN
from runtime_helpers import chain_outputs, events_of, run_scripted, types

GOLDEN = Path(__file__).parent / "golden" / "normal_chain.json"
DEFAULT = load_pack(None)
ALT = load_pack("release_hold")
KNOWLEDGE = json.dumps({"query": "batch results and release rule", "top_k": 3})


def chain(answer=None, pack=DEFAULT):
    return chain_outputs(pack, answer)


def normalize(events):
    """Golden-trace normalization: drop times and latencies, replace random artifact ids/hashes."""
    volatile = {"elapsed_ms", "latency_ms", "tool_latency_ms", "model_latency_ms", "total_latency_ms",
                "load_ms", "seconds"}

    def clean(value, key=None):
        if isinstance(value, dict):
            if key == "artifact":
                return {"id": "<artifact>", "media_type": value["media_type"], "bytes": "<bytes>", "sha256": "<sha>"}
            if key == "remaining":
                return {k: v for k, v in value.items() if k != "seconds"}
            return {k: clean(v, k) for k, v in value.items() if k not in volatile}
        if isinstance(value, list):
            return [clean(v) for v in value]
        if key == "artifact_id":
            return "<artifact>"
        return value

    return [clean(e) for e in events]


# -- normal chain -------------------------------------------------------------------------------

def test_normal_chain_matches_golden_trace(tmp_path):
    outcome, _ = run_scripted(chain(), tmp_path)
    assert (outcome.result.status, outcome.result.stop_reason) == ("completed", "completed")
    got = normalize(outcome.events)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    assert got == json.loads(GOLDEN.read_text(encoding="utf-8"))


def test_normal_chain_metrics_and_evidence(tmp_path):
    outcome, policy = run_scripted(chain(), tmp_path)
    result, m = outcome.result, outcome.result.metrics
    assert [o.id for o in result.observations] == ["obs-knowledge_search-1", "obs-calculator-2", "obs-plot-3"]
    assert result.final.evidence_ids == [o.id for o in result.observations]
    assert m.task_success is True and all(m.checks.values())
    assert (m.valid_action_rate, m.tool_argument_accuracy, m.loop_rate) == (1.0, 1.0, 0.0)
    assert m.recovery_rate is None  # nothing failed: N/A, not 0
    assert m.termination_correctness is True
    assert (m.steps, m.model_calls, m.tool_calls, m.action_attempts) == (4, 4, 3, 3)
    assert m.input_tokens == sum(e["usage"]["input_tokens"] for e in events_of(outcome, "model.completed")) > 0
    assert m.cost_units == round((m.input_tokens + 2 * m.output_tokens) / 1000, 4)
    # The artifact exists where the runtime put it, and the trace holds metadata only.
    art = result.observations[2].result["artifact"]
    png = tmp_path / "artifacts" / f"{art['id']}.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size == art["bytes"]
    # The guided prefix: the model only completed argument values and the answer text.
    assert policy.requests[0].prefix.startswith('{"type": "action", "tool": "knowledge_search"')
    assert '"evidence_ids": ["obs-knowledge_search-1", "obs-calculator-2", "obs-plot-3"]' in policy.requests[3].prefix


def test_expected_json_is_not_in_any_prompt(tmp_path):
    outcome, policy = run_scripted(chain(), tmp_path)
    prompts = "\n".join(m["content"] for r in policy.requests for m in r.messages)
    assert "expected.json" not in prompts and "must_include" not in prompts and "release_eligible" not in prompts


def test_the_conversation_is_only_appended_to(tmp_path):
    """Each call's messages are the previous call's, then the model's own Decision, then one new turn:
    nothing already evaluated changes, so a KV cache keeps all of it (issue 14)."""
    outputs = chain()
    outcome, policy = run_scripted(outputs, tmp_path)
    for k, (earlier, later) in enumerate(zip(policy.requests, policy.requests[1:])):
        n = len(earlier.messages)
        assert later.messages[:n] == earlier.messages and len(later.messages) == n + 2
        assert later.messages[n] == {"role": "assistant", "content": earlier.prefix + outputs[k] + earlier.suffix}
    # Each Observation is shown once, in the first turn after it was made; the tools' schemas only
    # in the system message.
    text = "".join(m["content"] for m in policy.requests[-1].messages)
    assert all(text.count(f"[{obs.id}]") == 1 for obs in outcome.result.observations)
    assert text.count('"expression":{') == 1 and policy.requests[-1].messages[0]["content"].count('"expression":{') == 1


def test_an_overlong_history_falls_back_to_one_compact_turn(tmp_path, monkeypatch):
    import agent.prompts.prompting as prompting

    monkeypatch.setattr(prompting, "HISTORY_CHARS", 300)
    outcome, policy = run_scripted(chain(), tmp_path)
    assert outcome.result.stop_reason == "completed"
    last = policy.requests[-1].messages
    assert [m["role"] for m in last] == ["system", "user"]
    assert DEFAULT.task.goal in last[1]["content"]
    assert all(f"[{obs.id}]" in last[1]["content"] for obs in outcome.result.observations)


@pytest.mark.parametrize("pack", [DEFAULT, ALT], ids=["default", "release_hold"])
def test_the_final_turn_states_each_check_worked_out(tmp_path, pack):
    """The check lines give each comparison's outcome, computed from the observed values (not typed
    in): the default pack meets both rules, release_hold misses its average."""
    _, policy = run_scripted(chain(pack=pack), tmp_path, pack=pack)
    turn = policy.requests[-1].messages[-1]["content"]
    lines = re.findall(r"^- [^:]+: (-?[0-9.]+) (>=|<=|>|<|==) (-?[0-9.]+) is (True|False)", turn, re.M)
    assert len(lines) == 2, turn
    ops = {">=": float.__ge__, "<=": float.__le__, ">": float.__gt__, "<": float.__lt__, "==": float.__eq__}
    outcomes = [ops[op](float(left), float(right)) for left, op, right, _ in lines]
    assert [stated == "True" for *_, stated in lines] == outcomes
    assert all(outcomes) is pack.load_expected()["final"]["release_eligible"]
    verdict = re.search(r"^- so the verdict \(every check must be True\): (.+)$", turn, re.M).group(1)
    assert ("not" in verdict) is (not all(outcomes))


# -- Decision repair ---------------------------------------------------------------------------

def test_invalid_json_is_repaired_in_the_same_step(tmp_path):
    outputs = chain()
    outputs.insert(1, '{"expression": "(72 + 78')  # broken JSON, then the repair
    outcome, policy = run_scripted(outputs, tmp_path)
    assert outcome.result.stop_reason == "completed"
    assert "decision.invalid" in types(outcome) and "decision.repaired" in types(outcome)
    assert events_of(outcome, "model.repair.started")[0]["step"] == 2
    assert "(72 + 78" not in "".join(m["content"] for m in policy.requests[2].messages)  # invalid text not echoed
    m = outcome.result.metrics
    assert m.steps == 4 and m.model_calls == 5 and m.recovery_rate == 1.0


def test_repair_exhausted_fails_invalid_decision(tmp_path):
    outcome, _ = run_scripted([KNOWLEDGE, "not json", "still not", "nope"], tmp_path,
                              budgets=Budgets(max_retries=2))
    assert (outcome.result.status, outcome.result.stop_reason) == ("failed", "invalid_decision")
    assert len(events_of(outcome, "decision.invalid")) == 3
    assert outcome.result.metrics.termination_correctness is True
    assert outcome.result.metrics.recovery_rate == 0.0


def test_extra_reasoning_field_is_an_invalid_decision(tmp_path):
    outputs = chain()
    outputs.insert(1, '{"expression": "1 + 1"}, "reasoning": "secret chain of thought"}')
    outcome, _ = run_scripted(outputs, tmp_path)
    invalid = events_of(outcome, "decision.invalid")[0]
    assert invalid["code"] == "unexpected_fields" and invalid["unexpected_fields"] == 1
    assert "secret chain of thought" not in json.dumps(outcome.events)
    assert outcome.result.stop_reason == "completed"


def test_unknown_tool_is_an_invalid_decision_not_a_tool_failure(tmp_path):
    outputs = ['{"type": "action", "tool": "shell", "arguments": {"cmd": "ls"}}',
               '{"type": "action", "tool": "calculator", "arguments": {"expression": "1 + 1"}}']
    outcome, _ = run_scripted(outputs + ['{"type": "final", "answer": "2", "evidence_ids": ["obs-calculator-1"]}'],
                              tmp_path, mode="free", budgets=Budgets(max_steps=2), complete=False)
    assert events_of(outcome, "decision.invalid")[0]["code"] == "unknown_tool"
    assert events_of(outcome, "tool.started")[0]["tool"] == "calculator"
    assert outcome.result.metrics.action_attempts == 1  # the unknown tool never became an action


# -- argument rejection ------------------------------------------------------------------------

@pytest.mark.parametrize("step,bad", [
    (1, {"query": "batches", "top_k": 8}),
    (2, {"formula": "(72 + 78 + 81 + 85) / 4"}),
    (3, {"labels": ["Batch A", "Batch B"], "values": [72, 78, 81], "title": "x"}),
])
def test_invalid_arguments_are_rejected_then_corrected(tmp_path, step, bad):
    outputs = chain()
    outputs.insert(step - 1, json.dumps(bad))
    outcome, _ = run_scripted(outputs, tmp_path)
    rejected = events_of(outcome, "tool.rejected")[0]
    obs = rejected["observation"]
    assert obs["ok"] is False and obs["error"]["code"] == "invalid_arguments"
    assert obs["attempted_arguments"] == bad
    result, m = outcome.result, outcome.result.metrics
    assert result.stop_reason == "completed" and m.task_success is True
    assert m.tool_calls == 3  # a rejection is not a tool call
    assert m.steps == 5 and m.recovery_rate == 1.0 and m.valid_action_rate == 0.75
    # The observation ids count every Observation, rejected ones included.
    assert result.final.evidence_ids[-1] == "obs-plot-4"


def test_rejection_feedback_names_the_field(tmp_path):
    outputs = chain()
    outputs.insert(1, json.dumps({"formula": "1+1"}))
    _, policy = run_scripted(outputs, tmp_path)
    prompt = policy.requests[2].messages[-1]["content"]
    assert "RUNTIME FEEDBACK" in prompt and "formula" in prompt and "expression" in prompt


def test_calculator_errors_become_failed_observations(tmp_path):
    outputs = chain()
    outputs.insert(1, json.dumps({"expression": "1/0"}))
    outputs.insert(2, json.dumps({"expression": "(" * 21 + "1" + ")" * 21}))  # nests deeper than the tool allows
    outcome, _ = run_scripted(outputs, tmp_path)
    failed = [e["observation"]["error"]["code"] for e in events_of(outcome, "tool.observation")
              if not e["observation"]["ok"]]
    assert failed[0] == "calculator_division_by_zero" and failed[1].startswith("calculator_")
    assert outcome.result.stop_reason == "completed"


# -- tool retry and timeouts --------------------------------------------------------------------

def flaky_registry(failures: int, code="knowledge_read_failed", retryable=True, sleep=0.0, timeout=None):
    registry = default_registry()
    real = registry.get("knowledge_search")
    calls = {"n": 0}

    def run(ctx, args, cancel):
        calls["n"] += 1
        if calls["n"] <= failures:
            if sleep:
                time.sleep(sleep)
            raise ToolError(code, "transient read failure (test)", retryable=retryable)
        return real.execute(ctx, args, cancel)

    registry.tools["knowledge_search"] = replace(real, execute=run, timeout_seconds=timeout or real.timeout_seconds,
                                              import_path=None)  # a closure: it runs in a thread
    return registry, calls


def test_retryable_tool_error_then_success(tmp_path):
    registry, calls = flaky_registry(failures=1)
    outcome, _ = run_scripted(chain(), tmp_path, tools=registry)
    assert calls["n"] == 2 and "tool.retry" in types(outcome)
    started = events_of(outcome, "tool.started")
    assert [(e["step"], e["attempt"]) for e in started[:2]] == [(1, 1), (1, 2)]
    m = outcome.result.metrics
    assert m.tool_calls == 4 and m.steps == 4 and m.recovery_rate == 1.0 and m.task_success is True


def test_tool_timeout_is_retried(tmp_path):
    registry = default_registry()
    real = registry.get("knowledge_search")
    calls = {"n": 0}

    def slow_once(ctx, args, cancel):
        calls["n"] += 1
        if calls["n"] == 1:
            time.sleep(0.5)
        return real.execute(ctx, args, cancel)

    registry.tools["knowledge_search"] = replace(real, execute=slow_once, timeout_seconds=0.2, import_path=None)
    outcome, _ = run_scripted(chain(), tmp_path, tools=registry)
    retry = events_of(outcome, "tool.retry")[0]
    assert retry["error"]["code"] == "tool_timeout" and retry["error"]["retryable"] is True
    assert outcome.result.stop_reason == "completed"


def test_retries_exhausted_gives_a_failed_observation(tmp_path):
    registry, calls = flaky_registry(failures=99)
    outcome, _ = run_scripted([KNOWLEDGE, KNOWLEDGE], tmp_path, tools=registry,
                              budgets=Budgets(max_retries=2, repeated_action_limit=2))
    assert calls["n"] == 3  # first attempt + 2 retries, then the same action is blocked by the loop guard
    obs = events_of(outcome, "tool.observation")[0]["observation"]
    assert obs["ok"] is False and obs["error"]["code"] == "knowledge_read_failed"
    assert [e["type"] for e in outcome.events if e["type"].startswith("tool.")].count("tool.retry") == 2
    assert outcome.result.stop_reason == "loop_detected"


def test_total_deadline_hit_mid_tool(tmp_path):
    registry, _ = flaky_registry(failures=1, sleep=5.0, timeout=30)
    started = time.monotonic()
    outcome, _ = run_scripted([KNOWLEDGE], tmp_path, tools=registry, budgets=Budgets(max_seconds=0.6))
    assert time.monotonic() - started < 3
    assert (outcome.result.status, outcome.result.stop_reason) == ("stopped", "timeout")
    assert events_of(outcome, "tool.failed")[0]["error"]["code"] == "deadline_exceeded"


# -- budgets -------------------------------------------------------------------------------------

def test_max_steps(tmp_path):
    outputs = ['{"type": "action", "tool": "calculator", "arguments": {"expression": "1 + %d"}}' % i for i in range(3)]
    outcome, _ = run_scripted(outputs, tmp_path, mode="free", budgets=Budgets(max_steps=3))
    assert (outcome.result.status, outcome.result.stop_reason) == ("stopped", "max_steps")
    assert outcome.result.metrics.steps == 3 and outcome.result.metrics.task_success is False
    assert outcome.result.metrics.termination_correctness is True


def test_tool_budget(tmp_path):
    outcome, _ = run_scripted(chain()[:2], tmp_path, budgets=Budgets(max_tool_calls=2))
    assert outcome.result.stop_reason == "tool_budget"
    assert outcome.result.metrics.tool_calls == 2


def test_tool_budget_counts_retries(tmp_path):
    registry, _ = flaky_registry(failures=5)
    outcome, _ = run_scripted([KNOWLEDGE], tmp_path, tools=registry, budgets=Budgets(max_tool_calls=2))
    assert outcome.result.stop_reason == "tool_budget" and outcome.result.metrics.tool_calls == 2


def test_token_budget(tmp_path):
    outcome, _ = run_scripted(chain()[:1], tmp_path, budgets=Budgets(max_input_tokens=50))
    assert outcome.result.stop_reason == "token_budget"
    assert "tool.started" not in types(outcome)  # stopped after the model call, before dispatch


def test_output_budget_tightens_max_new_tokens(tmp_path):
    outcome, policy = run_scripted(chain(), tmp_path, budgets=Budgets(max_output_tokens=200, decision_max_new_tokens=256))
    assert policy.requests[0].max_new_tokens == 200
    assert policy.requests[1].max_new_tokens < 200


def test_sampling_settings_reach_every_decision_call_and_repairs_stay_greedy(tmp_path):
    sampling = Sampling(temperature=0.7, seed=11, top_p=0.6, top_k=7)
    outcome, policy = run_scripted(["not json", *chain()], tmp_path, sampling=sampling)
    assert outcome.result.status == "completed"
    decisions = [r for r in policy.requests if r.purpose == "decision"]
    assert len(decisions) == 4 and policy.requests[1].purpose == "repair"
    assert {(r.temperature, r.top_p, r.top_k) for r in decisions} == {(0.7, 0.6, 7)}
    # the run's seed, moved on by each call's number (Sampling.for_call)
    assert [r.seed for r in decisions] == [sampling.for_call(i).seed for i in (0, 2, 3, 4)]
    assert policy.requests[1].temperature == 0.0


@pytest.mark.parametrize("bad", [{"top_p": 0.0}, {"top_p": 1.5}, {"top_k": 0}])
def test_sampling_settings_are_validated(bad):
    with pytest.raises(ValueError):
        Sampling(**bad)


def test_free_mode_schema_types_every_choice_and_cites_only_existing_observations(tmp_path):
    actions, answer = free_chain()
    final_text = json.dumps({"type": "final", "evidence_ids": ["obs-knowledge_search-1", "obs-calculator-2",
                                                               "obs-plot-3"], "answer": answer})
    outcome, policy = run_scripted(actions + [final_text], tmp_path, mode="free")
    assert outcome.result.status == "completed"
    first, last = policy.requests[0].value_schema["anyOf"], policy.requests[-1].value_schema["anyOf"]
    # one alternative per tool, each with that tool's own argument schema; no Final before any evidence
    assert [c["properties"]["tool"]["const"] for c in first] == ["knowledge_search", "calculator", "plot"]
    calculator = first[1]["properties"]["arguments"]
    assert calculator["properties"]["expression"]["pattern"] == CALCULATOR_PATTERN
    final = last[-1]["properties"]
    assert final["type"] == {"const": "final"}
    assert final["evidence_ids"]["items"]["enum"] == [o.id for o in outcome.result.observations]
    assert final["answer"]["pattern"].startswith("^The average is ")  # the pack's answer form
    assert policy.requests[-1].prefix == ""  # the model writes the whole Decision itself


def test_timeout_during_model_call(tmp_path):
    outcome, _ = run_scripted([Slow(KNOWLEDGE, 5.0)], tmp_path, budgets=Budgets(max_seconds=0.3))
    assert (outcome.result.status, outcome.result.stop_reason) == ("stopped", "timeout")


# -- loop guards --------------------------------------------------------------------------------

def test_repeated_valid_action_is_not_dispatched(tmp_path):
    action = '{"type": "action", "tool": "calculator", "arguments": {"expression": "1 + 1"}}'
    outcome, _ = run_scripted([action] * 3, tmp_path, mode="free", budgets=Budgets(repeated_action_limit=3))
    assert outcome.result.stop_reason == "loop_detected"
    assert len(events_of(outcome, "tool.started")) == 2  # the third identical action never ran
    guard = events_of(outcome, "guard.loop_detected")[0]
    assert guard["repeated_action"] == {"tool": "calculator", "arguments": {"expression": "1 + 1"}}
    m = outcome.result.metrics
    assert m.loop_rate == round(1 / 3, 4) and m.termination_correctness is True


def test_repeated_invalid_arguments(tmp_path):
    outcome, _ = run_scripted(["{}", "{}"], tmp_path, budgets=Budgets(repeated_action_limit=2))
    guard = events_of(outcome, "guard.no_progress")[0]
    assert guard["code"] == "repeated_invalid_arguments"
    assert outcome.result.stop_reason == "loop_detected" and outcome.result.metrics.tool_calls == 0


def test_repeated_result_digest(tmp_path):
    outputs = ['{"type": "action", "tool": "knowledge_search", "arguments": {"query": "%s"}}' % q
               for q in ("batches", "release rule", "task success")]
    outcome, _ = run_scripted(outputs, tmp_path, mode="free", budgets=Budgets(no_progress_limit=3))
    guard = events_of(outcome, "guard.no_progress")[0]
    assert guard["code"] == "repeated_result" and outcome.result.stop_reason == "loop_detected"
    assert len(events_of(outcome, "tool.started")) == 3


def test_repeated_premature_final(tmp_path):
    final = '{"type": "final", "answer": "79, done", "evidence_ids": ["obs-knowledge_search-1"]}'
    outcome, _ = run_scripted([final, final], tmp_path, mode="free", budgets=Budgets(repeated_action_limit=2))
    assert events_of(outcome, "guard.no_progress")[0]["code"] == "repeated_premature_final"
    assert all(not e["accepted"] for e in events_of(outcome, "final.validated"))
    assert outcome.result.stop_reason == "loop_detected" and outcome.result.final is None


# -- evidence gate and grading -------------------------------------------------------------------

def free_chain(pack=DEFAULT):
    outputs = chain(pack=pack)
    return [json.dumps({"type": "action", "tool": t, "arguments": json.loads(a)})
            for t, a in zip(("knowledge_search", "calculator", "plot"), outputs[:3])], json.loads(outputs[3])


@pytest.mark.parametrize("evidence,problem", [
    (["obs-knowledge_search-1", "obs-calculator-2", "obs-plot-9"], "do not exist"),
    (["obs-knowledge_search-1", "obs-calculator-2"], "latest successful plot"),
])
def test_final_citing_missing_evidence_is_premature(tmp_path, evidence, problem):
    actions, answer = free_chain()
    bad = json.dumps({"type": "final", "answer": answer, "evidence_ids": evidence})
    good = json.dumps({"type": "final", "answer": answer,
                       "evidence_ids": ["obs-knowledge_search-1", "obs-calculator-2", "obs-plot-3"]})
    outcome, policy = run_scripted(actions + [bad, good], tmp_path, mode="free")
    refused = events_of(outcome, "final.validated")[0]
    assert refused["accepted"] is False and problem in refused["message"]
    assert outcome.result.stop_reason == "completed" and outcome.result.metrics.recovery_rate == 1.0
    assert problem in policy.requests[4].messages[-1]["content"]  # the refusal became feedback


def test_final_citing_a_stale_observation(tmp_path):
    actions, answer = free_chain()
    second_calc = json.dumps({"type": "action", "tool": "calculator", "arguments": {"expression": "(72+78+81+85)/4"}})
    stale = json.dumps({"type": "final", "answer": answer,
                        "evidence_ids": ["obs-knowledge_search-1", "obs-calculator-2", "obs-plot-3"]})
    outcome, _ = run_scripted(actions + [second_calc, stale], tmp_path, mode="free",
                              budgets=Budgets(max_steps=5))
    refused = events_of(outcome, "final.validated")[0]
    assert refused["accepted"] is False and "obs-calculator-4" in refused["message"]
    assert outcome.result.stop_reason == "max_steps"


def test_causal_order_violated_completes_but_fails_task_success(tmp_path):
    actions, answer = free_chain()
    # The chart before the calculator (a calculator before the search would compute with values
    # nothing observed yet, and is refused before it runs: test_operands.py).
    reordered = [actions[0], actions[2], actions[1]]
    final = json.dumps({"type": "final", "answer": answer,
                        "evidence_ids": ["obs-knowledge_search-1", "obs-plot-2", "obs-calculator-3"]})
    outcome, _ = run_scripted(reordered + [final], tmp_path, mode="free")
    m = outcome.result.metrics
    assert outcome.result.stop_reason == "completed" and m.termination_correctness is True
    assert m.task_success is False and m.checks["causal_order"] is False
    assert m.tool_argument_accuracy == 1.0


def test_a_calculator_result_that_is_not_the_average_is_asked_again(tmp_path):
    """The record's rule is about the mean of its values (the knowledge tool's expectation): a sum
    without the division is feedback, and guided mode asks the calculator again."""
    outputs = chain()
    data = DEFAULT.load_expected()["knowledge"]["batches"]
    wrong = json.dumps({"expression": " + ".join(str(v) for v in data.values())})
    outcome, policy = run_scripted([outputs[0], wrong] + outputs[1:], tmp_path)
    calcs = [o for o in outcome.result.observations if o.tool == "calculator"]
    assert [c.result["value"] for c in calcs] == [sum(data.values()), sum(data.values()) / len(data)]
    assert f"is not the average of the {len(data)} values" in policy.requests[2].messages[-1]["content"]
    assert "divided by 4" in policy.requests[2].messages[-1]["content"]
    # the re-ask names what is missing right at the instruction, and its grammar is a sum over the count
    assert "Still missing: the average of the 4 values (compute the average" in policy.requests[2].messages[-1]["content"]
    pattern = policy.requests[2].value_schema["properties"]["expression"]["pattern"]
    assert re.match(pattern, json.loads(outputs[1])["expression"]) and not re.match(pattern, json.loads(wrong)["expression"])
    # ... over the observed values, each once: a value picked twice (the 0.5B's habit) is not admitted
    values = [str(v) for v in data.values()]
    twice = "(" + " + ".join([values[0]] + values[:-1]) + f") / {len(values)}"
    assert not re.match(pattern, twice)
    # ... in one layout, so that the re-ask is forced text, not sampled token by token
    assert re.fullmatch(pattern, "(" + " + ".join(values) + f") / {len(values)}")
    assert not re.match(pattern, "(" + "+".join(values) + f")/{len(values)}")
    own = default_registry().get("calculator").compact_schema()
    assert policy.requests[1].value_schema == own  # the first ask has the tool's own schema
    assert outcome.result.final.evidence_ids[1] == calcs[1].id
    m = outcome.result.metrics
    assert outcome.result.stop_reason == "completed" and m.task_success is True
    assert m.tool_argument_accuracy == 0.75  # one of four actions was not right


def test_a_chart_missing_a_value_is_drawn_again(tmp_path):
    outputs = chain()
    plot = json.loads(outputs[2])
    short = json.dumps({**plot, "labels": plot["labels"][:-1], "values": plot["values"][:-1]})
    outcome, policy = run_scripted(outputs[:2] + [short] + outputs[2:], tmp_path)
    assert [o.tool for o in outcome.result.observations] == ["knowledge_search", "calculator", "plot", "plot"]
    feedback = policy.requests[3].messages[-1]["content"]
    assert "obs-plot-3: 3 is not one bar for each of the 4 groups" in feedback
    # drawn again, its bars are the observed groups (the title is still the model's)
    bars = policy.requests[3].value_schema["properties"]
    data = DEFAULT.load_expected()["knowledge"]["batches"]
    assert bars["labels"] == {"const": list(data)} and bars["values"] == {"const": list(data.values())}
    assert "const" not in bars["title"]
    assert outcome.result.stop_reason == "completed" and outcome.result.metrics.task_success is True


def test_a_chart_with_made_up_labels_is_drawn_again_with_the_observed_names(tmp_path):
    """The 0.5B labelled every bar with one group's name, or with names the record never had."""
    outputs = chain()
    plot = json.loads(outputs[2])
    made_up = json.dumps({**plot, "labels": [plot["labels"][0]] * len(plot["labels"])})
    outcome, policy = run_scripted(outputs[:2] + [made_up] + outputs[2:], tmp_path)
    assert [o.tool for o in outcome.result.observations] == ["knowledge_search", "calculator", "plot", "plot"]
    assert "is not the observed group names as labels" in policy.requests[3].messages[-1]["content"]
    names = list(outcome.result.observations[0].result["data"]["batches"])
    assert policy.requests[3].value_schema["properties"]["labels"] == {"const": names}
    assert outcome.result.stop_reason == "completed" and outcome.result.metrics.task_success is True


def test_a_chart_without_its_average_line_is_drawn_again(tmp_path):
    """The 0.5B left ``average`` out (or null) in two of 40 generated packs and the run was accepted."""
    outputs = chain()
    plot = json.loads(outputs[2])
    bare = json.dumps({k: v for k, v in plot.items() if k != "average"})
    outcome, policy = run_scripted(outputs[:2] + [bare] + outputs[2:], tmp_path)
    assert [o.tool for o in outcome.result.observations] == ["knowledge_search", "calculator", "plot", "plot"]
    assert "obs-plot-3: has no value for the calculator's average" in policy.requests[3].messages[-1]["content"]
    average = outcome.result.observations[1].result["value"]
    assert policy.requests[3].value_schema["properties"]["average"] == {"const": average}
    assert "average" in policy.requests[3].value_schema["required"]  # optional for the tool, not here
    assert outcome.result.stop_reason == "completed" and outcome.result.metrics.task_success is True


def test_the_final_is_drafted_with_the_checks_worked_out_and_the_calculator_with_its_expression(tmp_path):
    """Drafts (speed only) where the model copies what the runtime worked out: the calculator's
    expression over the observed numbers, the final's check statements and verdict."""
    outcome, policy = run_scripted(chain(), tmp_path)
    data = outcome.result.observations[0].result["data"]
    values, rule = list(data["batches"].values()), data["release_rule"]
    average, low = sum(values) / len(values), min(values)
    assert policy.requests[1].drafts == (f"({' + '.join(map(str, values))}) / {len(values)}",)
    meets = average >= rule["average_gte"] and low >= rule["every_batch_gte"]
    assert policy.requests[3].drafts == (f"{average:g} >= {rule['average_gte']} is {average >= rule['average_gte']}",
                                         f"{low} >= {rule['every_batch_gte']} is {low >= rule['every_batch_gte']}",
                                         "meets the release rule" if meets else "does not meet the release rule")
    assert not any(policy.requests[1].drafts[0] in m["content"] for m in policy.requests[1].messages)  # never shown


def test_a_rejected_chart_is_asked_again_with_the_observed_groups(tmp_path):
    """The 0.5B drew 4 labels with 1 value, was refused, and wrote the same chart until the loop guard."""
    outputs = chain()
    plot = json.loads(outputs[2])
    short = json.dumps({**plot, "values": plot["values"][:1]})
    outcome, policy = run_scripted(outputs[:2] + [short] + outputs[2:], tmp_path)
    rejected = outcome.result.observations[2]
    assert not rejected.ok and rejected.error.code == "invalid_arguments"
    # The first ask is the model's own; the ask after the rejection is narrowed to the observed groups.
    assert "const" not in policy.requests[2].value_schema["properties"]["labels"]
    batches = outcome.result.observations[0].result["data"]["batches"]
    # ... though the first ask offers them as a draft (decoding speed only), in the model's JSON layout
    assert f'"labels": {json.dumps(list(batches))}' in policy.requests[2].drafts
    assert f'"values": {json.dumps(list(batches.values()))}' in policy.requests[2].drafts
    assert policy.requests[3].drafts == ()  # narrowed to the groups instead
    narrowed = policy.requests[3].value_schema["properties"]
    assert narrowed["labels"] == {"const": list(batches)} and narrowed["values"] == {"const": list(batches.values())}
    assert narrowed["average"] == {"const": outcome.result.observations[1].result["value"]}
    assert outcome.result.stop_reason == "completed" and outcome.result.metrics.task_success is True


def test_a_final_over_a_wrong_average_is_refused_in_free_mode(tmp_path):
    actions, answer = free_chain()
    actions[1] = json.dumps({"type": "action", "tool": "calculator", "arguments": {"expression": "72 + 78 + 81 + 85"}})
    final = json.dumps({"type": "final", "answer": answer,
                        "evidence_ids": ["obs-knowledge_search-1", "obs-calculator-2", "obs-plot-3"]})
    outcome, _ = run_scripted(actions + [final] * 3, tmp_path, mode="free")
    refused = events_of(outcome, "final.validated")[0]
    assert not refused["accepted"] and "calculator result 316 is not the average of the 4 values" in refused["message"]
    assert outcome.result.stop_reason == "loop_detected" and outcome.result.metrics.task_success is False


def test_a_final_with_false_claims_is_refused_and_answered_again(tmp_path):
    right = chain()[3]
    wrong = [json.dumps("The average is 79 and the lowest batch value is 72. Check: average 79 >= 78 is True; "
                        "lowest 72 >= 70 is True. So it does not meet the release rule."),
             json.dumps("The average is 79 and the lowest batch value is 72. Check: average 79 >= 78 is True; "
                        "lowest 79 >= 70 is True. So it meets the release rule."),
             ]
    outcome, policy = run_scripted(chain()[:3] + wrong + [right], tmp_path)
    refused = [e for e in events_of(outcome, "final.validated") if not e["accepted"]]
    assert [e["false_claims"] for e in refused] == [1, 1]
    assert "verdict contradicts the checks" in refused[0]["message"]
    assert "compares the wrong value with 70" in refused[1]["message"] and "is 72" in refused[1]["message"]
    # The refusal reaches the model as feedback; the third Final is accepted.
    assert "verdict contradicts" in policy.requests[4].messages[-1]["content"]
    # the first Final is the policy's likeliest; after a refusal the next ones are sampled more widely
    assert policy.requests[3].temperature == 0.0
    assert [r.temperature for r in policy.requests[4:]] == [EXPLORE_TEMPERATURE] * 2
    # ... and they are not shown the refused answers, which they would copy; the earlier actions stay
    later = "\n".join(m["content"] for m in policy.requests[5].messages)
    assert "So it does not meet the release rule" not in later and later.count(FAILED_TURN) == 2
    assert '"tool": "calculator"' in later
    m = outcome.result.metrics
    assert outcome.result.stop_reason == "completed" and m.task_success is True and m.recovery_rate == 1.0


def test_a_final_that_leaves_a_check_out_is_refused(tmp_path):
    """Seen with the 0.5B on a generated pack: both stated comparisons were the average's ("lowest 79
    >= 79"), each true, the verdict right; the floor check (64 >= 60) was never stated."""
    copied = json.dumps("The average is 79 and the lowest batch value is 79. Check: average 79 >= 78 is True; "
                        "lowest 79 >= 78 is True. So it meets the release rule.")
    outcome, _ = run_scripted(chain()[:3] + [copied, chain()[3]], tmp_path)
    refused = [e for e in events_of(outcome, "final.validated") if not e["accepted"]]
    assert len(refused) == 1 and "does not state the lowest" in refused[0]["message"]
    assert "72 >= 70 (every_batch_gte)" in refused[0]["message"]
    assert outcome.result.stop_reason == "completed" and outcome.result.metrics.task_success is True


def test_repeated_false_claims_stop_the_run(tmp_path):
    wrong = json.dumps("The average is 79 and the lowest batch value is 72. Check: average 79 >= 78 is False; "
                       "lowest 72 >= 70 is True. So it does not meet the release rule.")
    outcome, _ = run_scripted(chain()[:3] + [wrong] * 3, tmp_path)
    # an honest end of its own, not the loop guard's: the candidate comes back marked unverified
    assert (outcome.result.status, outcome.result.stop_reason) == ("stopped", "final_unverified")
    guard = events_of(outcome, "guard.no_progress")[0]
    assert guard["code"] == "repeated_false_claims" and guard["count"] == 3
    assert outcome.result.metrics.task_success is False and outcome.result.final is None
    refused = events_of(outcome, "final.validated")
    unverified = outcome.result.unverified
    assert unverified.answer == json.loads(wrong) and unverified.unverified
    assert refused[-1]["message"].endswith("; ".join(unverified.unverified)[-100:])
    finished = events_of(outcome, "run.finished")[0]
    assert finished["final"] is None and finished["unverified"]["answer"] == unverified.answer


# -- the alternative pack -------------------------------------------------------------------------

def test_alternative_pack_runs_and_is_graded_through_the_same_code(tmp_path):
    outcome, policy = run_scripted(chain(pack=ALT), tmp_path, pack=ALT)
    expected = ALT.load_expected()
    m = outcome.result.metrics
    assert outcome.result.stop_reason == "completed" and m.task_success is True, m.checks
    data = outcome.result.observations[0].result["data"]
    assert data["batches"] == expected["knowledge"]["batches"] != DEFAULT.load_expected()["knowledge"]["batches"]
    assert outcome.result.observations[1].result["value"] == expected["calculator"]["value"]
    assert expected["final"]["release_eligible"] is False
    assert ALT.task.goal in policy.requests[0].messages[-1]["content"]


def test_alternative_pack_refuses_the_default_packs_answer(tmp_path):
    answer = "The average is 79 and the lowest is 72, so it meets the release rule."
    outcome, _ = run_scripted(chain(answer, pack=ALT) + [json.dumps(answer)] * 2, tmp_path, pack=ALT)
    refused = events_of(outcome, "final.validated")
    assert all(not e["accepted"] for e in refused) and "79 appears in no cited observation" in refused[0]["message"]
    assert outcome.result.stop_reason == "final_unverified" and outcome.result.metrics.task_success is False
    assert outcome.result.final is None and outcome.result.unverified.answer == answer


def test_the_grader_fails_a_true_but_wrong_check(tmp_path):
    """A Final can only state wrong checks when the runtime has no checks to hold it to; the grader
    (R-MET) still fails it: 79 >= 70 is true, but the floor is about the lowest value, 72."""
    from agent.core.metrics import comparisons_right

    assert comparisons_right("Check: 79 >= 78 is True; 72 >= 70 is True.", [[79, ">=", 78], [72, ">=", 70]])
    assert not comparisons_right("Check: 79 >= 78 is True; 79 >= 70 is True.", [[79, ">=", 78], [72, ">=", 70]])
    assert not comparisons_right("Check: 64 >= 78 is True.", [])


# -- cancellation and the terminal matrix ---------------------------------------------------------

def test_cancel_while_running(tmp_path):
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    outcome, _ = run_scripted([KNOWLEDGE, Slow(chain()[1], 10.0)], tmp_path, cancel=cancel)
    assert (outcome.result.status, outcome.result.stop_reason) == ("cancelled", "cancelled")
    assert outcome.result.metrics.termination_correctness is True and outcome.result.metrics.task_success is False


def test_model_unavailable_while_loading(tmp_path):
    def loader():
        raise ModelUnavailable("model 'qwen.gguf' is not a GGUF file")

    outcome = run_agent(DEFAULT, loader, Budgets(), artifact_dir=tmp_path)
    assert (outcome.result.status, outcome.result.stop_reason) == ("failed", "model_unavailable")
    assert outcome.result.metrics is None and outcome.events[-1]["metrics"] is None
    assert [e["type"] for e in outcome.events] == ["run.started", "model.load.started", "model.load.failed", "run.finished"]


def test_policy_crash_is_a_runtime_error_with_run_finished(tmp_path):
    class Broken:
        description = ScriptedPolicy([]).description

        def propose(self, request):
            raise RuntimeError("boom")

    outcome = run_agent(DEFAULT, Broken(), Budgets(), artifact_dir=tmp_path)
    assert (outcome.result.status, outcome.result.stop_reason) == ("failed", "runtime_error")
    assert outcome.events[-1]["type"] == "run.finished" and outcome.result.metrics is None


def test_zero_denominators_are_null(tmp_path):
    outcome, _ = run_scripted(["not json", "no", "nope"], tmp_path)
    m = outcome.result.metrics
    assert m.action_attempts == 0
    assert m.valid_action_rate is None and m.tool_argument_accuracy is None and m.loop_rate is None
    assert m.recovery_rate == 0.0  # one registered recoverable failure, none recovered


# -- trace ---------------------------------------------------------------------------------------

def test_no_absolute_path_or_raw_model_text_in_any_event(tmp_path):
    secret = "PRIVATE-MODEL-TEXT-4242"
    outputs = chain(f"The average is 79, the lowest 72, meets the release rule. /home/alice/notes {secret}")
    outputs.insert(0, '{"query": "x"} trailing ' + secret)
    outcome, _ = run_scripted(outputs, tmp_path)
    dump = json.dumps(outcome.events)
    assert str(tmp_path) not in dump and str(PACKAGE_ROOT) not in dump and "/home/alice" not in dump
    assert "trailing " + secret not in dump
    for event in outcome.events:
        for key in ("seq", "type", "step", "attempt", "phase", "elapsed_ms"):
            assert key in event
    completed = events_of(outcome, "model.completed")
    assert all(len(e["output_sha256"]) == 64 for e in completed)


def test_trace_is_capped_and_keeps_run_finished(tmp_path, monkeypatch):
    """A real run of ~300 events through a trace capped at 60: the oldest detail is dropped, the
    sequence stays monotonic and run.finished is kept (the product's cap is 800)."""
    import functools

    import agent.core.runtime
    from agent.contracts.trace import MAX_EVENTS, Trace

    assert MAX_EVENTS == 800
    monkeypatch.setattr(agent.core.runtime, "Trace", functools.partial(Trace, max_events=60))
    action = '{"type": "action", "tool": "calculator", "arguments": {"expression": "1 + %d"}}'
    outputs = [action % i for i in range(50)]
    outcome, _ = run_scripted(outputs, tmp_path, mode="free",
                              budgets=Budgets(max_steps=50, max_tool_calls=50, no_progress_limit=8,
                                              max_input_tokens=1_000_000))
    events = outcome.events
    assert outcome.result.stop_reason == "max_steps" and len(events) == 60
    assert events[-1]["type"] == "run.finished" and events[-1]["trace_dropped"] > 200
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and seqs[-1] == 60 + events[-1]["trace_dropped"]


def test_committed_schemas_match_contracts():
    from agent.tools.schemas import check_schemas

    assert check_schemas() == [], "run: python -m agent schemas --write"


def test_model_visible_schemas_keep_every_required_property():
    for tool in catalog():
        schema = tool.compact_schema()
        assert set(schema["properties"]) == set(tool.args_model.model_fields), tool.name
        assert set(schema["required"]) <= set(schema["properties"]), tool.name


def test_answer_form_becomes_the_final_value_schema(tmp_path):
    import re

    from agent.prompts.prompting import answer_form_pattern

    form = DEFAULT.task.answer_form
    assert form and "{number}" in form
    pattern = answer_form_pattern(form)
    filled = form.replace("{number}", "79", 1).replace("{number}", "72.5")
    filled = re.sub(r"\{number\}", "1", filled)
    filled = filled.replace("{True|False}", "True").replace("{meets|does not meet}", "does not meet")
    assert re.match(pattern, filled)
    assert not re.match(pattern, filled.replace("does not meet", "surely meets"))
    assert not re.match(pattern, '{"average": 79}')
    outputs = chain()
    _, policy = run_scripted(outputs, tmp_path)
    final_request = policy.requests[3]
    # In the run, a number slot admits only numbers the cited observations hold.
    constrained = final_request.value_schema["pattern"]
    assert re.match(constrained, json.loads(outputs[3]))
    assert not re.match(constrained, json.loads(outputs[3]).replace("72 >=", "71 >="))
    assert form in final_request.messages[-1]["content"]


def test_trace_redaction_keeps_arithmetic_and_removes_paths(tmp_path):
    from agent.contracts.trace import redact_text

    outputs = chain()
    outputs[1] = json.dumps({"expression": "((72 + 78 + 81 + 85)/4)/1"})
    outcome, _ = run_scripted(outputs, tmp_path)
    started = [e for e in events_of(outcome, "tool.started") if e["tool"] == "calculator"][0]
    assert started["arguments"]["expression"] == "((72 + 78 + 81 + 85)/4)/1"
    assert redact_text("model at /home/alice/models/q.gguf and C:\\Users\\bob\\q.gguf") == "model at <path> and <path>"


def test_a_long_model_call_shows_progress_counts_never_text(tmp_path, monkeypatch):
    """While a model writes, the trace gets ``model.progress`` events (characters so far), at most one
    per PROGRESS_SECONDS, and none of them holds the text itself."""
    from agent.models import model_call

    monkeypatch.setattr(model_call, "PROGRESS_SECONDS", 0.2)
    outputs = chain_outputs(load_pack(None))
    outcome, _ = run_scripted([Slow(outputs[0], 1.2), *outputs[1:]], tmp_path)
    assert outcome.result.status == "completed"
    progress = events_of(outcome, "model.progress")
    assert 3 <= len(progress) <= 7 and all(e["step"] == 1 and e["kind"] == "text" for e in progress)
    chars = [e["chars"] for e in progress]
    assert chars == sorted(chars) and 0 < chars[-1] <= len(outputs[0])
    assert all(set(e) == {"seq", "type", "step", "attempt", "phase", "elapsed_ms", "kind", "chars"} for e in progress)
    completed = events_of(outcome, "model.completed")[0]["seq"]
    assert all(e["seq"] < completed for e in progress)  # nothing after the call ended


def test_a_chart_with_the_wrong_average_is_asked_again_with_the_calculator_value_in_its_grammar(tmp_path):
    outputs = chain()
    plot = json.loads(outputs[2])
    wrong = json.dumps({**plot, "average": plot["average"] + 65})
    outcome, policy = run_scripted(outputs[:2] + [wrong] + outputs[2:], tmp_path)
    assert [o.tool for o in outcome.result.observations] == ["knowledge_search", "calculator", "plot", "plot"]
    calculator = outcome.result.observations[1].result["value"]
    asked = policy.requests[3]
    assert "Still missing: the calculator's average (put the calculator's value into average)" in asked.messages[-1]["content"]
    assert asked.value_schema["properties"]["average"] == {"const": calculator}  # resolved from the evidence
    assert asked.value_schema["properties"]["values"] == policy.requests[2].value_schema["properties"]["values"]
    assert outcome.result.stop_reason == "completed" and outcome.result.metrics.task_success is True


def test_each_model_call_of_a_seeded_run_draws_with_its_own_seed(tmp_path):
    """One seed for every call drew the same tokens for the same prompt: re-asks answered as before."""
    outcome, policy = run_scripted(chain(), tmp_path, sampling=Sampling(temperature=0.7, seed=5))
    seeds = [r.seed for r in policy.requests]
    assert seeds[0] == 5 and len(set(seeds)) == len(seeds)
    # reproducible from the run's seed
    _, again = run_scripted(chain(), tmp_path / "again", sampling=Sampling(temperature=0.7, seed=5))
    assert [r.seed for r in again.requests] == seeds
    assert Sampling(temperature=0.7).for_call(3).seed is None  # unseeded stays unseeded


def test_in_free_mode_a_final_with_a_number_no_observation_holds_asks_for_evidence_before_the_next(tmp_path):
    actions, answer = free_chain()
    cited = ["obs-knowledge_search-1", "obs-calculator-2", "obs-plot-3"]
    invented = json.dumps({"type": "final", "answer": answer.replace("79", "81.5", 1), "evidence_ids": cited})
    good = json.dumps({"type": "final", "answer": answer, "evidence_ids": ["obs-knowledge_search-4", "obs-calculator-2",
                                                                           "obs-plot-3"]})
    outcome, policy = run_scripted(actions + [invented, actions[0], good], tmp_path, mode="free")
    refused = events_of(outcome, "final.validated")[0]
    assert not refused["accepted"] and "appears in no cited observation" in refused["message"]

    def offers_final(request) -> bool:
        return any(c["properties"]["type"].get("const") == "final" for c in request.value_schema["anyOf"])

    assert offers_final(policy.requests[3]) and not offers_final(policy.requests[4])  # tools only, once
    assert offers_final(policy.requests[5])
    assert outcome.result.stop_reason == "completed"


def test_a_final_stating_one_facts_number_under_another_facts_name_is_refused(tmp_path):
    """A session answered "Graz population is 2301910" citing the Leeds lookup that holds 2301910: the
    number was in the evidence, under another fact's name (``attribution.py``). Here the other fact
    is known only from an Observation the Final does not cite."""
    pack = load_pack("population_ratio")
    facts = json.loads((pack.knowledge_dir / "facts.json").read_text(encoding="utf-8"))["facts"]
    first, second = pack.task.subgoals["lookup_fact"]
    other = next(name for name in facts if name not in (first, second))
    a, b = facts[first]["value"], facts[second]["value"]
    ratio = round(a / b, 4)

    def lookup(name: str) -> str:
        return json.dumps({"type": "action", "tool": "lookup_fact", "arguments": {"query": name}})

    actions = [lookup(first), lookup(second), lookup(other),
               json.dumps({"type": "action", "tool": "calculator", "arguments": {"expression": f"{a} / {b}"}})]
    cited = ["obs-lookup_fact-1", "obs-lookup_fact-2", "obs-calculator-4"]
    swapped = json.dumps({"type": "final", "answer": f"{other}为{b}，比值为{ratio}。", "evidence_ids": cited})
    right = json.dumps({"type": "final", "answer": f"{second}为{b}，比值为{ratio}。",
                        "evidence_ids": ["obs-lookup_fact-1", "obs-lookup_fact-5", "obs-calculator-4"]})
    outcome, policy = run_scripted(actions + [swapped, lookup(second), right], tmp_path, pack=pack, mode="free")
    refused, accepted = events_of(outcome, "final.validated")
    assert not refused["accepted"] and f"the number {b} is the value of '{second}'" in refused["message"]
    assert other in refused["message"]
    assert accepted["accepted"] and outcome.result.stop_reason == "completed"

    def offers_final(request) -> bool:
        return any(c["properties"]["type"].get("const") == "final" for c in request.value_schema["anyOf"])

    assert not offers_final(policy.requests[5])  # evidence first, as for a number no Observation holds


def test_a_step_the_grammar_could_not_constrain_says_so_in_its_trace(tmp_path):
    """A schema past what the grammar compiler takes runs constrained less (``relaxed``) or not at all
    (``none``); its model.completed event says which, so an invalid Decision that follows is explained."""
    from dataclasses import replace as with_fields

    levels = iter(["none", "relaxed"])

    class Partly(ScriptedPolicy):
        def generate(self, request):
            generation = super().generate(request)
            return with_fields(generation, grammar=next(levels, "full"))

    policy = Partly(chain())
    outcome = run_agent(load_pack(None), policy, Budgets(), artifact_dir=tmp_path / "artifacts")
    assert outcome.result.stop_reason == "completed"
    completed = events_of(outcome, "model.completed")
    assert [e.get("grammar") for e in completed] == ["none", "relaxed"] + [None] * (len(completed) - 2)
