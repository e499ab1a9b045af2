"""agent/task/tables.py: every column of every table (markdown, CSV/TSV, JSON records) reaches the model,
with its unit and the prose around it; tables are built here from random names and values, so no
rule can know them."""

from __future__ import annotations

import json
import os
import random
import string
from pathlib import Path

import pytest

from agent.task.tables import (
    VIEW_MAX_COLUMNS, VIEW_MAX_ROWS, VIEW_SAMPLE_ROWS, Column, label_column, parse_cell, read_tables, split_header,
    table_view, tables_from_files
)


def _word(rng: random.Random, n: int = 6) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(n)).capitalize()


def _number(rng: random.Random) -> int | float:
    if rng.random() < 0.5:
        return rng.randint(-500, 5000)
    value = round(rng.uniform(-100, 1000), rng.randint(1, 3))
    return value + 0.5 if value.is_integer() else value  # an integral value is read as an int, by contract


def _synthetic(rng: random.Random, rows: int, numbers: int) -> tuple[list[str], list[str | None], list[list]]:
    """(column names, units, rows): a label column, then ``numbers`` number columns with random units."""
    units = [None] + [rng.choice(["%", "ms", "USD", "kg", None]) for _ in range(numbers)]
    names = ["Name " + _word(rng)] + [f"{_word(rng)} {_word(rng, 4)}" for _ in range(numbers)]
    body = [[f"{_word(rng)} {k}"] + [_number(rng) for _ in range(numbers)] for k in range(rows)]
    return names, units, body


def _markdown(names, units, body, *, cell_units: bool = False) -> str:
    header = [n if u is None or cell_units else f"{n} ({u})" for n, u in zip(names, units)]

    def cell(v, u):
        return f"{v}{u}" if cell_units and u and not isinstance(v, str) else str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v, u) for v, u in zip(row, units)) + " |" for row in body]
    return "\n".join(lines)


@pytest.mark.parametrize("seed", range(6))
def test_every_column_of_a_markdown_table_with_its_unit(tmp_path, seed):
    rng = random.Random(seed)
    names, units, body = _synthetic(rng, rng.randint(2, 9), rng.randint(2, 6))
    note = f"Row {body[0][0]} does not count: {_word(rng)}."
    text = f"# {_word(rng)} report\n\nIntro {_word(rng)}.\n\n## Results\n\n{note}\n\n" + \
        _markdown(names, units, body, cell_units=bool(seed % 2)) + f"\n\n## Notes\n\nAlso {_word(rng)}.\n"
    (tmp_path / "report.md").write_text(text, encoding="utf-8")
    [table] = read_tables(tmp_path)
    assert [c.name for c in table.columns] == names
    assert [c.unit for c in table.columns] == units
    assert [c.kind for c in table.columns] == ["text"] + ["number"] * (len(names) - 1)
    assert [list(r) for r in table.rows] == body
    assert all(type(v) is type(w) for r, row in zip(table.rows, body) for v, w in zip(r, row))
    assert note in table.prose and "Intro" in table.prose and "Also" in table.prose  # the notes travel with it
    assert table.title == "Results" and table.source == "report.md" and table.id == "report#t1"
    assert table.sql_name == "report" and label_column(table) == 0


def test_csv_tsv_and_json_records_are_read_whole(tmp_path):
    rng = random.Random(7)
    names, units, body = _synthetic(rng, 5, 3)
    header = [n if u is None else f"{n} ({u})" for n, u in zip(names, units)]
    csv_lines = ["# " + "measured in the field", ",".join(f'"{h}"' for h in header)]
    csv_lines += [",".join(f'"{v}"' if isinstance(v, str) else str(v) for v in row) for row in body]
    (tmp_path / "field.csv").write_text("\n".join(csv_lines) + "\n", encoding="utf-8")
    (tmp_path / "lab.tsv").write_text("\n".join("\t".join(map(str, r)) for r in [header] + body) + "\n",
                                      encoding="utf-8")
    records = [dict(zip(names, row)) for row in body]
    (tmp_path / "list.json").write_text(json.dumps(records), encoding="utf-8")
    (tmp_path / "keyed.json").write_text(json.dumps({"groups": {r[0]: dict(zip(names[1:], r[1:])) for r in body}}),
                                         encoding="utf-8")
    (tmp_path / "field.md").write_text("# Field notes\n\nThe last row is a re-run.\n", encoding="utf-8")
    tables = {t.source: t for t in read_tables(tmp_path)}
    assert set(tables) == {"field.csv", "lab.tsv", "list.json", "keyed.json", "field.md"} - {"field.md"}
    for source in ("field.csv", "lab.tsv"):
        assert [c.name for c in tables[source].columns] == names
        assert [c.unit for c in tables[source].columns] == units
        assert [list(r) for r in tables[source].rows] == body
    assert "measured in the field" in tables["field.csv"].prose and "re-run" in tables["field.csv"].prose
    assert [c.name for c in tables["list.json"].columns] == names
    assert [list(r) for r in tables["list.json"].rows] == body
    keyed = tables["keyed.json"]
    assert [c.name for c in keyed.columns] == ["name"] + names[1:] and keyed.title == "groups"
    assert [list(r) for r in keyed.rows] == body
    # distinct SQL names, ASCII identifiers
    sql = [t.sql_name for t in tables.values()]
    assert len(set(sql)) == len(sql) and all(s.isascii() and s.replace("_", "").isalnum() for s in sql)


def test_units_from_a_unit_column_or_a_note():
    files = [("a.md", "# A\n\nUnit: kWh\n\n| Site | Use |\n|---|---|\n| X | 12 |\n| Y | 3.5 |\n"),
             ("b.md", "# B\n\n| Item | Amount | Unit |\n|---|---|---|\n| X | 10 | 元 |\n| Y | 20 | 元 |\n"),
             ("c.md", "# C\n\n| Item | Amount | Unit |\n|---|---|---|\n| X | 10 | kg |\n| Y | 20 | g |\n")]
    a, b, c = tables_from_files(files)
    assert a.columns[1] == Column("Use", "kWh", "number")
    assert b.columns[1] == Column("Amount", "元", "number")
    assert c.columns[1].unit is None  # two units: the unit column itself says which row has which


@pytest.mark.parametrize("raw, parsed", [
    ("72%", (72, "%")), ("**72.5 %**", (72.5, "%")), ("$1,234.50", (1234.5, "$")), ("1,000,000", (1000000, None)),
    ("\u22123.25", (-3.25, None)), ("41 ms", (41, "ms")), ("12 元", (12, "元")), ("-", (None, None)),
    ("n/a", (None, None)), ("", (None, None)), ("3 apples and a pear", None), ("Q2", None), ("2024-05", None),
])
def test_cells(raw, parsed):
    assert parse_cell(raw) == parsed


@pytest.mark.parametrize("raw, split", [
    ("Task Success (%)", ("Task Success", "%")), ("Cost [USD]", ("Cost", "USD")), ("金额（元）", ("金额", "元")),
    ("Latency (ms)", ("Latency", "ms")), ("Score (new)", ("Score (new)", None)), ("Plain", ("Plain", None)),
])
def test_headers(raw, split):
    assert split_header(raw) == split


def test_a_column_with_a_word_in_it_is_text_not_dropped():
    [table] = tables_from_files([("t.md", "| Group | Value |\n|---|---|\n| A | 12 |\n| B | pending |\n")])
    assert table.columns[1].kind == "text" and table.rows[1][1] == "pending" and table.rows[0][1] == "12"


def test_a_large_table_is_shown_by_schema_and_a_sample(tmp_path):
    rng = random.Random(3)
    names, units, body = _synthetic(rng, VIEW_MAX_ROWS + 1 + rng.randint(0, 50), 3)
    (tmp_path / "big.md").write_text(_markdown(names, units, body), encoding="utf-8")
    [table] = read_tables(tmp_path)
    view = table_view(table)
    assert view["rows_total"] == len(body) and len(view["rows"]) == VIEW_SAMPLE_ROWS
    assert view["rows"] == body[:VIEW_SAMPLE_ROWS] and len(table.rows) == len(body)
    assert [c["name"] for c in view["columns"]] == names
    wide = [f"C{i}" for i in range(VIEW_MAX_COLUMNS + 1)]
    (tmp_path / "big.md").write_text(_markdown(wide, [None] * len(wide), [list(range(len(wide)))]), encoding="utf-8")
    assert "rows_total" in table_view(read_tables(tmp_path)[0])
    small = table_view(tables_from_files([("s.md", _markdown(names, units, body[:3]))])[0])
    assert "rows_total" not in small and small["rows"] == body[:3]
    assert set(small) == {"id", "source", "title", "sql_name", "columns", "rows", "prose"}


def test_ids_are_stable_and_sql_names_unique(tmp_path):
    text = "| A | B |\n|---|---|\n| x | 1 |\n\n## Two\n\n| A | B |\n|---|---|\n| y | 2 |\n"
    (tmp_path / "select.md").write_text(text, encoding="utf-8")  # a keyword as a stem
    (tmp_path / "2024 data.csv").write_text("A,B\nx,1\n", encoding="utf-8")  # a digit first, a space
    (tmp_path / "数据.csv").write_text("A,B\nx,1\n", encoding="utf-8")  # nothing ASCII
    first = read_tables(tmp_path)
    assert [t.id for t in first] == ["2024 data#t1", "select#t1", "select#t2", "数据#t1"]
    assert [t.sql_name for t in first] == ["t_2024_data", "select_1", "select_2", "t_table"]
    assert [t.id for t in read_tables(tmp_path)] == [t.id for t in first]


def test_tables_in_code_fences_are_not_tables_and_paths_never_leak(tmp_path):
    (tmp_path / "k.md").write_text("```\n| A | B |\n|---|---|\n| x | 1 |\n```\n", encoding="utf-8")
    assert read_tables(tmp_path) == []
    (tmp_path / "real.csv").write_text("A,B\nx,1\n", encoding="utf-8")
    os.symlink(tmp_path / "real.csv", tmp_path / "link.csv")
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    problems: list[str] = []
    tables = read_tables(tmp_path, problems)
    assert [t.source for t in tables] == ["real.csv"]  # the symlink is not followed
    assert problems and "bad.json" in problems[0] and str(tmp_path) not in problems[0]
