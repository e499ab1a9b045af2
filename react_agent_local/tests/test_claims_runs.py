"""The claim gate in whole runs of packs written the way a user writes them (scripted model, real tools).

Each test is one kind of failure seen on such packs: a Final that answers nothing, a number stated for
the wrong row or threshold, the value of one statistic under another's word, a change whose sign is in
its word, a list that contradicts its own condition, and a run whose Finals keep failing. The packs
are written here, in a temporary folder, as a user would (``task.json``, ``knowledge/*.md``,
``data/expected.json``); no family generates them. Every expected value is read from the run's own
Observations, never typed in.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from agent.contracts.budgets import Budgets
from agent.task.packs import TaskPack
from agent.tools import pack_registry

from runtime_helpers import events_of, run_scripted

OFFICES = """# Support Desk: April evaluation by office

Each office graded 120 tickets by hand in April.

## Results by office

| Office | Tickets | Escalations | Resolution Rate (%) |
|--------|--------:|------------:|--------------------:|
| Oslo   | 120     | 9           | 82.5                |
| Lima   | 120     | 15          | 68.0                |
| Cairo  | 120     | 12          | 71.5                |
| Perth  | 120     | 10          | 77.0                |
| Quito  | 120     | 18          | 66.5                |

## Office floor

Every office must reach the office floor of Resolution Rate, inclusive.

- office_floor_gte: 70
"""

MONTHS = {"desk_2025_03.md": ("3", [("北区", "84.5"), ("中区", "79"), ("南区", "73")]),
          "desk_2025_04.md": ("4", [("北区", "82"), ("中区", "77.5"), ("南区", "70.5")])}


def _pack(root: Path, goal: str, knowledge: dict[str, str], tools: list[str]) -> TaskPack:
    (root / "knowledge").mkdir(parents=True)
    (root / "data").mkdir()
    for name, text in knowledge.items():
        (root / "knowledge" / name).write_text(text, encoding="utf-8")
    (root / "task.json").write_text(json.dumps({"id": root.name, "goal": goal, "required_tools": tools,
                                                "mode": "guided"}, ensure_ascii=False), encoding="utf-8")
    (root / "data" / "expected.json").write_text(json.dumps({"task_id": root.name, "checks": [
        {"type": "final_accepted"}]}), encoding="utf-8")
    return TaskPack.load(root)


def offices(tmp_path: Path, goal: str | None = None) -> TaskPack:
    return _pack(tmp_path / "offices", goal or (
        "Using the Support Desk's April office evaluation in the knowledge base, find the office with the lowest "
        "Resolution Rate and the office floor, then use the calculator to work out how far that office is below "
        "the floor. Answer with the office's name, its Resolution Rate and the gap."),
        {"support_desk_april.md": OFFICES}, ["knowledge_search", "calculator"])


def months(tmp_path: Path) -> TaskPack:
    files = {}
    for name, (month, rows) in MONTHS.items():
        table = "\n".join(f"| {region} | 50 | {value}% |" for region, value in rows)
        files[name] = (f"# 客服中心 2025 年 {month} 月评测\n\n{month} 月每区各抽 50 张工单。\n\n## {month} 月各区域解决率\n\n"
                       f"| 区域 | 工单数 | 解决率 |\n|------|------:|------:|\n{table}\n")
    return _pack(tmp_path / "months", "知识库里有客服中心 2025 年 3 月和 4 月的两份评测（北区、中区、南区）。请用计算器算出三个"
                 "区域解决率的平均值从 3 月到 4 月变化了多少（4 月平均值减去 3 月平均值，保留 2 位小数）。", files,
                 ["knowledge_search", "calculator"])


def run(pack: TaskPack, tmp_path: Path, expression: str, finals: list[str], **kw):
    outputs = [json.dumps({"query": "results and rule", "top_k": 4}), json.dumps({"expression": expression})]
    return run_scripted(outputs + [json.dumps(f, ensure_ascii=False) for f in finals], tmp_path, pack=pack,
                        tools=pack_registry(pack), **kw)


def rates(outcome) -> dict[str, float]:
    """The office table's Resolution Rate column as the knowledge search returned it."""
    (record,) = outcome.result.observations[0].result["records"].values()
    return next(values for column, values in record["columns"].items() if column.startswith("Resolution"))


def verdicts(outcome) -> list[dict]:
    return events_of(outcome, "final.validated")


def test_a_bare_comparison_answers_nothing_and_the_run_ends_unverified(tmp_path):
    outcome, _ = run(offices(tmp_path), tmp_path, "70 - 66.5", ["70 >= 66.5 is True"] * 3)
    assert [v["accepted"] for v in verdicts(outcome)] == [False] * 3
    assert "only a comparison" in verdicts(outcome)[0]["message"]
    result = outcome.result
    assert (result.status, result.stop_reason, result.final) == ("stopped", "final_unverified", None)
    assert result.unverified.answer == "70 >= 66.5 is True" and "only a comparison" in result.unverified.unverified[0]


def test_a_number_stated_for_the_wrong_row_is_refused_and_the_next_ask_names_the_rows_value(tmp_path):
    wrong = "The lowest office is Quito with a Resolution Rate of 70. The floor is 70, so it falls short by 3.5 points."
    right = wrong.replace("Rate of 70", "Rate of 66.5")
    outcome, policy = run(offices(tmp_path), tmp_path, "70 - 66.5", [wrong, right])
    quito = rates(outcome)["Quito"]
    first, second = verdicts(outcome)
    assert not first["accepted"] and f"the evidence gives Quito" in first["message"]
    assert f"Resolution Rate (%) {quito:g}" in first["message"]
    # what the next ask shows the model: the claim that failed and the row's value
    assert f"Resolution Rate (%) {quito:g}" in policy.requests[-1].messages[-1]["content"]
    assert second["accepted"] and outcome.result.stop_reason == "completed"


def test_a_threshold_no_record_states_is_refused_though_the_number_is_elsewhere(tmp_path):
    pack = offices(tmp_path)
    tickets = "120"
    assert tickets in (pack.knowledge_dir / "support_desk_april.md").read_text()  # a number of the record...
    wrong = f"The lowest office is Quito with a Resolution Rate of 66.5. The floor is {tickets}, so it falls short by 3.5 points."
    outcome, _ = run(pack, tmp_path, "70 - 66.5", [wrong, wrong.replace(f"is {tickets}", "is 70")])
    first, second = verdicts(outcome)
    floor = outcome.result.observations[0].result["records"]["Support Desk: April evaluation by office"]["rules"]
    assert not first["accepted"] and f"as the floor" in first["message"]  # ... but no floor of it
    assert f"office_floor_gte: {floor['office_floor_gte']}" in first["message"] and second["accepted"]


def test_the_wrong_row_under_an_extremum_word_is_refused(tmp_path):
    outcome, _ = run(offices(tmp_path), tmp_path, "70 - 68",
                     ["The lowest office is Lima with a Resolution Rate of 68. The floor is 70, so it falls short by 2 points."] * 3)
    column = rates(outcome)
    lowest = min(column, key=column.get)
    assert lowest != "Lima" and f"the lowest is {lowest}" in verdicts(outcome)[0]["message"]
    assert outcome.result.stop_reason == "final_unverified"


def test_a_statistic_under_another_statistics_word_is_refused(tmp_path):
    pack = offices(tmp_path, "What is the median Resolution Rate of the Support Desk's offices in April? Use the "
                             "knowledge base and the calculator, and answer with the median.")
    values = "(82.5 + 68 + 71.5 + 77 + 66.5) / 5"
    mean = eval(values)
    outcome, _ = run(pack, tmp_path, values, [f"The median Resolution Rate is {mean:g}.",
                                              f"The median Resolution Rate is {statistics.median(rates_of(pack)):g}."])
    assert outcome.result.observations[1].result["value"] == mean
    first, second = verdicts(outcome)
    assert not first["accepted"] and "a mean" in first["message"] and "not the median" in first["message"]
    assert second["accepted"]  # the median of the column, which the runtime works out itself


def rates_of(pack: TaskPack) -> list[float]:
    from agent.tools.knowledge import search_knowledge

    (record,) = search_knowledge(pack.knowledge_dir, "results", 1)["records"].values()
    return list(record["columns"]["Resolution Rate (%)"].values())


def test_a_fall_stated_in_words_is_the_negative_change_and_a_rise_is_refused(tmp_path):
    pack = months(tmp_path)
    expression = "(82 + 77.5 + 70.5) / 3 - (84.5 + 79 + 73) / 3"
    outcome, _ = run(pack, tmp_path, expression, ["4 月平均值比 3 月上升了2.17个百分点。", "4 月平均值比 3 月下降了2.17个百分点。"])
    change = outcome.result.observations[1].result["value"]
    assert change < 0 and f"{-change:.2f}" == "2.17"
    first, second = verdicts(outcome)
    assert not first["accepted"] and "a fall" in first["message"]
    assert second["accepted"] and outcome.result.stop_reason == "completed"


def test_a_fall_in_english_with_full_precision_is_accepted_at_once(tmp_path):
    pack = months(tmp_path)
    expression = "(82 + 77.5 + 70.5) / 3 - (84.5 + 79 + 73) / 3"
    outcome, _ = run(pack, tmp_path, expression, ["The average fell by 2.1666666666666667 points."])
    assert [v["accepted"] for v in verdicts(outcome)] == [True]


def test_a_list_must_meet_its_condition_and_leave_no_member_out(tmp_path):
    outcome, _ = run(offices(tmp_path, "Which offices are below the office floor in the Support Desk's April evaluation? "
                                       "Use the knowledge base and the calculator, and list them with the floor."),
                     tmp_path, "70 - 66.5", ["Lima, Quito and Cairo are below the floor of 70.",
                                             "Only Quito is below the floor of 70.",
                                             "Lima and Quito are below the floor of 70."])
    column, floor = rates(outcome), 70
    below = sorted(office for office, value in column.items() if value < floor)
    wrong, short, right = verdicts(outcome)
    assert not wrong["accepted"] and "Cairo" in wrong["message"] and "Cairo" not in below
    assert not short["accepted"] and "leaves out" in short["message"]
    assert all(office in short["message"] for office in below if office != "Quito")
    assert right["accepted"] and below == ["Lima", "Quito"]


def test_a_count_must_equal_the_list_it_counts(tmp_path):
    outcome, _ = run(offices(tmp_path), tmp_path, "70 - 66.5",
                     ["Quito is the lowest office at 66.5. Three offices are below the floor of 70: Lima and Quito.",
                      "Quito is the lowest office at 66.5. Two offices are below the floor of 70: Lima and Quito."])
    first, second = verdicts(outcome)
    assert not first["accepted"] and "counts 3" in first["message"] and second["accepted"]


def test_the_unverified_candidate_is_the_one_with_the_fewest_failed_claims(tmp_path):
    worse = "The lowest office is Lima with a Resolution Rate of 70. The floor is 120, so it falls short by 3.5 points."
    better = "The lowest office is Quito with a Resolution Rate of 70. The floor is 70, so it falls short by 3.5 points."
    outcome, _ = run(offices(tmp_path), tmp_path, "70 - 66.5", [better, worse, worse],
                     budgets=Budgets(repeated_action_limit=3))
    failed = [v["false_claims"] for v in verdicts(outcome)]
    assert failed[0] < failed[1] and outcome.result.stop_reason == "final_unverified"
    assert outcome.result.unverified.answer == better and len(outcome.result.unverified.unverified) == failed[0]
