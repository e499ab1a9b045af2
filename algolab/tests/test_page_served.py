"""Experiment 3 with a served model: the page names an OpenAI-compatible server the way the CLI does
(``openai:BASE_URL#NAME``), the runner inspects it and runs the task through it with native tool calls.

The server is a real loopback HTTP server speaking the OpenAI chat-completions protocol (``GET
/v1/models``, streamed ``POST /v1/chat/completions``) with recorded response shapes: a well-behaved
model that answers every forced tool call with the pack's correct arguments. The runner has no test
policy: its official ``openai`` SDK client really connects. The live server with a real model is
``react_agent_local/tests/test_served_live.py``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest
from playwright.sync_api import expect
from served_support import chain_server

from .conftest import Process, free_port, start_runner
from .test_page_browser import TEST_POLICY_LABEL, connect_runner, inspect_model, page, shot  # noqa: F401 (page: fixture)

pytestmark = pytest.mark.browser


class RecordedModelServer:
    """``/v1/models`` lists "qwen"; each chat completion streams the next correct tool call."""

    def __init__(self) -> None:
        answer = chain_server("openai")
        self.bodies: list[dict[str, Any]] = []
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, content_type: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, "application/json",
                               json.dumps({"object": "list", "data": [{"id": "qwen", "object": "model"}]}).encode())
                else:
                    self._send(404, "application/json", b'{"error": {"message": "not found"}}')

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
                if self.path != "/v1/chat/completions":
                    self._send(404, "application/json", b'{"error": {"message": "not found"}}')
                    return
                bodies.append(body)
                self._send(200, "text/event-stream", answer(None, body))

        self.port = free_port()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def model(self) -> str:
        return f"openai:http://127.0.0.1:{self.port}/v1#qwen"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def served() -> Iterator[RecordedModelServer]:
    server = RecordedModelServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def real_runner(browser_tmp, site_port: int) -> Iterator[Process]:
    """The runner without the scripted test policy: served models are really called."""
    proc = start_runner(browser_tmp, site_port, None)
    yield proc
    proc.stop()


def test_experiment_3_runs_through_a_served_model(page: Any, real_runner: Process, served: RecordedModelServer) -> None:
    connect_runner(page, real_runner)
    expect(page.locator("#test-policy-banner")).to_be_hidden()
    inspect_model(page, served.model)
    expect(page.locator("#model-info")).to_contain_text(f"127.0.0.1:{served.port}")
    expect(page.locator("#run-start")).to_be_enabled()
    page.click("#run-start")
    expect(page.locator("#run-status")).to_have_text("已完成 completed", timeout=60_000)
    expect(page.locator("#run-final")).to_contain_text("79")
    expect(page.locator("#run-final")).not_to_contain_text(TEST_POLICY_LABEL)
    timeline = page.locator("#timeline")
    for text in ("knowledge_search", "obs-calculator-2", "obs-plot-3", "final accepted"):
        expect(timeline).to_contain_text(text)
    shot(page, "15-experiment3-served-model", "#exp3 .status-panel")

    # The protocol exchange: each step forced its tool, the final is the final_answer tool, and every
    # earlier call came back with its tool_call_id.
    forced = [b["tool_choice"]["function"]["name"] for b in served.bodies]
    assert forced == ["knowledge_search", "calculator", "plot", "final_answer"]
    last = served.bodies[-1]["messages"]
    calls = [m["tool_calls"][0]["id"] for m in last if m["role"] == "assistant"]
    assert calls == [m["tool_call_id"] for m in last if m["role"] == "tool"] and len(calls) == 3
