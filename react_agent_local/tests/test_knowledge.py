"""knowledge_search: real BM25 ranking, data parsed from markdown, structured errors (R-TOOL-1)."""

from __future__ import annotations

import threading
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from agent.tools import knowledge
from agent.tools.knowledge import load_index, search_knowledge, tokenize
from agent.tools import ToolContext, ToolError, default_registry

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_KNOWLEDGE = PACKAGE_ROOT / "knowledge"
DEFAULT_FILE = DEFAULT_KNOWLEDGE / "agent_eval_mini.md"
HOLD_PACK = PACKAGE_ROOT / "packs" / "release_hold"

RULE_FILE = "## Release rule\n\n- average_gte: 60\n- every_batch_gte: 50\n"


def _expected(pack_root: Path) -> dict:
    return json.loads((pack_root / "data" / "expected.json").read_text(encoding="utf-8"))


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def _error(folder: Path, query: str = "release rule") -> ToolError:
    with pytest.raises(ToolError) as info:
        search_knowledge(folder, query, 3)
    return info.value


def _assert_no_path(err: ToolError, folder: Path) -> None:
    assert str(folder) not in err.message
    assert not re.search(r"(^|\s)/[\w.-]+/", err.message), err.message


# --------------------------------------------------------------------------------------------
# Data parsed from the shipped files
# --------------------------------------------------------------------------------------------


def test_default_data_matches_the_file_and_expected_json():
    # Independent reading of the table: rows that start with "| Batch ", third column.
    rows = [line.split("|") for line in DEFAULT_FILE.read_text(encoding="utf-8").splitlines()
            if re.match(r"^\|\s*Batch [A-Z]\s*\|", line)]
    from_file = {cells[1].strip(): int(cells[3].strip().rstrip("%")) for cells in rows}
    result = search_knowledge(DEFAULT_KNOWLEDGE, "Task Success of every batch", 3)
    assert result["data"]["batches"] == from_file
    expected = _expected(PACKAGE_ROOT)["knowledge"]
    assert result["data"] == expected
    assert all(type(v) is int for v in result["data"]["batches"].values())
    assert all(type(v) is int for v in result["data"]["release_rule"].values())
    assert list(result["data"]["batches"]) == ["Batch A", "Batch B", "Batch C", "Batch D"]


def test_default_file_leaves_the_computation_to_the_agent():
    text = DEFAULT_FILE.read_text(encoding="utf-8")
    assert not re.search(r"(?<![\d.])79(?![\d])", text), "the average must not be stated in the knowledge"


def test_release_hold_pack_matches_its_expected_json():
    expected = _expected(HOLD_PACK)
    result = search_knowledge(HOLD_PACK / "knowledge", "task success by region", 4)
    assert result["data"] == expected["knowledge"]
    values = list(expected["knowledge"]["batches"].values())
    assert sum(values) / len(values) == expected["calculator"]["value"]
    assert expected["plot"]["labels"] == list(expected["knowledge"]["batches"])
    assert str(min(values)) in expected["final"]["must_include"]


def test_summary_states_the_parsed_data():
    result = search_knowledge(DEFAULT_KNOWLEDGE, "release rule", 2)
    assert result["summary"] == (
        "4 batches (Batch A=72, Batch B=78, Batch C=81, Batch D=85); "
        "release rule: average >= 78 and every batch >= 70; top 2 chunks"
    )


# --------------------------------------------------------------------------------------------
# Ranking and citations
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("query", ["release rule", "What is the release rule threshold?", "average_gte every_batch_gte"])
def test_rule_query_ranks_the_rule_chunk_first(query):
    top = search_knowledge(DEFAULT_KNOWLEDGE, query, 3)["citations"][0]
    assert "average_gte: 78" in top["text"] and "every_batch_gte: 70" in top["text"]


@pytest.mark.parametrize("query", ["Task Success of every batch", "batches task success table"])
def test_batch_query_ranks_the_table_chunk_first(query):
    top = search_knowledge(DEFAULT_KNOWLEDGE, query, 3)["citations"][0]
    assert "| Batch A" in top["text"] and "72%" in top["text"]


def test_other_sections_are_retrievable():
    top = search_knowledge(DEFAULT_KNOWLEDGE, "how is task success measured", 1)["citations"][0]
    assert top["text"].startswith("## How Task Success is measured")
    top = search_knowledge(DEFAULT_KNOWLEDGE, "budgets", 1)["citations"][0]
    assert top["text"].startswith("## Budgets")


def test_cjk_query_matches_per_character():
    top = search_knowledge(DEFAULT_KNOWLEDGE, "发布规则", 1)["citations"][0]
    assert "发布规则" in top["text"]
    assert top["score"] > 0


def test_release_hold_rankings():
    folder = HOLD_PACK / "knowledge"
    assert "| North" in search_knowledge(folder, "task success by region", 3)["citations"][0]["text"]
    assert "average_gte: 75" in search_knowledge(folder, "release rule", 3)["citations"][0]["text"]


@pytest.mark.parametrize("top_k", [1, 2, 3, 4])
def test_citation_shape(top_k):
    result = search_knowledge(DEFAULT_KNOWLEDGE, "AgentEval Mini release rule", top_k)
    citations = result["citations"]
    assert [c["id"] for c in citations] == [f"c{i}" for i in range(1, top_k + 1)]
    file_sha = hashlib.sha256(DEFAULT_FILE.read_bytes()).hexdigest()
    chunk_ids = set()
    for c in citations:
        assert set(c) == {"id", "source_id", "chunk_id", "text", "source_sha256", "score"}
        assert c["source_id"] == "agent_eval_mini.md"
        assert re.fullmatch(r"agent_eval_mini#\d+", c["chunk_id"])
        assert c["source_sha256"] == file_sha
        assert 0 < len(c["text"]) <= knowledge.CHUNK_CHARS
        chunk_ids.add(c["chunk_id"])
    assert len(chunk_ids) == top_k
    scores = [c["score"] for c in citations]
    assert scores == sorted(scores, reverse=True)
    assert result["query"] == "AgentEval Mini release rule"
    assert str(PACKAGE_ROOT) not in json.dumps(result)


def test_aggregate_sha256_is_the_manifest_of_the_files(tmp_path):
    a = _write(tmp_path, "a.md", "| Batch | Task Success |\n|---|---|\n| X | 1 |\n")
    b = _write(tmp_path, "b.md", RULE_FILE)
    manifest = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in (a, b))
    result = search_knowledge(tmp_path, "rule", 2)
    assert result["source_sha256"] == hashlib.sha256(manifest.encode()).hexdigest()
    assert {c["source_id"] for c in result["citations"]} == {"a.md", "b.md"}


def test_ranking_is_deterministic_and_chunk_ids_stable():
    first = search_knowledge(DEFAULT_KNOWLEDGE, "calculator average", 4)
    second = search_knowledge(DEFAULT_KNOWLEDGE, "calculator average", 4)
    assert first == second
    unknown = search_knowledge(DEFAULT_KNOWLEDGE, "zzzz qqqq", 2)["citations"]
    assert [c["chunk_id"] for c in unknown] == ["agent_eval_mini#1", "agent_eval_mini#2"]


def test_tokenize_words_numbers_and_cjk():
    assert tokenize("The Batches of Task-Success: 72% and 78.5") == ["batch", "task", "success", "72", "78.5"]
    assert tokenize("发布 rule") == ["发", "布", "rule"]
    assert tokenize("ＡＢＣ １２") == ["abc", "12"]  # NFKC folds fullwidth forms


def test_long_section_is_split_into_bounded_chunks(tmp_path):
    paragraphs = "\n\n".join(f"Paragraph {i} " + "word " * 60 for i in range(6))
    _write(tmp_path, "long.md", "# Long\n\n" + paragraphs + "\n\n" + "| Batch | Task Success |\n|---|---|\n| X | 1 |\n\n" + RULE_FILE)
    index = load_index(tmp_path)
    long_chunks = [c for c in index.chunks if c.text.startswith("# Long")]
    assert len(long_chunks) >= 3
    assert all(len(c.text) <= knowledge.CHUNK_CHARS for c in long_chunks)
    assert [c.chunk_id for c in index.chunks] == [f"long#{i}" for i in range(1, len(index.chunks) + 1)]


# --------------------------------------------------------------------------------------------
# Nothing hard-coded: other files give other data
# --------------------------------------------------------------------------------------------


def test_different_table_and_rule_format(tmp_path):
    _write(tmp_path, "ops.md", """# Ops Eval

Intro text.

## Scores

| Cohort name | Runs | **Task Success** | Latency |
|:------------|-----:|-----------------:|--------:|
| Alpha       | 10   | 66.5 %           | 12      |
| **Beta**    | 10   | 90%              | 9       |
| Gamma       | 12   | 71               | 10      |

## Rule

```release-rule
average_gte = 80
`every_batch_gte`: 60.5
```
""")
    result = search_knowledge(tmp_path, "scores", 2)
    assert result["data"] == {
        "batches": {"Alpha": 66.5, "Beta": 90, "Gamma": 71},
        "release_rule": {"average_gte": 80, "every_batch_gte": 60.5},
    }
    assert type(result["data"]["batches"]["Beta"]) is int
    assert result["summary"].startswith("3 batches (Alpha=66.5, Beta=90, Gamma=71)")


def test_data_follows_edits_of_the_default_file(tmp_path):
    text = DEFAULT_FILE.read_text(encoding="utf-8").replace("| 72%", "| 64%").replace("average_gte: 78", "average_gte: 80")
    _write(tmp_path, "agent_eval_mini.md", text)
    data = search_knowledge(tmp_path, "release rule", 1)["data"]
    assert data["batches"]["Batch A"] == 64
    assert data["release_rule"] == {"average_gte": 80, "every_batch_gte": 70}


def test_table_and_rule_may_live_in_different_files(tmp_path):
    _write(tmp_path, "b_rule.md", RULE_FILE)
    _write(tmp_path, "a_table.md", "| Batch | Task Success |\n|---|---|\n| One | 55 |\n| Two | 65 |\n")
    data = search_knowledge(tmp_path, "batch", 1)["data"]
    assert data == {"batches": {"One": 55, "Two": 65}, "release_rule": {"average_gte": 60, "every_batch_gte": 50}}


def test_tables_inside_code_fences_are_ignored(tmp_path):
    _write(tmp_path, "k.md", "```\n| Batch | Task Success |\n|---|---|\n| Fake | 1 |\n```\n\n"
           "| Batch | Task Success |\n|---|---|\n| Real | 2 |\n\n" + RULE_FILE)
    assert search_knowledge(tmp_path, "batch", 1)["data"]["batches"] == {"Real": 2}


def test_cache_is_reused_and_invalidated(tmp_path):
    path = _write(tmp_path, "k.md", "| Batch | Task Success |\n|---|---|\n| X | 1 |\n\n" + RULE_FILE)
    first = load_index(tmp_path)
    assert load_index(tmp_path) is first
    path.write_text(path.read_text(encoding="utf-8").replace("| X | 1 |", "| X | 12 |"), encoding="utf-8")
    second = load_index(tmp_path)
    assert second is not first
    assert second.data["batches"] == {"X": 12}


# --------------------------------------------------------------------------------------------
# Structured errors, no absolute paths
# --------------------------------------------------------------------------------------------


def test_missing_folder(tmp_path):
    err = _error(tmp_path / "nope")
    assert (err.code, err.retryable) == ("knowledge_read_failed", False)
    _assert_no_path(err, tmp_path)


def test_folder_without_markdown(tmp_path):
    _write(tmp_path, "notes.txt", "| Batch | Task Success |\n|---|---|\n| X | 1 |\n")
    (tmp_path / "sub.md").mkdir()
    err = _error(tmp_path)
    assert (err.code, err.retryable) == ("knowledge_read_failed", False)
    _assert_no_path(err, tmp_path)


def _data_error(folder: Path) -> dict:
    """Records that cannot be read: the search still returns its chunks, with data_error saying why."""
    result = search_knowledge(folder, "release rule", 3)
    assert result["data"] == {} and result["citations"], result
    assert result["data_error"]["code"] == "knowledge_parse_failed"
    return result["data_error"]


def test_no_task_success_table(tmp_path):
    _write(tmp_path, "k.md", "# Notes\n\n| Batch | Score |\n|---|---|\n| X | 1 |\n\n" + RULE_FILE)
    error = _data_error(tmp_path)
    assert "task success" in error["message"].lower() and "k.md" in error["message"]
    assert str(tmp_path) not in error["message"]


def test_missing_rule_line(tmp_path):
    _write(tmp_path, "k.md", "| Batch | Task Success |\n|---|---|\n| X | 1 |\n\n- average_gte: 5\n")
    assert "every_batch_gte" in _data_error(tmp_path)["message"]


def test_non_numeric_and_conflicting_values(tmp_path):
    _write(tmp_path, "k.md", "| Batch | Task Success |\n|---|---|\n| X | high |\n\n" + RULE_FILE)
    assert "k.md" in _data_error(tmp_path)["message"]
    _write(tmp_path, "k.md", "| Batch | Task Success |\n|---|---|\n| X | 1 |\n\n" + RULE_FILE + "average_gte: 61\n")
    assert "conflicting" in _data_error(tmp_path)["message"]


def test_unreadable_records_are_shown_to_the_model_as_a_whole_table(tmp_path):
    """A table the release reader cannot use still reaches the model: every column and the rule's
    prose (it used to be the raw chunk text, which hid nothing but structured nothing either)."""
    from agent.tools.knowledge import TOOL

    _write(tmp_path, "k.md", "# Notes\n\n| Batch | Score |\n|---|---|\n| X | 41 |\n\n" + RULE_FILE)
    line = TOOL.render(search_knowledge(tmp_path, "batch score", 3))
    assert line.startswith("table k (k.md") and "Batch | Score; rows: X | 41" in line
    assert "average_gte: 60" in line and "every_batch_gte: 50" in line


def test_symlinks_and_big_files_are_skipped(tmp_path):
    outside = _write(tmp_path / "outside", "secret.md", "| Batch | Task Success |\n|---|---|\n| Leak | 1 |\n\n" + RULE_FILE)
    folder = tmp_path / "knowledge"
    folder.mkdir()
    os.symlink(outside, folder / "link.md")
    err = _error(folder)
    assert err.code == "knowledge_read_failed"
    _write(folder, "big.md", "| Batch | Task Success |\n|---|---|\n| Big | 1 |\n\n" + RULE_FILE + "x" * (1024 * 1024))
    assert _error(folder).code == "knowledge_read_failed"
    _write(folder, "real.md", "| Batch | Task Success |\n|---|---|\n| Real | 3 |\n\n" + RULE_FILE)
    result = search_knowledge(folder, "batch", 4)
    assert result["data"]["batches"] == {"Real": 3}
    assert {c["source_id"] for c in result["citations"]} == {"real.md"}


def test_invalid_utf8_is_a_read_failure(tmp_path):
    (tmp_path / "k.md").write_bytes(b"| Batch | Task Success |\n\xff\xfe\n")
    err = _error(tmp_path)
    assert (err.code, err.retryable) == ("knowledge_read_failed", False)
    assert err.message == "k.md is not valid UTF-8"


def test_transient_os_error_is_retryable(tmp_path, monkeypatch):
    _write(tmp_path, "k.md", "| Batch | Task Success |\n|---|---|\n| X | 1 |\n\n" + RULE_FILE)

    def flaky_open(*args, **kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(knowledge.os, "open", flaky_open)
    err = _error(tmp_path)
    assert (err.code, err.retryable) == ("knowledge_read_failed", True)
    _assert_no_path(err, tmp_path)


def test_through_the_registry(tmp_path):
    registry = default_registry()
    tool = registry.get("knowledge_search")
    args = registry.validate("knowledge_search", {"query": "release rule"})
    result = tool.execute(ToolContext(knowledge_dir=DEFAULT_KNOWLEDGE, artifact_dir=tmp_path), args, threading.Event())
    assert len(result["citations"]) == 3
    assert tool.digest(result) == _expected(PACKAGE_ROOT)["knowledge"]


def test_copy_of_pack_folder_behaves_the_same(tmp_path):
    shutil.copytree(HOLD_PACK / "knowledge", tmp_path / "k")
    a = search_knowledge(tmp_path / "k", "release rule", 3)
    b = search_knowledge(HOLD_PACK / "knowledge", "release rule", 3)
    assert a == b


# --------------------------------------------------------------------------------------------
# Every column, every table kind, and the prose reach the model (issue 54)
# --------------------------------------------------------------------------------------------


def _random_table(seed: int, rows: int = 5) -> tuple[list[str], list[list]]:
    import random
    import string

    rng = random.Random(seed)

    def word(n: int = 6) -> str:
        return "".join(rng.choice(string.ascii_lowercase) for _ in range(n)).capitalize()

    names = [f"{word()} name"] + [f"{word()} {word(3)}" for _ in range(3)]
    body = [[f"{word()}{k}"] + [rng.randint(1, 999), round(rng.uniform(1, 99), 1) + 0.05, rng.randint(-50, 50)]
            for k in range(rows)]
    return names, body


def test_every_column_and_the_notes_reach_the_model(tmp_path):
    """A second measure and a note that a row does not count were invisible: the tool showed only
    the first numeric column and no prose."""
    from agent.tools.knowledge import TOOL

    names, body = _random_table(1)
    note = f"Row {body[2][0]} does not count toward the total."
    table = "\n".join(["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
                      + ["| " + " | ".join(map(str, row)) + " |" for row in body])
    _write(tmp_path, "rec.md", f"# Record\n\n## Results\n\n{table}\n\n## Notes\n\n{note}\n")
    result = search_knowledge(tmp_path, "results", 1)
    [view] = result["tables"]
    assert [c["name"] for c in view["columns"]] == names and view["rows"] == body
    assert note in view["prose"] and view["sql_name"] == "rec" and view["source"] == "rec.md"
    line = TOOL.render(result)
    for row in body:
        assert " | ".join(map(str, row)) in line  # every cell, not only the first numeric column
    assert note in line and "table rec (rec.md" in line


def test_a_csv_file_is_searched_and_shown_whole(tmp_path):
    from agent.tools.knowledge import TOOL

    names, body = _random_table(2)
    lines = [",".join(names)] + [",".join(map(str, row)) for row in body]
    _write(tmp_path, "measures.csv", "\n".join(lines) + "\n")
    result = search_knowledge(tmp_path, names[1], 3)  # a CSV-only folder used to be "no knowledge files"
    assert result["citations"][0]["source_id"] == "measures.csv"
    assert result["citations"][0]["chunk_id"] == "measures.csv#1"
    [view] = result["tables"]
    assert view["rows"] == body and [c["name"] for c in view["columns"]] == names
    assert all(" | ".join(map(str, row)) in TOOL.render(result) for row in body)


def test_a_large_table_is_a_sample_and_points_to_the_query_tool(tmp_path):
    from agent.task.tables import VIEW_MAX_ROWS, VIEW_SAMPLE_ROWS
    from agent.tools.knowledge import TOOL

    names, body = _random_table(3, rows=VIEW_MAX_ROWS + 5)
    _write(tmp_path, "big.csv", "\n".join([",".join(names)] + [",".join(map(str, r)) for r in body]) + "\n")
    result = search_knowledge(tmp_path, "rows", 1)
    [view] = result["tables"]
    assert view["rows_total"] == len(body) and view["rows"] == body[:VIEW_SAMPLE_ROWS]
    assert f"first {VIEW_SAMPLE_ROWS} of {len(body)} rows; table_query" in TOOL.render(result)


def test_the_release_rule_result_keeps_its_data_and_gains_the_tables():
    result = search_knowledge(DEFAULT_KNOWLEDGE, "Task Success of every batch", 3)
    assert result["data"] == _expected(PACKAGE_ROOT)["knowledge"]
    [view] = result["tables"]
    by_name = {c["name"]: i for i, c in enumerate(view["columns"])}
    assert {row[0]: row[by_name["Task Success"]] for row in view["rows"]} == result["data"]["batches"]
