"""``generated:record_change:N``: how one group's value changed across two evaluation records.

Each pack's ``knowledge/`` holds two records in two files, keyed by a month (``2024-03``), a
quarter (``2024-Q1``) or their titles (``Spring review``), the date in the front matter, the title
or the file name; the allowed drop (``max_drop``, ``max_drop_pct``) is stated in the later record
or in a policy file of its own. The question is the change of one named group from the earlier
record to the later one -- as a difference or as a percentage rounded to one decimal -- computed
with the calculator, and whether it stays within the allowed drop. The pack's checks, expectation
and bound slots name both records by key: ``records['2024-04'].values['North']``.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction
from pathlib import Path
from typing import Any

from agent.families.packkit import NUMBER_PATTERN as NUM
from agent.families.packkit import (
    PROTECTED_STOP_REASONS, decks, expression_argument, generate, number, rounded, text_of, verdict_check
)
from agent.util.number_text import number_text

LABELS = (("North", "South", "East", "West", "Central", "Coast"),
          ("Team Red", "Team Blue", "Team Green", "Team Gold", "Team Teal", "Team Grey"),
          ("华北", "华东", "华南", "华中", "西南", "西北"))
TITLES = (("Spring review", "Autumn review"), ("Before the update", "After the update"),
          ("Pilot round", "Main round"))
OPTIONS: dict[str, tuple[Any, ...]] = {
    "variant": ("difference", "percent"),
    "case": ("gain", "small_drop", "big_drop", "edge"),
    "keys": ("month", "quarter", "title"),
    "date_in": ("front_matter", "title", "file_name"),
    "groups": (3, 4, 5, 6),
    "labels": (0, 1, 2),
    "header": ("Task Success", "Score", "Pass rate (%)"),
    "rule_place": ("later", "policy_file"),
    "rule_format": ("list", "sentence", "table"),
}
POSITIVE = "the change is within the allowed drop"
NEGATIVE = "the change is not within the allowed drop"


def _keys(d: dict[str, Any], rng: random.Random) -> tuple[str, str]:
    if d["keys"] == "month":
        year, month = rng.randint(2022, 2025), rng.randint(1, 11)
        return f"{year}-{month:02d}", f"{year}-{month + 1:02d}"
    if d["keys"] == "quarter":
        year, q = rng.randint(2022, 2025), rng.randint(1, 3)
        return f"{year}-Q{q}", f"{year}-Q{q + 1}"
    return rng.choice(TITLES)


def _change(before: Fraction, after: Fraction, variant: str) -> Fraction:
    return after - before if variant == "difference" else (after - before) / before * 100


def draw(pack_id: str, rng: random.Random, state: dict[str, Any]) -> dict[str, Any]:
    if "decks" not in state:
        state["decks"] = decks(rng, OPTIONS)
    d = {name: deck.draw() for name, deck in state["decks"].items()}
    labels = list(LABELS[d["labels"]][:d["groups"]])
    group = rng.choice(labels)
    rule = "max_drop" if d["variant"] == "difference" else "max_drop_pct"
    allowed = rng.randint(3, 8)
    before = {label: rng.randint(50, 90) for label in labels}
    after = {label: before[label] + rng.randint(-6, 6) for label in labels}
    start = Fraction(before[group])
    # the named group's later value, drawn for the case (a drop of exactly `allowed` is the edge)
    if d["variant"] == "difference":
        delta = {"gain": rng.randint(1, 8), "small_drop": -rng.randint(1, allowed - 1),
                 "big_drop": -(allowed + rng.randint(1, 6)), "edge": -allowed}[d["case"]]
        after[group] = int(start + delta)
    else:
        if d["case"] == "edge":
            # a start whose `allowed` percent is a whole number of points
            start = Fraction(100 if allowed % 2 else rng.choice((50, 100)))
            before[group] = int(start)
            after[group] = int(start - start * allowed / 100)
        else:
            pct = {"gain": rng.randint(1, 10), "small_drop": -rng.randint(1, allowed - 1),
                   "big_drop": -(allowed + rng.randint(1, 8))}[d["case"]]
            after[group] = int(start + math.floor(start * pct / 100 + Fraction(1, 2)))
            if after[group] == before[group]:
                after[group] += 1 if pct > 0 else -1
    change = _change(Fraction(before[group]), Fraction(after[group]), d["variant"])
    holds = change >= -allowed
    first, second = _keys(d, rng)
    return {"id": pack_id, "draws": d, "labels": labels, "group": group, "before": before, "after": after,
            "rule": rule, "allowed": allowed, "keys": (first, second), "change": change, "holds": holds}


# -- the records ----------------------------------------------------------------------------------

def _table(spec: dict[str, Any], values: dict[str, int]) -> str:
    header = "Group" if spec["draws"]["labels"] != 1 else "Team"
    lines = [f"| {header} | {spec['draws']['header']} |", "|---|---:|"]
    lines += [f"| {label} | {number_text(values[label])} |" for label in spec["labels"]]
    return "\n".join(lines)


def _rule_text(spec: dict[str, Any]) -> str:
    rule, allowed, form = spec["rule"], spec["allowed"], spec["draws"]["rule_format"]
    what = "points" if rule == "max_drop" else "percent"
    if form == "list":
        return f"## Rules\n\nA group may lose at most this much from one record to the next:\n\n- {rule}: {allowed}\n"
    if form == "table":
        return f"## Rules\n\n| rule | value |\n|---|---:|\n| {rule} | {allowed} |\n"
    return f"## Rules\n\nNo group may drop by more than the allowed drop ({rule} = {allowed} {what}).\n"


def files_of(spec: dict[str, Any]) -> dict[str, str]:
    d, (first, second) = spec["draws"], spec["keys"]
    out = {}
    for position, (key, values) in enumerate(((first, spec["before"]), (second, spec["after"])), start=1):
        dated = d["keys"] != "title"
        front = f"---\ndate: {key}\n---\n\n" if dated and d["date_in"] == "front_matter" else ""
        title = (f"Evaluation record {key}" if dated and d["date_in"] == "title"
                 else "Evaluation record" if dated else key)
        name = (f"record_{key}.md" if dated and d["date_in"] == "file_name"
                else f"{position}_{key.lower().replace(' ', '_')}.md" if not dated else f"record_{position}.md")
        body = (f"{front}# {title}\n\nEach group ran the same tasks.\n\n## Results\n\n{_table(spec, values)}\n")
        if position == 2 and d["rule_place"] == "later":
            body += "\n" + _rule_text(spec)
        out[f"knowledge/{name}"] = body
    if d["rule_place"] == "policy_file":
        out["knowledge/policy.md"] = "# Release policy\n\n" + _rule_text(spec).replace("## Rules\n\n", "")
    return out


# -- the task ----------------------------------------------------------------------------------------

def _task(spec: dict[str, Any]) -> dict[str, Any]:
    (k1, k2), g, rule, d = spec["keys"], spec["group"], spec["rule"], spec["draws"]
    a, b = f"records['{k1}'].values['{g}']", f"records['{k2}'].values['{g}']"
    header = d["header"]
    options = f"{{{POSITIVE}|{NEGATIVE}}}"
    if d["variant"] == "difference":
        change = f"{b} - {a}"
        goal = (f"The knowledge base holds two evaluation records, {k1} and {k2}. Find {g}'s {header} in both, use "
                f"the calculator for its change (its value in the later record minus its value in the earlier one), "
                f"and answer whether the change stays within the allowed drop ({rule}), citing the evidence.")
        calc = (f"Subtract {g}'s earlier value from its later value: later - earlier, with the two numbers the "
                "observation shows for it (numbers, not record names).")
        slot = "{number:calculator.value}"
        tail = ""
        shape = (NUM, " - ", NUM)
    else:
        change = f"({b} - {a}) / {a} * 100"
        goal = (f"The knowledge base holds two evaluation records, {k1} and {k2}. Find {g}'s {header} in both, use "
                f"the calculator for its percentage change ((later value - earlier value) / earlier value * 100), "
                f"rounded to one decimal, and answer whether the change stays within the allowed drop ({rule}, in "
                "percent), citing the evidence.")
        calc = (f"Percentage change: (later - earlier) / earlier * 100, with the two numbers the observation shows "
                f"for {g} (numbers, not record names) and parentheses around the difference.")
        slot = "{number:round(calculator.value, 1)}"
        tail = " percent"
        shape = ("\\(", NUM, " - ", NUM, "\\) / ", NUM, " \\* 100")
    form = (f"{g} went from {{number:{a}}} to {{number:{b}}}, a change of {slot}{tail}. "
            f"Check: change {{number}} >= {{number}} is {{True|False}}. So {options}.")
    allowed = f"-records['{k2}'].rules.{rule}"
    return {"id": spec["id"], "goal": goal, "required_tools": ["knowledge_search", "calculator"], "mode": "guided",
            "answer_form": form,
            "checks": [{"label": "change", "left": change, "op": ">=", "right": allowed, "right_label": rule}],
            "verdict": {"positive": [POSITIVE], "negative": [NEGATIVE]},
            "expect": [{"label": f"{g}'s change"[:60], "left": "calculator.value", "op": "==",
                        "right": change, "hint": calc[0].lower() + calc[1:].rstrip("."),
                        "arguments": expression_argument(*shape)}],
            "hints": {"knowledge_search": f"Name both records in the query: {k1} and {k2}.", "calculator": calc}}


def _expected(spec: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    (k1, k2), g, variant = spec["keys"], spec["group"], spec["draws"]["variant"]
    change = spec["change"]
    stated = rounded(change, 1) if variant == "percent" else change
    return {
        "family": "record_change", "task_id": spec["id"],
        "case": f"{variant}:{spec['draws']['case']}",
        "data": {"variant": variant, "group": g, "keys": [k1, k2], "before": spec["before"], "after": spec["after"],
                 "rule": spec["rule"], "allowed": spec["allowed"]},
        "checks": [
            {"type": "final_accepted"},
            {"type": "tool_result", "name": "both_records_read", "tool": "knowledge_search",
             "path": f"records.{k2}.values", "equals": spec["after"]},
            {"type": "tool_result", "name": "calculator_correct", "tool": "calculator", "path": "value",
             "equals": number(change)},
            {"type": "answer_numbers", "name": "answer_states_the_change",
             "numbers": [number_text(spec["before"][g]), number_text(spec["after"][g]),
                         text_of(stated, 1) if variant == "percent" else number_text(number(stated))]},
            verdict_check("answer_verdict_correct", spec["holds"], [POSITIVE], [NEGATIVE]),
        ],
        "protected_stop_reasons": list(PROTECTED_STOP_REASONS),
    }


def pack_files(pack_id: str, rng: random.Random, state: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    spec = draw(pack_id, rng, state)
    task = _task(spec)
    return {"task.json": task, **files_of(spec), "data/expected.json": _expected(spec, task)}, []


def generate_packs(out_dir: Path, n: int, seed: int) -> list[Path]:
    """Write ``n`` packs ``record_change-<seed>-<i>`` under ``out_dir``; the same (n, seed) gives the same bytes."""
    return generate(out_dir, n, seed, "record_change", pack_files)
