"""Records as people keep them: several records in several files keyed by date or title, rules of any
shape read as named thresholds, a search that covers the records it is asked for, the fact lookup's
names as a grammar choice, and answer slots bound to what they name (the claim gate)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

from agent.contracts.decision import latest_ok as latest_of
from agent.gate.claims import bound_slots, claim_problems, resolve_checks
from agent.contracts.task import AnswerGuide
from agent.contracts.decision import Observation
from agent.task.packs import TaskPack, load_pack
from agent.prompts.prompting import answer_form_pattern
from agent.tools import ToolContext, registry_for, with_fact_names
from agent.tools.facts import LOOKED_UP_FILE, bound_tool
from agent.tools.knowledge import TOOL as KNOWLEDGE
from agent.tools.knowledge import named_records, search_knowledge
from agent.tools.records import RecordError, read_records, rule_name

TABLE = "| Region | Score | Tasks |\n|---|---:|---:|\n| North | 72% | 30 |\n| South | 64.5 | 28 |\n| Average | 68 | |\n"


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


# -- rules of any shape --------------------------------------------------------------------------

@pytest.mark.parametrize("rules", [
    "## Rules\n\n- Floor: 70\n- Max spread: 15 points\n",
    "## Thresholds\n\n| rule | value |\n|---|---:|\n| floor | 70 |\n| max-spread | 15 |\n",
    "## Rules\n\nA group passes at the floor (floor ≥ 70); the spread may not exceed maxSpread = 15.\n",
    "## Policy\n\n```yaml\nrules:\n  floor: 70\n  max_spread: 15\n```\n",
    "The floor is written as floor: 70 and max_spread = 15 in prose.\n",
    "| floor | max_spread |\n|---|---|\n| 70 | 15 |\n",
])
def test_rules_of_any_shape_are_named_thresholds(rules):
    records = read_records([("q1.md", f"# Quality review\n\n{TABLE}\n{rules}")])
    (record,) = records.values()
    assert record["rules"] == {"floor": 70, "max_spread": 15}
    assert record["values"] == {"North": 72, "South": 64.5}  # the summary row is no group
    assert record["value_column"] == "Score" and record["columns"]["Tasks"] == {"North": 30, "South": 28}


def test_front_matter_rules_and_a_shared_policy_file():
    first = "---\ndate: 2024-03-31\nrules:\n  ceiling: 95\n---\n# March\n\n" + TABLE
    policy = "# Policy\n\n- floor: 70\n"
    records = read_records([("march.md", first), ("policy.md", policy)])
    assert list(records) == ["2024-03-31"] and records["2024-03-31"]["rules"] == {"floor": 70, "ceiling": 95}


def test_rule_names_people_write():
    assert [rule_name(n) for n in ("Max spread", "max-spread", "maxSpread", "`floor`", "**Floor**", "avg_gte",
                                  "min_each_gte", "下限")] == \
        ["max_spread", "max_spread", "max_spread", "floor", "floor", "average_gte", "every_batch_gte", "下限"]


def test_several_records_keyed_by_date_or_title_in_date_order():
    april = "# Quality review 2024-04\n\n" + TABLE.replace("72%", "75")
    march = "---\ndate: 2024-03\n---\n# Quality review\n\n" + TABLE
    quarter = "# Review Q2 2024\n\n" + TABLE
    records = read_records([("b.md", april), ("a.md", march), ("c.md", quarter)])
    assert list(records) == ["2024-03", "2024-04", "2024-Q2"]  # by date, whatever the file names
    assert records["2024-04"]["values"]["North"] == 75 and records["2024-03"]["source_id"] == "a.md"
    titled = read_records([("2_after.md", "# After the update\n\n" + TABLE), ("1_before.md", "# Before\n\n" + TABLE)])
    assert list(titled) == ["After the update", "Before"]  # no dates: file order as given
    same = read_records([("a.md", "# Review\n\n" + TABLE), ("b.md", "# Review\n\n" + TABLE)])
    assert list(same) == ["Review", "Review (b.md)"]


@pytest.mark.parametrize("text,message", [
    ("# R\n\n" + TABLE + "\n- floor: 70\n- floor: 71\n", "conflicting rule values for 'floor'"),
    ("# R\n\n| Region | Score |\n|---|---|\n| A | high |\n| B | 3 |\n", "'Score' of 'A' is not a number"),
    ("# R\n\n| Region | Score |\n|---|---|\n| A | 1 |\n| A | 2 |\n", "conflicting 'Score' for 'A'"),
])
def test_a_record_that_contradicts_itself_is_an_error(text, message):
    with pytest.raises(RecordError) as info:
        read_records([("r.md", text)])
    assert message in str(info.value) and "r.md" in str(info.value)


# -- the search ------------------------------------------------------------------------------------

def _two_records(folder: Path) -> None:
    _write(folder, "march.md", "---\ndate: 2024-03\n---\n# Quality review\n\nIntro.\n\n## Results\n\n" + TABLE
           + "\n## Rules\n\n- floor: 70\n")
    _write(folder, "april.md", "# Quality review 2024-04\n\nIntro.\n\n## Results\n\n" + TABLE.replace("72%", "75")
           + "\n## Rules\n\n- max_drop: 5\n")
    _write(folder, "zz_notes.md", "# Notes on quality reviews\n\nRelease notes, results and rules are discussed weekly.\n")


def test_a_search_returns_every_record_and_covers_the_ones_named(tmp_path):
    _two_records(tmp_path)
    result = search_knowledge(tmp_path, "results and rules", 1)
    assert result["data"] == {} and "data_error" not in result
    assert list(result["records"]) == ["2024-03", "2024-04"] and "named_records" not in result
    assert len(result["citations"]) == 1
    asked = search_knowledge(tmp_path, "North in March 2024 and in 2024-04", 1)
    assert asked["named_records"] == ["2024-03", "2024-04"]
    assert {c["source_id"] for c in asked["citations"]} >= {"march.md", "april.md"}
    line = KNOWLEDGE.render(asked)
    assert line.startswith("record 2024-03 (march.md): Score of 2 groups: North = 72, South = 64.5; lowest: South = 64.5")
    assert "rules: floor = 70" in line and "| record 2024-04 (april.md)" in line and "rules: max_drop = 5" in line
    assert named_records("2024年3月 and Q2", asked["records"]) == ["2024-03"]


def test_top_k_can_return_more_chunks_and_is_still_bounded():
    registry = registry_for(["knowledge_search"])
    assert registry.validate("knowledge_search", {"query": "x", "top_k": 6}).top_k == 6
    with pytest.raises(Exception):
        registry.validate("knowledge_search", {"query": "x", "top_k": 7})


def test_a_release_record_reads_exactly_as_before(tmp_path):
    result = search_knowledge(load_pack(None).knowledge_dir, "release rule", 3)
    assert "records" not in result and set(result["data"]) == {"batches", "release_rule"}
    # a record stating the release rule that the release reader refuses stays refused
    _write(tmp_path, "k.md", "| Batch | Score |\n|---|---|\n| X | 41 |\n\n- average_gte: 60\n- every_batch_gte: 50\n")
    refused = search_knowledge(tmp_path, "x", 1)
    assert refused["data"] == {} and "records" not in refused and refused["data_error"]


def test_a_record_of_other_rules_that_cannot_be_read_says_why(tmp_path):
    _write(tmp_path, "k.md", "# R\n\n| Region | Score |\n|---|---|\n| A | high |\n| B | 3 |\n\n- floor: 3\n")
    result = search_knowledge(tmp_path, "x", 1)
    assert result["data"] == {} and "'Score' of 'A' is not a number" in result["data_error"]["message"]


# -- the fact lookup ---------------------------------------------------------------------------------

def test_fact_names_are_a_grammar_choice(tmp_path):
    pack = load_pack("population_ratio")
    tool = bound_tool(pack.knowledge_dir)
    schema = tool.compact_schema()["properties"]["query"]
    assert schema["enum"] == ["台北人口", "纽约人口", "东京人口"]
    with pytest.raises(Exception) as info:
        tool.validate({"query": "台北市人口"})
    assert "台北人口" in str(info.value.message)
    registry = with_fact_names(None, pack)
    assert set(registry.names) == {"lookup_fact", "calculator"} and registry.get("lookup_fact").compact_schema() == tool.compact_schema()
    assert with_fact_names(None, load_pack("population_ratio_mcp")) is None  # its lookups are the server's
    assert with_fact_names(None, load_pack(None)) is None  # no fact lookup at all


def test_each_lookup_carries_every_fact_looked_up_so_far(tmp_path):
    pack = load_pack("population_ratio")
    tool = registry_for(["lookup_fact"]).get("lookup_fact")
    ctx = ToolContext(knowledge_dir=pack.knowledge_dir, artifact_dir=tmp_path / "run")
    first = tool.execute(ctx, tool.validate({"query": "台北人口"}), threading.Event())
    second = tool.execute(ctx, tool.validate({"query": "纽约人口"}), threading.Event())
    assert list(first["looked_up"]) == ["台北人口"]
    assert second["looked_up"] == {"台北人口": first["value"], "纽约人口": second["value"]}
    assert (tmp_path / "run" / LOOKED_UP_FILE).is_file()
    assert tool.render(second) == f"纽约人口 = {second['value']} people"


# -- bound slots -------------------------------------------------------------------------------------

RECORD = {"title": "R", "date": None, "source_id": "r.md", "value_column": "Score",
          "values": {"North": 72, "South": 64}, "rules": {"floor": 70}}
EVIDENCE = [Observation(id="obs-knowledge_search-1", tool="knowledge_search", ok=True,
                        result={"data": {}, "records": {"R": RECORD}}),
            Observation(id="obs-calculator-2", tool="calculator", ok=True, result={"expression": "64 - 70", "value": -6})]
FORM = ("The lowest group is {name:argmin(record.values)} at {number:min(record.values)}, a gap of "
        "{number:calculator.value} to the floor. Check: {number} >= {number} is {True|False}. "
        "So {every group meets the floor|not every group meets the floor}.")
GUIDE = AnswerGuide(answer_form=FORM, checks=[{"label": "lowest", "left": "min(record.values)", "op": ">=",
                                               "right": "record.rules.floor", "right_label": "floor"}],
                    verdict={"positive": ["every group meets the floor"], "negative": ["not every group meets the floor"]})
RIGHT = ("The lowest group is South at 64, a gap of -6 to the floor. Check: 64 >= 70 is False. "
         "So not every group meets the floor.")


def _problems(answer: str, guide: AnswerGuide = GUIDE, evidence=EVIDENCE) -> list:
    checks = resolve_checks(guide.checks, latest_of(evidence))
    return claim_problems(answer, evidence, "Which group is lowest?", guide, checks)


def test_a_right_answer_passes_the_gate():
    assert _problems(RIGHT) == []
    assert [s.expression for s in bound_slots(FORM)] == ["argmin(record.values)", "min(record.values)", "calculator.value"]


@pytest.mark.parametrize("answer,named", [
    (RIGHT.replace("South at", "North at"), "'North', but argmin(record.values) is South"),
    (RIGHT.replace("gap of -6", "gap of -7"), "holds -7, but calculator.value is -6"),
    (RIGHT.replace("at 64,", "at 72,"), "holds 72, but min(record.values) is 64"),
])
def test_a_bound_slot_holding_another_value_is_refused(answer, named):
    problems = _problems(answer)
    assert any(p.kind == "slot" and named in p.text for p in problems), problems


def test_an_answer_out_of_form_cannot_hide_its_slots():
    problems = _problems("South is the lowest at 64. Check: 64 >= 70 is False. So not every group meets the floor.")
    assert [p.kind for p in problems] == ["slot"] and "does not follow the answer form" in problems[0].text


def test_a_bound_value_grounds_the_number_it_states():
    guide = AnswerGuide(answer_form="The gap is {number:record.rules.floor - min(record.values)} points.")
    assert _problems("The gap is 6 points.", guide) == []
    assert _problems("The gap is 16 points.", guide)[0].kind == "slot"  # (16 is grounded by nothing either)
    guide = AnswerGuide(answer_form="The spread is {number:max(record.values) - min(record.values)}.")
    assert _problems("The spread is 8.", guide) == []  # 8 is in no observation, but the runtime worked it out


def test_a_rounding_binding_wants_exactly_its_rounding():
    calc = [Observation(id="obs-calculator-1", tool="calculator", ok=True, result={"value": 2812.1600000000003})]
    rounded = AnswerGuide(answer_form="It is worth {number:round(calculator.value, 2)} dollars.")
    plain = AnswerGuide(answer_form="It is worth {number:calculator.value} dollars.")
    assert _problems("It is worth 2812.16 dollars.", rounded, calc) == []
    assert _problems("It is worth 2812.2 dollars.", rounded, calc)[0].kind == "slot"
    assert _problems("It is worth 2812.2 dollars.", plain, calc) == []  # rounded to the decimals it is written with
    assert _problems("It is worth 2812 dollars.", plain, calc)[0].kind == "slot"  # never to a whole number


def test_bound_slots_are_number_and_name_slots_in_the_grammar():
    pattern = re.compile(answer_form_pattern(FORM, ("64", "70", "72", "-6")))
    assert pattern.match(RIGHT) and pattern.match(RIGHT.replace("gap of -6", "gap of 123"))
    assert not pattern.match(RIGHT.replace("64 >= 70", "65 >= 70"))  # a plain slot still admits only evidence
    assert not pattern.match(RIGHT.replace("South", "argmin(record.values)"))


def test_a_pack_with_bound_slots_loads(tmp_path):
    _write(tmp_path / "knowledge", "r.md", "# R\n\n" + TABLE)
    _write(tmp_path, "task.json", json.dumps({"id": "bound", "goal": "g", "required_tools": ["knowledge_search"],
                                              "answer_form": FORM.replace("{number:calculator.value}", "{number}")}))
    assert bound_slots(TaskPack.load(tmp_path).task.answer_form)[0].kind == "name"
