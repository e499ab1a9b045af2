"""The No.17 page follows a run through the runner's Server-Sent Events (R-STREAM), in headless
Chromium against a real site and the package's real runner with the scripted test policy.

Between the page and the runner sits a small HTTP proxy of this test, so the test can cut the event
stream in the middle of a run (the sockets are closed, as a network drop would) or refuse it (as
an older runner without the route would). The proxy records every SSE frame it delivered: across
all connections the page received each seq exactly once, in order, and the page shows them all.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from playwright import sync_api

from .conftest import GOOD_SCRIPT, Process, start_runner, write_tiny_gguf

pytestmark = pytest.mark.browser

expect = sync_api.expect
STEP_SECONDS = 1.2  # each scripted model call: the run lasts about four of them


class CuttingProxy:
    """Forwards one HTTP request per connection to the runner (Host rewritten to the runner's own,
    ``Connection: close``), and can cut, or refuse, the event-stream connections."""

    def __init__(self, upstream_port: int, refuse_streams: bool = False):
        self.upstream_port = upstream_port
        self.refuse_streams = refuse_streams
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.lock = threading.Lock()
        self.requests: list[str] = []  # request targets, in order
        self.streams: list[dict[str, Any]] = []  # per event-stream connection: target, bytes, sockets
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(65536)
                if not chunk:
                    return
                head += chunk
            head, _, body = head.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            target = lines[0].split(" ")[1]
            headers = [h for h in lines[1:] if not h.lower().startswith(("host:", "connection:"))]
            length = next((int(h.split(":", 1)[1]) for h in headers if h.lower().startswith("content-length:")), 0)
            while len(body) < length:
                body += client.recv(65536)
            with self.lock:
                self.requests.append(target)
            is_stream = "/events" in target.split("?")[0]
            if is_stream and self.refuse_streams:
                client.sendall(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            request = "\r\n".join([lines[0], f"Host: 127.0.0.1:{self.upstream_port}", "Connection: close", *headers])
            upstream.sendall(request.encode("latin-1") + b"\r\n\r\n" + body)
            record = {"target": target, "data": b"", "sockets": (client, upstream)} if is_stream else None
            if record is not None:
                with self.lock:
                    self.streams.append(record)
            while True:
                try:
                    chunk = upstream.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                if record is not None:
                    with self.lock:
                        if record.get("cut"):
                            return
                        client.sendall(chunk)
                        record["data"] += chunk
                else:
                    client.sendall(chunk)
        except OSError:
            pass
        finally:
            client.close()

    def cut_streams(self) -> int:
        """Close every open event-stream connection after the frames already delivered."""
        cut = 0
        with self.lock:
            for record in self.streams:
                if not record.get("cut"):
                    record["cut"] = True
                    for sock in record["sockets"]:
                        try:
                            sock.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                    cut += 1
        return cut

    def delivered(self) -> list[list[int]]:
        """The ids of the complete SSE frames each stream connection delivered."""
        with self.lock:
            datas = [r["data"] for r in self.streams]
        result = []
        for data in datas:
            body = data.partition(b"\r\n\r\n")[2].replace(b"\r\n", b"\n")
            frames = body.split(b"\n\n")[:-1]  # the last piece is incomplete (or empty)
            result.append([int(m.group(1)) for f in frames if (m := re.search(rb"^id: (\d+)$", f, re.M))])
        return result

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        self.cut_streams()


@pytest.fixture(scope="module")
def slow_runner(browser_tmp: Path, site_port: int) -> Iterator[Process]:
    proc = start_runner(browser_tmp, site_port, [{"text": text, "seconds": STEP_SECONDS} for text in GOOD_SCRIPT])
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def tiny_model(browser_tmp: Path) -> Path:
    return write_tiny_gguf(browser_tmp / "tiny-header-only-stream.gguf")


@pytest.fixture
def page(browser: Any, site: Process) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1440, "height": 1000}, accept_downloads=True)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.goto(site.base_url + "/react-agent")
    expect(pg.locator("#manifest-version")).not_to_have_text("", timeout=15_000)
    yield pg
    context.close()
    assert not errors, errors


def start_run(page: Any, runner_url: str, model: Path) -> None:
    page.fill("#runner-url", runner_url)
    page.click("#runner-check")
    expect(page.locator("#runner-state")).to_contain_text("已连接", timeout=15_000)
    page.fill("#model-path", str(model))
    page.click("#model-inspect")
    expect(page.locator("#model-state")).to_contain_text("检查通过", timeout=60_000)
    page.click("#budget-preset")
    expect(page.locator("#run-start")).to_be_enabled()
    page.click("#run-start")


def exported_events(page: Any) -> dict[str, Any]:
    with page.expect_download() as info:
        page.click("#run-export")
    return json.loads(Path(info.value.path()).read_text(encoding="utf-8"))


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_page_follows_a_run_through_the_stream_across_cuts(page: Any, slow_runner: Process,
                                                               tiny_model: Path) -> None:
    proxy = CuttingProxy(int(slow_runner.base_url.rsplit(":", 1)[1]))
    try:
        start_run(page, proxy.base_url, tiny_model)
        expect(page.locator("#run-id")).to_have_attribute("data-transport", "stream", timeout=15_000)
        # Cut the stream twice in the middle of the run, each time after some events got through.
        for count in (4, 12):
            wait_until(lambda: sum(map(len, proxy.delivered())) >= count, 30, f"{count} streamed events")
            assert proxy.cut_streams() == 1
        expect(page.locator("#run-status")).to_have_text("已完成 completed", timeout=60_000)
        run_id = exported_events(page)["run_id"]
        server = httpx.get(f"{slow_runner.base_url}/agent/runs/{run_id}").json()["events"]

        # On the wire: each connection starts right after its resume point, and each resume point is
        # at most the last frame the previous connection carried (a frame in flight when the socket
        # was cut may not reach the page; then it is sent again, and only then used).
        delivered = proxy.delivered()
        assert len(delivered) >= 3, delivered  # the first stream and two resumed ones
        resumes = [int(r["target"].rsplit("after_seq=", 1)[1]) for r in proxy.streams]
        assert resumes[0] == 0 and all(r["target"].split("?")[0].endswith("/events") for r in proxy.streams)
        used: list[int] = []
        for i, ids in enumerate(delivered):
            assert ids and ids[0] == resumes[i] + 1, (resumes, delivered)
            end = resumes[i + 1] if i + 1 < len(resumes) else len(server)
            assert end <= ids[-1], (resumes, delivered)  # nothing skipped
            used += [seq for seq in ids if seq <= end]
        assert used == list(range(1, len(server) + 1)), (resumes, delivered)

        exported = exported_events(page)  # the page's own view of the run
        assert [e["seq"] for e in exported["events"]] == list(range(1, len(server) + 1))
        assert exported["events"] == json.loads(json.dumps(server))
        expect(page.locator("#timeline .tl-card[data-step]")).to_have_count(4)
        expect(page.locator("#run-final")).to_contain_text("79")
        # The page did not poll while the stream worked: only the last read of the finished view.
        polls = [t for t in proxy.requests if re.fullmatch(r"/agent/runs/run-[0-9a-f]{12}\?after_seq=\d+", t)]
        assert len(polls) <= 2, polls
    finally:
        proxy.close()


def test_the_page_polls_when_the_stream_cannot_be_opened(page: Any, slow_runner: Process, tiny_model: Path) -> None:
    proxy = CuttingProxy(int(slow_runner.base_url.rsplit(":", 1)[1]), refuse_streams=True)
    try:
        start_run(page, proxy.base_url, tiny_model)
        expect(page.locator("#run-id")).to_have_attribute("data-transport", "poll", timeout=15_000)
        expect(page.locator("#run-id")).to_contain_text("after_seq 轮询")
        expect(page.locator("#run-status")).to_have_text("已完成 completed", timeout=60_000)
        exported = exported_events(page)
        server = httpx.get(f"{slow_runner.base_url}/agent/runs/{exported['run_id']}").json()["events"]
        assert exported["events"] == json.loads(json.dumps(server))
        assert [e["seq"] for e in exported["events"]] == list(range(1, len(server) + 1))
        assert len([t for t in proxy.requests if "/events" in t]) == 1  # refused once, then polling
        polls = [t for t in proxy.requests if re.fullmatch(r"/agent/runs/run-[0-9a-f]{12}\?after_seq=\d+", t)]
        assert len(polls) >= 3
        after = [int(t.rsplit("=", 1)[1]) for t in polls]
        assert after == sorted(after)  # each poll resumes after what the page already merged
    finally:
        proxy.close()
