"""The claim gate on a corpus of answers people and small models write, in Chinese and English.

``claims_corpus.jsonl`` holds two kinds of line. An evidence set (``"set"`` with ``goal`` and
``observations``, optionally the ``guide`` a pack would declare) is what answers are judged against:
the successful Observations a Final cites, each a tool's result as that tool returns it. An answer
(``"id"``) names its set and the decision the gate must take -- ``accept``, or ``refuse`` with the
kinds of false claim (``claims.ProblemKind``) and, for a number nothing grounds, how it is written.

The decisions follow from the evidence and the wording by the rules in ``claims.py``'s docstring;
where no guide is declared, the guide is the one the default family offers, as ``TaskPack.guide`` builds it
for a pack that declares nothing.

An answer may instead list the ``claims`` it makes (the value of a row's cell, the lowest row, the
highest or lowest value of a column, a threshold, a statistic of a column, its spread, a signed
change, a list under a condition, a count, the computation a number rests on): its decision and its
kinds of false claim are then worked out here, from the evidence set's own tables and computations
(``expected_of``), not typed in, and the gate must reach the same.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agent.gate.claims import claim_problems, resolve_checks
from agent.contracts.task import AnswerGuide
from agent.contracts.decision import Observation
from agent.families import DEFAULT_FAMILY, answer_guide
from agent.task.packs import goal_language
from fractions import Fraction
import re
import statistics

CORPUS = Path(__file__).parent / "claims_corpus.jsonl"
KINDS = {"number", "attribution", "comparison", "check_missing", "check_value", "verdict", "no_verdict",
         "unanswered", "binding", "statistic", "sign", "list", "count", "computation"}


# -- the expected decision of an answer that lists its claims, from the evidence alone ----------------

def _near(stated: str, value: float) -> bool:
    """``stated`` (as written) is ``value`` exactly or rounded to the decimals it is written with."""
    decimals = len(stated.split(".")[1]) if "." in stated else 0
    slack = max(Fraction(1, 2 * 10 ** decimals) if decimals else Fraction(0), Fraction(1, 10 ** 9))  # float noise
    return abs(Fraction(stated) - Fraction(repr(float(value)))) <= slack


def _tables(evidence: dict[str, Any]) -> list[dict[str, list[Any]]]:
    """Each table of the set's knowledge results as column name -> {row label: value}."""
    out = []
    for obs in evidence["observations"]:
        for table in obs["result"].get("tables", []):
            names = [c["name"] for c in table["columns"]]
            out.append({name: {row[0]: row[i] for row in table["rows"]} for i, name in enumerate(names) if i})
    return out


def _computed(evidence: dict[str, Any]) -> list[float]:
    return [o["result"]["value"] for o in evidence["observations"] if o["tool"] == "calculator"]


def _differences(evidence: dict[str, Any]) -> list[float]:
    return [o["result"]["value"] for o in evidence["observations"]
            if o["tool"] == "calculator" and " - " in o["result"]["expression"]]


_LITERAL = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")


def _sound(expression: str, evidence: dict[str, Any]) -> bool:
    """A calculator expression (of plain numbers) computes with what the task and the evidence give:
    each sum of table cells is one column's cells, each once; every literal is a number of the goal
    (or a percentage's factor ``1 + p/100``), of a non-calculator Observation, a mean's count or 0, 1,
    2, 100; a factor multiplied in a row repeats a number of times the goal states."""
    goal = [float(v) for v in _LITERAL.findall(evidence["goal"])]
    given = set(goal) | {v / 100 for v in goal} | {1 + v / 100 for v in goal} | {0.0, 1.0, 2.0, 100.0}
    given |= {float(v) for o in evidence["observations"] if o["tool"] != "calculator"
              for v in _LITERAL.findall(json.dumps(o["result"]))}
    columns = [Counter(values.values()) for t in _tables(evidence) for values in t.values()]
    cells = {v for c in columns for v in c}
    for group in re.findall(r"\(([^()]*)\)", expression) + [expression]:
        terms = [float(t) for t in group.split("+")] if re.fullmatch(r"[\d.\s+]+", group) and "+" in group else []
        if terms and all(t in cells for t in terms) and not any(c >= Counter(terms) for c in columns):
            return False
    counts = {float(len(g.split("+"))) for g in re.findall(r"\(([^()]*)\)\s*/", expression)}
    if any(float(v) not in given | counts for v in _LITERAL.findall(expression)):
        return False
    repeats = [len(m.group(0).split("*")) for m in re.finditer(r"(\d+(?:\.\d+)?)(?:\s*\*\s*\1(?![\d.])){2,}", expression)]
    return all(float(n) in goal for n in repeats)


def _meets(column: dict[str, float], op: str, threshold: float) -> set[str]:
    ops = {"<": lambda v: v < threshold, "<=": lambda v: v <= threshold, ">": lambda v: v > threshold,
           ">=": lambda v: v >= threshold}
    return {label for label, value in column.items() if ops[op](value)}


def _failed_kind(claim: dict[str, Any], evidence: dict[str, Any]) -> str | None:
    """The kind of false claim ``claim`` is on this evidence, or None when it holds."""
    tables, kind = _tables(evidence), claim["claim"]
    if kind == "answers":
        return None if claim["holds"] else "unanswered"
    if kind == "cell":
        held = [t[claim["column"]][claim["row"]] for t in tables if claim["row"] in t.get(claim["column"], {})]
        return None if any(_near(claim["stated"], v) for v in held) else "binding"
    if kind == "extremum":
        pick = min if claim["which"] == "min" else max
        ok = any(t[claim["column"]][claim["row"]] == pick(t[claim["column"]].values())
                 for t in tables if claim["row"] in t.get(claim["column"], {}))
        return None if ok else "binding"
    if kind == "extreme":  # the highest or lowest value of a column, no row named
        pick = min if claim["which"] == "min" else max
        ok = any(_near(claim["stated"], pick(t[claim["column"]].values())) for t in tables if claim["column"] in t)
        return None if ok else "binding"
    if kind == "spread":  # the highest minus the lowest of a column
        ok = any(_near(claim["stated"], max(c.values()) - min(c.values())) for t in tables
                 if (c := t.get(claim["column"])))
        return None if ok else "statistic"
    if kind == "rests":  # the computation whose value the answer states (either sign) is sound
        size = claim["stated"].lstrip("-")
        on = [o["result"]["expression"] for o in evidence["observations"]
              if o["tool"] == "calculator" and _near(size, abs(o["result"]["value"]))]
        return None if on and all(_sound(e, evidence) for e in on) else "computation"
    if kind == "threshold":
        prose = " ".join(t["prose"] for o in evidence["observations"] for t in o["result"].get("tables", []))
        rules = [float(v) for v in re.findall(r"^- [^:\n]+:\s*([\d.]+)\s*$", prose, re.MULTILINE)]
        return None if any(_near(claim["stated"], v) for v in rules) else "binding"
    if kind == "statistic":
        of = {"mean": statistics.fmean, "median": statistics.median}[claim["stat"]]
        values = [of(list(t[claim["column"]].values())) for t in tables if claim["column"] in t]
        return None if any(_near(claim["stated"], v) for v in values) else "statistic"
    if kind in ("change", "gap"):
        size = claim["stated"].lstrip("-")
        negative = claim["stated"].startswith("-") or claim.get("sign") == -1
        for value in _differences(evidence):
            if _near(size, abs(value)) and (kind == "gap" or negative == (value < 0)):
                return None
        same_size = any(_near(size, abs(value)) for value in _differences(evidence))
        return "sign" if kind == "change" and same_size else "statistic"
    if kind in ("list", "count"):
        for t in tables:
            column = t.get(claim["column"], {})
            if not all(m in column for m in claim["members"]):
                continue
            meets = _meets(column, claim["op"], claim["threshold"])
            if kind == "list" and set(claim["members"]) == meets:
                return None
            if kind == "count" and claim["stated"] == len(claim["members"]):
                return None
        return kind
    raise AssertionError(f"unknown claim {kind}")


def expected_of(item: dict[str, Any], sets: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The item with its ``decision`` and ``problems`` worked out from its ``claims``."""
    if "claims" not in item:
        return item
    kinds = sorted({k for c in item["claims"] if (k := _failed_kind(c, sets[item["set"]])) is not None})
    return {**item, "decision": "refuse" if kinds else "accept", "problems": kinds}


def _load() -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    sets, items = {}, []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if "id" in record:
            items.append(record)
        else:
            sets[record["set"]] = record
    return sets, [expected_of(item, sets) for item in items]


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
    from agent.gate.attribution import sites
    from agent.contracts.decision import Observation

    result = {"query": "Turku hospital beds 2015", "fact": "Turku hospital beds 2015", "value": 4535, "unit": "beds"}
    named = [s for s in sites([Observation(id="obs-lookup_fact-1", tool="lookup_fact", ok=True, result=result)])
             if s.named]
    assert [s.name() for s in named] == ["Turku hospital beds 2015"]
    wrapped = {"query": "The value of the fact 'Turku population' is", "fact": "Turku population", "value": 1}
    named = [s for s in sites([Observation(id="obs-lookup_fact-2", tool="lookup_fact", ok=True, result=wrapped)])
             if s.named]
    assert [s.labels for s in named] == [("Turku population",)]
