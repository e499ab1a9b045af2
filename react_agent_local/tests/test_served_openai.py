"""The OpenAI-compatible client against recorded response shapes (httpx2.MockTransport): the tool
protocol end to end through the real runtime, and every edge case of seed 001/002 -- 429 with
Retry-After, 5xx, auth, context overflow, streams cut before and after output, stalls, malformed
arguments, arguments as a JSON string, a tool call written in the content, parallel calls,
``finish_reason: length``, cancel and deadline."""

from __future__ import annotations

import json
import threading
import time

import httpx2
import pytest
from served_support import (
    CutStream,
    FakeServer,
    StallStream,
    chain_arguments,
    chain_server,
    error_response,
    events,
    openai_events,
    openai_policy,
    openai_reply,
    run,
    sse,
)

from agent.contracts.budgets import Budgets, Sampling
from agent.models.model_policy import DecisionRequest
from agent.prompts.prompting import Branch, PromptState
from agent.tools import registry_for

ARGS = chain_arguments()


def calculator_request(**overrides) -> DecisionRequest:
    fields = dict(branch=Branch("action", tool="calculator"),
                  state=PromptState(goal="Add 1 and 2.", observations=[], feedback=[], budget_left={"steps": 3}),
                  tools=registry_for(["calculator"]), max_new_tokens=64, sampling=Sampling())
    fields.update(overrides)
    return DecisionRequest(**fields)


def waits() -> tuple[list[float], callable]:
    seen: list[float] = []

    def wait(seconds, cancel):
        seen.append(seconds)
        return cancel.is_set()

    return seen, wait


# -- the protocol, end to end ---------------------------------------------------------------------

def test_guided_run_completes_through_native_tool_calls(tmp_path):
    server = FakeServer(chain_server("openai"))
    outcome = run(openai_policy(server), tmp_path)
    assert (outcome.result.status, outcome.result.stop_reason) == ("completed", "completed")
    assert outcome.result.metrics.task_success is True
    first, second, last = server.bodies[0], server.bodies[1], server.bodies[-1]
    # tools: the run's registry plus final_answer, as OpenAI function definitions
    names = [t["function"]["name"] for t in first["tools"]]
    assert names == ["knowledge_search", "calculator", "plot", "final_answer"]
    assert all(t["type"] == "function" and set(t["function"]) == {"name", "description", "parameters"}
               for t in first["tools"])
    # a guided branch forces its tool; parallel calls are off; every call is bounded and streamed
    assert [b["tool_choice"]["function"]["name"] for b in server.bodies] == [
        "knowledge_search", "calculator", "plot", "final_answer"]
    assert all(b["parallel_tool_calls"] is False and b["stream"] is True and 1 <= b["max_tokens"] <= 256
               for b in server.bodies)
    assert first["stream_options"] == {"include_usage": True} and first["temperature"] == 0.0
    # an earlier Observation comes back as the call (with the model's own arguments) and its result
    assistant, tool = second["messages"][2], second["messages"][3]
    assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["id"] == "call_obs-knowledge_search-1"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == ARGS["knowledge_search"]
    assert tool == {"role": "tool", "tool_call_id": "call_obs-knowledge_search-1",
                    "content": tool["content"]} and tool["content"].startswith("[obs-knowledge_search-1] knowledge_search ok:")
    assert [m["role"] for m in last["messages"]] == ["system", "user"] + ["assistant", "tool"] * 3 + ["user"]
    # the guided Final may cite only the evidence the runtime chose, in the pack's answer form
    answer_schema = last["tools"][-1]["function"]["parameters"]["properties"]["answer"]
    assert "pattern" in answer_schema
    completed = events(outcome, "model.completed")
    assert all(e["usage"]["input_tokens"] == 120 and e["usage"]["output_tokens"] == 30 for e in completed)
    assert all(e["protocol_repairs"] == 0 for e in completed)


def test_streamed_tool_arguments_show_as_progress_counts_not_text(tmp_path, monkeypatch):
    from agent.models import model_call

    monkeypatch.setattr(model_call, "PROGRESS_SECONDS", 0.0)  # every delta becomes an event
    outcome = run(openai_policy(FakeServer(chain_server("openai"))), tmp_path)
    assert outcome.result.status == "completed"
    progress = [e for e in outcome.events if e["type"] == "model.progress"]
    by_step = {e["step"]: e["chars"] for e in progress}  # the last count of each call
    assert sorted(by_step) == [1, 2, 3, 4] and all(e["kind"] == "arguments" for e in progress)
    assert by_step[2] == len(json.dumps(ARGS["calculator"]))  # every argument character, counted
    assert not any("text" in e or "arguments" in e for e in progress)


def test_free_mode_uses_auto_and_recovers_tool_calls_written_in_the_content(tmp_path):
    """Qwen-Coder writes its call as a ```json block in content: recovered, and counted as a repair."""
    order = iter(["knowledge_search", "calculator", "plot"])

    def answer(request, body):
        assert body["tool_choice"] == "auto"
        tool = next(order, "final_answer")
        if tool == "final_answer":
            ids = [m["tool_call_id"].removeprefix("call_") for m in body["messages"] if m["role"] == "tool"]
            return openai_reply("final_answer", {"answer": ARGS["final_answer"], "evidence_ids": ids})
        text = "```json\n" + json.dumps({"name": tool, "arguments": ARGS[tool]}) + "\n```"
        return openai_reply(text=text, finish="stop")

    server = FakeServer(answer)
    outcome = run(openai_policy(server), tmp_path, mode="free")
    assert outcome.result.stop_reason == "completed" and outcome.result.metrics.task_success is True
    repairs = [e["protocol_repairs"] for e in events(outcome, "model.completed")]
    assert repairs == [1, 1, 1, 0]
    assert "pattern" not in server.bodies[0]["tools"][-1]["function"]["parameters"]["properties"]["answer"]


def test_hermes_tool_call_tags_and_a_double_encoded_arguments_string_are_repaired():
    server = FakeServer([
        openai_reply(text='<tool_call>\n{"name": "calculator", "arguments": "{\\"expression\\": \\"1 + 2\\"}"}\n</tool_call>',
                     finish="stop"),
        openai_reply("calculator", json.dumps(json.dumps({"expression": "1 + 2"}))),
    ])
    policy = openai_policy(server)
    for _ in range(2):
        candidate = policy.propose(calculator_request())
        assert candidate.decision == {"type": "action", "tool": "calculator", "arguments": {"expression": "1 + 2"}}
        assert candidate.fault is None and candidate.protocol_repairs >= 1


def test_llama_cpp_python_stream_repeating_the_name_and_sending_no_usage():
    server = FakeServer([openai_reply("calculator", {"expression": "1 + 2"}, repeat_name=True, usage=None, parts=5)])
    candidate = openai_policy(server).propose(calculator_request())
    assert candidate.decision["tool"] == "calculator" and candidate.protocol_repairs == 0
    assert candidate.input_tokens > 0 and candidate.output_tokens > 0  # estimated


def test_parallel_calls_use_the_first_and_count_a_repair():
    server = FakeServer([openai_reply("calculator", {"expression": "1 + 2"}, calls=2)])
    candidate = openai_policy(server).propose(calculator_request())
    assert candidate.decision["arguments"] == {"expression": "1 + 2"} and candidate.protocol_repairs == 1


def test_malformed_arguments_are_an_invalid_decision_that_is_repaired(tmp_path):
    replies = iter([openai_reply("knowledge_search", '{"query": "batch results'),  # not JSON
                    openai_reply(text="I will search the knowledge base.", finish="stop")])  # no call at all

    def answer(request, body):
        reply = next(replies, None)
        return reply if reply is not None else chain_server("openai")(request, body)

    server = FakeServer(answer)
    outcome = run(openai_policy(server), tmp_path)
    assert outcome.result.stop_reason == "completed"
    invalid = events(outcome, "decision.invalid")
    assert [e["code"] for e in invalid] == ["invalid_json", "no_tool_call"]
    assert events(outcome, "decision.repaired")[0]["repairs"] == 2
    repair_prompt = server.bodies[1]["messages"][-1]["content"]
    assert "YOUR PREVIOUS REPLY WAS REJECTED" in repair_prompt and "invalid_json" in repair_prompt
    assert server.bodies[1]["temperature"] == 0.0


def test_length_is_never_a_decision_even_with_a_complete_call(tmp_path):
    def answer(request, body):
        if len(server.bodies) == 1:
            return openai_reply("knowledge_search", ARGS["knowledge_search"], finish="length")
        return chain_server("openai")(request, body)

    server = FakeServer(answer)
    outcome = run(openai_policy(server), tmp_path)
    assert events(outcome, "decision.invalid")[0]["code"] == "truncated"
    assert events(outcome, "model.completed")[0]["finish_reason"] == "length"
    assert outcome.result.stop_reason == "completed"


def test_strict_tools_send_strict_schemas_and_drop_the_nulls():
    server = FakeServer([openai_reply("knowledge_search", {"query": "batches", "top_k": None})])
    request = calculator_request(branch=Branch("action", tool="knowledge_search"),
                                 tools=registry_for(["knowledge_search"]))
    candidate = openai_policy(server, spec={"strict_tools": True}).propose(request)
    assert candidate.decision["arguments"] == {"query": "batches"}
    function = server.bodies[0]["tools"][0]["function"]
    assert function["strict"] is True
    params = function["parameters"]
    assert params["required"] == ["query", "top_k"] and params["additionalProperties"] is False
    assert params["properties"]["top_k"]["anyOf"][1] == {"type": "null"}


# -- retries and error buckets ------------------------------------------------------------------

def test_429_honours_retry_after_then_succeeds():
    seen, wait = waits()
    server = FakeServer([error_response(429, "slow down", {"retry-after": "2"}),
                         openai_reply("calculator", {"expression": "1 + 2"})])
    policy = openai_policy(server, wait=wait)
    assert policy.propose(calculator_request()).decision["tool"] == "calculator"
    assert seen == [2.0] and policy.attempts == 2


def test_rate_limited_after_three_retries_ends_the_run_with_its_bucket(tmp_path):
    seen, wait = waits()
    server = FakeServer([error_response(429, "slow down", {"retry-after-ms": "10"}) for _ in range(4)])
    outcome = run(openai_policy(server, wait=wait), tmp_path)
    assert (outcome.result.status, outcome.result.stop_reason) == ("failed", "model_unavailable")
    assert outcome.result.error.code == "rate_limited" and "HTTP 429" in outcome.result.error.message
    assert len(server.bodies) == 4 and seen == [0.01, 0.01, 0.01]
    assert events(outcome, "model.failed")[0]["code"] == "rate_limited"


@pytest.mark.parametrize("status", [500, 502, 503, 529])
def test_server_errors_are_retried(status):
    server = FakeServer([error_response(status), error_response(status), openai_reply("calculator", {"expression": "2"})])
    policy = openai_policy(server)
    assert policy.propose(calculator_request()).decision is not None and policy.attempts == 3


def test_server_error_four_times_is_a_server_error():
    server = FakeServer([error_response(503) for _ in range(4)])
    with pytest.raises(Exception) as info:
        openai_policy(server).propose(calculator_request())
    assert info.value.code == "server_error" and len(server.bodies) == 4


@pytest.mark.parametrize("status,message,bucket,stop_reason", [
    (401, "Incorrect API key provided", "auth_failed", "model_unavailable"),
    (403, "forbidden", "auth_failed", "model_unavailable"),
    (400, "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens",
     "context_overflow", "model_unavailable"),
    (400, "Requested tokens (9000) exceed context window of 8192", "context_overflow", "model_unavailable"),
    (404, "The model `qwen` does not exist", "bad_request", "runtime_error"),
    (422, "tools.0.function.name: field required", "bad_request", "runtime_error"),
])
def test_errors_that_are_not_retried(tmp_path, status, message, bucket, stop_reason):
    server = FakeServer([error_response(status, message)])
    outcome = run(openai_policy(server), tmp_path)
    assert len(server.bodies) == 1
    assert (outcome.result.status, outcome.result.stop_reason, outcome.result.error.code) == (
        "failed", stop_reason, bucket)
    assert outcome.events[-1]["type"] == "run.finished"


def test_connection_refused_is_network_after_three_retries():
    def refuse(request, body):
        raise httpx2.ConnectError("connection refused")

    server = FakeServer(refuse)
    with pytest.raises(Exception) as info:
        openai_policy(server).propose(calculator_request())
    assert info.value.code == "network" and len(server.bodies) == 4


def test_a_stream_cut_before_any_output_is_reopened():
    head = sse(openai_events("calculator", {"expression": "2"})[:1])  # only the role chunk: no output yet
    server = FakeServer([CutStream(head), CutStream(b""), openai_reply("calculator", {"expression": "2"})])
    policy = openai_policy(server)
    assert policy.propose(calculator_request()).decision["arguments"] == {"expression": "2"}
    assert policy.attempts == 3


def test_a_stream_cut_before_output_seven_times_fails_after_six_reconnects():
    server = FakeServer([CutStream(b"") for _ in range(7)])
    with pytest.raises(Exception) as info:
        openai_policy(server).propose(calculator_request())
    assert info.value.code == "network" and len(server.bodies) == 7


def test_a_stream_cut_after_output_is_not_retried(tmp_path):
    head = sse(openai_events("knowledge_search", ARGS["knowledge_search"], parts=4)[:3])  # some arguments arrived
    server = FakeServer([CutStream(head), openai_reply("knowledge_search", ARGS["knowledge_search"])])
    outcome = run(openai_policy(server), tmp_path)
    assert len(server.bodies) == 1
    assert (outcome.result.stop_reason, outcome.result.error.code) == ("model_unavailable", "network")
    assert "after output had arrived" in outcome.result.error.message


def test_a_stream_that_ends_without_its_finish_is_a_cut_stream():
    server = FakeServer([sse(openai_events("calculator", {"expression": "2"})[:1]),
                         openai_reply("calculator", {"expression": "2"})])
    policy = openai_policy(server)
    assert policy.propose(calculator_request()).decision is not None and policy.attempts == 2


def test_a_stalled_stream_is_reopened_while_nothing_arrived():
    server = FakeServer([StallStream(seconds=0.05), openai_reply("calculator", {"expression": "2"})])
    policy = openai_policy(server)
    assert policy.propose(calculator_request()).decision is not None and policy.attempts == 2


def test_an_error_object_inside_the_stream_is_bucketed_and_reconnected_before_output():
    server = FakeServer([sse([(None, {"error": {"message": "model overloaded", "code": 503}})]) for _ in range(7)])
    with pytest.raises(Exception) as info:
        openai_policy(server).propose(calculator_request())
    assert info.value.code == "server_error" and len(server.bodies) == 1 + 6
    assert "model overloaded" in info.value.message


# -- cancel and deadline ------------------------------------------------------------------------

def test_cancel_closes_a_stream_blocked_on_a_read(tmp_path):
    cancel = threading.Event()
    stall = StallStream(sse(openai_events("knowledge_search", ARGS["knowledge_search"])[:1]), seconds=30)
    server = FakeServer([stall])
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    outcome = run(openai_policy(server), tmp_path, cancel=cancel)
    assert (outcome.result.status, outcome.result.stop_reason) == ("cancelled", "cancelled")
    assert time.monotonic() - started < 5 and stall.closed.is_set()


def test_cancel_leaves_a_call_still_waiting_for_its_headers(tmp_path):
    """A server busy reading the prompt sends no headers yet: the run still ends at once."""
    release = threading.Event()

    def busy(request, body):
        release.wait(30)
        return openai_reply("knowledge_search", ARGS["knowledge_search"])

    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    try:
        outcome = run(openai_policy(FakeServer(busy)), tmp_path, cancel=cancel)
    finally:
        release.set()
    assert (outcome.result.status, outcome.result.stop_reason) == ("cancelled", "cancelled")
    assert time.monotonic() - started < 5


def test_the_deadline_ends_a_blocked_stream_as_a_timeout(tmp_path):
    server = FakeServer([StallStream(seconds=30)])
    started = time.monotonic()
    outcome = run(openai_policy(server), tmp_path, budgets=Budgets(max_seconds=0.5))
    assert (outcome.result.status, outcome.result.stop_reason) == ("stopped", "timeout")
    assert time.monotonic() - started < 5


def test_cancel_is_checked_at_every_chunk():
    request = calculator_request()
    deltas: list[tuple[str, str]] = []

    def on_delta(kind, text):
        deltas.append((kind, text))
        request.cancel.set()  # the user cancels as the first piece of output arrives

    server = FakeServer([openai_reply("calculator", {"expression": "1 + 2"}, parts=6)])
    candidate = openai_policy(server, on_delta=on_delta).propose(request)
    assert candidate.finish_reason == "cancelled" and candidate.decision is None
    assert len(deltas) == 1 and deltas[0][0] == "arguments"
