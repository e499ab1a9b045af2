"""Sessions: turns that carry over, the JSONL store that survives a kill -9, compaction that never
fails a turn, retention and caps, and ``react-agent chat`` over stdin. The scripted policy drives the
real runtime everywhere except the one ``slow`` test, which runs the 0.5B GGUF."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.util import secrets
from agent.models.backends.scripted import ScriptedPolicy, Slow
from agent.models.model_policy import ModelRequest
from agent.task.packs import PACKAGE_ROOT, PackError, load_pack
from agent.sessions import compaction as compaction_module
from agent.sessions.compaction import HANDOFF_SCHEMA, CompactionSettings, Handoff
from agent.sessions.errors import SessionBusy, SessionCorrupt, SessionFull, SessionNotFound
from agent.sessions.store import SessionStore
from agent.sessions.turns import UNRECORDED_EVENTS, Conversation
from agent.tools import ToolRegistry, registry_for
from agent.tools.facts import load_facts
from runtime_helpers import chain_outputs

RATIO = load_pack("population_ratio")
FACTS = load_facts(RATIO.knowledge_dir)
TAIPEI, NEW_YORK = RATIO.task.subgoals["lookup_fact"]
QUESTION = "台北人口 除以 纽约人口，答案保留 4 位小数"
FOLLOW_UP = "再问一次：台北人口 除以 纽约人口 是多少？答案保留 4 位小数"
INVERSE = "纽约人口 除以 台北人口，答案保留 4 位小数"


def value(name: str) -> int:
    return FACTS[name]["value"]


def ratio_answer() -> str:
    return f"台北人口除以纽约人口约为 {round(value(TAIPEI) / value(NEW_YORK), 4)}"


def handoff_for(request: ModelRequest) -> str:
    """A valid handoff summary citing the ids the request's grammar allows."""
    ids = request.value_schema["properties"]["found"]["items"]["properties"]["evidence_ids"].get("items", {})
    cited = list(ids.get("enum", []))[:3]
    return json.dumps({"goal": "answer from the records", "found": [
        {"fact": "the values and the rule the earlier turns looked up", "evidence_ids": cited}],
        "decided": ["the earlier answers stand"], "left": []}, ensure_ascii=False)


def is_summary(request: ModelRequest) -> bool:
    return request.prefix == "" and "goal" in (request.value_schema or {}).get("properties", {})


def ratio_step(request: ModelRequest) -> str:
    """One scripted continuation for whatever a guided run of the population pack asks next (and
    for a handoff summary), so a script works however earlier turns ended."""
    time.sleep(0.03)  # a model takes its time: a kill lands inside turns, not only between them
    if is_summary(request):
        return handoff_for(request)
    if '"tool": "lookup_fact"' in request.prefix:
        missing = TAIPEI if f"Still missing: {TAIPEI}" in request.messages[-1]["content"] else NEW_YORK
        return json.dumps({"query": missing}, ensure_ascii=False)
    if '"tool": "calculator"' in request.prefix:
        return json.dumps({"expression": f"{value(TAIPEI)} / {value(NEW_YORK)}"})
    return json.dumps(ratio_answer(), ensure_ascii=False)


RELEASE = load_pack(None)
CHAIN = chain_outputs(RELEASE)
RELEASE_EVIDENCE = ["obs-knowledge_search-1", "obs-calculator-2", "obs-plot-3"]
RELEASE_FOLLOW_UP = "Is the release rule still met? State the average and the lowest batch value."


def release_step(request: ModelRequest) -> str:
    """The same for the default pack (its knowledge lines are long enough to be worth folding)."""
    if is_summary(request):
        return handoff_for(request)
    for tool, output in zip(("knowledge_search", "calculator", "plot"), CHAIN):
        if f'"tool": "{tool}"' in request.prefix:
            return output
    return CHAIN[3]


def thread_tools(pack) -> ToolRegistry:
    """The pack's tools as copies at no import path, which run in a thread instead of the worker process."""
    registry = ToolRegistry()
    for tool in registry_for(pack.task.tool_names):
        registry.register(dataclasses.replace(tool, import_path=None))
    return registry


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def session_file(store: SessionStore, session_id: str) -> Path:
    return store.root / f"session-{session_id}.jsonl"


def free_action(tool: str, arguments: dict) -> str:
    return json.dumps({"type": "action", "tool": tool, "arguments": arguments}, ensure_ascii=False)


def free_final(answer: str, evidence_ids: list[str]) -> str:
    return json.dumps({"type": "final", "evidence_ids": evidence_ids, "answer": answer}, ensure_ascii=False)


# -- turns -----------------------------------------------------------------------------------------


def test_follow_up_turns_cite_earlier_evidence(tmp_path):
    store = SessionStore(tmp_path)
    policy = ScriptedPolicy([ratio_step] * 5)
    with store.create(pack=RATIO.name) as session:
        chat = Conversation(session, RATIO, policy)
        first = chat.run_turn(QUESTION)
        assert (first.result.status, first.observation_ids) == (
            "completed", ["obs-lookup_fact-1", "obs-lookup_fact-2", "obs-calculator-3"])
        # A follow-up needs nothing new: the gate accepts a Final on the first turn's evidence.
        second = chat.run_turn(FOLLOW_UP)
        assert second.result.stop_reason == "completed" and second.observation_ids == []
        assert second.result.final.evidence_ids == first.observation_ids
        prompt = policy.requests[-1].messages
        assert [m["role"] for m in prompt] == ["system", "user", "assistant", "user"]
        assert prompt[1]["content"].startswith(f"TASK: {QUESTION}") and "[obs-lookup_fact-1]" in prompt[1]["content"]
        assert json.loads(prompt[2]["content"])["answer"] == ratio_answer()
        assert FOLLOW_UP in prompt[3]["content"]
        # A free-mode follow-up computes something new from the earlier lookups and cites them;
        # an id no turn made is refused first.
        inverse = f"纽约人口除以台北人口约为 {round(value(NEW_YORK) / value(TAIPEI), 4)}"
        free = Conversation(session, RATIO, ScriptedPolicy([
            free_action("calculator", {"expression": f"{value(NEW_YORK)} / {value(TAIPEI)}"}),
            free_final(inverse, ["obs-lookup_fact-1", "obs-lookup_fact-2", "obs-calculator-9"]),
            free_final(inverse, ["obs-lookup_fact-1", "obs-lookup_fact-2", "obs-calculator-4"]),
        ]), mode="free")
        third = free.run_turn(INVERSE)
        assert third.result.stop_reason == "completed" and third.observation_ids == ["obs-calculator-4"]
        gate = [e for e in third.events if e["type"] == "final.validated"]
        assert [g["accepted"] for g in gate] == [False, True] and "do not exist: obs-calculator-9" in gate[0]["message"]
    policy.assert_complete()
    log = store.read(session.id)
    assert [(t.number, t.state) for t in log.turns()] == [(1, "finished"), (2, "finished"), (3, "finished")]
    assert [o.id for o in log.observations()] == [*first.observation_ids, "obs-calculator-4"]
    assert log.summary()["turns"] == 3 and log.summary()["last_message"] == INVERSE


def test_a_recall_cites_the_lookup_it_recalls_not_the_latest_of_an_earlier_turn(tmp_path):
    """Turn 12 of a long session recalled turn 3's lookup and was refused for not citing turn 11's,
    the latest lookup of the session; then it answered turn 11's question instead."""
    store = SessionStore(tmp_path)
    with store.create(pack=RATIO.name) as session:
        Conversation(session, RATIO, ScriptedPolicy([ratio_step] * 5)).run_turn(QUESTION)  # obs 1-3
        again = Conversation(session, RATIO, ScriptedPolicy([
            free_action("lookup_fact", {"query": TAIPEI}),
            free_final(f"{TAIPEI}为{value(TAIPEI)}", ["obs-lookup_fact-4", "obs-lookup_fact-2", "obs-calculator-3"]),
        ]), mode="free").run_turn(f"再查一次{TAIPEI}")
        assert again.observation_ids == ["obs-lookup_fact-4"] and again.result.stop_reason == "completed"
        recall = Conversation(session, RATIO, ScriptedPolicy([
            free_final(f"{NEW_YORK}为{value(NEW_YORK)}", ["obs-lookup_fact-2", "obs-calculator-3"]),
        ]), mode="free").run_turn(f"刚才查到的{NEW_YORK}是多少？")
        assert recall.result.stop_reason == "completed" and recall.observation_ids == []
        # within a turn the latest Observation must still be cited: turn 2 made obs-4 itself
        stale = Conversation(session, RATIO, ScriptedPolicy([
            free_action("lookup_fact", {"query": TAIPEI}),
            free_final(f"{TAIPEI}为{value(TAIPEI)}", ["obs-lookup_fact-4", "obs-lookup_fact-2", "obs-calculator-3"]),
            free_final(f"{TAIPEI}为{value(TAIPEI)}", ["obs-lookup_fact-5", "obs-lookup_fact-2", "obs-calculator-3"]),
        ]), mode="free").run_turn(f"再查一次{TAIPEI}")
        gate = [e for e in stale.events if e["type"] == "final.validated"]
        assert [g["accepted"] for g in gate] == [False, True]
        assert "must cite the latest successful lookup_fact" in gate[0]["message"] and "obs-lookup_fact-5" in gate[0]["message"]


def test_a_follow_up_asks_its_own_question_and_the_packs_goal_asks_the_packs(tmp_path):
    """Turn 1 and a turn on the pack's goal are held to the pack's answer form and graded by its
    ground truth; a follow-up answers in prose, still gated on its evidence and its claims, and its
    metrics claim no Task Success."""
    answers: list[str] = []  # written from turn 1's evidence, before the follow-up asks for them

    def answer(index: int):
        return lambda request: json.dumps(answers[index])

    policy = ScriptedPolicy([release_step] * 4 + [answer(0), answer(1)] + [answer(1), release_step])
    store = SessionStore(tmp_path)
    with store.create(pack=RELEASE.name) as session:
        chat = Conversation(session, RELEASE, policy, tools=thread_tools(RELEASE))
        first = chat.run_turn(RELEASE.task.goal)
        pack_final = policy.requests[-1]
        assert first.follow_up is False and first.result.metrics.task_success is True
        latest = {o.tool: o.result for o in first.result.observations}
        batches = latest["knowledge_search"]["data"]["batches"]
        lowest, average = min(batches, key=batches.get), latest["calculator"]["value"]
        shown = json.dumps([o.result for o in first.result.observations])
        unseen = next(n for n in range(max(batches.values()) + 1, 10**6) if str(n) not in shown)
        answers += [f"{lowest} is the lowest, at {unseen}.",  # a number no cited Observation holds
                    f"{lowest} is the lowest, at {batches[lowest]}; the average of all batches is {average:g}."]

        second = chat.run_turn(f"Why is {lowest} the lowest?")
        follow_up_final = policy.requests[-1]
        assert second.follow_up is True and second.result.stop_reason == "completed"
        gate = [e for e in second.events if e["type"] == "final.validated"]
        assert [g["accepted"] for g in gate] == [False, True] and f"the number {unseen}" in gate[0]["message"]
        assert second.result.final.answer == answers[1]
        metrics = second.result.metrics
        assert (metrics.task_success, metrics.tool_argument_accuracy, metrics.checks) == (None, None, {})
        assert metrics.termination_correctness is True
        # The pack's answer form and final hints are asked of the pack's question, not of the follow-up.
        for text in (RELEASE.task.answer_form, *RELEASE.task.final_hints):
            assert text in pack_final.messages[-1]["content"]
            assert text not in "".join(m["content"] for m in follow_up_final.messages)
        assert pack_final.value_schema["pattern"].startswith("^" + RELEASE.task.answer_form.split(" {")[0])
        assert follow_up_final.value_schema["pattern"] != pack_final.value_schema["pattern"]

        # The pack's goal again (however it is spaced) is the pack's question: the same prose lacks its verdict.
        third = chat.run_turn("  " + RELEASE.task.goal.replace(" ", "\n ", 3))
        assert third.follow_up is False and third.result.stop_reason == "completed"
        gate = [e for e in third.events if e["type"] == "final.validated"]
        assert [g["accepted"] for g in gate] == [False, True] and "verdict" in gate[0]["message"]
        assert third.result.final.answer == json.loads(CHAIN[3])
        assert set(third.result.metrics.checks) == set(first.result.metrics.checks)
    policy.assert_complete()
    started = [r for r in store.read(session.id).records if r["type"] == "turn.started"]
    assert [r["question"] for r in started] == ["pack", "follow_up", "pack"]
    assert [t["question"] for t in store.view(session.id)["turns"]] == ["pack", "follow_up", "pack"]


def test_a_follow_up_keeps_the_packs_tools_mode_and_data_and_drops_what_it_says_of_its_answer():
    from agent.sessions.turns import FOLLOW_UP_CLEARS, follow_up_pack

    message = "Plot only the two best batches."
    follow_up = follow_up_pack(RELEASE, message)
    assert follow_up.task.goal == message and follow_up.family is None and follow_up.guide({}, "en") is None
    assert RELEASE.family is not None and RELEASE.guide({}, "en") is not None
    declared = {name for name in FOLLOW_UP_CLEARS if getattr(RELEASE.task, name)}
    assert {"answer_form", "checks", "verdict", "final_hints", "hints", "summaries"} <= declared
    assert all(not getattr(follow_up.task, name) for name in FOLLOW_UP_CLEARS)
    for name in ("id", "required_tools", "tools", "mode", "subgoals", "mcp_servers", "workspace", "skills"):
        assert getattr(follow_up.task, name) == getattr(RELEASE.task, name), name
    assert (follow_up.name, follow_up.root, follow_up.skills) == (RELEASE.name, RELEASE.root, RELEASE.skills)
    assert RELEASE.load_expected()["checks"]
    with pytest.raises(PackError):
        follow_up.load_expected()


def test_a_turn_records_as_it_goes_and_a_refused_message_writes_nothing(tmp_path):
    store = SessionStore(tmp_path)
    with store.create(pack=RATIO.name) as session:
        chat = Conversation(session, RATIO, ScriptedPolicy([ratio_step] * 4))
        seen = []
        chat.run_turn(QUESTION, sink=seen.append)
        before = session_file(store, session.id).read_bytes()
        for bad in ("", "   ", "x" * 2001):
            with pytest.raises(ValueError):
                chat.run_turn(bad)
        assert session_file(store, session.id).read_bytes() == before
    kinds = [r["type"] for r in records(session_file(store, session.id))]
    assert kinds[0] == "session_meta" and kinds[1] == "turn.started" and kinds[-1] == "turn.finished"
    stored = [r["event"]["type"] for r in records(session_file(store, session.id)) if r["type"] == "event"]
    assert stored == [e["type"] for e in seen if e["type"] != "model.progress"]
    assert stored[0] == "run.started" and stored[-1] == "run.finished"


# -- durability ------------------------------------------------------------------------------------

WRITER = r"""
import sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from agent.models.backends.scripted import ScriptedPolicy
from agent.sessions.compaction import CompactionSettings
from agent.sessions.store import SessionStore
from agent.sessions.turns import Conversation
from test_sessions import QUESTION, RATIO, ratio_step, thread_tools
store = SessionStore(sys.argv[3], compact_bytes=12000)
session = store.open(sys.argv[4])
chat = Conversation(session, RATIO, ScriptedPolicy([ratio_step] * 1000), tools=thread_tools(RATIO),
                    compaction=CompactionSettings(context_tokens=1500))
while True:  # until it is killed
    turn = chat.run_turn(QUESTION)
    print("finished", turn.turn, turn.result.status, flush=True)
"""


def test_resume_after_sigkill_at_random_points(tmp_path):
    store = SessionStore(tmp_path / "sessions")
    with store.create(pack=RATIO.name) as session:
        session_id = session.id
    rng = random.Random(20240501)
    finished: set[int] = set()
    kills = 0
    for _ in range(22):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(PACKAGE_ROOT), str(Path(__file__).parent), str(store.root),
             session_id], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        time.sleep(rng.uniform(0.5, 2.5))
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the writer and anything it started
            kills += 1
        except ProcessLookupError:  # it died on its own: the check below shows why
            pass
        out, err = proc.communicate(timeout=60)
        assert "Traceback" not in err, err[-3000:]
        if rng.random() < 0.25:  # the tail a power cut tears (a kill between write calls never does)
            with open(session_file(store, session_id), "ab") as fh:
                fh.write(b'{"uuid": "torn-' + str(rng.random()).encode())
        for line in out.splitlines():
            parts = line.split()
            if len(parts) != 3:  # the writer's last line, cut by the kill (seen once in a clean-clone CI)
                assert not line.strip() or "finished".startswith(parts[0]), line
                continue
            _, number, status = parts
            assert status == "completed"
            finished.add(int(number))
    assert kills >= 20 and finished

    with store.open(session_id) as session:  # the last kill's turn is marked now
        log = session.log
        turns = log.turns()
        assert {t.number for t in turns if t.state == "finished"} >= finished  # every completed turn is there
        assert [t.number for t in turns] == list(range(1, len(turns) + 1))
        assert all(t.state in ("finished", "interrupted") for t in turns)
        interrupted = [t for t in turns if t.state == "interrupted"]
        assert interrupted and all(t.ended["reason"] == "the process ended before the turn finished"
                                   for t in interrupted)
        # and the session goes on, with every earlier Observation citable
        chat = Conversation(session, RATIO, ScriptedPolicy([ratio_step] * 10), tools=thread_tools(RATIO))
        last = chat.run_turn(FOLLOW_UP)
        assert last.result.stop_reason == "completed"
        assert set(last.result.final.evidence_ids) <= {o.id for o in session.log.observations()}
    lines = records(session_file(store, session_id))  # every line a record: the torn tails were cut
    uuids = [r["uuid"] for r in lines]
    assert len(uuids) == len(set(uuids))
    assert [r["parent_uuid"] for r in lines] == [None, *uuids[:-1]]
    ends = [(r["type"], r["turn"]) for r in lines if r["type"] in ("turn.finished", "turn.interrupted")]
    assert len(ends) == len({turn for _, turn in ends}) == len(turns) + 1  # one end per turn
    ids = [o.id for o in store.read(session_id).observations()]
    assert sorted(int(i.rsplit("-", 1)[1]) for i in ids) == list(range(1, len(ids) + 1))
    assert not list(store.root.glob(".*.tmp")) and store.ids() == [session_id]


def test_a_corrupt_tail_is_read_up_to_the_last_good_record(tmp_path):
    store = SessionStore(tmp_path)
    with store.create(pack=RATIO.name) as session:
        Conversation(session, RATIO, ScriptedPolicy([ratio_step] * 4)).run_turn(QUESTION)
        session_id, good = session.id, len(session.log.records)
    path = session_file(store, session_id)
    intact = path.read_bytes()
    with open(path, "ab") as fh:  # a record cut off mid-write, then a stray line, then the cut tail
        fh.write(b'{"uuid": "abc", "type": "event", "turn": 2, "ev')
    log = store.read(session_id)
    assert (len(log.records), log.skipped_lines, log.good_end) == (good, 1, len(intact))
    assert [t.state for t in log.turns()] == ["finished"]
    with store.open(session_id) as session:
        assert path.read_bytes() == intact  # the torn record is cut off before anything is appended
        Conversation(session, RATIO, ScriptedPolicy([ratio_step])).run_turn(FOLLOW_UP)
    log = store.read(session_id)
    assert log.skipped_lines == 0 and [t.state for t in log.turns()] == ["finished", "finished"]
    # damage in the middle costs only the damaged line
    data = path.read_bytes().split(b"\n")
    data[3] = b"{not json"
    path.write_bytes(b"\n".join(data))
    damaged = store.read(session_id)
    assert damaged.skipped_lines == 1 and len(damaged.records) == len(log.records) - 1
    # a file that is no session at all is refused, not guessed at
    path.write_bytes(b"\x00garbage\n")
    with pytest.raises(SessionCorrupt):
        store.open(session_id)


def test_an_unfinished_turn_is_marked_once_on_resume(tmp_path):
    store = SessionStore(tmp_path)
    with store.create(pack=RATIO.name) as session:
        session.append("turn.started", turn=1, message=QUESTION)  # and the process "died" here
        session_id = session.id
    assert store.read(session_id).open_turn() == 1
    store.open(session_id).close()
    store.open(session_id).close()  # a second resume adds nothing
    kinds = [r["type"] for r in records(session_file(store, session_id))]
    assert kinds == ["session_meta", "turn.started", "turn.interrupted"]
    assert store.list()[0]["last_state"] == "interrupted"


def test_a_turn_torn_out_of_the_runtime_is_marked_in_the_same_process(tmp_path):
    store = SessionStore(tmp_path)

    def ctrl_c(event):
        if event["type"] == "tool.observation":
            raise KeyboardInterrupt

    with store.create(pack=RATIO.name) as session:
        chat = Conversation(session, RATIO, ScriptedPolicy([ratio_step] * 6))
        with pytest.raises(KeyboardInterrupt):
            chat.run_turn(QUESTION, sink=ctrl_c)
        assert [t.state for t in session.log.turns()] == ["interrupted"]
        # its first lookup was recorded before the interrupt: the next turn builds on it
        second = chat.run_turn(QUESTION)
        assert second.turn == 2 and second.result.stop_reason == "completed"
        assert second.observation_ids == ["obs-lookup_fact-2", "obs-calculator-3"]
    assert [t.state for t in store.read(session.id).turns()] == ["interrupted", "finished"]


def test_one_writer_per_session_and_links_are_refused(tmp_path):
    store = SessionStore(tmp_path / "sessions")
    session = store.create(pack=RATIO.name)
    with pytest.raises(SessionBusy):
        store.open(session.id)
    with pytest.raises(SessionBusy):
        store.delete(session.id)
    session.close()
    path = session_file(store, session.id)
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)
    for call in (store.open, store.read):
        with pytest.raises(SessionCorrupt):
            call(session.id)
    assert store.list() == [] and store.ids() == []
    for bad in ("../x", "20240101T000000Z-" + "g" * 32, ""):
        with pytest.raises(SessionNotFound):
            store.read(bad)


# -- compaction ------------------------------------------------------------------------------------

TINY = CompactionSettings(context_tokens=4000, threshold=0.01, summary_seconds=0.3)  # always too long


def _three_turns(tmp_path, summary, settings=TINY):
    """Two turns with room to spare, then a third whose two carried turns are too long (``settings``)."""
    store = SessionStore(tmp_path)
    policy = ScriptedPolicy([release_step] * 5 + [summary, release_step])
    session = store.create(pack=RELEASE.name)
    roomy = Conversation(session, RELEASE, policy, tools=thread_tools(RELEASE))
    roomy.run_turn(RELEASE.task.goal)
    roomy.run_turn(RELEASE_FOLLOW_UP)
    seen = []
    third = Conversation(session, RELEASE, policy, compaction=settings, tools=thread_tools(RELEASE)).run_turn(
        RELEASE_FOLLOW_UP, sink=seen.append)
    return store, session, policy, third, seen


def _raise(request):
    raise RuntimeError("the summariser broke")


@pytest.mark.parametrize("summary, reason", [
    (_raise, "summariser_error: RuntimeError"),
    ("this is not JSON", "summary_invalid"),
    (Slow(json.dumps({"goal": "x", "found": [], "decided": [], "left": []}), 5.0), "summary_deadline"),
    (lambda r: json.dumps({"goal": "y" * 400, "found": [{"fact": "z" * 300, "evidence_ids": []}] * 12,
                           "decided": ["w" * 300] * 8, "left": ["v" * 300] * 8}), "would_not_shrink"),
])
def test_compaction_falls_back_and_the_turn_completes(summary, reason, tmp_path):
    store, session, policy, third, seen = _three_turns(tmp_path, summary)
    with session:
        event = third.compaction
        assert event is seen[0] and event["type"] == "session.compacted"
        # numbered as the turn's first event, the run's after it, as the sink and the result both show
        assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1)) and seen[1]["type"] == "run.started"
        assert third.events == seen
        recorded = store.read(session.id).turns()[-1].events
        assert recorded == [e for e in seen if e["type"] not in UNRECORDED_EVENTS]
        # TINY is always too long: the digests did not suffice, and the older turn was folded whole
        assert (event["method"], event["fallback_reason"]) == ("digests+turns", reason)
        assert event["tokens_after"] < event["tokens_before"]
        assert event["messages_after"] == 2 < event["messages_before"] == 4
        assert third.result.stop_reason == "completed" and third.observation_ids == []
        # the folded evidence is still the Final's: cited, checked, accepted
        assert third.result.final.evidence_ids == RELEASE_EVIDENCE
        shown = policy.requests[-1].messages[1]["content"]
        assert shown.startswith(compaction_module.FOLD_HEADING)
        assert f"[cited {', '.join(RELEASE_EVIDENCE)}]" in shown  # turn 1's answer and what it cited
        assert event["digested"] == ["obs-knowledge_search-1", "obs-plot-3"]  # the calculator's line is short
    policy.assert_complete()
    log = store.read(session.id)
    assert [r["type"] for r in log.records].count("compacted") == 1  # the latest supersedes the first
    assert not [r for r in log.records if r["type"] == "event" and r["turn"] <= 2]  # their steps went
    assert [o.id for o in log.observations()] == third.result.final.evidence_ids  # their evidence stayed


def test_the_digest_fold_alone_when_it_brings_the_conversation_under_its_target(tmp_path):
    """Long Observation lines give way to their digests, and no turn is folded while the digests suffice."""
    store = SessionStore(tmp_path)
    with store.create(pack=RELEASE.name) as session:
        chat = Conversation(session, RELEASE, ScriptedPolicy([release_step] * 5), tools=thread_tools(RELEASE))
        chat.run_turn(RELEASE.task.goal)
        chat.run_turn(RELEASE_FOLLOW_UP)
        context, observations = chat.context(), session.log.observations()
    registry = thread_tools(RELEASE)
    budget = compaction_module.Budget(tokens=10**6, chars=0, count=compaction_module.approx_tokens)
    long = budget.size(context.pairs).chars
    digested = compaction_module.fold_observations(context.pairs, observations, registry, budget, 1.0)[0]
    short = budget.size(digested).chars
    assert short < long
    for target, method in ((short + 1, "digests"), (short - 1, "digests+turns")):
        budget = dataclasses.replace(budget, chars=target)
        done = compaction_module.compact(context, observations, policy=None, settings=CompactionSettings(fold_target=1.0),
                                         budget=budget, registry=registry, through_turn=2)
        assert (done.method, done.fallback_reason) == (method, "no_summariser")
        assert len(done.context.pairs) == (2 if method == "digests" else 1)


def test_a_summary_folds_older_turns_and_keeps_their_evidence_citable(tmp_path):
    store, session, policy, third, _ = _three_turns(tmp_path, release_step,
                                                    settings=CompactionSettings(context_tokens=4000, threshold=0.1))
    with session:
        event = third.compaction
        assert event["method"].startswith("summary") and event["fallback_reason"] is None
        assert event["messages_after"] == 2 < event["messages_before"] == 4
        summary_request = policy.requests[-2]
        assert is_summary(summary_request) and summary_request.value_schema == compaction_module.handoff_schema(
            RELEASE_EVIDENCE)
        shown = policy.requests[-1].messages[1]["content"]
        assert shown.startswith("HANDOFF SUMMARY") and f"[{', '.join(RELEASE_EVIDENCE)}]" in shown
        assert third.result.stop_reason == "completed" and third.result.final.evidence_ids == RELEASE_EVIDENCE
    compacted = store.read(session.id).compaction()
    assert Handoff.model_validate(compacted["summary"]).found[0].evidence_ids == third.result.final.evidence_ids
    assert compacted["before"]["messages"] == 4 and compacted["after"]["messages"] == 2


class TurnScript(ScriptedPolicy):
    """A policy for many turns: each turn's Decisions from ``pending`` (set before the turn), and
    every handoff summary asked for one that outlasts its deadline (a 1.5B on two cores)."""

    def __init__(self):
        super().__init__([])
        self.pending: list[str] = []
        self.summaries = 0

    def generate(self, request: ModelRequest):
        if is_summary(request):
            self.summaries += 1
            self.outputs.insert(0, Slow(handoff_for(request), 5.0))
        else:
            self.outputs.insert(0, self.pending.pop(0))
        return super().generate(request)


def test_a_session_of_many_small_turns_is_folded_turn_by_turn_and_stays_answerable(tmp_path):
    """Lookups are shorter than their digests: a long session of them is shortened only by folding
    whole turns into the runtime's ledger (question, answer, cited ids). A summary that timed out
    once is not asked for again, and a recall of a folded turn cites its Observation and is accepted."""
    names = sorted(FACTS) * 4  # the pack's three facts, each looked up four times
    script = TurnScript()
    settings = CompactionSettings(context_tokens=2000, threshold=0.4, summary_seconds=0.3)
    store = SessionStore(tmp_path)
    compactions = []
    with store.create(pack=RATIO.name) as session:
        Conversation(session, RATIO, ScriptedPolicy([ratio_step] * 5)).run_turn(QUESTION)  # obs 1-3
        chat = Conversation(session, RATIO, script, mode="free", compaction=settings)
        for number, name in enumerate(names, start=4):
            script.pending = [free_action("lookup_fact", {"query": name}),
                              free_final(f"{name} is {value(name)}", [f"obs-lookup_fact-{number}", "obs-calculator-3"])]
            turn = chat.run_turn(f"What is the value of the fact '{name}'?")
            assert turn.result.stop_reason == "completed", turn.result.stop_reason
            if turn.compaction:
                compactions.append(turn.compaction)
        assert compactions, "the session never reached its threshold"
        assert all("turns" in c["method"] and c["tokens_after"] < c["tokens_before"] for c in compactions)
        assert [c["fallback_reason"] for c in compactions] == ["summary_deadline"] + ["summary_skipped"] * (
            len(compactions) - 1)
        assert script.summaries == 1
        first = names[0]
        script.pending = [free_final(f"{first} was {value(first)}", ["obs-lookup_fact-4", "obs-calculator-3"])]
        recall = chat.run_turn(f"Earlier you looked up '{first}'. What was it?")
        shown = script.requests[-1].messages[1]["content"]
        assert compaction_module.FOLD_HEADING in shown
        assert f"answered: {first} is {value(first)} [cited obs-lookup_fact-4, obs-calculator-3]" in shown
        assert recall.result.stop_reason == "completed" and recall.observation_ids == []
        carried = chat.context().pairs
        assert len(carried) < len(names) and carried[0][0].count(compaction_module.FOLD_HEADING) == 1
        ledger = carried[0][0].split("\n\nTASK: ")[0].splitlines()[1:]
        assert [line.split("'")[1] for line in ledger[1:]] == names[:len(ledger) - 1]  # oldest first, none twice


def test_a_ledger_over_its_target_has_its_oldest_lines_shortened_and_keeps_every_id():
    """Once every turn but the latest is folded, the ledger is what keeps growing: its oldest lines are
    made shorter (the question's first sentence, the answer's start, the cited ids) until the
    conversation is under its target; the newest lines stay whole."""
    boiler = " Look it up and answer with its value, citing the evidence."
    wordy = ", as the observation shows, and this answer goes on for a while about where it was found" * 2
    pairs = [(f"TASK: What is the value of fact {n}?{boiler}\n\nOBSERVATIONS (written by the runtime):\n"
              f"[obs-lookup_fact-{n}] lookup_fact ok: fact {n} = {1000 + n}",
              json.dumps({"type": "final", "answer": f"Fact {n} is {1000 + n}{wordy}.",
                          "evidence_ids": [f"obs-lookup_fact-{n}"]})) for n in range(1, 21)]
    whole = compaction_module.fold_turns(pairs, compaction_module.Budget(
        tokens=10**6, chars=10**6, count=compaction_module.approx_tokens), 1.0, 1)
    assert whole == pairs  # under the target: nothing folded
    budget = compaction_module.Budget(tokens=10**6, chars=6000, count=compaction_module.approx_tokens)
    folded = compaction_module.fold_turns(pairs, budget, 1.0, 1)
    assert len(folded) == 1 and not budget.over(budget.size(folded))
    ledger = folded[0][0].split("\n\nTASK: ")[0].splitlines()[1:]
    assert len(ledger) == 19
    tight = [line for line in ledger if "Look it up" not in line]
    assert 0 < len(tight) < len(ledger) and ledger[:len(tight)] == tight  # the oldest, in order
    for n, line in enumerate(ledger, start=1):
        assert f"fact {n}?" in line and f"is {1000 + n}" in line and f"[cited obs-lookup_fact-{n}]" in line
    assert all(len(line) < 200 for line in tight) and all(len(line) > 300 for line in ledger[len(tight):])
    assert compaction_module.tight_line(tight[0]) == tight[0]
    ended = ("- asked: What is fact 3? Look it up. | this turn ended without an answer: loop_detected | "
             "[obs-lookup_fact-7] lookup_fact ok: fact 3 = 1003 | [obs-lookup_fact-8] lookup_fact ok: fact 4 = 1004")
    assert compaction_module.tight_line(ended) == ("- asked: What is fact 3? | this turn ended without an answer: "
                                                   "loop_detected [observations obs-lookup_fact-7, obs-lookup_fact-8]")


def test_the_handoff_grammar_comes_from_its_model():
    assert HANDOFF_SCHEMA["required"] == ["goal", "found", "decided", "left"]
    assert HANDOFF_SCHEMA["additionalProperties"] is False and "$defs" not in json.dumps(HANDOFF_SCHEMA)
    found = HANDOFF_SCHEMA["properties"]["found"]
    assert found["maxItems"] == 12 and found["items"]["required"] == ["fact", "evidence_ids"]
    assert compaction_module.handoff_schema([])["properties"]["found"]["items"]["properties"]["evidence_ids"][
        "maxItems"] == 0


def test_a_compaction_that_breaks_never_brings_the_turn_down(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk on fire")

    monkeypatch.setattr("agent.sessions.turns.compact", broken)
    store, session, policy, third, _ = _three_turns(tmp_path, release_step)
    with session:
        assert third.compaction["method"] == "failed" and "disk on fire" in third.compaction["fallback_reason"]
        assert third.result.stop_reason == "completed"


# -- retention and caps ----------------------------------------------------------------------------


def test_retention_keeps_the_newest_sessions_and_never_one_held_open(tmp_path):
    store = SessionStore(tmp_path, max_sessions=3)
    held = store.create(pack=RATIO.name)  # the oldest, held open throughout
    made = []
    for _ in range(5):
        with store.create(pack=RATIO.name) as session:
            made.append(session.id)
        time.sleep(0.001)
    assert store.ids() == sorted([held.id, *made[-2:]])
    held.close()
    with store.create(pack=RATIO.name) as newest:
        pass
    assert held.id not in store.ids() and newest.id in store.ids() and len(store.ids()) == 3


def test_size_caps_compact_then_refuse_and_what_is_listed_is_public(tmp_path):
    secrets.register(["sk-session-test-0123456789abcdef"])
    store = SessionStore(tmp_path, max_session_bytes=40_000, compact_bytes=8_000)
    with store.create(pack=RATIO.name) as session:
        chat = Conversation(session, RATIO, ScriptedPolicy([ratio_step] * 8))
        chat.run_turn(f"{QUESTION} (files under {tmp_path}/private, key sk-session-test-0123456789abcdef)")
        big = session.size
        assert big > store.compact_bytes
        second = chat.run_turn(FOLLOW_UP)  # past compact_bytes: the first turn's steps are folded away
        assert second.compaction is not None and second.compaction["bytes_after"] < big
        assert second.result.stop_reason == "completed"
        store.max_session_bytes = 1_000  # a cap compaction cannot get under: the next turn is refused
        with pytest.raises(SessionFull):
            chat.run_turn(FOLLOW_UP)
        assert [r["type"] for r in records(session_file(store, session.id))].count("turn.started") == 2
    text = session_file(store, session.id).read_text(encoding="utf-8")
    assert str(tmp_path) not in text and "sk-session-test-0123456789abcdef" not in text and "[redacted]" in text
    listed = json.dumps(store.list()) + json.dumps(store.view(session.id))
    assert str(tmp_path) not in listed and "sk-session" not in listed
    entry = store.list()[0]
    assert set(entry) >= {"id", "created_at", "turns", "last_message", "bytes"} and entry["turns"] == 2


def test_event_records_stop_at_the_size_cap_and_the_turn_still_ends(tmp_path):
    store = SessionStore(tmp_path, max_session_bytes=3_000, compact_bytes=10**9)
    with store.create(pack=RATIO.name) as session:
        turn = Conversation(session, RATIO, ScriptedPolicy([ratio_step] * 4)).run_turn(QUESTION)
        assert turn.result.stop_reason == "completed"
    finished = store.read(session.id).turns()[0].ended
    assert finished["type"] == "turn.finished" and finished["dropped_events"] > 0


# -- the terminal ----------------------------------------------------------------------------------


def test_cli_chat_over_stdin_and_the_session_list(tmp_path, monkeypatch, capsys):
    import agent.cli.main as cli
    import agent.cli.chat as chat_command

    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")  # never opened: the scripted policy stands in for it
    policies = []

    def scripted(spec):
        policies.append(ScriptedPolicy([ratio_step] * 6))
        return policies[-1]

    monkeypatch.setattr(chat_command, "load_spec", scripted)
    folder = str(tmp_path / "sessions")
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{QUESTION}\n\n{FOLLOW_UP}\n"))
    assert cli.main(["chat", "--pack", "population_ratio", "--model", str(model), "--sessions-dir", folder]) == 0
    out = capsys.readouterr().out
    session_id = out.splitlines()[0].split()[1]
    assert f"> {QUESTION}" in out and f"> {FOLLOW_UP}" in out
    assert f"ANSWER (turn 1): {ratio_answer()}" in out and f"ANSWER (turn 2): {ratio_answer()}" in out
    assert "observation obs-lookup_fact-1 (ok)" in out and f"chat --resume {session_id}" in out
    assert len(policies) == 1  # loaded once for the whole conversation

    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{FOLLOW_UP}\n"))
    assert cli.main(["chat", "--resume", session_id[:20], "--model", str(model), "--sessions-dir", folder,
                     "--json"]) == 0
    turn = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (turn["session"], turn["turn"], turn["status"]) == (session_id, 3, "completed")
    assert turn["final"]["evidence_ids"] == ["obs-lookup_fact-1", "obs-lookup_fact-2", "obs-calculator-3"]

    assert cli.main(["sessions", "--sessions-dir", folder, "--json"]) == 0
    [entry] = json.loads(capsys.readouterr().out)
    assert (entry["id"], entry["turns"], entry["pack"]) == (session_id, 3, "population_ratio")
    assert cli.main(["sessions", "--sessions-dir", folder]) == 0
    assert session_id in capsys.readouterr().out
    # refusals: one line, status 2
    assert cli.main(["chat", "--resume", "nope", "--model", str(model), "--sessions-dir", folder]) == 2
    assert cli.main(["chat", "--resume", session_id, "--pack", "default", "--model", str(model),
                     "--sessions-dir", folder]) == 2
    err = capsys.readouterr().err
    assert "no session nope" in err and "belongs to pack 'population_ratio'" in err


# -- a real model ----------------------------------------------------------------------------------

SMALL_MODEL = (Path(os.environ.get("REACT_AGENT_MODEL_DIR", Path.home() / ".cache" / "react-agent-local" / "models"))
               / "qwen2.5-coder-0.5b-gguf" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_a_three_turn_session_with_the_small_model(tmp_path):
    """Three questions about the same records with Qwen2.5-Coder-0.5B (GGUF, greedy): the first
    gathers the evidence, the follow-ups answer from it, citing the first turn's ids and calling no
    tool. A small model's follow-up may be refused until its budget ends (``final_unverified``);
    what the runtime accepts must be right, by the pack's own truth."""
    assert SMALL_MODEL.is_file(), f"download the 0.5B first: {SMALL_MODEL.name}"
    questions = [load_pack(None).task.goal,
                 "Which batch has the lowest Task Success, and is the release rule met?",
                 "Is the average Task Success at least the release rule's average threshold?"]
    truth = json.loads((PACKAGE_ROOT / "data" / "expected.json").read_text(encoding="utf-8"))
    batches = truth["knowledge"]["batches"]
    lowest = min(batches, key=batches.get)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "agent", "chat", "--model", str(SMALL_MODEL), "--sessions-dir",
                           str(tmp_path), "--json", "--temperature", "0", "--max-seconds", "1800"],
                          input="\n".join(questions) + "\n", cwd=PACKAGE_ROOT, capture_output=True, text=True,
                          timeout=3500)
    seconds = time.monotonic() - started
    turns = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    summary = json.dumps(turns, ensure_ascii=False, indent=1)[:4000]
    print(f"three turns with the 0.5B in {seconds:.0f} s:", [t["stop_reason"] for t in turns])
    assert len(turns) == 3 and turns[0]["status"] == "completed", summary + proc.stderr[-2000:]
    assert all(t["stop_reason"] in ("completed", "final_unverified") for t in turns), summary
    first = turns[0]["observation_ids"]
    assert {o.split("-")[1] for o in first} >= {"knowledge_search", "calculator", "plot"}, summary
    assert all(text in turns[0]["final"]["answer"] for text in truth["final"]["must_include"]), summary
    for later in turns[1:]:
        assert later["observation_ids"] == [], summary
        if later["status"] == "completed":
            assert set(later["final"]["evidence_ids"]) <= set(first), summary
    if turns[1]["status"] == "completed":  # the lowest batch, by the pack's records
        assert lowest in turns[1]["final"]["answer"], summary
    if turns[2]["status"] == "completed":  # the average against the threshold: the pack's own verdict
        eligible = truth["calculator"]["value"] >= truth["knowledge"]["release_rule"]["average_gte"]
        negative = re.search(r"\b(?:not|no|false|fails?|below)\b", turns[2]["final"]["answer"], re.IGNORECASE)
        assert bool(negative) != eligible, summary
    # the exit status says whether every turn was answered
    assert proc.returncode == (0 if all(t["status"] == "completed" for t in turns) else 1), summary