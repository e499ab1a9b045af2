"""Live: the default pack through a real llama-cpp-python server with the 1.5B, from the command
line as an operator runs it, and it must get the task right.

The server (``python -m llama_cpp.server``, the model's own chat template, as the README advises)
is started here on a free loopback port; ``react-agent run --served openai_compatible --base-url
... --model-name qwen`` reaches it without any allow flag or key (loopback is always allowed, and no
key is pinned to it). The server cannot build a grammar from the calculator's schema (its pattern),
so the 1.5B writes the whole call -- ``{"name": ..., "arguments": {...}}`` -- inside the arguments;
``backends/call_repair.py`` unwraps it, and the trace says so without the text.

``REACT_AGENT_E2E_MODEL`` names the GGUF (CI sets it to the 1.5B); the default is the downloaded one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from server_support import MODEL_DIR, free_port

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
MODEL = Path(os.environ.get("REACT_AGENT_E2E_MODEL")
             or MODEL_DIR / "qwen2.5-coder-1.5b-gguf" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
# 2 shared cores: one call of the 1.5B through the server can take a minute.
RUN_SECONDS = 1500
START_SECONDS = 240
pytestmark = [pytest.mark.slow, pytest.mark.timeout(RUN_SECONDS + START_SECONDS + 300)]


@pytest.fixture(scope="module")
def served_url(tmp_path_factory):
    if not MODEL.is_file():
        pytest.fail(f"{MODEL.name} is missing: scripts/setup.sh --model qwen2.5-coder-1.5b-gguf downloads it")
    port = free_port()
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(MODEL), "--model_alias", "qwen",
         "--n_ctx", "8192", "--n_threads", "2", "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                if httpx2.get(f"{base_url}/models", timeout=2).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            assert proc.poll() is None, "llama-cpp-python's server exited while starting: " + \
                log_path.read_text(errors="replace")[-2000:]
            assert time.monotonic() < deadline, f"llama-cpp-python's server did not start within {START_SECONDS} s"
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


def test_the_default_pack_succeeds_through_a_real_llama_cpp_python_server(served_url, tmp_path):
    runs = tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "agent", "run", "--served", "openai_compatible", "--base-url", served_url,
         "--model-name", "qwen", "--max-seconds", str(RUN_SECONDS), "--runs-dir", str(runs), "--json"],
        cwd=PACKAGE_ROOT, env=env, capture_output=True, text=True, timeout=RUN_SECONDS + 120)
    seconds = time.monotonic() - started
    assert done.stdout.strip(), done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    trace = [json.loads(line) for line in (runs / result["run_id"] / "events.jsonl").read_text().splitlines()]
    repairs = [(e["step"], [r["kind"] for r in e["repairs"]]) for e in trace if e["type"] == "model.call.repaired"]
    invalid = [(e["step"], e["code"]) for e in trace if e["type"] == "decision.invalid"]
    rejected = [e["observation"]["error"]["message"][:120] for e in trace if e["type"] == "tool.rejected"]
    summary = {"seconds": round(seconds, 1), "status": result["status"], "stop_reason": result["stop_reason"],
               "task_success": (result["metrics"] or {}).get("task_success"), "repairs": repairs,
               "invalid": invalid, "rejected": rejected, "error": result["error"]}
    print(json.dumps(summary))
    assert (result["status"], result["stop_reason"]) == ("completed", "completed"), summary
    assert result["metrics"]["task_success"] is True, summary
    assert done.returncode == 0
    for event in trace:  # a repair is described, never quoted
        if event["type"] == "model.call.repaired":
            assert all(set(r) == {"kind", "original_sha256", "fields"} for r in event["repairs"])
