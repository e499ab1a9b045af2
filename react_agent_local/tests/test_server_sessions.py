"""Sessions on the runner, in-process (TestClient): each turn a run job of the real runtime driven by the
scripted policy, a follow-up that cites the first turn's evidence, one turn at a time, restarts, caps,
and the browser boundary on every session route."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent.util import secrets
from agent.models.backends.scripted import ScriptedPolicy
from agent.models.model_policy import ModelRequest
from agent.task.packs import load_pack
from agent.sessions.store import SessionStore
from agent.sessions.turns import UNRECORDED_EVENTS
from runtime_helpers import chain_outputs
from server_support import PAGE_ORIGIN, assert_complete_trace, make_client, wait_for, wait_terminal
from workspace_support import FIXTEST_PACK

PACK = load_pack(None)
CHAIN = chain_outputs(PACK)
EVIDENCE = ["obs-knowledge_search-1", "obs-calculator-2", "obs-plot-3"]
ANSWER = json.loads(CHAIN[3])
FOLLOW_UP = "Is the release rule still met? State the average and the lowest batch value."
MODEL = {"model_path": "scripted"}
JSON = {"content-type": "application/json"}
MISSING_SESSION = "20250101T000000000000Z-" + "0" * 32


def release_step(request: ModelRequest) -> str:
    """What a guided run of the default pack asks next (a handoff summary too): so one script serves
    a first turn (search, calculate, plot, answer) and a follow-up (the answer)."""
    if request.prefix == "" and "goal" in (request.value_schema or {}).get("properties", {}):
        return json.dumps({"goal": "the release rule", "found": [], "decided": [], "left": []})
    for tool, output in zip(("knowledge_search", "calculator", "plot"), CHAIN):
        if f'"tool": "{tool}"' in request.prefix:
            return output
    return CHAIN[3]


def free_final(evidence_ids: list[str]) -> str:
    return json.dumps({"type": "final", "evidence_ids": evidence_ids, "answer": ANSWER})


class Policies:
    """The runner's policy factory: job n gets the n-th queued script, later jobs ``release_step``s."""

    def __init__(self) -> None:
        self.queue: list[list[Any]] = []
        self.made: list[ScriptedPolicy] = []

    def __call__(self, request: Any) -> ScriptedPolicy:
        self.made.append(ScriptedPolicy(self.queue.pop(0) if self.queue else [release_step] * 8))
        return self.made[-1]


def held(release: threading.Event):
    """A model call that waits until ``release`` is set (or the run is cancelled)."""

    def step(request: ModelRequest) -> str:
        while not release.is_set() and not request.should_stop():
            time.sleep(0.01)
        return release_step(request)

    return step


@pytest.fixture
def policies() -> Policies:
    return Policies()


@pytest.fixture
def client(tmp_path, policies):
    with make_client(tmp_path / "runs", None, policy_factory=policies, test_policy=True) as c:
        yield c


def create(client, **body) -> dict[str, Any]:
    r = client.post("/agent/sessions", json={**MODEL, **body})
    assert r.status_code == 201, r.text
    return r.json()


def ask(client, session_id: str, message: str, **body) -> dict[str, Any]:
    r = client.post(f"/agent/sessions/{session_id}/turns", json={"message": message, **body})
    assert r.status_code == 202, r.text
    return wait_terminal(client, r.json()["run_id"])


def run_to_end(client) -> dict[str, Any]:
    created = client.post("/agent/runs", json=MODEL)
    assert created.status_code == 202, created.text
    return wait_terminal(client, created.json()["id"])


def settled(client, session_id: str) -> dict[str, Any]:
    """The session once its last turn's records are written (the job ends with run.finished first)."""
    deadline = time.monotonic() + 10
    while True:
        view = client.get(f"/agent/sessions/{session_id}").json()
        if all(t["state"] != "open" for t in view["turns"]) or time.monotonic() > deadline:
            return view
        time.sleep(0.02)


def open_when_released(store: SessionStore, session_id: str):
    """The session opened for writing as another process would, once the runner's worker has let go
    of it: the worker writes turn.finished and then closes the file, so a reader can see the turn
    settled a moment before the file is free."""
    from agent.sessions.errors import SessionBusy

    deadline = time.monotonic() + 10
    while True:
        try:
            return store.open(session_id)
        except SessionBusy:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def session_count(client) -> int:
    return client.get("/agent/sessions").json()["count"]


def run_count(client) -> int:
    return client.get("/agent/runs").json()["count"]


# ---------------------------------------------------------------- turns as runs


def test_a_follow_up_turn_cites_the_first_turns_evidence(client, policies):
    session = create(client)
    assert (session["turns"], session["pack"], session["running_run_id"]) == ([], "default", None)
    first = ask(client, session["id"], PACK.task.goal)
    assert first["status"] == "completed" and first["final"]["evidence_ids"] == EVIDENCE
    assert first["request"]["session"] == session["id"] and first["test_policy"] is True
    # The turn's plot is served by the run's own artifact route, the bytes its event names.
    [plot] = [e["observation"]["result"]["artifact"] for e in first["events"]
              if e["type"] == "tool.observation" and e["observation"]["tool"] == "plot"]
    png = client.get(f"/agent/runs/{first['id']}/artifacts/{plot['id']}")
    assert png.status_code == 200 and hashlib.sha256(png.content).hexdigest() == plot["sha256"]

    second = ask(client, session["id"], FOLLOW_UP)
    assert second["status"] == "completed" and second["stop_reason"] == "completed"
    # Nothing new was looked up: the gate accepted a Final on turn 1's evidence.
    assert second["final"]["evidence_ids"] == EVIDENCE
    assert not [e for e in second["events"] if e["type"] == "tool.started"]
    gate = [e for e in second["events"] if e["type"] == "final.validated"]
    assert [g["accepted"] for g in gate] == [True]
    assert_complete_trace(second["events"])
    assert FOLLOW_UP in policies.made[-1].requests[-1].messages[-1]["content"]

    # The run views work for a turn as for any run: its event stream, and cancel (409 once finished).
    stream = client.get(f"/agent/runs/{second['id']}/events")
    assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
    assert "data: " in stream.text and '"run.finished"' in stream.text
    assert client.post(f"/agent/runs/{second['id']}/cancel", json={}).status_code == 409

    view = settled(client, session["id"])
    assert [(t["turn"], t["state"], t["run_id"]) for t in view["turns"]] == [
        (1, "finished", first["id"]), (2, "finished", second["id"])]
    assert view["turns"][0]["observation_ids"] == EVIDENCE and view["turns"][1]["observation_ids"] == []
    assert view["turns"][1]["message"] == FOLLOW_UP and view["turns"][1]["final"]["answer"] == ANSWER
    [entry] = client.get("/agent/sessions").json()["sessions"]
    assert (entry["id"], entry["turns"], entry["last_message"]) == (session["id"], 2, FOLLOW_UP)


def test_a_finished_run_becomes_the_first_turn(client, policies):
    run = run_to_end(client)
    session = create(client, from_run=run["id"], mode="free")
    [turn] = session["turns"]
    assert (turn["turn"], turn["state"], turn["run_id"], turn["message"]) == (1, "finished", run["id"], PACK.task.goal)
    assert turn["final"] == run["final"] and turn["observation_ids"] == EVIDENCE
    assert session["from_run"] == run["id"] and session["mode"] == "free"
    # A free-mode follow-up: an id no turn made is refused by the gate, turn 1's are accepted.
    policies.queue.append([free_final([*EVIDENCE[:2], "obs-calculator-9"]), free_final(EVIDENCE)])
    second = ask(client, session["id"], FOLLOW_UP)
    assert second["status"] == "completed" and second["final"]["evidence_ids"] == EVIDENCE
    gate = [e for e in second["events"] if e["type"] == "final.validated"]
    assert [g["accepted"] for g in gate] == [False, True] and "obs-calculator-9" in gate[0]["message"]
    assert second["request"]["mode"] == "free"
    assert [e for e in second["events"] if e["type"] == "run.started"][0]["mode"] == "free"
    policies.made[-1].assert_complete()
    # The run it came from is still its own run, and a turn's run cannot start another session.
    assert client.get(f"/agent/runs/{run['id']}").json()["request"].get("session") is None
    r = client.post("/agent/sessions", json={**MODEL, "from_run": second["id"]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "run_in_session"
    r = client.post("/agent/sessions", json={**MODEL, "from_run": run["id"], "pack": "population_ratio"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "pack_mismatch"


def test_one_turn_at_a_time_and_cancel_frees_the_session(client, policies):
    release = threading.Event()
    policies.queue.append([held(release)] + [release_step] * 4)
    session = create(client)
    r = client.post(f"/agent/sessions/{session['id']}/turns", json={"message": PACK.task.goal})
    assert r.status_code == 202
    first = r.json()["run_id"]
    wait_for(client, first, lambda v: v["status"] == "running")
    busy = client.post(f"/agent/sessions/{session['id']}/turns", json={"message": FOLLOW_UP})
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "session_busy"
    assert first in busy.json()["error"]["message"]
    assert client.get(f"/agent/sessions/{session['id']}").json()["running_run_id"] == first
    assert run_count(client) == 1
    assert client.post(f"/agent/runs/{first}/cancel", json={}).status_code == 200
    assert wait_terminal(client, first)["status"] == "cancelled"
    # Free again at once; the next turn's job waits for the cancelled one to close the session.
    second = ask(client, session["id"], PACK.task.goal)
    assert second["status"] == "completed" and second["final"]["evidence_ids"] == EVIDENCE
    view = settled(client, session["id"])
    assert [(t["state"], t["stop_reason"], t["run_id"]) for t in view["turns"]] == [
        ("finished", "cancelled", first), ("finished", "completed", second["id"])]
    assert view["running_run_id"] is None
    release.set()


def test_a_run_still_going_cannot_become_a_turn(client, policies):
    release = threading.Event()
    policies.queue.append([held(release)] + [release_step] * 4)
    created = client.post("/agent/runs", json=MODEL).json()
    r = client.post("/agent/sessions", json={**MODEL, "from_run": created["id"]})
    assert r.status_code == 409 and r.json()["error"]["code"] == "run_not_finished"
    release.set()
    assert wait_terminal(client, created["id"])["status"] == "completed"
    assert session_count(client) == 0


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize("session_id", ["nope", "..%2Fx", MISSING_SESSION, f"session-{MISSING_SESSION}",
                                        MISSING_SESSION.upper(), "x" * 300])
def test_unknown_or_malformed_session_ids_are_404(client, session_id):
    r = client.get(f"/agent/sessions/{session_id}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = client.post(f"/agent/sessions/{session_id}/turns", json={"message": FOLLOW_UP})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert run_count(client) == 0 and session_count(client) == 0


def test_unknown_runs_and_packs_are_refused(client):
    r = client.post("/agent/sessions", json={**MODEL, "from_run": "run-000000000000"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    for bad in ("../x", "run-1", "run-00000000000g"):
        r = client.post("/agent/sessions", json={**MODEL, "from_run": bad})
        assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
    r = client.post("/agent/sessions", json={**MODEL, "pack": "no_such_pack"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_pack"
    r = client.post("/agent/sessions", json={**MODEL, "pack": FIXTEST_PACK})
    assert r.status_code == 400 and r.json()["error"]["code"] == "workspace_not_supported"
    r = client.post("/agent/sessions", json={**MODEL, "mode": "yolo"})
    assert r.status_code == 422
    assert session_count(client) == 0


def test_bodies_too_large_or_invalid_create_nothing(client):
    session = create(client)
    turns = f"/agent/sessions/{session['id']}/turns"
    big = json.dumps({"message": "x" * (300 * 1024)})
    for path in ("/agent/sessions", turns):
        r = client.post(path, content=big, headers=JSON)
        assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"

    def chunks():
        yield b'{"message": "'
        for _ in range(40):
            yield b"x" * 8192
        yield b'"}'

    assert client.post(turns, content=chunks(), headers=JSON).status_code == 413
    for body in ({"message": ""}, {"message": " \n\t "}, {"message": "x" * 2001}, {}, {"message": 1},
                 {"message": "hi", "goal": "widen"}, {"message": "a\x00b"}, {"message": "hi", "model_path": "a\x00b"},
                 {"message": "hi", "model": {"kind": "local"}}):
        r = client.post(turns, json=body)
        assert r.status_code in (400, 422), (body, r.status_code)
        assert r.json()["error"]["code"] in ("validation_error", "model_unavailable"), body
    assert client.post(turns, content=b"{not json", headers=JSON).status_code == 422
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        for path in ("/agent/sessions", turns):
            r = client.post(path, content=json.dumps({**MODEL, "message": "hi"}),
                            headers={"content-type": content_type, "origin": PAGE_ORIGIN})
            assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
    assert run_count(client) == 0 and session_count(client) == 1
    assert client.get(f"/agent/sessions/{session['id']}").json()["turns"] == []


# ---------------------------------------------------------------- the browser boundary


def session_routes(session_id: str) -> list[tuple[str, str]]:
    return [("GET", "/agent/sessions"), ("GET", f"/agent/sessions/{session_id}"), ("POST", "/agent/sessions"),
            ("POST", f"/agent/sessions/{session_id}/turns"), ("OPTIONS", "/agent/sessions"),
            ("OPTIONS", f"/agent/sessions/{session_id}/turns")]


@pytest.mark.parametrize("headers, status, code", [
    ({"host": "evil.example:4890"}, 421, "forbidden_host"), ({"host": "127.0.0.1.nip.io:4890"}, 421, "forbidden_host"),
    ({"host": "127.0.0.1:4891"}, 421, "forbidden_host"), ({"origin": "https://evil.example"}, 403, "forbidden_origin"),
    ({"origin": "null"}, 403, "forbidden_origin"), ({"origin": "http://127.0.0.1:8017.evil.example"}, 403, "forbidden_origin"),
    ({"origin": "https://127.0.0.1:8017"}, 403, "forbidden_origin"),
])
def test_foreign_hosts_and_origins_reach_no_session(client, headers, status, code):
    session = create(client)
    body = json.dumps({**MODEL, "message": FOLLOW_UP})
    for method, path in session_routes(session["id"]):
        r = client.request(method, path, headers={**headers, **JSON}, content=body)
        assert r.status_code == status, (method, path, r.status_code)
        assert r.json()["error"]["code"] == code
        assert "access-control-allow-origin" not in r.headers and session["id"] not in r.text
    assert session_count(client) == 1 and run_count(client) == 0
    assert client.get(f"/agent/sessions/{session['id']}").json()["turns"] == []


def test_the_page_origin_gets_exactly_itself(client):
    r = client.post("/agent/sessions", json=MODEL, headers={"origin": PAGE_ORIGIN})
    assert r.status_code == 201
    assert r.headers["access-control-allow-origin"] == PAGE_ORIGIN and r.headers["vary"] == "Origin"
    assert "access-control-allow-credentials" not in r.headers
    pre = client.options(f"/agent/sessions/{r.json()['id']}/turns",
                         headers={"origin": PAGE_ORIGIN, "access-control-request-method": "POST"})
    assert pre.status_code == 204 and pre.headers["access-control-allow-origin"] == PAGE_ORIGIN


def test_get_changes_nothing(client, tmp_path):
    session = create(client)
    ask(client, session["id"], PACK.task.goal)
    settled(client, session["id"])
    # A turn that is open on disk (its process died): reading it does not mark it, only a new turn does.
    store = SessionStore(tmp_path / "runs" / "sessions")
    with open_when_released(store, session["id"]) as held_session:
        held_session.append("turn.started", turn=2, message="a turn whose process died")
    path = tmp_path / "runs" / "sessions" / f"session-{session['id']}.jsonl"
    before, runs = path.read_bytes(), run_count(client)
    for method, target in (("GET", f"/agent/sessions/{session['id']}/turns"), ("PUT", f"/agent/sessions/{session['id']}"),
                           ("DELETE", f"/agent/sessions/{session['id']}"), ("PATCH", "/agent/sessions")):
        r = client.request(method, target, headers=JSON, content=json.dumps({"message": FOLLOW_UP}))
        assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed", (method, target)
    assert client.get("/agent/sessions", params={**MODEL, "from_run": "run-000000000000"}).status_code == 200
    view = client.get(f"/agent/sessions/{session['id']}", params={"message": FOLLOW_UP}).json()
    assert [t["state"] for t in view["turns"]] == ["finished", "open"]
    assert path.read_bytes() == before and run_count(client) == runs and session_count(client) == 1
    after = ask(client, session["id"], FOLLOW_UP)  # a POST resumes the session: the dead turn is marked
    assert after["status"] == "completed"
    view = settled(client, session["id"])
    assert [t["state"] for t in view["turns"]] == ["finished", "interrupted", "finished"]
    assert view["turns"][2]["run_id"] == after["id"]


def test_what_a_page_reads_holds_no_path_and_no_secret(client, tmp_path):
    key = "sk-sessions-route-0123456789abcdef"
    secrets.register([key])
    model = tmp_path / "alice" / "private models" / "q.gguf"
    session = create(client, model_path=str(model))
    turn = ask(client, session["id"], f"{FOLLOW_UP} (my notes are in {tmp_path}/notes.txt, key {key})")
    assert turn["status"] == "completed"
    settled(client, session["id"])
    texts = [client.get("/agent/sessions").text, client.get(f"/agent/sessions/{session['id']}").text,
             client.get(f"/agent/runs/{turn['id']}").text, client.get(f"/agent/runs/{turn['id']}/events").text,
             *(p.read_text(encoding="utf-8") for p in (tmp_path / "runs" / "sessions").glob("*.jsonl"))]
    for text in texts:
        assert str(tmp_path) not in text and "alice" not in text and key not in text
    assert "[redacted]" in texts[1]


# ---------------------------------------------------------------- restarts and caps


def test_a_restarted_runner_keeps_its_sessions_and_their_model(tmp_path):
    runs = tmp_path / "runs"
    with make_client(runs, None, policy_factory=Policies(), test_policy=True) as client:
        session = create(client, budgets={"max_steps": 9})
        assert ask(client, session["id"], PACK.task.goal)["request"]["budgets"]["max_steps"] == 9
        settled(client, session["id"])
    settings = next(runs.rglob("settings.json"))
    assert settings.stat().st_mode & 0o077 == 0  # the model spec is this user's only
    with make_client(runs, None, policy_factory=Policies(), test_policy=True) as client:
        assert [s["id"] for s in client.get("/agent/sessions").json()["sessions"]] == [session["id"]]
        # no model in the message: the session's own, remembered across the restart
        again = ask(client, session["id"], FOLLOW_UP)
        assert again["status"] == "completed" and again["final"]["evidence_ids"] == EVIDENCE
        assert again["request"]["budgets"]["max_steps"] == 9  # the session's settings outlived the restart
        assert "settings" not in client.get(f"/agent/sessions/{session['id']}").text
    settings.unlink()  # a session this runner never knew the model of (made elsewhere): it must be named
    with make_client(runs, None, policy_factory=Policies(), test_policy=True) as client:
        r = client.post(f"/agent/sessions/{session['id']}/turns", json={"message": FOLLOW_UP})
        assert r.status_code == 409 and r.json()["error"]["code"] == "session_model_unknown"
        assert ask(client, session["id"], FOLLOW_UP, **MODEL)["status"] == "completed"
        assert ask(client, session["id"], FOLLOW_UP)["status"] == "completed"  # remembered from here on
        assert [t["state"] for t in settled(client, session["id"])["turns"]] == ["finished"] * 4


def test_retention_and_the_size_cap_come_from_the_session_store(tmp_path):
    with make_client(tmp_path / "runs", None, policy_factory=Policies(), test_policy=True, max_sessions=2,
                     max_session_bytes=6_000) as client:
        made = [create(client)["id"] for _ in range(3)]
        assert [s["id"] for s in client.get("/agent/sessions").json()["sessions"]] == made[:0:-1]
        assert client.get(f"/agent/sessions/{made[0]}").status_code == 404
        first = ask(client, made[-1], PACK.task.goal)
        assert first["status"] == "completed"
        settled(client, made[-1])
        # Past the cap, and compaction cannot bring it back under: the turn's run says why.
        refused = ask(client, made[-1], FOLLOW_UP)
        assert (refused["status"], refused["error"]["code"]) == ("failed", "session_full")
        assert [t["state"] for t in client.get(f"/agent/sessions/{made[-1]}").json()["turns"]] == ["finished"]
        assert [e["type"] for e in refused["events"]] == ["session.compacted", "run.finished"]
        assert [e["seq"] for e in refused["events"]] == [1, 2]


def test_a_compaction_is_the_first_event_of_its_turns_run_view(tmp_path):
    cap = 20_000
    with make_client(tmp_path / "runs", None, policy_factory=Policies(), test_policy=True,
                     max_session_bytes=cap) as client:
        session = create(client)
        first = ask(client, session["id"], PACK.task.goal)
        assert "session.compacted" not in [e["type"] for e in first["events"]]
        size = settled(client, session["id"])["bytes"]
        scratch = SessionStore(tmp_path / "scratch", max_session_bytes=cap)  # the runner's store, as configured
        compact_at = scratch.compact_bytes
        scratch.close()
        assert compact_at < size < cap  # past the compaction size, under the cap: the next turn compacts first
        second = ask(client, session["id"], FOLLOW_UP)
        assert second["status"] == "completed"
        assert_complete_trace(second["events"])
        compacted, started = second["events"][:2]
        assert (compacted["type"], compacted["seq"], started["type"]) == ("session.compacted", 1, "run.started")
        assert compacted["bytes_after"] < size and compacted["phase"] == "session"
        # A poller past it gets the rest, one from the start gets it too, and so does the stream.
        after = client.get(f"/agent/runs/{second['id']}", params={"after_seq": 1}).json()["events"]
        assert after == second["events"][1:]
        assert client.get(f"/agent/runs/{second['id']}", params={"after_seq": 0}).json()["events"][0] == compacted
        stream = client.get(f"/agent/runs/{second['id']}/events").text
        assert stream.index('"session.compacted"') < stream.index('"run.started"')
        view = settled(client, session["id"])
        assert view["compactions"] == 1 and [t["question"] for t in view["turns"]] == ["pack", "follow_up"]
        # The session keeps the turn's events under the same numbers.
        reader = SessionStore(tmp_path / "runs" / "sessions")
        [_, turn] = reader.read(session["id"]).turns()
        reader.close()
        kept = [e for e in second["events"] if e["type"] not in UNRECORDED_EVENTS]
        assert [(e["seq"], e["type"]) for e in turn.events] == [(e["seq"], e["type"]) for e in kept]


def test_the_session_bodies_are_published_like_the_run_body(client):
    """``/openapi.json`` publishes each POST body as a component generated from its class, and the
    route's request body names it: POST /agent/runs, and the two session POSTs the same way."""
    from agent.runner.requests import RunRequest
    from agent.runner.session_routes import SessionRequest, TurnRequest

    spec = client.get("/openapi.json").json()
    for path, body in (("/agent/runs", RunRequest), ("/agent/sessions", SessionRequest),
                       ("/agent/sessions/{session_id}/turns", TurnRequest)):
        request = spec["paths"][path]["post"]["requestBody"]
        assert request["required"] is True
        assert request["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{body.__name__}"}
        published, own = spec["components"]["schemas"][body.__name__], body.model_json_schema()
        assert set(published["properties"]) == set(own["properties"]) and published["required"] == own["required"]
        assert published["additionalProperties"] is False and published["description"] == own["description"]
        for name, field in own["properties"].items():
            assert published["properties"][name].get("description") == field.get("description"), (path, name)
    sessions = spec["components"]["schemas"]["SessionRequest"]["properties"]
    assert set(sessions) - set(spec["components"]["schemas"]["RunRequest"]["properties"]) == {"mode", "from_run"}
