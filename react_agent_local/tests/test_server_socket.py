"""The runner once for real: ``python algolab_local_runner.py`` over a socket, stopped and restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from agent.runner.job_store import STOPPED_MESSAGE
from server_support import PACKAGE_ROOT, RunnerProcess, assert_complete_trace, free_port, slow_script

JSON = {"content-type": "application/json"}
RUN = {"model_path": "scripted"}


def wait_in_first_model_call(client: httpx.Client, run_id: str) -> list[dict]:
    """Wait until the job is inside its (slow) first model call; return its events so far."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        view = client.get(f"/agent/runs/{run_id}").json()
        if any(e["type"] == "model.started" for e in view["events"]):
            return view["events"]
        time.sleep(0.02)
    raise AssertionError(f"{run_id} never started its first model call")


def poll_all(client: httpx.Client, run_id: str, timeout: float = 30.0) -> tuple[dict, list[dict]]:
    """Poll like the page: after_seq = the last seq seen; return the final view and every event."""
    events, after = [], 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view = client.get(f"/agent/runs/{run_id}", params={"after_seq": after}).json()
        events += view["events"]
        after = view["last_seq"]
        if view["terminal"] and not view["events"]:
            return view, events
        time.sleep(0.05)
    raise AssertionError(f"{run_id} did not finish")


def test_runner_end_to_end_over_a_socket_and_after_restart(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    runner = RunnerProcess(runs, slow_script(5))
    with runner, runner.client() as c:
        status = c.get("/status").json()
        assert status["test_policy"] is True and status["capabilities"] == ["agent"]

        # A: runs to completion; B: cancelled while queued behind A.
        a = c.post("/agent/runs", json=RUN).json()
        b = c.post("/agent/runs", json=RUN).json()
        assert a["model"] == {**a["model"], "name": "scripted-test-policy", "test_policy": True}
        cancelled = c.post(f"/agent/runs/{b['id']}/cancel", json={}).json()
        assert (cancelled["status"], cancelled["stop_reason"], cancelled["metrics"]) == ("cancelled", "cancelled", None)

        view_a, events_a = poll_all(c, a["id"])
        assert_complete_trace(events_a)
        assert view_a["status"] == "completed" and view_a["metrics"]["task_success"] is True
        png = c.get(f"/agent/runs/{a['id']}/artifacts/{view_a['artifacts'][0]}")
        assert png.status_code == 200 and png.content.startswith(b"\x89PNG")

        # C: cancelled while running (its first model call takes 5 s and honours cancel).
        cid = c.post("/agent/runs", json=RUN).json()["id"]
        wait_in_first_model_call(c, cid)
        c.post(f"/agent/runs/{cid}/cancel", json={})
        view_c, events_c = poll_all(c, cid)
        assert (view_c["status"], view_c["stop_reason"]) == ("cancelled", "cancelled")
        assert_complete_trace(events_c)

        # The boundary holds on the real socket too.
        assert c.get("/status", headers={"host": f"evil.example:{runner.port}"}).status_code == 421
        assert c.get("/status", headers={"origin": "https://evil.example"}).status_code == 403
        assert c.post("/agent/runs", content=b'{"model_path": "x"}', headers={"content-type": "text/plain"}).status_code == 415

        def chunks():
            for _ in range(64):
                yield b" " * 8192

        big = c.post("/agent/runs", content=chunks(), headers=JSON)
        assert big.status_code == 413
        declared = c.post("/agent/runs", content=b"x" * (300 * 1024), headers=JSON)
        assert declared.status_code == 413
        assert c.get("/agent/runs").json()["count"] == 3

        # D: killed mid-run -- sealed as runner-stopped on the next start.
        did = c.post("/agent/runs", json=RUN).json()["id"]
        wait_in_first_model_call(c, did)
        e = c.post("/agent/runs", json=RUN).json()  # queued behind D

    # The first runner got SIGTERM while D was running and E queued: the shutdown cancels D (its
    # model call honours cancel at once) and never starts E, which the next start seals as stopped
    # by the runner; each has exactly one run.finished.
    with runner, runner.client() as c:
        again_a = c.get(f"/agent/runs/{a['id']}").json()
        assert again_a["events"] == events_a and again_a["status"] == "completed"
        assert c.get(f"/agent/runs/{a['id']}/artifacts/{view_a['artifacts'][0]}").content == png.content
        assert c.get(f"/agent/runs/{b['id']}").json()["stop_reason"] == "cancelled"
        assert c.get(f"/agent/runs/{cid}").json()["events"] == events_c
        view_d = c.get(f"/agent/runs/{did}").json()
        assert (view_d["status"], view_d["stop_reason"]) == ("cancelled", "cancelled")
        view_e = c.get(f"/agent/runs/{e['id']}").json()
        assert (view_e["status"], view_e["stop_reason"]) == ("failed", "runtime_error")
        assert view_e["error"]["message"] == STOPPED_MESSAGE
        for view in (view_d, view_e):
            assert_complete_trace(view["events"])


def test_killed_runner_seals_the_running_job(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    runner = RunnerProcess(runs, slow_script(30))
    with runner, runner.client() as c:
        job = c.post("/agent/runs", json=RUN).json()
        before = wait_in_first_model_call(c, job["id"])
        runner.stop(signal.SIGKILL)
    with runner, runner.client() as c:
        view = c.get(f"/agent/runs/{job['id']}").json()
        assert (view["status"], view["stop_reason"]) == ("failed", "runtime_error")
        assert view["error"]["message"] == STOPPED_MESSAGE
        assert view["events"][:-1] == before and view["events"][-1]["type"] == "run.finished"
        assert_complete_trace(view["events"])


def _listening_addresses(port: int) -> list[str]:
    """Local addresses of the LISTEN sockets on ``port`` (Linux /proc/net/tcp{,6}, hex-encoded)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:
                found.append(address)
    return found


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs Linux /proc/net/tcp")
def test_runner_listens_on_loopback_only(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    with RunnerProcess(runs, slow_script(0)) as runner:
        addresses = _listening_addresses(runner.port)
    assert addresses == ["0100007F"]  # 127.0.0.1, and nothing else (not 0.0.0.0 = 00000000)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "example.com"])
def test_cli_refuses_non_loopback_hosts(host):
    out = subprocess.run([sys.executable, str(PACKAGE_ROOT / "algolab_local_runner.py"), "--host", host,
                          "--port", str(free_port())], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "loopback" in out.stderr


def test_run_sh_requires_an_existing_python(tmp_path):
    out = subprocess.run(["sh", str(PACKAGE_ROOT / "run.sh"), str(tmp_path / "no-such-python"), "--help"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "not found" in out.stderr
    ok = subprocess.run(["sh", str(PACKAGE_ROOT / "run.sh"), sys.executable, "--help"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "--allow-origin" in ok.stdout
