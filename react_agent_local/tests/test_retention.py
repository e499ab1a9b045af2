"""Retention holds on every path that ends a job (SECURITY 30): finished, failed, cancelled while
queued or while running, sealed at a restart -- and under a storm of create + cancel while one long
job runs, for the run-count cap and the byte cap alike."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from server_support import GOOD_SCRIPT, make_client, slow_script, wait_for, wait_terminal

from agent.runner.job_store import RUN_ID
from agent.models.model_policy import ModelUnavailable

RUN = {"model_path": "scripted"}


def run_folders(runs_dir: Path) -> list[Path]:
    return [p for p in runs_dir.iterdir() if RUN_ID.match(p.name)]


def folder_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # deleted by retention while we count
                pass
    return total


def start_long_job(client) -> str:
    run_id = client.post("/agent/runs", json=RUN).json()["id"]
    wait_for(client, run_id, lambda v: v["status"] == "running")
    return run_id


def end_long_job(client, run_id: str) -> None:
    """Cancel it and wait for its worker to let go (retention may delete it the moment it ends)."""
    client.post(f"/agent/runs/{run_id}/cancel", json={})
    deadline = time.monotonic() + 30
    while client.app.state.store.running_ids and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not client.app.state.store.running_ids


def storm(client, jobs: int = 100) -> None:
    ids = [client.post("/agent/runs", json=RUN).json()["id"] for _ in range(jobs)]
    for run_id in ids:
        assert client.post(f"/agent/runs/{run_id}/cancel", json={}).status_code == 200


def test_the_run_count_cap_holds_under_a_create_cancel_storm(tmp_path):
    """A probe with --max-runs 20 and one long job running repeated 100 x create + 100 x cancel and
    counted 3001 run folders: a job cancelled while queued never ran retention, only a worker
    finishing a job did."""
    max_runs = 20
    with make_client(tmp_path, slow_script(120), max_runs=max_runs) as client:
        long_job = start_long_job(client)
        store = client.app.state.store
        for _ in range(3):
            storm(client)
            folders = run_folders(tmp_path)
            assert len(folders) <= max_runs, f"{len(folders)} run folders with --max-runs {max_runs}"
            assert {f.name for f in folders} == set(store._jobs)  # what is on disk is what the store lists
        assert long_job in store._jobs  # a running job is never deleted
        end_long_job(client, long_job)
    assert len(run_folders(tmp_path)) <= max_runs


def test_the_byte_cap_holds_under_a_create_cancel_storm(tmp_path):
    with make_client(tmp_path / "sizing", slow_script(120)) as sizing:  # what one cancelled queued job weighs
        long_job = start_long_job(sizing)
        one = sizing.post("/agent/runs", json=RUN).json()["id"]
        sizing.post(f"/agent/runs/{one}/cancel", json={})
        cap = 10 * sizing.app.state.store._jobs[one].disk_bytes
        end_long_job(sizing, long_job)
    runs = tmp_path / "storm"
    with make_client(runs, slow_script(120), max_runs=10_000, max_run_bytes=cap) as client:
        long_job = start_long_job(client)
        storm(client)
        finished = [f for f in run_folders(runs) if f.name != long_job]
        assert 0 < len(finished) <= 10 and sum(folder_bytes(f) for f in finished) <= cap
        end_long_job(client, long_job)
    assert sum(folder_bytes(f) for f in run_folders(runs)) <= cap


def _fails_to_load(request):
    def load():
        raise ModelUnavailable("no model here")

    return load


def wait_folders(runs_dir: Path, limit: int, timeout: float = 10.0) -> int:
    """The number of run folders once it is at most ``limit`` (a worker runs retention just after
    the job's run.finished is visible), or when ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while len(run_folders(runs_dir)) > limit and time.monotonic() < deadline:
        time.sleep(0.02)
    return len(run_folders(runs_dir))


@pytest.mark.parametrize("ending", ["finished", "failed", "cancelled_running", "cancelled_queued"])
def test_retention_runs_on_every_path_that_ends_a_job(tmp_path, ending):
    max_runs = 3
    model_dir = tmp_path / "model"  # a real path: the failing factory is no test policy
    model_dir.mkdir()
    runs_dir = tmp_path / "runs"
    options = {"finished": dict(script=GOOD_SCRIPT), "failed": dict(policy_factory=_fails_to_load),
               "cancelled_running": dict(script=slow_script(60)), "cancelled_queued": dict(script=slow_script(60))}
    with make_client(runs_dir, max_runs=max_runs, **options[ending]) as client:
        blocker = start_long_job(client) if ending == "cancelled_queued" else None  # keeps the others queued
        limit = max_runs + (blocker is not None)
        for _ in range(max_runs + 3):
            run_id = client.post("/agent/runs", json={"model_path": str(model_dir)}).json()["id"]
            if ending == "cancelled_running":
                wait_for(client, run_id, lambda v: v["status"] == "running")
            if ending.startswith("cancelled"):
                client.post(f"/agent/runs/{run_id}/cancel", json={})
            if ending != "cancelled_queued":
                assert wait_terminal(client, run_id)["status"] == {"finished": "completed", "failed": "failed",
                                                                   "cancelled_running": "cancelled"}[ending]
            assert wait_folders(runs_dir, limit) <= limit
        if blocker:
            end_long_job(client, blocker)
            assert wait_folders(runs_dir, max_runs) <= max_runs


def test_retention_runs_when_a_restarted_runner_seals_old_jobs(tmp_path):
    with make_client(tmp_path, GOOD_SCRIPT) as client:
        for _ in range(6):
            wait_terminal(client, client.post("/agent/runs", json=RUN).json()["id"])
    (tmp_path / "run-00000000abcd").mkdir()  # a job that was running when the process died
    (tmp_path / "run-00000000abcd" / "job.json").write_text(
        '{"id": "run-00000000abcd", "created_at": "2099-01-01T00:00:00.000Z", "status": "running", '
        '"request": {"pack": "default"}, "model": {"name": "m"}}')
    with make_client(tmp_path, GOOD_SCRIPT, max_runs=4) as client:
        assert len(run_folders(tmp_path)) == 4
        newest = client.get("/agent/runs").json()["runs"][0]
        assert (newest["id"], newest["status"]) == ("run-00000000abcd", "failed")  # sealed, and kept as newest
