"""Read evaluation records as people write them: the markdown pieces (pipe tables outside fenced
code blocks, cells, numbers, rule statements, rule names) and the records of any rule.

``read_records([(file_name, markdown_text), ...])`` returns every record, one per file with a table
of groups and numbers, keyed by date or title, its rules as named numbers (see its docstring).
Standalone on purpose (stdlib only), so it can be tested on its own. A family whose record has a
fixed shape reads it with the same pieces: the release-rule family's ``record.py`` reads the
knowledge search's ``data`` (groups and the release rule) with them.

The whole text is NFKC-normalised first, so full-width digits, colons, equals signs, percent signs,
parentheses and pipes (``７２％``, ``：``, ``＝``, ``（）``, ``｜``) read like their ASCII forms.

Rule names: ``Max spread`` / ``max-spread`` / ``maxSpread`` -> ``max_spread`` (``rule_name``); the
release rule's spellings (``avg_gte``, ``min_average``, ``every_group_gte``, ``each_team_ge`` ...:
``release_key``) become its keys, ``average_gte`` and ``every_batch_gte`` (``RULE_KEYS``), so a
record of any rule names them as the release rule's checks do.

Integral numbers come back as ``int`` (``72``, not ``72.0``); labels keep document order. Messages
name files by file name only.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal, InvalidOperation

#: the release rule's keys as its checks name them (``release_key`` reads their spellings)
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
SUMMARY_LABELS = {"average", "mean", "overall", "total", "all", "平均", "平均值", "总体", "整体", "合计", "总计"}

# --- rule keys ---------------------------------------------------------------------------------

_GROUP_NOUN = r"(?:batch(?:es)?|groups?|regions?|teams?|sites?|cohorts?|segments?|splits?)"
_AVERAGE_KEY = re.compile(r"(?:average|avg|mean)_(?:gte|ge)|min_(?:average|avg|mean)")
_EVERY_KEY = re.compile(
    rf"(?:every|each|all|min_each|min_every)(?:_{_GROUP_NOUN})?_(?:gte|ge)|min_{_GROUP_NOUN}_(?:gte|ge)"
)
_NUM = r"[+-]?\d+(?:\.\d+)?"
# An identifier, optional closing quote/bold, a comparison, optional opening quote, a number.
# The number may not continue as "78.5.1"; "78." at the end of a sentence is fine.
RULE_STATEMENT = re.compile(
    r"(?<![A-Za-z0-9_-])([A-Za-z][A-Za-z0-9_-]*)[`'\"*]*\s*(?::|==?|>=|=>|≥|⩾)\s*[`'\"*]*\s*"
    rf"({_NUM})(?!\.?\d)"
)

# --- markdown structure ------------------------------------------------------------------------

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")
_NUMBER_CELL = re.compile(rf"^{_NUM}$")


class RecordError(ValueError):
    """No usable data: the message names the file(s) and exactly what is missing or conflicting."""


def base_name(name: str) -> str:
    # Callers pass file names; a path slipped in must still not leak its folders.
    return name.replace("\\", "/").rsplit("/", 1)[-1]


def record_error(message: str) -> RecordError:
    """A ``RecordError`` whose message is cut to a length a tool result can carry."""
    if len(message) > _MAX_MESSAGE:
        message = message[: _MAX_MESSAGE - 1] + "…"
    return RecordError(message)


def squash(text: str) -> str:
    """Lowercase letters, digits and CJK only: "Task Success (%)" -> "tasksuccess"."""
    return re.sub(r"[\W_]+", "", text.lower())


def cell_number(text: str) -> int | float | None:
    """``72``, ``72.5``, ``72 %``, ``**72%**``, ``0.72`` -> number as written; else None."""
    cleaned = text.strip().strip("*_`").strip().rstrip("%").strip().strip("*_`").strip()
    if not _NUMBER_CELL.match(cleaned):
        return None
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    return int(value) if value == value.to_integral_value() else float(value)


def clean_cell(text: str) -> str:
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


def pipe_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
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


def value_column(header: list[str]) -> int | None:
    squashed = [squash(h) for h in header]
    candidates = [i for i, s in enumerate(squashed) if any(m in s for m in _VALUE_MARKERS)]
    exact = [i for i in candidates if squashed[i] in _VALUE_EXACT]
    return (exact or candidates or [None])[0]


def label_column(header: list[str], rows: list[list[str]], value_col: int) -> int | None:
    others = [i for i in range(len(header)) if i != value_col]

    def names_group(i: int) -> bool:
        s = squash(header[i])
        return any(word in s for word in _LABEL_WORDS)

    def numeric(i: int) -> bool:
        return bool(rows) and all(i < len(r) and cell_number(r[i]) is not None for r in rows)

    # A header naming a group wins; else the first column of words (a "Tasks" count is no label).
    for choose in (names_group, lambda i: not numeric(i), lambda i: True):
        found = next((i for i in others if choose(i)), None)
        if found is not None:
            return found
    return None


# --- rule names ----------------------------------------------------------------------------------


def release_key(raw: str) -> str | None:
    """The release rule's key (``RULE_KEYS``) for a spelling such as ``averageGte`` or
    ``every-group-gte``, else None."""
    key = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", raw.strip("_-")).lower()
    key = re.sub(r"[-_]+", "_", key)
    if _AVERAGE_KEY.fullmatch(key):
        return "average_gte"
    if _EVERY_KEY.fullmatch(key):
        return "every_batch_gte"
    return None


# --- putting files together --------------------------------------------------------------------


def merge(pairs: list[tuple[str, int | float, str]], what: str) -> dict[str, int | float]:
    merged: dict[str, tuple[int | float, str]] = {}
    for key, value, name in pairs:
        if key in merged and merged[key][0] != value:
            first, where = merged[key]
            places = where if where == name else f"{where} and {name}"
            raise record_error(f"{places}: conflicting {what} for '{key[:40]}': {first} vs {value}")
        merged.setdefault(key, (value, name))
    return {key: value for key, (value, _) in merged.items()}


def lowest_group(values: dict[str, int | float]) -> tuple[str, int | float]:
    """The group with the lowest value: the first of equal minima, in document order."""
    label = min(values, key=lambda k: values[k])
    return label, values[label]


# =================================================================================================
# Records of any rule: several files, each a record keyed by its date or title, rules as named numbers
# =================================================================================================

# Headings of a section whose ``name: number`` lines are rules, whatever the names are.
_RULE_HEADING = re.compile(r"rule|threshold|polic|limit|criteri|target|requirement|standard|gate|"
                           r"规则|阈值|标准|要求|门槛", re.IGNORECASE)
_HEADING_LINE = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# A name that reads as a threshold wherever it stands (outside a rules section).
_RULE_WORD = re.compile(r"(?:^|_)(?:floor|ceiling|spread|ratio|count|average|avg|mean|target|limit|threshold|"
                        r"cap|gap|drop|gain|change|bound|min|max|minimum|maximum|gte|ge|lte|le|gt|lt)(?:_|$)")
# A list or plain line stating one rule: "- Max spread: 15", "* `floor` = 70 %", "floor ≥ 70"
_RULE_LINE = re.compile(
    r"^\s*(?:[-*+]\s+|\d+[.)]\s+)?[`'\"*]*([^\W\d][\w \-]{0,40}?)[`'\"*]*\s*(?::|==?|>=|=>|≥|⩾|<=|=<|≤|⩽)\s*"
    rf"[`'\"*]*\s*({_NUM})\s*%?(?!\.?\d)")
_DATE = re.compile(r"(?<!\d)(\d{4})[-_/.](\d{1,2})(?:[-_/.](\d{1,2}))?(?!\d)")
_QUARTER = re.compile(r"(?<![A-Za-z0-9])(?:Q([1-4])[\s_-]*(\d{4})|(\d{4})[\s_-]*Q([1-4]))(?![A-Za-z0-9])", re.IGNORECASE)
_DIAGNOSTIC_WORDS = ("tasks", "runs", "steps", "latency", "samples", "count", "n", "任务数", "步数", "延迟")
_RULE_TABLE_WORDS = {"rule", "rules", "threshold", "thresholds", "key", "setting", "parameter", "limit", "name",
                     "规则", "阈值", "参数"}


def rule_name(raw: str) -> str | None:
    """A rule's name as checks refer to it: ``Max spread`` / ``max-spread`` / ``maxSpread`` ->
    ``max_spread``; the release rule's spellings -> ``average_gte`` / ``every_batch_gte``."""
    text = clean_cell(raw).strip("`'\"*_- ")
    if not text:
        return None
    release = release_key(text.replace(" ", "_"))
    if release:
        return release
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text).lower()
    text = re.sub(r"[\s\-_]+", "_", text).strip("_")
    return text if re.fullmatch(r"[^\W\d]\w{0,40}", text) else None


def _rule_like(name: str) -> bool:
    return bool(_RULE_WORD.search(name)) or name in RULE_KEYS


def _front_matter(text: str) -> tuple[dict[str, str], list[tuple[str, int | float]], str]:
    """(top-level text fields, rules, the text after it) of a leading ``---`` block."""
    if not text.startswith("---"):
        return {}, [], text
    end = text.find("\n---", 3)
    if end < 0:
        return {}, [], text
    fields, rules = {}, []
    for line in text[3:end].splitlines():
        match = re.match(r"^(\s*)([^\s:#][^:]*?)\s*:\s*(.*?)\s*$", line)
        if not match:
            continue
        key, value = match.group(2).strip().strip("'\""), match.group(3).strip().strip("'\"")
        number = cell_number(value)
        if number is not None and (name := rule_name(key)):
            rules.append((name, number))
        elif not match.group(1) and value:
            fields[key.lower()] = value
    return fields, rules, text[end + 4:]


def _date_of(*texts: str) -> str | None:
    """``2024-03``, ``2024-03-31`` or ``2024-Q1`` from the first of ``texts`` that names one."""
    for text in texts:
        if not text:
            continue
        quarter = _QUARTER.search(text)
        date = _DATE.search(text)
        if date and (not quarter or date.start() <= quarter.start()):
            year, month, day = date.groups()
            if 1 <= int(month) <= 12:
                return f"{year}-{int(month):02d}" + (f"-{int(day):02d}" if day else "")
        if quarter:
            q, year = (quarter.group(1), quarter.group(2)) if quarter.group(1) else (quarter.group(4), quarter.group(3))
            return f"{year}-Q{q}"
    return None


def _in_rule_section(lines: list[str]) -> list[bool]:
    """For each line: does it stand in a section whose heading names rules (up to the next heading
    of that level or above)?"""
    flags, level = [], 0  # level 0: not in a rules section
    for line in lines:
        heading = _HEADING_LINE.match(line)
        if heading and (not level or len(heading.group(1)) <= level):
            level = len(heading.group(1)) if _RULE_HEADING.search(heading.group(2)) else 0
            flags.append(False)
            continue
        flags.append(bool(level))
    return flags


def _named_rules(text: str) -> list[tuple[str, int | float]]:
    """Rules stated anywhere in a file: ``name op number`` for names that read as thresholds, and
    any ``name op number`` line or table row inside a section headed as rules."""
    found = []
    lines = text.splitlines()
    for line, in_rules in zip(lines, _in_rule_section(lines)):
        match = _RULE_LINE.match(line) if in_rules else None
        if match and (name := rule_name(match.group(1))):
            found.append((name, cell_number(match.group(2))))  # "- Max spread: 15": the whole line names it
            continue
        for statement in RULE_STATEMENT.finditer(line):
            name = rule_name(statement.group(1))
            if name and _rule_like(name):
                found.append((name, cell_number(statement.group(2))))
    for header, rows in pipe_tables(text):
        if _rule_table(header):  # | rule | value |
            for row in rows:
                value = next((v for c in row[1:] if (v := cell_number(c)) is not None), None)
                if row and value is not None and (name := rule_name(row[0])):
                    found.append((name, value))
        elif len(rows) == 1 and all((n := rule_name(h)) and _rule_like(n) for h in header):  # keys across
            for cell, value in zip(header, rows[0]):
                if (number := cell_number(value)) is not None:
                    found.append((rule_name(cell), number))
    return found


def _numeric_columns(header: list[str], rows: list[list[str]]) -> list[int]:
    """Columns of numbers: at least half of their cells are (a cell that is not then is an error,
    never a group dropped without a word)."""
    def numbers(i: int) -> int:
        return sum(1 for r in rows if i < len(r) and cell_number(r[i]) is not None)

    return [i for i in range(len(header)) if rows and numbers(i) and 2 * numbers(i) >= len(rows)]


def _rule_table(header: list[str]) -> bool:
    """``| rule | value |`` (or ``| name | threshold |`` ...): a table of rules, not of groups."""
    return squash(header[0]) in _RULE_TABLE_WORDS and (
        len(header) == 2 or squash(header[1]) in {"value", "values", "number", "threshold", "limit", "数值", "值", "阈值"})


def _table_columns(name: str, header: list[str], rows: list[list[str]]) -> tuple[str, dict] | None:
    """(value column header, {header: {group: number}} of every numeric column) of one table of
    groups, or None when it is no such table."""
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows or _rule_table(header) or all((n := rule_name(h)) and _rule_like(n) for h in header):
        return None
    numeric = _numeric_columns(header, [r for r in rows if squash(clean_cell(r[0])) not in SUMMARY_LABELS])
    value_col = value_column(header)
    if value_col is None:
        plain = [i for i in numeric if squash(header[i]) not in _DIAGNOSTIC_WORDS
                 and not any(w in squash(header[i]) for w in ("latency", "steps", "延迟"))]
        value_col = (plain or [None])[0]
    if value_col is None:
        return None
    label_col = label_column(header, rows, value_col)
    if label_col is None or label_col in numeric:
        return None
    columns: dict[str, list] = {}
    for col in dict.fromkeys([value_col, *numeric]):
        pairs = []
        for row in rows:
            label = clean_cell(row[label_col]) if label_col < len(row) else ""
            if not label or squash(label) in SUMMARY_LABELS:
                continue
            value = cell_number(row[col]) if col < len(row) else None
            if value is None:
                raise record_error(f"{name}: '{clean_cell(header[col])[:40]}' of '{label[:40]}' is not a number "
                            f"('{(row[col] if col < len(row) else '')[:20]}')")
            pairs.append((label, value, name))
        columns[clean_cell(header[col]) or f"column {col + 1}"] = pairs
    return clean_cell(header[value_col]) or f"column {value_col + 1}", columns


def _value_table(name: str, text: str) -> dict | None:
    """The groups and numbers of a file: the tables whose value column is the first table's (a
    task-success column preferred), merged, with every numeric column by header."""
    tables = [t for header, rows in pipe_tables(text) if (t := _table_columns(name, header, rows))]
    if not tables:
        return None
    preferred = [t for t in tables if value_column([t[0]]) is not None] or tables
    value_header = preferred[0][0]
    columns: dict[str, list] = {}
    for header, table in tables:
        if squash(header) == squash(value_header):
            for column, pairs in table.items():
                columns.setdefault(column, []).extend(pairs)
    merged = {column: merge(pairs, f"'{column[:40]}'") for column, pairs in columns.items()}
    return {"value_column": value_header, "values": merged[value_header],
            "columns": merged if len(merged) > 1 else None}


def read_records(files: list[tuple[str, str]]) -> dict[str, dict]:
    """files = [(file_name, markdown_text), ...] -> ``{key: record}``, one record per file with a
    table of groups and numbers, keyed by its date (front matter ``date:``, or a date in its title or
    file name: ``2024-03``, ``2024-03-31``, ``2024-Q1``) else its title (``# heading``, front matter
    ``title:``) else its file stem; in date order when every record has a date, else in file order.

    A record is ``{"title", "date", "source_id", "value_column", "values": {group: number},
    "rules": {name: number}}`` (and ``"columns"``: every numeric column by header, when there are
    several). A rule is a named number: ``name: 70`` / ``name = 70`` / ``name >= 70`` as a list line,
    in a sentence (names that read as thresholds: floor, ceiling, max_spread, min_ratio, ...), any
    such line or ``| name | value |`` row in a section headed as rules (``## Rules``, ``## 阈值``),
    front matter, a fenced YAML/JSON block; names are normalised (``Max spread`` -> ``max_spread``).
    A file with rules and no table holds rules every record shares. The same rule or group with two
    values in one record, or a non-numeric cell in a numeric column, is a ``RecordError``."""
    shared: list[tuple[str, int | float, str]] = []
    found = []
    for position, (raw_name, raw_text) in enumerate(files):
        name = base_name(raw_name)
        text = unicodedata.normalize("NFKC", raw_text)
        fields, front_rules, body = _front_matter(text)
        rules = [(key, value, name) for key, value in front_rules + _named_rules(body)]
        table = _value_table(name, body)
        if table is None:
            shared += rules
            continue
        title = next((m.group(2) for line in body.splitlines() if (m := _HEADING_LINE.match(line))
                      and len(m.group(1)) == 1), None) or fields.get("title") or name.rsplit(".", 1)[0]
        date = _date_of(fields.get("date", ""), title, name)
        found.append((position, name, title, date, table, rules))
    records = []
    for position, name, title, date, table, rules in found:
        merged = merge(shared + rules, "rule values")
        record = {"title": title, "date": date, "source_id": name, "value_column": table["value_column"],
                  "values": table["values"], "rules": merged}
        if table["columns"]:
            record["columns"] = table["columns"]
        records.append((position, record))
    if all(r["date"] for _, r in records):
        records.sort(key=lambda pr: (pr[1]["date"], pr[0]))
    out: dict[str, dict] = {}
    for _, record in records:
        key = record["date"] or record["title"]
        if key in out:
            key = f"{key} ({record['source_id']})"
        out[key] = record
    return out
