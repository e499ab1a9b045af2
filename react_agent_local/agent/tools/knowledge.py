"""knowledge_search: BM25 retrieval over the pack's ``knowledge/`` files plus the data parsed from them.

The model only supplies a query; the folder is fixed by the task pack. Only regular ``*.md``,
``*.csv``, ``*.tsv`` and ``*.json`` files directly inside it are read (sorted by name; symlinks,
other file types and files over 1 MiB are skipped), and results name a file by its file name only,
never by a path.

Chunks. Each file is split at markdown headings (outside fenced code blocks); a section longer
than ``CHUNK_CHARS`` is split further at blank lines, so a table or a rule block stays whole. A chunk
keeps its heading line for context and is named ``<file stem>#<n>`` (n counts from 1 in document
order, so the id is stable while the file is unchanged).

Ranking. ``rank_bm25.BM25Okapi`` over all chunks of all files. Tokens: NFKC-normalised, lowercased
ASCII words (a light plural stripping so "batches" meets "batch"), numbers (``72``, ``78.5``), and
one token per CJK character (Han, kana, Hangul), which is the usual baseline when no word segmenter
is available. A small English stop-word list keeps "the"/"of"/"every" from deciding ties. Two
field boosts: a chunk's section heading is indexed twice, and each file's ``# title`` is indexed in
every chunk of that file (so naming the document in a query favours no single chunk). Ties keep
document order, so results are deterministic.

Data (``data``), parsed from *all* files, not only the returned chunks, by the family registry's
``knowledge_record`` (the release-rule family's ``record.py``, reached by name as ``FamilyRecord``:
the loop imports this tool and must never import a family): the values of a table whose value
column is a task-success rate (``batches``: label -> number) and the release rule (``average_gte``,
``every_batch_gte``), in the many ways people write them; the same module writes it into the
summary and the rendered Observation. Where no record can be read, the search still returns its
chunks with ``data`` empty and ``data_error`` naming the files and what is missing.

Records of other rules (``records``, from ``records.read_records``): every file with a table of
groups and numbers, keyed by date or title, with its rules as named numbers. They are returned
where ``data`` is empty (except a record stating the release rule, which the release reader
refused) or where there are several; a release-rule pack's result is exactly what it was. A query
that names records (by key, title or date) covers them: each named record none of the ``top_k``
chunks comes from adds its best chunk (``named_records``).

Tables (``tables``, from ``agent/task/tables.py``): every table of the folder -- markdown, CSV/TSV,
JSON records -- with every column, its unit and the prose around it (``tables.table_view``); the
result carries those of the files its chunks (and named records) come from, and the rendered
Observation shows them whole (a large one by schema and a sample; ``table_query`` reaches the rest).
A CSV/TSV/JSON table is also one chunk (``<file name>#<n>``), so a search finds it.

Numbers that are integral come back as ``int`` (``72``, not ``72.0``).

Aggregate ``source_sha256``: SHA-256 of the ``sha256sum``-style manifest of the knowledge files,
i.e. of the UTF-8 text ``"<sha256 hex>  <file name>\\n"`` for each file in name order. It changes
when any file's bytes, name, or the set of files changes.

Errors (``ToolError``; messages name files by file name only):

* ``knowledge_read_failed``: folder missing or without knowledge files, a file not UTF-8 or not
  permitted (``retryable=False``); a transient ``OSError`` while reading (``retryable=True``).
* ``knowledge_parse_failed``: the files hold no searchable text (``retryable=False``).

The parsed index is cached per (folder, file names, mtimes, sizes), so repeated searches in one run
only re-``stat`` the files.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import stat
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import Field

from agent.task.packs import FAMILY_REGISTRY
from agent.task.tables import (
    MAX_FILE_BYTES, TABLE_SUFFIXES, NotARegularFile, Table, read_bytes, table_view, tables_from_files
)
from agent.tools.base import StrictArgs, Tool, ToolError
from agent.tools.records import RecordError, lowest_group, read_records
from agent.util.number_text import exact_text

CHUNK_CHARS = 600
_CACHE_LIMIT = 8


_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+\S")
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_TOKEN = re.compile(
    r"[a-z]+|\d+(?:\.\d+)?|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
)
_STOP_WORDS = frozenset(
    "a all an and any are as at be but by can do does each every for from has have how i in is it "
    "its me my no not of on or our so some than that the their then there these they this those to "
    "was we were what when where which who why will with you your".split()
)


# --------------------------------------------------------------------------------------------
# Tokens and numbers
# --------------------------------------------------------------------------------------------


def _stem(word: str) -> str:
    # subtle: only plural endings; anything heavier would merge words the tables keep apart.
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("ches", "shes", "sses", "xes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Words, numbers and single CJK characters, normalised for BM25 matching."""
    text = unicodedata.normalize("NFKC", text).lower()
    tokens = []
    for tok in _TOKEN.findall(text):
        if tok.isascii() and tok.isalpha():
            if tok in _STOP_WORDS:
                continue
            tok = _stem(tok)
        tokens.append(tok)
    return tokens


# --------------------------------------------------------------------------------------------
# Reading the folder
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _SourceFile:
    name: str
    text: str
    sha256: str


def _list_files(knowledge_dir: Path) -> list[tuple[str, os.stat_result]]:
    """Regular, non-symlink knowledge files (``*.md``, ``*.csv``, ``*.tsv``, ``*.json``) up to 1 MiB,
    sorted by name, with their lstat."""
    try:
        entries = sorted(os.scandir(knowledge_dir), key=lambda e: e.name)
    except FileNotFoundError:
        raise ToolError("knowledge_read_failed", "the pack's knowledge folder does not exist", False) from None
    except NotADirectoryError:
        raise ToolError("knowledge_read_failed", "the pack's knowledge folder is not a folder", False) from None
    except PermissionError:
        raise ToolError("knowledge_read_failed", "the pack's knowledge folder is not readable", False) from None
    except OSError as exc:
        raise ToolError(
            "knowledge_read_failed", f"the pack's knowledge folder could not be listed ({type(exc).__name__})", True
        ) from None
    files = []
    for entry in entries:
        if not entry.name.lower().endswith(TABLE_SUFFIXES) or entry.name.startswith("."):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_FILE_BYTES:
            files.append((entry.name, st))
    if not files:
        raise ToolError("knowledge_read_failed", "no knowledge files (*.md, *.csv, *.tsv, *.json) in the pack's "
                        "knowledge folder", False)
    return files


def _read_file(knowledge_dir: Path, name: str) -> _SourceFile:
    try:
        raw = read_bytes(knowledge_dir, name)
    except NotARegularFile:
        raise ToolError("knowledge_read_failed", f"{name} is not a regular file of at most 1 MiB", False) from None
    except PermissionError:
        raise ToolError("knowledge_read_failed", f"{name} is not readable (permission denied)", False) from None
    except OSError as exc:
        # The file was listed a moment ago, so a vanished file or an I/O error is worth a retry.
        raise ToolError("knowledge_read_failed", f"{name} could not be read ({type(exc).__name__})", True) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ToolError("knowledge_read_failed", f"{name} is not valid UTF-8", False) from None
    return _SourceFile(name=name, text=text, sha256=hashlib.sha256(raw).hexdigest())


# --------------------------------------------------------------------------------------------
# Chunking
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    source_id: str
    chunk_id: str
    text: str
    source_sha256: str


def _sections(text: str) -> list[list[str]]:
    """Split lines at headings that are not inside fenced code blocks."""
    sections: list[list[str]] = [[]]
    in_fence = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and _HEADING.match(line) and sections[-1]:
            sections.append([])
        sections[-1].append(line)
    return [s for s in sections if any(line.strip() for line in s)]


def _blocks(lines: list[str]) -> list[str]:
    """Paragraphs separated by blank lines; a fenced block is one paragraph even with blank lines."""
    blocks, current, in_fence = [], [], False
    for line in lines:
        if _FENCE.match(line):
            in_fence = not in_fence
        if not line.strip() and not in_fence:
            if current:
                blocks.append("\n".join(current))
                current = []
            continue
        current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


def _split_section(lines: list[str]) -> list[str]:
    """One section -> chunk texts of about CHUNK_CHARS, each repeating the section heading."""
    blocks = _blocks(lines)
    if not blocks:
        return []
    first_line, _, rest = blocks[0].partition("\n")
    heading = first_line if _HEADING.match(first_line) else ""
    if heading:  # the heading may be glued to its first paragraph
        blocks = ([rest] if rest.strip() else []) + blocks[1:]
    if not blocks:
        return []  # a bare title has nothing to cite

    def join(parts: list[str]) -> str:
        return "\n\n".join(([heading] if heading else []) + parts)

    chunks, current = [], []
    for block in blocks:
        if current and len(join(current + [block])) > CHUNK_CHARS:
            chunks.append(join(current))
            current = []
        current.append(block)
    chunks.append(join(current))
    return chunks


def chunk_file(source: _SourceFile) -> list[Chunk]:
    stem = source.name[: -len(".md")]
    texts = [t for section in _sections(source.text) for t in _split_section(section)]
    return [
        Chunk(source.name, f"{stem}#{n}", text, source.sha256) for n, text in enumerate(texts, start=1)
    ]


# --------------------------------------------------------------------------------------------
# The index and its cache
# --------------------------------------------------------------------------------------------


class FamilyRecord(Protocol):
    """The record a search reads into ``data``, as its family offers it (``families.knowledge_record``:
    the release-rule family's ``record.py``)."""

    def read(self, files: list[tuple[str, str]]) -> dict[str, Any]:
        """The record the files hold, or ``RecordError`` naming what is missing or conflicting."""

    def states_rule(self, files: list[tuple[str, str]]) -> bool:
        """Do the files state the record's rule, however written (read or not)?"""

    def ruled_by(self, record: dict[str, Any]) -> bool:
        """Does a record of any rule (``records.read_records``) state the record's rule?"""

    def summary(self, data: dict[str, Any]) -> str:
        """The search's summary of a record ``read`` returned."""

    def render(self, data: dict[str, Any]) -> str | None:
        """The record as the model reads it; None when ``data`` holds none."""

    def as_record(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """The record as a record of any rule (the check language's ``record``); None when ``data`` holds none."""


def family_record() -> FamilyRecord:
    """The record a search reads into ``data``, found by name (``packs.FAMILY_REGISTRY``), as a pack
    finds its family's guide."""
    return importlib.import_module(FAMILY_REGISTRY).knowledge_record()


@dataclass
class KnowledgeIndex:
    chunks: list[Chunk]
    bm25: Any
    data: dict[str, Any]  # empty when the records could not be read; data_error says why
    source_sha256: str
    file_names: list[str]
    data_error: str | None = None
    #: records of any rule (``records.read_records``), where the search returns them (``_shown_records``)
    records: dict[str, dict[str, Any]] | None = None
    #: every table of every file (``agent/task/tables.py``), in file then document order
    tables: tuple[Table, ...] = ()

    def search(self, query: str, top_k: int) -> list[tuple[Chunk, float]]:
        scores = self.bm25.get_scores(tokenize(query)) if self.bm25 is not None else [0.0] * len(self.chunks)
        # Ties (including a query with no known word) keep document order, so results are stable.
        order = sorted(range(len(self.chunks)), key=lambda i: (-float(scores[i]), i))
        return [(self.chunks[i], float(scores[i])) for i in order[:top_k]]


def _index_tokens(chunk: Chunk, title: str) -> list[str]:
    # Two simple field boosts. The section heading names what a chunk is about, so its words count
    # twice ("release rule" should prefer the Release rule section over prose that mentions the rule).
    # The document title goes into every chunk of its file, so a query naming the document
    # ("AgentEval Mini ...") does not pull the one chunk that happens to repeat the title.
    first_line = chunk.text.split("\n", 1)[0]
    heading = tokenize(first_line) if _HEADING.match(first_line) else []
    return tokenize(title) + heading + tokenize(chunk.text)


def _title(source: _SourceFile) -> str:
    for line in source.text.splitlines():
        if re.match(r"^\s{0,3}#\s+\S", line):
            return line.lstrip(" #")
    return ""


def _table_chunks(tables: list[Table], sources: list[_SourceFile]) -> list[Chunk]:
    """One chunk per table of a CSV/TSV/JSON file: its title, header and rows as pipe lines."""
    digest = {s.name: s.sha256 for s in sources}
    chunks, counts = [], {}
    for table in tables:
        if table.source.lower().endswith(".md"):
            continue
        counts[table.source] = counts.get(table.source, 0) + 1
        lines = [f"# {table.title}", " | ".join(_column_label(c) for c in table.columns)]
        lines += [" | ".join("" if v is None else exact_text(v) if not isinstance(v, str) else v for v in row)
                  for row in table.rows]
        chunks.append(Chunk(table.source, f"{table.source}#{counts[table.source]}", "\n".join(lines),
                            digest[table.source]))
    return chunks


def build_index(sources: list[_SourceFile]) -> KnowledgeIndex:
    from rank_bm25 import BM25Okapi

    tables = tables_from_files([(s.name, s.text) for s in sources])
    markdown = [s for s in sources if s.name.lower().endswith(".md")]
    chunks = [c for s in markdown for c in chunk_file(s)] + _table_chunks(tables, sources)
    chunks = [c for c in chunks if tokenize(c.text)]
    if not chunks:
        raise ToolError("knowledge_parse_failed", "the knowledge files contain no searchable text", False)
    # The release rule and the records are read from the markdown, as they always were.
    files = [(s.name, s.text) for s in markdown] or [(s.name, "") for s in sources[:1]]
    family = family_record()
    try:
        data, data_error = family.read(files), None
    except RecordError as exc:
        data, data_error = {}, str(exc)
    try:
        records, records_error = _shown_records(data, read_records(files), family), None
    except RecordError as exc:
        records, records_error = None, str(exc)
    if records:
        data_error = None  # records of other rules: the release rule's reading does not apply
    elif records_error and not family.states_rule(files):
        data_error = records_error
    titles = {s.name: _title(s) if s.name.lower().endswith(".md") else "" for s in sources}
    manifest = "".join(f"{s.sha256}  {s.name}\n" for s in sources)
    return KnowledgeIndex(
        chunks=chunks,
        bm25=BM25Okapi([_index_tokens(c, titles[c.source_id]) for c in chunks]),
        data=data,
        source_sha256=hashlib.sha256(manifest.encode("utf-8")).hexdigest(),
        file_names=[s.name for s in sources],
        data_error=data_error,
        records=records,
        tables=tuple(tables),
    )


def _shown_records(data: dict[str, Any], records: dict[str, dict[str, Any]],
                   family: FamilyRecord) -> dict[str, dict[str, Any]] | None:
    """The records a search returns beside ``data``: with a release-rule record read, only when there
    are several (one says nothing ``data`` does not); without one, the records under other rules --
    a record stating the release rule that the release reader refused stays refused (``data_error``
    says why), since the release rule's checks would otherwise run on a reading it did not accept."""
    if data:
        return records if len(records) > 1 else None
    kept = {key: r for key, r in records.items() if not family.ruled_by(r)}
    return kept or None


_cache: dict[tuple, KnowledgeIndex] = {}
_cache_lock = threading.Lock()


def load_index(knowledge_dir: Path) -> KnowledgeIndex:
    knowledge_dir = Path(knowledge_dir)
    files = _list_files(knowledge_dir)
    key = (str(knowledge_dir.resolve()), tuple((n, st.st_mtime_ns, st.st_size) for n, st in files))
    with _cache_lock:
        cached = _cache.get(key)
    if cached is not None:
        return cached
    index = build_index([_read_file(knowledge_dir, name) for name, _ in files])
    with _cache_lock:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.pop(next(iter(_cache)))
        _cache[key] = index
    return index


# --------------------------------------------------------------------------------------------
# The tool
# --------------------------------------------------------------------------------------------


def _copy(value: Any) -> Any:
    return {k: _copy(v) for k, v in value.items()} if isinstance(value, dict) else value


def _summary(data: dict[str, Any], returned: int, records: dict[str, dict[str, Any]] | None = None) -> str:
    if records and not data:
        shown = ", ".join(f"{key} ({len(r['values'])} groups)" for key, r in list(records.items())[:6])
        return f"{len(records)} record(s): {shown}; top {returned} chunks"
    if not data:
        return f"no evaluation record could be read; top {returned} chunks"
    return f"{family_record().summary(data)}; top {returned} chunks"


def _excerpt(text: str) -> str:
    return text if len(text) <= CHUNK_CHARS else text[: CHUNK_CHARS - 1].rstrip() + "…"


_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")


def _plain(text: str) -> str:
    """Lowercased letters, digits and CJK, every other run of characters one space."""
    return " " + " ".join(re.findall(r"\w+", unicodedata.normalize("NFKC", text).casefold())) + " "


def record_names(key: str, record: dict[str, Any]) -> list[str]:
    """How a query may name a record: its key, title and date, a month as a word (``March 2024``,
    ``2024年3月``), a quarter either way round (``Q1 2024``)."""
    names = [key, record.get("title") or "", record.get("date") or ""]
    date = record.get("date") or ""
    month = re.fullmatch(r"(\d{4})-(\d{2})(?:-\d{2})?", date)
    if month:
        year, m = month.group(1), int(month.group(2))
        names += [f"{_MONTHS[m - 1]} {year}", f"{_MONTHS[m - 1][:3]} {year}", f"{year}年{m}月"]
    quarter = re.fullmatch(r"(\d{4})-Q([1-4])", date)
    if quarter:
        names += [f"q{quarter.group(2)} {quarter.group(1)}", f"{quarter.group(1)} q{quarter.group(2)}"]
    return [n for n in names if n.strip()]


def named_records(query: str, records: dict[str, dict[str, Any]]) -> list[str]:
    """Keys of the records the query names (by key, title or date), in record order."""
    asked = _plain(query)
    return [key for key, record in records.items() if any(_plain(n) in asked for n in record_names(key, record))]


def result_records(result: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """The records a search's result holds, by key (the check language's ``records``): its
    ``records``, else its ``data`` read as a record of any rule, under that record's title; None
    where it holds neither."""
    records = result.get("records")
    if isinstance(records, dict):
        return records
    single = family_record().as_record(result.get("data") or {})
    return {single["title"]: single} if single else None


def _tables_of(index: KnowledgeIndex, sources: set[str]) -> list[dict[str, Any]]:
    """The views of the tables of ``sources`` -- and of a CSV/TSV/JSON file sharing a cited markdown
    file's stem, whose prose that file is."""
    stems = {name.rsplit(".", 1)[0] for name in sources if name.lower().endswith(".md")}
    return [table_view(t) for t in index.tables
            if t.source in sources or t.source.rsplit(".", 1)[0] in stems]


def search_knowledge(knowledge_dir: Path, query: str, top_k: int) -> dict[str, Any]:
    """Rank the knowledge chunks for ``query`` and return ``top_k`` citations plus the parsed data.
    Each record the query names that none of those chunks comes from adds its best chunk, so a
    search can be asked to cover named records."""
    index = load_index(knowledge_dir)
    hits = index.search(query, max(1, int(top_k)))
    records = index.records or {}
    named = named_records(query, records) if records else []
    if named:
        ranked = index.search(query, len(index.chunks))
        for key in named:
            source = records[key]["source_id"]
            if not any(chunk.source_id == source for chunk, _ in hits):
                hits += [hit for hit in ranked if hit[0].source_id == source][:1]
    citations = [
        {
            "id": f"c{rank}",
            "source_id": chunk.source_id,
            "chunk_id": chunk.chunk_id,
            "text": _excerpt(chunk.text),
            "source_sha256": chunk.source_sha256,
            "score": round(score, 4),
        }
        for rank, (chunk, score) in enumerate(hits, start=1)
    ]
    data = {key: dict(value) for key, value in index.data.items()}
    result = {
        "query": query,
        "citations": citations,
        "source_sha256": index.source_sha256,
        "data": data,
        "summary": _summary(data, len(citations), records),
    }
    if records:
        result["records"] = {key: _copy(record) for key, record in records.items()}
        if named:
            result["named_records"] = named
    tables = _tables_of(index, {c["source_id"] for c in citations})
    if tables:
        result["tables"] = tables
    if index.data_error:
        # The chunks are still worth returning: the model can read the values in their text.
        result["data_error"] = {"code": "knowledge_parse_failed", "message": index.data_error}
    return result


# --------------------------------------------------------------------------------------------
# The tool as the registry sees it
# --------------------------------------------------------------------------------------------


class KnowledgeSearchArgs(StrictArgs):
    """Search the pack's knowledge files (markdown, CSV, JSON) and return cited chunks and their tables."""

    query: str = Field(min_length=1, max_length=500, description="What to look for.")
    top_k: int = Field(default=3, ge=1, le=6, description="How many chunks to return (1..6).")


def _render(result: dict[str, Any]) -> str:
    # Chunk texts stay in the trace; the parsed data carries the facts, and every token of a long
    # excerpt costs prompt-processing time on a 2-core CPU.
    record = family_record().render(result.get("data") or {})
    cited = ", ".join(f"{c.get('id')} {c.get('chunk_id')}" for c in result.get("citations", []))
    tables = result.get("tables") or []
    if result.get("records") and record is None:
        shown = " || ".join([_render_records(result["records"])] + ([render_tables(tables)] if tables else []))
        return shown + f"; citations: {cited}"
    if record is None:
        with_tables = {t["source"] for t in tables}
        excerpts = " | ".join(" ".join(str(c.get("text", "")).split()) for c in result.get("citations", [])
                              if c.get("source_id") not in with_tables)
        if tables:
            return render_tables(tables) + (f" || chunks: {excerpts}" if excerpts else "") + f"; citations: {cited}"
        error = (result.get("data_error") or {}).get("message", "no record found")
        return f"no structured data ({error}); chunks: {excerpts}"
    return record + f"; citations: {cited}"


def _column_label(column: Any) -> str:
    """``Task Success (%)``: a column's name with its unit, as a view or a Column gives them."""
    name, unit = (column["name"], column["unit"]) if isinstance(column, dict) else (column.name, column.unit)
    return f"{name} ({unit})" if unit else name


def _cell_text(value: Any) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else exact_text(value)


PROSE_RENDER_CHARS = 1200


def render_tables(views: list[dict[str, Any]]) -> str:
    """Tables as the model reads them: each one's SQL name, file and title, every column with its unit,
    its rows (a large one's sample, with how many there are), and its file's prose once."""
    parts, prose_shown = [], set()
    for view in views:
        head = (f"table {view['sql_name']} ({view['source']}, \"{view['title']}\"): "
                + " | ".join(_column_label(c) for c in view["columns"]))
        rows = "; ".join(" | ".join(_cell_text(v) for v in row) for row in view["rows"])
        text = f"{head}; rows: {rows}"
        if "rows_total" in view:
            text += f" (first {len(view['rows'])} of {view['rows_total']} rows; table_query reaches all of them)"
        prose = " ".join(str(view.get("prose") or "").replace("#", " ").split())
        if prose and prose not in prose_shown:
            prose_shown.add(prose)
            if len(prose) > PROSE_RENDER_CHARS:
                prose = prose[: PROSE_RENDER_CHARS - 1].rstrip() + "…"
            text += f"; text: {prose}"
        parts.append(text)
    return " || ".join(parts)


def _render_records(records: dict[str, dict[str, Any]]) -> str:
    """Each record as a line: its key and file, the value column, the groups with the lowest and the
    highest stated outright (as for the release rule), and its rules by the names checks use; with
    several records, the groups they share with their values side by side."""
    parts = []
    for key, record in records.items():
        values = record.get("values") or {}
        text = (f"record {key} ({record.get('source_id')}): {record.get('value_column')} of {len(values)} groups: "
                + ", ".join(f"{k} = {exact_text(v)}" for k, v in values.items()))
        if values:
            low, high = lowest_group(values), max(values, key=lambda k: values[k])
            text += f"; lowest: {low[0]} = {exact_text(low[1])}; highest: {high} = {exact_text(values[high])}"
        rules = record.get("rules") or {}
        text += "; rules: " + (", ".join(f"{k} = {exact_text(v)}" for k, v in rules.items()) if rules else "none")
        others = [c for c in record.get("columns") or {} if c != record.get("value_column")]
        if others:
            text += "; other columns: " + ", ".join(others)
        parts.append(text)
    shared = [g for g in next(iter(records.values())).get("values") or {}
              if all(g in (r.get("values") or {}) for r in records.values())] if len(records) > 1 else []
    if shared:  # one group's values side by side: a change across records reads off one place
        parts.append("by group, in record order (" + " -> ".join(records) + "): " + "; ".join(
            f"{g} " + " -> ".join(exact_text(r["values"][g]) for r in records.values()) for g in shared))
    return " | ".join(parts)


TOOL = Tool(
    name="knowledge_search",
    args_model=KnowledgeSearchArgs,
    execute=lambda ctx, args, cancel: search_knowledge(ctx.knowledge_dir, args.query, args.top_k),
    timeout_seconds=5.0,
    digest=lambda r: r.get("data") or r.get("records"),
    render=_render,
    hint="Ask in a few words for the values and the rule the task needs.",
    summary="Facts or rule missing: search the pack's knowledge.",
    import_path="agent.tools.knowledge:TOOL",
    read_only=True,  # it reads the pack's knowledge (its index cache is per process and locked)
)
