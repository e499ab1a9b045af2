"""The release-rule record: the groups of one evaluation record with their Task Success values and
the release rule, as the knowledge search reads it into its ``data``, shows it to the model, and
gives it to the check language as a record of any rule (``record``, ``records``).

The knowledge tool reaches this module through the family registry (``families.knowledge_record``;
the tool's ``FamilyRecord`` protocol names what it asks for), never by import: the loop imports the
tools and must never import a family. The markdown pieces (pipe tables, cells, numbers, the release
rule's key spellings) are the generic reader's, ``tools/records.py``.

``read([(file_name, markdown_text), ...])`` returns
``{"batches": {label: number, ...}, "release_rule": {"average_gte": n, "every_batch_gte": n}}``
or raises ``RecordError``. The whole text is NFKC-normalised first.

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

Shown, the record's numbers are written as ``short_text`` writes them; the family's answer guide
forces the calculator's expression over the same text (``guide.py``).
"""

from __future__ import annotations

import unicodedata
from typing import Any

from agent.tools.records import (
    RULE_KEYS, RULE_STATEMENT, SUMMARY_LABELS, base_name, cell_number, clean_cell, label_column, lowest_group,
    merge, pipe_tables, record_error, release_key, squash, value_column
)
from agent.util.number_text import short_text

# -- reading ---------------------------------------------------------------------------------------


def read(files: list[tuple[str, str]]) -> dict[str, Any]:
    """files = [(file_name, markdown_text), ...] in name order ->
    {"batches": {label: int|float, ...}, "release_rule": {"average_gte": n, "every_batch_gte": n}},
    or ``RecordError`` naming the files and what is missing or conflicting."""
    if not files:
        raise record_error("no knowledge files to read the evaluation record from")
    names, value_pairs, rule_pairs, tables = [], [], [], 0
    for raw_name, raw_text in files:
        name, text = base_name(raw_name), unicodedata.normalize("NFKC", raw_text)
        names.append(name)
        rows, count = _value_rows(name, text)
        tables += count
        value_pairs += [(label, value, name) for label, value in rows]
        rule_pairs += [(key, value, name) for key, value in _rule_values(text)]

    batches = merge(value_pairs, "task success")
    rule = merge(rule_pairs, "release rule values")
    if not batches:
        if tables:
            raise record_error(f"the task success table has no rows in {_file_list(names)}")
        raise record_error(
            f"no table with a task success column ('Task Success', 'task_success', '任务成功率', ...) "
            f"outside code blocks in {_file_list(names)}"
        )
    missing = [key for key in RULE_KEYS if key not in rule]
    if missing:
        raise record_error(
            "release rule incomplete: missing "
            + " and ".join(f"'{key}: <number>'" for key in missing)
            + f" in {_file_list(names)}"
        )
    return {"batches": batches, "release_rule": {key: rule[key] for key in RULE_KEYS}}


def _value_rows(name: str, text: str) -> tuple[list[tuple[str, int | float]], int]:
    """(label, value) pairs of every value table in one file, and how many value tables it had."""
    found, tables = [], 0
    for header, rows in pipe_tables(text):
        value_col = value_column(header)
        if value_col is None:
            continue
        label_col = label_column(header, rows, value_col)
        if label_col is None:
            continue  # a one-column table has nothing to name the value by
        tables += 1
        for row in rows:
            label = clean_cell(row[label_col]) if label_col < len(row) else ""
            cell = row[value_col] if value_col < len(row) else ""
            if squash(label) in SUMMARY_LABELS:
                continue
            if not label:
                raise record_error(f"{name}: a row of the task success table has no label in column '{header[label_col][:40]}'")
            value = cell_number(cell)
            if value is None:
                # Never drop a group silently: the average would change without anyone noticing.
                raise record_error(f"{name}: task success of '{label[:40]}' is not a number ('{cell[:20]}')")
            found.append((label, value))
    return found, tables


def _rule_values(text: str) -> list[tuple[str, int | float]]:
    """(key, value) for every explicit rule statement: free text, fenced blocks, front matter, tables."""
    found = []
    for match in RULE_STATEMENT.finditer(text):
        key = release_key(match.group(1))
        if key:
            found.append((key, cell_number(match.group(2))))
    for header, rows in pipe_tables(text):
        # Keys down the first column: | average_gte | 78 |
        for row in rows:
            key_at = next((i for i, c in enumerate(row) if release_key(clean_cell(c))), None)
            if key_at is None:
                continue
            value = next((v for c in row[key_at + 1:] if (v := cell_number(c)) is not None), None)
            if value is not None:
                found.append((release_key(clean_cell(row[key_at])), value))
        # Keys across the header, one row of values: | average_gte | every_batch_gte |
        if len(rows) == 1:
            for i, cell in enumerate(header):
                key = release_key(clean_cell(cell))
                if key and i < len(rows[0]) and (value := cell_number(rows[0][i])) is not None:
                    found.append((key, value))
    return found


def _file_list(names: list[str], budget: int = 150) -> str:
    """Names up to about ``budget`` characters, then "and N more", so the message stays short."""
    shown: list[str] = []
    for name in names:
        if shown and len(", ".join(shown + [name])) > budget:
            break
        shown.append(name[:budget])
    rest = len(names) - len(shown)
    return ", ".join(shown) + (f" and {rest} more" if rest else "")


def states_rule(files: list[tuple[str, str]]) -> bool:
    """Does any file state a key of the release rule, however written (read or not)?"""
    return any(_rule_values(unicodedata.normalize("NFKC", text)) for _, text in files)


def ruled_by(record: dict[str, Any]) -> bool:
    """Does a record of any rule (``records.read_records``) state a key of the release rule?"""
    return bool(set(record["rules"]) & set(RULE_KEYS))


# -- showing ---------------------------------------------------------------------------------------


def summary(data: dict[str, Any]) -> str:
    """The search's summary of a record ``read`` returned: its groups (the first ten) and its rule."""
    batches = data["batches"]
    shown = ", ".join(f"{k}={short_text(v)}" for k, v in list(batches.items())[:10])
    if len(batches) > 10:
        shown += ", ..."
    rule = data["release_rule"]
    return (f"{len(batches)} batches ({shown}); release rule: average >= {short_text(rule['average_gte'])} "
            f"and every batch >= {short_text(rule['every_batch_gte'])}")


def render(data: dict[str, Any]) -> str | None:
    """The record as the model reads it, or None when ``data`` holds no groups. The lowest value is
    stated outright: picking the minimum of eight numbers is where a small model goes wrong most often."""
    batches = data.get("batches") or {}
    if not batches:
        return None
    rule = data.get("release_rule") or {}
    text = f"{len(batches)} groups: " + ", ".join(f"{k} = {short_text(v)}" for k, v in batches.items())
    label, value = lowest_group(batches)
    text += f"; lowest value: {label} = {short_text(value)}"
    if rule:
        text += (f"; release rule: average >= {short_text(rule['average_gte'])} (average_gte) and every group "
                 f">= {short_text(rule['every_batch_gte'])} (every_batch_gte)")
    return text


# -- as a record of any rule -----------------------------------------------------------------------


def as_record(data: dict[str, Any]) -> dict[str, Any] | None:
    """The record read as a record of any rule (the check language's ``record``): its groups and its
    two thresholds; None when ``data`` holds no groups."""
    if not data.get("batches"):
        return None
    return {"title": "release record", "values": data["batches"], "rules": dict(data.get("release_rule") or {})}
