"""The release-rule family's pack generator (``generated:N``, ``generated:release_rule:N``): task
packs of the AgentEval kind, deterministic from a seed.

A pack is the folder every other pack is: ``task.json``, ``knowledge/<record>.md`` and
``data/expected.json`` (the legacy ground-truth format ``metrics.py`` reads). Each pack has 2-8
groups with a release rule (``average_gte``, ``every_batch_gte``) and one of four verdict cases:

    both        the average and the floor rule hold        -> eligible
    avg_fails   only the average is below its threshold    -> not eligible
    floor_fails only the lowest group is below the floor   -> not eligible
    both_fail   both rules fail                            -> not eligible

Every varied property (case, group count, names, value column header, rule format, language ...)
is drawn from a shuffled deck of its options, so over N packs each option appears N/k times (±1)
instead of whatever a coin gives; ``generate_packs(..., only={"rule_format": ("list",)})`` narrows
a deck (tests use it to pick formats today's knowledge parser reads).

Numbers. Values are integers or have one decimal place; they are nudged until the average has at
most two decimals, so the calculator's exact value, ``round(sum / n, 2)`` and the number a correct
answer states are one and the same. A threshold that holds equals its value in about a third of the
packs (inclusive ``>=`` edge); one that fails is sometimes just one unit above.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from agent.families.packkit import PROTECTED_STOP_REASONS, Deck
from agent.util.number_text import number_text

CASES = ("both", "avg_fails", "floor_fails", "both_fail")

# kind of group (the ``family`` option) -> (English noun, Chinese noun, label header (en), label header (zh), names)
GROUP_KINDS: dict[str, tuple[str, str, str, str, tuple[str, ...]]] = {
    "batch": ("batch", "批次", "Batch", "批次", tuple(f"Batch {c}" for c in "ABCDEFGH")),
    "region": ("region", "地区", "Region", "地区",
               ("North", "South", "East", "West", "Central", "Northeast", "Northwest", "Southeast")),
    "team": ("team", "团队", "Team", "团队",
             tuple(f"Team {c}" for c in ("Red", "Blue", "Green", "Gold", "Silver", "Orange", "Purple", "Teal"))),
    "site": ("site", "站点", "Site", "站点", tuple(f"Site {i}" for i in range(1, 9))),
    "cohort": ("cohort", "队列", "Cohort", "队列", tuple(f"Cohort {c}" for c in "XYZWVUTS")),
    "region_zh": ("region", "地区", "Region", "地区", ("华北", "华东", "华南", "华中", "西南", "西北", "东北", "总部")),
    "group_zh": ("group", "分组", "Group", "分组", ("甲组", "乙组", "丙组", "丁组", "戊组", "己组", "庚组", "辛组")),
}
PLURALS = {"batch": "batches"}

OPTIONS: dict[str, tuple[Any, ...]] = {
    "case": CASES,
    "groups": tuple(range(2, 9)),
    "family": tuple(GROUP_KINDS),
    "language": ("en", "zh"),
    "header": ("Task Success", "task_success", "TaskSuccess", "Task Success (%)", "任务成功率"),
    "percent": (False, True),
    "value_kind": ("integer", "decimal"),
    "rule_format": ("list", "sentence", "table", "yaml", "front_matter"),
    "sentence_operator": ("=", ":", "≥"),
    "diagnostics": (0, 1, 2),
    "goal_template": (0, 1),
    "record_name": ("record.md", "evaluation_record.md", "release_review.md", "eval_notes.md"),
    "avg_edge": (True, False, False),
    "floor_edge": (True, False, False),
}

GOALS = {
    "en": (
        ("Find the Task Success of every {noun} and the release rule in the knowledge base, compute the average "
        "with the calculator, plot the {nouns} with the average line, then give a Final answer that states the "
        "average, the lowest {noun} value and whether the release rule is met, citing the evidence."),
        ("Using the evaluation record in the knowledge base, look up each {noun}'s Task Success and the release "
        "rule, use the calculator for the average Task Success, draw a bar chart of the {nouns} with the average "
        "line, and finish with an answer that gives the average, the lowest {noun} value and whether the build "
        "may be released, citing the evidence ids."),
    ),
    "zh": (
        ("在知识库中找到每个{noun}的任务成功率和发布规则，用计算器计算平均值，画出各{noun}的柱状图并画出平均线，"
        "然后给出最终答案：说明平均值、最低{noun}值以及是否满足发布规则，并引用证据。"),
        ("根据知识库中的评测记录，查出每个{noun}的任务成功率和发布规则，用计算器求平均任务成功率，绘制各{noun}的"
        "柱状图并标出平均线，最后回答：平均值是多少、最低的{noun}值是多少、是否可以发布，并引用证据编号。"),
    ),
}

DIAGNOSTICS = {  # header (en, zh) -> a cell for one row
    "tasks": (("Tasks", "任务数"), lambda rng: str(rng.randint(20, 80))),
    "valid": (("Valid Action Rate", "有效动作率"), lambda rng: f"{rng.uniform(0.8, 0.99):.2f}"),
    "steps": (("Steps", "平均步数"), lambda rng: f"{rng.uniform(2, 8):.1f}"),
    "latency": (("Median latency (s)", "延迟中位数（秒）"), lambda rng: f"{rng.uniform(3, 40):.1f}"),
}


def _num(tenths: Fraction | int) -> int | float:
    exact = Fraction(tenths) / 10
    return int(exact) if exact.denominator == 1 else float(exact)


@dataclass(frozen=True)
class PackSpec:
    """Everything one generated pack is made of; ``files()`` renders it."""

    id: str
    case: str
    labels: tuple[str, ...]
    values: tuple[int | float, ...]
    average_gte: int | float
    every_batch_gte: int | float
    draws: dict[str, Any]

    @property
    def average(self) -> int | float:
        exact = sum(Fraction(str(v)) for v in self.values) / len(self.values)
        return int(exact) if exact.denominator == 1 else float(exact)

    @property
    def lowest(self) -> int | float:
        return min(self.values)

    @property
    def eligible(self) -> bool:
        return self.average >= self.average_gte and self.lowest >= self.every_batch_gte

    def task(self) -> dict[str, Any]:
        noun = GROUP_KINDS[self.draws["family"]][0 if self.draws["language"] == "en" else 1]
        goal = GOALS[self.draws["language"]][self.draws["goal_template"]]
        return {"id": self.id, "family": "release_rule", "mode": "guided",
                "required_tools": ["knowledge_search", "calculator", "plot"],
                "goal": goal.format(noun=noun, nouns=PLURALS.get(noun, noun + "s"))}

    def expected(self) -> dict[str, Any]:
        return {
            "task_id": self.id,
            "knowledge": {"batches": dict(zip(self.labels, self.values)),
                          "release_rule": {"average_gte": self.average_gte, "every_batch_gte": self.every_batch_gte}},
            "calculator": {"value": self.average},
            "plot": {"labels": list(self.labels), "values": list(self.values), "average": self.average},
            "final": {"must_include": [number_text(self.average), number_text(self.lowest)],
                      "release_eligible": self.eligible},
            "causal_order": ["knowledge_search", "calculator", "plot"],
            "protected_stop_reasons": list(PROTECTED_STOP_REASONS),
        }

    def files(self) -> dict[str, str]:
        return {
            "task.json": json.dumps(self.task(), ensure_ascii=False, indent=2) + "\n",
            f"knowledge/{self.draws['record_name']}": render_record(self),
            "data/expected.json": json.dumps(self.expected(), ensure_ascii=False, indent=2) + "\n",
        }


# -- the record file ------------------------------------------------------------------------------

def _table(spec: PackSpec, rng: random.Random) -> str:
    d, zh = spec.draws, spec.draws["language"] == "zh"
    family = GROUP_KINDS[d["family"]]
    label_header = family[3] if zh else family[2]
    extra = rng.sample(sorted(DIAGNOSTICS), d["diagnostics"])
    columns = [(DIAGNOSTICS[k][0][zh], DIAGNOSTICS[k][1]) for k in extra]
    value_at = rng.randint(0, len(columns))  # the value column may sit among the diagnostics
    pct = "%" if d["percent"] else ""
    headers = [h for h, _ in columns]
    headers.insert(value_at, d["header"])
    lines = [f"| {label_header} | " + " | ".join(headers) + " |",
             "|---|" + "---:|" * len(headers)]
    for label, value in zip(spec.labels, spec.values):
        cells = [cell(rng) for _, cell in columns]
        cells.insert(value_at, number_text(value) + pct)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _rule(spec: PackSpec) -> tuple[str, str]:
    """(front matter, rule section body) for the drawn rule format."""
    a, f = number_text(spec.average_gte), number_text(spec.every_batch_gte)
    zh, form = spec.draws["language"] == "zh", spec.draws["rule_format"]
    if form == "front_matter":
        body = ("阈值见文件开头的 release_rule。两个阈值都包含等于。" if zh else
                "The thresholds are in this file's front matter (release_rule); both are inclusive.")
        return f"---\ntitle: evaluation record\nrelease_rule:\n  average_gte: {a}\n  every_batch_gte: {f}\n---\n\n", body
    if form == "list":
        lead = "两个阈值都必须满足（包含等于）：" if zh else "Both thresholds must hold (inclusive):"
        return "", f"{lead}\n\n- average_gte: {a}\n- every_batch_gte: {f}"
    if form == "sentence":
        op = spec.draws["sentence_operator"]
        if zh:
            return "", (f"平均值达到阈值（average_gte {op} {a}）且每个分组都不低于下限（every_batch_gte {op} {f}）"
                        "时才可以发布。")
        return "", (f"Release only when the average is high enough (average_gte {op} {a}) and no group is "
                    f"below the floor (every_batch_gte {op} {f}).")
    if form == "table":
        head = "| 规则 | 数值 |" if zh else "| rule | value |"
        return "", f"{head}\n|---|---:|\n| average_gte | {a} |\n| every_batch_gte | {f} |"
    if form == "yaml":
        return "", f"```yaml\nrelease_rule:\n  average_gte: {a}\n  every_batch_gte: {f}\n```"
    raise ValueError(f"unknown rule format {form!r}")


def render_record(spec: PackSpec) -> str:
    rng = random.Random(spec.id)  # diagnostics cells: stable per pack, independent of the draw order
    zh = spec.draws["language"] == "zh"
    front, rule = _rule(spec)
    if zh:
        return (f"{front}# 评测记录\n\n各{GROUP_KINDS[spec.draws['family']][1]}使用同一批任务评测，表中其他列只是诊断信息。\n\n"
                f"## 各组任务成功率\n\n{_table(spec, rng)}\n\n## 发布规则\n\n{rule}\n")
    return (f"{front}# Evaluation record\n\nEach group was evaluated on the same tasks; the other columns are "
            f"diagnostics.\n\n## Task Success by group\n\n{_table(spec, rng)}\n\n## Release rule\n\n{rule}\n")


# -- drawing the numbers ----------------------------------------------------------------------------

def _threshold(value: int | float, holds: bool, edge: bool, unit: Fraction, rng: random.Random) -> int | float:
    """A threshold that ``value`` meets (or misses); ``edge``: equal to it (or one unit above it)."""
    exact = Fraction(str(value))
    if holds:
        return value if edge else math.floor(exact) - rng.randint(1, 4)
    return _num((exact + unit) * 10) if edge else math.floor(exact) + rng.randint(2, 5)


def draw_pack(pack_id: str, decks: dict[str, Deck], rng: random.Random) -> PackSpec:
    draws = {name: deck.draw() for name, deck in decks.items()}
    n, case = draws["groups"], draws["case"]
    step = 10 if draws["value_kind"] == "integer" else 1  # in tenths
    tenths = [rng.randrange(550, 960, step) for _ in range(n)]
    if draws["value_kind"] == "decimal" and all(t % 10 == 0 for t in tenths):
        tenths[0] += 3
    # subtle: nudge until 100 * average is whole, i.e. n divides 10 * sum(tenths); a random walk mod n
    while (10 * sum(tenths)) % n:
        i = rng.randrange(n)
        tenths[i] += step if tenths[i] < 900 else -step
    values = tuple(_num(t) for t in tenths)
    labels = tuple(GROUP_KINDS[draws["family"]][4][:n])
    unit = Fraction(step, 10)
    spec = PackSpec(pack_id, case, labels, values, 0, 0, draws)
    avg_gte = _threshold(spec.average, case in ("both", "floor_fails"), draws["avg_edge"], unit, rng)
    floor = _threshold(spec.lowest, case in ("both", "avg_fails"), draws["floor_edge"], unit, rng)
    return PackSpec(pack_id, case, labels, values, avg_gte, floor, draws)


def draw_specs(n: int, seed: int, only: dict[str, Sequence[Any]] | None = None) -> list[PackSpec]:
    only = only or {}
    unknown = set(only) - set(OPTIONS)
    if unknown:
        raise ValueError(f"unknown generator option(s): {', '.join(sorted(unknown))}")
    rng = random.Random(seed)
    decks = {name: Deck(rng, only.get(name, options)) for name, options in OPTIONS.items()}
    return [draw_pack(f"gen-{seed}-{i:03d}", decks, rng) for i in range(n)]


def write_pack(spec: PackSpec, out_dir: Path) -> Path:
    root = Path(out_dir) / spec.id
    if root.exists():
        raise FileExistsError(f"pack folder {spec.id} already exists; choose an empty output folder")
    for relative, text in spec.files().items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def generate_packs(out_dir: str | Path, n: int, seed: int = 0,
                   only: dict[str, Sequence[Any]] | None = None) -> list[Path]:
    """Write ``n`` packs into ``out_dir/gen-<seed>-<i>/``; the same (n, seed, only) gives the same bytes."""
    if not 1 <= n <= 1000:
        raise ValueError("the number of generated packs must be between 1 and 1000")
    return [write_pack(spec, Path(out_dir)) for spec in draw_specs(n, seed, only)]
