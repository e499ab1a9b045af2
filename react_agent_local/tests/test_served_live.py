"""Live: the runtime through a real OpenAI-compatible server on loopback.

The server is llama-cpp-python's own (its ``[server]`` extra; the same engine as the in-process
backend) with Qwen2.5-Coder-0.5B GGUF and the model's own chat template (Qwen's Hermes tool format),
started here on a free loopback port. Nothing is mocked: the official ``openai`` SDK streams real
chat completions, and a recording transport keeps what went over the wire so the tests can assert
the protocol exchange -- the forced function, ``tool_call_id`` pairing of every earlier
Observation, the status of every response -- besides how the run ended.

A 0.5B model is not asked to get the task right (the in-process 0.5B does not either; see
bench/results); the run must end on its own terms (completed, or stopped by a budget or a guard),
never on a protocol failure. ``REACT_AGENT_SERVED_MODEL`` names another GGUF.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2
import pytest
from server_support import MODEL_DIR, free_port

from agent.models.backends.openai_compatible import OpenAICompatiblePolicy
from agent.contracts.budgets import Budgets
from agent.models.providers import OpenAICompatibleSpec
from agent.task.packs import load_pack
from agent.core.run import run_agent

MODEL = Path(os.environ.get("REACT_AGENT_SERVED_MODEL")
             or MODEL_DIR / "qwen2.5-coder-0.5b-gguf" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
# A 2-core machine shared with other jobs: one call can take a minute; the budgets say how long a run may.
RUN_SECONDS = 1200
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * RUN_SECONDS + 600)]


class RecordingTransport(httpx2.HTTPTransport):
    """The real HTTP transport, keeping each request's JSON body and each response's status."""

    def __init__(self) -> None:
        super().__init__()
        self.exchanges: list[dict] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = super().handle_request(request)
        self.exchanges.append({"body": json.loads(request.content or b"{}"), "status": response.status_code})
        return response


@pytest.fixture(scope="module")
def served_url(tmp_path_factory):
    if not MODEL.is_file():
        pytest.fail(f"{MODEL.name} is missing: scripts/setup.sh --model qwen2.5-coder-0.5b-gguf downloads it")
    if importlib.util.find_spec("sse_starlette") is None or importlib.util.find_spec("starlette_context") is None:
        pytest.fail("llama-cpp-python's server extra is missing: scripts/setup.sh installs requirements-dev.txt")
    port = free_port()
    log = (tmp_path_factory.mktemp("llama-server") / "server.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(MODEL), "--model_alias", "qwen",
         "--n_ctx", "8192", "--n_threads", "2", "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx2.get(f"{base_url}/models", timeout=2).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            assert proc.poll() is None, "llama-cpp-python's server exited while starting"
            assert time.monotonic() < deadline, "llama-cpp-python's server did not start within 180 s"
            time.sleep(0.5)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def policy_for(base_url: str) -> tuple[OpenAICompatiblePolicy, RecordingTransport]:
    transport = RecordingTransport()
    spec = OpenAICompatibleSpec(kind="openai_compatible", base_url=base_url, model="qwen")
    return OpenAICompatiblePolicy(spec, transport=transport), transport


def assert_history_pairs(body: dict, observation_ids: list[str]) -> None:
    calls = [m for m in body["messages"] if m["role"] == "assistant"]
    results = [m for m in body["messages"] if m["role"] == "tool"]
    assert [c["tool_calls"][0]["id"] for c in calls] == [r["tool_call_id"] for r in results]
    assert [r["tool_call_id"] for r in results] == [f"call_{i}" for i in observation_ids]
    assert all(r["content"].startswith(f"[{i}]") for r, i in zip(results, observation_ids))


def summary(outcome, transport) -> str:
    return json.dumps({"stop_reason": outcome.result.stop_reason, "error": outcome.result.error and outcome.result.error.model_dump(),
                       "calls": [(e["status"], e["body"]["tool_choice"]) for e in transport.exchanges]}, default=str)


def test_guided_run_through_a_real_server(served_url, tmp_path):
    policy, transport = policy_for(served_url)
    outcome = run_agent(load_pack(None), policy, Budgets(max_seconds=RUN_SECONDS), artifact_dir=tmp_path / "a")
    info = summary(outcome, transport)
    print(info)
    assert outcome.events[-1]["type"] == "run.finished"
    # the run ends on its own terms: every request was accepted and every reply understood
    assert outcome.result.stop_reason in ("completed", "max_steps", "tool_budget", "loop_detected", "token_budget"), info
    assert all(e["status"] == 200 for e in transport.exchanges), info
    bodies = [e["body"] for e in transport.exchanges]
    assert bodies[0]["tool_choice"] == {"type": "function", "function": {"name": "knowledge_search"}}
    assert all(b["stream"] and b["parallel_tool_calls"] is False and b["max_tokens"] <= 256 for b in bodies)
    # a forced function is decoded under the server's grammar: the first Decision is valid at once
    first = next(e for e in outcome.events if e["type"] in ("decision.valid", "decision.invalid"))
    assert first["type"] == "decision.valid" and first["decision"]["tool"] == "knowledge_search"
    # each request carries the Observations made so far as calls and their results, paired by id
    ids = [o.id for o in outcome.result.observations]
    counts = [sum(m["role"] == "tool" for m in b["messages"]) for b in bodies]
    assert counts == sorted(counts) and counts[0] == 0 and counts[-1] >= 1, info
    for body, count in zip(bodies, counts):
        assert_history_pairs(body, ids[:count])


def test_free_mode_through_a_real_server(served_url, tmp_path):
    """tool_choice auto: Qwen-Coder writes its calls as text; they are recovered and counted."""
    policy, transport = policy_for(served_url)
    outcome = run_agent(load_pack(None), policy, Budgets(max_seconds=RUN_SECONDS, max_steps=3),
                        artifact_dir=tmp_path / "a", mode="free")
    info = summary(outcome, transport)
    print(info)
    assert outcome.events[-1]["type"] == "run.finished"
    assert outcome.result.stop_reason not in ("model_unavailable", "runtime_error"), info
    assert all(e["status"] == 200 and e["body"]["tool_choice"] == "auto" for e in transport.exchanges), info
    completed = [e for e in outcome.events if e["type"] in ("model.completed", "model.repair.completed")]
    assert completed and all(e["finish_reason"] in ("stop", "length") for e in completed)
    print("protocol repairs per call:", [e["protocol_repairs"] for e in completed])


def test_cancel_reaches_a_real_stream(served_url, tmp_path):
    policy, transport = policy_for(served_url)
    cancel = threading.Event()
    threading.Timer(2.0, cancel.set).start()
    started = time.monotonic()
    outcome = run_agent(load_pack(None), policy, Budgets(max_seconds=RUN_SECONDS), artifact_dir=tmp_path / "a",
                        cancel=cancel)
    assert (outcome.result.status, outcome.result.stop_reason) == ("cancelled", "cancelled")
    assert time.monotonic() - started < 10
