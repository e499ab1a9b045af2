"""Repairs of what weak models send as a tool call (``agent/models/backends/call_repair.py``): unit tests
of every shape, then the default pack through the real runtime against a real loopback HTTP server
(``loopback_server.py``) that answers each call in one of those shapes, for both protocols. The run
must complete with Task Success, the trace must list each repair (kind, SHA-256 of the text as it
came, the fields it changed) and the text itself must never reach the trace."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable

import pytest
from loopback_server import LoopbackModelServer, Respond
from served_support import (
    anthropic_reply,
    chain_arguments,
    events,
    final_evidence,
    forced_tool,
    openai_reply,
    run,
)

from agent.models.backends.anthropic_client import AnthropicPolicy
from agent.models.backends.call_repair import (
    CallFault, Repairs, changed_fields, cut_inside_value, misfit, recover_call, repair_arguments, repair_final,
    unwrap
)
from agent.models.backends.openai_compatible import OpenAICompatiblePolicy
from agent.models.backends.served import Reply, ToolCall, interpret
from agent.models.providers import AnthropicSpec, OpenAICompatibleSpec
from agent.contracts.decision import CallRepair
from agent.tools import registry_for

ARGS = chain_arguments()
CALC = registry_for(["calculator"]).get("calculator").compact_schema()
SEARCH = registry_for(["knowledge_search"]).get("knowledge_search").compact_schema()
# a tool with its own "name" field (replace_function has one): its arguments are never unwrapped
NAMED = {"type": "object", "additionalProperties": False, "required": ["path", "name"],
         "properties": {"path": {"type": "string"}, "name": {"type": "string"}}}
EXPRESSION = {"expression": "(72 + 78) / 2"}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def repaired(raw: Any, schema: dict | None = CALC, names=("calculator",)) -> tuple[dict, list[CallRepair]]:
    repairs = Repairs()
    return repair_arguments(raw, set(names), schema, repairs), repairs.made


# -- envelopes ------------------------------------------------------------------------------------

ENVELOPES: dict[str, Callable[[str, dict], Any]] = {
    "name+arguments": lambda tool, args: {"name": tool, "arguments": args},
    "name+parameters": lambda tool, args: {"name": tool, "parameters": args},
    "tool+parameters": lambda tool, args: {"tool": tool, "parameters": args},
    "tool+arguments": lambda tool, args: {"tool": tool, "arguments": args},
    "tool_name+tool_input": lambda tool, args: {"tool_name": tool, "tool_input": args},
    "function nested": lambda tool, args: {"function": {"name": tool, "arguments": args}},
    "function nested, arguments as text": lambda tool, args: {"function": {"name": tool,
                                                                          "arguments": json.dumps(args)}},
    "type function": lambda tool, args: {"type": "function", "id": "call_9",
                                         "function": {"name": tool, "arguments": args}},
    "tool_call nested": lambda tool, args: {"tool_call": {"name": tool, "arguments": args}},
    "recipient_name functions.": lambda tool, args: {"recipient_name": f"functions.{tool}", "parameters": args},
    "Decision shaped": lambda tool, args: {"type": "action", "tool": tool, "arguments": args},
    "name beside the arguments": lambda tool, args: {"name": tool, **args},
    "arguments only": lambda tool, args: {"arguments": args},
    "input only": lambda tool, args: {"input": args},
    "arguments as a JSON string": lambda tool, args: {"name": tool, "arguments": json.dumps(args)},
}


@pytest.mark.parametrize("shape", ENVELOPES)
def test_every_envelope_is_unwrapped_and_recorded(shape):
    wrapped = ENVELOPES[shape]("calculator", EXPRESSION)
    raw = json.dumps(wrapped)
    arguments, repairs = repaired(raw)
    assert arguments == EXPRESSION
    assert [r.kind for r in repairs] == ["envelope"]
    assert repairs[0].original_sha256 == sha(raw)
    # what changed: the envelope's keys went, the calculator's came (beside a name, only the name went)
    assert repairs[0].fields and set(repairs[0].fields) <= set(wrapped) | {"expression"}
    assert ("expression" in repairs[0].fields) == ("expression" not in wrapped)


@pytest.mark.parametrize("shape", ["name+arguments", "function nested", "tool+parameters"])
def test_an_envelope_sent_as_an_object_is_unwrapped_too(shape):
    """Anthropic's tool_use input arrives as an object, not text."""
    arguments, repairs = repaired(ENVELOPES[shape]("calculator", EXPRESSION))
    assert arguments == EXPRESSION and repairs[0].kind == "envelope"


def test_an_envelope_naming_another_tool_is_left_for_the_runtime_to_refuse():
    wrapped = {"name": "plot", "arguments": EXPRESSION}
    assert repaired(json.dumps(wrapped)) == (wrapped, [])


def test_the_wire_name_and_the_tool_name_are_both_the_called_tool():
    arguments, _ = repaired({"name": "files.read", "arguments": EXPRESSION}, names=("files_read", "files.read"))
    assert arguments == EXPRESSION


def test_arguments_that_fit_are_never_unwrapped_even_with_a_name_field():
    fits = {"path": "a.py", "name": "calculator"}
    assert repaired(fits, NAMED) == (fits, [])
    # without a schema there is nothing to judge a fit by
    assert unwrap({"name": "calculator", "arguments": {"x": 1}}, ["calculator"], None) is None


def test_an_envelope_is_kept_when_the_inner_object_fits_no_better():
    wrapped = {"name": "calculator", "arguments": {"nonsense": 1, "more": 2, "again": 3}}
    assert repaired(wrapped)[0] == wrapped


def test_the_best_fitting_layer_is_taken():
    inner = {"input": {"expression": "1"}}  # a tool whose only argument is called "input"
    schema = {"type": "object", "required": ["input"], "properties": {"input": {"type": "object"}},
              "additionalProperties": False}
    arguments, _ = repaired({"name": "calculator", "arguments": inner}, schema)
    assert arguments == inner


def test_misfit_counts_missing_unexpected_and_mistyped_fields():
    assert misfit(EXPRESSION, CALC) == 0
    assert misfit({"name": "x", "arguments": {}}, CALC) == 3
    assert misfit({"expression": 3}, CALC) == 1
    assert misfit("text", CALC) > 100


# -- encoded twice, malformed, cut ------------------------------------------------------------------

def test_arguments_encoded_twice_or_three_times_are_decoded():
    for raw in (json.dumps(json.dumps(EXPRESSION)), json.dumps(json.dumps(json.dumps(EXPRESSION)))):
        arguments, repairs = repaired(raw)
        assert arguments == EXPRESSION and [r.kind for r in repairs] == ["double_encoded"]
        assert repairs[0].original_sha256 == sha(raw) and repairs[0].fields == ("expression",)


def test_an_envelope_encoded_twice_is_both():
    arguments, repairs = repaired(json.dumps(json.dumps({"name": "calculator", "arguments": EXPRESSION})))
    assert arguments == EXPRESSION and [r.kind for r in repairs] == ["double_encoded", "envelope"]


@pytest.mark.parametrize("raw", [
    "{'expression': '(72 + 78) / 2'}",            # single quotes
    '{"expression": "(72 + 78) / 2",}',           # trailing comma
    '{"expression": "(72 + 78) / 2"',             # the closing brace missing
    '{expression: "(72 + 78) / 2"}',              # a bare key
    '```json\n{"expression": "(72 + 78) / 2"}',   # a fence left open inside the arguments
])
def test_slightly_malformed_json_is_repaired_with_json_repair(raw):
    arguments, repairs = repaired(raw)
    assert arguments == EXPRESSION and [r.kind for r in repairs] == ["json_repaired"]
    assert repairs[0].original_sha256 == sha(raw)


@pytest.mark.parametrize("raw", [
    '{"expression": "(72 + 78',                   # cut inside a string
    '{"query": "batch results", "top_k": 3',     # cut inside a number: 3 or 30?
    '{"expression":',                            # a key without its value
    '{"expression"',
    "I will compute it now.",                    # no JSON at all
])
def test_a_value_that_was_cut_is_never_repaired(raw):
    with pytest.raises(CallFault) as info:
        repaired(raw)
    assert info.value.code == "invalid_json"


def test_a_repair_that_invents_fields_is_refused():
    """What the 0.5B sent through llama-cpp-python's server for a forced calculator call: a plot
    call whose inner JSON is unescaped. json-repair reads it into fields no tool has."""
    raw = '{"name": "plot", "arguments": "{"labels": ["Batch A", "Batch B"], "values": [75, 80]}"}'
    repairs = Repairs()
    with pytest.raises(CallFault) as info:
        repair_arguments(raw, {"calculator"}, CALC, repairs)
    assert info.value.code == "invalid_json" and repairs.made == []
    with pytest.raises(CallFault):
        repaired("{'expression': 3}")  # repaired, but not what the calculator takes


def test_cut_inside_value_tells_a_missing_closer_from_a_cut_value():
    assert not cut_inside_value('{"a": "x"') and not cut_inside_value('{"a": ["x", "y"')
    assert not cut_inside_value('{"a": 1}') and not cut_inside_value('[1, 2,')
    assert cut_inside_value('{"a": "x') and cut_inside_value('{"a": tru') and cut_inside_value('[1, 2')


def test_arguments_that_are_not_an_object_are_a_wrong_type_fault():
    with pytest.raises(CallFault) as info:
        repaired("[1, 2]")
    assert info.value.code == "wrong_type"


def test_evidence_ids_written_as_one_string_become_a_list():
    for ids in ('["obs-calculator-2", "obs-plot-3"]', "obs-calculator-2, obs-plot-3"):
        repairs = Repairs()
        fixed = repair_final({"answer": "x", "evidence_ids": ids}, repairs)
        assert fixed["evidence_ids"] == ["obs-calculator-2", "obs-plot-3"]
        assert [(r.kind, r.fields, r.original_sha256) for r in repairs.made] == [
            ("evidence_ids_text", ("evidence_ids",), sha(ids))]


# -- a call written in the content ------------------------------------------------------------------

CALL = {"name": "calculator", "arguments": EXPRESSION}
CONTENTS = {
    "bare JSON": json.dumps(CALL),
    "fenced block": "Let me compute it.\n```json\n" + json.dumps(CALL) + "\n```",
    "Qwen tool_call tags": "<tool_call>\n" + json.dumps(CALL) + "\n</tool_call>",
    "tags left open": "<tool_call>\n" + json.dumps(CALL),
    "tags with a malformed call": ("<tool_call>\n{'name': 'calculator', 'arguments': {'expression': '(72 + 78) / 2'}}"
                                   "\n</tool_call>"),
    "functions. prefix": json.dumps({"name": "functions.calculator", "parameters": EXPRESSION}),
    "tool_calls list": json.dumps({"tool_calls": [{"type": "function", "function": CALL}]}),
    "Decision": json.dumps({"type": "action", "tool": "calculator", "arguments": EXPRESSION}),
}


@pytest.mark.parametrize("shape", CONTENTS)
def test_a_call_written_in_the_content_is_recovered(shape):
    text = CONTENTS[shape]
    repairs = Repairs()
    call = recover_call(text, ["calculator", "final_answer"], "calculator", CALC, repairs)
    assert (call.name, call.arguments) == ("calculator", EXPRESSION)
    assert repairs.made[0].kind == "in_content" and repairs.made[0].original_sha256 == sha(text)


def test_a_known_tool_is_preferred_and_bare_arguments_fit_the_forced_tool():
    repairs = Repairs()
    text = '{"name": "search_web", "arguments": {}} or rather ' + json.dumps(CALL)
    assert recover_call(text, ["calculator"], None, None, repairs).name == "calculator"
    bare = "The expression is:\n```json\n" + json.dumps(EXPRESSION) + "\n```"
    call = recover_call(bare, ["calculator"], "calculator", CALC, Repairs())
    assert (call.name, call.arguments) == ("calculator", EXPRESSION)
    assert recover_call(bare, ["calculator"], None, None, Repairs()) is None  # free mode: no tool to fit
    assert recover_call("I think the answer is 75.", ["calculator"], "calculator", CALC, Repairs()) is None


def test_a_final_written_as_a_decision_in_the_content():
    text = json.dumps({"type": "final", "answer": "75", "evidence_ids": ["obs-calculator-2"]})
    call = recover_call(text, ["final_answer"], None, None, Repairs())
    assert (call.name, call.arguments) == ("final_answer", {"answer": "75", "evidence_ids": ["obs-calculator-2"]})


# -- interpret: one reply, every repair counted and described ----------------------------------------

def test_interpret_counts_each_repair_of_one_reply():
    from agent.models.backends.served import ToolDef

    tools = [ToolDef("calculator", "", CALC)]
    wrapped = json.dumps(json.dumps(CALL))
    reply = Reply(calls=[ToolCall("calculator", wrapped), ToolCall("calculator", json.dumps(EXPRESSION))])
    decision, repairs, fault = interpret(reply, {"calculator": "calculator"}, tools, "calculator")
    assert fault is None and decision == {"type": "action", "tool": "calculator", "arguments": EXPRESSION}
    assert [r.kind for r in repairs] == ["parallel_dropped", "double_encoded", "envelope"]
    text = Reply(text="Thinking... " + json.dumps(CALL))
    decision, repairs, _ = interpret(text, {"calculator": "calculator"}, tools, "calculator")
    assert decision["arguments"] == EXPRESSION and [r.kind for r in repairs] == ["in_content"]
    _, repairs, fault = interpret(Reply(calls=[ToolCall("calculator", '{"expression": "(7')]),
                                  {"calculator": "calculator"}, tools, "calculator")
    assert fault[0] == "invalid_json" and "calculator" in fault[1] and repairs == []
    # a malformed block in the content is used only when it fits the tool it names
    broken = Reply(text="<tool_call>\n{'name': 'calculator', 'arguments': {'expr': '1'}}\n</tool_call>")
    _, repairs, fault = interpret(broken, {"calculator": "calculator"}, tools, "calculator")
    assert fault[0] == "invalid_json" and repairs == []


# -- through the real runtime and a real loopback server ---------------------------------------------

def loopback_chain(protocol: str, shape: Callable[[str, dict], tuple[str | None, Any, str]],
                   **options: Any) -> tuple[LoopbackModelServer, list[str]]:
    """A loopback server that answers every forced call of the default pack with the right arguments
    in the given shape: ``shape(tool, arguments)`` -> (tool-call name or None, arguments, text). The
    list collects the raw texts it sent, which must never reach the trace."""
    sent: list[str] = []
    reply = openai_reply if protocol == "openai" else anthropic_reply

    def answer(request):
        body = request.json()
        tool = forced_tool(body)
        arguments = ({"answer": ARGS["final_answer"], "evidence_ids": final_evidence(body)}
                     if tool == "final_answer" else ARGS[tool])
        name, sent_arguments, text = shape(tool, arguments)
        raw = sent_arguments if isinstance(sent_arguments, str) else json.dumps(sent_arguments)
        sent.append(raw if name is not None else text)
        if name is None:
            stop = {"finish": "stop"} if protocol == "openai" else {"stop": "end_turn"}
            return Respond(reply(text=text, **stop, **options))
        return Respond(reply(name, raw, text=text, **options))

    return LoopbackModelServer(answer), sent


def policy_for(protocol: str, server: LoopbackModelServer) -> Any:
    if protocol == "openai":
        return OpenAICompatiblePolicy(OpenAICompatibleSpec(kind="openai_compatible", base_url=server.base_url,
                                                           model="qwen"), backoff_seconds=0.0)
    return AnthropicPolicy(AnthropicSpec(kind="anthropic", model="claude-test", base_url=f"http://{server.origin}"),
                           backoff_seconds=0.0)


def assert_repaired_run(outcome: Any, sent: list[str], kinds: set[str]) -> None:
    result = outcome.result
    assert (result.status, result.stop_reason) == ("completed", "completed"), result.error
    assert result.metrics.task_success is True
    assert not events(outcome, "decision.invalid") and not events(outcome, "tool.rejected")
    repaired_events = events(outcome, "model.call.repaired")
    assert len(repaired_events) == len(sent) == 4
    for event, raw in zip(repaired_events, sent):
        assert {r["kind"] for r in event["repairs"]} <= kinds and event["repairs"]
        assert all(set(r) == {"kind", "original_sha256", "fields"} for r in event["repairs"])
        assert sha(raw) in {r["original_sha256"] for r in event["repairs"]}
    completed = events(outcome, "model.completed")
    assert [e["protocol_repairs"] for e in completed] == [len(e["repairs"]) for e in repaired_events]
    trace = json.dumps(outcome.events, ensure_ascii=False)
    decisions = [e["decision"] for e in outcome.events if "decision" in e]
    for raw in sent:
        if _json_or_none(raw) in decisions:
            continue  # a call sent as a whole Decision: its text is the Decision the runtime traces
        assert raw not in trace and json.dumps(raw)[1:-1] not in trace  # neither as it came nor escaped


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


RUNTIME_ENVELOPES = ["name+arguments", "tool+parameters", "function nested, arguments as text", "type function",
                     "recipient_name functions.", "Decision shaped", "name beside the arguments", "arguments only"]


@pytest.mark.parametrize("shape", RUNTIME_ENVELOPES)
def test_a_run_completes_through_every_envelope(tmp_path, shape):
    """What llama-cpp-python's server sends with a chat template whose grammar it cannot build: the
    whole call inside the arguments, the name repeated in every chunk, no usage."""
    wrap = ENVELOPES[shape]
    server, sent = loopback_chain("openai", lambda tool, args: (tool, wrap(tool, args), ""),
                                  repeat_name=True, usage=None)
    try:
        outcome = run(policy_for("openai", server), tmp_path)
    finally:
        server.close()
    assert_repaired_run(outcome, sent, {"envelope"})
    calculator = events(outcome, "model.call.repaired")[1]["repairs"][0]
    assert calculator["fields"] == list(changed_fields(wrap("calculator", ARGS["calculator"]), ARGS["calculator"]))


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
@pytest.mark.parametrize("kind,shape", [
    ("envelope", lambda tool, args: (tool, {"name": tool, "arguments": args}, "")),
    ("double_encoded", lambda tool, args: (tool, json.dumps(json.dumps(args)), "")),
    ("json_repaired", lambda tool, args: (tool, json.dumps(args)[:-1] + ",}", "")),  # a trailing comma
    ("in_content", lambda tool, args: (None, None, "Sure, calling it now (NOTE-7Q).\n<tool_call>\n"
                                       + json.dumps({"name": tool, "arguments": args}) + "\n</tool_call>")),
    ("in_content", lambda tool, args: (None, None, "Here it is:\n```json\n"
                                       + json.dumps({"name": tool, "arguments": args}) + "\n```")),
    ("in_content", lambda tool, args: (None, None, json.dumps({"name": tool, "parameters": args}))),
], ids=["envelope", "double_encoded", "json_repaired", "tool_call tags", "fenced json", "bare json"])
def test_a_run_completes_through_every_repair_on_both_protocols(tmp_path, protocol, kind, shape):
    server, sent = loopback_chain(protocol, shape)
    try:
        outcome = run(policy_for(protocol, server), tmp_path)
    finally:
        server.close()
    assert_repaired_run(outcome, sent, {kind})
    trace = json.dumps(outcome.events)
    assert "NOTE-7Q" not in trace and "Sure, calling" not in trace and "Here it is" not in trace
