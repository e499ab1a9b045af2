"""Shared helpers of the runner tests: canned outputs, an in-process client, a real runner process."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from agent.task.packs import load_pack
from agent.runner.server import RunnerSettings, create_app, scripted_policy_factory
from runtime_helpers import chain_outputs

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
BASE_URL = "http://127.0.0.1:4890"
PAGE_ORIGIN = "http://127.0.0.1:8017"
MODEL_DIR = Path(os.environ.get("REACT_AGENT_MODEL_DIR", Path.home() / ".cache" / "react-agent-local" / "models"))
# The real-model tier's model: scripts/test.sh downloads the 1.5B GGUF and exports its path here.
E2E_MODEL = Path(os.environ.get("REACT_AGENT_E2E_MODEL") or
                 MODEL_DIR / "qwen2.5-coder-1.5b-gguf" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")

# What the model writes after the runtime's prefix in guided mode: search, calculate, plot, answer,
# computed from the default pack's own knowledge (runtime_helpers.chain_outputs), not typed in.
GOOD_SCRIPT: list[Any] = chain_outputs(load_pack(None))


def slow_script(seconds: float) -> list[Any]:
    """GOOD_SCRIPT whose first model call takes ``seconds`` (it honours cancel and the deadline)."""
    return [{"text": GOOD_SCRIPT[0], "seconds": seconds}, *GOOD_SCRIPT[1:]]


def make_client(runs_dir: Path, script: list[Any] | None = None, **overrides: Any) -> TestClient:
    """A TestClient whose Host header is the runner's own (127.0.0.1:4890)."""
    settings = RunnerSettings(runs_dir=runs_dir, **overrides)
    if script is not None:
        settings.policy_factory = scripted_policy_factory(script)
        settings.test_policy = True
    return TestClient(create_app(settings), base_url=BASE_URL)


def operator_token(client: Any) -> str:
    """The operator token of the runner behind ``client`` (an in-process TestClient)."""
    return client.app.state.settings.operator_token


def operator_headers(token: str) -> dict[str, str]:
    """What the operator's page sends with an approval read or answer."""
    return {"authorization": f"Bearer {token}"}


def pending_approvals(client: Any, run_id: str, token: str | None = None) -> list[dict[str, Any]]:
    """The questions ``run_id`` waits on, read as the operator (``token`` defaults to the TestClient's)."""
    reply = client.get(f"/agent/runs/{run_id}/approvals", headers=operator_headers(token or operator_token(client)))
    assert reply.status_code == 200, reply.text
    return reply.json()["approvals"]


def answer_approval(client: Any, run_id: str, approval_id: str, decision: str = "approve",
                    token: str | None = None, headers: dict[str, str] | None = None) -> Any:
    """POST the operator's answer (with the token; ``headers`` add to it)."""
    sent = {**operator_headers(token or operator_token(client)), **(headers or {})}
    return client.post(f"/agent/runs/{run_id}/approvals/{approval_id}", json={"decision": decision}, headers=sent)


def wait_for(client: Any, run_id: str, predicate, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view = client.get(f"/agent/runs/{run_id}").json()
        if predicate(view):
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {run_id}: {view['status']}")
        time.sleep(0.02)


def wait_terminal(client: Any, run_id: str, timeout: float = 30.0) -> dict[str, Any]:
    return wait_for(client, run_id, lambda v: v["terminal"], timeout)


def assert_complete_trace(events: list[dict[str, Any]]) -> None:
    """seq is 1..N without gaps or duplicates, and the last event is the only run.finished."""
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(events) + 1)), seqs
    finished = [e for e in events if e["type"] == "run.finished"]
    assert len(finished) == 1 and events[-1]["type"] == "run.finished"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """Linux: the runner gets SIGTERM if the test process dies (a killed pytest leaves no server)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def stop_process(proc: subprocess.Popen | None, sig: int = signal.SIGTERM) -> None:
    """Signal a child server and wait for it; kill it if it has not exited in 15 s."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class RunnerProcess:
    """``python algolab_local_runner.py`` as a child process with the scripted test policy."""

    def __init__(self, runs_dir: Path, script: list[Any], port: int | None = None, extra_args: list[str] = ()):
        self.runs_dir = runs_dir
        self.port = port or free_port()
        self.script_file = runs_dir.parent / f"script-{self.port}.json"
        self.script_file.write_text(json.dumps(script), encoding="utf-8")
        self.extra_args = list(extra_args)
        self.proc: subprocess.Popen | None = None
        self.base_url = f"http://127.0.0.1:{self.port}"
        #: the runner's operator token, read from its --token-file once it is up
        self.token_file = runs_dir.parent / f"token-{self.port}"
        self.token: str | None = None

    def start(self, timeout: float = 30.0) -> "RunnerProcess":
        assert self.proc is None, "this runner is already started"
        env = {**os.environ, "REACT_AGENT_TEST_POLICY": str(self.script_file)}
        self.log = open(self.runs_dir.parent / f"runner-{self.port}.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(PACKAGE_ROOT / "algolab_local_runner.py"), "--port", str(self.port),
             "--runs-dir", str(self.runs_dir), "--log-level", "warning", "--token-file", str(self.token_file),
             *self.extra_args],
            env=env, stdout=self.log, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if os.name == "posix" else None)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                raise RuntimeError("runner exited early; see its log next to the runs folder")
            try:
                if httpx.get(self.base_url + "/status", timeout=1.0).status_code == 200:
                    self.token = self.token_file.read_text(encoding="ascii").strip()
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("runner did not start in time")

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=10.0, **kwargs)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop_process(self.proc, sig)
        self.proc = None
        if getattr(self, "log", None):
            self.log.close()

    def __enter__(self) -> "RunnerProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# ---------------------------------------------------------------- the real-model tier


def require_e2e_model() -> Path:
    """The real model's path, or a failure that says how to get it (never a skip)."""
    if not E2E_MODEL.is_file():
        raise AssertionError(f"the real-model test needs {E2E_MODEL.name} at {E2E_MODEL.parent}: run "
                             "scripts/setup.sh --model qwen2.5-coder-1.5b-gguf (or set REACT_AGENT_E2E_MODEL), "
                             "or deselect the tier with -m 'not slow'")
    return E2E_MODEL


_COMPARISON = re.compile(r"(-?\d+(?:\.\d+)?)\s*(?:>=|≥)\s*(-?\d+(?:\.\d+)?)\s+is\s+(true|false)\b", re.IGNORECASE)
_NEGATIVE = re.compile(r"\b(?:does not meet|doesn't meet) the release rule|release rule is not met", re.IGNORECASE)
_POSITIVE = re.compile(r"\bmeets the release rule|release rule is met", re.IGNORECASE)


def assert_answer_is_right(final: dict[str, Any], observations: list[dict[str, Any]]) -> dict[str, float]:
    """Check a run's Final against the task recomputed from the run's own observations.

    Independent of the runtime's metrics: the calculator's value is the mean of the values the
    knowledge search returned, the answer states that average and the lowest value, every
    "X >= Y is True/False" in it is arithmetically true, and its verdict is the release rule
    applied to those values. Returns the recomputed numbers.
    """
    latest = {o["tool"]: o for o in observations if o["ok"]}
    assert {"knowledge_search", "calculator", "plot"} <= set(latest), [o["id"] for o in observations]
    assert set(final["evidence_ids"]) <= {o["id"] for o in observations}
    data = latest["knowledge_search"]["result"]["data"]
    values = [float(v) for v in data["batches"].values()]
    rule = data["release_rule"]
    average, lowest = sum(values) / len(values), min(values)
    assert math.isclose(float(latest["calculator"]["result"]["value"]), average, abs_tol=0.005), \
        (latest["calculator"]["result"], values)
    plotted = latest["plot"]["result"]["spec"]
    assert [float(v) for v in plotted["values"]] == values
    assert math.isclose(float(plotted["average"]), average, abs_tol=0.005), plotted

    answer = final["answer"]
    for word, want in (("average", average), ("lowest", lowest)):  # each number the answer gives for it
        stated = [float(n) for n in re.findall(rf"\b{word}\b[^\d-]{{0,40}}(-?\d+(?:\.\d+)?)", answer, re.I)]
        assert stated and all(math.isclose(n, want, abs_tol=0.005) for n in stated), (answer, word, want)
    comparisons = _COMPARISON.findall(answer)
    assert comparisons, f"no 'X >= Y is True/False' in {answer!r}"
    for left, right, said in comparisons:
        assert (float(left) >= float(right)) == (said.lower() == "true"), (answer, left, right, said)
    eligible = average >= rule["average_gte"] and lowest >= rule["every_batch_gte"]
    negative, positive = bool(_NEGATIVE.search(answer)), bool(_POSITIVE.search(answer))
    assert negative != positive, f"no single verdict in {answer!r}"
    assert positive == eligible, (answer, average, lowest, rule)
    return {"average": average, "lowest": lowest, "eligible": eligible, "bars": len(values)}
