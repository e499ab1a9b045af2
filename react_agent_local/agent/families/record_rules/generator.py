"""``generated:record_rules:N``: one evaluation record under a rule other than the release rule.

Each pack's ``knowledge/`` holds one record (a table of groups, some with diagnostic columns, and
named thresholds in one of five shapes: a list, a sentence, a ``| rule | value |`` table, a fenced
YAML block, front matter), sometimes a notes file beside it, and sometimes a near-miss rule (a
``review_floor`` beside the ``floor``). The question is one of:

    gap       the lowest value minus the floor (calculator), and whether every group meets the floor
    spread    highest minus lowest (calculator) against a spread limit
    lowest    which group is lowest (a {name:...} slot), and whether it reaches the floor
    highest   which group is highest, and whether every group stays within the ceiling
    average   the average (calculator) against a target under a name of its own

The pack declares its answer form with bound slots, its checks and verdict and, where the
calculator computes, what its value must equal -- all in the check language, over ``record``.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction
from pathlib import Path
from typing import Any

from agent.families.packkit import NUMBER_PATTERN as NUM
from agent.families.packkit import (
    PROTECTED_STOP_REASONS, decks, expression_argument, generate, number, verdict_check
)
from agent.util.number_text import number_text

QUESTIONS = ("gap", "spread", "lowest", "highest", "average")
LABELS = {
    "region": ("North", "South", "East", "West", "Central", "Coast", "Valley"),
    "team": ("Team Red", "Team Blue", "Team Green", "Team Gold", "Team Teal", "Team Grey", "Team Plum"),
    "site": ("Site Alpha", "Site Beta", "Site Gamma", "Site Delta", "Site Omega", "Site Sigma", "Site Kappa"),
    "zh": ("华北", "华东", "华南", "华中", "西南", "西北", "东北"),
}
LABEL_HEADERS = {"region": "Region", "team": "Team", "site": "Site", "zh": "Group"}
RULE_NAMES = {
    "gap": ("floor", "min_value", "lower_bound", "minimum"),
    "lowest": ("floor", "min_value", "lower_bound", "minimum"),
    "spread": ("max_spread", "spread_limit", "max_gap"),
    "highest": ("ceiling", "max_value", "upper_bound"),
    "average": ("target_average", "average_target", "mean_target"),
}
NEAR_MISS = {"gap": "review_floor", "lowest": "floor_next_quarter", "spread": "spread_warning",
             "highest": "ceiling_next_quarter", "average": "average_last_quarter"}
OPTIONS: dict[str, tuple[Any, ...]] = {
    "question": QUESTIONS,
    "holds": (True, False),
    "edge": (True, False, False),
    "groups": (3, 4, 5, 6, 7),
    "labels": tuple(LABELS),
    "header": ("Task Success", "Score", "Pass rate (%)", "Accuracy", "Uptime (%)"),
    "decimals": (False, True),
    "rule_format": ("list", "sentence", "table", "yaml", "front_matter"),
    "near_miss": (False, True),
    "diagnostics": ((), ("Tasks",), ("Tasks", "Steps")),
    "dated": (True, False),
    "notes": (False, True),
    "title": ("Checkout agent review", "Search quality record", "Support bot evaluation", "Routing evaluation"),
}

POSITIVE = {"gap": "every group meets the floor", "lowest": "every group meets the floor",
            "spread": "the spread rule is met", "highest": "every group stays within the ceiling",
            "average": "the target is reached"}
NEGATIVE = {"gap": "not every group meets the floor", "lowest": "not every group meets the floor",
            "spread": "the spread rule is not met", "highest": "not every group stays within the ceiling",
            "average": "the target is not reached"}


def _values(rng: random.Random, n: int, decimals: bool, question: str) -> list[int | float]:
    """n distinct values (one smallest, one largest); for an average, one whose mean has at most two decimals."""
    step = 1 if decimals else 10  # in tenths
    while True:
        tenths = rng.sample(range(400, 990, step), n)
        if decimals and all(t % 10 == 0 for t in tenths):
            tenths[0] += 3
        if question == "average":
            while (10 * sum(tenths)) % n:
                i = rng.randrange(n)
                tenths[i] += step if tenths[i] < 900 else -step
        if len(set(tenths)) == n:
            return [number(Fraction(t, 10)) for t in tenths]


def frac(value: int | float) -> Fraction:
    return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)


def _threshold(value: Fraction, question: str, holds: bool, edge: bool, rng: random.Random) -> int | float:
    """A threshold that ``value`` meets (or misses) under the question's rule; ``edge``: exactly at
    it when it holds, one whole unit past it when it does not."""
    upper = question in ("spread", "highest")  # the rule is value <= threshold
    k = 1 if edge else rng.randint(1, 5)
    if holds:
        return number(value) if edge else number(math.ceil(value) + k if upper else math.floor(value) - k)
    if upper:
        return number(max(0, math.ceil(value) - k if edge else math.floor(value) - k))
    return number(math.floor(value) + k if edge else math.ceil(value) + k)


def draw(pack_id: str, rng: random.Random, state: dict[str, Any]) -> dict[str, Any]:
    if "decks" not in state:
        state["decks"] = decks(rng, OPTIONS)
    d = {name: deck.draw() for name, deck in state["decks"].items()}
    question, n = d["question"], d["groups"]
    labels = list(LABELS[d["labels"]][:n])
    values = _values(rng, n, d["decimals"], question)
    exact = [frac(v) for v in values]
    measured = {"gap": min(exact), "lowest": min(exact), "highest": max(exact),
                "spread": max(exact) - min(exact), "average": sum(exact) / n}[question]
    threshold = _threshold(measured, question, d["holds"], d["edge"], rng)
    rule = rng.choice(RULE_NAMES[question])
    rules = {rule: threshold}
    if d["near_miss"]:
        rules[NEAR_MISS[question]] = number(frac(threshold) + rng.choice((-7, -4, 3, 6)))
    date = f"2024-{rng.randint(1, 12):02d}" if d["dated"] else None
    return {"id": pack_id, "draws": d, "question": question, "labels": labels, "values": values, "rule": rule,
            "rules": rules, "date": date, "title": d["title"] + (f" {date}" if date else ""),
            "holds": _holds(question, values, threshold)}


def _holds(question: str, values: list[int | float], threshold: int | float) -> bool:
    exact, t = [frac(v) for v in values], frac(threshold)
    if question in ("gap", "lowest"):
        return min(exact) >= t
    if question == "highest":
        return max(exact) <= t
    if question == "spread":
        return max(exact) - min(exact) <= t
    return sum(exact) / len(exact) >= t


# -- the record ------------------------------------------------------------------------------------

def _table(spec: dict[str, Any], rng: random.Random) -> str:
    d = spec["draws"]
    columns = list(d["diagnostics"])
    value_at = rng.randint(0, len(columns))
    headers = list(columns)
    headers.insert(value_at, d["header"])
    pct = "%" if d["header"].endswith("(%)") and rng.random() < 0.5 else ""
    lines = [f"| {LABEL_HEADERS[d['labels']]} | " + " | ".join(headers) + " |", "|---|" + "---:|" * len(headers)]
    for label, value in zip(spec["labels"], spec["values"]):
        cells = [str(rng.randint(20, 80)) if c == "Tasks" else f"{rng.uniform(2, 8):.1f}" for c in columns]
        cells.insert(value_at, number_text(value) + pct)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _rules_text(spec: dict[str, Any], rng: random.Random) -> tuple[str, str]:
    """(front matter lines of the rules, the rules section's body) in the drawn shape."""
    rules, form = spec["rules"], spec["draws"]["rule_format"]
    if form == "front_matter":
        return "rules:\n" + "".join(f"  {k}: {number_text(v)}\n" for k, v in rules.items()), \
            "The thresholds are in this file's front matter (rules)."
    if form == "list":
        return "", "The record is judged by these thresholds:\n\n" + "\n".join(
            f"- {k}: {number_text(v)}" for k, v in rules.items())
    if form == "table":
        return "", "| rule | value |\n|---|---:|\n" + "\n".join(f"| {k} | {number_text(v)} |" for k, v in rules.items())
    if form == "yaml":
        return "", "```yaml\nrules:\n" + "".join(f"  {k}: {number_text(v)}\n" for k, v in rules.items()) + "```"
    op = rng.choice(("=", ":", "≥" if spec["question"] in ("gap", "lowest", "average") else "≤"))
    sentences = [f"One threshold applies here ({k} {op} {number_text(v)})." if i == 0 else
                 f"A second one is kept for later reviews ({k} {op} {number_text(v)})."
                 for i, (k, v) in enumerate(rules.items())]
    return "", " ".join(sentences)


def record_text(spec: dict[str, Any]) -> str:
    rng = random.Random(spec["id"])  # cells of the diagnostics: stable per pack
    front_rules, body = _rules_text(spec, rng)
    front = ""
    if front_rules or spec["date"]:
        front = "---\n" + (f"date: {spec['date']}\n" if spec["date"] else "") + front_rules + "---\n\n"
    return (f"{front}# {spec['title']}\n\nEach group was evaluated on the same tasks; the other columns are "
            f"diagnostics.\n\n## Results by group\n\n{_table(spec, rng)}\n\n## Rules\n\n{body}\n")


# -- the task ----------------------------------------------------------------------------------------

def _task(spec: dict[str, Any]) -> dict[str, Any]:
    q, rule, header, title = spec["question"], spec["rule"], spec["draws"]["header"], spec["title"]
    r = f"record.rules.{rule}"
    verdict = {"positive": [POSITIVE[q]], "negative": [NEGATIVE[q]]}
    options = f"{{{POSITIVE[q]}|{NEGATIVE[q]}}}"
    lead = f"The knowledge base holds the {title} record. "
    if q == "gap":
        goal = (lead + f"Find the lowest {header} value and the floor ({rule}); use the calculator for the gap "
                f"(the lowest value minus {rule}), then answer whether every group meets the floor, citing the evidence.")
        form = (f"The lowest value is {{number:min(record.values)}} and {rule} is {{number:{r}}}, so the gap is "
                f"{{number:calculator.value}}. Check: lowest {{number}} >= {{number}} is {{True|False}}. So {options}.")
        checks = [{"label": "lowest", "left": "min(record.values)", "op": ">=", "right": r, "right_label": rule}]
        expect = [{"label": f"the lowest value minus {rule}", "left": "calculator.value", "op": "==",
                   "right": f"min(record.values) - {r}", "hint": f"the lowest value the observation states minus {rule}",
                   "arguments": expression_argument(NUM, " - ", NUM)}]
        calc = (f"Subtract {rule} from the lowest value: lowest - {rule}, with the numbers the observation states "
                f"as lowest and as {rule}.")
    elif q == "spread":
        goal = (lead + f"Find the highest and the lowest {header} values and the spread rule ({rule}); use the "
                f"calculator for the spread (highest minus lowest), then answer whether the spread rule is met "
                f"(spread <= {rule}), citing the evidence.")
        form = (f"The highest value is {{number:max(record.values)}} and the lowest is {{number:min(record.values)}}, "
                f"so the spread is {{number:calculator.value}}. Check: spread {{number}} <= {{number}} is {{True|False}}. "
                f"So {options}.")
        checks = [{"label": "spread", "left": "max(record.values) - min(record.values)", "op": "<=", "right": r,
                   "right_label": rule}]
        expect = [{"label": "the highest value minus the lowest", "left": "calculator.value", "op": "==",
                   "right": "max(record.values) - min(record.values)",
                   "hint": "the highest value the observation states minus the lowest",
                   "arguments": expression_argument(NUM, " - ", NUM)}]
        calc = ("Subtract the lowest value from the highest: highest - lowest, with the two numbers the observation "
                "states as highest and lowest.")
    elif q == "lowest":
        goal = (lead + f"Which group has the lowest {header}, and does every group reach the floor ({rule})? "
                "Answer citing the evidence.")
        form = (f"The lowest group is {{name:argmin(record.values)}} with {{number:min(record.values)}}. "
                f"Check: {{number}} >= {{number}} is {{True|False}}. So {options}.")
        checks = [{"label": "lowest", "left": "min(record.values)", "op": ">=", "right": r, "right_label": rule}]
        expect, calc = [], None
    elif q == "highest":
        goal = (lead + f"Which group has the highest {header}, and does every group stay at or below the ceiling "
                f"({rule})? Answer citing the evidence.")
        form = (f"The highest group is {{name:argmax(record.values)}} with {{number:max(record.values)}}. "
                f"Check: {{number}} <= {{number}} is {{True|False}}. So {options}.")
        checks = [{"label": "highest", "left": "max(record.values)", "op": "<=", "right": r, "right_label": rule}]
        expect, calc = [], None
    else:
        goal = (lead + f"Use the calculator for the average {header} of all groups and answer whether it reaches "
                f"the target ({rule}), citing the evidence.")
        form = (f"The average is {{number:calculator.value}}. Check: average {{number}} >= {{number}} is "
                f"{{True|False}}. So {options}.")
        checks = [{"label": "average", "left": "mean(record.values)", "op": ">=", "right": r, "right_label": rule}]
        n = len(spec["values"])
        expect = [{"label": f"the average of the {n} values", "left": "calculator.value", "op": "==",
                   "right": "mean(record.values)",
                   "hint": f"the sum of all {n} values, in parentheses, divided by {n}",
                   "arguments": expression_argument("\\(", " \\+ ".join([NUM] * n), f"\\) / {n}")}]
        calc = f"The average is (sum of all {n} values) / {n}, with parentheses around the sum."
    tools = ["knowledge_search", "calculator"] if calc else ["knowledge_search"]
    task = {"id": spec["id"], "goal": goal, "required_tools": tools, "mode": "guided", "answer_form": form,
            "checks": checks, "verdict": verdict, "expect": expect,
            "hints": {"knowledge_search": "Ask in a few words for the record's values and its rules."}}
    if calc:
        task["hints"]["calculator"] = calc
    return task


def _expected(spec: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    q, values, rules, rule = spec["question"], spec["values"], spec["rules"], spec["rule"]
    exact = [frac(v) for v in values]
    low, high = min(exact), max(exact)
    key = spec["date"] or spec["title"]
    threshold = rules[rule]
    checks: list[dict[str, Any]] = [
        {"type": "final_accepted"},
        {"type": "tool_result", "name": "record_read", "tool": "knowledge_search", "path": f"records.{key}.values",
         "equals": dict(zip(spec["labels"], values))},
    ]
    numbers: list[Any] = []
    if q in ("gap", "spread", "average"):
        value = {"gap": low - frac(threshold), "spread": high - low, "average": sum(exact) / len(exact)}[q]
        checks.append({"type": "tool_result", "name": "calculator_correct", "tool": "calculator", "path": "value",
                       "equals": number(value)})
        numbers.append(number_text(number(value)))
    if q in ("gap", "lowest"):
        numbers.append(number_text(number(low)))
        comparison = [number(low), ">=", threshold]
    elif q == "highest":
        numbers.append(number_text(number(high)))
        comparison = [number(high), "<=", threshold]
    elif q == "spread":
        comparison = [number(high - low), "<=", threshold]
    else:
        comparison = [number(sum(exact) / len(exact)), ">=", threshold]
    if q == "lowest":
        numbers.append(spec["labels"][exact.index(low)])
    if q == "highest":
        numbers.append(spec["labels"][exact.index(high)])
    checks += [{"type": "answer_numbers", "name": "answer_states_the_values", "numbers": numbers},
               verdict_check("answer_verdict_correct", spec["holds"], task["verdict"]["positive"],
                             task["verdict"]["negative"]),
               {"type": "answer_comparisons", "name": "answer_checks_right", "comparisons": [comparison]}]
    return {"family": "record_rules", "task_id": spec["id"], "case": f"{q}:{'holds' if spec['holds'] else 'fails'}",
            "data": {"question": q, "values": dict(zip(spec["labels"], values)), "rules": rules, "rule": rule,
                     "record": key},
            "checks": checks, "protected_stop_reasons": list(PROTECTED_STOP_REASONS)}


def pack_files(pack_id: str, rng: random.Random, state: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    spec = draw(pack_id, rng, state)
    task = _task(spec)
    name = "record.md" if not spec["date"] else f"review_{spec['date']}.md"
    files: dict[str, Any] = {"task.json": task, f"knowledge/{name}": record_text(spec),
                             "data/expected.json": _expected(spec, task)}
    if spec["draws"]["notes"]:
        files["knowledge/notes.md"] = ("# Notes\n\nThe groups were evaluated in the same week. Diagnostics columns "
                                       "are for the engineers and decide nothing.\n")
    return files, []


def generate_packs(out_dir: Path, n: int, seed: int) -> list[Path]:
    """Write ``n`` packs ``record_rules-<seed>-<i>`` under ``out_dir``; the same (n, seed) gives the same bytes."""
    return generate(out_dir, n, seed, "record_rules", pack_files)
