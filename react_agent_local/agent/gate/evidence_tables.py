"""What the cited Observations say about named things: tables, computations and thresholds.

The claim reader (``bound_claims.py``) checks a number against what the answer says it is; this module
gives it the evidence in three shapes, read from the results the tools return:

* **tables** -- rows with a label and numeric cells by column: a knowledge search's ``tables``
  (``columns`` with names and units, ``rows``; ``rows_total`` marks a sample), its ``records``
  (``columns``: column -> group -> value) and a release record's ``data.batches``; a query's
  result (``table_query``: ``columns``, ``rows``) is a table too, never a complete one, since it
  holds the rows its SQL picked;
* **computations** -- what the runtime computed: a calculator's ``expression`` and ``value``, each
  numeric cell of a query's result, each with the kind of quantity it is (a mean, a sum, a
  difference, ...), read from the expression's syntax tree or the SQL's projection. Of a calculator
  expression it also reads what it computes with: its literals as written (not the count a sum
  of that many terms is divided by, the 3 of ``(a + b + c) / 3``), each factor a product repeats
  three times or more with how often (a power written out), and whether each of its sums is a sum
  of one source's cells, each taken once: one column of one table, one row of one table, one row's
  column across tables, or whole same-named columns of several tables. A sum whose terms are all
  cells of the cited complete tables and that is none of these (``(69.5 + 80 + 71.5) / 3`` over
  two months' tables, a cell taken twice) is *mixed*;
* **thresholds** -- named numbers a record states as rules: a record's ``rules``, a release rule, and
  the ``name: number`` lines of the prose the search returned (``- every_region_gte: 72``).

Nothing here knows a pack, a column or a word of a task: names are the evidence's own.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Literal

from agent.contracts.decision import Observation
from agent.gate.numbers import close, read_numbers
from agent.tools.base import ToolError
from agent.tools.calculator import evaluate as calculate, parse as parse_calculation

#: the kind of quantity a computation gives
Quantity = Literal["mean", "median", "sum", "count", "min", "max", "difference", "ratio", "product", "value"]

_RULE_LINE = re.compile(r"^\s*(?:[-*+]\s*)?([^\W\d][\w .\-/\u3400-\u9fff]{0,48}?)\s*[:：=]\s*([-+−]?\d[\d,]*(?:\.\d+)?)\s*%?\s*$",
                        re.MULTILINE)
_UNIT = re.compile(r"\s*[(（\[][^)）\]]*[)）\]]\s*$")


def key(text: str) -> str:
    """A name as compared: NFKC, casefolded, spaces collapsed."""
    return " ".join(unicodedata.normalize("NFKC", str(text)).casefold().split())


def core_name(column: str) -> str:
    """A column's name without a trailing unit in brackets (``Task Success (%)`` -> ``Task Success``)."""
    return _UNIT.sub("", column).strip() or column


@dataclass(frozen=True)
class Table:
    """Rows of one table: row label -> column -> number (cells that hold no number are left out)."""

    obs_id: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, dict[str, float]], ...]
    #: every row of the table is here (not a sample, not a query's pick)
    complete: bool = True
    #: the name a calculator reference or a query calls it by (``sql_name``)
    name: str = ""

    def labels(self) -> list[str]:
        return [label for label, _ in self.rows]

    def value(self, label: str, column: str) -> float | None:
        return next((cells.get(column) for name, cells in self.rows if key(name) == key(label)), None)

    def column_values(self, column: str) -> list[float]:
        return [cells[column] for _, cells in self.rows if column in cells]


@dataclass(frozen=True)
class Computation:
    """One number the runtime computed, with the kind of quantity it is."""

    obs_id: str
    kind: Quantity
    value: float
    text: str  # the expression, or the SQL's projection for this column
    #: a calculator expression's literals as written, but the count a mean divides by
    operands: tuple[str, ...] = ()
    #: (factor, times) for each factor a product repeats three times or more
    repeats: tuple[tuple[float, int], ...] = ()
    #: why one of its sums is no sum of one source's cells (empty when each is)
    mixed: str = ""


@dataclass
class Evidence:
    """The cited Observations read as tables, computations, thresholds and prose."""

    tables: list[Table] = field(default_factory=list)
    computations: list[Computation] = field(default_factory=list)
    thresholds: dict[str, float] = field(default_factory=dict)
    prose: list[str] = field(default_factory=list)

    def labels(self) -> list[str]:
        """Every row label of every table, longest first (so 'North America' wins over 'North')."""
        found = {key(label): label for t in self.tables for label in t.labels() if label.strip()}
        return sorted(found.values(), key=len, reverse=True)

    def columns(self) -> list[str]:
        found = {key(c): c for t in self.tables for c in t.columns if c.strip()}
        return sorted(found.values(), key=len, reverse=True)

    def complete_tables(self) -> list[Table]:
        """The complete tables of values, each content once (a search returns a record both as a table
        and a record); a table of the record's rules (every row a threshold's name) holds no values."""
        rules = {key(name) for name in self.thresholds}
        return [t for t in _distinct(self.tables) if not (rules and all(key(label) in rules for label in t.labels()))]


def _cell_number(cell: Any) -> float | None:
    if isinstance(cell, bool) or cell is None:
        return None
    if isinstance(cell, (int, float)):
        return float(cell)
    if isinstance(cell, str):
        found = read_numbers(cell)
        return found[0].value if len(found) == 1 else None
    return None


def _table_of_rows(obs_id: str, title: str, columns: list[str], rows: list[list[Any]], complete: bool,
                   name: str = "") -> Table | None:
    if not columns or not rows:
        return None
    # The row label is the first column whose cells are mostly text.
    label_at = next((i for i in range(len(columns))
                     if sum(isinstance(r[i], str) and _cell_number(r[i]) is None for r in rows if i < len(r))
                     * 2 >= len(rows)), None)
    if label_at is None:
        return None
    out = []
    for row in rows:
        if label_at >= len(row) or not isinstance(row[label_at], str):
            continue
        cells = {columns[i]: v for i in range(min(len(columns), len(row))) if i != label_at
                 and (v := _cell_number(row[i])) is not None}
        out.append((row[label_at].strip(), cells))
    names = tuple(c for i, c in enumerate(columns) if i != label_at)
    return Table(obs_id, title, names, tuple(out), complete, name) if out else None


def _knowledge_tables(obs: Observation, result: dict[str, Any]) -> list[Table]:
    out: list[Table] = []
    for table in result.get("tables") or []:
        if not isinstance(table, dict):
            continue
        columns = [str(c.get("name", "")) if isinstance(c, dict) else str(c) for c in table.get("columns") or []]
        rows = [r for r in table.get("rows") or [] if isinstance(r, list)]
        complete = not (isinstance(table.get("rows_total"), int) and table["rows_total"] > len(rows))
        made = _table_of_rows(obs.id, str(table.get("title") or ""), columns, rows, complete,
                              str(table.get("sql_name") or ""))
        if made:
            out.append(made)
    records = result.get("records")
    for title, record in (records.items() if isinstance(records, dict) else []):
        if not isinstance(record, dict):
            continue
        columns = record.get("columns") if isinstance(record.get("columns"), dict) else None
        if not columns and isinstance(record.get("values"), dict):
            columns = {str(record.get("value_column") or ""): record["values"]}
        groups: dict[str, dict[str, float]] = {}
        for column, values in (columns or {}).items():
            for group, value in (values.items() if isinstance(values, dict) else []):
                if (number := _cell_number(value)) is not None:
                    groups.setdefault(str(group), {})[str(column)] = number
        if groups:
            source = str(record.get("source_id") or "").rsplit(".", 1)[0]
            out.append(Table(obs.id, str(record.get("title") or title), tuple(columns), tuple(groups.items()),
                             name=source))
    batches = (result.get("data") or {}).get("batches") if isinstance(result.get("data"), dict) else None
    if isinstance(batches, dict) and batches:
        rows = tuple((str(g), {"": float(v)}) for g, v in batches.items() if _cell_number(v) is not None)
        out.append(Table(obs.id, "release record", ("",), rows))
    return out


def _thresholds(result: dict[str, Any]) -> dict[str, float]:
    found: dict[str, float] = {}
    records = result.get("records")
    for record in (records.values() if isinstance(records, dict) else []):
        for name, value in ((record.get("rules") or {}).items() if isinstance(record, dict) else []):
            if (number := _cell_number(value)) is not None:
                found[str(name)] = number
    data = result.get("data") if isinstance(result.get("data"), dict) else {}
    for name, value in (data.get("release_rule") or {}).items():
        if (number := _cell_number(value)) is not None:
            found[str(name)] = number
    for text in _prose(result):
        for match in _RULE_LINE.finditer(text):
            number = read_numbers(match.group(2))
            if number:
                found.setdefault(match.group(1).strip(), number[0].value)
    return found


def _prose(result: dict[str, Any]) -> list[str]:
    texts = [c["text"] for c in result.get("citations") or [] if isinstance(c, dict) and isinstance(c.get("text"), str)]
    texts += [t["prose"] for t in result.get("tables") or [] if isinstance(t, dict) and isinstance(t.get("prose"), str)]
    return texts


# -- computations ---------------------------------------------------------------------------------


def _terms(node: ast.AST) -> int:
    """How many terms an addition chain has (1 for anything else)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _terms(node.left) + _terms(node.right)
    return 1


def _constant(node: ast.AST) -> float | None:
    return float(node.value) if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) else None


def expression_kind(expression: str) -> Quantity:
    """The kind of quantity a calculator expression computes, by its outermost operation: ``(a + b +
    c) / 3`` a mean, ``a + b`` a sum, ``a - b`` (``mean - mean`` too) a difference, ``a / b`` and ``a
    / b * 100`` a ratio, ``a * b`` and ``a ** n`` a product."""
    text = unicodedata.normalize("NFKC", expression).translate(str.maketrans({"×": "*", "÷": "/", "−": "-"}))
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "value"
    while isinstance(node, ast.Call) and getattr(node.func, "id", "") == "round" and node.args:
        node = node.args[0]
    if isinstance(node, ast.Call):
        name = getattr(node.func, "id", "")
        return {"mean": "mean", "sum": "sum", "min": "min", "max": "max", "median": "median"}.get(name, "value")
    if not isinstance(node, ast.BinOp):
        return "value"
    if isinstance(node.op, ast.Sub):
        return "difference"
    if isinstance(node.op, ast.Add):
        return "sum"
    if isinstance(node.op, ast.Div):
        n = _terms(node.left)
        if n > 1 and _constant(node.right) == n:
            return "mean"
        # "x * 7 / 100": a percentage of x; "(b - a) / 100" is still a relative change
        sub = isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.Sub)
        return "product" if _constant(node.right) == 100 and not sub else "ratio"
    if isinstance(node.op, ast.Mult):
        # a share written as a ratio times 100 ("a / b * 100"); any other product is one
        sides = (node.left, node.right)
        if any(_constant(side) == 100 for side in sides) and any(
                isinstance(side, ast.BinOp) and isinstance(side.op, ast.Div) for side in sides):
            return "ratio"
        return "product"
    if isinstance(node.op, ast.Pow):
        return "product"
    return "value"


def _chains(node: ast.AST, op: type, out: list[list[ast.AST]]) -> list[list[ast.AST]]:
    """Every maximal chain of ``op`` in the tree (``a + b + c`` is one chain of three terms)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, op):
        def flat(n: ast.AST) -> list[ast.AST]:
            return flat(n.left) + flat(n.right) if isinstance(n, ast.BinOp) and isinstance(n.op, op) else [n]
        out.append(flat(node))
        for term in out[-1]:
            _chains(term, op, out)
    else:
        for child in ast.iter_child_nodes(node):
            _chains(child, op, out)
    return out


#: one term of a sum: its value, and the cell a reference names (table, row, column), if any
Term = tuple[float, tuple[str, str, str] | None]


def calculation_parts(expression: str, references: list[Any]) -> tuple[tuple[str, ...], tuple[tuple[float, int], ...],
                                                                       list[list[Term]]]:
    """What a calculator expression computes with: its literals as written (not the count a sum of
    that many terms is divided by), the factors a product repeats three times or more, and each sum
    whose terms are all literals or cell references."""
    try:
        tree, source = parse_calculation(expression)
    except ToolError:
        return (), (), []
    divisors = {id(n.right) for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)
                and _constant(n.right) == _terms(n.left) > 1}
    literals = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in divisors),
                      key=lambda n: n.col_offset)
    operands = tuple(ast.get_source_segment(source, n) or repr(n.value) for n in literals)

    def value(node: ast.AST) -> float | None:
        try:
            return float(calculate(ast.get_source_segment(source, node) or ""))
        except ToolError:
            return None  # a reference (or nothing the calculator reads alone)

    repeats = []
    for factors in _chains(tree.body, ast.Mult, []):
        counts = Counter(v for f in factors if (v := value(f)) is not None and abs(v) != 1 and v != 0)
        repeats += [(v, n) for v, n in counts.items() if n >= 3]
    sums: list[list[Term]] = []
    for terms in _chains(tree.body, ast.Add, []):
        read: list[Term] = []
        for term in terms:  # a reference is a placeholder r0, r1, ... in the order of ``references``
            at = int(term.id[1:]) if isinstance(term, ast.Name) and term.id[1:].isdigit() else len(references)
            ref = references[at] if at < len(references) and isinstance(references[at], dict) else {}
            if ref.get("kind") == "cell" and _cell_number(ref.get("value")) is not None:
                read.append((float(ref["value"]), (str(ref.get("table")), str(ref.get("row")), str(ref.get("column")))))
            elif (number := _constant(term)) is not None:
                read.append((number, None))
            else:
                break
        else:
            sums.append(read)
    return operands, tuple(repeats), sums


def _mixed(terms: list[Term], tables: list[Table]) -> str:
    """Why the sum of ``terms`` is no sum of one source's cells, each once (empty when it is one, or
    when a term is no cell of ``tables``)."""
    cells = [(t, label, col, v) for t in tables for label, row in t.rows for col, v in row.items()]
    places = [[c for c in cells if close(c[3], v) and (at is None or (key(at[0]) == key(c[0].name) and key(at[1])
               == key(c[1]) and key(core_name(at[2])) == key(core_name(c[2]))))] for v, at in terms]
    if not terms or not all(places):
        return ""
    wanted = Counter(round(v, 9) for v, _ in terms)
    # one column of one table, one row of one table, one row's column across tables
    sources = [lambda c: (id(c[0]), c[2]), lambda c: (id(c[0]), key(c[1])), lambda c: (key(c[1]), key(core_name(c[2])))]
    for source in sources:
        for group in {source(c) for c in places[0]}:
            held = Counter(round(c[3], 9) for c in cells if source(c) == group)
            if all(held[v] >= n for v, n in wanted.items()):
                return ""
    for column in {key(core_name(c[2])) for c in cells}:  # whole same-named columns of several tables
        whole = [c for c in cells if key(core_name(c[2])) == column]
        if len({id(c[0]) for c in whole}) > 1 and Counter(round(c[3], 9) for c in whole) == wanted:
            return ""
    holders = Counter((id(c[0]), c[2]) for options in places for c in {(id(o[0]), o[2]): o for o in options}.values())
    shown = [(next(t for t in tables if id(t) == table_id), col) for (table_id, col), _ in holders.most_common(2)]
    held = "; ".join(f"{core_name(col) or 'value'} of {t.title or t.obs_id} holds "
                     + ", ".join(_fmt(v) for v in t.column_values(col)) for t, col in shown)
    (table, col), most = shown[0], holders.most_common(1)[0][1]
    named = (table.name or table.title, core_name(col)) if most > 1 else ("table", "column")
    return (" + ".join(_fmt(v) for v, _ in terms) + f" takes cells of several columns or tables, or a cell twice "
            f"({held}); a column's statistic takes each of its cells once: mean(col('{named[0]}', '{named[1]}')), "
            "or a table_query")


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _distinct(tables: list[Table]) -> list[Table]:
    """The complete tables, each content once (a search returns a record both as a table and a record)."""
    seen, out = set(), []
    for t in tables:
        signature = frozenset((key(label), key(core_name(c)), v) for label, row in t.rows for c, v in row.items())
        if t.complete and signature not in seen:
            seen.add(signature)
            out.append(t)
    return out


_SQL_AGGREGATES: dict[str, Quantity] = {"avg": "mean", "mean": "mean", "sum": "sum", "median": "median",
                                        "count": "count", "min": "min", "max": "max"}


def sql_kinds(sql: str, columns: list[str]) -> list[Quantity]:
    """Per result column of a query, the kind of quantity its projection computes (sqlglot reads the
    SQL; a projection it cannot read is a plain value)."""
    kinds: list[Quantity] = ["value"] * len(columns)
    try:
        import sqlglot
        from sqlglot import expressions as exp

        tree = sqlglot.parse_one(sql, read="duckdb")
    except Exception:  # noqa: BLE001 -- a query the reader cannot parse has plain values
        return kinds
    select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    if select is None:
        return kinds
    for i, projection in enumerate(select.expressions[:len(columns)]):
        node = projection.this if isinstance(projection, exp.Alias) else projection
        while isinstance(node, exp.Paren) or type(node).__name__ == "Round":
            node = node.this
        if isinstance(node, exp.Sub):
            kinds[i] = "difference"
        elif isinstance(node, exp.Div) or (isinstance(node, exp.Mul) and node.find(exp.Div) is not None):
            kinds[i] = "ratio"
        elif isinstance(node, exp.Add):
            kinds[i] = "sum"
        elif isinstance(node, exp.Mul):
            kinds[i] = "product"
        elif isinstance(node, exp.Func):
            name = (node.sql_name() if hasattr(node, "sql_name") else type(node).__name__).casefold()
            if isinstance(node, exp.Quantile) or "quantile" in name or "percentile" in name:
                kinds[i] = "median"
            else:
                kinds[i] = _SQL_AGGREGATES.get(name, "value")
    return kinds


def _query(obs: Observation, result: dict[str, Any]) -> tuple[list[Computation], Table | None]:
    columns = [str(c) for c in result.get("columns") or []]
    rows = [r for r in result.get("rows") or [] if isinstance(r, list)]
    kinds = sql_kinds(str(result.get("sql") or ""), columns)
    computed = [Computation(obs.id, kinds[i], value, f"{columns[i]} of {result.get('sql')}"[:200])
                for row in rows[:50] for i in range(min(len(columns), len(row)))
                if (value := _cell_number(row[i])) is not None and not isinstance(row[i], str)]
    return computed, _table_of_rows(obs.id, "query result", columns, rows, complete=False)


def read_evidence(observations: Iterable[Observation]) -> Evidence:
    """The successful ``observations`` as tables, computations, thresholds and prose."""
    evidence = Evidence()
    pending: list[tuple[int, list[list[Term]]]] = []
    for obs in observations:
        result = obs.result if obs.ok and isinstance(obs.result, dict) else None
        if result is None:
            continue
        if isinstance(result.get("expression"), str) and _cell_number(result.get("value")) is not None:
            operands, repeats, sums = calculation_parts(result["expression"], list(result.get("references") or []))
            evidence.computations.append(Computation(obs.id, expression_kind(result["expression"]),
                                                     float(result["value"]), result["expression"], operands, repeats))
            pending.append((len(evidence.computations) - 1, sums))
        if isinstance(result.get("sql"), str) and isinstance(result.get("rows"), list):
            computed, table = _query(obs, result)
            evidence.computations += computed
            if table:
                evidence.tables.append(table)
        evidence.tables += _knowledge_tables(obs, result)
        evidence.thresholds.update(_thresholds(result))
        evidence.prose += _prose(result)
    tables = evidence.complete_tables()
    for at, sums in pending:  # a sum is judged against every cited table, wherever it was read
        why = next((w for terms in sums if (w := _mixed(terms, tables))), "")
        if why:
            evidence.computations[at] = replace(evidence.computations[at], mixed=why)
    return evidence
