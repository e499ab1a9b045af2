"""Explain this run (issue 17): a bounded, redacted digest of a finished trace, the model's words
labelled as such, streamed; refused while the run is going or without a model."""

from __future__ import annotations

import json
import re

import pytest

from agent.models.backends.scripted import ScriptedPolicy
from agent.core.explain import DIGEST_CHARS, LABEL, ExplainRefused, explain, trace_digest
from agent.models.model_policy import ModelUnavailable
from agent.task.packs import load_pack
from runtime_helpers import chain_outputs, run_scripted
from server_support import GOOD_SCRIPT, make_client, slow_script, wait_terminal

SAYS = "The agent searched the record, computed the average and drew the chart; the final was accepted."


def _events(tmp_path):
    outputs = chain_outputs(load_pack(None))
    outcome, _ = run_scripted(["not json", *outputs], tmp_path)
    return outcome.events


def test_the_digest_is_bounded_redacted_and_complete(tmp_path):
    events = _events(tmp_path)
    events[5] = {**events[5], "note": "/home/alice/secret models/q.gguf"}  # would never be shown anyway
    digest = trace_digest(events)
    assert len(digest) <= DIGEST_CHARS
    assert "invalid model output (invalid_json)" in digest and "action calculator" in digest
    assert "faults: 1 x decision.invalid" in digest and "why the runtime asked for it:" in digest
    assert digest.splitlines()[-1].startswith("run finished: completed/completed; task success True")
    assert "/home/alice" not in digest and "not json" not in digest
    long = events[:2] + [e for e in events[2:-1] for _ in range(60)] + events[-1:]
    assert len(trace_digest(long)) <= DIGEST_CHARS and "events left out" in trace_digest(long)


def test_an_unfinished_run_is_refused(tmp_path):
    with pytest.raises(ExplainRefused) as info:
        trace_digest(_events(tmp_path)[:-1])
    assert info.value.code == "run_not_finished"


def test_the_explanation_is_the_models_words_labelled(tmp_path):
    policy = ScriptedPolicy([json.dumps(SAYS)])
    seen = []
    result = explain(_events(tmp_path), policy, language="en", on_text=seen.append)
    assert result.text == SAYS and result.label == LABEL["en"] and seen[-1].startswith(SAYS)
    prompt = policy.requests[0].messages[-1]["content"]
    assert prompt.startswith("RECORD of one agent run") and len(prompt) < DIGEST_CHARS + 600 and policy.requests[0].max_new_tokens <= 256
    assert policy.requests[0].prefix == "" and policy.requests[0].temperature == 0.0
    # the grammar holds the explanation to at most six sentences
    pattern = re.compile(policy.requests[0].value_schema["pattern"])
    assert pattern.match(SAYS) and pattern.match("It searched. It computed 79.5. It plotted.")
    assert not pattern.match("One. Two. Three. Four. Five. Six. Seven.")


def test_the_runner_streams_an_explanation_of_a_finished_run(tmp_path):
    explainer = ScriptedPolicy([json.dumps(SAYS)])
    with make_client(tmp_path / "runs", GOOD_SCRIPT, explain_policy_factory=lambda body: explainer) as c:
        run_id = c.post("/agent/runs", json={"model_path": "scripted"}).json()["id"]
        wait_terminal(c, run_id)
        reply = c.post(f"/agent/runs/{run_id}/explain", json={"model_path": "scripted", "language": "en"})
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(x) for x in reply.text.splitlines()]
        assert "".join(x.get("delta", "") for x in lines) == SAYS
        assert lines[-1]["done"] and lines[-1]["explanation"] == SAYS and lines[-1]["label"] == LABEL["en"]
        assert c.get(f"/agent/runs/{run_id}/explain").status_code in (404, 405)  # never on GET


def test_the_runner_refuses_a_running_run_and_a_missing_model(tmp_path):
    def no_model(body):
        raise ModelUnavailable("no such model file")

    with make_client(tmp_path / "runs", slow_script(5.0), explain_policy_factory=no_model) as c:
        run_id = c.post("/agent/runs", json={"model_path": "scripted"}).json()["id"]
        busy = c.post(f"/agent/runs/{run_id}/explain", json={"model_path": "scripted"})
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "run_not_finished"
        c.post(f"/agent/runs/{run_id}/cancel")
        wait_terminal(c, run_id)
        missing = c.post(f"/agent/runs/{run_id}/explain", json={"model_path": "scripted"})
        assert missing.status_code == 409 and missing.json()["error"]["code"] == "model_unavailable"


def test_a_clean_run_says_it_had_no_faults(tmp_path):
    outcome, _ = run_scripted(chain_outputs(load_pack(None)), tmp_path)
    lines = trace_digest(outcome.events).splitlines()
    assert lines[-2].startswith("faults: none") and lines[-1].startswith("run finished")
