"""table_query: one read-only SQL SELECT over the pack's tables, run by an embedded DuckDB.

A question over a table is answered by a computation the model writes and the runtime runs, so the
numbers in the answer are referenced, not retyped. The tables are those ``agent/task/tables.py`` reads
from the pack's ``knowledge/`` (markdown, CSV/TSV, JSON records), each by its ``sql_name``, its
columns by their names without the unit (``"Task Success"``; ``"Task Success (%)"`` as the knowledge
tool labels it is read as the same column; names are case-insensitive, quote ones with spaces).

Two layers keep it read-only and local:

1. **The parser** (sqlglot, DuckDB dialect) before DuckDB sees anything: exactly one statement, a
   ``SELECT`` (``WITH ... SELECT``, ``UNION``/``INTERSECT``/``EXCEPT`` allowed); every table is one of
   the pack's tables or a CTE of the query, unqualified, never a table function (``read_csv``,
   ``glob``, ``range``, ...) or a file/URL string; every function is on ``ALLOWED_FUNCTIONS`` (pure
   aggregates, arithmetic, string and window functions); no ``SELECT ... INTO``. What runs is the
   statement as sqlglot writes it back (``sql`` in the result), so DuckDB runs what was checked.
2. **DuckDB's configuration**: a fresh in-memory connection per call, the tables loaded from the
   parsed ``Table`` objects (never by letting SQL read a file), ``enable_external_access=false``
   (no file, URL, ``COPY``, ``ATTACH``, ``INSTALL``), extension autoinstall/autoload off, Python
   replacement scans off, one thread, ``MEMORY_LIMIT``, then ``lock_configuration=true`` so no ``SET``
   can undo any of it.

Bounds: at most ``MAX_ROWS`` result rows come back (``truncated`` says when there were more); a
query running longer than ``QUERY_SECONDS`` is interrupted from a timer thread (and the tool's own
timeout kills the worker process beyond that). Numbers come back as DuckDB computed them: a
``DECIMAL`` as the nearest float (int where integral), never rounded further.

Result: ``{"sql": str, "columns": [str], "rows": [[int|float|str|None, ...]], "row_count": int,
"truncated": bool, "tables": [sql_name, ...]}``. Errors (``ToolError``, ``retryable=False``):
``table_query_invalid`` (not one parseable statement), ``table_query_refused`` (outside the allowlist;
the message names what and why), ``table_query_unknown_table`` / ``table_query_unknown_column`` (the
message lists the known ones), ``table_query_timeout``, ``table_query_too_large`` (memory),
``table_query_failed`` (DuckDB's own message, first line), ``table_query_no_tables``.
"""

from __future__ import annotations

import decimal
import logging
import re
import threading
import time
from typing import TYPE_CHECKING, Any

from pydantic import Field

from agent.task.tables import Column, Table, read_tables
from agent.tools.base import StrictArgs, Tool, ToolContext, ToolError

if TYPE_CHECKING:  # both are imported when a query runs, not when the registry is built
    from duckdb import DuckDBPyConnection
    from sqlglot.expressions import Expression

MAX_SQL = 2000
MAX_ROWS = 200
QUERY_SECONDS = 5.0
MEMORY_LIMIT = "256MB"
_MAX_CELL_TEXT = 500

#: functions a query may call (sqlglot's expression key, or DuckDB's name for one sqlglot does not model)
ALLOWED_FUNCTIONS = frozenset("""
sum avg mean min max median count countif count_if stddev stddevsamp stddev_samp stddevpop stddev_pop
variance var_samp varsamp variancepop var_pop mode quantile quantile_cont quantile_disc percentilecont
percentiledisc argmin argmax arg_min arg_max min_by max_by anyvalue any_value first last fsum favg
kahan_sum product bool_and bool_or logicaland logicalor groupconcat string_agg
round roundeven round_even abs ceil ceiling floor sign sqrt pow power exp ln log log10 log2 trunc
greatest least coalesce ifnull nullif cast trycast try_cast case if div mod
lower upper lcase ucase length len strlen trim ltrim rtrim substring substr replace concat concatws
concat_ws contains startswith starts_with endswith ends_with prefix suffix strposition strpos instr
position left right reverse initcap regexpextract regexp_extract regexplike regexp_matches
regexpreplace regexp_replace
rownumber row_number rank denserank dense_rank percentrank percent_rank cumedist cume_dist ntile lag
lead firstvalue first_value lastvalue last_value nthvalue nth_value
""".split())

_STATEMENT_NAMES = ("Insert", "Update", "Delete", "Create", "Drop", "Alter", "Copy", "Attach", "Detach",
                    "Install", "Pragma", "Set", "Command", "Describe", "Summarize", "Use", "Transaction",
                    "Commit", "Rollback", "Merge", "Export", "LoadData", "Into", "Show", "Refresh", "Cache",
                    "Uncache", "Analyze", "Grant", "Revoke", "Comment", "TruncateTable")


class TableQueryArgs(StrictArgs):
    """Run one read-only SQL SELECT over the pack's tables (as knowledge_search names them) and
    return its columns and rows, e.g. SELECT "name", "value" FROM t ORDER BY 2 LIMIT 1."""

    sql: str = Field(min_length=1, max_length=MAX_SQL,
                     description='One SELECT over the tables by their sql_name; quote column names with '
                                 'spaces: "Unit Price". Aggregates: sum avg min max median count stddev '
                                 'arg_min arg_max.')


def _refused(message: str) -> ToolError:
    return ToolError("table_query_refused", message[:400], retryable=False)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _listed(names: list[str], limit: int = 16) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# --------------------------------------------------------------------------------------------
# Layer 1: the parser
# --------------------------------------------------------------------------------------------


def _function_name(node: Expression) -> str:
    from sqlglot import exp

    return node.name.lower() if isinstance(node, exp.Anonymous) else type(node).key


def check_sql(sql: str, tables: list[Table]) -> tuple[str, list[str]]:
    """The statement as it will run and the pack tables it reads; ``ToolError`` where the text is not
    exactly one allowed SELECT (see the module docstring)."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # "falling back to Command" is refused below
    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except (SqlglotError, RecursionError, ValueError) as exc:
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ToolError("table_query_invalid", f"not a valid SQL SELECT: {first}", retryable=False) from None
    if len(statements) != 1:
        raise _refused(f"exactly one statement is allowed, not {len(statements)}")
    statement = statements[0]
    while isinstance(statement, exp.Subquery):  # "(SELECT ...)"
        statement = statement.this
    queries = tuple(getattr(exp, n) for n in ("Select", "Union", "Intersect", "Except", "SetOperation")
                    if hasattr(exp, n))
    if not isinstance(statement, queries):
        raise _refused(f"only a SELECT is allowed, not {type(statement).__name__.upper()}")
    forbidden = tuple(getattr(exp, n) for n in _STATEMENT_NAMES if hasattr(exp, n))
    by_name = {t.sql_name.casefold(): t for t in tables}
    ctes = {cte.alias_or_name.casefold() for cte in statement.find_all(exp.CTE)}
    used: dict[str, None] = {}
    for node in statement.walk():
        if isinstance(node, forbidden):
            raise _refused(f"{type(node).__name__.upper()} is not allowed; only a read-only SELECT")
        if isinstance(node, exp.Table):
            if not isinstance(node.this, exp.Identifier):
                raise _refused(f"table functions are not allowed ({node.this.sql(dialect='duckdb')[:60]}); "
                               f"read the tables by name: {_listed(list(by_name))}")
            if node.args.get("db") or node.args.get("catalog"):
                raise _refused(f"a table is named by its name alone, not {node.sql(dialect='duckdb')[:60]}")
            name = node.name.casefold()
            if name in by_name:
                used[by_name[name].sql_name] = None
            elif name not in ctes:
                raise ToolError("table_query_unknown_table",
                                f"no table '{node.name[:60]}'; the tables are {_listed(list(by_name))}", False)
        elif isinstance(node, exp.Func):
            name = _function_name(node)
            if name not in ALLOWED_FUNCTIONS:
                raise _refused(f"function {name.upper()} is not allowed; aggregates, arithmetic and string "
                               "functions only (sum avg min max median count stddev round abs arg_min arg_max "
                               "lower upper length ...)")
    _unit_labels(statement, [by_name[n.casefold()] for n in used])
    return statement.sql(dialect="duckdb"), list(used)


def _unit_labels(statement: Expression, tables: list[Table]) -> None:
    """A column written as the knowledge tool labels it (``"Task Success (%)"``) is that column."""
    from sqlglot import exp

    labels = {f"{c.name} ({c.unit})".casefold(): c.name for t in tables for c in t.columns if c.unit}
    for column in statement.find_all(exp.Column):
        name = labels.get(column.name.casefold())
        if name is not None:
            column.set("this", exp.Identifier(this=name, quoted=True))


# --------------------------------------------------------------------------------------------
# Layer 2: DuckDB, configured so that nothing outside the loaded tables can be reached
# --------------------------------------------------------------------------------------------


def _decimals(value: float) -> int:
    text = repr(value)
    if "e" in text or "E" in text:
        return 18
    return len(text.partition(".")[2])


def _sql_type(table: Table, index: int) -> str:
    column: Column = table.columns[index]
    if column.kind == "text":
        return "VARCHAR"
    values = [row[index] for row in table.rows if row[index] is not None]
    if all(isinstance(v, int) for v in values):
        return "BIGINT" if all(-2**63 <= v < 2**63 for v in values) else "HUGEINT"  # type: ignore[operator]
    # DECIMAL keeps sums exact; six spare digits keep a median or quantile between two cells exact too.
    scale = min(max(_decimals(float(v)) for v in values) + 6, 18)
    digits = max(len(str(abs(int(v)))) for v in values)  # type: ignore[arg-type]
    return f"DECIMAL(38, {scale})" if digits + scale <= 38 else "DOUBLE"


def _text(value: int | float | str) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def connect(tables: list[Table]) -> DuckDBPyConnection:
    """A fresh in-memory DuckDB holding ``tables``, its configuration locked."""
    import duckdb

    config = {"enable_external_access": False, "autoinstall_known_extensions": False,
              "autoload_known_extensions": False, "allow_community_extensions": False,
              "python_enable_replacements": False, "threads": 1, "memory_limit": MEMORY_LIMIT,
              "max_temp_directory_size": "0B"}
    connection = duckdb.connect(":memory:", config=config)
    for table in tables:
        types = [_sql_type(table, i) for i in range(len(table.columns))]
        columns = ", ".join(f"{_quote(c.name)} {t}" for c, t in zip(table.columns, types))
        connection.execute(f"CREATE TABLE {_quote(table.sql_name)} ({columns})")
        if table.rows:
            # One statement per table, a list per column (row-by-row inserts take seconds per
            # thousand rows); every value travels as text and is cast by DuckDB, so a DECIMAL gets the
            # digits as written, never a float's approximation.
            picks = ", ".join(f"CAST(UNNEST(?::VARCHAR[]) AS {t})" for t in types)
            lists = [[None if row[i] is None else _text(row[i]) for row in table.rows]
                     for i in range(len(table.columns))]
            connection.execute(f"INSERT INTO {_quote(table.sql_name)} SELECT {picks}", lists)
    connection.execute("SET lock_configuration = true")
    return connection


def _value(value: object) -> int | float | str | None:
    if value is None or isinstance(value, str):
        return value if value is None or len(value) <= _MAX_CELL_TEXT else value[:_MAX_CELL_TEXT] + "…"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return value
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    return str(value)[:_MAX_CELL_TEXT]


def run_query(connection: DuckDBPyConnection, sql: str, cancel: threading.Event | None = None,
              seconds: float | None = None) -> tuple[list[str], list[list[Any]], bool]:
    """(column names, at most MAX_ROWS rows, whether there were more) of ``sql`` on ``connection``;
    interrupted after ``seconds`` (default ``QUERY_SECONDS``) or when ``cancel`` is set."""
    import duckdb

    seconds = QUERY_SECONDS if seconds is None else seconds
    done = threading.Event()
    timed_out = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + seconds
        while not done.wait(0.05):
            if time.monotonic() >= deadline or (cancel is not None and cancel.is_set()):
                timed_out.set()
                connection.interrupt()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        cursor = connection.execute(sql)
        names = [d[0] for d in cursor.description or []]
        rows = cursor.fetchmany(MAX_ROWS + 1)  # DuckDB holds the rest; only these cross into Python
    except duckdb.InterruptException:
        raise ToolError("table_query_timeout", f"the query ran longer than {seconds:g} s and was stopped; "
                        "compute less (aggregate, filter, avoid joining a table with itself)", False) from None
    except duckdb.OutOfMemoryException:
        raise ToolError("table_query_too_large", f"the query needs more than {MEMORY_LIMIT} of memory", False) from None
    except duckdb.Error as exc:
        if timed_out.is_set():
            raise ToolError("table_query_timeout", f"the query ran longer than {seconds:g} s and was stopped",
                            False) from None
        raise
    finally:
        done.set()
        watcher.join()
    return names, [[_value(v) for v in row] for row in rows[:MAX_ROWS]], len(rows) > MAX_ROWS


def _column_error(message: str, tables: list[Table]) -> ToolError | None:
    match = re.search(r'(?:column|Column) (?:with name )?"?([^"\s]+(?: [^"]+)?)"? (?:not found|does not exist)', message)
    if not match:
        return None
    known = "; ".join(f"{t.sql_name}: " + ", ".join(_quote(c.name) for c in t.columns) for t in tables)
    return ToolError("table_query_unknown_column", f"no column {_quote(match.group(1))}; the columns are {known}"[:600],
                     False)


def query(tables: list[Table], sql: str, cancel: threading.Event | None = None) -> dict[str, Any]:
    """Check ``sql`` (layer 1), run it on a fresh connection (layer 2), return the result."""
    import duckdb

    if not tables:
        raise ToolError("table_query_no_tables", "the pack's knowledge holds no table to query", False)
    checked, used = check_sql(sql, tables)
    connection = connect(tables)
    try:
        names, rows, truncated = run_query(connection, checked, cancel)
    except duckdb.Error as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        used_tables = [t for t in tables if t.sql_name in used] or tables
        raise _column_error(message, used_tables) or ToolError("table_query_failed", message[:400], False) from None
    finally:
        connection.close()
    return {"sql": checked, "columns": names, "rows": rows, "row_count": len(rows), "truncated": truncated,
            "tables": used}


def _execute(ctx: ToolContext, args: TableQueryArgs, cancel: threading.Event) -> dict[str, Any]:
    started = time.perf_counter()
    result = query(read_tables(ctx.knowledge_dir), args.sql, cancel)
    result["tool_latency_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return result


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    return value if isinstance(value, str) else str(value) if isinstance(value, int) else repr(value)


def _render(result: dict[str, Any]) -> str:
    rows = result.get("rows") or []
    text = (f"{result.get('sql')} -> " + " | ".join(result.get("columns") or []) + "; rows: "
            + ("; ".join(" | ".join(_cell(v) for v in row) for row in rows) if rows else "none"))
    if result.get("truncated"):
        text += f" (only the first {len(rows)} rows; aggregate or filter to see the rest)"
    return text


TOOL = Tool(
    name="table_query",
    args_model=TableQueryArgs,
    execute=_execute,
    timeout_seconds=10.0,
    digest=lambda r: [r.get("sql"), r.get("rows")],
    render=_render,
    hint='Write one SELECT over a table knowledge_search names, e.g. SELECT max("<column>") - min("<column>") '
         'FROM <table>; let the query compute, do not copy numbers.',
    summary="A number over a table is missing: compute it with one SELECT.",
    import_path="agent.tools.table_query:TOOL",
    read_only=True,
)
