"""Several jobs at once when the model is served (issue 17): served jobs run side by side (up to the
limit), each with its own cancel, events never mixed; in-process jobs still run one at a time."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from agent.runner.requests import RunRequest
from agent.contracts.result import RunResult
from agent.runner.job_store import JobStore
from agent.contracts.trace import Trace

SERVED = {"model": {"kind": "openai_compatible", "base_url": "http://127.0.0.1:9/v1", "model": "qwen"}}
LOCAL = {"model_path": "scripted"}


def test_served_jobs_run_side_by_side_local_ones_one_at_a_time(tmp_path):
    lock = threading.Lock()
    running: set[str] = set()
    peak = {"served": 0, "local": 0}
    release = threading.Event()

    def run(pack, policy, budgets, *, sink, cancel, **kw):
        kind = policy
        trace = Trace(sink)
        trace.emit("run.started", "run", kind=kind)
        me = f"{kind}-{threading.get_ident()}"
        with lock:
            running.add(me)
            peak[kind] = max(peak[kind], sum(1 for r in running if r.startswith(kind)))
        while not (release.is_set() or cancel.is_set()):
            time.sleep(0.01)
        with lock:
            running.discard(me)
        trace.emit("run.finished", "run", status="cancelled" if cancel.is_set() else "completed",
                   stop_reason="cancelled" if cancel.is_set() else "completed", final=None, metrics=None, error=None)
        status = "cancelled" if cancel.is_set() else "completed"
        return SimpleNamespace(result=RunResult(status=status, stop_reason=status), events=trace.events)

    policy_for = lambda request: "served" if request.model.kind != "local" else "local"  # noqa: E731
    store = JobStore(tmp_path / "runs", run, policy_for, max_concurrent_served=3)
    try:
        served = [store.submit(RunRequest.model_validate(SERVED), {"name": "qwen"})["id"] for _ in range(5)]
        local = [store.submit(RunRequest.model_validate(LOCAL), {"name": "m"})["id"] for _ in range(2)]
        deadline = time.monotonic() + 10
        while (peak["served"] < 3 or peak["local"] < 1) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        assert peak == {"served": 3, "local": 1}  # three served at once (the limit), one local
        assert len(store.running_ids) == 4
        store.cancel(served[0])  # its own cancel: the others keep running
        deadline = time.monotonic() + 10
        while store.view(served[0])["status"] != "cancelled" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [store.view(j)["status"] for j in served[1:3]] == ["running", "running"]
        release.set()
        deadline = time.monotonic() + 20
        while any(store.view(j)["status"] in ("queued", "running") for j in served + local) and time.monotonic() < deadline:
            time.sleep(0.02)
        for job_id in served + local:
            view = store.view(job_id)
            kinds = {e.get("kind") for e in view["events"] if e["type"] == "run.started"}
            assert len(kinds) == 1  # never another job's events
            assert [e["type"] for e in view["events"]].count("run.finished") == 1
        assert peak["local"] == 1
    finally:
        release.set()
        store.close()
