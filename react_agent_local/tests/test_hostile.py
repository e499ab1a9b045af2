"""Hostile model output and hostile files (issue 11): one test per reproduced hole, at its own depth.

1. NaN/Infinity in a model's JSON        -> an invalid Decision; the store writes only strict JSON.
2. A lone surrogate in the arguments     -> an invalid Decision; the store writes U+FFFD, no gap.
3. Deeply nested model output            -> ``too_deep``, a repairable invalid Decision.
4. A run's artifacts/ swapped for a link -> 404, the outside file is never served.
5. Paths in any script, with spaces      -> redacted everywhere, arithmetic and URLs kept.
6. Slow clients and huge GGUF arrays     -> a request read deadline; a GGUF work budget.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from agent.contracts.result import RunResult
from agent.models.decisions import MAX_DEPTH, DecisionError, parse_decision
from agent.runner.job_store import JobStore
from agent.runner.server import RunnerSettings, create_app, scripted_policy_factory, server_config
from agent.contracts.trace import Trace, redact, redact_text
from server_support import GOOD_SCRIPT, assert_complete_trace, free_port, make_client, wait_terminal

RUN = {"model_path": "scripted"}
ACTION = '{"type": "action", "tool": "knowledge_search", "arguments": '


def run_to_end(client: Any) -> dict[str, Any]:
    created = client.post("/agent/runs", json=RUN)
    assert created.status_code == 202, created.text
    return wait_terminal(client, created.json()["id"])


def every_view(client: Any, run_id: str) -> list[dict[str, Any]]:
    """GET the run at every after_seq; each must be 200 with strict JSON."""
    views = []
    last = client.get(f"/agent/runs/{run_id}").json()["last_seq"]
    for seq in range(0, last + 1):
        r = client.get(f"/agent/runs/{run_id}", params={"after_seq": seq})
        assert r.status_code == 200, (seq, r.text)
        views.append(json.loads(r.text, parse_constant=_no_constant))
    return views


def _no_constant(name: str) -> Any:
    raise AssertionError(f"{name} in a response")


def read_events_file(runs_dir: Path, run_id: str) -> list[dict[str, Any]]:
    lines = (runs_dir / run_id / "events.jsonl").read_bytes().decode("utf-8").splitlines()  # strict UTF-8
    return [json.loads(line, parse_constant=_no_constant) for line in lines]


def hostile_first_step(output: str) -> list[Any]:
    """GOOD_SCRIPT whose first model output is ``output``; the runtime repairs it with the good one."""
    return [output, *GOOD_SCRIPT]


def assert_repaired_run(tmp_path: Path, output: str, code: str) -> None:
    runs = tmp_path / "runs"
    with make_client(runs, hostile_first_step(output)) as c:
        view = run_to_end(c)
        assert (view["status"], view["stop_reason"]) == ("completed", "completed"), view["error"]
        invalid = [e for e in view["events"] if e["type"] == "decision.invalid"]
        assert len(invalid) == 1 and invalid[0]["code"] == (code or invalid[0]["code"])
        assert any(e["type"] == "decision.repaired" for e in view["events"])
        assert_complete_trace(view["events"])
        every_view(c, view["id"])
    assert read_events_file(runs, view["id"]) == view["events"]
    with make_client(runs, GOOD_SCRIPT) as c:  # restart: a new store over the same folder
        assert every_view(c, view["id"])[0]["events"] == view["events"]


# ---------------------------------------------------------------- 1. NaN / Infinity


@pytest.mark.parametrize("number", ["Infinity", "-Infinity", "NaN", "1e400", "-1e999"])
def test_non_finite_numbers_are_an_invalid_decision(number):
    with pytest.raises(DecisionError) as info:
        parse_decision(ACTION, f'{{"query": "x", "top_k": {number}}}', "}")
    assert info.value.code == "non_finite_number"


def test_infinity_from_a_model_is_repaired_and_every_view_answers(tmp_path):
    assert_repaired_run(tmp_path, '{"query": "batches", "top_k": Infinity}', "non_finite_number")


def fake_run(*payloads: dict[str, Any]):
    """A run function that emits ``payloads`` through a real Trace into the store's sink."""

    def run(pack, policy, budgets, *, sink, **kw):
        trace = Trace(sink)
        trace.emit("run.started", "run")
        for payload in payloads:
            trace.emit("tool.observation", "observation", 1, **payload)
        trace.emit("run.finished", "run", 1, status="completed", stop_reason="completed", final=None,
                   metrics={"score": float("nan")}, error=None)
        return SimpleNamespace(result=RunResult(status="completed", stop_reason="completed"), events=trace.events)

    return run


def test_the_store_writes_only_strict_json_and_reads_it_back(tmp_path):
    runs = tmp_path / "runs"
    payload = {"value": float("inf"), "values": [float("nan"), -float("inf"), 1.5], "huge": 10**2000}
    with make_client(runs, GOOD_SCRIPT, run_fn=fake_run(payload)) as c:
        view = run_to_end(c)
        assert view["status"] == "completed"
        observed = [e for e in view["events"] if e["type"] == "tool.observation"][0]
        assert observed["value"] == "<non-finite number>"  # replaced by a marker, never dropped
        assert observed["values"] == ["<non-finite number>", "<non-finite number>", 1.5]
        assert observed["huge"] == "<integer out of range>"
        every_view(c, view["id"])
    assert read_events_file(runs, view["id"]) == view["events"]
    job = json.loads((runs / view["id"] / "job.json").read_text(encoding="utf-8"), parse_constant=_no_constant)
    assert job["status"] == "completed"


def test_an_old_events_file_with_infinity_still_reads(tmp_path):
    runs = tmp_path / "runs"
    with make_client(runs, GOOD_SCRIPT) as c:
        view = run_to_end(c)
    events_file = runs / view["id"] / "events.jsonl"
    lines = events_file.read_text(encoding="utf-8").splitlines()
    lines[1] = lines[1][:-1] + ', "old": Infinity, "older": NaN}'  # as an earlier version stored it
    events_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with make_client(runs, GOOD_SCRIPT) as c:
        views = every_view(c, view["id"])
    assert views[0]["events"][1]["old"] == "<non-finite number>"
    assert_complete_trace(views[0]["events"])


# ---------------------------------------------------------------- 2. lone surrogates


@pytest.mark.parametrize("output", ['{"query": "\\ud800"}', '{"query": "a\\udfff b"}', '{"\\ud800": 1}'])
def test_lone_surrogates_are_an_invalid_decision(output):
    with pytest.raises(DecisionError) as info:
        parse_decision(ACTION, output, "}")
    assert info.value.code == "invalid_unicode"
    assert parse_decision(ACTION, '{"query": "\\ud83d\\ude00"}', "}").arguments == {"query": "\U0001F600"}


def test_lone_surrogate_from_a_model_is_repaired_and_every_view_answers(tmp_path):
    assert_repaired_run(tmp_path, '{"query": "\\ud800 batches"}', "invalid_unicode")


def test_a_surrogate_reaching_the_store_is_replaced_without_a_gap(tmp_path):
    runs = tmp_path / "runs"
    payload = {"text": "bad \ud800 text", "\udcff key": ["\udfff"]}
    with make_client(runs, GOOD_SCRIPT, run_fn=fake_run(payload)) as c:
        view = run_to_end(c)
        # Not runtime_error: the UnicodeEncodeError the old store raised cannot happen any more.
        assert (view["status"], view["stop_reason"]) == ("completed", "completed")
        observed = [e for e in view["events"] if e["type"] == "tool.observation"][0]
        assert observed["text"] == "bad \ufffd text" and observed["\ufffd key"] == ["\ufffd"]
        assert_complete_trace(view["events"])
        every_view(c, view["id"])
    assert read_events_file(runs, view["id"]) == view["events"]


# ---------------------------------------------------------------- 3. deep nesting


@pytest.mark.parametrize("output", [
    '{"query": ' + "[" * 5000 + "]" * 5000 + "}",
    '{"query": ' + "[" * 5000,  # never closed
    '{"query": ' + '{"a": ' * 3000 + "1" + "}" * 3001,
    "[" * 100_000,
    '{"query": "' + "a" * 1_000_000 + '"}',  # a megabyte string
])
def test_deep_or_huge_output_is_a_repairable_invalid_decision(output):
    with pytest.raises(DecisionError) as info:
        parse_decision(ACTION, output, "}")
    assert info.value.code in ("too_deep", "too_large")


def test_nesting_up_to_the_limit_still_parses_and_strings_do_not_count():
    nested = "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2)
    assert parse_decision(ACTION, '{"query": "x", "deep": ' + nested + "}", "}").arguments["deep"]
    assert parse_decision(ACTION, '{"query": "' + "[" * 5000 + '"}', "}").arguments["query"] == "[" * 5000


@pytest.mark.parametrize("depth, code", [
    (100, "too_deep"),  # within the token limit: the parser refuses it
    (5000, None),  # the issue's output; the scripted tokenizer counts it past the token limit first
])
def test_deeply_nested_model_output_is_repaired_not_a_runtime_error(tmp_path, depth, code):
    assert_repaired_run(tmp_path, '{"query": ' + "[" * depth + "]" * depth + "}", code)


# ---------------------------------------------------------------- 4. artifacts and links


def _artifact_run(runs: Path) -> tuple[Any, str, str]:
    client = make_client(runs, GOOD_SCRIPT)
    client.__enter__()
    view = run_to_end(client)
    assert view["status"] == "completed" and view["artifacts"], view["error"]
    return client, view["id"], view["artifacts"][0]


@pytest.mark.parametrize("swap", ["artifacts_dir", "png_file", "run_dir"])
def test_artifacts_are_never_read_through_a_link(tmp_path, swap):
    runs = tmp_path / "runs"
    client, run_id, art = _artifact_run(runs)
    try:
        url = f"/agent/runs/{run_id}/artifacts/{art}"
        assert client.get(url).status_code == 200
        outside = tmp_path / "outside"
        (outside / "artifacts").mkdir(parents=True)
        secret = b"\x89PNG not yours: private data"
        (outside / "artifacts" / f"{art}.png").write_bytes(secret)
        (outside / f"{art}.png").write_bytes(secret)
        run_dir = runs / run_id
        if swap == "artifacts_dir":
            (run_dir / "artifacts").rename(tmp_path / "moved")
            (run_dir / "artifacts").symlink_to(outside, target_is_directory=True)
        elif swap == "png_file":
            (run_dir / "artifacts" / f"{art}.png").unlink()
            (run_dir / "artifacts" / f"{art}.png").symlink_to(outside / f"{art}.png")
        else:
            run_dir.rename(tmp_path / "moved-run")
            run_dir.symlink_to(outside, target_is_directory=True)
        r = client.get(url)
        assert r.status_code == 404 and secret not in r.content
        assert r.json()["error"]["code"] == "not_found"
    finally:
        client.__exit__(None, None, None)


def test_a_fifo_in_place_of_an_artifact_is_refused_without_blocking(tmp_path):
    runs = tmp_path / "runs"
    client, run_id, art = _artifact_run(runs)
    try:
        png = runs / run_id / "artifacts" / f"{art}.png"
        png.unlink()
        os.mkfifo(png)
        started = time.monotonic()
        assert client.get(f"/agent/runs/{run_id}/artifacts/{art}").status_code == 404
        assert time.monotonic() - started < 5
    finally:
        client.__exit__(None, None, None)


def test_run_files_behind_links_are_not_read_at_restart(tmp_path):
    runs = tmp_path / "runs"
    client, run_id, _ = _artifact_run(runs)
    client.__exit__(None, None, None)
    elsewhere = tmp_path / "elsewhere.jsonl"
    events = runs / run_id / "events.jsonl"
    elsewhere.write_bytes(events.read_bytes())
    events.unlink()
    events.symlink_to(elsewhere)
    store = JobStore(runs, lambda *a, **k: None, lambda r: None)
    try:
        view = store.view(run_id)  # the folder loads; the linked events file is not read through
        assert [e["type"] for e in view["events"]] == ["run.finished"]
    finally:
        store.close()
    assert elsewhere.read_bytes().count(b"\n") == events.read_bytes().count(b"\n")  # and never written


# ---------------------------------------------------------------- 5. path redaction


@pytest.mark.parametrize("text", [
    "/2024/models/q.gguf", "/用户/模型/q.gguf", "/Ä/alice/q", "/home/alice/My Models/q.gguf",
    "'/home/alice/My Big Old Model Folder/q.gguf'", '"/srv/a b/c d/q.gguf"', "~/models/q.gguf", "~alice/q.gguf",
    "C:\\Users\\bob\\q.gguf", "C:\\Users\\bob\\My Models\\q.gguf", "C:/Users/bob/q.gguf", "\\\\server\\share\\q.gguf",
    "file:///home/alice/q.gguf", "/моя/папка/q.gguf", "/home/alice/données/q.gguf",
])
def test_paths_are_redacted_by_structure(text):
    out = redact_text(f"model at {text} failed")
    assert out.startswith("model at ") and out.endswith(" failed")
    assert "q.gguf" not in out and "alice" not in out and "bob" not in out and "Models" not in out, out
    assert "<path>" in out


@pytest.mark.parametrize("text", [
    "(72+78)/4", "((72+78+81+85)/4)/78", "1/2", "72 / 4 / 2", "(72 + 78) / 4 / 2", "/4/2", "obs-calculator-2",
    "http://127.0.0.1:4890/status", "https://example.org/docs/page", "and/or", "km/h",
])
def test_arithmetic_urls_and_words_are_not_paths(text):
    assert redact_text(text) == text


def test_url_queries_are_still_redacted():
    assert redact_text("http://127.0.0.1:4890/x?model=/home/alice/q.gguf") == "http://127.0.0.1:4890/x?model=<path>"


def test_redaction_reaches_keys_and_every_value():
    value = {"/home/alice/q.gguf": ["/用户/模型/q.gguf", {"deep": "C:\\Users\\bob\\x"}], "n": 1, "/srv/m/q.gguf": 2}
    public = redact(value)
    assert "q.gguf" not in json.dumps(public, ensure_ascii=False)
    assert public["<path>#2"] == 2 and public["n"] == 1  # keys that redact alike keep both values


def test_redaction_is_linear_on_hostile_text():
    for hostile in ["(/" * 30000, "/1" * 30000, " /1" * 20000, "'/" * 30000, "/a b" * 15000, "'/" + "a" * 60000]:
        started = time.perf_counter()
        redact_text(hostile)
        assert time.perf_counter() - started < 1.0, hostile[:10]


def _gguf_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def small_gguf(path: Path, name: str, *, strings: int = 2, sparse_total: int | None = None) -> Path:
    """A GGUF v3 with general.name, a chat template and a ``strings``-entry token array.

    With ``sparse_total`` the token array is declared but not written: the file is extended with
    a hole (zeros: empty strings), so it costs a few KB on disk whatever it declares.
    """
    kvs = [("general.architecture", "qwen2"), ("general.name", name), ("tokenizer.chat_template", "{{ x }}")]
    out = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kvs) + 1)
    for key, value in kvs:
        out += _gguf_string(key) + struct.pack("<I", 8) + _gguf_string(value)
    out += _gguf_string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, sparse_total or strings)
    if sparse_total is None:
        out += b"".join(_gguf_string(f"t{i}") for i in range(strings))
        out += _gguf_string("w") + struct.pack("<I", 1) + struct.pack("<Q", 8) + struct.pack("<IQ", 0, 0)
        out += b"\0" * ((-len(out)) % 32) + b"\0" * 32
        path.write_bytes(out)
    else:
        with open(path, "wb") as f:
            f.write(out)
            f.truncate(len(out) + 8 * sparse_total + 4096)
    return path


@pytest.mark.parametrize("name", ["/用户/模型/q.gguf", "/home/alice/My Models/q.gguf", "/2024/models/q.gguf"])
def test_inspect_report_never_carries_a_path_from_gguf_metadata(tmp_path, name):
    model = small_gguf(tmp_path / "m.gguf", name)
    with make_client(tmp_path / "runs", GOOD_SCRIPT) as c:
        r = c.post("/models/inspect", json={"model_path": str(model)})
    assert r.status_code in (200, 400), r.text
    body = r.json()
    report = body if r.status_code == 200 else body["error"]["report"]
    assert report["config"]["model_name"] == "<path>"
    assert "q.gguf" not in r.text and str(tmp_path) not in r.text


# ---------------------------------------------------------------- 6. resources


def test_a_huge_declared_gguf_array_costs_bounded_cpu(tmp_path):
    small = small_gguf(tmp_path / "small.gguf", "m", sparse_total=200_000)
    huge = small_gguf(tmp_path / "huge.gguf", "m", sparse_total=4_000_000)
    assert huge.stat().st_blocks * 512 < 1 << 20  # a few KB on disk
    with make_client(tmp_path / "runs", GOOD_SCRIPT) as c:
        c.post("/models/inspect", json={"model_path": str(small)})  # warm imports
        started = time.process_time()
        r = c.post("/models/inspect", json={"model_path": str(huge)})
        spent = time.process_time() - started
    assert r.status_code == 400 and r.json()["error"]["reason"] == "weights_unreadable", r.text
    assert "budget" in r.json()["error"]["message"]
    assert spent < 1.0, f"{spent:.2f} s of CPU"


def test_the_gguf_reader_has_a_time_budget(tmp_path, monkeypatch):
    import agent.models.backends as backends
    import agent.models.backends.headers as headers

    model = small_gguf(tmp_path / "m.gguf", "m", sparse_total=300_000)
    assert backends.read_gguf_header(model)["metadata"]["_vocab_size"] == 300_000
    monkeypatch.setattr(headers, "MAX_GGUF_SECONDS", -1.0)
    with pytest.raises(headers._Corrupt, match="s of CPU"):
        backends.read_gguf_header(model)


def test_the_gguf_readers_time_budget_counts_its_cpu_not_its_waiting(tmp_path, monkeypatch):
    """On cores other processes hold, a valid header waits far longer than it works: not corrupt."""
    import agent.models.backends as backends
    import agent.models.backends.headers as headers

    model = small_gguf(tmp_path / "m.gguf", "m", sparse_total=1000)
    monkeypatch.setattr(headers, "MAX_GGUF_SECONDS", 0.2)
    slow_read = headers._BoundedReader.read

    def waiting_read(self, n):
        time.sleep(0.01)  # 100+ reads: over a second of waiting, a few ms of CPU
        return slow_read(self, n)

    monkeypatch.setattr(headers._BoundedReader, "read", waiting_read)
    started = time.monotonic()
    assert backends.read_gguf_header(model)["metadata"]["_vocab_size"] == 1000
    assert time.monotonic() - started > 0.2  # the wall-clock budget alone would have refused it


@contextlib.contextmanager
def live_runner(tmp_path: Path, read_seconds: float):
    """The runner's app under uvicorn with the runner's own config, in a thread, on a free port."""
    import uvicorn

    port = free_port()
    settings = RunnerSettings(runs_dir=tmp_path / "runs", port=port, test_policy=True,
                              policy_factory=scripted_policy_factory(GOOD_SCRIPT))
    server = uvicorn.Server(server_config(create_app(settings), "127.0.0.1", port, read_seconds=read_seconds,
                                          log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the runner did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(15)


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1024, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


def _status_seconds(port: int) -> float:
    started = time.monotonic()
    r = httpx.get(f"http://127.0.0.1:{port}/status", timeout=5)
    assert r.status_code == 200
    return time.monotonic() - started


@pytest.mark.parametrize("kind", ["headers", "body", "silent"])
def test_a_slow_client_is_cut_off_while_others_are_served(tmp_path, kind):
    read_seconds = 1.0
    with live_runner(tmp_path, read_seconds) as port:
        body = json.dumps(RUN).encode()
        request = (f"POST /agent/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode()
        slow = socket.create_connection(("127.0.0.1", port))
        try:
            if kind == "body":
                slow.sendall(request)
                trickle = body
            else:
                trickle = request if kind == "headers" else b""
            started = time.monotonic()
            served = []
            sent = 0
            while not _closed(slow):
                elapsed = time.monotonic() - started
                assert elapsed < read_seconds + 3, f"still connected after {elapsed:.1f} s"
                if sent < len(trickle) - 1:  # never the last byte: the request stays incomplete
                    try:
                        slow.send(trickle[sent:sent + 1])
                    except OSError:
                        break
                    sent += 1
                if len(served) < 3:
                    served.append(_status_seconds(port))
                time.sleep(0.1)
            assert time.monotonic() - started >= read_seconds * 0.9
            assert max(served) < 1.0, served  # another client answers quickly meanwhile
        finally:
            slow.close()
        assert _status_seconds(port) < 1.0


def test_many_idle_sockets_are_released(tmp_path):
    with live_runner(tmp_path, 1.0) as port:
        sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
        try:
            assert _status_seconds(port) < 1.0
            deadline = time.monotonic() + 5
            while not all(_closed(s) for s in sockets):
                assert time.monotonic() < deadline, "idle sockets were kept"
                time.sleep(0.1)
        finally:
            for s in sockets:
                s.close()


def test_keep_alive_requests_spread_past_the_deadline_are_served(tmp_path):
    with live_runner(tmp_path, 1.0) as port:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            run_id = client.post("/agent/runs", json=RUN).json()["id"]
            for _ in range(3):  # the same connection, requests spread over more than the deadline
                assert client.get(f"/agent/runs/{run_id}").status_code == 200
                time.sleep(0.6)


def test_runner_main_uses_the_read_deadline(tmp_path, monkeypatch):
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from agent.runner import server as server_module

    captured: list[Any] = []

    class CapturingServer(uvicorn.Server):
        def __init__(self, config):
            super().__init__(config)
            captured.append(self)

    monkeypatch.setattr(uvicorn, "Server", CapturingServer)
    monkeypatch.delenv("REACT_AGENT_TEST_POLICY", raising=False)
    port = free_port()
    thread = threading.Thread(target=server_module.main, args=(["--port", str(port), "--runs-dir",
                                                               str(tmp_path / "runs"), "--log-level", "warning"],),
                              daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not (captured and captured[0].started):
        assert time.monotonic() < deadline and thread.is_alive(), "main() did not start"
        time.sleep(0.02)
    server = captured[0]
    try:
        config = server.config
        assert config.timeout_keep_alive == server_module.KEEP_ALIVE_SECONDS
        # httptools' parser when installed (faster), h11 otherwise; either way the read deadline wraps it.
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        assert issubclass(config.http, (H11Protocol, HttpToolsProtocol))
        assert "ReadDeadline" in config.http.__name__
        assert config.ws == "none"
    finally:
        server.should_exit = True
        thread.join(15)
