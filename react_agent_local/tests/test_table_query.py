"""table_query: the SQL allowlist (the parser refuses every file, network, extension, setting and
side effect; DuckDB's configuration refuses them again where the parser is bypassed), bounded rows
and time, and answers checked against Python computing them over the same parsed rows -- on tables
this file builds from random names and values."""

from __future__ import annotations

import random
import statistics
import string
import threading
import time
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from agent.task.tables import Table, read_tables, tables_from_files
from agent.tools import ToolContext, ToolError, catalog
from agent.tools import table_query as tq


def _word(rng: random.Random, n: int = 7) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(n))


def _table(tmp_path: Path, seed: int, rows: int = 12) -> tuple[Table, str, str, str]:
    """A random markdown table in ``tmp_path/knowledge``: (table, label column, number column, group column)."""
    rng = random.Random(seed)
    label, measure, group, other = (f"{_word(rng).capitalize()} {_word(rng, 3)}" for _ in range(4))
    unit = rng.choice(["%", "ms", "USD"])
    groups = [_word(rng, 4) for _ in range(3)]
    lines = [f"| {label} | {group} | {measure} ({unit}) | {other} |", "|---|---|---|---|"]
    for k in range(rows):
        value = round(rng.uniform(-50, 500), rng.randint(0, 3))
        lines.append(f"| {_word(rng)}{k} | {rng.choice(groups)} | {value} | {rng.randint(0, 99)} |")
    folder = tmp_path / "knowledge"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{_word(rng)}.md").write_text(f"# {_word(rng)}\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
    [table] = read_tables(folder)
    return table, label, measure, group


def _column(table: Table, name: str) -> list:
    index = [c.name for c in table.columns].index(name)
    return [row[index] for row in table.rows]


# -- correct answers -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_aggregates_match_python_over_the_parsed_rows(tmp_path, seed):
    table, label, measure, group = _table(tmp_path, seed, rows=random.Random(seed).randint(3, 40))
    values = _column(table, measure)
    exact = [Fraction(repr(v)) if isinstance(v, float) else Fraction(v) for v in values]
    result = tq.query([table], f'SELECT sum("{measure}"), avg("{measure}"), median("{measure}"), min("{measure}"), '
                               f'max("{measure}"), count(*), stddev_samp("{measure}"), arg_min("{label}", "{measure}") '
                               f"FROM {table.sql_name}")
    [[total, mean, median, low, high, count, spread, lowest]] = result["rows"]
    assert total == float(sum(exact)) or total == sum(exact)  # exact: a DECIMAL sum, no float drift
    assert mean == pytest.approx(float(statistics.mean(exact)), rel=1e-12)
    assert median == float(statistics.median(exact)) or median == statistics.median(exact)
    assert (low, high, count) == (min(values), max(values), len(values))
    assert spread == pytest.approx(statistics.stdev(values), rel=1e-9)
    assert lowest == _column(table, label)[values.index(min(values))]
    assert result["tables"] == [table.sql_name] and result["truncated"] is False
    assert result["sql"].startswith("SELECT SUM(")  # the statement as run: sqlglot's rendering of what was checked


def test_group_by_filter_and_the_unit_label(tmp_path):
    table, label, measure, group = _table(tmp_path, 11, rows=30)
    values, groups = _column(table, measure), _column(table, group)
    threshold = statistics.median(values)
    # The knowledge tool labels the column "<name> (<unit>)": the query may say it that way too.
    shown = f"{measure} ({table.columns[2].unit})"
    result = tq.query([table], f'SELECT "{group}", count(*), sum("{shown}") FROM {table.sql_name} '
                               f'WHERE "{measure}" >= {threshold} GROUP BY 1 ORDER BY 1')
    expected: dict[str, list] = {}
    for g, v in zip(groups, values):
        if v >= threshold:
            expected.setdefault(g, []).append(Decimal(repr(v)) if isinstance(v, float) else Decimal(v))
    assert [row[0] for row in result["rows"]] == sorted(expected)
    for g, n, s in result["rows"]:
        assert n == len(expected[g]) and Decimal(repr(s)) == sum(expected[g])


def test_names_in_any_script_and_several_tables(tmp_path):
    rng = random.Random(5)
    files = [(f"m{k}.md", "| 分组 | 得分率 |\n|---|---|\n"
              + "".join(f"| {g} | {round(rng.uniform(0, 100), 1)}% |\n" for g in "甲乙丙")) for k in (5, 6)]
    tables = tables_from_files(files)
    result = tq.query(tables, 'SELECT (SELECT avg("得分率") FROM m6) - (SELECT avg("得分率") FROM m5)')
    m5, m6 = ([row[1] for row in t.rows] for t in tables)
    assert result["rows"][0][0] == pytest.approx(statistics.mean(m6) - statistics.mean(m5), abs=1e-12)
    assert result["tables"] == ["m6", "m5"]


def test_through_the_registry(tmp_path):
    table, label, measure, _ = _table(tmp_path, 4)
    tool = catalog().get("table_query")
    args = tool.validate({"sql": f'SELECT max("{measure}") - min("{measure}") FROM {table.sql_name}'})
    result = tool.execute(ToolContext(knowledge_dir=tmp_path / "knowledge", artifact_dir=tmp_path), args, threading.Event())
    values = _column(table, measure)
    assert result["rows"][0][0] == pytest.approx(max(values) - min(values), abs=1e-9)
    assert result["columns"] and isinstance(result["tool_latency_ms"], float)
    assert tool.render(result).startswith("SELECT MAX(")
    with pytest.raises(Exception):
        tool.validate({"sql": "SELECT 1", "path": "/etc/passwd"})  # no other argument exists


# -- errors the model can act on -------------------------------------------------------------------


def test_an_unknown_column_is_named_with_the_known_ones(tmp_path):
    table, label, measure, _ = _table(tmp_path, 5)
    with pytest.raises(ToolError) as info:
        tq.query([table], f"SELECT nosuchcolumn FROM {table.sql_name}")
    assert info.value.code == "table_query_unknown_column"
    assert "nosuchcolumn" in info.value.message and f'"{measure}"' in info.value.message and f'"{label}"' in info.value.message
    with pytest.raises(ToolError) as info:
        tq.query([table], "SELECT 1 FROM elsewhere")
    assert info.value.code == "table_query_unknown_table" and table.sql_name in info.value.message


# -- the allowlist, layer 1: the parser --------------------------------------------------------------

FORBIDDEN = [
    "ATTACH '/tmp/x.db' AS x",
    "ATTACH 'https://example.com/x.db'",
    "DETACH x",
    "COPY {t} TO '/tmp/out.csv'",
    "COPY (SELECT 1) TO '/tmp/out.csv'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "PRAGMA version",
    "PRAGMA enable_profiling",
    "SET enable_external_access = true",
    "SET threads = 8",
    "RESET threads",
    "CREATE TABLE y AS SELECT * FROM {t}",
    "CREATE MACRO m(a) AS a",
    "INSERT INTO {t} VALUES (1)",
    "UPDATE {t} SET x = 1",
    "DELETE FROM {t}",
    "DROP TABLE {t}",
    "ALTER TABLE {t} RENAME TO z",
    "EXPORT DATABASE '/tmp/db'",
    "IMPORT DATABASE '/tmp/db'",
    "CALL pragma_version()",
    "DESCRIBE {t}",
    "SUMMARIZE {t}",
    "CHECKPOINT",
    "BEGIN TRANSACTION",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_csv_auto('/etc/passwd')",
    "SELECT * FROM read_parquet('https://example.com/x.parquet')",
    "SELECT * FROM read_json('/etc/hosts')",
    "SELECT * FROM read_text('/etc/hosts')",
    "SELECT * FROM glob('/*')",
    "SELECT * FROM '/etc/passwd'",
    "SELECT * FROM 'https://example.com/data.csv'",
    "SELECT * FROM \"x.csv\"",
    "SELECT * FROM main.{t}",
    "SELECT * FROM system.main.{t}",
    "SELECT * FROM range(1000000000)",
    "SELECT * FROM generate_series(1, 10)",
    "SELECT * FROM duckdb_settings()",
    "SELECT * FROM duckdb_extensions()",
    "SELECT getenv('HOME')",
    "SELECT current_setting('threads')",
    "SELECT repeat('x', 1000000000)",
    "SELECT lpad('x', 1000000000, 'y')",
    "SELECT read_blob('/etc/passwd')",
    "SELECT * INTO y FROM {t}",
    "SELECT 1; SELECT 2",
    "SELECT 1; DROP TABLE {t}",
    "WITH a AS (SELECT * FROM read_csv('/etc/passwd')) SELECT * FROM a",
    "SELECT * FROM {t} WHERE 1 IN (SELECT 1 FROM glob('/*'))",
    "SELECT (SELECT count(*) FROM '/etc/passwd')",
    "",
    "   ",
    "SELEC 1",
]


@pytest.mark.parametrize("sql", FORBIDDEN)
def test_the_parser_refuses_every_forbidden_kind(tmp_path, sql):
    table, *_ = _table(tmp_path, 1)
    with pytest.raises(ToolError) as info:
        tq.check_sql(sql.format(t=table.sql_name), [table])
    assert info.value.code in {"table_query_refused", "table_query_unknown_table", "table_query_invalid"}
    assert info.value.retryable is False and len(info.value.message) <= 600


# -- the allowlist, layer 2: DuckDB's own configuration, with the parser bypassed ------------------------

BYPASS = [
    "SELECT * FROM read_csv('{file}')",
    "SELECT * FROM '{file}'",
    "SELECT * FROM glob('{folder}/*')",
    "COPY {t} TO '{folder}/out.csv'",
    "ATTACH '{folder}/x.db' AS x",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SELECT * FROM read_csv('https://example.com/x.csv')",
    "SET enable_external_access = true",
    "SET threads = 8",
    "SET memory_limit = '100GB'",
    "SET lock_configuration = false",
    "SET autoload_known_extensions = true",
]


@pytest.mark.parametrize("sql", BYPASS)
def test_duckdb_refuses_them_again_where_the_parser_is_bypassed(tmp_path, sql):
    import duckdb

    secret = tmp_path / "secret.csv"
    secret.write_text("a,b\n1,2\n", encoding="utf-8")
    table, *_ = _table(tmp_path, 2)
    connection = tq.connect([table])
    try:
        with pytest.raises(duckdb.Error):
            connection.execute(sql.format(file=secret, folder=tmp_path, t=table.sql_name)).fetchall()
    finally:
        connection.close()
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "x.db").exists()


def test_the_configuration_is_locked_and_external_access_off(tmp_path):
    table, *_ = _table(tmp_path, 3)
    connection = tq.connect([table])
    try:
        settings = dict(connection.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN ('enable_external_access', 'lock_configuration', "
            "'autoinstall_known_extensions', 'autoload_known_extensions', 'threads')").fetchall())
    finally:
        connection.close()
    assert settings == {"enable_external_access": "false", "lock_configuration": "true",
                        "autoinstall_known_extensions": "false", "autoload_known_extensions": "false", "threads": "1"}


# -- bounds ----------------------------------------------------------------------------------------------


def test_rows_are_bounded(tmp_path):
    table, *_ = _table(tmp_path, 6, rows=tq.MAX_ROWS + 37)
    result = tq.query([table], f"SELECT * FROM {table.sql_name}")
    assert result["row_count"] == tq.MAX_ROWS == len(result["rows"]) and result["truncated"] is True
    assert result["rows"][0] == list(table.rows[0])
    assert "only the first" in catalog().get("table_query").render(result)


def test_time_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(tq, "QUERY_SECONDS", 0.5)
    table, label, measure, _ = _table(tmp_path, 8, rows=400)
    t = table.sql_name
    sql = f'SELECT sum(a."{measure}" * b."{measure}" - c."{measure}") FROM {t} a, {t} b, {t} c, {t} d'
    started = time.monotonic()
    with pytest.raises(ToolError) as info:
        tq.query([table], sql)
    assert info.value.code == "table_query_timeout"
    assert time.monotonic() - started < 5


def test_a_cancel_stops_a_running_query(tmp_path):
    table, label, measure, _ = _table(tmp_path, 9, rows=400)
    t = table.sql_name
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(ToolError) as info:
        tq.query([table], f'SELECT sum(a."{measure}" + b."{measure}") FROM {t} a, {t} b, {t} c, {t} d', cancel)
    assert info.value.code == "table_query_timeout" and time.monotonic() - started < tq.QUERY_SECONDS


# -- through the runtime: a pack names the tool ------------------------------------------------------


def _pack(tmp_path: Path, tools: list[str], seed: int) -> tuple[Path, Table, str]:
    import json

    rng = random.Random(seed)
    root = tmp_path / "pack"
    table, label, measure, _ = _table(root, seed)
    (root / "task.json").write_text(json.dumps({
        "id": f"t{seed}", "mode": "guided", "required_tools": tools,
        "goal": f"Using the table, compute the spread of {measure} (highest minus lowest) and state it."}),
        encoding="utf-8")
    return root, table, measure


def _spread(table: Table, measure: str):
    values = [v for v in _column(table, measure) if v is not None]
    exact = max(Fraction(repr(v)) for v in values) - min(Fraction(repr(v)) for v in values)
    return int(exact) if exact.denominator == 1 else float(exact)


def test_a_pack_that_names_table_query_answers_from_the_query(tmp_path):
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from agent.task.packs import load_pack
    from runtime_helpers import run_scripted

    root, table, measure = _pack(tmp_path, ["knowledge_search", "table_query"], 21)
    spread = _spread(table, measure)
    outputs = [json.dumps({"query": measure, "top_k": 3}),
               json.dumps({"sql": f'SELECT max("{measure}") - min("{measure}") FROM {table.sql_name}'}),
               json.dumps(f"The spread of {measure} is {spread}.")]
    outcome, policy = run_scripted(outputs, tmp_path, pack=load_pack(root))
    result = outcome.result
    assert (result.status, result.stop_reason) == ("completed", "completed")
    assert [o.tool for o in result.observations] == ["knowledge_search", "table_query"]
    assert result.observations[1].result["rows"][0][0] == pytest.approx(spread, abs=1e-9)
    system = policy.requests[0].messages[0]["content"]
    assert "- table_query:" in system  # offered because the pack names it
    assert table.sql_name in policy.requests[1].messages[-1]["content"]  # the model sees the name to query


def test_a_calculator_over_a_column_by_name_passes_the_operand_rule(tmp_path):
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from agent.task.packs import load_pack
    from runtime_helpers import run_scripted

    root, table, measure = _pack(tmp_path, ["knowledge_search", "calculator"], 22)
    spread = _spread(table, measure)
    column = f"col('{table.sql_name}', '{measure}')"
    outputs = [json.dumps({"query": measure, "top_k": 3}), json.dumps({"expression": f"max({column}) - min({column})"}),
               json.dumps(f"The spread of {measure} is {spread}.")]
    outcome, _ = run_scripted(outputs, tmp_path, pack=load_pack(root))
    result = outcome.result
    assert (result.status, result.stop_reason) == ("completed", "completed")
    calculator = result.observations[1]
    assert calculator.tool == "calculator" and calculator.ok and calculator.result["value"] == spread
    assert [r["aggregate"] for r in calculator.result["references"]] == ["max", "min"]


def test_a_large_csv_loads_fast_and_exactly(tmp_path):
    """Tens of thousands of rows load in one statement per table (a row-by-row insert took ~35 s for
    40 000), and a DECIMAL column sums to exactly the digits written."""
    rng = random.Random(31)
    rows = [(f"{_word(rng, 5)}{k}", f"{rng.uniform(0, 1000):.{rng.randint(0, 3)}f}") for k in range(20_000)]
    [table] = tables_from_files([("many.csv", "label,amount\n" + "".join(f"{a},{b}\n" for a, b in rows))])
    started = time.monotonic()
    result = tq.query([table], "SELECT count(*), sum(amount) FROM many")
    assert time.monotonic() - started < 5
    [[count, total]] = result["rows"]
    assert count == len(rows) and Decimal(repr(total)) == sum(Decimal(b) for _, b in rows)
