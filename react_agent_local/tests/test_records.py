"""extract_records: the record corpus under tests/records/ plus focused unit tests.

Each ``records/NAME.md`` has a sibling ``NAME.expected.json``: the expected output, or
``{"error": "substring of the RecordError message"}``.
"""

import json
from pathlib import Path

import pytest

from agent.families.release_rule.record import read as extract_records
from agent.tools.records import RecordError

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
RECORDS = Path(__file__).resolve().parent / "records"
CORPUS = sorted(RECORDS.glob("*.md"))

TABLE = "| Batch | Task Success |\n|---|---|\n| A | 72 |\n| B | 80 |\n"
RULE = "- average_gte: 75\n- every_batch_gte: 70\n"


def _same_types(actual, expected):
    """JSON keeps 72 and 72.5 apart as int and float; so must extract_records."""
    if isinstance(expected, dict):
        return all(_same_types(actual[k], v) for k, v in expected.items())
    return type(actual) is type(expected)


# --- the corpus --------------------------------------------------------------------------------


def test_corpus_is_varied_enough():
    expected = [json.loads(p.with_suffix(".expected.json").read_text("utf-8")) for p in CORPUS]
    assert sum("error" not in e for e in expected) >= 12
    assert sum("error" in e for e in expected) >= 3
    assert any(p.name.startswith("zh_") for p in CORPUS)


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_file(path):
    expected = json.loads(path.with_suffix(".expected.json").read_text("utf-8"))
    files = [(path.name, path.read_text("utf-8"))]
    if "error" in expected:
        with pytest.raises(RecordError) as info:
            extract_records(files)
        message = str(info.value)
        assert expected["error"] in message
        assert path.name in message
        assert len(message) <= 300
        return
    result = extract_records(files)
    assert result == expected
    assert list(result["batches"]) == list(expected["batches"])  # document order
    assert _same_types(result, expected)


# --- the files shipped with the package give what their packs' ground truth says ----------------


def _shipped_packs():
    packs = [PACKAGE_ROOT] + sorted(p.parent for p in (PACKAGE_ROOT / "packs").glob("*/task.json"))
    # Packs of another task family (facts instead of records) have no record to compare.
    return [p for p in packs if "knowledge" in json.loads((p / "data" / "expected.json").read_text(encoding="utf-8"))]


@pytest.mark.parametrize("pack", _shipped_packs(), ids=lambda p: p.name)
def test_shipped_knowledge_matches_expected(pack):
    expected = json.loads((pack / "data" / "expected.json").read_text(encoding="utf-8")).get("knowledge")
    paths = sorted((pack / "knowledge").glob("*.md"))
    result = extract_records([(p.name, p.read_text(encoding="utf-8-sig")) for p in paths])
    assert result == expected
    assert list(result["batches"]) == list(expected["batches"])


# --- focused unit tests ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    ["Task Success", "task_success", "TaskSuccess", "Task Success (%)", "Task success rate", "**Task Success**",
     "任务成功率", "任务成功率 (%)", "task-success"],
)
def test_value_header_variants(header):
    text = f"| Batch | Tasks | {header} | Steps |\n|---|---|---|---|\n| A | 50 | 72 | 3 |\n\n{RULE}"
    assert extract_records([("r.md", text)])["batches"] == {"A": 72}


@pytest.mark.parametrize(
    "cell, value",
    [("72", 72), ("72%", 72), ("72.5", 72.5), ("72.5 %", 72.5), ("**72%**", 72), ("0.72", 0.72),
     ("72.0", 72), ("７２％", 72), ("`81`", 81)],
)
def test_value_cell_variants(cell, value):
    text = f"| Batch | Task Success |\n|---|---|\n| A | {cell} |\n\n{RULE}"
    got = extract_records([("r.md", text)])["batches"]["A"]
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    "header",
    ["Batch", "Group", "Region", "Team", "Site", "Cohort", "Segment", "Split", "Name", "Label",
     "批次", "组", "分组", "区域", "名称"],
)
def test_label_header_variants(header):
    # The label column comes second, after a numeric diagnostic, so only its header can pick it.
    text = f"| Runs | {header} | Task Success |\n|---|---|---|\n| 9 | x1 | 70 |\n\n{RULE}"
    assert extract_records([("r.md", text)])["batches"] == {"x1": 70}


@pytest.mark.parametrize(
    "line",
    ["- average_gte: 78", "* average_gte = 78", "- `average_gte`: `78`", "average-gte: 78%", "avg_gte: 78",
     "averageGte: 78", "AVERAGE_GTE = 78", "mean_gte >= 78", "The mean must hold (average_gte ≥ 78).",
     "平均值不低于阈值 (average_gte = 78)", "average_gte：78", "- **average_gte**: 78", '"average_gte": 78,'],
)
def test_average_key_spellings(line):
    text = f"{TABLE}\n{line}\nevery_batch_gte: 70\n"
    assert extract_records([("r.md", text)])["release_rule"] == {"average_gte": 78, "every_batch_gte": 70}


@pytest.mark.parametrize(
    "line",
    ["every_batch_gte: 70", "every_group_gte: 70", "every-region-gte = 70", "everyBatchGte: 70",
     "min_each_gte: 70", "each_team_gte: 70", "all_batches_gte: 70", "EVERY_BATCH_GTE >= 70"],
)
def test_every_key_spellings(line):
    text = f"{TABLE}\naverage_gte: 75\n{line}\n"
    assert extract_records([("r.md", text)])["release_rule"] == {"average_gte": 75, "every_batch_gte": 70}


@pytest.mark.parametrize(
    "rule",
    [
        "The average must be at least 75 and every batch at least 70.",  # no key: never guessed
        "average_gte: TBD\nevery_batch_gte: 70",  # key without a number
        "baverage_gte: 75\nevery_batch_gte: 70",  # not the key, only ends like it
        "average_gte is not decided yet; every_batch_gte: 70",
    ],
)
def test_no_rule_value_is_invented(rule):
    with pytest.raises(RecordError, match="average_gte"):
        extract_records([("r.md", f"{TABLE}\n{rule}\n")])


def test_fenced_table_is_not_a_value_table_but_fenced_rule_counts():
    text = f"```\n{TABLE}```\n\n```yaml\naverage_gte: 75\nevery_batch_gte: 70\n```\n"
    with pytest.raises(RecordError, match="no table with a task success column"):
        extract_records([("r.md", text)])
    result = extract_records([("r.md", text + "\n" + TABLE.replace("80", "81"))])
    assert result == {"batches": {"A": 72, "B": 81}, "release_rule": {"average_gte": 75, "every_batch_gte": 70}}


def test_diagnostic_columns_are_never_read():
    text = "| Tasks | Batch | Steps | Task Success | Valid Action Rate |\n|--:|--|--:|--:|--:|\n" \
           "| 50 | A | 3.1 | 72% | 0.94 |\n| 50 | B | 4.6 | 78% | 0.92 |\n\n" + RULE
    assert extract_records([("r.md", text)])["batches"] == {"A": 72, "B": 78}


def test_several_files_merge_in_order_and_agree():
    files = [("a.md", "| Batch | Task Success |\n|---|---|\n| B | 80 |\n"),
             ("b.md", "| Batch | Task Success |\n|---|---|\n| A | 72 |\n| B | 80 |\n"),
             ("c.md", RULE)]
    result = extract_records(files)
    assert list(result["batches"].items()) == [("B", 80), ("A", 72)]
    assert result["release_rule"] == {"average_gte": 75, "every_batch_gte": 70}


def test_conflict_across_files_names_both_files_without_paths():
    files = [("/srv/pack/knowledge/a.md", TABLE + RULE), ("/srv/pack/knowledge/b.md", TABLE.replace("72", "73"))]
    with pytest.raises(RecordError) as info:
        extract_records(files)
    message = str(info.value)
    assert "a.md and b.md" in message and "conflicting" in message and "'A'" in message
    assert "/srv" not in message


def test_missing_keys_named_with_files_and_message_is_short():
    files = [(f"record_{i:03}_with_a_rather_long_file_name.md", TABLE) for i in range(40)]
    with pytest.raises(RecordError) as info:
        extract_records(files)
    message = str(info.value)
    assert "average_gte" in message and "every_batch_gte" in message
    assert "record_000_with_a_rather_long_file_name.md" in message and "more" in message
    assert len(message) <= 300


def test_no_table_names_files_and_what_was_looked_for():
    with pytest.raises(RecordError) as info:
        extract_records([("a.md", RULE), ("b.md", "Batch A: 72%")])
    message = str(info.value)
    assert "a.md" in message and "b.md" in message and "Task Success" in message


def test_no_files():
    with pytest.raises(RecordError):
        extract_records([])


def test_record_error_is_a_value_error():
    assert issubclass(RecordError, ValueError)
