"""Read evaluation records as people write them: per-group Task Success values and the release rule.

``extract_records([(file_name, markdown_text), ...])`` returns
``{"batches": {label: number, ...}, "release_rule": {"average_gte": n, "every_batch_gte": n}}``
or raises ``RecordError``. Standalone on purpose (stdlib only), so it can be tested on its own.

The whole text is NFKC-normalised first, so full-width digits, colons, equals signs, percent signs,
parentheses and pipes (``７２％``, ``：``, ``＝``, ``（）``, ``｜``) read like their ASCII forms.

Value tables (the ``batches``):

* any markdown pipe table outside fenced code blocks, with or without leading/trailing pipes,
  alignment colons allowed, whose header has a *task success* column: ``Task Success``,
  ``task_success``, ``TaskSuccess``, ``Task Success (%)``, ``Task success rate``, ``任务成功率``,
  ``任务成功率 (%)`` (case, spaces, ``_``/``-``, ``**bold**`` and ``(%)`` do not matter);
* label column: the first header naming Batch, Group, Region, Team, Site, Cohort, Segment, Split,
  Name, Label, 批次, 组/分组, 区域 or 名称; else the first other column that is not all numbers;
* value cells ``72``, ``72%``, ``72.5``, ``72.5 %``, ``**72%**``, ``0.72`` (kept as written, never
  rescaled); other columns (Tasks, Steps, ...) are diagnostics and never read;
* a summary row (Average, Mean, Overall, Total, 平均, 合计, ...) is not a group and is skipped.

The release rule: an explicit key followed by an explicit number, wherever it is written:

* ``key: value``, ``key = value``, ``key >= value``, ``key ≥ value``, as a list line
  (``- average_gte: 78``, ``* `every_batch_gte` = 70%``), inside a sentence
  ("... (average_gte = 85) ..."), in Chinese text (``average_gte：78``), in YAML front matter, in a
  fenced YAML/JSON block (``"average_gte": 78``);
* a table with rows ``| average_gte | 78 |``, or one with the keys as headers and one row of values;
* key spellings: ``average_gte``, ``average-gte``, ``avg_gte``, ``mean_gte``, ``averageGte``,
  ``AVERAGE_GTE``, ``min_average``; ``every_batch_gte``, ``every_group_gte`` (or region, team, site,
  cohort, segment, split), ``each_*_gte``, ``all_batches_gte``, ``min_each_gte``, ``min_batch_gte``;
  ``_ge`` works like ``_gte``.

Integral numbers come back as ``int`` (``72``, not ``72.0``); labels keep document order. The same
label (or rule key) with two different values is a ``RecordError``; so is a missing table, a
non-numeric value cell or a missing rule key. Messages name files by file name only.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal, InvalidOperation

RULE_KEYS = ("average_gte", "every_batch_gte")
_MAX_MESSAGE = 300

# --- what the headers may say ------------------------------------------------------------------

_VALUE_MARKERS = ("tasksuccess", "任务成功")
# A header squashed to one of these is the value column itself, not e.g. "Task Success (prev)".
_VALUE_EXACT = {"tasksuccess", "tasksuccessrate", "tasksuccesspct", "tasksuccesspercent", "任务成功", "任务成功率"}
_LABEL_WORDS = (
    "batch", "group", "region", "team", "site", "cohort", "segment", "split", "name", "label",
    "批次", "组", "区域", "名称",
)
_SUMMARY_LABELS = {"average", "mean", "overall", "total", "all", "平均", "平均值", "总体", "整体", "合计", "总计"}

# --- rule keys ---------------------------------------------------------------------------------

_GROUP_NOUN = r"(?:batch(?:es)?|groups?|regions?|teams?|sites?|cohorts?|segments?|splits?)"
_AVERAGE_KEY = re.compile(r"(?:average|avg|mean)_(?:gte|ge)|min_(?:average|avg|mean)")
_EVERY_KEY = re.compile(
    rf"(?:every|each|all|min_each|min_every)(?:_{_GROUP_NOUN})?_(?:gte|ge)|min_{_GROUP_NOUN}_(?:gte|ge)"
)
_NUM = r"[+-]?\d+(?:\.\d+)?"
# An identifier, optional closing quote/bold, a comparison, optional opening quote, a number.
# The number may not continue as "78.5.1"; "78." at the end of a sentence is fine.
_RULE_STATEMENT = re.compile(
    r"(?<![A-Za-z0-9_-])([A-Za-z][A-Za-z0-9_-]*)[`'\"*]*\s*(?::|==?|>=|=>|≥|⩾)\s*[`'\"*]*\s*"
    rf"({_NUM})(?!\.?\d)"
)

# --- markdown structure ------------------------------------------------------------------------

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")
_NUMBER_CELL = re.compile(rf"^{_NUM}$")


class RecordError(ValueError):
    """No usable data: the message names the file(s) and exactly what is missing or conflicting."""


def _base_name(name: str) -> str:
    # Callers pass file names; a path slipped in must still not leak its folders.
    return name.replace("\\", "/").rsplit("/", 1)[-1]


def _fail(message: str) -> RecordError:
    if len(message) > _MAX_MESSAGE:
        message = message[: _MAX_MESSAGE - 1] + "…"
    return RecordError(message)


def _file_list(names: list[str], budget: int = 150) -> str:
    """Names up to about ``budget`` characters, then "and N more", so the message stays short."""
    shown: list[str] = []
    for name in names:
        if shown and len(", ".join(shown + [name])) > budget:
            break
        shown.append(name[:budget])
    rest = len(names) - len(shown)
    return ", ".join(shown) + (f" and {rest} more" if rest else "")


def _squash(text: str) -> str:
    """Lowercase letters, digits and CJK only: "Task Success (%)" -> "tasksuccess"."""
    return re.sub(r"[\W_]+", "", text.lower())


def _number(text: str) -> int | float | None:
    """``72``, ``72.5``, ``72 %``, ``**72%**``, ``0.72`` -> number as written; else None."""
    cleaned = text.strip().strip("*_`").strip().rstrip("%").strip().strip("*_`").strip()
    if not _NUMBER_CELL.match(cleaned):
        return None
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    return int(value) if value == value.to_integral_value() else float(value)


def _clean(text: str) -> str:
    return text.strip().strip("*_`").strip()


# --- tables ------------------------------------------------------------------------------------


def _cells(line: str) -> list[str]:
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    # "\|" is a literal pipe inside a cell, not a column break.
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """(header, rows) of every pipe table outside fenced code blocks."""
    lines = text.splitlines()
    tables, fence, i = [], None, 0
    while i < len(lines):
        line = lines[i]
        marker = _FENCE.match(line)
        if marker:
            tick = marker.group(1)
            if fence is None:
                fence = tick
            elif tick[0] == fence[0] and len(tick) >= len(fence) and not line.strip()[len(tick):].strip():
                fence = None  # only a bare fence at least as long as the opener closes it
        elif (
            fence is None
            and "|" in line
            and i + 1 < len(lines)
            and "|" in lines[i + 1]
            and _SEPARATOR.match(lines[i + 1])
        ):
            header, rows = _cells(line), []
            i += 2
            while i < len(lines) and "|" in lines[i] and lines[i].strip() and not _FENCE.match(lines[i]):
                if not _SEPARATOR.match(lines[i]):
                    rows.append(_cells(lines[i]))
                i += 1
            tables.append((header, rows))
            continue
        i += 1
    return tables


def _value_column(header: list[str]) -> int | None:
    squashed = [_squash(h) for h in header]
    candidates = [i for i, s in enumerate(squashed) if any(m in s for m in _VALUE_MARKERS)]
    exact = [i for i in candidates if squashed[i] in _VALUE_EXACT]
    return (exact or candidates or [None])[0]


def _label_column(header: list[str], rows: list[list[str]], value_col: int) -> int | None:
    others = [i for i in range(len(header)) if i != value_col]

    def names_group(i: int) -> bool:
        s = _squash(header[i])
        return any(word in s for word in _LABEL_WORDS)

    def numeric(i: int) -> bool:
        return bool(rows) and all(i < len(r) and _number(r[i]) is not None for r in rows)

    # A header naming a group wins; else the first column of words (a "Tasks" count is no label).
    for choose in (names_group, lambda i: not numeric(i), lambda i: True):
        found = next((i for i in others if choose(i)), None)
        if found is not None:
            return found
    return None


def _value_rows(name: str, text: str) -> tuple[list[tuple[str, int | float]], int]:
    """(label, value) pairs of every value table in one file, and how many value tables it had."""
    found, tables = [], 0
    for header, rows in _tables(text):
        value_col = _value_column(header)
        if value_col is None:
            continue
        label_col = _label_column(header, rows, value_col)
        if label_col is None:
            continue  # a one-column table has nothing to name the value by
        tables += 1
        for row in rows:
            label = _clean(row[label_col]) if label_col < len(row) else ""
            cell = row[value_col] if value_col < len(row) else ""
            if _squash(label) in _SUMMARY_LABELS:
                continue
            if not label:
                raise _fail(f"{name}: a row of the task success table has no label in column '{header[label_col][:40]}'")
            value = _number(cell)
            if value is None:
                # Never drop a group silently: the average would change without anyone noticing.
                raise _fail(f"{name}: task success of '{label[:40]}' is not a number ('{cell[:20]}')")
            found.append((label, value))
    return found, tables


# --- the release rule --------------------------------------------------------------------------


def _rule_key(raw: str) -> str | None:
    """Canonical rule key for a spelling such as ``averageGte`` or ``every-group-gte``, else None."""
    key = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", raw.strip("_-")).lower()
    key = re.sub(r"[-_]+", "_", key)
    if _AVERAGE_KEY.fullmatch(key):
        return "average_gte"
    if _EVERY_KEY.fullmatch(key):
        return "every_batch_gte"
    return None


def _rule_values(text: str) -> list[tuple[str, int | float]]:
    """(key, value) for every explicit rule statement: free text, fenced blocks, front matter, tables."""
    found = []
    for match in _RULE_STATEMENT.finditer(text):
        key = _rule_key(match.group(1))
        if key:
            found.append((key, _number(match.group(2))))
    for header, rows in _tables(text):
        # Keys down the first column: | average_gte | 78 |
        for row in rows:
            key_at = next((i for i, c in enumerate(row) if _rule_key(_clean(c))), None)
            if key_at is None:
                continue
            value = next((v for c in row[key_at + 1:] if (v := _number(c)) is not None), None)
            if value is not None:
                found.append((_rule_key(_clean(row[key_at])), value))
        # Keys across the header, one row of values: | average_gte | every_batch_gte |
        if len(rows) == 1:
            for i, cell in enumerate(header):
                key = _rule_key(_clean(cell))
                if key and i < len(rows[0]) and (value := _number(rows[0][i])) is not None:
                    found.append((key, value))
    return found


# --- putting files together --------------------------------------------------------------------


def _merge(pairs: list[tuple[str, int | float, str]], what: str) -> dict[str, int | float]:
    merged: dict[str, tuple[int | float, str]] = {}
    for key, value, name in pairs:
        if key in merged and merged[key][0] != value:
            first, where = merged[key]
            places = where if where == name else f"{where} and {name}"
            raise _fail(f"{places}: conflicting {what} for '{key[:40]}': {first} vs {value}")
        merged.setdefault(key, (value, name))
    return {key: value for key, (value, _) in merged.items()}


def extract_records(files: list[tuple[str, str]]) -> dict:
    """files = [(file_name, markdown_text), ...] in name order ->
    {"batches": {label: int|float, ...}, "release_rule": {"average_gte": n, "every_batch_gte": n}}"""
    if not files:
        raise _fail("no knowledge files to read the evaluation record from")
    names, value_pairs, rule_pairs, tables = [], [], [], 0
    for raw_name, raw_text in files:
        name, text = _base_name(raw_name), unicodedata.normalize("NFKC", raw_text)
        names.append(name)
        rows, count = _value_rows(name, text)
        tables += count
        value_pairs += [(label, value, name) for label, value in rows]
        rule_pairs += [(key, value, name) for key, value in _rule_values(text)]

    batches = _merge(value_pairs, "task success")
    rule = _merge(rule_pairs, "release rule values")
    if not batches:
        if tables:
            raise _fail(f"the task success table has no rows in {_file_list(names)}")
        raise _fail(
            f"no table with a task success column ('Task Success', 'task_success', '任务成功率', ...) "
            f"outside code blocks in {_file_list(names)}"
        )
    missing = [key for key in RULE_KEYS if key not in rule]
    if missing:
        raise _fail(
            "release rule incomplete: missing "
            + " and ".join(f"'{key}: <number>'" for key in missing)
            + f" in {_file_list(names)}"
        )
    return {"batches": batches, "release_rule": {key: rule[key] for key in RULE_KEYS}}
