"""The Anthropic client against recorded response shapes (httpx2.MockTransport): tool_use /
tool_result pairing with is_error, the forced tool, ``stop_reason: max_tokens``, 429 and 529, error
events inside a 200 stream before and after output, auth errors, arguments as a JSON string and a
tool call written in the text."""

from __future__ import annotations

import json

import pytest
from served_support import (
    CutStream,
    FakeServer,
    anthropic_error_event,
    anthropic_events,
    anthropic_policy,
    anthropic_reply,
    chain_arguments,
    chain_server,
    error_response,
    events,
    run,
    sse,
)

from agent.contracts.budgets import Sampling
from agent.models.model_policy import DecisionRequest
from agent.prompts.prompting import Branch, PromptState
from agent.tools import registry_for

ARGS = chain_arguments()


def calculator_request() -> DecisionRequest:
    return DecisionRequest(branch=Branch("action", tool="calculator"),
                           state=PromptState(goal="Add 1 and 2.", observations=[], feedback=[], budget_left={}),
                           tools=registry_for(["calculator"]), max_new_tokens=64, sampling=Sampling())


def test_guided_run_completes_with_tool_use_and_tool_result_blocks(tmp_path):
    server = FakeServer(chain_server("anthropic"))
    outcome = run(anthropic_policy(server), tmp_path)
    assert (outcome.result.status, outcome.result.stop_reason) == ("completed", "completed")
    assert outcome.result.metrics.task_success is True
    assert server.urls[0] == "http://127.0.0.1:8998/v1/messages"
    first, last = server.bodies[0], server.bodies[-1]
    assert [t["name"] for t in first["tools"]] == ["knowledge_search", "calculator", "plot", "final_answer"]
    assert all(set(t) == {"name", "description", "input_schema"} for t in first["tools"])
    assert [b["tool_choice"] for b in server.bodies] == [
        {"type": "tool", "name": name, "disable_parallel_tool_use": True}
        for name in ("knowledge_search", "calculator", "plot", "final_answer")]
    assert all(b["stream"] is True and 1 <= b["max_tokens"] <= 256 and "top_p" not in b for b in server.bodies)
    assert isinstance(first["system"], str) and first["messages"][0]["role"] == "user"
    # turns alternate: each tool_use is answered in the next user message, which also holds the step's text
    roles = [m["role"] for m in last["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
    use = last["messages"][1]["content"][0]
    result = last["messages"][2]["content"][0]
    assert use == {"type": "tool_use", "id": "call_obs-knowledge_search-1", "name": "knowledge_search",
                   "input": ARGS["knowledge_search"]}
    assert result["type"] == "tool_result" and result["tool_use_id"] == use["id"] and "is_error" not in result
    assert last["messages"][-1]["content"][-1]["type"] == "text"
    assert all(e["usage"] == {"input_tokens": 120, "output_tokens": 30, "cached_tokens": 0, "forced_tokens": 0, "drafted_tokens": 0,
                                 "restored_tokens": 0}
               for e in events(outcome, "model.completed"))


def test_a_failed_observation_comes_back_as_an_error_result(tmp_path):
    def answer(request, body):
        if len(server.bodies) == 2:  # the calculator step: an expression the tool refuses
            return anthropic_reply("calculator", {"expression": "1 / 0"})
        return chain_server("anthropic")(request, body)

    server = FakeServer(answer)
    outcome = run(anthropic_policy(server), tmp_path)
    assert outcome.result.stop_reason == "completed"
    third = server.bodies[2]
    failed = third["messages"][4]["content"][0]
    assert failed["type"] == "tool_result" and failed["is_error"] is True
    assert failed["tool_use_id"] == "call_obs-calculator-2" and "FAILED" in failed["content"]
    assert third["messages"][3]["content"][0]["input"] == {"expression": "1 / 0"}


def test_max_tokens_is_never_a_final(tmp_path):
    def answer(request, body):
        if body["tool_choice"]["name"] == "final_answer" and not truncated:
            truncated.append(True)
            return anthropic_reply("final_answer", {"answer": ARGS["final_answer"], "evidence_ids": ["obs-plot-3"]},
                                   stop="max_tokens")
        return chain_server("anthropic")(request, body)

    truncated: list[bool] = []
    server = FakeServer(answer)
    outcome = run(anthropic_policy(server), tmp_path)
    assert [e["code"] for e in events(outcome, "decision.invalid")] == ["truncated"]
    assert outcome.result.stop_reason == "completed"


def test_arguments_as_a_json_string_and_a_call_written_in_the_text_are_repaired():
    server = FakeServer([
        anthropic_reply("calculator", json.dumps(json.dumps({"expression": "1 + 2"}))),
        anthropic_reply(text='```json\n{"name": "calculator", "arguments": {"expression": "1 + 2"}}\n```',
                        stop="end_turn"),
    ])
    policy = anthropic_policy(server)
    for _ in range(2):
        candidate = policy.propose(calculator_request())
        assert candidate.decision == {"type": "action", "tool": "calculator", "arguments": {"expression": "1 + 2"}}
        assert candidate.protocol_repairs == 1


def test_plain_text_is_a_fault_the_runtime_repairs():
    server = FakeServer([anthropic_reply(text="The answer is 3.", stop="end_turn")])
    candidate = anthropic_policy(server).propose(calculator_request())
    assert candidate.decision is None and candidate.fault[0] == "no_tool_call"


def test_529_overloaded_is_retried():
    server = FakeServer([error_response(529, "Overloaded", kind="overloaded_error"),
                         anthropic_reply("calculator", {"expression": "2"})])
    policy = anthropic_policy(server)
    assert policy.propose(calculator_request()).decision is not None and policy.attempts == 2


def test_429_with_retry_after_is_honoured():
    seen = []
    server = FakeServer([error_response(429, "rate limited", {"retry-after": "3"}, kind="rate_limit_error"),
                         anthropic_reply("calculator", {"expression": "2"})])
    policy = anthropic_policy(server, wait=lambda seconds, cancel: seen.append(seconds))
    assert policy.propose(calculator_request()).decision is not None and seen == [3.0]


def test_an_overloaded_error_event_before_output_reconnects():
    server = FakeServer([sse(anthropic_events()[:1] + [anthropic_error_event()]),
                         anthropic_reply("calculator", {"expression": "2"})])
    policy = anthropic_policy(server)
    assert policy.propose(calculator_request()).decision is not None and policy.attempts == 2


def test_an_error_event_after_output_ends_the_run(tmp_path):
    head = anthropic_events("knowledge_search", ARGS["knowledge_search"], end=False)
    server = FakeServer([sse(head + [anthropic_error_event()])])
    outcome = run(anthropic_policy(server), tmp_path)
    assert (outcome.result.status, outcome.result.stop_reason, outcome.result.error.code) == (
        "failed", "model_unavailable", "server_error")
    assert len(server.bodies) == 1 and "HTTP 529" in outcome.result.error.message


def test_a_stream_cut_before_output_reconnects_and_after_output_fails():
    before = sse(anthropic_events("calculator", {"expression": "2"})[:1])  # message_start only
    server = FakeServer([CutStream(before), anthropic_reply("calculator", {"expression": "2"})])
    assert anthropic_policy(server).propose(calculator_request()).decision is not None
    after = sse(anthropic_events("calculator", {"expression": "2"})[:3])  # a tool_use block started
    server = FakeServer([CutStream(after), anthropic_reply("calculator", {"expression": "2"})])
    with pytest.raises(Exception) as info:
        anthropic_policy(server).propose(calculator_request())
    assert info.value.code == "network" and len(server.bodies) == 1


@pytest.mark.parametrize("status,kind,message,bucket", [
    (401, "authentication_error", "invalid x-api-key", "auth_failed"),
    (400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum", "context_overflow"),
    (413, "request_too_large", "Request exceeds the maximum allowed number of bytes", "context_overflow"),
    (404, "not_found_error", "model: claude-nonexistent", "bad_request"),
])
def test_errors_that_are_not_retried(status, kind, message, bucket):
    server = FakeServer([error_response(status, message, kind=kind)])
    with pytest.raises(Exception) as info:
        anthropic_policy(server).propose(calculator_request())
    assert info.value.code == bucket and len(server.bodies) == 1


def test_free_mode_uses_auto_and_allows_parallel_tool_use_only_with_read_only_tools(tmp_path):
    server = FakeServer([anthropic_reply("calculator", {"expression": "2"}),
                         anthropic_reply("plot", {"labels": ["a"], "values": [1]})])
    for tools in (["calculator"], ["plot"]):
        request = calculator_request()
        request.branch, request.tools = Branch("free"), registry_for(tools)
        anthropic_policy(server).propose(request)
    # the calculator is read-only: the API's default (parallel tool use) stays; plot writes a chart: one call
    assert [b["tool_choice"] for b in server.bodies] == [{"type": "auto"},
                                                         {"type": "auto", "disable_parallel_tool_use": True}]
