"""knowledge_search: BM25 retrieval over the pack's ``knowledge/*.md`` plus the data parsed from them.

The model only supplies a query; the folder is fixed by the task pack (R-TOOL-1). Only regular
``*.md`` files directly inside it are read (sorted by name; symlinks, other file types and files
over 1 MiB are skipped), and results name a file by its file name only, never by a path.

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

Data (``data``), parsed from *all* files, not only the returned chunks:

* ``batches``: every markdown table whose header has a "Task Success" column (case-insensitive;
  extra words such as "Task Success (%)" are fine). The label column is the first header naming a
  batch/name/region/group/segment/split/label, else the first other column. Cells may carry a
  trailing ``%`` or ``**bold**``. The same label with two different values is a parse error.
* ``release_rule``: lines of the form ``average_gte: 78`` and ``every_batch_gte: 70`` (``=`` also
  accepted, optional list marker ``-``/``*``, optional backticks around the key, optional ``%``),
  anywhere in a file, e.g. as a list in a "Release rule" section or inside a fenced
  ```` ```release-rule ```` block. Both keys are required; conflicting repeats are a parse error.

Numbers that are integral come back as ``int`` (``72``, not ``72.0``).

Aggregate ``source_sha256``: SHA-256 of the ``sha256sum``-style manifest of the knowledge files,
i.e. of the UTF-8 text ``"<sha256 hex>  <file name>\\n"`` for each file in name order. It changes
when any file's bytes, name, or the set of files changes.

Errors (``ToolError``; messages name files by file name only):

* ``knowledge_read_failed``: folder missing or without ``*.md`` files, a file not UTF-8 or not
  permitted (``retryable=False``); a transient ``OSError`` while reading (``retryable=True``).
* ``knowledge_parse_failed``: no chunk, no Task Success table or no complete release rule, or
  conflicting values (``retryable=False``).

The parsed index is cached per (folder, file names, mtimes, sizes), so repeated searches in one run
only re-``stat`` the files.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import threading
import unicodedata
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from .tools import ToolError

MAX_FILE_BYTES = 1024 * 1024
CHUNK_CHARS = 600
_CACHE_LIMIT = 8

RULE_KEYS = ("average_gte", "every_batch_gte")
_LABEL_HEADERS = ("batch", "name", "region", "group", "segment", "split", "label")

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+\S")
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_RULE_LINE = re.compile(
    r"^\s*(?:[-*+]\s+)?`?(average_gte|every_batch_gte)`?\s*[:=]\s*`?"
    r"([+-]?\d+(?:\.\d+)?)\s*%?`?\s*$",
    re.IGNORECASE,
)
_NUMBER_CELL = re.compile(r"^[+-]?\d+(?:\.\d+)?$")
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


def _number(text: str) -> int | float | None:
    """Parse ``72``, ``72.5``, ``72 %``, ``**72%**``; integral values come back as int."""
    cleaned = text.strip().strip("*_`").strip().rstrip("%").strip()
    if not _NUMBER_CELL.match(cleaned):
        return None
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    return int(value) if value == value.to_integral_value() else float(value)


def _clean_label(text: str) -> str:
    return text.strip().strip("*_`").strip()


# --------------------------------------------------------------------------------------------
# Reading the folder
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _SourceFile:
    name: str
    text: str
    sha256: str


def _list_files(knowledge_dir: Path) -> list[tuple[str, os.stat_result]]:
    """Regular, non-symlink ``*.md`` files up to 1 MiB, sorted by name, with their lstat."""
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
        if not entry.name.endswith(".md") or entry.name.startswith("."):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_FILE_BYTES:
            files.append((entry.name, st))
    if not files:
        raise ToolError("knowledge_read_failed", "no knowledge files (*.md) in the pack's knowledge folder", False)
    return files


def _read_file(knowledge_dir: Path, name: str) -> _SourceFile:
    # O_NOFOLLOW/O_NONBLOCK: a file swapped for a symlink or a FIFO after listing is neither
    # followed nor waited on; fstat then re-checks type and size on the descriptor we read.
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(knowledge_dir / name, flags)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
                raise ToolError("knowledge_read_failed", f"{name} is not a regular file of at most 1 MiB", False)
            with os.fdopen(fd, "rb", closefd=False) as handle:
                raw = handle.read(MAX_FILE_BYTES + 1)
        finally:
            os.close(fd)
    except ToolError:
        raise
    except PermissionError:
        raise ToolError("knowledge_read_failed", f"{name} is not readable (permission denied)", False) from None
    except OSError as exc:
        # The file was listed a moment ago, so a vanished file or an I/O error is worth a retry.
        raise ToolError("knowledge_read_failed", f"{name} could not be read ({type(exc).__name__})", True) from None
    if len(raw) > MAX_FILE_BYTES:
        raise ToolError("knowledge_read_failed", f"{name} is larger than 1 MiB", False)
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
# Data: the Task Success table and the release rule
# --------------------------------------------------------------------------------------------


def _cells(line: str) -> list[str]:
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|"):
        line = line[:-1]
    return [c.strip() for c in line.split("|")]


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Markdown pipe tables (header, rows) outside fenced blocks."""
    lines = text.splitlines()
    tables, i, in_fence = [], 0, False
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            in_fence = not in_fence
        elif (
            not in_fence
            and "|" in line
            and i + 1 < len(lines)
            and _TABLE_SEPARATOR.match(lines[i + 1])
            and "|" in lines[i + 1]
        ):
            header, rows = _cells(line), []
            i += 2
            while i < len(lines) and "|" in lines[i] and lines[i].strip():
                rows.append(_cells(lines[i]))
                i += 1
            tables.append((header, rows))
            continue
        i += 1
    return tables


def _task_success_rows(source: _SourceFile) -> list[tuple[str, int | float]]:
    found = []
    for header, rows in _tables(source.text):
        lowered = [" ".join(h.lower().strip("*_` ").split()) for h in header]
        value_col = next((i for i, h in enumerate(lowered) if "task success" in h), None)
        if value_col is None:
            continue
        label_col = next(
            (i for i, h in enumerate(lowered) if i != value_col and any(k in h for k in _LABEL_HEADERS)),
            next((i for i in range(len(lowered)) if i != value_col), None),
        )
        if label_col is None:
            continue
        for row in rows:
            if max(label_col, value_col) >= len(row):
                raise ToolError("knowledge_parse_failed", f"{source.name}: a Task Success table row has too few cells", False)
            label, value = _clean_label(row[label_col]), _number(row[value_col])
            if not label or value is None:
                raise ToolError(
                    "knowledge_parse_failed",
                    f"{source.name}: Task Success of '{label[:40] or '?'}' is not a number",
                    False,
                )
            found.append((label, value))
    return found


def _rule_lines(source: _SourceFile) -> list[tuple[str, int | float]]:
    found = []
    for line in source.text.splitlines():
        match = _RULE_LINE.match(line)
        if match:
            found.append((match.group(1).lower(), _number(match.group(2))))
    return found


def _merge(pairs: list[tuple[str, int | float, str]], what: str) -> dict[str, int | float]:
    merged: dict[str, int | float] = {}
    for key, value, file_name in pairs:
        if key in merged and merged[key] != value:
            raise ToolError(
                "knowledge_parse_failed", f"{file_name}: conflicting {what} for '{key[:40]}'", False
            )
        merged[key] = value
    return merged


def parse_data(sources: list[_SourceFile]) -> dict[str, Any]:
    """``{"batches": {label: value}, "release_rule": {"average_gte", "every_batch_gte"}}``."""
    batches = _merge([(k, v, s.name) for s in sources for k, v in _task_success_rows(s)], "Task Success")
    rule = _merge([(k, v, s.name) for s in sources for k, v in _rule_lines(s)], "release rule values")
    if not batches:
        raise ToolError("knowledge_parse_failed", "no table with a 'Task Success' column in the knowledge files", False)
    missing = [k for k in RULE_KEYS if k not in rule]
    if missing:
        raise ToolError(
            "knowledge_parse_failed",
            "release rule incomplete in the knowledge files: missing " + ", ".join(f"'{k}: <number>'" for k in missing),
            False,
        )
    return {"batches": batches, "release_rule": {k: rule[k] for k in RULE_KEYS}}


# --------------------------------------------------------------------------------------------
# The index and its cache
# --------------------------------------------------------------------------------------------


@dataclass
class KnowledgeIndex:
    chunks: list[Chunk]
    bm25: Any
    data: dict[str, Any]
    source_sha256: str
    file_names: list[str]

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


def build_index(sources: list[_SourceFile]) -> KnowledgeIndex:
    from rank_bm25 import BM25Okapi

    chunks = [c for s in sources for c in chunk_file(s)]
    chunks = [c for c in chunks if tokenize(c.text)]
    if not chunks:
        raise ToolError("knowledge_parse_failed", "the knowledge files contain no searchable text", False)
    data = parse_data(sources)
    titles = {s.name: _title(s) for s in sources}
    manifest = "".join(f"{s.sha256}  {s.name}\n" for s in sources)
    return KnowledgeIndex(
        chunks=chunks,
        bm25=BM25Okapi([_index_tokens(c, titles[c.source_id]) for c in chunks]),
        data=data,
        source_sha256=hashlib.sha256(manifest.encode("utf-8")).hexdigest(),
        file_names=[s.name for s in sources],
    )


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


def _fmt(value: int | float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _summary(data: dict[str, Any], returned: int) -> str:
    batches = data["batches"]
    shown = ", ".join(f"{k}={_fmt(v)}" for k, v in list(batches.items())[:10])
    if len(batches) > 10:
        shown += ", ..."
    rule = data["release_rule"]
    return (
        f"{len(batches)} batches ({shown}); release rule: average >= {_fmt(rule['average_gte'])} "
        f"and every batch >= {_fmt(rule['every_batch_gte'])}; top {returned} chunks"
    )


def _excerpt(text: str) -> str:
    return text if len(text) <= CHUNK_CHARS else text[: CHUNK_CHARS - 1].rstrip() + "…"


def search_knowledge(knowledge_dir: Path, query: str, top_k: int) -> dict[str, Any]:
    """Rank the knowledge chunks for ``query`` and return ``top_k`` citations plus the parsed data."""
    index = load_index(knowledge_dir)
    hits = index.search(query, max(1, int(top_k)))
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
    data = {
        "batches": dict(index.data["batches"]),
        "release_rule": dict(index.data["release_rule"]),
    }
    return {
        "query": query,
        "citations": citations,
        "source_sha256": index.source_sha256,
        "data": data,
        "summary": _summary(data, len(citations)),
    }
