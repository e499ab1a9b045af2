"""The Anthropic client (``kind: anthropic``): the Messages API with native tool use over the
official ``anthropic`` SDK, streamed.

Tools go out as ``{name, description, input_schema}``; a guided branch forces its tool with
``{"type": "tool", "name": ...}`` and disables parallel tool use; free mode uses ``{"type": "auto"}``,
which allows it (the API's default) where a tool of the run is read-only (``served.parallel_calls``)
and disables it otherwise. Earlier Observations come back as an assistant ``tool_use`` block and a user
``tool_result`` block with the same ``tool_use_id`` (``is_error: true`` for a failed Observation),
the calls of one reply as one assistant message with a ``tool_use`` block each and one user message
with their ``tool_result`` blocks, in order; the step's instruction follows the results in the same
user message, as the API wants turns to alternate. ``stop_reason: "max_tokens"`` is a truncated reply, never a Final. No sampling settings are sent:
the SDK's ``messages.create`` takes none (the run's temperature applies to OpenAI-compatible servers). An ``error`` event
inside the stream (``overloaded_error`` and the like) is bucketed like the HTTP status it stands for.
A ``tool_use`` block's input (an object, or the streamed JSON text) is repaired like any served
provider's arguments (``call_repair.py``: an envelope around them, text encoded twice, a call
written in a text block).

The default host, api.anthropic.com, is not loopback: the runner's operator must allow it
(``--allow-model-host api.anthropic.com``) and ``ANTHROPIC_API_KEY`` must be in its environment.
Tested against recorded response shapes only (no Anthropic server is reachable from CI).
"""

from __future__ import annotations

from typing import Any, Callable

from agent.models.model_policy import ModelUnavailable
from agent.models.backends.served import NO_KEY, Conversation, Reply, ServedPolicy, ToolCall, parallel_calls


def messages(conversation: Conversation) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(role: str, block: dict[str, Any]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].append(block)
        else:
            out.append({"role": role, "content": [block]})

    for turn in conversation.turns:
        if turn.kind == "user":
            add("user", {"type": "text", "text": turn.text})
        elif turn.kind == "call":
            add("assistant", {"type": "tool_use", "id": turn.call_id, "name": turn.name, "input": turn.arguments})
        else:
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": turn.call_id, "content": turn.text}
            if turn.is_error:
                block["is_error"] = True
            add("user", block)
    return out


def request_body(spec: Any, request: Any, conversation: Conversation) -> dict[str, Any]:
    """The JSON body of one Messages call (what ``messages.create`` sends)."""
    body: dict[str, Any] = {
        "model": spec.model,
        "max_tokens": request.max_new_tokens,
        "system": conversation.system,
        "messages": messages(conversation),
        "tools": [{"name": t.name, "description": t.description, "input_schema": t.schema}
                  for t in conversation.tools],
        "tool_choice": ({"type": "tool", "name": conversation.forced, "disable_parallel_tool_use": True}
                        if conversation.forced else {"type": "auto"} if parallel_calls(request, conversation)
                        else {"type": "auto", "disable_parallel_tool_use": True}),
        # No temperature/top_p/top_k: the SDK's Messages.create (2.14) takes none, so the API decides.
        "stream": True,
    }
    return body


class AnthropicPolicy(ServedPolicy):
    protocol = "anthropic"

    def _client(self) -> Any:
        if self._sdk is None:
            try:
                import anthropic
            except ImportError:
                raise ModelUnavailable("the anthropic package is not installed (pip install anthropic==2.14.0)",
                                       code="dependency_missing") from None
            self._sdk = anthropic.Anthropic(base_url=self.endpoint.base_url, api_key=self._secret or NO_KEY,
                                            http_client=self._http, max_retries=0)
        return self._sdk

    def _open(self, client: Any, request: Any, conversation: Conversation, timeout: Any) -> Any:
        return client.messages.create(**request_body(self.spec, request, conversation), timeout=timeout)

    def _consume(self, stream: Any, reply: Reply, stop: Callable[[], str | None]) -> None:
        blocks: dict[int, ToolCall] = {}
        partial: dict[int, list[str]] = {}
        for event in stream:
            halt = stop()
            if halt:
                reply.finish = halt
                return
            kind = getattr(event, "type", None)
            if kind == "message_start":
                usage = event.message.usage
                reply.input_tokens = (usage.input_tokens or 0) + int(getattr(usage, "cache_read_input_tokens", 0) or 0)
                reply.cached_tokens = int(getattr(usage, "cache_read_input_tokens", 0) or 0)
            elif kind == "content_block_start":
                block = event.content_block
                if getattr(block, "type", None) == "tool_use":
                    blocks[event.index] = ToolCall(name=block.name, arguments=block.input or {}, id=block.id)
                    reply.had_output = True
                elif getattr(block, "type", None) == "text" and block.text:
                    reply.text += block.text
                    self._delta(reply, "text", block.text)
            elif kind == "content_block_delta":
                delta = event.delta
                if delta.type == "text_delta":
                    reply.text += delta.text
                    self._delta(reply, "text", delta.text)
                elif delta.type == "input_json_delta":
                    partial.setdefault(event.index, []).append(delta.partial_json)
                    self._delta(reply, "arguments", delta.partial_json)
            elif kind == "message_delta":
                if event.delta.stop_reason:
                    reply.finish = "length" if event.delta.stop_reason == "max_tokens" else "stop"
                if event.usage is not None and event.usage.output_tokens is not None:
                    reply.output_tokens = event.usage.output_tokens
        for index in sorted(blocks):
            call = blocks[index]
            if index in partial:  # the streamed input replaces the empty one of content_block_start
                call.arguments = "".join(partial[index])
            reply.calls.append(call)


def load(spec: Any, access: Any = None, **options: Any) -> AnthropicPolicy:
    return AnthropicPolicy(spec, access, **options)
