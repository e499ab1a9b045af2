"""Recorded response shapes of the two tool-use protocols, answered through httpx2's MockTransport
(the HTTP library under both official SDKs), for the served-model tests.

The shapes are what the servers send: OpenAI-style ``chat.completion.chunk`` events ending in
``data: [DONE]`` (llama-cpp-python's server repeats the function name in every chunk and sends no
usage; vLLM and OpenAI send the name once and a usage chunk), and Anthropic's ``message_start`` /
``content_block_*`` / ``message_delta`` / ``message_stop`` events, with ``error`` events inside a
200 stream.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Callable

import httpx2
from runtime_helpers import chain_outputs

from agent.models.backends.anthropic_client import AnthropicPolicy
from agent.models.backends.openai_compatible import OpenAICompatiblePolicy
from agent.models.backends.served import ServedAccess
from agent.models.providers import AnthropicSpec, OpenAICompatibleSpec
from agent.contracts.budgets import Budgets
from agent.task.packs import load_pack
from agent.core.runtime import RunOutcome
from agent.core.run import run_agent

BASE_URL = "http://127.0.0.1:8999/v1"
SECRET = "sk-test-SECRET-0123456789abcdef"


# -- SSE bodies ------------------------------------------------------------------------------------

def sse(events: list[tuple[str | None, Any]]) -> bytes:
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    return "".join(out).encode()


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None, usage: dict[str, int] | None = None,
           choices: bool = True) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "qwen",
            "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else [],
            **({"usage": usage} if usage else {})}


def split(text: str, parts: int) -> list[str]:
    size = max(1, -(-len(text) // parts))
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def openai_events(name: str | None = None, arguments: Any = None, *, text: str = "", finish: str = "tool_calls",
                  usage: tuple[int, int] | None = (120, 30), repeat_name: bool = False, parts: int = 3,
                  calls: int = 1, done: bool = True) -> list[tuple[str | None, Any]]:
    events: list[tuple[str | None, Any]] = [(None, _chunk({"role": "assistant", "content": None}))]
    for piece in (split(text, parts) if text else []):
        events.append((None, _chunk({"content": piece})))
    if name is not None:
        args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        for index in range(calls):
            for i, piece in enumerate(split(args, parts)):
                function = {"arguments": piece}
                if i == 0 or repeat_name:
                    function["name"] = name
                part = {"index": index, "function": function}
                if i == 0:
                    part.update(id=f"call_{index}", type="function")
                events.append((None, _chunk({"tool_calls": [part]})))
    events.append((None, _chunk({}, finish=finish)))
    if usage:
        events.append((None, _chunk(choices=False, usage={"prompt_tokens": usage[0], "completion_tokens": usage[1],
                                                          "total_tokens": sum(usage)})))
    if done:
        events.append((None, "[DONE]"))
    return events


def openai_reply(*args: Any, **kwargs: Any) -> bytes:
    return sse(openai_events(*args, **kwargs))


def anthropic_events(name: str | None = None, arguments: Any = None, *, text: str = "", stop: str = "tool_use",
                     usage: tuple[int, int] = (120, 30), parts: int = 3,
                     end: bool = True) -> list[tuple[str | None, Any]]:
    events: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": 1}}})]
    index = 0
    if text:
        events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": {"type": "text", "text": ""}}))
        for piece in split(text, parts):
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                   "delta": {"type": "text_delta", "text": piece}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    if name is not None:
        args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
            "type": "tool_use", "id": "toolu_1", "name": name, "input": {}}}))
        for piece in split(args, parts):
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                   "delta": {"type": "input_json_delta", "partial_json": piece}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    if end:
        events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                         "usage": {"output_tokens": usage[1]}}))
        events.append(("message_stop", {"type": "message_stop"}))
    return events


def anthropic_reply(*args: Any, **kwargs: Any) -> bytes:
    return sse(anthropic_events(*args, **kwargs))


def anthropic_error_event(kind: str = "overloaded_error", message: str = "Overloaded") -> tuple[str, Any]:
    return ("error", {"type": "error", "error": {"type": kind, "message": message}})


# -- streams that break --------------------------------------------------------------------------

class CutStream(httpx2.SyncByteStream):
    """Sends ``data`` and then the connection drops."""

    def __init__(self, data: bytes):
        self.data = data

    def __iter__(self):
        if self.data:
            yield self.data
        raise httpx2.RemoteProtocolError("peer closed connection without sending complete message body")


class StallStream(httpx2.SyncByteStream):
    """Sends ``data``, then nothing: a read that would time out after ``seconds`` (or ends when closed)."""

    def __init__(self, data: bytes = b"", seconds: float = 30.0):
        self.data, self.seconds = data, seconds
        self.closed = threading.Event()

    def __iter__(self):
        if self.data:
            yield self.data
        if self.closed.wait(self.seconds):
            raise httpx2.ReadError("connection closed while reading")
        raise httpx2.ReadTimeout("timed out")

    def close(self) -> None:
        self.closed.set()


# -- a fake server -------------------------------------------------------------------------------

Reply = bytes | httpx2.Response | Callable[[httpx2.Request, dict[str, Any]], Any]


class FakeServer:
    """Answers each request with the next scripted reply and records what was sent: the JSON body,
    the headers, the URL."""

    def __init__(self, replies: list[Reply] | Callable[[httpx2.Request, dict[str, Any]], Any]):
        self.replies = replies
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[httpx2.Headers] = []
        self.urls: list[str] = []
        self.transport = httpx2.MockTransport(self.handle)

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content or b"{}")
        self.bodies.append(body)
        self.headers.append(request.headers)
        self.urls.append(str(request.url))
        reply = self.replies(request, body) if callable(self.replies) else self.replies.pop(0)
        while callable(reply):
            reply = reply(request, body)
        if isinstance(reply, bytes):
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=reply)
        if isinstance(reply, httpx2.SyncByteStream):
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=reply)
        return reply


def error_response(status: int, message: str = "error", headers: dict[str, str] | None = None,
                   kind: str | None = None) -> httpx2.Response:
    body = ({"type": "error", "error": {"type": kind, "message": message}} if kind
            else {"error": {"message": message, "type": "error", "code": status}})
    return httpx2.Response(status, headers={"content-type": "application/json", **(headers or {})}, json=body)


# -- the default pack's correct chain, as tool calls ---------------------------------------------

def chain_arguments(pack: Any = None) -> dict[str, Any]:
    outputs = chain_outputs(pack or load_pack(None))
    return {"knowledge_search": json.loads(outputs[0]), "calculator": json.loads(outputs[1]),
            "plot": json.loads(outputs[2]), "final_answer": json.loads(outputs[3])}


def forced_tool(body: dict[str, Any]) -> str | None:
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        return choice.get("name") or (choice.get("function") or {}).get("name")
    return None


def final_evidence(body: dict[str, Any]) -> list[str]:
    final = body["tools"][-1]
    schema = final.get("input_schema") or final["function"]["parameters"]
    return schema["properties"]["evidence_ids"]["items"]["enum"]


def chain_server(protocol: str, pack: Any = None) -> Callable[[httpx2.Request, dict[str, Any]], bytes]:
    """Answers every forced call with the pack's correct arguments (a well-behaved model)."""
    arguments = chain_arguments(pack)
    reply = openai_reply if protocol == "openai" else anthropic_reply

    def answer(request: httpx2.Request, body: dict[str, Any]) -> bytes:
        tool = forced_tool(body)
        if tool == "final_answer":
            return reply("final_answer", {"answer": arguments["final_answer"], "evidence_ids": final_evidence(body)})
        return reply(tool, arguments[tool])

    return answer


def openai_policy(server: FakeServer, **options: Any) -> OpenAICompatiblePolicy:
    spec = OpenAICompatibleSpec(kind="openai_compatible", base_url=options.pop("base_url", BASE_URL), model="qwen",
                                **options.pop("spec", {}))
    return OpenAICompatiblePolicy(spec, options.pop("access", None), transport=server.transport,
                                  backoff_seconds=0.0, **options)


def anthropic_policy(server: FakeServer, **options: Any) -> AnthropicPolicy:
    spec = AnthropicSpec(kind="anthropic", model="claude-test", base_url=options.pop("base_url", "http://127.0.0.1:8998"),
                         **options.pop("spec", {}))
    return AnthropicPolicy(spec, options.pop("access", None), transport=server.transport, backoff_seconds=0.0,
                           **options)


def run(policy: Any, tmp_path: Path, **kwargs: Any) -> RunOutcome:
    pack = kwargs.pop("pack", None) or load_pack(None)
    return run_agent(pack, policy, kwargs.pop("budgets", None) or Budgets(), artifact_dir=tmp_path / "artifacts",
                     **kwargs)


def events(outcome: RunOutcome, kind: str) -> list[dict[str, Any]]:
    return [e for e in outcome.events if e["type"] == kind]


def finished(outcome: RunOutcome) -> dict[str, Any]:
    return events(outcome, "run.finished")[0]


def allow(*hosts: str) -> ServedAccess:
    return ServedAccess.of(hosts)
