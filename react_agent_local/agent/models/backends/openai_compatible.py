"""The OpenAI-compatible client (``kind: openai_compatible``): chat completions with native tool
calling over the official ``openai`` SDK, streamed.

Tools go out as ``{"type": "function", "function": {name, description, parameters}}`` (with
``strict: true`` and strict-mode schemas when the spec asks for them); a guided branch names its
function in ``tool_choice`` and ``parallel_tool_calls`` is false; free mode sends ``"auto"``, with
``parallel_tool_calls`` true where a tool of the run is read-only (``served.parallel_calls``). Earlier
Observations come back as an assistant message with ``tool_calls`` and a ``tool`` message with the
same ``tool_call_id``; the calls of one reply as one assistant message with all of them, then one
``tool`` message per call, in order. ``max_tokens`` is always the runtime's bound, and ``stream_options`` asks for
usage (servers that send none get an estimate). ``finish_reason: "length"`` is a truncated reply.
What the server sends back is repaired as for every served provider (``call_repair.py``); this
module only drops strict mode's nulls afterwards (``_tidy``).

Tested against llama-cpp-python's server (live) and vLLM's request model (request shape); the edge
cases (429, 5xx, cut streams, malformed arguments) against recorded response shapes.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from agent.models.model_policy import ModelUnavailable
from agent.models.backends.served import (
    NO_KEY, Conversation, ErrorEvent, Reply, ServedPolicy, ToolCall, parallel_calls, sampling_options
)


def strict_schema(schema: Any) -> Any:
    """A JSON schema in OpenAI's strict form: every property required (an optional one may be
    null), no additional properties, no defaults. ``strip_nulls`` undoes the nulls on the way back."""
    if isinstance(schema, list):
        return [strict_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict_schema(v) for k, v in schema.items() if k not in ("default", "title")}
    if schema.get("type") == "object" and isinstance(schema.get("properties"), dict):
        required = set(schema.get("required", []))
        out["properties"] = {name: (strict_schema(sub) if name in required else
                                    {"anyOf": [strict_schema(sub), {"type": "null"}]})
                             for name, sub in schema["properties"].items()}
        out["required"] = list(schema["properties"])
        out["additionalProperties"] = False
    return out


def strip_nulls(arguments: Any) -> Any:
    """Strict mode's nulls mean "not given": drop them so the tool's defaults apply."""
    if isinstance(arguments, dict):
        return {k: v for k, v in arguments.items() if v is not None}
    return arguments


def messages(conversation: Conversation) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": conversation.system}]
    for turn in conversation.turns:
        if turn.kind == "user":
            out.append({"role": "user", "content": turn.text})
        elif turn.kind == "call":
            call = {"id": turn.call_id, "type": "function",
                    "function": {"name": turn.name, "arguments": json.dumps(turn.arguments, ensure_ascii=False)}}
            if out[-1].get("tool_calls"):  # a call right after a call: the same reply's (a batch)
                out[-1]["tool_calls"].append(call)
            else:
                # content "" rather than null: llama-cpp-python's server refuses a null content.
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        else:
            # The protocol has no error flag on a tool message: the Observation line says FAILED.
            out.append({"role": "tool", "tool_call_id": turn.call_id, "content": turn.text})
    return out


def request_body(spec: Any, request: Any, conversation: Conversation) -> dict[str, Any]:
    """The JSON body of one chat completions call (what ``chat.completions.create`` sends)."""
    tools = []
    for tool in conversation.tools:
        function: dict[str, Any] = {"name": tool.name, "description": tool.description,
                                    "parameters": strict_schema(tool.schema) if spec.strict_tools else tool.schema}
        if spec.strict_tools:
            function["strict"] = True
        tools.append({"type": "function", "function": function})
    sampling = sampling_options(request)
    if not spec.send_top_k:
        sampling.pop("top_k", None)
    return {
        "model": spec.model,
        "messages": messages(conversation),
        "tools": tools,
        "tool_choice": ({"type": "function", "function": {"name": conversation.forced}}
                        if conversation.forced else "auto"),
        "parallel_tool_calls": parallel_calls(request, conversation),
        "max_tokens": request.max_new_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        **sampling,
    }


class OpenAICompatiblePolicy(ServedPolicy):
    protocol = "openai_compatible"

    def _client(self) -> Any:
        if self._sdk is None:
            try:
                import openai
            except ImportError:
                raise ModelUnavailable("the openai package is not installed (pip install openai==3.57.0)",
                                       code="dependency_missing") from None
            self._sdk = openai.OpenAI(base_url=self.endpoint.base_url, api_key=self._secret or NO_KEY,
                                      http_client=self._http, max_retries=0)
        return self._sdk

    def _open(self, client: Any, request: Any, conversation: Conversation, timeout: Any) -> Any:
        body = request_body(self.spec, request, conversation)
        extra = {k: body.pop(k) for k in ("top_k",) if k in body}  # not in the SDK's signature
        return client.chat.completions.create(**body, extra_body=extra or None, timeout=timeout)

    def _consume(self, stream: Any, reply: Reply, stop: Callable[[], str | None]) -> None:
        calls: dict[int, ToolCall] = {}
        arguments: dict[int, list[str]] = {}
        for chunk in stream:
            halt = stop()
            if halt:
                reply.finish = halt
                return
            error = getattr(chunk, "error", None)  # an error object in place of a chunk
            if error is not None:
                raise ErrorEvent({"error": error})
            usage = getattr(chunk, "usage", None)
            if usage is not None:
                reply.input_tokens = usage.prompt_tokens
                reply.output_tokens = usage.completion_tokens
                details = getattr(usage, "prompt_tokens_details", None)
                reply.cached_tokens = int(getattr(details, "cached_tokens", 0) or 0)
            for choice in chunk.choices or []:
                delta = choice.delta
                if delta is not None and delta.content:
                    reply.text += delta.content
                    self._delta(reply, "text", delta.content)
                for part in (delta.tool_calls or []) if delta is not None else []:
                    call = calls.setdefault(part.index, ToolCall(name="", arguments=""))
                    if part.id:
                        call.id = part.id
                    if part.function is not None:
                        name = part.function.name
                        # OpenAI sends the name once; llama-cpp-python's server repeats it in every chunk.
                        if name and name != call.name:
                            call.name += name
                        if part.function.arguments:
                            arguments.setdefault(part.index, []).append(part.function.arguments)
                            self._delta(reply, "arguments", part.function.arguments)
                    reply.had_output = True
                if choice.finish_reason:
                    reply.finish = "length" if choice.finish_reason == "length" else "stop"
        for index in sorted(calls):
            calls[index].arguments = "".join(arguments.get(index, []))
            reply.calls.append(calls[index])

    def _tidy(self, arguments: dict[str, Any]) -> dict[str, Any]:
        # After the repairs: the nulls of arguments that came in an envelope or encoded twice go too.
        return strip_nulls(arguments) if self.spec.strict_tools else arguments


def load(spec: Any, access: Any = None, **options: Any) -> OpenAICompatiblePolicy:
    return OpenAICompatiblePolicy(spec, access, **options)
