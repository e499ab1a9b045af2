"""The requests we send are the ones the servers accept (request shape), for every kind of step:
a guided action, a guided final, free mode, a repair, with earlier Observations (a failed one
too), with and without strict schemas.

- vLLM's OpenAI server (the scale-out path): ``VllmChatCompletionRequest`` below restates the parts
  of ``vllm/entrypoints/openai/chat_completion/protocol.py`` (``ChatCompletionRequest`` with its
  ``check_tool_usage`` and ``validate_stream_options`` validators) and of
  ``vllm/entrypoints/generate/base/protocol.py`` (``FunctionDefinition``, ``StreamOptions``) that
  our requests touch. Stricter than vLLM (which ignores unknown fields with a warning): an unknown
  field fails here. Messages are checked with the OpenAI SDK's own ``ChatCompletionMessageParam``,
  the type vLLM's ``ChatCompletionMessageParam`` is built from.
- llama-cpp-python's server: its own request model, ``CreateChatCompletionRequest`` (installed).
- Anthropic's Messages API: the SDK's ``MessageCreateParamsStreaming``.
- Every tool schema is a valid JSON Schema (Draft 2020-12), and a strict one follows OpenAI's rules.
"""

from __future__ import annotations

import itertools
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, TypeAdapter, model_validator

from agent.models.backends import anthropic_client, openai_compatible
from agent.models.backends.served import wire_names
from agent.models.providers import AnthropicSpec, OpenAICompatibleSpec
from agent.contracts.decision import Observation, ToolErrorInfo
from agent.contracts.budgets import Sampling
from agent.models.model_policy import DecisionRequest
from agent.task.packs import load_pack
from agent.prompts.prompting import Branch, PromptState
from agent.tools import registry_for


class _Forbid(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VllmFunctionDefinition(_Forbid):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class VllmTool(_Forbid):
    type: Literal["function"] = "function"
    function: VllmFunctionDefinition


class VllmNamedFunction(_Forbid):
    name: str


class VllmNamedToolChoice(_Forbid):
    function: VllmNamedFunction
    type: Literal["function"] = "function"


class VllmStreamOptions(_Forbid):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class VllmChatCompletionRequest(_Forbid):
    messages: list[dict[str, Any]]
    model: str | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    seed: int | None = None
    stream: bool | None = False
    stream_options: VllmStreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    tools: list[VllmTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | VllmNamedToolChoice | None = "none"
    parallel_tool_calls: bool | None = True

    @model_validator(mode="before")
    @classmethod
    def validate_stream_options(cls, data: Any) -> Any:
        if data.get("stream_options") and not data.get("stream"):
            raise ValueError("Stream options can only be defined when `stream=True`.")
        return data

    @model_validator(mode="before")
    @classmethod
    def check_tool_usage(cls, data: Any) -> Any:
        if data.get("tools") == []:
            raise ValueError("`tools` must not be an empty array.")
        choice = data.get("tool_choice")
        if choice not in (None, "none"):
            if not data.get("tools"):
                raise ValueError("When using `tool_choice`, `tools` must be set.")
            if isinstance(choice, dict):
                name = (choice.get("function") or {}).get("name")
                if not isinstance(name, str) or not name:
                    raise ValueError("Invalid `name` in `function` in `tool_choice`")
                if not any(t["function"]["name"] == name for t in data["tools"]):
                    raise ValueError("The tool specified in `tool_choice` does not match any of the specified `tools`")
            elif choice not in ("auto", "required"):
                raise ValueError(f"Invalid value for `tool_choice`: {choice}")
        return data


def materialize(value: Any) -> Any:
    """The SDK types use Iterable[...] fields, which pydantic validates lazily: iterate them all."""
    if isinstance(value, dict):
        return {k: materialize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ValidatorIterator":
        return [materialize(v) for v in value]
    return value


PACK = load_pack(None)
REGISTRY = registry_for(PACK.task.tool_names)
OBSERVATIONS = [
    Observation(id="obs-knowledge_search-1", tool="knowledge_search", ok=True,
                result={"query": "batches", "summary": "4 batches", "data": {"batches": {"A": 72, "B": 78}}}),
    Observation(id="obs-calculator-2", tool="calculator", ok=False,
                error=ToolErrorInfo(code="division_by_zero", message="division by zero")),
    Observation(id="obs-calculator-3", tool="calculator", ok=False,
                error=ToolErrorInfo(code="invalid_arguments", message="'expression': too long"),
                attempted_arguments={"expression": "1" * 300}),
]


def requests() -> list[tuple[str, DecisionRequest]]:
    def make(branch: Branch, observations: list[Observation], repair: str | None = None) -> DecisionRequest:
        state = PromptState(goal=PACK.task.goal, observations=observations, feedback=["obs-calculator-2: failed"],
                            budget_left={"steps": 9}, check_lines=["- average: 79 >= 78"], final_hints=["Be exact."])
        return DecisionRequest(branch=branch, state=state, tools=REGISTRY, max_new_tokens=256,
                               sampling=Sampling(temperature=0.7, seed=7), repair_error=repair)

    final = Branch("final", evidence_ids=("obs-knowledge_search-1",), answer_form=PACK.task.answer_form,
                   numbers=("72", "78", "79"))
    return [
        ("first action", make(Branch("action", tool="knowledge_search"), [])),
        ("action after observations", make(Branch("action", tool="calculator", target="x"), OBSERVATIONS)),
        ("guided final", make(final, OBSERVATIONS)),
        ("free", make(Branch("free", evidence_ids=("obs-knowledge_search-1",)), OBSERVATIONS)),
        ("repair", make(Branch("action", tool="plot"), OBSERVATIONS, repair="invalid_json: not JSON")),
    ]


CASES = requests()
OPENAI_SPECS = [OpenAICompatibleSpec(kind="openai_compatible", base_url="http://127.0.0.1:8000/v1", model="Qwen/Qwen2.5-1.5B-Instruct"),
                OpenAICompatibleSpec(kind="openai_compatible", base_url="http://127.0.0.1:8000/v1", model="q",
                                     strict_tools=True)]


def openai_body(spec: OpenAICompatibleSpec, request: DecisionRequest) -> dict[str, Any]:
    conversation = request.conversation({"obs-knowledge_search-1": {"query": "batches"}},
                                        wire_names(request.tools.names))
    return openai_compatible.request_body(spec, request, conversation)


@pytest.mark.parametrize("spec,case", list(itertools.product(OPENAI_SPECS, CASES)),
                         ids=[f"{'strict' if s.strict_tools else 'plain'}-{c[0]}" for s, c in itertools.product(OPENAI_SPECS, CASES)])
def test_openai_requests_are_what_vllm_and_llama_cpp_python_accept(spec, case):
    from llama_cpp.server.types import CreateChatCompletionRequest
    from openai.types.chat import ChatCompletionMessageParam

    body = openai_body(spec, case[1])
    VllmChatCompletionRequest.model_validate(body)
    adapter = TypeAdapter(list[ChatCompletionMessageParam])  # kept alive while its lazy iterators run
    materialize(adapter.validate_python(body["messages"]))
    CreateChatCompletionRequest.model_validate(body)
    roles = [m["role"] for m in body["messages"]]
    if case[1].state.observations:
        assert roles[:2] == ["system", "user"] and roles[-1] == "user"
        calls = [m for m in body["messages"] if m["role"] == "assistant"]
        results = [m for m in body["messages"] if m["role"] == "tool"]
        assert [c["tool_calls"][0]["id"] for c in calls] == [r["tool_call_id"] for r in results] == [
            "call_obs-knowledge_search-1", "call_obs-calculator-2", "call_obs-calculator-3"]
        assert "FAILED" in results[1]["content"]
        # the rejected call goes back with the arguments the model attempted
        assert calls[2]["tool_calls"][0]["function"]["arguments"] == '{"expression": "' + "1" * 300 + '"}'


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_anthropic_requests_match_the_sdk_types(case):
    from anthropic.types.message_create_params import MessageCreateParamsStreaming

    request = case[1]
    conversation = request.conversation({}, wire_names(request.tools.names))
    body = anthropic_client.request_body(AnthropicSpec(kind="anthropic", model="claude-test"), request, conversation)
    adapter = TypeAdapter(MessageCreateParamsStreaming)  # kept alive while its lazy iterators run
    materialize(adapter.validate_python(body))
    roles = [m["role"] for m in body["messages"]]
    assert all(a != b for a, b in zip(roles, roles[1:])) and roles[0] == roles[-1] == "user"
    results = [b for m in body["messages"] for b in m["content"] if b["type"] == "tool_result"]
    assert [r.get("is_error", False) for r in results] == ([False, True, True] if request.state.observations else [])


def test_every_tool_schema_is_valid_json_schema_and_strict_ones_follow_openai_rules():
    import jsonschema

    for _, request in CASES:
        for spec in OPENAI_SPECS:
            for tool in openai_body(spec, request)["tools"]:
                parameters = tool["function"]["parameters"]
                jsonschema.Draft202012Validator.check_schema(parameters)
                if spec.strict_tools:
                    stack = [parameters]
                    while stack:
                        node = stack.pop()
                        if isinstance(node, dict):
                            if node.get("type") == "object":
                                assert node["additionalProperties"] is False
                                assert set(node["required"]) == set(node["properties"])
                            assert "default" not in node
                            stack.extend(node.values())
                        elif isinstance(node, list):
                            stack.extend(node)


def test_tool_names_fit_both_protocols():
    names = wire_names(["knowledge_search", "facts.lookup_fact", "facts:lookup/fact", "final_answer", "x" * 90])
    assert all(len(n) <= 64 and n.replace("_", "").replace("-", "").isalnum() for n in names)
    assert names["facts_lookup_fact"] == "facts.lookup_fact" and "final_answer" not in names
    assert len(set(names)) == 5


def test_a_replayed_batch_is_a_request_every_server_accepts():
    """The three Observations of one reply (a batch, ``agent/core/tool_batch.py``) go back as one assistant
    message with the three calls and their results in order, in a free step that asks for parallel calls."""
    from llama_cpp.server.types import CreateChatCompletionRequest
    from anthropic.types.message_create_params import MessageCreateParamsStreaming
    from openai.types.chat import ChatCompletionMessageParam

    state = PromptState(goal=PACK.task.goal, observations=OBSERVATIONS, feedback=[], budget_left={"steps": 9})
    request = DecisionRequest(branch=Branch("free"), state=state, tools=REGISTRY, max_new_tokens=256,
                              sampling=Sampling())
    replies = {o.id: 1 for o in OBSERVATIONS}
    conversation = request.conversation({"obs-knowledge_search-1": {"query": "batches"}},
                                        wire_names(request.tools.names), replies)
    ids = ["call_obs-knowledge_search-1", "call_obs-calculator-2", "call_obs-calculator-3"]
    body = openai_compatible.request_body(OPENAI_SPECS[0], request, conversation)
    VllmChatCompletionRequest.model_validate(body)
    CreateChatCompletionRequest.model_validate(body)
    adapter = TypeAdapter(list[ChatCompletionMessageParam])
    materialize(adapter.validate_python(body["messages"]))
    assert body["parallel_tool_calls"] is True
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool", "tool", "tool", "user"]
    assert [c["id"] for c in body["messages"][2]["tool_calls"]] == ids
    assert [m["tool_call_id"] for m in body["messages"][3:6]] == ids
    body = anthropic_client.request_body(AnthropicSpec(kind="anthropic", model="claude-test"), request, conversation)
    anthropic_adapter = TypeAdapter(MessageCreateParamsStreaming)
    materialize(anthropic_adapter.validate_python(body))
    assert body["tool_choice"] == {"type": "auto"}
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert [b["id"] for b in body["messages"][1]["content"]] == ids
    assert [b.get("tool_use_id") for b in body["messages"][2]["content"]] == [*ids, None]
