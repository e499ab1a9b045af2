"""bench/long_session.py without a model: six turns with the scripted test policy and a compaction
threshold low enough that the carried conversation is compacted, and the summary the script prints
(compactions ran, every turn finished, recalls and new questions right against the pack's data)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from agent.task.packs import TaskPack
from agent.sessions.store import SessionStore
from agent.tools.facts import load_facts

from bench_support import load_bench as _load


bench = _load("long_session")


def summary_of(out: str) -> dict[str, str]:
    """The ``key: value`` lines under ``## summary``."""
    block = out.split("## summary", 1)[1]
    return dict(line.split(": ", 1) for line in block.strip().splitlines())


def test_six_scripted_turns_compact_finish_and_answer_from_the_packs_data(tmp_path, capsys):
    turns, recall_every, early = 6, 4, 5
    assert bench.main(["--policy", "scripted", "--turns", str(turns), "--recall-every", str(recall_every),
                       "--early", str(early), "--threshold", "0.02", "--work", str(tmp_path / "work"),
                       "--out", str(tmp_path / "report.json")]) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    rows = report["rows"]
    assert report["model"] == "scripted-test-policy"

    # The plan: every fourth turn a recall of an early turn's fact, the others facts not asked before.
    pack = TaskPack.load(tmp_path / "work" / "pack" / bench.PACK_ID)
    facts = load_facts(pack.knowledge_dir)
    plan = bench.plan_turns(list(facts), turns, recall_every, early, 0)
    assert [(r["kind"], r["fact"]) for r in rows] == plan
    assert [r["kind"] for r in rows] == ["recall" if n % recall_every == 0 else "new" for n in range(1, turns + 1)]
    new_facts = [r["fact"] for r in rows if r["kind"] == "new"]
    assert len(set(new_facts)) == len(new_facts)
    early_facts = [r["fact"] for r in rows[:early] if r["kind"] == "new"]
    assert all(r["fact"] in early_facts for r in rows if r["kind"] == "recall")
    # The right values are the pack's, and each answer states its own.
    assert [r["value"] for r in rows] == [facts[r["fact"]]["value"] for r in rows]
    assert all(str(facts[r["fact"]]["value"]) in r["answer"] for r in rows)
    # Turn 1 is the pack's question (graded by its ground truth), the others follow-ups (no Task Success).
    assert [(r["follow_up"], r["task_success"]) for r in rows] == [(False, True)] + [(True, None)] * (turns - 1)

    compacted = [r for r in rows if r["compaction"]]
    assert compacted and any(r["compaction"]["method"].startswith("summary") for r in compacted)
    summary = summary_of(out)
    recalls = sum(r["kind"] == "recall" for r in rows)
    assert summary["turns"] == f"{turns} (finished {turns}, completed {turns})"
    assert summary["compactions"].startswith(f"{len(compacted)} (")
    assert summary["recall right"] == f"{recalls}/{recalls}"
    assert summary["new right"] == f"{turns - recalls}/{turns - recalls}"
    most = max(r["carried_tokens"] for r in rows)
    assert summary["max carried tokens"].startswith(f"{most} of a {report['context_tokens']}-token context")
    assert re.fullmatch(r"\d+\.\d\d", summary["median seconds per turn"])
    # one table line per turn, in order
    lines = [line for line in out.splitlines() if re.match(r"\| \d+ \|", line)]
    assert [int(line.split("|")[1]) for line in lines] == list(range(1, turns + 1))

    # The session file agrees: every turn finished, and a compaction is its turn's first event (seq 1).
    log = SessionStore(tmp_path / "work" / "sessions").read(report["session"])
    assert [t.state for t in log.turns()] == ["finished"] * turns
    last = log.turns()[-1]
    assert rows[-1]["compaction"] and last.events[0]["type"] == "session.compacted"
    assert [e["seq"] for e in last.events] == list(range(1, len(last.events) + 1))
