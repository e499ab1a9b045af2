"""Long-session benchmark: one session of N turns on a real model, fact lookups and recalls, with compaction.

The session's pack is built in a work folder from the ``fact_arithmetic`` family's generator
(``agent/families/fact_arithmetic/generator.py``): the fact bases of its packs merged into one
(``--facts`` facts, each name once, every name finding itself with ``lookup_fact``), with
``lookup_fact`` its only tool. Turn 1 is the pack's own question (its goal asks for one fact; the
pack's ``data/expected.json`` grades it). Every later turn is a follow-up with its own question
(``agent/sessions/turns.py``): a *new* turn asks for a fact no turn has asked for, and every
``--recall-every``-th turn is a *recall* that asks again for a fact one of the first ``--early``
turns looked up ("Earlier you looked up X. What was it?"). The right value of every question is
read from the written pack's ``knowledge/facts.json``; an answer holds it when it states that number
(``metrics.states_number``, the reading Task Success uses; a fact whose name or unit gives a scale,
"(thousands)", is also stated right in ones: ``right_values``).

Per turn it prints: the turn, its kind, seconds, the messages and tokens the turn carries in
(before any compaction), the compaction that ran before it (method, tokens before and after), the
terminal status, the Observations the turn made and whether the answer holds the right value. At
the end: turns, compactions, the most tokens carried against the model's context, recalls right /
asked, new questions right / asked, median seconds per turn. ``--out`` writes all of it as JSON.

    ../.venv/bin/python bench/long_session.py [--model PATH] [--turns 32] [--threshold 0.5] [--out report.json]
    ../.venv/bin/python bench/long_session.py --threshold 0.1     # a short context budget: compaction early
    ../.venv/bin/python bench/long_session.py --policy scripted --turns 6 --threshold 0.02   # no model

The model is ``--model`` (default: the downloaded 1.5B, ``model_choice.default_model``), loaded once.
``--policy scripted`` puts the scripted test policy (``agent/models/backends/scripted.py``) in its place,
so the script itself can be tested: it looks a fact up unless the prompt shows it in a citable
Observation, answers from what it is shown and writes the handoff summary; its report names
``scripted-test-policy`` and measures the runtime, never a model.

Follow-ups run in free mode by default (``--mode``): in guided mode the runtime asks for the Final as
soon as every required tool has an Observation, so a follow-up could look nothing new up.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.contracts.budgets import Budgets, Sampling
from agent.families.fact_arithmetic.generator import generate_packs
from agent.core.metrics import states_number
from agent.models.model_choice import default_model
from agent.task.packs import TaskPack
from agent.sessions.compaction import Budget, CompactionSettings, context_tokens
from agent.sessions.store import SessionStore
from agent.sessions.turns import NOTE, Conversation
from agent.tools.base import ToolError
from agent.tools.facts import MAX_CHOICES, load_facts, lookup

PACK_ID = "long_session"
TOOL = "lookup_fact"


# -- the pack and the questions ------------------------------------------------------------------


def new_question(name: str) -> str:
    return f"What is the value of the fact '{name}'? Look it up and answer with its value, citing the evidence."


def recall_question(name: str) -> str:
    return f"Earlier you looked up '{name}'. What was it? Answer with its value, citing the evidence."


_SCALE_WORDS = {"thousand": 10 ** 3, "million": 10 ** 6, "billion": 10 ** 9}


def right_values(name: str, fact: dict[str, Any]) -> list[float]:
    """The right answers to a question about a fact: its value, and where its name or unit gives a
    scale ("Split population (thousands)"), the value in ones too ("1167.4 thousand" is 1167400)."""
    text = f"{name} {fact.get('unit', '')}".lower()
    return [fact["value"]] + [fact["value"] * scale for word, scale in _SCALE_WORDS.items() if word in text]


def merged_facts(folder: Path, n: int, seed: int) -> dict[str, dict[str, Any]]:
    """``n`` facts of the family's generated fact bases, each name once (the first pack's value), in
    the order generated; only names that ``lookup_fact`` resolves to themselves in the merged base."""
    merged: dict[str, dict[str, Any]] = {}
    for root in generate_packs(folder, max(8, n), seed):
        for name, fact in load_facts(root / "knowledge").items():
            merged.setdefault(name, fact)
    facts = dict(list(merged.items())[:n])
    while (ambiguous := [name for name in facts if _resolves_to(facts, name) != name]):
        for name in ambiguous:
            del facts[name]
    return facts


def _resolves_to(facts: dict[str, dict[str, Any]], name: str) -> str | None:
    try:
        return lookup(facts, name)
    except ToolError:  # unknown_fact: none, or several, match
        return None


def plan_turns(names: list[str], turns: int, recall_every: int, early: int, seed: int) -> list[tuple[str, str]]:
    """(kind, fact name) of each turn: ``recall`` every ``recall_every``-th turn (a fact one of the
    first ``early`` new turns asked for, in turn), else ``new`` (a fact not asked for yet)."""
    order = list(names)
    random.Random(f"long-session:{seed}").shuffle(order)
    fresh = iter(order)
    plan: list[tuple[str, str]] = []
    recalls = 0
    for number in range(1, turns + 1):
        early_facts = [fact for kind, fact in plan[:early] if kind == "new"]
        if number > 1 and number % recall_every == 0 and early_facts:
            plan.append(("recall", early_facts[recalls % len(early_facts)]))
            recalls += 1
            continue
        fact = next(fresh, None)
        if fact is None:
            raise ValueError(f"{len(names)} facts are too few for {turns} turns; ask for more with --facts")
        plan.append(("new", fact))
    return plan


def write_pack(folder: Path, facts: dict[str, dict[str, Any]], first: str) -> TaskPack:
    """The session's pack: the merged facts, ``lookup_fact``, and turn 1's question with its ground truth."""
    root = folder / PACK_ID
    (root / "knowledge").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "knowledge" / "facts.json").write_text(json.dumps({"facts": facts}, ensure_ascii=False, indent=1),
                                                    encoding="utf-8")
    # No subgoals: a follow-up keeps the pack's, and its Final would have to cite turn 1's lookup.
    task = {"id": PACK_ID, "goal": new_question(first), "required_tools": [TOOL], "mode": "free", "family": None}
    (root / "task.json").write_text(json.dumps(task, ensure_ascii=False, indent=1), encoding="utf-8")
    expected = {"task_id": PACK_ID, "checks": [
        {"type": "final_accepted"},
        {"type": "tool_result", "name": "looked_up", "tool": TOOL, "path": "fact", "equals": first},
        {"type": "answer_numbers", "name": "answer_states_the_value", "numbers": [facts[first]["value"]]}]}
    (root / "data" / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1), encoding="utf-8")
    return TaskPack.load(root)


# -- the scripted stand-in for a model -----------------------------------------------------------

# an Observation's line as the prompt shows it (``prompting.observation_line``), whole or folded into a
# digest (``compaction.digest_line``); a value the digest's preview cut off does not match
_SEEN = re.compile(r"\[(obs-" + TOOL + r"-\d+)\] " + TOOL + r" ok(?: \(folded[^)]*\))?: "
                   r"(.+?) = (-?\d+(?:\.\d+)?)(?=\s|$)", re.MULTILINE)
# a fact of the handoff summary this script writes, as ``compaction.render_handoff`` shows it
_SUMMARISED = re.compile(r"^- (.+?) = (-?\d+(?:\.\d+)?) \[(obs-" + TOOL + r"-\d+)", re.MULTILINE)
_ASKED = re.compile(r"'([^']+)'")
_TURN_NOTE = NOTE.split("{message}")[0]


def _shown(text: str) -> dict[str, tuple[str, str]]:
    """fact name -> (latest Observation id, value) for each lookup the prompt shows, summaries included."""
    found = [(m.start(), m.group(2), m.group(1), m.group(3)) for m in _SEEN.finditer(text)]
    found += [(m.start(), m.group(1), m.group(3), m.group(2)) for m in _SUMMARISED.finditer(text)]
    return {name: (obs_id, value) for _, name, obs_id, value in sorted(found)}


def _number(obs_id: str) -> int:
    return int(obs_id.rsplit("-", 1)[1])


def scripted_step(request: Any) -> str:
    """One continuation for whatever a session turn of this pack asks (a handoff summary too)."""
    text = "\n".join(m["content"] for m in request.messages)
    schema = request.value_schema or {}
    if request.prefix == "" and "goal" in schema.get("properties", {}):  # the handoff summary
        allowed = schema["properties"]["found"]["items"]["properties"]["evidence_ids"].get("items", {}).get("enum", [])
        found = [{"fact": f"{name} = {value}", "evidence_ids": [obs_id] if obs_id in allowed else []}
                 for name, (obs_id, value) in _shown(text).items()][-12:]
        return json.dumps({"goal": "look facts up by name and state their values", "found": found,
                           "decided": ["each value was stated as looked up"], "left": []}, ensure_ascii=False)
    users = "\n".join(m["content"] for m in request.messages if m["role"] == "user")
    question = users.rsplit(_TURN_NOTE, 1)[1] if _TURN_NOTE in users else users.split("TASK: ", 1)[-1]
    asked = _ASKED.search(question)
    name = asked.group(1) if asked else ""
    shown = _shown(text)
    if request.prefix.startswith('{"type": "final"'):  # guided: the runtime wrote the evidence ids
        return json.dumps(f"{name} is {shown[name][1]}." if name in shown else f"{name} was not looked up.")
    if request.prefix:  # guided: the arguments of the lookup
        return json.dumps({"query": name}, ensure_ascii=False)
    finals = [b for b in schema.get("anyOf", []) if b.get("properties", {}).get("type", {}).get("const") == "final"]
    citable = finals[0]["properties"]["evidence_ids"].get("items", {}).get("enum", []) if finals else []
    lookups = sorted((i for i in citable if i.startswith(f"obs-{TOOL}-")), key=_number)
    if name in shown and shown[name][0] in citable:
        evidence = list(dict.fromkeys([shown[name][0], lookups[-1]]))  # and the latest lookup, a required tool's
        return json.dumps({"type": "final", "evidence_ids": evidence, "answer": f"{name} is {shown[name][1]}."},
                          ensure_ascii=False)
    return json.dumps({"type": "action", "tool": TOOL, "arguments": {"query": name}}, ensure_ascii=False)


def load_model(args: argparse.Namespace) -> Any:
    if args.policy == "scripted":
        from agent.models.backends.scripted import ScriptedPolicy

        return ScriptedPolicy([scripted_step] * (60 * args.turns))
    from agent.models.backends import load_policy

    model = args.model or default_model()
    if model is None:
        raise SystemExit("no --model and no downloaded model: run download_model.py first")
    return load_policy(str(model), backend=args.backend)


# -- the session ---------------------------------------------------------------------------------


def run_session(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    facts = merged_facts(work / "generated", args.facts, args.seed)
    plan = plan_turns(list(facts), args.turns, args.recall_every, args.early, args.seed)
    pack = write_pack(work / "pack", facts, plan[0][1])
    truth = load_facts(pack.knowledge_dir)  # the right values, as the tool reads them
    policy = load_model(args)
    settings = CompactionSettings(context_tokens=args.context_tokens, threshold=args.threshold,
                                  keep_recent_turns=args.keep_recent_turns)
    store = SessionStore(Path(args.sessions_dir) if args.sessions_dir else work / "sessions")
    rows: list[dict[str, Any]] = []
    with store.create(pack=pack.name, bench="long_session") as session:
        chat = Conversation(session, pack, policy, budgets=Budgets(max_seconds=args.max_seconds),
                            sampling=Sampling(temperature=args.temperature, seed=args.seed), mode=args.mode,
                            compaction=settings)
        budget = Budget.of(policy, settings, chat.registry)
        context = context_tokens(policy, settings)
        name = policy.description.name
        print(f"model {name} ({policy.description.backend}), context {context} tokens, compaction past "
              f"{settings.threshold:g} of it; pack {pack.name}: {len(facts)} facts, {args.turns} turns, "
              f"mode {args.mode or pack.task.mode}; session {session.id}", flush=True)
        print("| turn | kind | fact | s | carried msgs | carried tok | compaction | status | new obs | right |")
        print("|---|---|---|---|---|---|---|---|---|---|", flush=True)
        for number, (kind, fact) in enumerate(plan, 1):
            message = new_question(fact) if kind == "new" else recall_question(fact)
            carried = budget.size(chat.context().pairs)
            started = time.perf_counter()
            turn = chat.run_turn(message)
            seconds = time.perf_counter() - started
            result = turn.result
            answer = result.final.answer if result.final else None
            value = truth[fact]["value"]
            compaction = turn.compaction
            row = {"turn": turn.turn, "kind": kind, "fact": fact, "value": value, "seconds": round(seconds, 3),
                   "carried_messages": carried.messages, "carried_tokens": carried.tokens,
                   "compaction": None if compaction is None else {
                       k: compaction.get(k) for k in ("method", "fallback_reason", "tokens_before", "tokens_after")},
                   "status": result.status, "stop_reason": result.stop_reason, "follow_up": turn.follow_up,
                   "observations": turn.observation_ids, "answer": answer,
                   "right": answer is not None and any(states_number(answer, v) for v in right_values(fact, truth[fact])),
                   "task_success": result.metrics.task_success if result.metrics else None}
            rows.append(row)
            shown = "-" if compaction is None else (
                f"{compaction['method']} {compaction.get('tokens_before', '?')}->{compaction.get('tokens_after', '?')}")
            print(f"| {number} | {kind} | {fact} | {seconds:.1f} | {carried.messages} | {carried.tokens} | {shown} | "
                  f"{result.status}/{result.stop_reason} | {len(turn.observation_ids)} | "
                  f"{'yes' if row['right'] else 'no'} |", flush=True)
    if hasattr(policy, "close"):
        policy.close()
    finished = sum(t.state == "finished" for t in store.read(session.id).turns())  # a turn.finished record each
    return {"model": name, "backend": policy.description.backend, "context_tokens": context,
            "threshold": settings.threshold, "facts": len(facts), "pack": str(pack.root), "session": session.id,
            "rows": rows, "summary": summarize(rows, context, finished)}


def summarize(rows: list[dict[str, Any]], context: int, finished: int) -> dict[str, Any]:
    def right(kind: str) -> tuple[int, int]:
        asked = [r for r in rows if r["kind"] == kind]
        return sum(r["right"] for r in asked), len(asked)

    compactions = [r["compaction"]["method"] for r in rows if r["compaction"]]
    return {"turns": len(rows), "finished": finished, "completed": sum(r["status"] == "completed" for r in rows),
            "compactions": len(compactions), "methods": {m: compactions.count(m) for m in sorted(set(compactions))},
            "max_carried_tokens": max((r["carried_tokens"] for r in rows), default=0), "context_tokens": context,
            "recall_right": right("recall"), "new_right": right("new"),
            "median_seconds": statistics.median(r["seconds"] for r in rows) if rows else None}


def print_summary(s: dict[str, Any]) -> None:
    share = s["max_carried_tokens"] / s["context_tokens"] if s["context_tokens"] else float("nan")
    methods = ", ".join(f"{m} {n}" for m, n in s["methods"].items()) or "none"
    print("\n## summary")
    print(f"turns: {s['turns']} (finished {s['finished']}, completed {s['completed']})")
    print(f"compactions: {s['compactions']} ({methods})")
    print(f"max carried tokens: {s['max_carried_tokens']} of a {s['context_tokens']}-token context ({share:.1%})")
    print(f"recall right: {s['recall_right'][0]}/{s['recall_right'][1]}")
    print(f"new right: {s['new_right'][0]}/{s['new_right'][1]}")
    print(f"median seconds per turn: {s['median_seconds']:.2f}", flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="GGUF file or model dir (default: the downloaded 1.5B)")
    parser.add_argument("--backend", default="auto", choices=["auto", "llama_cpp", "transformers"])
    parser.add_argument("--policy", default="model", choices=["model", "scripted"],
                        help="scripted: the scripted test policy instead of a model (tests the script, not a model)")
    parser.add_argument("--turns", type=int, default=32)
    parser.add_argument("--recall-every", type=int, default=4, help="every n-th turn asks again for an early fact")
    parser.add_argument("--early", type=int, default=5, help="recalls ask for the facts of the first n turns")
    parser.add_argument("--facts", type=int, default=48, help=f"facts in the pack (at most {MAX_CHOICES}: the "
                                                              "lookup's query is then a choice of names)")
    parser.add_argument("--threshold", type=float, default=CompactionSettings().threshold,
                        help="compact when the carried conversation passes this share of the context")
    parser.add_argument("--context-tokens", type=int, default=None, help="the context compaction measures "
                                                                         "against (default: the model's)")
    parser.add_argument("--keep-recent-turns", type=int, default=CompactionSettings().keep_recent_turns)
    parser.add_argument("--mode", default="free", choices=["guided", "free"])
    parser.add_argument("--max-seconds", type=float, default=300.0, help="per turn")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0, help="the generated facts and the order they are asked in")
    parser.add_argument("--work", default=None, help="folder for the pack and the session (default: a temporary one)")
    parser.add_argument("--sessions-dir", default=None, help="keep the session here (default: inside --work)")
    parser.add_argument("--out", default=None, help="write the rows and the summary here as JSON")
    args = parser.parse_args(argv)
    if args.turns < 1 or args.recall_every < 2 or args.early < 1:
        parser.error("--turns must be at least 1, --recall-every at least 2, --early at least 1")
    if not 1 <= args.facts <= MAX_CHOICES:
        parser.error(f"--facts must be 1..{MAX_CHOICES}")
    if not 0 < args.threshold <= 1:
        parser.error("--threshold must be in (0, 1]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="long-session-"))
    report = run_session(args, work)
    print_summary(report["summary"])
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), **report}, ensure_ascii=False, indent=1),
                                  encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
