"""The claim gate on a corpus of answers people and small models write, in Chinese and English.

``claims_corpus.jsonl`` holds two kinds of line. An evidence set (``"set"`` with ``goal`` and
``observations``, optionally the ``guide`` a pack would declare) is what answers are judged against:
the successful Observations a Final cites, each a tool's result as that tool returns it. An answer
(``"id"``) names its set and the decision the gate must take -- ``accept``, or ``refuse`` with the
kinds of false claim (``claims.ProblemKind``) and, for a number nothing grounds, how it is written.

The decisions follow from the evidence and the wording by the rules in ``claims.py``'s docstring;
where no guide is declared, the guide is the one the default family offers, as ``TaskPack.guide`` builds it
for a pack that declares nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agent.claims import claim_problems, resolve_checks
from agent.contracts import AnswerGuide, Observation
from agent.families import DEFAULT_FAMILY, answer_guide
from agent.packs import goal_language

CORPUS = Path(__file__).parent / "claims_corpus.jsonl"
KINDS = {"number", "attribution", "comparison", "check_missing", "check_value", "verdict", "no_verdict"}


def _load() -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    sets, items = {}, []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if "id" in record:
            items.append(record)
        else:
            sets[record["set"]] = record
    return sets, items


SETS, ITEMS = _load()


def _judge(item: dict[str, Any]):
    evidence = SETS[item["set"]]
    observations = [Observation(id=f"obs-{o['tool']}-{i}", tool=o["tool"], ok=True, result=o["result"])
                    for i, o in enumerate(evidence["observations"], start=1)]
    latest = {o.tool: o for o in observations}
    guide = AnswerGuide.model_validate(evidence["guide"]) if evidence.get("guide") else None
    if guide is None:  # the default family's guide, as packs.TaskPack.guide finds it
        offered = answer_guide(DEFAULT_FAMILY, latest, goal_language(evidence["goal"]))
        guide = AnswerGuide.model_validate(offered) if offered else None
    checks = resolve_checks(guide.checks, latest) if guide else []
    return claim_problems(item["answer"], observations, evidence["goal"], guide, checks)


def test_the_corpus_is_large_and_balanced():
    assert len(ITEMS) >= 100 and len({i["id"] for i in ITEMS}) == len(ITEMS)
    languages = Counter(SETS[i["set"]]["lang"] for i in ITEMS)
    decisions = Counter((SETS[i["set"]]["lang"], i["decision"]) for i in ITEMS)
    assert languages["zh"] >= 40 and languages["en"] >= 40
    assert all(decisions[(lang, d)] >= 20 for lang in ("zh", "en") for d in ("accept", "refuse")), decisions
    found = Counter(kind for i in ITEMS for kind in i.get("problems", []))
    assert set(found) == KINDS, found  # every kind of false claim is in the corpus
    for item in ITEMS:
        assert item["set"] in SETS, item["id"]
        assert (item["decision"] == "accept") == (not item.get("problems")), item["id"]
        assert set(item.get("problems", [])) <= KINDS, item["id"]
        assert ("number" in item.get("problems", [])) == bool(item.get("numbers")), item["id"]


@pytest.mark.parametrize("item", ITEMS, ids=[i["id"] for i in ITEMS])
def test_the_gate_decides_each_answer_as_its_evidence_says(item):
    problems = _judge(item)
    shown = [f"{p.kind}: {p.text}" for p in problems]
    if item["decision"] == "accept":
        assert problems == [], shown
        return
    assert {p.kind for p in problems} == set(item["problems"]), shown
    named = " ".join(p.text for p in problems if p.kind == "number")
    for written in item.get("numbers", []):
        assert f"the number {written} appears" in named, shown


def test_a_facts_name_that_holds_its_unit_stays_its_label():
    """A label wrapping another with three words more is a query the model wrote around a fact's name,
    and is dropped; but a fact's own name holds its unit ('Turku hospital beds 2015' holds 'beds') and
    is no query: it stays the site's name."""
    from agent.attribution import sites
    from agent.contracts import Observation

    result = {"query": "Turku hospital beds 2015", "fact": "Turku hospital beds 2015", "value": 4535, "unit": "beds"}
    named = [s for s in sites([Observation(id="obs-lookup_fact-1", tool="lookup_fact", ok=True, result=result)])
             if s.named]
    assert [s.name() for s in named] == ["Turku hospital beds 2015"]
    wrapped = {"query": "The value of the fact 'Turku population' is", "fact": "Turku population", "value": 1}
    named = [s for s in sites([Observation(id="obs-lookup_fact-2", tool="lookup_fact", ok=True, result=wrapped)])
             if s.named]
    assert [s.labels for s in named] == [("Turku population",)]
