"""Only the operator answers approvals: the runner's operator token (agent/runner/operator_token.py).

Every run here is a real guided fixtest run (scripted test policy, real sandbox) whose bash step waits
on an approval. A local process holds no token: it cannot read the question's id, answer it, or learn
the token from anything the runner serves or writes; the operator's token (and only it) answers, and
the trace records the channel. The last tests start the runner as a process: the token file is 0600
in a 0700 folder, the start banner carries the page link, and a process of another user (uid 65534)
gets nowhere."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from agent.runner.operator_token import bearer, page_link
from agent.runner.server import _parse_args
from server_support import (PAGE_ORIGIN, RunnerProcess, answer_approval, make_client, operator_headers, operator_token,
                            pending_approvals, wait_for, wait_terminal)
from workspace_support import BASH_STEPS, fixtest_script

RUN = {"model_path": "scripted", "pack": "fixtest_shipping", "approval": "always_ask"}


def questions(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in view["events"] if e["type"] == "approval.requested"]


def decisions(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in view["events"] if e["type"] == "approval.decided"]


def asked(client: Any, run_id: str, seen: int = 0) -> dict[str, Any]:
    view = wait_for(client, run_id, lambda v: len(questions(v)) > seen or v["terminal"], timeout=60)
    assert len(questions(view)) > seen, (view["status"], view["error"])
    return view


def sse_text(client: Any, run_id: str) -> str:
    """The run's event stream as far as it goes now (read until the first heartbeat-free pause)."""
    with client.stream("GET", f"/agent/runs/{run_id}/events") as stream:
        text = ""
        for chunk in stream.iter_text():
            text += chunk
            if "approval.requested" in text:
                return text
    return text


def test_a_tokenless_or_wrong_token_answer_is_refused_and_the_run_still_waits(tmp_path: Path) -> None:
    with make_client(tmp_path / "runs", fixtest_script(), approval_seconds=30) as client:
        token = operator_token(client)
        run_id = client.post("/agent/runs", json=RUN).json()["id"]
        asked(client, run_id)
        waiting = lambda: client.app.state.store.approvals.waiting(run_id)  # noqa: E731
        [question] = pending_approvals(client, run_id)
        url = f"/agent/runs/{run_id}/approvals/{question['approval_id']}"
        # A local process: no Origin, the right Host and content type, the question's real id.
        tokenless = client.post(url, json={"decision": "approve"})
        assert tokenless.status_code == 401 and tokenless.json()["error"]["code"] == "operator_token_required"
        wrong_tokens = [
            {"authorization": "Bearer " + token[:-1] + ("A" if token[-1] != "A" else "B")},
            {"authorization": "Bearer " + token[:20]},
            {"authorization": "Bearer " + token + "x"},
            {"authorization": "Basic " + token},
            {"authorization": token},
            {"authorization": "Bearer"},
            {"authorization": ("Bearer " + "é" * 43).encode("latin-1")},  # not ASCII: refused, not a 500
        ]
        for headers in wrong_tokens:
            reply = client.post(url, json={"decision": "approve"}, headers=headers)
            assert reply.status_code == 403 and reply.json()["error"]["code"] == "operator_token_invalid", headers
        # the token in the query string, a cookie, or a second Authorization header is no token
        assert client.post(url + "?token=" + token, json={"decision": "approve"}).status_code == 401
        assert client.post(url, json={"decision": "approve"}, headers={"cookie": "token=" + token}).status_code == 401
        doubled = client.post(url, content=json.dumps({"decision": "approve"}),
                              headers=[("content-type", "application/json"), ("authorization", "Bearer " + token),
                                       ("authorization", "Bearer " + token)])
        assert doubled.status_code == 403
        assert waiting() == 1  # nothing answered it; the command has not run
        view = client.get(f"/agent/runs/{run_id}").json()
        assert view["status"] == "running" and not decisions(view)
        # The operator's deny (with the token) is what decides it.
        assert answer_approval(client, run_id, question["approval_id"], "deny").status_code == 200
        view = wait_for(client, run_id, lambda v: bool(decisions(v)))
        assert (decisions(view)[0]["decision"], decisions(view)[0]["by"], decisions(view)[0]["channel"]) == \
            ("refuse", "operator:denied", "page")
        client.post(f"/agent/runs/{run_id}/cancel", json={})
        wait_terminal(client, run_id, timeout=60)


def test_the_question_is_readable_only_with_the_token_and_no_read_reveals_its_id(tmp_path: Path) -> None:
    with make_client(tmp_path / "runs", fixtest_script()) as client:
        run_id = client.post("/agent/runs", json=RUN).json()["id"]
        view = asked(client, run_id)
        listing = client.get(f"/agent/runs/{run_id}/approvals")
        assert listing.status_code == 401 and listing.json()["error"]["code"] == "operator_token_required"
        wrong = client.get(f"/agent/runs/{run_id}/approvals", headers=operator_headers("x" * 43))
        assert wrong.status_code == 403
        [question] = pending_approvals(client, run_id)
        approval_id = question["approval_id"]
        # What any local process reads: the runs, the run, its event stream. The question is there
        # (what the model asked to run is part of the trace) but its id, the only handle, is not.
        assert questions(view)[0]["command"] == question["command"] and "approval_id" not in questions(view)[0]
        for text in (client.get("/agent/runs").text, client.get(f"/agent/runs/{run_id}").text, sse_text(client, run_id)):
            assert "approval.requested" in text or '"runs"' in text
            assert approval_id not in text and "apr-" not in text
        assert client.get("/agent/runs/run-000000000000/approvals",
                          headers=operator_headers(operator_token(client))).status_code == 404
        for n in range(BASH_STEPS):
            if n:
                asked(client, run_id, n)
            [question] = pending_approvals(client, run_id)
            assert answer_approval(client, run_id, question["approval_id"]).status_code == 200
        view = wait_terminal(client, run_id, timeout=60)
        assert view["status"] == "completed", view["error"]
        assert [(d["by"], d["channel"]) for d in decisions(view)] == [("operator:approved", "page")] * BASH_STEPS
        assert pending_approvals(client, run_id) == []


def test_the_token_never_leaves_in_a_response_an_event_or_a_run_file(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with make_client(runs, fixtest_script()) as client:
        token = operator_token(client)
        run_id = client.post("/agent/runs", json=RUN, headers=operator_headers(token)).json()["id"]
        served = []
        for n in range(BASH_STEPS):
            asked(client, run_id, n)
            listing = client.get(f"/agent/runs/{run_id}/approvals", headers=operator_headers(token))
            reply = answer_approval(client, run_id, listing.json()["approvals"][0]["approval_id"])
            served += [listing, reply]
        wait_terminal(client, run_id, timeout=60)
        served += [client.get(path) for path in ("/status", "/agent/runs", f"/agent/runs/{run_id}", "/openapi.json")]
        served.append(client.post(f"/agent/runs/{run_id}/approvals/apr-0000000000000000", json={"decision": "deny"},
                                  headers=operator_headers(token + "x")))
        for reply in served:
            assert token not in reply.text and token not in json.dumps(dict(reply.headers))
    files = [p for p in runs.rglob("*") if p.is_file()]
    assert any(p.name == "events.jsonl" for p in files)
    for path in files:
        assert token.encode() not in path.read_bytes(), path


def test_a_preflight_allows_the_authorization_header_for_the_allowed_origin_only(tmp_path: Path) -> None:
    with make_client(tmp_path / "runs", fixtest_script()) as client:
        asks = {"access-control-request-method": "POST", "access-control-request-headers": "authorization,content-type"}
        good = client.options("/agent/runs/x/approvals/y", headers={"origin": PAGE_ORIGIN, **asks})
        assert good.status_code == 204 and good.headers["access-control-allow-origin"] == PAGE_ORIGIN
        assert "authorization" in good.headers["access-control-allow-headers"].lower()
        assert "access-control-allow-credentials" not in good.headers
        for origin in ("https://evil.example", "null", "http://127.0.0.1:8017.evil.example"):
            bad = client.options("/agent/runs/x/approvals/y", headers={"origin": origin, **asks})
            assert bad.status_code == 403 and "access-control-allow-headers" not in bad.headers


def test_bearer_compares_the_whole_token() -> None:
    token = "t" * 43
    assert bearer([f"Bearer {token}"], token) is None and bearer([f"bearer  {token} "], token) is None
    assert bearer([], token) == "required"
    for sent in ([f"Bearer {token[:-1]}"], [f"Bearer {token}t"], [f"Token {token}"], [f"Bearer {token}"] * 2, ["Bearer ☃"]):
        assert bearer(sent, token) == "invalid", sent


def test_the_runner_flag_names_the_token_file(tmp_path: Path) -> None:
    assert _parse_args(["--token-file", str(tmp_path / "t")]).token_file == tmp_path / "t"
    assert _parse_args([]).token_file is None


# ---------------------------------------------------------------- the runner as a process


def test_a_real_runner_writes_a_private_token_file_prints_the_page_link_and_removes_the_file(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    runner = RunnerProcess(runs, fixtest_script(), extra_args=["--approval", "always_ask", "--access-log",
                                                               "--log-level", "info"])
    runner.token_file = tmp_path / "private" / "runner.token"
    with runner, runner.client() as client:
        token = runner.token
        assert token and len(token) >= 43
        assert stat.S_IMODE(runner.token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(runner.token_file.parent.stat().st_mode) == 0o700
        run_id = client.post("/agent/runs", json=RUN).json()["id"]
        asked(client, run_id)
        refused = client.post(f"/agent/runs/{run_id}/approvals/apr-0000000000000000", json={"decision": "approve"})
        assert refused.status_code == 401
        [question] = pending_approvals(client, run_id, token)
        assert answer_approval(client, run_id, question["approval_id"], "deny", token=token).status_code == 200
        client.post(f"/agent/runs/{run_id}/cancel", json={})
        wait_terminal(client, run_id, timeout=60)
    assert not runner.token_file.exists()  # a stopped runner's token is gone with it
    log = (tmp_path / f"runner-{runner.port}.log").read_text(encoding="utf-8")
    # The token is shown once, in the operator link of the start banner; no access-log line has it.
    assert page_link(PAGE_ORIGIN, runner.base_url, token) in log
    assert [line for line in log.splitlines() if token in line] == [f"    {page_link(PAGE_ORIGIN, runner.base_url, token)}"]
    assert "/approvals" in log  # the access log was on


NOBODY = 65534
OTHER_PYTHON = "/usr/bin/python3"
ATTACK = r"""
import http.client, json, re, sys
port, token_file, run_id = sys.argv[1:4]
out = {}
try:
    open(token_file).read(); out["token_file"] = "read"
except PermissionError:
    out["token_file"] = "refused"
def call(method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10)
    c.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
    r = c.getresponse()
    return r.status, r.read().decode()
runs = call("GET", "/agent/runs")[1] + call("GET", "/agent/runs/" + run_id)[1]
out["ids"] = re.findall(r"apr-[0-9a-f]+", runs)
out["list"] = call("GET", "/agent/runs/" + run_id + "/approvals")[0]
out["answer"] = call("POST", "/agent/runs/" + run_id + "/approvals/apr-0123456789abcdef", '{"decision": "approve"}')[0]
print(json.dumps(out))
"""


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or not os.access(OTHER_PYTHON, os.X_OK),
                    reason="switching to uid 65534 needs root (and a system Python)")
def test_a_process_of_another_user_cannot_read_the_token_list_or_answer(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    with RunnerProcess(runs, fixtest_script(), extra_args=["--approval", "always_ask"]) as runner, \
            runner.client() as client:
        run_id = client.post("/agent/runs", json=RUN).json()["id"]
        asked(client, run_id)

        def as_nobody() -> None:
            os.setgid(NOBODY)
            os.setgroups([])
            os.setuid(NOBODY)

        # The system's Python (the test's own may live in a folder that user cannot enter), stdlib only.
        done = subprocess.run([OTHER_PYTHON, "-I", "-c", ATTACK, str(runner.port), str(runner.token_file), run_id],
                              capture_output=True, text=True, timeout=60, preexec_fn=as_nobody)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout) == {"token_file": "refused", "ids": [], "list": 401, "answer": 401}
        view = client.get(f"/agent/runs/{run_id}").json()
        assert view["status"] == "running" and not decisions(view)  # still waiting on the operator
        assert len(pending_approvals(client, run_id, runner.token)) == 1
        client.post(f"/agent/runs/{run_id}/cancel", json={})
        view = wait_terminal(client, run_id, timeout=60)
    assert decisions(view)[-1]["by"] == "operator:cancelled"


def test_page_link_puts_runner_and_token_in_the_fragment_only() -> None:
    token = "tok-" + "x" * 40
    url = urlsplit(page_link(PAGE_ORIGIN, "http://127.0.0.1:4890", token))
    assert f"{url.scheme}://{url.netloc}" == PAGE_ORIGIN and url.path == "/react-agent" and not url.query
    assert parse_qs(url.fragment) == {"runner": ["http://127.0.0.1:4890"], "runner-token": [token]}
