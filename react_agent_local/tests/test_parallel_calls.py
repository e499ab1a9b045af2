"""Several tool calls in one served reply (``agent/core/tool_batch.py``): run at once when every one is
read-only, recorded in the reply's order, each Observation paired with its call id, replayed as one
assistant message.

Concurrency is proved by tools that wait on a shared ``threading.Barrier(2, timeout=5)``: run one
after the other, the first would break the barrier and fail. Replies come from the real served
backends (recorded OpenAI and Anthropic stream shapes through ``served_support.FakeServer``) or from
``ServedLike``, a policy that answers as a served model's native tool calls do.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from served_support import FakeServer, anthropic_policy, events, openai_policy, run, sse

from agent.models.backends.served import Reply, ToolCall, ToolDef, further_calls, interpret
from agent.contracts.budgets import Budgets, Sampling
from agent.models.model_policy import Candidate, DecisionRequest, FurtherCall, ModelDescription
from agent.prompts.prompting import Branch, PromptState
from agent.tools import ToolRegistry, registry_for

QUERIES = ("batch results", "release rule")


# -- tools that prove they ran together ----------------------------------------------------------

class Probe:
    """What the test tools saw: the order they started and finished in, and calls that must not run."""

    def __init__(self, parties: int = 2):
        self.barrier = threading.Barrier(parties, timeout=5)
        self.started: list[str] = []
        self.finished: list[str] = []
        self.plots = 0
        self.calculator_waits = False

    def search(self, ctx, args, cancel) -> dict[str, Any]:
        self.started.append(args.query)
        self.barrier.wait()  # sequential calls never get past this: the barrier breaks after 5 s
        if args.query == QUERIES[0]:
            time.sleep(0.3)  # the first call of the reply finishes last
        self.finished.append(args.query)
        return {"query": args.query}

    def calculate(self, ctx, args, cancel) -> dict[str, Any]:
        if self.calculator_waits:
            self.barrier.wait()
        self.finished.append(args.expression)
        return {"expression": args.expression, "value": eval(args.expression)}  # noqa: S307 -- "1 + 2" from the test

    def plot(self, ctx, args, cancel) -> dict[str, Any]:
        self.plots += 1
        return {"spec": {"labels": args.labels}}


def probe_tools(probe: Probe, calculator_waits: bool = False) -> ToolRegistry:
    """The default pack's tools, run in threads and watched by ``probe``: knowledge_search waits on the
    barrier (the calculator too, when asked), plot only counts its calls."""
    probe.calculator_waits = calculator_waits
    tools = registry_for(["knowledge_search", "calculator", "plot"])
    tools.tools["knowledge_search"] = replace(tools.get("knowledge_search"), execute=probe.search, import_path=None,
                                              render=lambda r: f"searched {r['query']}", digest=lambda r: r["query"])
    tools.tools["calculator"] = replace(tools.get("calculator"), execute=probe.calculate, import_path=None)
    tools.tools["plot"] = replace(tools.get("plot"), execute=probe.plot, import_path=None)
    return tools


class ServedLike:
    """A policy that answers as a served model's native tool calls do: each reply is a list of
    (tool, arguments) calls, the first the Decision and the others its further calls, with ids;
    after the last reply, a Final (which the gate may refuse)."""

    proposes_arguments = False

    def __init__(self, replies: list[list[tuple[str, dict[str, Any]]]]):
        self.replies = list(replies)
        self.requests: list[DecisionRequest] = []
        self.description = ModelDescription(name="served-like-test-policy", backend="function", path_hash="-",
                                            is_test_policy=True)

    def propose(self, request: DecisionRequest) -> Candidate:
        self.requests.append(request)
        if not self.replies:
            return Candidate(text="", decision={"type": "final", "answer": "done", "evidence_ids": ["obs-none-1"]},
                             input_tokens=10, output_tokens=10, latency_ms=1.0)
        (tool, arguments), *rest = self.replies.pop(0)
        return Candidate(text="", decision={"type": "action", "tool": tool, "arguments": arguments},
                         call_id="call_0", further_calls=tuple(FurtherCall(t, a, f"call_{i}")
                                                               for i, (t, a) in enumerate(rest, start=1)),
                         input_tokens=10, output_tokens=10, latency_ms=1.0)

    def close(self) -> None:
        pass


def run_reply(tmp_path: Path, calls: list[tuple[str, dict[str, Any]]], tools: ToolRegistry, **budgets: Any):
    """One free step that answers with ``calls``; the run then ends at its step limit."""
    return run(ServedLike([calls]), tmp_path, tools=tools, mode="free", budgets=Budgets(max_steps=1, **budgets))


def search(query: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    return "knowledge_search", {"query": query, **extra}


# -- which tools are read-only -------------------------------------------------------------------

def test_the_registry_says_which_tools_are_read_only():
    from agent.task.skills import Skill
    from agent.tools import catalog
    from agent.tools.skill import skill_tool

    assert {t.name for t in catalog() if t.read_only} == {"knowledge_search", "calculator", "table_query", "read_file",
                                                          "glob", "grep"}
    # lookup_fact rewrites the run's list of facts looked up; plot writes the chart; the others change files
    assert not any(catalog().get(n).read_only for n in ("lookup_fact", "plot", "write_file", "edit_file",
                                                         "replace_function", "bash"))
    assert skill_tool([Skill(name="s", description="A skill.", body="Do it.")]).read_only is True


# -- the runtime ---------------------------------------------------------------------------------

def test_read_only_calls_of_one_reply_run_at_once_and_are_recorded_in_the_replys_order(tmp_path):
    probe = Probe()
    outcome = run_reply(tmp_path, [search(QUERIES[0]), search(QUERIES[1])], probe_tools(probe))
    observations = outcome.result.observations
    assert [(o.id, o.ok, o.result) for o in observations] == [
        ("obs-knowledge_search-1", True, {"query": QUERIES[0]}),
        ("obs-knowledge_search-2", True, {"query": QUERIES[1]})]
    assert probe.finished == [QUERIES[1], QUERIES[0]]  # they finished the other way round
    # each Observation is paired with its call id and its place in the reply
    assert [(e["call_id"], e["batch_index"], e["observation"]["id"]) for e in events(outcome, "tool.observation")] == [
        ("call_0", 0, "obs-knowledge_search-1"), ("call_1", 1, "obs-knowledge_search-2")]
    assert [(e["call_id"], e["arguments"]["query"]) for e in events(outcome, "tool.started")] == [
        ("call_0", QUERIES[0]), ("call_1", QUERIES[1])]
    (batch,) = events(outcome, "tool.batch")
    assert (batch["size"], batch["read_only"], batch["ran_together"], batch["not_run"]) == (2, True, [0, 1], [])
    assert [c["call_id"] for c in batch["calls"]] == ["call_0", "call_1"]
    assert 300 <= batch["duration_ms"] < 4000  # together: about the slower call's time
    kinds = [e["type"] for e in outcome.events if e["type"].startswith("tool.")]
    assert kinds == ["tool.batch"] + ["tool.started", "tool.observation"] * 2  # one call after the other


def test_a_reply_of_one_call_is_traced_as_before(tmp_path):
    probe = Probe(parties=1)
    outcome = run_reply(tmp_path, [search(QUERIES[1])], probe_tools(probe))
    assert outcome.result.observations[0].ok and not events(outcome, "tool.batch")
    assert "call_id" not in events(outcome, "tool.started")[0] and "batch_index" not in events(outcome, "tool.observation")[0]


@pytest.mark.parametrize("calls,ran,blocker", [
    ([search(QUERIES[1]), ("plot", {"labels": ["a"], "values": [1], "title": "t"})], "knowledge_search", "plot"),
    ([("plot", {"labels": ["a"], "values": [1], "title": "t"}), search(QUERIES[1])], "plot", "plot"),
    ([search(QUERIES[1]), ("final_answer", {"answer": "x", "evidence_ids": ["obs-x-1"]})], "knowledge_search",
     "final_answer"),
])
def test_a_reply_with_a_call_that_is_not_read_only_runs_only_its_first_and_says_so(tmp_path, calls, ran, blocker):
    probe = Probe(parties=1)
    tools = probe_tools(probe)
    policy = ServedLike([calls])
    outcome = run(policy, tmp_path, tools=tools, mode="free", budgets=Budgets(max_steps=2))
    assert [o.tool for o in outcome.result.observations[:1]] == [ran]
    assert probe.plots == (ran == "plot") and len(events(outcome, "tool.started")) == 1
    (batch,) = events(outcome, "tool.batch")
    assert (batch["size"], batch["read_only"], batch["ran_together"], batch["duration_ms"]) == (2, False, [], None)
    assert [(n["index"], n["code"]) for n in batch["not_run"]] == [(1, "not_read_only")]
    assert blocker in batch["not_run"][0]["message"]
    # the model reads why in its next turn
    line = next(f for f in policy.requests[1].state.feedback if f.startswith("Only the first of the 2 tool calls"))
    assert f"{blocker} is not" in line and "one per reply" in line


def test_a_rejected_call_in_a_batch_is_its_own_rejected_observation_in_its_place(tmp_path):
    probe = Probe()  # the two valid calls meet at the barrier; the rejected one never runs
    calls = [search(QUERIES[0]), search(QUERIES[1], colour="red"), ("calculator", {"expression": "1 + 2"})]
    outcome = run_reply(tmp_path, calls, probe_tools(probe, calculator_waits=True))
    observations = outcome.result.observations
    assert [(o.id, o.ok) for o in observations] == [
        ("obs-knowledge_search-1", True), ("obs-knowledge_search-2", False), ("obs-calculator-3", True)]
    assert observations[1].error.code == "invalid_arguments" and observations[1].attempted_arguments["colour"] == "red"
    assert observations[2].result["value"] == 3
    (rejected,) = events(outcome, "tool.rejected")
    assert (rejected["call_id"], rejected["batch_index"], rejected["unexpected_fields"]) == ("call_1", 1, ["colour"])
    (batch,) = events(outcome, "tool.batch")
    assert batch["ran_together"] == [0, 2] and outcome.result.metrics is not None
    assert probe.started == [QUERIES[0]]  # the rejected search never reached its tool


def test_the_tool_call_budget_caps_a_batch_and_the_rest_are_reported_not_run(tmp_path):
    probe = Probe()
    calls = [search(QUERIES[0]), search(QUERIES[1]), search("third query")]
    policy = ServedLike([calls])
    outcome = run(policy, tmp_path, tools=probe_tools(probe), mode="free", budgets=Budgets(max_steps=2, max_tool_calls=2))
    assert [o.result["query"] for o in outcome.result.observations] == list(QUERIES)
    assert "third query" not in probe.started and events(outcome, "tool.started")[-1]["arguments"]["query"] == QUERIES[1]
    assert any("knowledge_search (call 3): over the run's tool-call budget" in line
               for line in policy.requests[1].state.feedback)
    (batch,) = events(outcome, "tool.batch")
    assert batch["ran_together"] == [0, 1]
    assert [(n["index"], n["tool"], n["call_id"], n["code"]) for n in batch["not_run"]] == [
        (2, "knowledge_search", "call_2", "tool_budget")]


def test_the_budget_left_is_what_runs(tmp_path):
    probe = Probe(parties=1)
    calls = [search(QUERIES[0]), search(QUERIES[1])]
    policy = ServedLike([[search("first step")], calls])
    outcome = run(policy, tmp_path, tools=probe_tools(probe), mode="free", budgets=Budgets(max_steps=3, max_tool_calls=2))
    assert [o.result["query"] for o in outcome.result.observations] == ["first step", QUERIES[0]]
    (batch,) = events(outcome, "tool.batch")
    assert batch["ran_together"] == [0] and [n["index"] for n in batch["not_run"]] == [1]


def test_the_loop_guard_counts_every_call_of_a_batch(tmp_path):
    probe = Probe()
    outcome = run_reply(tmp_path, [search(QUERIES[1]), search(QUERIES[1])], probe_tools(probe),
                        repeated_action_limit=2)
    assert outcome.result.stop_reason == "loop_detected"
    (guard,) = events(outcome, "guard.loop_detected")
    assert guard["count"] == 2 and len(outcome.result.observations) == 1


def test_a_further_call_whose_arguments_cannot_be_read_does_not_run(tmp_path):
    probe = Probe(parties=1)
    policy = ServedLike([[search(QUERIES[0])]])
    original = policy.propose

    def propose(request):
        candidate = original(request)
        candidate.further_calls = (FurtherCall("knowledge_search", {}, "call_1", fault="not valid JSON"),)
        return candidate

    policy.propose = propose
    outcome = run(policy, tmp_path, tools=probe_tools(probe), mode="free", budgets=Budgets(max_steps=1))
    assert [o.result["query"] for o in outcome.result.observations] == [QUERIES[0]]
    (batch,) = events(outcome, "tool.batch")
    assert batch["read_only"] is True and batch["not_run"][0]["code"] == "unreadable_arguments"


# -- the served backends, end to end -------------------------------------------------------------

def openai_calls(calls: list[tuple[str, str, Any]]) -> bytes:
    """A streamed chat completion with several tool calls (id, name, arguments), each in two chunks."""
    def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "qwen",
                "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}

    out: list[tuple[str | None, Any]] = [(None, chunk({"role": "assistant", "content": None}))]
    for index, (cid, name, arguments) in enumerate(calls):
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        half = len(text) // 2
        out.append((None, chunk({"tool_calls": [{"index": index, "id": cid, "type": "function",
                                                 "function": {"name": name, "arguments": text[:half]}}]})))
        out.append((None, chunk({"tool_calls": [{"index": index, "function": {"arguments": text[half:]}}]})))
    return sse(out + [(None, chunk(finish="tool_calls")), (None, "[DONE]")])


def anthropic_calls(calls: list[tuple[str, str, Any]]) -> bytes:
    """A streamed Messages reply with several tool_use blocks (id, name, input)."""
    out: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 1}}})]
    for index, (cid, name, arguments) in enumerate(calls):
        out.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
            "type": "tool_use", "id": cid, "name": name, "input": {}}}))
        out.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                            "delta": {"type": "input_json_delta", "partial_json": json.dumps(arguments)}}))
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                                  "usage": {"output_tokens": 40}}))
    return sse(out + [("message_stop", {"type": "message_stop"})])


THREE_CALLS = [("srv_a", "knowledge_search", {"query": QUERIES[0]}),
               ("srv_b", "knowledge_search", {"query": QUERIES[1]}),
               ("srv_c", "calculator", {"expression": "1 + 2"})]
REPLAYED_IDS = ["call_obs-knowledge_search-1", "call_obs-knowledge_search-2", "call_obs-calculator-3"]


def served_run(tmp_path: Path, protocol: str):
    probe = Probe()
    first = openai_calls(THREE_CALLS) if protocol == "openai" else anthropic_calls(THREE_CALLS)
    server = FakeServer([first, first])  # the second reply is never read: the run ends at its step limit
    policy = openai_policy(server) if protocol == "openai" else anthropic_policy(server)
    outcome = run(policy, tmp_path, tools=probe_tools(probe), mode="free", budgets=Budgets(max_steps=2, max_tool_calls=3))
    return outcome, server, probe


def assert_batch_recorded(outcome) -> None:
    assert [(o.id, o.ok) for o in outcome.result.observations] == [(i.removeprefix("call_"), True) for i in REPLAYED_IDS]
    # each Observation with the server's own id of its call, in the reply's order
    assert [e["call_id"] for e in events(outcome, "tool.observation")] == ["srv_a", "srv_b", "srv_c"]
    (batch,) = events(outcome, "tool.batch")
    assert batch["read_only"] is True and batch["ran_together"] == [0, 1, 2]
    assert events(outcome, "model.completed")[0]["protocol_repairs"] == 0  # nothing dropped


def test_openai_parallel_calls_run_together_and_come_back_as_one_assistant_message(tmp_path):
    outcome, server, probe = served_run(tmp_path, "openai")
    first, second = server.bodies
    assert first["tool_choice"] == "auto" and first["parallel_tool_calls"] is True
    assert_batch_recorded(outcome)
    assert sorted(probe.finished) == sorted([*QUERIES, "1 + 2"])
    messages = second["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "tool", "user"]
    calls = messages[2]["tool_calls"]
    assert [c["id"] for c in calls] == REPLAYED_IDS == [m["tool_call_id"] for m in messages[3:6]]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        (name, arguments) for _, name, arguments in THREE_CALLS]
    assert [m["content"].split(" ok:")[0] for m in messages[3:6]] == [
        "[obs-knowledge_search-1] knowledge_search", "[obs-knowledge_search-2] knowledge_search",
        "[obs-calculator-3] calculator"]


def test_anthropic_parallel_tool_use_runs_together_and_comes_back_as_one_assistant_message(tmp_path):
    outcome, server, _ = served_run(tmp_path, "anthropic")
    first, second = server.bodies
    assert first["tool_choice"] == {"type": "auto"}  # parallel tool use on: the API's default
    assert_batch_recorded(outcome)
    messages = second["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    uses = messages[1]["content"]
    assert [(b["type"], b["id"], b["name"], b["input"]) for b in uses] == [
        ("tool_use", cid, name, arguments) for cid, (_, name, arguments) in zip(REPLAYED_IDS, THREE_CALLS)]
    results = messages[2]["content"]
    assert [(b["type"], b.get("tool_use_id")) for b in results] == [
        *(("tool_result", cid) for cid in REPLAYED_IDS), ("text", None)]


def test_guided_steps_ask_for_one_call_and_drop_the_others():
    server = FakeServer([openai_calls(THREE_CALLS[2:] + THREE_CALLS[:1])])
    request = DecisionRequest(branch=Branch("action", tool="calculator"),
                              state=PromptState(goal="Add 1 and 2.", observations=[], feedback=[], budget_left={}),
                              tools=registry_for(["calculator", "knowledge_search"]), max_new_tokens=64,
                              sampling=Sampling())
    candidate = openai_policy(server).propose(request)
    assert server.bodies[0]["parallel_tool_calls"] is False
    assert candidate.further_calls == () and [r.kind for r in candidate.call_repairs] == ["parallel_dropped"]
    assert candidate.call_id == "srv_c"


def free_request(tools: list[str]) -> DecisionRequest:
    return DecisionRequest(branch=Branch("free"),
                           state=PromptState(goal="Add 1 and 2.", observations=[], feedback=[], budget_left={}),
                           tools=registry_for(tools), max_new_tokens=64, sampling=Sampling())


def test_free_steps_without_a_read_only_tool_ask_for_one_call():
    server = FakeServer([openai_calls([("a", "plot", {"labels": ["a"], "values": [1]})])])
    openai_policy(server).propose(free_request(["plot"]))
    assert server.bodies[0]["tool_choice"] == "auto" and server.bodies[0]["parallel_tool_calls"] is False


def test_each_further_call_is_repaired_like_the_first_and_keeps_its_id():
    """Through the real client: an envelope and a double-encoded string are repaired, JSON that
    cannot be is a fault of that call alone, and each repair is counted."""
    envelope = json.dumps({"name": "calculator", "arguments": {"expression": "1 + 2"}})
    server = FakeServer([openai_calls([("a", "knowledge_search", {"query": "x"}),
                                       ("b", "calculator", envelope),
                                       ("c", "knowledge_search", json.dumps(json.dumps({"query": "y"}))),
                                       ("d", "knowledge_search", '{"query": "cut'),
                                       ("e", "final_answer", {"answer": "3", "evidence_ids": "obs-a-1"})])])
    candidate = openai_policy(server).propose(free_request(["knowledge_search", "calculator"]))
    assert (candidate.decision, candidate.call_id) == (
        {"type": "action", "tool": "knowledge_search", "arguments": {"query": "x"}}, "a")
    assert candidate.further_calls == (
        FurtherCall("calculator", {"expression": "1 + 2"}, "b"),
        FurtherCall("knowledge_search", {"query": "y"}, "c"),
        FurtherCall("knowledge_search", {}, "d", fault="the arguments of knowledge_search are not valid JSON; "
                                                        "write one JSON object"),
        FurtherCall("final_answer", {"answer": "3", "evidence_ids": ["obs-a-1"]}, "e"))
    kinds = [r.kind for r in candidate.call_repairs]
    assert kinds == ["envelope", "double_encoded", "evidence_ids_text"] and candidate.protocol_repairs == 3


def test_interpret_keeps_further_calls_only_when_parallel_calls_were_asked_for():
    tools = [ToolDef("calculator", "", {"type": "object", "properties": {"expression": {"type": "string"}}})]
    reply = Reply(calls=[ToolCall("calculator", '{"expression": "1"}', "a"), ToolCall("calculator", '{"expression": "2"}', "b")])
    names = {"calculator": "calculator"}
    assert [r.kind for r in interpret(reply, names, tools)[1]] == ["parallel_dropped"]
    assert interpret(reply, names, tools, parallel=True)[1] == []
    assert further_calls(reply, names, tools)[0] == (FurtherCall("calculator", {"expression": "2"}, "b"),)
    final_first = Reply(calls=[ToolCall("final_answer", '{"answer": "1", "evidence_ids": ["x"]}'), *reply.calls])
    assert [r.kind for r in interpret(final_first, names, tools, parallel=True)[1]] == ["parallel_dropped"]


# -- MCP tools: read-only only where the server says so ------------------------------------------

MCP_SERVERS = Path(__file__).resolve().parent / "mcp_servers"


def test_an_mcp_tools_read_only_hint_is_honoured(tmp_path):
    pytest.importorskip("mcp")
    from test_mcp import make_pack, server

    pack = make_pack(tmp_path, [server("notes", "annotated.py")], required=["notes.read"],
                     tools=["notes.read", "notes.wipe", "notes.write", "notes.plain"])
    read = [("notes.read", {"text": "a"}), ("notes.read", {"text": "b"})]  # answered only when both run at once
    policy = ServedLike([read, [("notes.read", {"text": "c"}), ("notes.write", {"text": "d"})],
                         [("notes.plain", {"text": "e"}), ("notes.wipe", {"text": "f"})]])
    outcome = run(policy, tmp_path, pack=pack, mode="free", budgets=Budgets(max_steps=4))
    assert {t.name: t.read_only for t in policy.requests[0].tools} == {
        "notes.read": True, "notes.wipe": False, "notes.write": False, "notes.plain": False}
    assert [(o.tool, o.ok, o.result) for o in outcome.result.observations] == [
        ("notes.read", True, {"read": "a"}), ("notes.read", True, {"read": "b"}),
        ("notes.read", True, {"read": "c"}), ("notes.plain", True, {"plain": "e"})]
    assert [(b["read_only"], b["ran_together"]) for b in events(outcome, "tool.batch")] == [
        (True, [0, 1]), (False, []), (False, [])]
    assert any("and notes.write is not" in line for line in policy.requests[2].state.feedback)
    assert any("and notes.plain, notes.wipe are not" in line for line in policy.requests[3].state.feedback)
