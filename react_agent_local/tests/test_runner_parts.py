"""The job store's parts on their own: the event log, the run folders and retention, and the Host and
Origin gate both loopback servers use (the store and the app are tested through HTTP elsewhere)."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from agent.runner.boundary import LoopbackGate
from agent.runner.jobs.event_log import EventLog, entry_of
from agent.runner.jobs.run_folder import RunFolders, over_limits
from agent.util.no_follow import NoFollowFolder


def event(seq: int, kind: str = "budget", **fields) -> dict:
    return {"seq": seq, "type": kind, "step": 0, "attempt": 0, "phase": "run", "elapsed_ms": 0.0, **fields}


def test_the_log_keeps_one_run_finished_no_repeat_and_the_newest_entries():
    log = EventLog(limit=3)
    with log.lock:
        assert [log.add(entry_of(event(s))) for s in (1, 2, 2, 3, 4)] == [True, True, False, True, True]
        assert log.add(entry_of(event(5, "run.finished", status="completed")))
        assert not log.add(entry_of(event(6)))  # nothing after run.finished
        assert [e.seq for e in log.since(0)] == [3, 4, 5] and log.dropped == 2
        assert [e.seq for e in log.since(4)] == [5] and log.finished and log.last_seq == 5
    assert entry_of({"type": "budget"}) is None and entry_of(event(True)) is None


def test_an_entry_is_the_stored_json_and_an_unstorable_event_becomes_a_marker():
    entry = entry_of(event(1, note="x"))
    assert json.loads(entry.line) == entry.event and b"\n" not in entry.line
    marker = entry_of(event(2, "run.finished", value=float("nan")))
    assert json.loads(marker.line)["seq"] == 2


def test_follow_is_woken_by_each_add_and_ends_after_run_finished():
    log = EventLog()

    async def main() -> list[int]:
        async def writer() -> None:
            for seq, kind in ((1, "budget"), (2, "budget"), (3, "run.finished")):
                await asyncio.sleep(0.01)
                with log.lock:
                    log.add(entry_of(event(seq, kind)))
                log.wake()

        task = asyncio.create_task(writer())
        seen = [seq async for seq, _line, _t in log.follow(0, until=asyncio.get_running_loop().time() + 10)]
        await task
        return seen

    assert asyncio.run(main()) == [1, 2, 3]
    assert not log.waiters


def test_retention_deletes_the_oldest_finished_runs_only():
    runs = [("a", True, 10), ("b", False, 10), ("c", True, 10), ("d", True, 10)]
    assert over_limits(runs, max_runs=2, max_bytes=10**9) == ["a", "c"]
    assert over_limits(runs, max_runs=10, max_bytes=25) == ["a", "c"]
    assert over_limits(runs, max_runs=4, max_bytes=40) == []
    assert over_limits([("b", False, 99)], max_runs=0, max_bytes=0) == []


@pytest.mark.skipif(os.name == "nt", reason="symlinks")
def test_a_run_folder_swapped_for_a_link_is_refused(tmp_path):
    folders = RunFolders(tmp_path / "runs")
    folders.create("run-000000000001")
    folders.write_record("run-000000000001", b"{}")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "job.json").write_text("{}")
    os.symlink(outside, folders.path("run-000000000002"))
    with pytest.raises(OSError):
        NoFollowFolder(folders.root, "run-000000000002")
    with NoFollowFolder(folders.root, "run-000000000001") as folder:
        assert folder.read("job.json", 10) == b"{}"
        with pytest.raises(OSError):
            folder.read("job.json", 1)  # bigger than its limit


def test_one_gate_one_code_per_refusal():
    runner = LoopbackGate(4890, ("http://127.0.0.1:8017",))
    site = LoopbackGate(8017)
    for gate, port in ((runner, 4890), (site, 8017)):
        assert gate.refusal({"host": ["evil.example"]}).code == "forbidden_host"
        assert gate.refusal({"host": [f"127.0.0.1:{port}", f"localhost:{port}"]}).code == "forbidden_host"
        assert gate.refusal({"host": [f"LOCALHOST:{port}"]}) is None
        refusal = gate.refusal({"host": [f"[::1]:{port}"], "origin": ["https://evil.example"]})
        assert (refusal.status, refusal.code) == (403, "forbidden_origin")
    assert runner.refusal({"host": ["127.0.0.1:4890"], "origin": ["http://127.0.0.1:8017"]}) is None
    assert site.refusal({"host": ["127.0.0.1:8017"], "origin": ["http://localhost:8017"]}) is None
    assert site.refusal({"host": ["127.0.0.1:8017"], "origin": ["http://127.0.0.1:8017", "http://127.0.0.1:8017"]})
    assert LoopbackGate(80).refusal({"host": ["localhost"]}) is None  # the default port is left out of Host
