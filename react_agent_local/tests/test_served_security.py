"""Served models open no new door into the machine (SECURITY 26): base URLs are loopback-only unless
the operator allows an origin, a request can neither carry a key nor choose a variable to read, a key
goes only to the provider and origin the operator pinned it to, redirects are not followed, and a key
never appears in a trace, job.json, an error or a log -- even when the server echoes it back (more of
that in test_secrets.py)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import httpx2
import pytest
from served_support import (
    BASE_URL,
    SECRET,
    FakeServer,
    chain_server,
    error_response,
    openai_policy,
    openai_reply,
    run,
)
from server_support import PACKAGE_ROOT, make_client, wait_terminal
from test_served_openai import calculator_request

from agent.models.backends import inspect_served, load_model
from agent.models.backends.openai_compatible import OpenAICompatiblePolicy
from agent.models.backends.served import ServedAccess, ServedModelError
from agent.models.providers import OpenAICompatibleSpec
from agent.runner.requests import RunRequest
from agent.runner.server import policy_factory_for

ORIGIN = {"Origin": "http://127.0.0.1:8017"}
PINNED_KEY = "openai_compatible@127.0.0.1:8999=OPENAI_API_KEY"  # the fake server's origin gets OPENAI_API_KEY


def pinned() -> ServedAccess:
    """The operator's configuration pinning OPENAI_API_KEY (read now) to the fake server."""
    return ServedAccess.of(keys=[PINNED_KEY])


def served(base_url: str = BASE_URL, **extra) -> dict:
    return {"kind": "openai_compatible", "base_url": base_url, "model": "qwen", **extra}


@pytest.mark.parametrize("url", [
    "http://evil.example/v1", "https://api.openai.com/v1", "http://127.0.0.1.nip.io:8000/v1",
    "http://localhost.evil.com/v1", "http://10.0.0.5:8000/v1", "http://0.0.0.0:8000/v1", "http://192.168.1.2/v1",
])
def test_non_loopback_hosts_are_refused_by_default(url):
    with pytest.raises(ServedModelError) as info:
        ServedAccess().endpoint(url)
    assert info.value.code == "host_not_allowed" and "--allow-model-host" in info.value.message
    with pytest.raises(ServedModelError):
        load_model(OpenAICompatibleSpec(**served(url)))


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/v1", "http://127.9.9.9/v1", "http://localhost:11434/v1",
                                 "http://[::1]:8000/v1", "HTTP://LOCALHOST:8000/v1"])
def test_loopback_hosts_are_allowed(url):
    endpoint = ServedAccess().endpoint(url)
    assert endpoint.loopback and not endpoint.named


def test_the_operator_allows_an_origin_with_its_scheme_and_port():
    assert ServedAccess.of(["gpu-box"]).endpoint("https://gpu-box/v1").named
    one_port = ServedAccess.of(["http://gpu-box:8000"])
    assert one_port.endpoint("http://GPU-box:8000/v1").named
    for other in ("http://gpu-box:9000/v1", "https://gpu-box:8000/v1", "http://gpu-box/v1"):
        with pytest.raises(ServedModelError):
            one_port.endpoint(other)


@pytest.mark.parametrize("model", [
    served(api_key=SECRET), served(headers={"Authorization": "Bearer x"}),
    served(api_key_env="HOME"), served(api_key_env="AWS_SECRET_ACCESS_KEY"), served(api_key_env="PATH"),
    served("http://user:pass@127.0.0.1:8080/v1"), served("http://127.0.0.1:8080/v1?api_key=x"),
    served("file:///etc/passwd"), {"kind": "anthropic", "model": "claude", "api_key": SECRET},
])
def test_a_request_cannot_carry_a_key_or_choose_what_to_read(tmp_path, model):
    with pytest.raises(ValueError):
        RunRequest.model_validate({"model": model})
    client = make_client(tmp_path)
    response = client.post("/agent/runs", json={"model": model}, headers=ORIGIN)
    assert response.status_code == 422 and SECRET not in response.text
    assert client.get("/agent/runs").json()["count"] == 0


def test_the_runner_refuses_a_non_loopback_model_before_queueing(tmp_path):
    client = make_client(tmp_path)
    response = client.post("/agent/runs", json={"model": served("http://evil.example:8000/v1")}, headers=ORIGIN)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "model_unavailable"
    assert response.json()["error"]["reason"] == "host_not_allowed"
    assert client.get("/agent/runs").json()["count"] == 0
    response = client.post("/models/inspect", json={"model": served("http://evil.example:8000/v1")}, headers=ORIGIN)
    assert response.status_code == 400 and response.json()["error"]["reason"] == "host_not_allowed"
    allowed = make_client(tmp_path / "allowed", allow_model_hosts=("http://evil.example:8000",))
    assert allowed.get("/status").json()["served_models"]["allowed_hosts"] == ["loopback", "http://evil.example:8000"]
    response = allowed.post("/agent/runs", json={"model": served("http://evil.example:8000/v1")}, headers=ORIGIN)
    assert response.status_code == 202 and response.json()["model"]["kind"] == "openai_compatible"


def test_the_default_policy_factory_checks_the_host_when_the_run_loads(monkeypatch):
    request = RunRequest.model_validate({"model": served("http://gpu-box:8000/v1")})
    with pytest.raises(ServedModelError) as info:
        policy_factory_for()(request)()
    assert info.value.code == "host_not_allowed"
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    policy = policy_factory_for(ServedAccess.of(["http://gpu-box:8000"]))(request)()
    assert policy.endpoint.named and policy.description.public()["host"] == "gpu-box:8000"


def test_a_key_goes_only_to_the_origin_the_operator_pinned_it_to(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    server = FakeServer([openai_reply("calculator", {"expression": "2"}) for _ in range(3)])
    openai_policy(server).propose(calculator_request())  # loopback, no key pinned: no key
    openai_policy(server, access=ServedAccess.of(["127.0.0.1:8999"])).propose(calculator_request())  # allowed only
    openai_policy(server, access=pinned()).propose(calculator_request())
    assert [h["authorization"] for h in server.headers] == ["Bearer no-key", "Bearer no-key", f"Bearer {SECRET}"]


def test_a_named_remote_host_without_a_key_fails_before_any_request(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ServedModelError) as info:
        load_model(OpenAICompatibleSpec(**served("https://api.example.com/v1")),
                   ServedAccess.of(keys=["openai_compatible@api.example.com=OPENAI_API_KEY"]))
    assert info.value.code == "auth_failed" and "OPENAI_API_KEY is not set" in info.value.message


def test_redirects_are_not_followed(tmp_path):
    server = FakeServer([httpx2.Response(307, headers={"location": "http://evil.example/v1/chat/completions"})])
    outcome = run(openai_policy(server), tmp_path)
    assert outcome.result.error.code == "bad_request" and "redirect" in outcome.result.error.message
    assert server.urls == [f"{BASE_URL}/chat/completions"]


def _runner_with(server: FakeServer, tmp_path, access: ServedAccess):
    def factory(request):
        return lambda: OpenAICompatiblePolicy(request.model, access, transport=server.transport, backoff_seconds=0.0)

    return make_client(tmp_path, policy_factory=factory)


def test_a_key_the_server_echoes_back_never_leaves_the_process(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    server = FakeServer([error_response(401, f"Incorrect API key provided: {SECRET}. Find your key at ...")])
    client = _runner_with(server, tmp_path, pinned())
    run_id = client.post("/agent/runs", json={"model": served()}, headers=ORIGIN).json()["id"]
    view = wait_terminal(client, run_id)
    assert (view["status"], view["stop_reason"], view["error"]["code"]) == ("failed", "model_unavailable", "auth_failed")
    assert server.headers[0]["authorization"] == f"Bearer {SECRET}"  # it was sent to the named host...
    assert "[redacted]" in view["error"]["message"]
    stored = "".join(p.read_text(errors="replace") for p in (tmp_path).rglob("*") if p.is_file())
    everything = json.dumps(view) + stored + caplog.text + client.get("/agent/runs").text
    assert SECRET not in everything  # ...and is nowhere else


def test_a_successful_served_run_keeps_no_key(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    server = FakeServer(chain_server("openai"))
    client = _runner_with(server, tmp_path, pinned())
    run_id = client.post("/agent/runs", json={"model": served(), "pack": "default"}, headers=ORIGIN).json()["id"]
    view = wait_terminal(client, run_id)
    assert view["status"] == "completed", view.get("error")
    assert view["model"]["name"] == "qwen" and view["model"]["kind"] == "openai_compatible"
    loaded = next(e for e in view["events"] if e["type"] == "model.load.completed")
    assert loaded["model"]["backend"] == "openai_compatible" and loaded["model"]["host"] == "127.0.0.1:8999"
    assert loaded["model"]["path_hash"] == view["model"]["path_hash"]
    stored = "".join(p.read_text(errors="replace") for p in (tmp_path).rglob("*") if p.is_file())
    assert SECRET not in json.dumps(view) + stored + caplog.text


def test_inspect_a_served_model(monkeypatch):
    def answer(request, body):
        return httpx2.Response(200, json={"object": "list", "data": [{"id": "qwen", "object": "model"}]})

    server = FakeServer(answer)
    report = inspect_served(OpenAICompatibleSpec(**served()), transport=server.transport)
    assert report["ok"] and report["served"]["models"] == ["qwen"] and report["key_sent"] is False
    report = inspect_served(OpenAICompatibleSpec(**served(model="other")), transport=server.transport)
    assert not report["ok"] and "does not list the model" in report["problems"][0]

    def refuse(request, body):
        raise httpx2.ConnectError("connection refused")

    report = inspect_served(OpenAICompatibleSpec(**served()), transport=FakeServer(refuse).transport)
    assert not report["ok"] and report["code"] == "network"


def test_cli_served_model_syntax(tmp_path):
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "agent", "run", "--runs-dir", str(tmp_path), *args],
                              cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=120)

    bad = cli("--model", "openai:http://127.0.0.1:9/v1")  # no #NAME
    assert bad.returncode == 2 and "openai:BASE_URL#MODEL_NAME" in bad.stderr and "Nothing was run" in bad.stderr
    bad = cli("--model", "openai:ftp://127.0.0.1:9/v1#qwen")
    assert bad.returncode == 2 and "Nothing was run" in bad.stderr
    bad = cli("--served", "openai_compatible", "--model-name", "qwen")
    assert bad.returncode == 2 and "--base-url" in bad.stderr
    # nothing listens on port 9: a real connection attempt, three retries, then the network bucket
    down = cli("--model", "openai:http://127.0.0.1:9/v1#qwen", "--json", "--max-seconds", "60")
    result = json.loads(down.stdout.strip().splitlines()[-1])
    assert (down.returncode, result["status"], result["error"]["code"]) == (1, "failed", "network")


def test_a_malformed_base_url_is_a_clear_refusal_not_a_server_error():
    from agent.models.backends.served import ServedAccess, ServedModelError

    for url in ("http://[0]/v1", "http://127.0.0.1:99999/v1", "http://[::1/v1"):
        try:
            ServedAccess.of().endpoint(url)
        except ServedModelError as exc:
            assert exc.code == "host_not_allowed"
        else:
            raise AssertionError(url)
