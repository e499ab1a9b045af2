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

Data (``data``), parsed from *all* files, not only the returned chunks, by ``records.py``: the
values of a table whose value column is a task-success rate (``batches``: label -> number) and the
release rule (``average_gte``, ``every_batch_gte``), in the many ways people write them. Where no
record can be read, the search still returns its chunks with ``data`` empty and ``data_error``
naming the files and what is missing.

Numbers that are integral come back as ``int`` (``72``, not ``72.0``).

Aggregate ``source_sha256``: SHA-256 of the ``sha256sum``-style manifest of the knowledge files,
i.e. of the UTF-8 text ``"<sha256 hex>  <file name>\\n"`` for each file in name order. It changes
when any file's bytes, name, or the set of files changes.

Errors (``ToolError``; messages name files by file name only):

* ``knowledge_read_failed``: folder missing or without ``*.md`` files, a file not UTF-8 or not
  permitted (``retryable=False``); a transient ``OSError`` while reading (``retryable=True``).
* ``knowledge_parse_failed``: the files hold no searchable text (``retryable=False``).

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
from pathlib import Path
from typing import Any

from pydantic import Field

from .base import StrictArgs, Tool, ToolError
from .records import RecordError, extract_records

MAX_FILE_BYTES = 1024 * 1024
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
# The index and its cache
# --------------------------------------------------------------------------------------------


@dataclass
class KnowledgeIndex:
    chunks: list[Chunk]
    bm25: Any
    data: dict[str, Any]  # empty when the records could not be read; data_error says why
    source_sha256: str
    file_names: list[str]
    data_error: str | None = None

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
    try:
        data, data_error = extract_records([(s.name, s.text) for s in sources]), None
    except RecordError as exc:
        data, data_error = {}, str(exc)
    titles = {s.name: _title(s) for s in sources}
    manifest = "".join(f"{s.sha256}  {s.name}\n" for s in sources)
    return KnowledgeIndex(
        chunks=chunks,
        bm25=BM25Okapi([_index_tokens(c, titles[c.source_id]) for c in chunks]),
        data=data,
        source_sha256=hashlib.sha256(manifest.encode("utf-8")).hexdigest(),
        file_names=[s.name for s in sources],
        data_error=data_error,
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


def _lowest(batches: dict[str, int | float]) -> tuple[str, int | float]:
    label = min(batches, key=lambda k: batches[k])  # the first of equal minima, in document order
    return label, batches[label]


def _summary(data: dict[str, Any], returned: int) -> str:
    if not data:
        return f"no evaluation record could be read; top {returned} chunks"
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
    data = {key: dict(value) for key, value in index.data.items()}
    result = {
        "query": query,
        "citations": citations,
        "source_sha256": index.source_sha256,
        "data": data,
        "summary": _summary(data, len(citations)),
    }
    if index.data_error:
        # The chunks are still worth returning: the model can read the values in their text.
        result["data_error"] = {"code": "knowledge_parse_failed", "message": index.data_error}
    return result


# --------------------------------------------------------------------------------------------
# The tool as the registry sees it
# --------------------------------------------------------------------------------------------


class KnowledgeSearchArgs(StrictArgs):
    """Search the pack's knowledge files (knowledge/*.md) and return cited chunks and the data in them."""

    query: str = Field(min_length=1, max_length=500, description="What to look for.")
    top_k: int = Field(default=3, ge=1, le=4, description="How many chunks to return (1..4).")


def _render(result: dict[str, Any]) -> str:
    # Chunk texts stay in the trace; the parsed data carries the facts, and every token of a long
    # excerpt costs prompt-processing time on a 2-core CPU. The lowest value is stated outright:
    # picking the minimum of eight numbers is where a small model goes wrong most often.
    data = result.get("data") or {}
    batches = data.get("batches") or {}
    rule = data.get("release_rule") or {}
    cited = ", ".join(f"{c.get('id')} {c.get('chunk_id')}" for c in result.get("citations", []))
    if not batches:
        error = (result.get("data_error") or {}).get("message", "no record found")
        excerpts = " | ".join(" ".join(str(c.get("text", "")).split()) for c in result.get("citations", []))
        return f"no structured data ({error}); chunks: {excerpts}"
    text = f"{len(batches)} groups: " + ", ".join(f"{k} = {_fmt(v)}" for k, v in batches.items())
    if batches:
        label, value = _lowest(batches)
        text += f"; lowest value: {label} = {_fmt(value)}"
    if rule:
        text += (f"; release rule: average >= {_fmt(rule['average_gte'])} (average_gte) and every group "
                 f">= {_fmt(rule['every_batch_gte'])} (every_batch_gte)")
    return text + f"; citations: {cited}"


_FORMS = {
    "en": ("The average is {number} and the lowest value is {number}. "
           "Check: average {number} >= {number} is {True|False}; lowest {number} >= {number} is {True|False}. "
           "So it {meets|does not meet} the release rule."),
    "zh": ("平均值是 {number}，最低值是 {number}。"
           "检查：平均值 {number} >= {number} is {True|False}；最低值 {number} >= {number} is {True|False}。"
           "因此{满足|不满足}发布规则。"),
}
# The first phrase of each list is the form's; the others are how people say the same in prose.
_VERDICTS = {
    "en": {"positive": ["meets the release rule", "release rule is met", "can be released", "is eligible"],
           "negative": ["does not meet the release rule", "release rule is not met", "not be released",
                        "is not eligible", "not meet the release rule"]},
    "zh": {"positive": ["满足发布规则", "可以发布"], "negative": ["不满足发布规则", "不能发布", "未满足发布规则"]},
}


def answer_guide(result: dict[str, Any], language: str) -> dict[str, Any] | None:
    """How a Final over this record is checked, when the pack declares nothing itself (R-CLAIM).

    The release rule has two checks: the average (the calculator's value) against ``average_gte``
    and the lowest value against ``every_batch_gte``; the rule is met only when both hold.
    """
    data = result.get("data") or {}
    batches, rule = data.get("batches") or {}, data.get("release_rule") or {}
    if not batches or not {"average_gte", "every_batch_gte"} <= set(rule):
        return None
    language = language if language in _FORMS else "en"
    _, low = _lowest(batches)
    return {
        "answer_form": _FORMS[language],
        "checks": [
            {"label": "average", "left": "calculator.value", "op": ">=", "right": rule["average_gte"],
             "right_label": "average_gte"},
            {"label": "lowest", "left": low, "op": ">=", "right": rule["every_batch_gte"],
             "right_label": "every_batch_gte"},
        ],
        "verdict": {**_VERDICTS[language], "requires": "all"},
        "hints": ["The average is the calculator's value; the lowest value is the smallest of all group values.",
                  "Compare the average with average_gte and the lowest value with every_batch_gte."],
        # The rule is about the mean of the values: a calculator result that is not it (a sum
        # without the division, a value left out) makes every later claim wrong.
        "expect": [{"label": f"the average of the {len(batches)} values", "left": "calculator.value", "op": "==",
                    "right": "mean(knowledge_search.data.batches)",
                    "hint": f"compute the average: the sum of all {len(batches)} values, in parentheses, "
                            f"divided by {len(batches)}",
                    # Asked again, the expression's grammar is the sum of the observed values in the
                    # order observed, in parentheses, divided by their count. The first attempt was the
                    # model's own; the 0.5B, left to pick values again, repeated its wrong pick three
                    # times in four runs (loop_detected), so the re-ask fixes the arithmetic.
                    "arguments": {"expression": {"type": "string", "pattern": _mean_pattern(batches)}}},
                   {"label": f"one bar for each of the {len(batches)} groups", "left": "count(plot.spec.values)",
                    "op": "==", "right": "count(knowledge_search.data.batches)",
                    "hint": "plot every group once, with its label and value as observed",
                    "arguments": _observed_bars(batches)},
                   {"label": "the observed group names as labels, in order",
                    "left": "matches(plot.spec.labels, knowledge_search.data.batches)", "op": "==",
                    "right": "count(knowledge_search.data.batches)",
                    "hint": "label the bars with the group names exactly as observed, in the same order",
                    "arguments": _observed_bars(batches)},
                   {"label": "the sum of the observed values", "left": "sum(plot.spec.values)", "op": "==",
                    "right": "sum(knowledge_search.data.batches)",
                    "hint": "copy every group's value exactly as observed",
                    "arguments": _observed_bars(batches)},
                   {"label": "the calculator's average", "left": "plot.spec.average", "op": "==",
                    "right": "calculator.value", "hint": "put the calculator's value into average",
                    # asked again, average is the calculator's value (the rest of the chart is the model's)
                    "arguments": {"average": {"const": "calculator.value"}}}],
    }


def _mean_pattern(batches: dict[str, int | float]) -> str:
    """The average's expression: the observed values in the order observed, summed in parentheses
    and divided by their count, in the one layout models write (``(72 + 78) / 2``). Asked again, the
    model has nothing left to choose, so every token is forced and evaluated at prompt speed instead
    of sampled one at a time (issue 14): optional spaces would leave each one a choice."""
    values = r" \+ ".join(re.escape(_fmt(v)) for v in batches.values())
    return rf"^\({values}\) / {len(batches)}$"


def _observed_bars(batches: dict[str, int | float]) -> dict[str, Any]:
    """A chart asked again: its labels and values are the observed groups, in the order observed
    (the title and the rest are still the model's)."""
    return {"labels": {"const": list(batches)}, "values": {"const": list(batches.values())}}


TOOL = Tool(
    name="knowledge_search",
    args_model=KnowledgeSearchArgs,
    execute=lambda ctx, args, cancel: search_knowledge(ctx.knowledge_dir, args.query, args.top_k),
    timeout_seconds=5.0,
    digest=lambda r: r.get("data"),
    render=_render,
    hint="Ask in a few words for the values and the rule the task needs.",
    summary="Facts or rule missing: search the pack's knowledge.",
    answer_guide=answer_guide,
    import_path="agent.tools.knowledge:TOOL",
)


def legacy_expected_checks(expected: dict[str, Any]) -> list[dict[str, Any]]:
    """Grading checks for an ``expected.json`` written in the first round's record format.

    That format names the record's values (``knowledge.batches``, ``release_rule``), the calculator
    value, the plot and the Final's numbers and verdict; here it becomes the generic check types of
    ``metrics.py``.
    """
    checks: list[dict[str, Any]] = [{"type": "final_accepted"}]
    knowledge = expected.get("knowledge") or {}
    order = expected.get("causal_order") or ["knowledge_search", "calculator", "plot"]
    per_tool: dict[str, dict[str, Any]] = {}
    if knowledge:
        per_tool["knowledge_search"] = {"path": "data", "includes": {
            "batches": knowledge.get("batches") or {}, "release_rule": knowledge.get("release_rule") or {}}}
    if "value" in (expected.get("calculator") or {}):
        per_tool["calculator"] = {"path": "value", "equals": expected["calculator"]["value"]}
    plot = expected.get("plot") or {}
    if plot:
        want = {"labels": plot.get("labels"), "values": plot.get("values")}
        if plot.get("average") is not None:
            want["average"] = plot["average"]
        per_tool["plot"] = {"path": "spec", "includes": want}
    for tool in order:
        checks.append({"type": "tool_result", "name": f"{tool}_correct", "tool": tool,
                       **per_tool.get(tool, {"path": "", "includes": {"__never__": True}})})
    checks.append({"type": "causal_order", "tools": list(order)})
    final = expected.get("final") or {}
    checks.append({"type": "answer_numbers", "name": "answer_mentions_required_values",
                   "numbers": list(final.get("must_include", []))})
    if "release_eligible" in final:
        language_phrases = {"positive": [p for v in _VERDICTS.values() for p in v["positive"]] + list(_POSITIVE_WORDS),
                            "negative": [p for v in _VERDICTS.values() for p in v["negative"]] + list(_NEGATIVE_WORDS)}
        checks.append({"type": "answer_verdict", "name": "answer_verdict_correct",
                       "expected": "positive" if final["release_eligible"] else "negative", **language_phrases})
        batches, rule = knowledge.get("batches") or {}, knowledge.get("release_rule") or {}
        average = (expected.get("calculator") or {}).get("value")
        if batches and {"average_gte", "every_batch_gte"} <= set(rule) and average is not None:
            checks.append({"type": "answer_comparisons", "name": "answer_checks_right",
                           "comparisons": [[average, ">=", rule["average_gte"]],
                                           [min(batches.values()), ">=", rule["every_batch_gte"]]]})
    return checks


# Verdict wording people use for a release decision (regular expressions, negative first: "not
# eligible" contains "eligible").
_NEGATIVE_WORDS = (
    r"(?:\bnot|n't|\bnever|\bcannot)\s+(?:\w+\s+){0,3}?(?:meet|met|eligible|satisf\w*|pass\w*|qualif\w*|release\w*|approv\w*)\b",
    r"\bineligible\b", r"\bfail(?:s|ed)?\s+to\s+(?:meet|satisfy|pass)\b",
    "不满足|未满足|不符合|不能发布|不可发布|不予发布|不发布|未达到|不达标",
)
_POSITIVE_WORDS = (
    r"\b(?:meets?|met|eligible|pass(?:es|ed)?|satisf(?:y|ies|ied)|qualif(?:y|ies|ied)|can be released|approved?)\b",
    "满足|符合|可以发布|可发布|达标",
)
