"""Secrets stay secret (SECURITY 28-30): what a served model, its server or a tool echoes of the
operator's key never reaches anything a page or a file can read; which key goes to which host is the
operator's configuration, never the request's; and a cancelled served call, an event stream that
accepts nothing and an inspect of a served model all end within their deadlines.

Keys are random per test run: the property is that *a* key cannot leak, whichever it is.
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
import struct
import threading
import time
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from loopback_server import Drip, LoopbackModelServer, Respond, Stall
from served_support import (
    FakeServer,
    chain_arguments,
    error_response,
    final_evidence,
    forced_tool,
    openai_policy,
    openai_reply,
)
from server_support import BASE_URL, GOOD_SCRIPT, make_client, slow_script, wait_terminal
from test_served_openai import calculator_request
from test_stream import LiveRunner

from agent.models.backends import inspect_served
from agent.models.backends import served_http
from agent.models.backends.headers import _Corrupt, read_gguf_header
from agent.models.backends.openai_compatible import OpenAICompatiblePolicy
from agent.models.backends.scripted import ScriptedPolicy
from agent.models.backends.served import ServedAccess, ServedModelError
from agent.models.backends.served_access import parse_key_entry, parse_origin
from agent.models.providers import OpenAICompatibleSpec
from agent.util.secrets import MARK, MIN_RUN, HeldBack, register, scrub
from agent.runner.server import RunnerSettings, create_app
from agent.tools import plotting

ORIGIN = {"Origin": "http://127.0.0.1:8017"}
FAKE_ORIGIN = "127.0.0.1:8999"  # served_support's FakeServer answers http://127.0.0.1:8999/v1


def new_key(prefix: str = "sk-test-") -> str:
    return prefix + secrets.token_hex(16)


def longest_run(text: str, key: str) -> int:
    """The longest run of consecutive characters of ``key`` found in ``text``."""
    for length in range(len(key), 0, -1):
        if any(key[i:i + length] in text for i in range(len(key) - length + 1)):
            return length
    return 0


def assert_no_run(text: str, key: str) -> None:
    assert longest_run(text, key) < MIN_RUN, f"{longest_run(text, key)} characters of the key survived"


def stored_text(folder) -> str:
    """Every run file the runner left (the PNGs are compared as images, not as text)."""
    return "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file() and p.suffix != ".png")


def served(base_url: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "openai_compatible", "base_url": base_url, "model": "qwen", **extra}


# --------------------------------------------------------------------------------------------
# The redactor
# --------------------------------------------------------------------------------------------


def test_a_secret_and_every_run_of_min_run_of_its_characters_become_redacted():
    key = new_key()
    register([key])
    for length in range(MIN_RUN, len(key) + 1):
        for start in range(len(key) - length + 1):
            text = f"pre {key[start:start + length]} post"
            clean = scrub(text)
            assert MARK in clean and clean.startswith("pre ") and clean.endswith(" post")
            assert_no_run(clean, key)
    assert scrub(f"a {key[:MIN_RUN - 1]} b") == f"a {key[:MIN_RUN - 1]} b"  # shorter runs are not the key
    glued = key + key[5:20] + "x" + key[::-1] + key[-9:]
    assert_no_run(scrub(glued), key)
    assert scrub("nothing secret here") == "nothing secret here"
    register(["test", "1"])  # placeholders too short to tell from text are not secrets to scrub
    assert scrub("test 1 passed") == "test 1 passed"


def test_scrubbing_costs_bounded_time_on_hostile_text():
    key = new_key()
    register([key])
    for hostile in (key[:4] * 250_000, key[:MIN_RUN + 3] * 80_000, (key[:6] + "|") * 140_000):
        started = time.perf_counter()
        clean = scrub(hostile)
        assert time.perf_counter() - started < 3.0
        assert_no_run(clean[:100_000], key)


def test_a_text_streamed_in_pieces_never_sends_a_run_of_a_key():
    """A key split over two streamed pieces (each shorter than MIN_RUN) is still redacted."""
    key = new_key()
    register([key])
    text = f"the key is {key}, said the model"
    held, sent = HeldBack(), ""
    for end in range(0, len(text) + 1, 3):
        sent += held.piece(text[:end])
    sent += held.piece(text, final=True)
    assert_no_run(sent, key)
    assert sent == scrub(text)


def test_log_records_are_scrubbed_whatever_handler_writes_them(caplog):
    key = new_key()
    register([key])
    log = logging.getLogger("agent.test_secrets")
    with caplog.at_level(logging.DEBUG):
        log.info("the server said %s", f"bad key {key}")
        try:
            raise RuntimeError(f"refused {key[:20]}")
        except RuntimeError:
            log.exception("a call failed")
    assert "the server said bad key [redacted]" in caplog.text and "a call failed" in caplog.text
    assert_no_run(caplog.text, key)


# --------------------------------------------------------------------------------------------
# A key the server echoes back lands nowhere
# --------------------------------------------------------------------------------------------


def echo_reply(key: str, body: dict[str, Any]) -> bytes:
    """The chain's correct call, with the key it was sent copied into a search query, the chart's
    title, the final answer and the text around the call."""
    arguments = chain_arguments()
    tool = forced_tool(body)
    if tool == "final_answer":
        return openai_reply("final_answer", {"answer": f"{arguments['final_answer']} {key}",
                                             "evidence_ids": final_evidence(body)}, text=f"my key: {key}")
    call = dict(arguments[tool])
    if tool == "knowledge_search":
        call["query"] = f"{call['query']} {key}"
    elif tool == "plot":
        call["title"] = key
    return openai_reply(tool, call, text=f"using {key[:12]}")


def echo_explainer(key: str) -> ScriptedPolicy:
    """An explaining model that writes the key, three characters a piece."""
    text = json.dumps(f"It worked; the key was {key}.")

    def write(request):
        for end in range(3, len(text), 3):
            request.on_text(text[:end])
        return text

    return ScriptedPolicy([write])


def assert_chart_drawn_without_the_key(view: dict[str, Any], png: bytes, key: str) -> None:
    """The PNG is the image of the chart whose title was scrubbed, not of the one the model asked for."""
    obs = next(e["observation"] for e in view["events"] if e["type"] == "tool.observation"
               and e["observation"]["tool"] == "plot")
    spec = obs["result"]["spec"]
    assert spec["title"] == MARK
    with plotting._render_lock:
        assert png == plotting._render_png(spec)
        assert png != plotting._render_png({**spec, "title": key})


def test_an_echoed_key_reaches_no_view_stream_file_chart_log_or_explanation(tmp_path, monkeypatch, caplog):
    """The server copies the Authorization value it receives into its tool calls (a search query, a
    chart title, the final answer) and its text: the run completes, and the key is nowhere."""
    caplog.set_level(logging.DEBUG)
    key = new_key()
    monkeypatch.setenv("OPENAI_API_KEY", key)
    server = FakeServer(lambda request, body: echo_reply(request.headers["authorization"].removeprefix("Bearer "),
                                                         body))
    access = ServedAccess.of(keys=[f"openai_compatible@{FAKE_ORIGIN}=OPENAI_API_KEY"])
    explainer = echo_explainer(key)

    def factory(request):
        return lambda: OpenAICompatiblePolicy(request.model, access, transport=server.transport, backoff_seconds=0.0)

    settings = RunnerSettings(runs_dir=tmp_path, policy_factory=factory, test_policy=True,
                              explain_policy_factory=lambda body: explainer)
    with TestClient(create_app(settings), base_url=BASE_URL) as client:
        run_id = client.post("/agent/runs", json={"model": served(f"http://{FAKE_ORIGIN}/v1")}, headers=ORIGIN).json()["id"]
        view = wait_terminal(client, run_id)
        assert view["status"] == "completed", view["error"]
        assert server.headers[0]["authorization"] == f"Bearer {key}"  # it was sent to its own origin
        with client.stream("GET", f"/agent/runs/{run_id}/events") as stream:
            sse = stream.read().decode()
        art = next(iter(view["artifacts"]))
        png = client.get(f"/agent/runs/{run_id}/artifacts/{art}").content
        explained = client.post(f"/agent/runs/{run_id}/explain", json={"model_path": "x", "language": "en"},
                                headers=ORIGIN).text
        listed = client.get("/agent/runs").text
    assert MARK in json.dumps(view) and MARK in sse and MARK in explained
    prompt = json.dumps(explainer.requests[0].messages)
    for text in (json.dumps(view), sse, listed, stored_text(tmp_path), caplog.text, explained, prompt):
        assert_no_run(text, key)
    assert_chart_drawn_without_the_key(view, png, key)


def test_an_echoed_key_stays_in_the_runner_over_a_real_socket(tmp_path, monkeypatch):
    """The runner's own configuration (``model_keys``, the default policy factory, a real HTTP client)
    against a real loopback server that echoes the key."""
    key = new_key()
    monkeypatch.setenv("LOOPBACK_MODEL_KEY", key)
    model = LoopbackModelServer(lambda r: Respond(echo_reply(r.headers["authorization"].removeprefix("Bearer "),
                                                             r.json())))
    pin = f"openai_compatible@{model.origin}=LOOPBACK_MODEL_KEY"
    with LiveRunner(tmp_path, None, model_keys=(pin,)) as runner, runner.client() as http:
        run_id = http.post("/agent/runs", json={"model": served(model.base_url)}).json()["id"]
        view = wait_terminal(http, run_id, timeout=60)
        with http.stream("GET", f"/agent/runs/{run_id}/events") as stream:
            sse = "\n".join(stream.iter_lines())
        png = http.get(f"/agent/runs/{run_id}/artifacts/{view['artifacts'][0]}").content
    model.close()
    assert view["status"] == "completed", view["error"]
    assert model.requests[0].headers["authorization"] == f"Bearer {key}"
    for text in (json.dumps(view), sse, stored_text(tmp_path)):
        assert_no_run(text, key)
    assert_chart_drawn_without_the_key(view, png, key)


# --------------------------------------------------------------------------------------------
# An error message cut at any length keeps no part of the key
# --------------------------------------------------------------------------------------------


def test_a_key_at_the_end_of_a_cut_server_message_leaves_no_run_of_it(tmp_path, monkeypatch):
    """The server's message is cut to 200 characters for the error; wherever the cut falls inside the
    key, no run of MIN_RUN characters of it is left (the cut used to come before the redaction)."""
    key = new_key()
    monkeypatch.setenv("OPENAI_API_KEY", key)
    access = ServedAccess.of(keys=[f"openai_compatible@{FAKE_ORIGIN}=OPENAI_API_KEY"])
    kept = 200  # the server message's share of error.message (served_errors._describe)
    for inside in range(1, len(key) + 1):
        message = "Incorrect API key provided: ".ljust(kept - inside, ".") + key
        server = FakeServer([error_response(401, message)])
        with pytest.raises(ServedModelError) as info:
            openai_policy(server, access=access).propose(calculator_request())
        assert info.value.code == "auth_failed" and "Incorrect API key provided" in info.value.message
        assert_no_run(info.value.message, key)

    server = FakeServer(lambda request, body: error_response(401, "x" * 170 + f" Incorrect key {key}"))

    def factory(request):
        return lambda: OpenAICompatiblePolicy(request.model, access, transport=server.transport, backoff_seconds=0.0)

    with make_client(tmp_path, policy_factory=factory) as client:
        run_id = client.post("/agent/runs", json={"model": served(f"http://{FAKE_ORIGIN}/v1")}, headers=ORIGIN).json()["id"]
        view = wait_terminal(client, run_id)
        with client.stream("GET", f"/agent/runs/{run_id}/events") as stream:
            sse = stream.read().decode()
    assert view["error"]["code"] == "auth_failed" and MARK in view["error"]["message"]
    for text in (json.dumps(view), sse, stored_text(tmp_path)):
        assert_no_run(text, key)


# --------------------------------------------------------------------------------------------
# Which key goes to which host is the operator's configuration
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variable", ["GITHUB_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"])
def test_a_request_cannot_name_the_variable_a_key_is_read_from(tmp_path, monkeypatch, variable):
    key = new_key("ghp_")
    monkeypatch.setenv(variable, key)
    model = LoopbackModelServer(lambda r: Respond(b"{}", status=500))
    client = make_client(tmp_path, allow_model_hosts=(model.origin,),
                         model_keys=(f"openai_compatible@{model.origin}=OPENAI_API_KEY",))
    spec = served(model.base_url, api_key_env=variable)
    for path in ("/agent/runs", "/models/inspect"):
        response = client.post(path, json={"model": spec}, headers=ORIGIN)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "validation_error" and "--model-key" in error["message"]
        assert error["fields"][0]["loc"] == ["body", "model", "api_key_env"]
    assert client.get("/agent/runs").json()["count"] == 0 and model.requests == []
    model.close()


def test_an_anthropic_key_goes_only_to_the_origin_configured_for_anthropic(tmp_path, monkeypatch):
    """An ``anthropic`` request whose base URL is an allowed loopback host got the Anthropic key;
    now a key goes to the provider and origin it is pinned to, and nowhere else."""
    anthropic_key, openai_key = new_key("sk-ant-"), new_key()
    monkeypatch.setenv("ANTHROPIC_API_KEY", anthropic_key)
    monkeypatch.setenv("OPENAI_API_KEY", openai_key)
    model = LoopbackModelServer(lambda r: Respond(json.dumps({"type": "error", "error": {
        "type": "invalid_request_error", "message": "no"}}).encode(), status=400,
        headers={"content-type": "application/json"}))
    base = f"http://{model.origin}"
    with make_client(tmp_path, allow_model_hosts=(model.origin,),
                     model_keys=(f"openai_compatible@{model.origin}=OPENAI_API_KEY",)) as client:
        for spec in ({"kind": "anthropic", "model": "claude", "base_url": base}, served(base + "/v1")):
            run_id = client.post("/agent/runs", json={"model": spec}, headers=ORIGIN).json()["id"]
            wait_terminal(client, run_id)
    model.close()
    anthropic_call, openai_call = model.requests
    assert anthropic_call.path == "/v1/messages" and anthropic_call.headers["authorization"] == "Bearer no-key"
    assert openai_call.path == "/v1/chat/completions" and openai_call.headers["authorization"] == f"Bearer {openai_key}"
    assert anthropic_key not in json.dumps([r.headers for r in model.requests])

    access = ServedAccess.of(["https://api.anthropic.com", "https://api.openai.com"])
    anthropic_host = access.endpoint("https://api.anthropic.com/v1")
    assert access.key_for("anthropic", anthropic_host) == anthropic_key
    assert access.key_for("openai_compatible", anthropic_host) is None
    assert access.key_for("openai_compatible", access.endpoint("https://api.openai.com/v1")) == openai_key
    assert access.key_for("anthropic", access.endpoint("http://127.0.0.1:8998")) is None


@pytest.mark.parametrize("base_url", ["http://api.anthropic.com", "https://api.anthropic.com:8080",
                                      "http://api.anthropic.com:443"])
def test_an_allowed_host_pins_its_scheme_and_port(tmp_path, base_url):
    """``--allow-model-host api.anthropic.com`` used to let ``http://`` and any port through: a key
    could leave in clear text."""
    client = make_client(tmp_path, allow_model_hosts=("api.anthropic.com",))
    response = client.post("/agent/runs", json={"model": {"kind": "anthropic", "model": "c", "base_url": base_url}},
                           headers=ORIGIN)
    assert response.status_code == 400 and response.json()["error"]["reason"] == "host_not_allowed"
    assert client.get("/agent/runs").json()["count"] == 0
    assert ServedAccess.of(["api.anthropic.com"]).endpoint("https://api.anthropic.com").named
    assert ServedAccess.of(["https://api.anthropic.com:443/"]).endpoint("https://API.anthropic.com:443/v1").named
    assert client.get("/status").json()["served_models"]["allowed_hosts"] == ["loopback", "https://api.anthropic.com:443"]


def test_a_key_leaves_over_https_only_except_to_loopback(capsys):
    from agent.cli.main import main as cli_main
    from agent.runner.server import _parse_args

    with pytest.raises(ValueError, match="https only"):
        parse_key_entry("openai_compatible@http://gpu-box:8000=GPU_KEY", {})
    assert parse_key_entry("openai_compatible@127.0.0.1:8000=GPU_KEY", {}).origin == parse_origin("http://127.0.0.1:8000")
    assert parse_key_entry("openai_compatible@gpu-box:8443=GPU_KEY", {}).origin == parse_origin("https://gpu-box:8443")
    with pytest.raises(SystemExit) as exit_info:
        _parse_args(["--model-key", "openai_compatible@http://gpu-box:8000=GPU_KEY"])
    assert exit_info.value.code == 2 and "https only" in capsys.readouterr().err
    for bad in (["--allow-model-host", "*.example.com"], ["--model-key", "github@api.github.com=GITHUB_API_KEY"],
                ["--allow-model-host", "https://gpu-box/v1"]):
        with pytest.raises(SystemExit):
            _parse_args(bad)
    assert _parse_args(["--allow-model-host", "https://api.anthropic.com", "--model-key",
                        "anthropic@https://api.anthropic.com=ANTHROPIC_API_KEY"]).model_keys
    code = cli_main(["run", "--model", "openai:http://gpu-box:8000/v1#qwen", "--api-key-env", "GPU_KEY"])
    assert code == 2 and "https only" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# Retention: see test_retention.py. Cancelled calls, streams and inspect end within their deadlines
# --------------------------------------------------------------------------------------------


def _new_call_threads(before: set[int]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "served-call" and t.ident not in before]


@pytest.mark.parametrize("headers_first", [False, True], ids=["before-headers", "after-headers"])
def test_a_cancelled_served_call_releases_its_thread_and_socket_within_a_second(headers_first):
    """A real loopback server that stalls (before its headers, or after them): each cancelled call
    used to keep its thread and its socket until the server sent a byte or 90 s passed."""
    model = LoopbackModelServer(lambda r: Stall(headers_first=headers_first))
    spec = OpenAICompatibleSpec(kind="openai_compatible", base_url=model.base_url, model="qwen")
    policy = OpenAICompatiblePolicy(spec, None, stall_seconds=60)
    before = {t.ident for t in threading.enumerate()}
    cycles = 25
    for _ in range(cycles):
        request = calculator_request()
        threading.Timer(0.05, request.cancel.set).start()
        assert policy.propose(request).finish_reason == "cancelled"
        left = time.monotonic()
        while _new_call_threads(before) and time.monotonic() - left < 1.0:
            time.sleep(0.005)
        assert not _new_call_threads(before), "the cancelled call's thread is still running after 1 s"
    assert len(model.requests) == cycles
    assert model.wait_connections(0, timeout=1.0) == 0  # every socket the calls opened is gone
    policy.close()
    model.close()


def test_inspect_reads_a_bounded_models_list_under_a_total_deadline(monkeypatch):
    """``GET {base}/models`` had no cap on its body and a per-read deadline only: a server dripping a
    byte every 0.3 s (each read well within its timeout) held inspect for as long as it liked."""
    monkeypatch.setattr(served_http, "MODELS_SECONDS", 1.0)
    key = new_key()
    monkeypatch.setenv("LOOPBACK_MODEL_KEY", key)

    def drip_forever():
        while True:
            yield b" "

    drip = LoopbackModelServer(lambda r: Drip(drip_forever(), 0.3))
    started = time.monotonic()
    report = inspect_served(OpenAICompatibleSpec(kind="openai_compatible", base_url=drip.base_url, model="qwen"))
    assert time.monotonic() - started < 2.5
    assert not report["ok"] and report["code"] == "network" and "within 1 s" in report["problems"][0]
    assert drip.wait_connections(0, timeout=1.0) == 0

    huge = LoopbackModelServer(lambda r: Respond(json.dumps({"data": [{"id": "m" * 1000}] * 2000}).encode(),
                                                 headers={"content-type": "application/json"}))
    report = inspect_served(OpenAICompatibleSpec(kind="openai_compatible", base_url=huge.base_url, model="qwen"))
    assert not report["ok"] and "larger than" in report["problems"][0]

    listing = LoopbackModelServer(lambda r: Respond(json.dumps({"data": [{"id": "qwen"}]}).encode(),
                                                    headers={"content-type": "application/json"}))
    access = ServedAccess.of(keys=[f"openai_compatible@{listing.origin}=LOOPBACK_MODEL_KEY"])
    report = inspect_served(OpenAICompatibleSpec(kind="openai_compatible", base_url=listing.base_url, model="qwen"),
                            access)
    assert report["ok"] and report["key_sent"] and listing.requests[0].headers["authorization"] == f"Bearer {key}"
    assert_no_run(json.dumps(report), key)
    for server in (drip, huge, listing):
        server.close()


@pytest.mark.parametrize("http_protocol", ["httptools", "h11"])
def test_a_stream_client_that_accepts_no_heartbeat_frees_its_slot(tmp_path, http_protocol):
    """Clients whose receive window is closed (a tiny buffer, never read) used to hold their slots
    for the stream's whole lifetime: heartbeats are too small to make a send block. A client that
    reads keeps its stream."""
    with LiveRunner(tmp_path, slow_script(60), write_seconds=1.0, max_streams=3, stream_ping_seconds=0.05,
                    stream_max_seconds=120, http=http_protocol) as runner, runner.client() as http:
        run_id = http.post("/agent/runs", json={"model_path": "scripted"}).json()["id"]
        host = f"127.0.0.1:{runner.port}".encode()
        silent = []
        for _ in range(2):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the kernel's minimum
            s.connect(("127.0.0.1", runner.port))
            s.sendall(b"GET /agent/runs/" + run_id.encode() + b"/events HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
            silent.append(s)
        reader_alive = threading.Event()
        stop = threading.Event()

        def read() -> None:
            with httpx.Client(base_url=runner.base_url, timeout=30) as c, \
                    c.stream("GET", f"/agent/runs/{run_id}/events") as r:
                for _ in r.iter_lines():
                    reader_alive.set()
                    if stop.is_set():
                        return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        runner.wait_streams(3)
        runner.wait_streams(1, timeout=20)  # the two silent clients are cut off, the reader is not
        assert reader.is_alive() and reader_alive.is_set()
        with http.stream("GET", f"/agent/runs/{run_id}/events") as again:
            assert again.status_code == 200  # a slot is free again
        stop.set()
        http.post(f"/agent/runs/{run_id}/cancel", json={})
        reader.join(10)
        for s in silent:
            s.close()
        runner.wait_streams(0)


# --------------------------------------------------------------------------------------------
# GGUF metadata of the wrong type is a corrupt file, not a crash
# --------------------------------------------------------------------------------------------


def _gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def gguf_with_alignment(path, value: bytes) -> Any:
    """A minimal GGUF v3 whose ``general.alignment`` is ``value`` (its type tag and payload)."""
    kvs = [("general.architecture", 8, _gguf_string("qwen2")), ("general.alignment", None, value),
           ("tokenizer.chat_template", 8, _gguf_string("{{ x }}"))]
    out = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kvs))
    for key, vtype, payload in kvs:
        out += _gguf_string(key) + (struct.pack("<I", vtype) if vtype is not None else b"") + payload
    out += _gguf_string("w") + struct.pack("<I", 1) + struct.pack("<Q", 8) + struct.pack("<IQ", 0, 0)
    path.write_bytes(out + b"\0" * (-len(out) % 32) + b"\0" * 32)
    return path


@pytest.mark.parametrize("value", [
    struct.pack("<I", 8) + _gguf_string("thirty-two"),  # a string
    struct.pack("<If", 6, 3.5),  # a float
    struct.pack("<I?", 7, True),  # a bool
    struct.pack("<II", 4, 0),  # zero
    struct.pack("<II", 4, 24),  # not a power of two
    struct.pack("<IIQ", 9, 4, 2) + struct.pack("<II", 32, 32),  # an array
], ids=["string", "float", "bool", "zero", "24", "array"])
def test_a_gguf_whose_alignment_is_not_a_power_of_two_is_a_clean_refusal(tmp_path, caplog, value):
    model = gguf_with_alignment(tmp_path / "m.gguf", value)
    with pytest.raises(_Corrupt, match="general.alignment"):
        read_gguf_header(model)
    caplog.set_level(logging.DEBUG)
    with make_client(tmp_path / "runs", GOOD_SCRIPT) as client:
        response = client.post("/models/inspect", json={"model_path": str(model)})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "model_unavailable" and error["reason"] == "weights_unreadable"
    assert "general.alignment" in error["message"] and str(tmp_path) not in response.text
    assert "Traceback" not in caplog.text and not [r for r in caplog.records if r.levelno >= logging.ERROR]
    good = gguf_with_alignment(tmp_path / "good.gguf", struct.pack("<II", 4, 32))
    assert read_gguf_header(good)["metadata"]["general.alignment"] == 32



def test_a_tool_process_never_inherits_a_credential(monkeypatch):
    """The worker process tools run in (the one a timeout kills) starts without any variable named
    like a credential and without any whose value holds a registered secret."""
    import os as _os

    from agent.util.secrets import register
    from agent.tools.isolation import ToolWorker

    key = "sk-tool-env-" + "q7" * 12
    register([key])
    monkeypatch.setenv("SOME_SERVICE_API_KEY", "anything-at-all-123")
    monkeypatch.setenv("INNOCENT_LOOKING", f"prefix {key} suffix")
    monkeypatch.setenv("PLAIN_SETTING", "kept")
    worker = ToolWorker()
    worker._start()
    try:
        import time as _time

        deadline = _time.monotonic() + 10
        raw = [b""]
        while raw == [b""] and _time.monotonic() < deadline:  # empty until the exec has completed
            raw = open(f"/proc/{worker.pid}/environ", "rb").read().split(b"\0")
            _time.sleep(0.05)
    finally:
        worker.kill()
    names = {item.split(b"=", 1)[0].decode() for item in raw if item}
    assert "PLAIN_SETTING" in names and "PYTHONPATH" in names
    assert "SOME_SERVICE_API_KEY" not in names and "INNOCENT_LOOKING" not in names
    assert not any(key.encode() in item for item in raw)
    assert _os.environ["SOME_SERVICE_API_KEY"]  # the runner's own environment is untouched
