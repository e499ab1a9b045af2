"""The user's tables, whole: every column of every table in a pack's ``knowledge/`` with its unit and
the prose around it, as typed values the knowledge tool shows and the query tool runs SQL over.

Sources (regular, non-hidden files directly in the folder, at most 1 MiB, UTF-8):

* ``*.md``: every pipe table outside fenced code blocks; its ``title`` is the nearest heading above
  it and its ``prose`` the text of its own section and the file's other sections without a table
  (an introduction, notes, a rule), so "row X does not count" reaches the model with the numbers;
* ``*.csv`` / ``*.tsv``: the first row is the header; leading ``#`` lines are the prose, and so is a
  ``.md`` file of the same stem;
* ``*.json``: a list of objects, an object holding such lists (one table per key), or an object of
  objects (``{"name": {...}, ...}``: the keys become a first ``name`` column).

Columns. A header's unit is split off: ``Task Success (%)`` -> ``Task Success`` in ``%``, ``Cost [USD]``,
``金额（元）``. Failing that, a unit written in every number cell (``83%``, ``$1,200``, ``41 ms``, ``12 元``)
is the column's; failing that, a ``Unit``/``单位`` column with one value (or a ``unit`` field in JSON
records), or a ``Unit: X``/``单位：X`` note in the prose, is the unit of the table's only number column
without one. A column is ``number`` when every non-empty cell is a number (``1,234.5``, ``−3``,
``72%``: kept as written, never rescaled; ``-``/``n/a``/``—`` are empty), else ``text``; integral
numbers are ``int``.

Names. ``Table.id`` is ``<file stem>#t<n>`` (n counts the file's tables from 1, so it is stable
while the file is unchanged); ``sql_name`` is an ASCII identifier derived from the file stem (and n
where the file has several tables), unique in the folder, never an SQL keyword.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import stat
import unicodedata
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Literal, Union

Cell = Union[int, float, str, None]

MAX_FILE_BYTES = 1024 * 1024
MAX_ROWS = 50_000
MAX_COLUMNS = 256
PROSE_CHARS = 1500
# A table larger than this is shown by its schema and a sample of rows; the query tool reaches the rest.
VIEW_MAX_ROWS = 30
VIEW_MAX_COLUMNS = 12
VIEW_SAMPLE_ROWS = 8
TABLE_SUFFIXES = (".md", ".csv", ".tsv", ".json")


@dataclass(frozen=True)
class Column:
    name: str  # header text without the unit
    unit: str | None  # "%", "元", "USD", "ms", ... or None
    kind: Literal["number", "text"]


@dataclass(frozen=True)
class Table:
    id: str  # "<file stem>#t<n>", stable while the file is unchanged
    source: str  # file name only, never a path
    title: str  # nearest heading (or file title)
    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]  # numbers parsed (int where integral), text kept
    prose: str  # the section's text around the table, bounded
    sql_name: str  # the identifier the query tool knows it by (derived, unique, ASCII-safe)


class TableError(ValueError):
    """A file whose tables cannot be read; the message names the file by its name only."""


# --- cells and units ---------------------------------------------------------------------------

_EMPTY = {"", "-", "--", "—", "–", "n/a", "na", "null", "none", "nan", "/", "?"}
_MINUS = str.maketrans({"\u2212": "-", "\u2012": "-", "\u2013": "-", "\ufe63": "-", "\uff0d": "-"})
_PREFIX_UNITS = ("US$", "$", "€", "£", "¥", "￥")
# A number as people write it: sign, thousands separators, decimals, an exponent.
_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?|[+-]?\.\d+")
_CELL = re.compile(rf"^(?P<pre>US\$|[$€£¥￥])?\s*(?P<num>{_NUMBER.pattern})\s*(?P<unit>[^\d\s].{{0,11}})?$")
# What may stand as a unit after a number or inside a header's brackets.
_UNIT_WORD = re.compile(
    r"%|‰|pp|pts?|percent|[a-zA-Z]{1,3}/[a-zA-Z]{1,3}|ms|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?|days?|"
    r"ns|us|µs|μs|kb|mb|gb|tb|kib|mib|gib|b|bytes?|k|m|bn|x|×|kg|g|mg|t|km|m|cm|mm|l|ml|°c|°f|"
    r"(?-i:[A-Z]{3})|US\$|\$|€|£|¥|￥|persons?|people|users?|tickets?|calls?|units?|items?|"
    r"[\u4e00-\u9fff]{1,3}", re.IGNORECASE)
_HEADER_UNIT = re.compile(r"^(?P<name>.*?)\s*[(\[]\s*(?:in\s+)?(?P<unit>[^()\[\]]{1,16}?)\s*[)\]]\s*$")
_UNIT_HEADERS = {"unit", "units", "单位", "uom"}
_UNIT_NOTE = re.compile(r"(?:^|[\s(（,，;；。])(?:units?|单位)\s*[:：]\s*([^\s,，;；。)）]{1,12})", re.IGNORECASE)


def _clean(text: str) -> str:
    """A cell without markdown emphasis or code marks, whitespace collapsed."""
    text = " ".join(str(text).split())
    while len(text) >= 2 and text[0] == text[-1] and text[0] in "*_`":
        text = text[1:-1].strip()
    return text.strip("*`").strip()


def _as_number(text: str) -> int | float | None:
    try:
        value = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    if value == value.to_integral_value() and "e" not in text.lower():
        return int(value)
    number = float(value)
    return int(number) if number.is_integer() and abs(number) < 2**53 and "e" in text.lower() else number


def parse_cell(raw: str) -> tuple[int | float | None, str | None] | None:
    """``(number, unit)`` of a number cell (``83%`` -> ``(83, "%")``, ``$1,200`` -> ``(1200, "$")``),
    ``(None, None)`` for an empty cell, None for text."""
    text = _clean(unicodedata.normalize("NFKC", raw).translate(_MINUS))
    if text.lower() in _EMPTY:
        return None, None
    match = _CELL.match(text)
    if not match:
        return None
    unit = match.group("pre") or (match.group("unit") or "").strip() or None
    if match.group("unit") and not _UNIT_WORD.fullmatch(match.group("unit").strip()):
        return None  # "3 apples and a pear" is text, not a number
    if match.group("pre") and match.group("unit"):
        return None
    number = _as_number(match.group("num"))
    return (number, unit) if number is not None else None


def split_header(raw: str) -> tuple[str, str | None]:
    """``Task Success (%)`` -> ``("Task Success", "%")``; a bracket that is no unit stays in the name."""
    text = _clean(unicodedata.normalize("NFKC", raw))
    match = _HEADER_UNIT.match(text)
    if match and match.group("name").strip() and _UNIT_WORD.fullmatch(match.group("unit").strip()):
        return match.group("name").strip(), match.group("unit").strip()
    return text, None


def _column_kind(cells: list[str]) -> tuple[Literal["number", "text"], str | None]:
    parsed = [parse_cell(c) for c in cells]
    if not cells or any(p is None for p in parsed) or all(p[0] is None for p in parsed):  # type: ignore[index]
        return "text", None
    units = {p[1] for p in parsed if p and p[0] is not None}
    return "number", (units.pop() if len(units) == 1 else None)


def _build(header: list[str], body: list[list[str]], prose: str) -> tuple[tuple[Column, ...], tuple[tuple[Cell, ...], ...]]:
    width = min(max([len(header)] + [len(r) for r in body]), MAX_COLUMNS)
    header = (header + [""] * width)[:width]
    body = [(r + [""] * width)[:width] for r in body]
    columns: list[Column] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(header):
        name, unit = split_header(raw)
        name = name or f"column {i + 1}"
        if name.casefold() in seen:  # two columns of one name: the second is "name 2"
            seen[name.casefold()] += 1
            name = f"{name} {seen[name.casefold()]}"
        seen.setdefault(name.casefold(), 1)
        kind, cell_unit = _column_kind([r[i] for r in body])
        columns.append(Column(name, unit or cell_unit if kind == "number" else unit, kind))
    columns = _units_from_context(columns, body, prose)
    rows = []
    for r in body:
        row: list[Cell] = []
        for column, raw in zip(columns, r):
            if column.kind == "number":
                parsed = parse_cell(raw)
                row.append(parsed[0] if parsed else None)
            else:
                text = _clean(unicodedata.normalize("NFKC", raw))
                row.append(text if text else None)
        rows.append(tuple(row))
    return tuple(columns), tuple(rows)


def _units_from_context(columns: list[Column], body: list[list[str]], prose: str) -> list[Column]:
    """A unit column with one value, or a unit note, names the unit of the only number column without one."""
    bare = [i for i, c in enumerate(columns) if c.kind == "number" and c.unit is None]
    if len(bare) != 1:
        return columns
    unit = None
    for i, column in enumerate(columns):
        if column.kind == "text" and column.name.casefold() in _UNIT_HEADERS:
            values = {_clean(r[i]) for r in body if _clean(r[i])}
            unit = values.pop() if len(values) == 1 else None
    if unit is None and (note := _UNIT_NOTE.search(unicodedata.normalize("NFKC", prose))):
        unit = note.group(1)
    if unit is None:
        return columns
    column = columns[bare[0]]
    return [Column(c.name, unit, c.kind) if i == bare[0] else c for i, c in enumerate(columns)]


# --- markdown ----------------------------------------------------------------------------------

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def _cells(line: str) -> list[str]:
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]


def _markdown_blocks(text: str) -> list[tuple[int, int, list[str], list[list[str]]]]:
    """(first line, line after the table, header, rows) of every pipe table outside fenced code."""
    lines, found, fence, i = text.splitlines(), [], None, 0
    while i < len(lines):
        line = lines[i]
        marker = _FENCE.match(line)
        if marker:
            tick = marker.group(1)
            if fence is None:
                fence = tick
            elif tick[0] == fence[0] and len(tick) >= len(fence) and not line.strip()[len(tick):].strip():
                fence = None
        elif fence is None and "|" in line and i + 1 < len(lines) and "|" in lines[i + 1] and _SEPARATOR.match(lines[i + 1]):
            start, header, rows = i, _cells(line), []
            i += 2
            while i < len(lines) and "|" in lines[i] and lines[i].strip() and not _FENCE.match(lines[i]):
                if not _SEPARATOR.match(lines[i]):
                    rows.append(_cells(lines[i]))
                i += 1
            found.append((start, i, header, rows))
            continue
        i += 1
    return found


def _sections(lines: list[str]) -> list[tuple[int, int, str]]:
    """(first line, end line, heading text) of each heading's section; a preamble has heading ''."""
    starts = [(i, m.group(2)) for i, line in enumerate(lines) if (m := _HEADING.match(line))]
    if not starts or starts[0][0] > 0:
        starts.insert(0, (0, ""))
    return [(s, starts[k + 1][0] if k + 1 < len(starts) else len(lines), h) for k, (s, h) in enumerate(starts)]


def _prose(lines: list[str], own: int, sections: list[tuple[int, int, str]], table_lines: set[int]) -> str:
    """The table's own section first, then the file's sections that hold no table, in document order,
    within PROSE_CHARS; table lines themselves are left out."""
    def text(section: tuple[int, int, str]) -> str:
        start, end, _ = section
        kept = [lines[i].strip() for i in range(start, end) if i not in table_lines]
        return "\n".join(line for line in kept if line).strip()

    chosen: dict[int, str] = {}
    budget = PROSE_CHARS
    order = [own] + [k for k, (s, e, _) in enumerate(sections) if k != own and not table_lines & set(range(s, e))]
    for k in order:
        part = text(sections[k])
        if not part:
            continue
        if len(part) > budget:
            if k == own or budget > 80:
                chosen[k] = part[: max(budget - 1, 0)].rstrip() + "…"
            break
        chosen[k] = part
        budget -= len(part) + 2
    return "\n\n".join(chosen[k] for k in sorted(chosen))


def _from_markdown(name: str, text: str) -> list[tuple[str, list[str], list[list[str]], str]]:
    lines = text.splitlines()
    blocks = _markdown_blocks(text)
    sections = _sections(lines)
    table_lines = {i for start, end, _, _ in blocks for i in range(start, end)}
    file_title = next((m.group(2) for line in lines if (m := _HEADING.match(line))), "") or Path(name).stem
    out = []
    for start, _, header, rows in blocks:
        own = max(k for k, (s, _, _) in enumerate(sections) if s <= start)
        title = next((sections[k][2] for k in range(own, -1, -1) if sections[k][2]), file_title)
        out.append((title, header, [r for r in rows if any(c.strip() for c in r)], _prose(lines, own, sections, table_lines)))
    return out


# --- CSV, TSV, JSON ----------------------------------------------------------------------------


def _bounded(text: str) -> str:
    return text if len(text) <= PROSE_CHARS else text[: PROSE_CHARS - 1].rstrip() + "…"


def _from_delimited(name: str, text: str, companion: str) -> list[tuple[str, list[str], list[list[str]], str]]:
    lines = text.splitlines()
    notes = []
    while lines and lines[0].lstrip().startswith("#"):
        notes.append(lines.pop(0).lstrip("# ").rstrip())
    body = "\n".join(lines)
    if name.lower().endswith(".tsv"):
        delimiter = "\t"
    else:
        first = next((line for line in lines if line.strip()), "")
        delimiter = max(",;\t|", key=first.count) if first else ","
    rows = [r for r in csv.reader(io.StringIO(body), delimiter=delimiter) if any(c.strip() for c in r)]
    if not rows:
        return []
    prose = "\n".join(n for n in notes if n)
    if companion:
        prose = (prose + "\n\n" + companion).strip()
    return [(Path(name).stem, rows[0], rows[1:], _bounded(prose))]


def _scalar(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if isinstance(value, float) else str(value)
    if isinstance(value, list) and all(not isinstance(v, (list, dict)) for v in value):
        return "; ".join(_scalar(v) for v in value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)[:200]
    return str(value)


def _records_table(title: str, records: list[dict], prose: str, key_column: str | None = None,
                   keys: list[str] | None = None) -> tuple[str, list[str], list[list[str]], str]:
    fields: dict[str, None] = {}
    for record in records:
        fields.update(dict.fromkeys(str(k) for k in record))
    header = ([key_column] if key_column else []) + list(fields)
    rows = [([keys[i]] if keys else []) + [_scalar(r.get(f)) for f in fields] for i, r in enumerate(records)]
    unit_field = next((f for f in fields if f.casefold() in _UNIT_HEADERS), None)
    if unit_field:
        units = {str(r.get(unit_field)) for r in records if r.get(unit_field) not in (None, "")}
        if len(units) == 1:
            prose = (prose + f"\nunit: {units.pop()}").strip()
    return title, header, rows, prose


def _from_json(name: str, text: str, companion: str) -> list[tuple[str, list[str], list[list[str]], str]]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise TableError(f"{name} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    stem, prose = Path(name).stem, _bounded(companion)

    def objects(value: object) -> bool:
        return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)

    def keyed(value: object) -> bool:
        return isinstance(value, dict) and bool(value) and all(isinstance(v, dict) for v in value.values())

    if objects(data):
        return [_records_table(stem, data, prose)]  # type: ignore[arg-type]
    if keyed(data) and not any(objects(v) or keyed(v) for v in data.values()):  # type: ignore[union-attr]
        return [_records_table(stem, list(data.values()), prose, "name", list(data))]  # type: ignore[union-attr]
    out = []
    if isinstance(data, dict):
        for key, value in data.items():
            if objects(value):
                out.append(_records_table(str(key), value, prose))
            elif keyed(value):
                out.append(_records_table(str(key), list(value.values()), prose, "name", list(value)))
    return out


# --- names -------------------------------------------------------------------------------------

_SQL_KEYWORDS = frozenset(
    "all alter and any array as asc attach between by case cast check collate column constraint copy create "
    "cross current default delete desc describe distinct drop else end except exists export false fetch "
    "filter for foreign from full glob group having ilike in inner insert install intersect into is join "
    "lateral left like limit load natural not null of offset on only or order outer over pivot pragma "
    "primary qualify range recursive references returning right row rows select set similar some summarize "
    "table then to true union unique unpivot update using values view when where window with".split())


def _identifier(text: str) -> str:
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    ident = re.sub(r"[^a-z0-9]+", "_", ascii_text.lower()).strip("_")[:48].strip("_")
    if not ident:
        ident = "table"
    if ident[0].isdigit() or ident in _SQL_KEYWORDS:
        ident = "t_" + ident
    return ident


# --- reading -----------------------------------------------------------------------------------


def tables_from_files(files: list[tuple[str, str]], problems: list[str] | None = None) -> list[Table]:
    """``files`` = [(file name, text), ...] -> their tables, in file order then document order. A
    file that cannot be read as tables is left out; its reason goes to ``problems`` when given."""
    texts = {Path(n).name: t for n, t in files}
    companions = {Path(n).stem: t for n, t in texts.items() if n.lower().endswith(".md")}
    parsed: list[tuple[str, int, int, str, list[str], list[list[str]], str]] = []
    for name, text in texts.items():
        text = unicodedata.normalize("NFKC", text) if not name.lower().endswith(".json") else text
        lower = name.lower()
        try:
            if lower.endswith(".md"):
                found = _from_markdown(name, text)
            elif lower.endswith((".csv", ".tsv")):
                found = _from_delimited(name, text, companions.get(Path(name).stem, "").strip())
            elif lower.endswith(".json"):
                found = _from_json(name, text, companions.get(Path(name).stem, "").strip())
            else:
                continue
        except (TableError, csv.Error) as exc:
            if problems is not None:
                problems.append(str(exc) if isinstance(exc, TableError) else f"{name}: {exc}")
            continue
        for n, (title, header, rows, prose) in enumerate(found, start=1):
            if len(rows) > MAX_ROWS:
                if problems is not None:
                    problems.append(f"{name}: table {n} has {len(rows)} rows, more than {MAX_ROWS}; not read")
                continue
            if header and rows is not None:
                parsed.append((name, n, len(found), title, header, rows, prose))
    tables, used = [], set()
    for name, n, count, title, header, rows, prose in parsed:
        base = _identifier(Path(name).stem + (f"_{n}" if count > 1 else ""))
        sql_name, k = base, 2
        while sql_name in used:
            sql_name, k = f"{base}_{k}", k + 1
        used.add(sql_name)
        columns, values = _build(header, rows, prose)
        tables.append(Table(id=f"{Path(name).stem}#t{n}", source=name, title=_clean(title) or Path(name).stem,
                            columns=columns, rows=values, prose=prose, sql_name=sql_name))
    return tables


def list_table_files(folder: Path) -> list[str]:
    """Names of the regular, non-hidden files of the table kinds directly in ``folder``, sorted."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []
    names = []
    for entry in entries:
        if entry.name.startswith(".") or not entry.name.lower().endswith(TABLE_SUFFIXES):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_FILE_BYTES:
            names.append(entry.name)
    return names


class NotARegularFile(OSError):
    """The name is a symlink, a FIFO, a folder or a file over ``MAX_FILE_BYTES``: never worth a retry."""


def read_bytes(folder: Path, name: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """One file's bytes, at most ``limit``; never follows a symlink or waits on a FIFO (O_NOFOLLOW,
    O_NONBLOCK, then fstat re-checks type and size on the descriptor read). ``NotARegularFile`` for
    anything but a regular file of at most ``limit`` bytes; other ``OSError`` as the system raises it."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(Path(folder) / name, flags)
    except OSError as exc:
        if exc.errno == getattr(os, "ELOOP", None):  # O_NOFOLLOW met a symlink
            raise NotARegularFile(f"{name} is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise NotARegularFile(f"{name} is not a regular file of at most {limit} bytes")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(limit + 1)
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise NotARegularFile(f"{name} is larger than {limit} bytes")
    return raw


def read_text(folder: Path, name: str) -> str:
    """``read_bytes`` decoded as UTF-8 (a BOM dropped); UnicodeDecodeError when it is not."""
    return read_bytes(folder, name).decode("utf-8-sig")


def read_tables(folder: Path, problems: list[str] | None = None) -> list[Table]:
    """Every table of the folder's ``.md``/``.csv``/``.tsv``/``.json`` files (see the module docstring)."""
    files = []
    for name in list_table_files(Path(folder)):
        try:
            files.append((name, read_text(Path(folder), name)))
        except (OSError, UnicodeDecodeError) as exc:
            if problems is not None:
                reason = "not valid UTF-8" if isinstance(exc, UnicodeDecodeError) else type(exc).__name__
                problems.append(f"{name} could not be read ({reason})")
    return tables_from_files(files, problems)


# --- what an Observation carries ---------------------------------------------------------------


def is_large(table: Table) -> bool:
    return len(table.rows) > VIEW_MAX_ROWS or len(table.columns) > VIEW_MAX_COLUMNS


def table_view(table: Table) -> dict:
    """``{"id", "source", "title", "sql_name", "columns": [{"name", "unit", "kind"}], "rows": [[...]],
    "prose"}``; a large table carries a sample of its rows and ``"rows_total"`` (the query tool
    reaches the rest)."""
    rows = table.rows[:VIEW_SAMPLE_ROWS] if is_large(table) else table.rows
    view: dict = {
        "id": table.id,
        "source": table.source,
        "title": table.title,
        "sql_name": table.sql_name,
        "columns": [{"name": c.name, "unit": c.unit, "kind": c.kind} for c in table.columns],
        "rows": [list(r) for r in rows],
        "prose": table.prose,
    }
    if is_large(table):
        view["rows_total"] = len(table.rows)
    return view


def label_column(table: Table) -> int | None:
    """The column that names a row: the first text column (None when every column is a number)."""
    return next((i for i, c in enumerate(table.columns) if c.kind == "text"), None)


def column_index(table: Table, name: str) -> int | None:
    """A column by its name (NFKC, case and spacing ignored; the unit may be written too)."""
    def key(text: str) -> str:
        return " ".join(unicodedata.normalize("NFKC", text).casefold().split())

    wanted = key(name)
    for i, column in enumerate(table.columns):
        if wanted in (key(column.name), key(f"{column.name} ({column.unit})") if column.unit else None):
            return i
    return None
