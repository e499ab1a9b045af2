"""Tools that really stop (issue 17): a timed-out or cancelled attempt's worker process is killed,
its CPU and its files are gone, and the next attempt gets a fresh worker."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from agent.contracts.budgets import Budgets
from agent.task.packs import load_pack
from agent.tools import WORKSPACE_TOOLS, ToolContext, ToolRegistry, catalog
from agent.tools.isolation import worker
from isolation_tools import SPIN, SpinArgs
from runtime_helpers import events_of, run_scripted


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not status.exists() or "zombie" not in status.read_text()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spin_pack(tmp_path: Path):
    root = tmp_path / "spin_pack"
    (root / "knowledge").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "task.json").write_text(json.dumps({"id": "spin_pack", "goal": "Spin.", "required_tools": ["spin"]}))
    (root / "data" / "expected.json").write_text(json.dumps({"checks": [{"type": "final_accepted"}]}))
    return load_pack(root)


def test_a_spinning_tool_is_killed_at_its_timeout_and_leaves_nothing(tmp_path):
    ctx = ToolContext(knowledge_dir=tmp_path, artifact_dir=tmp_path / "artifacts")
    w = worker()
    started = time.monotonic()
    # Warm: the worker answers a quick attempt and keeps running.
    assert w.run(SPIN, {"seconds": 0.0}, ctx, wait_until=time.monotonic() + 30, cancel=threading.Event())["slept"] == 0
    pid = w.pid
    assert pid is not None and (tmp_path / "artifacts" / "late.txt").exists()
    (tmp_path / "artifacts" / "late.txt").unlink()
    # A spinning attempt burns CPU until the deadline, then its process is gone.
    box = {}
    runner = threading.Thread(target=lambda: box.setdefault("result", w.run(
        SPIN, SpinArgs(seconds=5, spin=True).model_dump(), ctx, wait_until=time.monotonic() + 1.5,
        cancel=threading.Event())))
    runner.start()
    time.sleep(0.3)
    cpu_before = _cpu_seconds(pid)
    time.sleep(0.8)
    cpu_spent = _cpu_seconds(pid) - cpu_before
    runner.join(10)
    print(f"worker {pid}: {cpu_spent:.2f} CPU s in 0.8 s while spinning; alive after the timeout: {_alive(pid)}")
    assert cpu_spent > 0.2  # it really was spinning (a shared 2-core machine gives it at least a quarter)
    assert box["result"] is None and not _alive(pid)
    time.sleep(5.5)  # longer than the tool would have run: nothing was written late
    assert list((tmp_path / "artifacts").iterdir()) == []
    # The next attempt gets a fresh worker process.
    assert w.run(SPIN, {"seconds": 0.0}, ctx, wait_until=time.monotonic() + 30, cancel=threading.Event())
    assert w.pid not in (None, pid)
    assert time.monotonic() - started < 30


def test_the_runtime_kills_a_hanging_tool_and_retries_it(tmp_path):
    registry = ToolRegistry().register(SPIN)
    calls = [json.dumps({"seconds": 30, "spin": True})] + [json.dumps({"seconds": 30, "spin": True})] * 2
    started = time.monotonic()
    outcome, _ = run_scripted(calls[:1], tmp_path, pack=_spin_pack(tmp_path), tools=registry,
                              budgets=Budgets(max_retries=1, max_steps=1), complete=True)
    elapsed = time.monotonic() - started
    retries = events_of(outcome, "tool.retry")
    failed = events_of(outcome, "tool.failed")
    assert [e["error"]["code"] for e in retries + failed] == ["tool_timeout", "tool_timeout"]
    assert elapsed < 10  # two attempts of 0.5 s each (plus worker start-up), not 30 s
    pid = worker().pid
    assert pid is None  # the last attempt's worker was killed, none is left spinning
    assert not any(p.name == "late.txt" for p in (tmp_path / "artifacts").rglob("*"))


def test_cancel_kills_the_running_attempt(tmp_path):
    registry = ToolRegistry().register(SPIN)
    cancel = threading.Event()
    threading.Timer(1.5, cancel.set).start()
    outcome, _ = run_scripted([json.dumps({"seconds": 30, "spin": True})], tmp_path, pack=_spin_pack(tmp_path),
                              tools=registry.subset(["spin"]), cancel=cancel,
                              budgets=Budgets(max_steps=1))
    assert outcome.result.stop_reason == "cancelled" and worker().pid is None


def test_the_package_tools_run_in_the_worker(tmp_path):
    """The default chain's tools run through the worker process: its PID is not ours."""
    from runtime_helpers import chain_outputs

    outcome, _ = run_scripted(chain_outputs(load_pack(None)), tmp_path)
    assert outcome.result.metrics.task_success is True
    assert worker().pid not in (None, os.getpid())
    assert set(catalog().names) >= {"knowledge_search", "calculator", "plot", "lookup_fact"}
    # The workspace tools' work already happens in a sandboxed process that a timeout or cancel kills.
    assert all(t.import_path for t in catalog() if t.name not in WORKSPACE_TOOLS)
    assert not [p for p in (tmp_path / "artifacts").iterdir() if p.name.startswith(".attempt-")]
