"""The runner's endpoints in-process (TestClient), driven by the real runtime and the scripted policy."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.contracts.budgets import Budgets, Sampling
from agent.contracts.result import RunResult
from agent.contracts.decision import ToolErrorInfo
from agent.tools import catalog

TOOL_ARGUMENTS = {tool.name: tool.args_model for tool in catalog()}
from agent.runner.job_store import STOPPED_MESSAGE
from server_support import (
    GOOD_SCRIPT,
    PACKAGE_ROOT,
    assert_complete_trace,
    make_client,
    slow_script,
    require_e2e_model,
    wait_for,
    wait_terminal,
)

RUN = {"model_path": "scripted"}


@pytest.fixture
def client(tmp_path):
    with make_client(tmp_path / "runs", GOOD_SCRIPT) as c:
        yield c


def run_to_end(client, body=RUN):
    created = client.post("/agent/runs", json=body)
    assert created.status_code == 202, created.text
    return wait_terminal(client, created.json()["id"])


# ---------------------------------------------------------------- status and schema


def test_status_reports_runner_and_dependencies(client):
    body = client.get("/status").json()
    assert body["capabilities"] == ["agent"]
    assert re.match(r"^\d+\.\d+\.\d+$", body["version"])
    assert set(body["dependencies"]) == {"fastapi", "pydantic", "matplotlib", "llama_cpp", "torch", "transformers"}
    assert body["dependencies"]["fastapi"]
    assert "/" not in json.dumps(body["python"]) and "\\" not in json.dumps(body["python"])
    assert body["queue_length"] == 0 and body["running_job"] is None
    assert body["test_policy"] is True


def test_status_does_not_import_heavy_backends():
    code = (
        "import sys, tempfile; from pathlib import Path; sys.path.insert(0, '.')\n"
        "from fastapi.testclient import TestClient\n"
        "from agent.runner.server import RunnerSettings, create_app\n"
        "c = TestClient(create_app(RunnerSettings(runs_dir=Path(tempfile.mkdtemp()))), base_url='http://127.0.0.1:4890')\n"
        "assert c.get('/status').status_code == 200 and c.get('/schema').status_code == 200\n"
        "print(sorted(m for m in ('torch', 'transformers', 'llama_cpp') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_schema_is_generated_from_contracts(client):
    body = client.get("/schema").json()
    committed = PACKAGE_ROOT / "schemas"
    assert body["decision"] == json.loads((committed / "decision.schema.json").read_text())
    assert body["decision"]["oneOf"] or body["decision"].get("discriminator")
    assert {"tools": body["tools"]} == json.loads((committed / "tool_registry.json").read_text())
    tools = {t["name"]: t for t in body["tools"]}
    assert set(tools) == set(TOOL_ARGUMENTS)
    for name, tool in tools.items():
        assert tool["arguments_schema"] == json.loads(json.dumps(TOOL_ARGUMENTS[name].model_json_schema()))
        assert tool["timeout_seconds"] > 0
    # The page's budget form: the limits plus the sampling settings a run request accepts in "budgets".
    limits, sampling = Budgets.model_json_schema()["properties"], Sampling.model_json_schema()["properties"]
    assert body["budgets"]["properties"] == json.loads(json.dumps({**limits, **sampling}))
    assert body["sampling"] == json.loads(json.dumps(Sampling.model_json_schema()))
    assert body["recommended_budgets"] == {"max_steps": 12, "max_tool_calls": 10, "max_seconds": 300.0,
                                           "max_input_tokens": 32000, "max_output_tokens": 4000}
    packs = {p["name"]: p for p in body["packs"]}
    assert packs["default"]["ok"] and packs["default"]["required_tools"]


def test_schema_validate_accepts_and_rejects_like_the_runtime(client):
    ok = client.post("/schema/validate", json={"tool": "calculator", "arguments": {"expression": "(72 + 78) / 2"}})
    assert ok.status_code == 200 and ok.json() == {"ok": True, "tool": "calculator",
                                                   "arguments": {"expression": "(72 + 78) / 2"}}
    # Experiment 2's deliberately invalid plot: `kind` is unexpected, `title` is missing.
    bad = client.post("/schema/validate", json={"tool": "plot", "arguments": {
        "kind": "bar", "labels": ["A", "B"], "values": [1, 2]}}).json()
    assert bad["ok"] is False and bad["error"]["code"] == "invalid_arguments"
    assert bad["error"]["unexpected"] == ["kind"] and bad["error"]["missing"] == ["title"]
    assert bad["error"]["message"]
    mismatch = client.post("/schema/validate", json={"tool": "plot", "arguments": {
        "labels": ["A", "B"], "values": [1], "title": "t"}}).json()
    assert mismatch["ok"] is False and mismatch["error"]["code"] == "invalid_arguments"
    unknown = client.post("/schema/validate", json={"tool": "shell", "arguments": {}}).json()
    assert unknown["ok"] is False and unknown["error"]["code"] == "unknown_tool"
    not_object = client.post("/schema/validate", json={"tool": "plot", "arguments": [1, 2]})
    assert not_object.status_code == 422 and not_object.json()["error"]["code"] == "validation_error"


# ---------------------------------------------------------------- a run end to end


def test_run_completes_with_incremental_events(client, tmp_path):
    created = client.post("/agent/runs", json={**RUN, "budgets": {"max_steps": 8}})
    assert created.status_code == 202
    job = created.json()
    assert re.fullmatch(r"run-[0-9a-f]{12}", job["id"]) and job["status"] == "queued"
    assert job["model"]["name"] == "scripted-test-policy" and job["test_policy"] is True
    assert job["request"]["budgets"]["max_steps"] == 8

    seen, after = [], 0
    deadline = time.monotonic() + 30
    while True:  # poll like the page: after_seq = last seen seq
        view = client.get(f"/agent/runs/{job['id']}", params={"after_seq": after}).json()
        assert all(e["seq"] > after for e in view["events"])
        seen += view["events"]
        after = view["last_seq"]
        if view["terminal"] and not view["events"]:
            break
        assert time.monotonic() < deadline, f"{job['id']} did not finish: {view['status']}"
        time.sleep(0.02)
    assert_complete_trace(seen)
    assert view["status"] == "completed" and view["stop_reason"] == "completed"
    assert view["final"]["evidence_ids"] and view["metrics"]["task_success"] is True
    assert len(view["artifacts"]) == 1
    full = client.get(f"/agent/runs/{job['id']}").json()
    assert full["events"] == seen
    assert client.get(f"/agent/runs/{job['id']}", params={"after_seq": after}).json()["events"] == []

    # persisted: job.json without the model path, events.jsonl equal to what pollers saw
    folder = tmp_path / "runs" / job["id"]
    record = json.loads((folder / "job.json").read_text())
    assert "model_path" not in json.dumps(record) and record["status"] == "completed"
    lines = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    assert lines == seen
    png = client.get(f"/agent/runs/{job['id']}/artifacts/{view['artifacts'][0]}")
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert png.content.startswith(b"\x89PNG\r\n\x1a\n")


def test_list_runs_is_public_and_newest_first(client):
    first = run_to_end(client)
    second = run_to_end(client)
    body = client.get("/agent/runs").json()
    assert [r["id"] for r in body["runs"]][:2] == [second["id"], first["id"]]
    assert all("events" not in r for r in body["runs"])
    assert "scripted" not in json.dumps([r["model"].get("path") for r in body["runs"]])
    assert client.get("/agent/runs", params={"limit": 0}).status_code == 422


def test_public_model_view_hides_the_path(tmp_path):
    secret_dir = tmp_path / "private-models" / "qwen2.5-0.5b"
    secret_dir.mkdir(parents=True)
    with make_client(tmp_path / "runs") as c:  # default policy factory: the real backends
        created = c.post("/agent/runs", json={"model_path": str(secret_dir)})
        assert created.status_code == 202
        view = wait_terminal(c, created.json()["id"])
    assert view["model"]["name"] == "qwen2.5-0.5b" and re.fullmatch(r"[0-9a-f]{16}", view["model"]["path_hash"])
    assert view["status"] == "failed" and view["stop_reason"] == "model_unavailable"
    assert view["metrics"] is None and view["error"]["code"]
    text = json.dumps(view)
    assert str(tmp_path) not in text and "private-models" not in text
    assert_complete_trace(view["events"])


# ---------------------------------------------------------------- cancellation


def test_cancel_queued_and_running_jobs(tmp_path):
    with make_client(tmp_path / "runs", slow_script(20)) as c:
        running = c.post("/agent/runs", json=RUN).json()
        queued = c.post("/agent/runs", json=RUN).json()
        wait_for(c, running["id"], lambda v: v["status"] == "running")
        assert c.get(f"/agent/runs/{queued['id']}").json()["queue_position"] == 1
        assert c.get("/status").json()["queue_length"] == 1

        sealed = c.post(f"/agent/runs/{queued['id']}/cancel", json={})
        assert sealed.status_code == 200
        view = sealed.json()
        assert (view["status"], view["stop_reason"], view["metrics"]) == ("cancelled", "cancelled", None)
        events = c.get(f"/agent/runs/{queued['id']}").json()["events"]
        assert [e["type"] for e in events] == ["run.finished"] and events[0]["seq"] == 1
        assert events[0]["status"] == "cancelled" and events[0]["metrics"] is None

        assert c.post("/models/unload", json={}).status_code == 409  # the running job uses the model
        assert c.post(f"/agent/runs/{running['id']}/cancel", json={}).json()["cancel_requested"] is True
        done = wait_terminal(c, running["id"], timeout=10)
        assert (done["status"], done["stop_reason"]) == ("cancelled", "cancelled")
        assert_complete_trace(done["events"])

        again = c.post(f"/agent/runs/{running['id']}/cancel", json={})
        assert again.status_code == 409 and again.json()["error"]["code"] == "already_finished"
        assert c.post(f"/agent/runs/{queued['id']}/cancel", json={}).status_code == 409
        assert c.post("/models/unload", json={}).status_code == 200


def test_cancelled_queued_job_is_never_run(tmp_path):
    calls = []

    def counting_run(pack, policy, budgets, **kw):
        calls.append(1)
        return fake_outcome("completed")

    gate = threading.Event()

    def blocking_run(pack, policy, budgets, *, cancel, sink, **kw):
        gate.wait(10)
        return counting_run(pack, policy, budgets)

    with make_client(tmp_path / "runs", GOOD_SCRIPT, run_fn=blocking_run) as c:
        first = c.post("/agent/runs", json=RUN).json()
        second = c.post("/agent/runs", json=RUN).json()
        c.post(f"/agent/runs/{second['id']}/cancel", json={})
        gate.set()
        wait_terminal(c, first["id"])
        assert c.get(f"/agent/runs/{second['id']}").json()["status"] == "cancelled"
        assert len(calls) == 1


# ---------------------------------------------------------------- failures end every job once


def fake_outcome(stop_reason, error=None):
    from agent.contracts.result import TERMINAL_STATUS

    return SimpleNamespace(result=RunResult(status=TERMINAL_STATUS[stop_reason], stop_reason=stop_reason,
                                            error=error), events=[])


def test_runtime_exception_becomes_runtime_error(tmp_path):
    def exploding_run(pack, policy, budgets, *, sink, **kw):
        sink({"seq": 1, "type": "run.started", "step": 0, "attempt": 0, "phase": "run", "elapsed_ms": 0})
        raise RuntimeError("boom at /home/someone/secret")

    with make_client(tmp_path / "runs", GOOD_SCRIPT, run_fn=exploding_run) as c:
        view = run_to_end(c)
    assert (view["status"], view["stop_reason"]) == ("failed", "runtime_error")
    assert view["error"]["code"] == "runtime_error" and "/home" not in json.dumps(view)
    assert_complete_trace(view["events"])


def test_hidden_reasoning_and_paths_never_leave_the_store(tmp_path):
    def chatty_run(pack, policy, budgets, *, sink, **kw):
        sink({"seq": 1, "type": "model.completed", "step": 1, "attempt": 0, "phase": "model", "elapsed_ms": 1,
              "reasoning": "secret chain", "nested": {"thought": "x", "analysis": "y", "kept": 1}})
        sink({"seq": 1, "type": "duplicate", "step": 1, "attempt": 0, "phase": "model", "elapsed_ms": 1})
        sink({"seq": 2, "type": "run.finished", "step": 1, "attempt": 0, "phase": "run", "elapsed_ms": 2,
              "status": "completed", "stop_reason": "completed", "final": None, "metrics": None, "error": None})
        sink({"seq": 3, "type": "run.finished", "step": 1, "attempt": 0, "phase": "run", "elapsed_ms": 2,
              "status": "failed", "stop_reason": "runtime_error", "final": None, "metrics": None, "error": None})
        return fake_outcome("completed")

    with make_client(tmp_path / "runs", GOOD_SCRIPT, run_fn=chatty_run) as c:
        view = run_to_end(c)
    assert [e["type"] for e in view["events"]] == ["model.completed", "run.finished"]
    assert view["events"][0]["nested"] == {"kept": 1} and "reasoning" not in view["events"][0]
    assert view["status"] == "completed"


def test_event_cap_keeps_run_finished(tmp_path):
    def long_run(pack, policy, budgets, *, sink, **kw):
        for seq in range(1, 1001):
            sink({"seq": seq, "type": "budget", "step": seq, "attempt": 0, "phase": "run", "elapsed_ms": 0})
        sink({"seq": 1001, "type": "run.finished", "step": 0, "attempt": 0, "phase": "run", "elapsed_ms": 0,
              "status": "stopped", "stop_reason": "max_steps", "final": None, "metrics": None, "error": None})
        return fake_outcome("max_steps")

    with make_client(tmp_path / "runs", GOOD_SCRIPT, run_fn=long_run) as c:
        view = run_to_end(c)
    assert len(view["events"]) == 800 and view["dropped_events"] == 201
    assert view["events"][-1]["type"] == "run.finished" and view["last_seq"] == 1001


def test_unknown_pack_and_bad_bodies(client):
    r = client.post("/agent/runs", json={**RUN, "pack": "nope"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_pack"
    r = client.post("/agent/runs", json={**RUN, "pack": "../etc"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
    r = client.post("/agent/runs", json={**RUN, "budgets": {"max_steps": 0}})
    assert r.status_code == 422 and r.json()["error"]["fields"]
    r = client.post("/agent/runs", json={**RUN, "reasoning": "x"})
    assert r.status_code == 422
    r = client.post("/agent/runs", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
    r = client.post("/agent/runs", json={"model_path": "/home/someone/models/secret-model", "device": "tpu"})
    assert r.status_code == 422 and "secret-model" not in r.text and "/home" not in r.text
    assert client.get("/agent/runs").json()["count"] == 0


def test_run_creation_refuses_bad_model_paths(tmp_path):
    fifo = tmp_path / "fifo"
    import os

    os.mkfifo(fifo)
    with make_client(tmp_path / "runs") as c:
        for path in ("/dev/zero", str(fifo), "nul\x00byte", str(tmp_path / "missing")):
            r = c.post("/agent/runs", json={"model_path": path})
            assert r.status_code == 400 and r.json()["error"]["code"] == "model_unavailable"
            assert str(tmp_path) not in r.text
        assert c.get("/agent/runs").json()["count"] == 0


def test_queue_is_bounded(tmp_path):
    gate = threading.Event()

    def blocking_run(pack, policy, budgets, **kw):
        gate.wait(10)
        return fake_outcome("completed")

    with make_client(tmp_path / "runs", GOOD_SCRIPT, run_fn=blocking_run, max_queued=2) as c:
        ids = [c.post("/agent/runs", json=RUN) for _ in range(4)]
        codes = [r.status_code for r in ids]
        assert codes.count(202) == 3 and codes[-1] == 429  # one running, two queued
        assert ids[-1].json()["error"]["code"] == "queue_full"
        gate.set()


# ---------------------------------------------------------------- persistence and retention


def test_restart_keeps_finished_runs_and_seals_interrupted_ones(tmp_path):
    runs = tmp_path / "runs"
    with make_client(runs, GOOD_SCRIPT) as c:
        done = run_to_end(c)
    # Simulate a process that died: one job queued, one running mid-trace, one that emitted
    # run.finished but died before job.json caught up.
    template = json.loads((runs / done["id"] / "job.json").read_text())
    for job_id, status, events in (
        ("run-00000000000a", "queued", []),
        ("run-00000000000b", "running", done["events"][:5]),
        ("run-00000000000c", "running", done["events"]),
    ):
        folder = runs / job_id
        (folder / "artifacts").mkdir(parents=True)
        (folder / "job.json").write_text(json.dumps({**template, "id": job_id, "status": status,
                                                     "stop_reason": None, "final": None, "metrics": None}))
        (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events) + '{"seq": 99, "ty')

    with make_client(runs, GOOD_SCRIPT) as c:
        again = c.get(f"/agent/runs/{done['id']}").json()
        assert again["events"] == done["events"] and again["status"] == "completed"
        assert again["metrics"] == done["metrics"] and again["artifacts"] == done["artifacts"]
        assert c.get(f"/agent/runs/{done['id']}/artifacts/{done['artifacts'][0]}").status_code == 200
        for job_id, n in (("run-00000000000a", 0), ("run-00000000000b", 5)):
            view = c.get(f"/agent/runs/{job_id}").json()
            assert (view["status"], view["stop_reason"]) == ("failed", "runtime_error")
            assert view["error"]["message"] == STOPPED_MESSAGE
            assert len(view["events"]) == n + 1
            assert_complete_trace(view["events"])
        recovered = c.get("/agent/runs/run-00000000000c").json()
        assert recovered["status"] == "completed" and recovered["events"] == done["events"]
        assert c.post("/agent/runs/run-00000000000b/cancel", json={}).status_code == 409

    with make_client(runs, GOOD_SCRIPT) as c:  # sealing is persisted, not repeated
        view = c.get("/agent/runs/run-00000000000b").json()
        assert len(view["events"]) == 6 and view["status"] == "failed"


def test_retention_deletes_oldest_finished_runs(tmp_path):
    runs = tmp_path / "runs"
    with make_client(runs, GOOD_SCRIPT, max_runs=3) as c:
        ids = [run_to_end(c)["id"] for _ in range(5)]
        listed = [r["id"] for r in c.get("/agent/runs").json()["runs"]]
    assert listed == list(reversed(ids[2:]))
    assert sorted(p.name for p in runs.iterdir() if p.name.startswith("run-")) == sorted(ids[2:])
    with make_client(runs, GOOD_SCRIPT, max_runs=3) as c:
        assert c.get(f"/agent/runs/{ids[0]}").status_code == 404
        assert c.get(f"/agent/runs/{ids[4]}").status_code == 200


# ---------------------------------------------------------------- models


def test_unload_when_idle(client):
    r = client.post("/models/unload", json={})
    assert r.status_code == 200 and r.json() == {"unloaded": [], "count": 0}


@pytest.mark.slow
def test_unload_frees_the_resident_model(client):
    from agent.models.backends import load_policy, loaded_models

    model = require_e2e_model()
    load_policy(str(model))
    assert [m["name"] for m in client.get("/status").json()["models"]] == [model.name]
    r = client.post("/models/unload", json={})
    assert r.status_code == 200 and r.json()["count"] == 1
    assert [m["name"] for m in r.json()["unloaded"]] == [model.name] and str(model.parent) not in r.text
    assert client.get("/status").json()["models"] == [] and loaded_models() == []


def test_inspect_refuses_a_directory_of_junk(client, tmp_path):
    junk = tmp_path / "junk-model"
    junk.mkdir()
    (junk / "config.json").write_text("{not json")
    (junk / "model.safetensors").write_bytes(b"\x00" * 64)
    r = client.post("/models/inspect", json={"model_path": str(junk)})
    body = r.json()
    assert r.status_code == 400 and str(tmp_path) not in r.text
    error = body["error"]
    assert error["code"] == "model_unavailable" and error["reason"] == "weights_unreadable"
    assert "config.json is missing or unreadable" in error["message"] and "no tokenizer" in error["message"]
    # the backend's structured report rides along for the page
    report = error["report"]
    assert report["ok"] is False and report["name"] == "junk-model" and report["weights"] == {"readable": False}
    assert report["tokenizer"] == {"present": False, "chat_template": False}


def test_inspect_reports_a_usable_model(client, tmp_path):
    """A header-only GGUF written with the gguf package: the real inspection, no weights loaded."""
    import gguf

    path = tmp_path / "private-models" / "tiny.gguf"
    path.parent.mkdir()
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_token_list(["a", "b", "c"])
    writer.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    r = client.post("/models/inspect", json={"model_path": str(path)})
    assert r.status_code == 200, r.text
    report = r.json()
    assert report["ok"] is True and report["problems"] == []
    assert (report["backend"], report["kind"], report["name"]) == ("llama_cpp", "gguf", "tiny.gguf")
    assert report["config"]["architecture"] == "qwen2" and report["config"]["vocab_size"] == 3
    assert report["tokenizer"] == {"present": True, "chat_template": True}
    assert re.fullmatch(r"[0-9a-f]{16}", report["path_hash"])
    assert str(tmp_path) not in r.text and "private-models" not in r.text


@pytest.mark.slow
def test_inspect_the_real_model(client):
    model = require_e2e_model()
    r = client.post("/models/inspect", json={"model_path": str(model)})
    assert r.status_code == 200, r.text
    report = r.json()
    assert report["ok"] is True and report["name"] == model.name and report["config"]["architecture"] == "qwen2"
    assert report["weights"]["readable"] and str(model.parent) not in r.text


def test_run_result_error_is_redacted(tmp_path):
    def failing(pack, policy, budgets, **kw):
        return fake_outcome("model_unavailable", ToolErrorInfo(code="model_unavailable",
                                                               message="no weights in /home/someone/models/x"))

    with make_client(tmp_path / "runs", GOOD_SCRIPT, run_fn=failing) as c:
        view = run_to_end(c)
    assert view["status"] == "failed" and "/home" not in json.dumps(view)
