"""SECURITY.md items 1-9 and 21 against the runner, in-process (the socket test covers item 1)."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from agent.runner.boundary import BrowserBoundary
from server_support import GOOD_SCRIPT, PAGE_ORIGIN, make_client, wait_terminal

RUN = {"model_path": "scripted"}
JSON = {"content-type": "application/json"}


@pytest.fixture
def client(tmp_path):
    with make_client(tmp_path / "runs", GOOD_SCRIPT) as c:
        yield c


@pytest.fixture
def finished(client):
    created = client.post("/agent/runs", json=RUN).json()
    return wait_terminal(client, created["id"])


def run_count(client) -> int:
    return client.get("/agent/runs").json()["count"]


def routes(run):
    art = run["artifacts"][0]
    return [
        ("GET", "/status"), ("GET", "/schema"), ("GET", "/agent/runs"), ("GET", f"/agent/runs/{run['id']}"),
        ("GET", f"/agent/runs/{run['id']}/artifacts/{art}"), ("GET", "/openapi.json"),
        ("POST", "/agent/runs"), ("POST", f"/agent/runs/{run['id']}/cancel"), ("POST", "/models/unload"),
        ("POST", "/models/inspect"), ("POST", "/schema/validate"), ("OPTIONS", "/agent/runs"),
        ("OPTIONS", f"/agent/runs/{run['id']}/artifacts/{art}"), ("DELETE", f"/agent/runs/{run['id']}"),
    ]


# ---------------------------------------------------------------- 2. Host allowlist (DNS rebinding)

BAD_HOSTS = ["evil.example:4890", "localhost.evil.com:4890", "127.0.0.1.nip.io:4890", "0.0.0.0:4890",
             "127.0.0.1:4891", "127.0.0.1", "localhost", "[::1]", "127.0.0.2:4890", "127.0.0.1:4890.evil",
             "localhost.:4890", "", "127.0.0.1:04890", "evil.example"]


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_foreign_host_is_refused_on_every_route(client, finished, host):
    before = run_count(client)
    for method, path in routes(finished):
        r = client.request(method, path, headers={"host": host, **JSON}, content=json.dumps(RUN))
        assert r.status_code == 421, (method, path, r.status_code)
        assert r.json()["error"]["code"] == "forbidden_host"
        assert "access-control-allow-origin" not in r.headers
        assert b"PNG" not in r.content and finished["id"] not in r.text
    assert run_count(client) == before
    assert client.get(f"/agent/runs/{finished['id']}").json()["status"] == "completed"


@pytest.mark.parametrize("host", ["127.0.0.1:4890", "localhost:4890", "LOCALHOST:4890", "[::1]:4890", "LocalHost:4890"])
def test_loopback_hosts_with_our_port_are_allowed(client, host):
    assert client.get("/status", headers={"host": host}).status_code == 200


def asgi_request(app, headers, method="GET", path="/status", body_chunks=(b"",)):
    """Call the ASGI app directly (for requests httpx cannot send: no Host, duplicate headers)."""
    sent, consumed = [], []
    chunks = list(body_chunks)

    async def receive():
        if chunks:
            chunk = chunks.pop(0)
            consumed.append(chunk)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": [(k.encode(), v.encode()) for k, v in headers], "http_version": "1.1",
             "scheme": "http", "server": ("127.0.0.1", 4890), "client": ("127.0.0.1", 5000), "root_path": ""}
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], dict((k.decode(), v.decode()) for k, v in sent[0]["headers"]), consumed


def test_missing_or_duplicate_host_is_refused(client):
    assert asgi_request(client.app, [])[0] == 421
    assert asgi_request(client.app, [("host", "127.0.0.1:4890"), ("host", "evil.example:4890")])[0] == 421
    assert asgi_request(client.app, [("host", "127.0.0.1:4890")])[0] == 200


# ---------------------------------------------------------------- 3. exact Origin allowlist

BAD_ORIGINS = ["https://evil.example", "null", "http://127.0.0.1:8017.evil.example", "https://127.0.0.1:8017",
               "http://127.0.0.1:8018", "http://localhost:8017/", "HTTP://127.0.0.1:8017", "http://127.0.0.1",
               "http://evil127.0.0.1:8017", "http://[::1]:8017", "http://localhost:8017 ", "*", ""]


@pytest.mark.parametrize("origin", BAD_ORIGINS)
def test_foreign_origin_is_refused(client, finished, origin):
    before = run_count(client)
    for method, path in routes(finished):
        r = client.request(method, path, headers={"origin": origin, **JSON}, content=json.dumps(RUN))
        assert r.status_code == 403, (method, path)
        assert r.json()["error"]["code"] == "forbidden_origin"
        assert "access-control-allow-origin" not in r.headers
    preflight = client.options("/agent/runs", headers={"origin": origin, "access-control-request-method": "POST"})
    assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers
    assert run_count(client) == before


@pytest.mark.parametrize("origin", ["http://127.0.0.1:8017", "http://localhost:8017"])
def test_allowed_origin_gets_exactly_itself(client, origin):
    r = client.get("/status", headers={"origin": origin})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == origin
    assert "Origin" in r.headers["vary"]
    assert "access-control-allow-credentials" not in r.headers
    preflight = client.options("/agent/runs", headers={
        "origin": origin, "access-control-request-method": "POST", "access-control-request-headers": "content-type"})
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == origin
    assert preflight.headers["access-control-allow-methods"] == "GET, POST"
    # Authorization carries the operator token of the approval routes (agent/runner/operator_token.py); nothing else.
    assert preflight.headers["access-control-allow-headers"] == "Content-Type, Authorization"
    assert "access-control-allow-credentials" not in preflight.headers
    created = client.post("/agent/runs", json=RUN, headers={"origin": origin})
    assert created.status_code == 202 and created.headers["access-control-allow-origin"] == origin
    errored = client.get("/agent/runs/run-000000000000", headers={"origin": origin})
    assert errored.status_code == 404 and errored.headers["access-control-allow-origin"] == origin


def test_preflight_for_other_methods_is_refused(client):
    r = client.options("/agent/runs", headers={"origin": PAGE_ORIGIN, "access-control-request-method": "DELETE"})
    assert r.status_code == 405 and "access-control-allow-methods" not in r.headers


def test_duplicate_origin_headers_are_refused(client):
    headers = [("host", "127.0.0.1:4890"), ("origin", PAGE_ORIGIN), ("origin", "https://evil.example")]
    status, sent_headers, _ = asgi_request(client.app, headers)
    assert status == 403 and "access-control-allow-origin" not in sent_headers


def test_configured_origins_replace_the_defaults(tmp_path):
    with make_client(tmp_path / "runs", GOOD_SCRIPT, allow_origins=("http://127.0.0.1:9000",)) as c:
        assert c.get("/status", headers={"origin": "http://127.0.0.1:9000"}).status_code == 200
        assert c.get("/status", headers={"origin": PAGE_ORIGIN}).status_code == 403


# ---------------------------------------------------------------- 4. simple cross-site requests

SIMPLE_BODIES = [
    ("text/plain", json.dumps(RUN)),
    ("text/plain;charset=UTF-8", json.dumps(RUN)),
    ("application/x-www-form-urlencoded", "model_path=scripted"),
    ("multipart/form-data; boundary=x", '--x\r\nContent-Disposition: form-data; name="model_path"\r\n\r\nscripted\r\n--x--\r\n'),
    ("application/jsonx", json.dumps(RUN)),
    ("application/json; charset=latin-1", json.dumps(RUN)),
    ("", json.dumps(RUN)),
    (None, json.dumps(RUN)),
]


@pytest.mark.parametrize("content_type,body", SIMPLE_BODIES)
def test_simple_requests_create_and_cancel_nothing(client, tmp_path, content_type, body):
    queued = client.post("/agent/runs", json=RUN).json()
    before = run_count(client)
    headers = {} if content_type is None else {"content-type": content_type}
    for path in ("/agent/runs", f"/agent/runs/{queued['id']}/cancel", "/models/unload", "/models/inspect"):
        r = client.post(path, content=body, headers={**headers, "origin": PAGE_ORIGIN})
        assert r.status_code == 415, path
        assert r.json()["error"]["code"] == "unsupported_media_type"
    assert run_count(client) == before
    assert client.get(f"/agent/runs/{queued['id']}").json()["cancel_requested"] is False


def test_json_with_charset_is_accepted(client):
    r = client.post("/agent/runs", content=json.dumps(RUN), headers={"content-type": "Application/JSON; charset=utf-8"})
    assert r.status_code == 202


# ---------------------------------------------------------------- 5. no state change on GET; every method checked


def test_get_never_changes_state(client):
    queued = client.post("/agent/runs", json=RUN).json()
    for path in (f"/agent/runs/{queued['id']}/cancel", "/models/unload", "/models/inspect", "/schema/validate"):
        r = client.get(path)
        assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    r = client.get("/agent/runs", params={"model_path": "scripted"})
    assert r.status_code == 200
    assert run_count(client) == 1
    assert client.get(f"/agent/runs/{queued['id']}").json()["cancel_requested"] is False


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE", "TRACE", "HEAD", "CONNECT", "PROPFIND"])
def test_other_methods_are_refused_after_the_same_checks(client, finished, method):
    for path in ("/status", "/agent/runs", f"/agent/runs/{finished['id']}", f"/agent/runs/{finished['id']}/cancel",
                 f"/agent/runs/{finished['id']}/artifacts/{finished['artifacts'][0]}", "/models/unload", "/nope"):
        r = client.request(method, path, headers=JSON, content=json.dumps(RUN))
        assert r.status_code == 405, (method, path)
        bad_host = client.request(method, path, headers={"host": "evil.example:4890", **JSON})
        assert bad_host.status_code == 421
        bad_origin = client.request(method, path, headers={"origin": "https://evil.example", **JSON})
        assert bad_origin.status_code == 403
    if method in ("PUT", "PATCH", "DELETE"):
        assert client.request(method, "/agent/runs", content="x", headers={"content-type": "text/plain"}).status_code == 415
    assert client.get(f"/agent/runs/{finished['id']}").json()["status"] == "completed"
    assert run_count(client) == 1


# ---------------------------------------------------------------- 6. body size


def test_declared_oversize_body_is_refused(client):
    big = json.dumps({"model_path": "x" * (300 * 1024)})
    r = client.post("/agent/runs", content=big, headers=JSON)
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
    just_over = b'{"model_path": "' + b"x" * (256 * 1024) + b'"}'
    assert client.post("/schema/validate", content=just_over, headers=JSON).status_code == 413
    assert run_count(client) == 0


def test_chunked_oversize_body_is_refused(client):
    def chunks():
        yield b'{"model_path": "'
        for _ in range(40):
            yield b"x" * 8192
        yield b'"}'

    r = client.post("/agent/runs", content=chunks(), headers=JSON)
    assert r.status_code == 413
    assert run_count(client) == 0


def test_streamed_body_stops_being_read_past_the_limit(client):
    """The middleware reads at most limit + one chunk, then answers 413 without the rest."""
    chunks = [b"{" + b" " * 65535] + [b" " * 65536 for _ in range(200)]
    headers = [("host", "127.0.0.1:4890"), ("content-type", "application/json"), ("transfer-encoding", "chunked")]
    status, _, consumed = asgi_request(client.app, headers, "POST", "/agent/runs", chunks)
    assert status == 413
    assert sum(map(len, consumed)) <= 256 * 1024 + 65536


def test_bad_content_length_is_refused(client):
    headers = [("host", "127.0.0.1:4890"), ("content-type", "application/json"), ("content-length", "abc")]
    assert asgi_request(client.app, headers, "POST", "/agent/runs")[0] == 400
    headers[-1] = ("content-length", "99999999999999999999999")
    assert asgi_request(client.app, headers, "POST", "/agent/runs")[0] == 413
    headers[-1] = ("content-length", "9" * 5000)  # int() would refuse past 4300 digits
    assert asgi_request(client.app, headers, "POST", "/agent/runs")[0] == 413
    for bad in ("１２", "-1", "1, 2", ""):
        headers[-1] = ("content-length", bad)
        assert asgi_request(client.app, headers, "POST", "/agent/runs")[0] == 400, bad


def test_body_just_under_the_limit_is_read(client):
    body = json.dumps({"tool": "calculator", "arguments": {"expression": "1+1", "pad": "x" * (200 * 1024)}})
    r = client.post("/schema/validate", content=body, headers=JSON)
    assert r.status_code == 200 and r.json()["error"]["unexpected"] == ["pad"]


# ---------------------------------------------------------------- 7. after_seq, run ids, artifact ids


@pytest.mark.parametrize("value", ["-1", str(10**30), "abc", "1e3", "", " 1", "1.0", "+1", "1_000", "0x10",
                                   str(10**9 + 1), "１", "1%00", "NaN", "[]"])
def test_bad_after_seq_is_422(client, finished, value):
    r = client.get(f"/agent/runs/{finished['id']}", params={"after_seq": value})
    assert r.status_code == 422, value
    assert r.json()["error"]["code"] == "validation_error"


def test_after_seq_bounds(client, finished):
    assert client.get(f"/agent/runs/{finished['id']}", params={"after_seq": 0}).status_code == 200
    top = client.get(f"/agent/runs/{finished['id']}", params={"after_seq": 10**9})
    assert top.status_code == 200 and top.json()["events"] == []


BAD_RUN_IDS = ["run-000000000000", "run-XYZ", "run-", "run-00000000000G", "RUN-000000000000", "run-0000000000000",
               "..", "%2e%2e", "..%2f..%2fetc", "run-000000000000%00", "run-" + "a" * 1000, "run-ｆ00000000000",
               "%00", "run-000000000000.json", " run-000000000000"]


@pytest.mark.parametrize("run_id", BAD_RUN_IDS)
def test_bad_run_ids_are_404(client, run_id):
    for method, path in (("GET", f"/agent/runs/{run_id}"), ("POST", f"/agent/runs/{run_id}/cancel"),
                         ("GET", f"/agent/runs/{run_id}/artifacts/art-0000000000000000")):
        r = client.request(method, path, headers=JSON, content="{}")
        assert r.status_code == 404, (method, path, r.status_code)
        assert r.json()["error"]["code"] == "not_found"


BAD_ARTIFACT_IDS = ["../x", "..%2fx", "%2e%2e%2fjob.json", "..%2F..%2Fjob.json", "art-0000000000000000",
                    "art-123", "ART-0123456789abcdef", "art-0123456789abcdeg", "job.json", "events.jsonl",
                    "%00", "art-0123456789abcdef.png", "art-0123456789abcdef%00", "%2e%2e", "...."]


@pytest.mark.parametrize("artifact_id", BAD_ARTIFACT_IDS)
def test_bad_artifact_ids_are_404(client, finished, artifact_id):
    r = client.get(f"/agent/runs/{finished['id']}/artifacts/{artifact_id}")
    assert r.status_code == 404, r.status_code
    assert r.headers["content-type"].startswith("application/json") and b"PNG" not in r.content


def test_raw_dot_segments_reach_no_file(client, finished):
    """httpx normalizes ``..`` away; send the raw paths straight to the app."""
    base = f"/agent/runs/{finished['id']}"
    for path in (f"{base}/artifacts/../job.json", f"{base}/artifacts/..", f"{base}/artifacts/../../../etc/passwd",
                 f"{base}/artifacts/./{finished['artifacts'][0]}/..", "/agent/runs/../" + finished["id"]):
        status, headers, _ = asgi_request(client.app, [("host", "127.0.0.1:4890")], "GET", path)
        assert status == 404, path
        assert headers["content-type"].startswith("application/json")


def test_artifact_of_another_run_is_not_served(client, finished):
    other = wait_terminal(client, client.post("/agent/runs", json=RUN).json()["id"])
    art = finished["artifacts"][0]
    assert client.get(f"/agent/runs/{finished['id']}/artifacts/{art}").status_code == 200
    assert client.get(f"/agent/runs/{other['id']}/artifacts/{art}").status_code == 404


def test_symlinked_artifact_is_not_served(client, finished, tmp_path):
    art = finished["artifacts"][0]
    path = tmp_path / "runs" / finished["id"] / "artifacts" / f"{art}.png"
    path.unlink()
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"\x89PNG secret")
    path.symlink_to(secret)
    r = client.get(f"/agent/runs/{finished['id']}/artifacts/{art}")
    assert r.status_code == 404 and b"secret" not in r.content


def test_errors_have_one_shape(client):
    for r in (client.get("/nope"), client.get("/agent/runs/run-000000000000"), client.get("/agent/runs?limit=x"),
              client.post("/agent/runs", json={}), client.post("/agent/runs", content="[", headers=JSON),
              client.request("PUT", "/status", headers=JSON)):
        body = r.json()
        assert set(body) == {"error"} and {"code", "message"} <= set(body["error"]), r.text
        assert 400 <= r.status_code < 500


# ---------------------------------------------------------------- 9/10. model paths


def _model_path_cases(tmp_path):
    fifo = tmp_path / "a-fifo"
    os.mkfifo(fifo)
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop")
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("root:x:0:0 not a model")
    (junk / "random.bin").write_bytes(os.urandom(4096))
    truncated = tmp_path / "qwen-truncated.gguf"
    truncated.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 24)
    corrupt_st = tmp_path / "st-model"
    corrupt_st.mkdir()
    (corrupt_st / "config.json").write_text('{"model_type": "qwen2"}')
    (corrupt_st / "model.safetensors").write_bytes(b"\xff\xff\xff\xff\xff\xff\xff\x7f{")
    return ["/etc/passwd", "~/.ssh/id_rsa", "/dev/zero", "/dev/random", str(fifo), "model\x00.gguf", str(loop),
            str(junk), str(truncated), str(corrupt_st), "/proc/self/environ", "/", "NUL", "C:\\models\\qwen"]


def test_inspect_refuses_bad_model_paths_without_leaking(client, tmp_path):
    for path in _model_path_cases(tmp_path):
        started = time.monotonic()
        r = client.post("/models/inspect", json={"model_path": path})
        assert time.monotonic() - started < 10, path
        assert r.status_code == 400, (path, r.status_code, r.text[:300])
        body = r.json()
        assert body["error"]["code"] == "model_unavailable" and body["error"]["message"], path
        text = r.text
        assert "root:" not in text and str(tmp_path) not in text and "/etc/passwd" not in text, path
        assert "PATH=" not in text
    assert client.get("/status").status_code == 200  # still alive


def test_run_events_never_hold_paths_or_user_names(tmp_path):
    model_dir = tmp_path / "home-of-someone" / "models" / "qwen"
    model_dir.mkdir(parents=True)
    (model_dir / "config.json").write_text("{}")
    with make_client(tmp_path / "runs") as c:
        view = wait_terminal(c, c.post("/agent/runs", json={"model_path": str(model_dir)}).json()["id"])
    assert view["stop_reason"] == "model_unavailable"
    assert str(tmp_path) not in json.dumps(view) and "home-of-someone" not in json.dumps(view)
    record = (tmp_path / "runs" / view["id"] / "job.json").read_text()
    events = (tmp_path / "runs" / view["id"] / "events.jsonl").read_text()
    assert str(tmp_path) not in record + events


def test_unit_boundary_rejects_websockets():
    sent = []

    async def app(scope, receive, send):  # pragma: no cover - must never be reached
        raise AssertionError("reached the app")

    async def send(message):
        sent.append(message)

    boundary = BrowserBoundary(app, port=4890, allow_origins=(PAGE_ORIGIN,), max_body_bytes=10)
    asyncio.run(boundary({"type": "websocket", "headers": [(b"host", b"127.0.0.1:4890")]}, None, send))
    assert sent == [{"type": "websocket.close", "code": 1008}]
