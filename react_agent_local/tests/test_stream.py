"""The run's Server-Sent Events (R-STREAM) and cheap reads: framing, resume without gaps or
repeats, the browser boundary, the stream cap, and slow or idle clients that must delay no one.

In-process (TestClient) where a whole stream is read; a real uvicorn server in a thread where
connections are cut, held open or dribbled.
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from agent.runner import streaming
from agent.runner.job_store import JobStore
from agent.task.packs import load_pack
from agent.runner.server import RunnerSettings, create_app, scripted_policy_factory, server_config
from server_support import (
    BASE_URL,
    GOOD_SCRIPT,
    PAGE_ORIGIN,
    assert_complete_trace,
    free_port,
    make_client,
    slow_script,
    wait_terminal,
)

RUN = {"model_path": "scripted"}


def parse_sse(lines: Iterator[str]) -> list[dict[str, Any]]:
    """SSE frames as dicts (id, data, comments, retry); a blank line ends a frame."""
    frames, frame = [], {"comments": []}
    for line in lines:
        if line == "":
            if len(frame) > 1 or frame["comments"]:
                frames.append(frame)
            frame = {"comments": []}
        elif line.startswith(":"):
            frame["comments"].append(line[1:].strip())
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            frame[name] = frame[name] + "\n" + value if name == "data" and "data" in frame else value
    return frames


def stream_events(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    events = [json.loads(f["data"]) for f in frames if "data" in f]
    for frame, event in zip([f for f in frames if "data" in f], events):
        assert frame["id"] == str(event["seq"])
    return events


@pytest.fixture
def client(tmp_path):
    with make_client(tmp_path / "runs", GOOD_SCRIPT) as c:
        yield c


@pytest.fixture
def finished(client) -> tuple[str, list[dict[str, Any]]]:
    run_id = client.post("/agent/runs", json=RUN).json()["id"]
    return run_id, wait_terminal(client, run_id)["events"]


# --------------------------------------------------------------------------------------------
# In-process: framing, resume, boundary
# --------------------------------------------------------------------------------------------


def test_stream_follows_a_run_to_run_finished(client):
    run_id = client.post("/agent/runs", json=RUN).json()["id"]
    with client.stream("GET", f"/agent/runs/{run_id}/events") as r:  # opened while queued or running
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-store" and r.headers["x-content-type-options"] == "nosniff"
        frames = parse_sse(r.iter_lines())
    assert frames[0].get("retry") == str(streaming.RETRY_MS) and "data" not in frames[0]
    events = stream_events(frames)
    assert_complete_trace(events)  # ended after run.finished, seq 1..N
    assert events == client.get(f"/agent/runs/{run_id}").json()["events"]  # the same bytes a poll returns
    for frame in frames[1:]:
        assert frame["comments"][0].startswith("t=") and float(frame["comments"][0][2:]) > 0


def test_resume_by_last_event_id_or_after_seq(client, finished):
    run_id, events = finished
    n = len(events)
    for headers, query, first in (({"last-event-id": "5"}, "", 6), ({}, "?after_seq=7", 8),
                                  ({"last-event-id": "3"}, "?after_seq=9", 4)):  # Last-Event-ID wins
        r = client.get(f"/agent/runs/{run_id}/events{query}", headers=headers)
        assert r.status_code == 200
        resumed = stream_events(parse_sse(iter(r.text.splitlines())))
        assert [e["seq"] for e in resumed] == list(range(first, n + 1))
        assert resumed == events[first - 1:]
    # Nothing left after a finished run: 204, which tells EventSource to stop reconnecting.
    for headers, query in (({"last-event-id": str(n)}, ""), ({}, f"?after_seq={n + 50}")):
        r = client.get(f"/agent/runs/{run_id}/events{query}", headers=headers)
        assert r.status_code == 204 and r.content == b""


@pytest.mark.parametrize("value", ["-1", "abc", "1e3", "", " ", str(10**30), "1000000001", "١٢"])
def test_bad_resume_points_are_422(client, finished, value):
    run_id, _ = finished
    assert client.get(f"/agent/runs/{run_id}/events", params={"after_seq": value}).status_code == 422
    r = client.get(f"/agent/runs/{run_id}/events", headers={"last-event-id": value.encode()})
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"


def test_duplicate_last_event_id_is_422(client, finished):
    run_id, _ = finished
    r = client.get(f"/agent/runs/{run_id}/events", headers=[("last-event-id", "1"), ("last-event-id", "2")])
    assert r.status_code == 422


@pytest.mark.parametrize("run_id", ["run-000000000000", "nope", "run-../../x", "RUN-abcdefabcdef"])
def test_unknown_runs_are_404(client, run_id):
    r = client.get(f"/agent/runs/{run_id}/events")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize("host", ["evil.example:4890", "127.0.0.1.nip.io:4890", "127.0.0.1:4891", "0.0.0.0:4890"])
def test_stream_is_behind_the_host_allowlist(client, finished, host):
    run_id, _ = finished
    r = client.get(f"/agent/runs/{run_id}/events", headers={"host": host})
    assert r.status_code == 421 and "data:" not in r.text


def test_stream_is_behind_the_origin_allowlist(client, finished):
    run_id, _ = finished
    for origin in ("https://evil.example", "null", "http://127.0.0.1:8017.evil.example", "https://127.0.0.1:8017"):
        r = client.get(f"/agent/runs/{run_id}/events", headers={"origin": origin})
        assert r.status_code == 403 and "access-control-allow-origin" not in r.headers and "data:" not in r.text
    r = client.get(f"/agent/runs/{run_id}/events", headers={"origin": PAGE_ORIGIN})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == PAGE_ORIGIN
    assert r.headers["vary"] == "Origin"
    for method in ("POST", "PUT", "DELETE"):  # the stream is GET only; writes need JSON anyway
        assert client.request(method, f"/agent/runs/{run_id}/events",
                              headers={"content-type": "application/json"}).status_code in (405, 415)


def test_openapi_lists_the_stream(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert "text/event-stream" in paths["/agent/runs/{run_id}/events"]["get"]["responses"]["200"]["content"]


# --------------------------------------------------------------------------------------------
# The job store: reads never wait on the worker or on disk writes
# --------------------------------------------------------------------------------------------


def test_reads_wait_on_no_store_lock_and_no_disk_write(tmp_path):
    def run_fn(pack, policy, budgets, *, sink, cancel, **_):
        from agent.core.run import run_agent

        return run_agent(pack, policy, budgets, sink=sink, cancel=cancel, artifact_dir=tmp_path / "art")

    store = JobStore(tmp_path / "runs", run_fn, scripted_policy_factory(GOOD_SCRIPT))
    try:
        from agent.runner.requests import RunRequest

        first = store.submit(RunRequest.model_validate(RUN), {"name": "m", "path_hash": "-"})["id"]
        deadline = time.monotonic() + 30
        while not store.view(first)["terminal"] and time.monotonic() < deadline:
            time.sleep(0.02)
        second = store.submit(RunRequest.model_validate(RUN), {"name": "m", "path_hash": "-"})["id"]
        job = store._jobs[first]
        # Hold what a writer holds: the store's lock (submit, the worker's bookkeeping) and the
        # job's disk lock (a slow events.jsonl or job.json write).
        with store._lock, job.io_lock, store._jobs[second].io_lock:
            results: list[Any] = []
            reader = threading.Thread(target=lambda: results.extend([
                store.view_json(first, 0), store.view(second), store.finished_after(first, 0),
                store.queue_length, store.running_id]))
            started = time.perf_counter()
            reader.start()
            reader.join(5)
            waited = time.perf_counter() - started
        assert not reader.is_alive() and len(results) == 5, "a read waited on a writer's lock"
        assert waited < 1.0
        assert json.loads(results[0])["events"] == store.view(first)["events"]
    finally:
        store.close()


def test_follow_wakes_for_each_event_and_ends_after_run_finished(tmp_path):
    gate = threading.Event()

    def run_fn(pack, policy, budgets, *, sink, **_):
        for seq, kind in enumerate(("run.started", "budget", "model.started"), start=1):
            sink({"seq": seq, "type": kind, "step": 0, "attempt": 0, "phase": "run", "elapsed_ms": 0.0})
            gate.wait(5)  # the reader is waiting on the wake-up, not polling
            gate.clear()
        raise RuntimeError("the store seals the job with its own run.finished")

    store = JobStore(tmp_path / "runs", run_fn, lambda request: None)
    try:
        from agent.runner.requests import RunRequest

        run_id = store.submit(RunRequest.model_validate(RUN), {"name": "m", "path_hash": "-"})["id"]

        async def follow() -> list[int]:
            seen = []
            async for seq, line, recorded in store.follow(run_id, 0):
                assert json.loads(line)["seq"] == seq and recorded > 0
                seen.append(seq)
                gate.set()
            return seen

        seqs = asyncio.run(asyncio.wait_for(follow(), 20))
        assert seqs == [1, 2, 3, 4]
        assert store.view(run_id)["events"][-1]["type"] == "run.finished"
        assert not store._jobs[run_id].log.waiters  # the reader unregistered
    finally:
        store.close()


# --------------------------------------------------------------------------------------------
# A real server: cut streams, the cap, slow and idle clients
# --------------------------------------------------------------------------------------------


class LiveRunner:
    """The runner app under the runner's own uvicorn configuration, in a thread of this process."""

    def __init__(self, tmp_path: Path, script: list[Any] | None, read_seconds: float = 10.0, http: str = "auto",
                 write_seconds: float = 10.0, **overrides: Any):
        """``script`` None keeps the runner's own policy factory (a served model, say)."""
        import uvicorn

        self.port = free_port()
        settings = RunnerSettings(runs_dir=tmp_path / f"runs-{self.port}", port=self.port, **overrides)
        if script is not None:
            settings.policy_factory = scripted_policy_factory(script)
            settings.test_policy = True
        self.settings = settings
        app = create_app(settings)
        self.store = app.state.store
        config = server_config(app, "127.0.0.1", self.port, read_seconds=read_seconds,
                               write_seconds=write_seconds, http=http, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.base_url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "LiveRunner":
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the runner did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(20)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=10.0)

    def streams_open(self) -> int:
        return httpx.get(self.base_url + "/status", timeout=10).json()["streams_open"]

    def wait_streams(self, count: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.streams_open() != count:
            assert time.monotonic() < deadline, f"{self.streams_open()} streams open, expected {count}"
            time.sleep(0.05)


def test_a_cut_stream_resumes_without_gap_or_repeat(tmp_path):
    script = [{"text": GOOD_SCRIPT[0], "seconds": 0.6}, {"text": GOOD_SCRIPT[1], "seconds": 0.6}, *GOOD_SCRIPT[2:]]
    with LiveRunner(tmp_path, script) as runner, runner.client() as http:
        run_id = http.post("/agent/runs", json=RUN).json()["id"]
        received: list[dict[str, Any]] = []
        last_id: str | None = None
        cuts = 0
        while not received or received[-1]["type"] != "run.finished":
            headers = {"last-event-id": last_id} if last_id else {}
            with http.stream("GET", f"/agent/runs/{run_id}/events", headers=headers) as r:
                assert r.status_code == 200
                frame: dict[str, Any] = {"comments": []}
                for line in r.iter_lines():
                    if line == "" and "data" in frame:
                        received.append(json.loads(frame["data"]))
                        last_id = frame["id"]
                        frame = {"comments": []}
                        if len(received) in (3, 7):  # cut the connection in the middle of the run
                            cuts += 1
                            break
                    elif line.startswith(("id:", "data:")):
                        name, _, value = line.partition(": ")
                        frame[name] = value
        assert cuts == 2
        assert_complete_trace(received)
        assert received == http.get(f"/agent/runs/{run_id}").json()["events"]
        runner.wait_streams(0)
        assert not runner.store._jobs[run_id].log.waiters  # every cut stream unregistered its wake-up


def test_stream_cap_is_a_clear_429_and_slots_come_back(tmp_path):
    with LiveRunner(tmp_path, slow_script(30), max_streams=2) as runner, runner.client() as http:
        run_id = http.post("/agent/runs", json=RUN).json()["id"]
        held = [httpx.Client(base_url=runner.base_url, timeout=10.0) for _ in range(2)]
        try:
            responses = [c.send(c.build_request("GET", f"/agent/runs/{run_id}/events"), stream=True) for c in held]
            assert [r.status_code for r in responses] == [200, 200]
            refused = http.get(f"/agent/runs/{run_id}/events")
            assert refused.status_code == 429 and refused.json()["error"]["code"] == "too_many_streams"
            assert refused.headers["retry-after"] == "5"
            assert http.get(f"/agent/runs/{run_id}").status_code == 200  # polling still works
            responses[0].close()  # a client that goes away gives its slot back
            held[0].close()
            runner.wait_streams(1)
            with http.stream("GET", f"/agent/runs/{run_id}/events") as again:
                assert again.status_code == 200
        finally:
            for c in held:
                c.close()
            http.post(f"/agent/runs/{run_id}/cancel", json={})
        runner.wait_streams(0)


def test_a_stream_ends_after_its_lifetime_and_resumes(tmp_path):
    with LiveRunner(tmp_path, slow_script(30), stream_max_seconds=0.5, stream_ping_seconds=0.1) as runner, \
            runner.client() as http:
        run_id = http.post("/agent/runs", json=RUN).json()["id"]
        started = time.monotonic()
        with http.stream("GET", f"/agent/runs/{run_id}/events") as r:
            lines = list(r.iter_lines())  # ends by itself: the browser would reconnect
        assert time.monotonic() - started < 5
        frames = parse_sse(iter(lines))
        assert any(c.startswith("ping") for f in frames for c in f["comments"])  # keep-alive comments
        http.post(f"/agent/runs/{run_id}/cancel", json={})
        runner.wait_streams(0)


def test_a_client_that_stops_reading_is_cut_off_by_the_send_timeout():
    released = []

    async def events():
        for seq in range(1, 10**6):
            yield seq, b'{"seq": %d, "pad": "%s"}' % (seq, b"x" * 1000), time.time()
            await asyncio.sleep(0)

    async def scenario() -> float:
        response = streaming.event_stream(events(), release=lambda: released.append(1), ping_seconds=0,
                                          send_seconds=0.3)
        sent = 0

        async def send(message):  # the client's buffers are full after a few frames
            nonlocal sent
            sent += 1
            if sent > 5:
                await asyncio.Event().wait()

        async def receive():
            await asyncio.Event().wait()

        started = time.monotonic()
        await asyncio.wait_for(response({"type": "http", "method": "GET", "headers": []}, receive, send), 10)
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 3
    assert released == [1]


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_slow_and_idle_clients_delay_no_one(tmp_path, http):
    """Dribbling headers, streams that are never read and an SSE follower, all at once: another
    client's polls stay fast, the worker finishes on time, and the server cuts the idle ones off."""
    script = [{"text": GOOD_SCRIPT[0], "seconds": 1.0}, *GOOD_SCRIPT[1:]]
    if http == "httptools":
        pytest.importorskip("httptools")
    with LiveRunner(tmp_path, script, read_seconds=1.0, stream_max_seconds=2.0, stream_send_seconds=1.0,
                    stream_ping_seconds=0.2, http=http) as runner, runner.client() as client:
        # A baseline run with nobody else connected.
        t0 = time.monotonic()
        wait_terminal(client, client.post("/agent/runs", json=RUN).json()["id"], timeout=60)
        alone = time.monotonic() - t0

        run_id = client.post("/agent/runs", json=RUN).json()["id"]
        host = f"127.0.0.1:{runner.port}".encode()
        dribblers, idle_streams = [], []
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", runner.port))
            s.sendall(b"GET /status HTTP/1.1\r\nHo")
            dribblers.append(s)
        for _ in range(20):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", runner.port))
            s.sendall(b"GET /agent/runs/" + run_id.encode() + b"/events HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
            idle_streams.append(s)  # never read
        stop = threading.Event()

        def dribble() -> None:  # one byte at a time, a few times a second, until the server hangs up
            while not stop.wait(0.2):
                for s in list(dribblers):
                    try:
                        s.send(b"s")
                    except OSError:
                        dribblers.remove(s)

        threading.Thread(target=dribble, daemon=True).start()
        dribbling = list(dribblers)

        follower_events: list[dict[str, Any]] = []

        def follow() -> None:
            # An EventSource: a stream ends at its lifetime (2 s here), and a run slowed by a starved
            # 2-core machine outlives it, so the follower resumes with Last-Event-ID until the
            # server answers 204 (the run finished before that id) or it has seen run.finished.
            with httpx.Client(base_url=runner.base_url, timeout=90) as c:
                deadline = time.monotonic() + 90
                while time.monotonic() < deadline:
                    last = {"last-event-id": str(follower_events[-1]["seq"])} if follower_events else {}
                    with c.stream("GET", f"/agent/runs/{run_id}/events", headers=last) as r:
                        if r.status_code == 204:
                            return
                        follower_events.extend(stream_events(parse_sse(r.iter_lines())))
                    if follower_events and follower_events[-1]["type"] == "run.finished":
                        return

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        latencies, after, t0 = [], 0, time.monotonic()
        while True:
            started = time.perf_counter()
            try:
                view = client.get(f"/agent/runs/{run_id}", params={"after_seq": after}).json()
            except httpx.ReadError:
                # a kept-alive connection idle past the read deadline (a starved test process) was
                # closed by the server: a real poller reconnects, and so does this one (not timed)
                continue
            latencies.append((time.perf_counter() - started) * 1000)
            after = view["last_seq"]
            if view["terminal"]:
                break
            assert time.monotonic() - t0 < 60
            time.sleep(0.02)
        with_clients = time.monotonic() - t0
        follower.join(120)
        stop.set()

        assert_complete_trace(follower_events)
        assert statistics.median(latencies) < 50, sorted(latencies)[-10:]
        assert max(latencies) < 1000, sorted(latencies)[-10:]
        assert with_clients < alone + 3, (alone, with_clients)  # the worker was not held up
        # The server hung up on every dribbler (read deadline) and ended every unread stream (lifetime).
        for s in dribbling:
            s.settimeout(10)
            try:
                assert s.recv(65536) == b"", "a dribbling client got an answer"
            except TimeoutError:
                raise AssertionError("a dribbling client was not cut off") from None
            except ConnectionError:
                pass  # reset: cut off as well
        runner.wait_streams(0)
        for s in dribbling + idle_streams:
            s.close()
