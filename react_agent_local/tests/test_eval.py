"""The evaluation suite (R-EVAL): the pack generator, the Wilson interval, the report, the
independent grader, and the eval loop end to end with the scripted policy (no real model)."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

from agent.models.backends.scripted import ScriptedPolicy
from agent.cli.main import main
from agent.contracts.budgets import Budgets, Sampling
from agent.contracts.decision import FinalDecision, Observation
from agent.contracts.result import RunResult
from agent.families.release_rule.generator import CASES, OPTIONS, draw_specs, generate_packs
from agent.families.release_rule.grading import grade_expected, verdict_case
from agent.evaluation.report import build_report, quantile, to_markdown, wilson_interval, write_chart
from agent.evaluation.suite import EvalRun, resolve_packs, run_suite
from agent.models.model_policy import ModelRequest
from agent.task.packs import TaskPack, load_pack
from agent.util.number_text import number_text as fmt
from runtime_helpers import run_scripted
from test_general_core import ratio_outputs

CJK = re.compile(r"[\u4e00-\u9fff]")


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# -- the generator ------------------------------------------------------------------------------

def test_generator_is_deterministic_from_its_seed(tmp_path):
    first = generate_packs(tmp_path / "a", 8, seed=11)
    again = generate_packs(tmp_path / "b", 8, seed=11)
    other = generate_packs(tmp_path / "c", 8, seed=12)
    assert [p.name for p in first] == [p.name for p in again] == [f"gen-11-{i:03d}" for i in range(8)]
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    assert [_files(p)["data/expected.json"] for p in first] != [_files(p)["data/expected.json"] for p in other]
    with pytest.raises(FileExistsError):
        generate_packs(tmp_path / "a", 1, seed=11)


def test_forty_packs_cover_cases_sizes_formats_and_languages(tmp_path):
    roots = generate_packs(tmp_path, 40, seed=5)
    specs = draw_specs(40, 5)
    assert Counter(s.case for s in specs) == {case: 10 for case in CASES}  # the four cases equally often
    assert {len(s.values) for s in specs} == set(range(2, 9))
    for name in ("header", "rule_format", "family", "language", "value_kind", "percent", "sentence_operator"):
        assert {s.draws[name] for s in specs} == set(OPTIONS[name]), name
    values = [v for s in specs for v in s.values]
    assert any(isinstance(v, int) for v in values) and any(isinstance(v, float) for v in values)
    assert any(s.average == s.average_gte for s in specs) and any(s.lowest == s.every_batch_gte for s in specs)
    labels = [label for s in specs for label in s.labels]
    assert any(CJK.search(label) for label in labels) and any(label.isascii() for label in labels)

    goals, record_texts = [], []
    for root in roots:
        pack = TaskPack.load(root)  # task.json meets the contract
        assert pack.task.required_tools == ["knowledge_search", "calculator", "plot"] and pack.task.answer_form is None
        goals.append(pack.task.goal)
        expected = pack.load_expected()
        batches, rule = expected["knowledge"]["batches"], expected["knowledge"]["release_rule"]
        values = list(batches.values())
        average, lowest = expected["calculator"]["value"], min(values)
        # The average is exact to two decimals: the calculator's exact value, sum / n and its rounding agree.
        exact = sum(Fraction(str(v)) for v in values) / len(values)
        assert (exact * 100).denominator == 1 and average == float(exact) == round(sum(values) / len(values), 2)
        assert math.isclose(average, sum(values) / len(values), rel_tol=0, abs_tol=1e-9)
        assert expected["plot"] == {"labels": list(batches), "values": values, "average": average}
        assert expected["final"]["must_include"] == [fmt(average), fmt(lowest)]
        assert expected["final"]["release_eligible"] == (average >= rule["average_gte"] and lowest >= rule["every_batch_gte"])
        assert verdict_case(expected) == next(s.case for s in specs if s.id == expected["task_id"] == pack.task.id)
        record = "".join(p.read_text(encoding="utf-8") for p in (root / "knowledge").glob("*.md"))
        record_texts.append(record)
        for label, value in batches.items():
            assert re.search(rf"\|\s*{re.escape(label)}\s*\|.*\b{re.escape(fmt(value))}%?\s*\|", record), label
        assert re.search(rf"average_gte\W+{re.escape(fmt(rule['average_gte']))}\b", record)
        assert re.search(rf"every_batch_gte\W+{re.escape(fmt(rule['every_batch_gte']))}\b", record)
    assert any(CJK.search(g) for g in goals) and any(not CJK.search(g) for g in goals)
    joined = "\n".join(record_texts)
    for marker in ("```yaml", "\n---\n", "| average_gte |", "(average_gte ", "（average_gte", "- average_gte:",
                   "任务成功率", "task_success", "TaskSuccess", "Task Success (%)", "%"):
        assert marker in joined, marker


def test_every_generated_record_reads_back_as_its_expected_json(tmp_path):
    from agent.tools.knowledge import search_knowledge

    for root in generate_packs(tmp_path, 40, seed=5):
        expected = json.loads((root / "data" / "expected.json").read_text(encoding="utf-8"))["knowledge"]
        data = search_knowledge(root / "knowledge", "Task Success and the release rule", 3)["data"]
        assert (data["batches"], data["release_rule"]) == (expected["batches"], expected["release_rule"]), root.name


# -- Wilson interval and quantiles -------------------------------------------------------------------

def _wilson_by_formula(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    p = k / n
    centre = p + z ** 2 / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z ** 2 / (4 * n ** 2))
    return (centre - spread) / (1 + z ** 2 / n), (centre + spread) / (1 + z ** 2 / n)


@pytest.mark.parametrize("k,n,known", [(0, 10, (0.0, 0.2775)), (10, 10, (0.7225, 1.0)), (5, 10, (0.2366, 0.7634)),
                                       (29, 30, (0.8333, 0.9941))])
def test_wilson_interval_matches_the_formula_and_known_values(k, n, known):
    low, high = wilson_interval(k, n)
    by_formula = _wilson_by_formula(k, n)
    assert low == pytest.approx(by_formula[0], abs=1e-4) and high == pytest.approx(by_formula[1], abs=1e-4)
    assert low == pytest.approx(known[0], abs=1e-4) and high == pytest.approx(known[1], abs=1e-4)


def test_wilson_and_quantiles_of_nothing_are_none():
    assert wilson_interval(0, 0) is None and quantile([], 0.5) is None
    assert quantile([3.0, 1.0, 2.0], 0.5) == 2.0 and quantile([1.0, 2.0, 3.0, 4.0], 0.9) == pytest.approx(3.7)


# -- the report ---------------------------------------------------------------------------------------

def _run(pack, k, ok, *, checks=None, status="completed", stop="completed", independent=(), seconds=10.0, case="both"):
    metrics = {"task_success": ok if status == "completed" else False, "valid_action_rate": 1.0, "recovery_rate": None,
               "steps": 4, "termination_correctness": True, "input_tokens": 1000}
    return EvalRun(pack=pack, run=k, seed=k, status=status, stop_reason=stop, task_success=metrics["task_success"],
                   checks=checks or {}, metrics=metrics, seconds=seconds,
                   independent_failures=None if independent is None else list(independent), case=case)


def test_a_pack_of_another_family_has_no_independent_grade(tmp_path):
    """The independent grader knows the record family only: for seed 002's population pack it says
    nothing (None), which the report shows as N/A, never as a failure or a disagreement."""
    outcome, _ = run_scripted(ratio_outputs(), tmp_path, pack=load_pack("population_ratio"))
    assert outcome.result.metrics.task_success is True
    assert grade_expected(load_pack("population_ratio").load_expected(), outcome.result) is None
    settings = {"packs": "population_ratio", "pack_count": 1, "runs": 2, "seed": 0, "temperature": 0.7,
                "top_p": 0.8, "top_k": 20, "max_seconds": 300, "mode": None}
    report = build_report([_run("ratio", 0, True, independent=None), _run("ratio", 1, False, independent=None)],
                          settings, {"name": "m.gguf"})
    assert report["overall"]["independent"]["runs"] == 0 and report["disagreements"] == []
    assert report["overall"]["task_success"]["passed"] == 1
    assert "| **all** | | **1/2 (50 %)** | 9–91 % | **N/A** | N/A |" in to_markdown(report)


def test_report_on_synthetic_runs(tmp_path):
    runs = [
        _run("p1", 0, True, checks={"final_accepted": True, "calculator_correct": True}, seconds=10),
        _run("p1", 1, False, checks={"final_accepted": True, "calculator_correct": False,
                                     "answer_verdict_correct": False}, independent=["calculator_value"], seconds=20),
        _run("p2", 0, False, status="stopped", stop="max_steps", independent=["stopped:max_steps"], seconds=30,
             case="floor_fails"),
        _run("p2", 1, True, checks={"final_accepted": True}, independent=["false_claim"], seconds=40, case="floor_fails"),
    ]
    report = build_report(runs, {"packs": "generated:2", "pack_count": 2, "runs": 2, "seed": 0, "temperature": 0.7,
                                 "top_p": 0.8, "top_k": 20, "max_seconds": 300, "mode": None}, {"name": "m.gguf"})
    overall = report["overall"]
    assert overall["task_success"]["passed"] == 2 and overall["task_success"]["runs"] == 4
    assert overall["task_success"]["ci95"] == [round(x, 4) for x in wilson_interval(2, 4)]
    assert overall["independent"]["passed"] == 1
    assert [p["task_success"]["passed"] for p in report["per_pack"]] == [1, 1]
    assert report["per_case"]["floor_fails"]["task_success"]["runs"] == 2
    assert report["failures"] == {"by_check": {"calculator_correct": 1, "answer_verdict_correct": 1},
                                  "by_stop_reason": {"max_steps": 1}}
    assert report["independent_failures"] == {"calculator_value": 1, "stopped:max_steps": 1, "false_claim": 1}
    assert [(d["pack"], d["run"]) for d in report["disagreements"]] == [("p2", 1)]
    assert report["seconds_per_run"] == {"median": 25.0, "p90": 37.0, "mean": 25.0, "total": 100.0}
    means = report["metrics_mean"]
    assert means["steps"] == {"mean": 4.0, "runs": 4} and means["recovery_rate"] == {"mean": None, "runs": 0}
    assert means["task_success"]["mean"] == 0.5  # booleans average as a share
    markdown = to_markdown(report)
    assert "| p1 | both rules hold | 1/2 (50 %) |" in markdown and "| **all** | | **2/4 (50 %)** |" in markdown
    assert "| stopped: max_steps | 1 |" in markdown and "median 25 s · p90 37 s" in markdown
    assert "## Graders disagree" in markdown
    png = write_chart(report, tmp_path / "report.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- the independent grader -----------------------------------------------------------------------------

EXPECTED = {"knowledge": {"batches": {"A": 72, "B": 78, "C": 81, "D": 85},
                          "release_rule": {"average_gte": 78, "every_batch_gte": 75}},
            "calculator": {"value": 79}, "plot": {"labels": ["A", "B", "C", "D"], "values": [72, 78, 81, 85], "average": 79},
            "final": {"must_include": ["79", "72"], "release_eligible": False}}


def _result(answer: str, value: float = 79) -> RunResult:
    observations = [
        Observation(id="obs-calculator-2", tool="calculator", ok=True, result={"value": value}),
        Observation(id="obs-plot-3", tool="plot", ok=True,
                    result={"spec": {"labels": ["A", "B", "C", "D"], "values": [72, 78, 81, 85], "average": 79}}),
    ]
    return RunResult(status="completed", stop_reason="completed", observations=observations,
                     final=FinalDecision(type="final", answer=answer, evidence_ids=["obs-calculator-2", "obs-plot-3"]))


@pytest.mark.parametrize("answer,value,failures", [
    ("Average 79, lowest 72. Check: 79 >= 78 is True; 72 >= 75 is False. It does not meet the rule.", 79, []),
    ("Average 79, lowest 72. Check: 79 >= 78 is True; 72 >= 75 is True. It does not meet the rule.", 79, ["false_claim"]),
    ("Average 79, lowest 72. Check: 79 >= 78 is True; 79 >= 75 is True. It meets the rule.", 79,
     ["claim_compares_wrong_values", "wrong_verdict"]),
    ("平均值 79，最低 72，不满足发布规则。", 79, []),
    ("The average is 316 and the lowest is 72; it does not meet the rule.", 316, ["calculator_value", "answer_lacks_average"]),
])
def test_independent_grader_checks_numbers_claims_and_verdict(answer, value, failures):
    assert grade_expected(EXPECTED, _result(answer, value)) == failures


def test_independent_grader_reports_a_stopped_run():
    assert grade_expected(EXPECTED, RunResult(status="stopped", stop_reason="max_steps")) == ["stopped:max_steps"]


# -- the eval loop end to end with the scripted policy ---------------------------------------------------

def _answer(expected: dict, chinese: bool, eligible: bool | None = None) -> str:
    """A right answer (or one with the given verdict) in the goal's language, from the pack's data."""
    batches, rule = expected["knowledge"]["batches"], expected["knowledge"]["release_rule"]
    average, lowest = expected["calculator"]["value"], min(batches.values())
    avg_ok, floor_ok = average >= rule["average_gte"], lowest >= rule["every_batch_gte"]
    eligible = (avg_ok and floor_ok) if eligible is None else eligible
    checks = (f"{fmt(average)} >= {fmt(rule['average_gte'])} is {avg_ok}; "
              f"{fmt(lowest)} >= {fmt(rule['every_batch_gte'])} is {floor_ok}")
    if chinese:
        return (f"平均值是 {fmt(average)}，最低值是 {fmt(lowest)}。检查：{checks}。"
                f"所以{'满足' if eligible else '不满足'}发布规则。")
    return (f"The average is {fmt(average)} and the lowest value is {fmt(lowest)}. Check: {checks}. "
            f"So it {'meets' if eligible else 'does not meet'} the release rule.")


def computed_policy(pack: TaskPack, eligible: bool | None = None) -> ScriptedPolicy:
    """A scripted policy that answers each guided step from the pack's own data (nothing typed in)."""
    expected = pack.load_expected()
    batches = expected["knowledge"]["batches"]
    values = list(batches.values())

    def respond(request: ModelRequest) -> str:
        if '"tool": "knowledge_search"' in request.prefix:
            return json.dumps({"query": "Task Success of every group and the release rule", "top_k": 3})
        if '"tool": "calculator"' in request.prefix:
            return json.dumps({"expression": f"({' + '.join(fmt(v) for v in values)}) / {len(values)}"})
        if '"tool": "plot"' in request.prefix:
            return json.dumps({"labels": list(batches), "values": values, "average": sum(values) / len(values),
                               "title": "Task Success"}, ensure_ascii=False)
        return json.dumps(_answer(expected, bool(CJK.search(pack.task.goal)), eligible), ensure_ascii=False)

    return ScriptedPolicy([respond] * 12)  # guided mode asks per step; a refused Final is asked again


def test_eval_loop_end_to_end_with_the_scripted_policy(tmp_path):
    # Headers and rule formats the first knowledge parser refused (issue 10, item 1), now read.
    only = {"header": ("task_success", "TaskSuccess", "任务成功率"), "rule_format": ("sentence", "table")}
    roots = generate_packs(tmp_path / "packs", 3, seed=2, only=only)
    packs = [TaskPack.load(root) for root in roots]

    def policy_for(pack: TaskPack, k: int):
        if k == 1 and pack is packs[1]:  # the opposite verdict: both graders must fail it
            return computed_policy(pack, eligible=not pack.load_expected()["final"]["release_eligible"])
        if k == 1 and pack is packs[2]:
            return ScriptedPolicy([])  # the run ends runtime_error without metrics
        return computed_policy(pack)

    runs = run_suite(packs, policy_for, Budgets(), sampling=Sampling(temperature=0.7), runs=2, seed=40, artifact_root=tmp_path / "art",
                     progress=False)
    assert [(r.pack, r.run, r.seed) for r in runs] == [(p.name, k, 40 + k) for p in packs for k in range(2)]
    assert [bool(r.task_success) for r in runs] == [True, True, True, False, True, False]
    assert [r.independent_success for r in runs] == [True, True, True, False, True, False]
    assert runs[5].status == "failed" and runs[5].metrics == {} and runs[5].independent_failures
    wrong = runs[3]
    assert (wrong.status == "completed" and wrong.checks["answer_verdict_correct"] is False
            and "wrong_verdict" in wrong.independent_failures) or wrong.status != "completed"

    report = build_report(runs, {"packs": "generated:3", "pack_count": 3, "runs": 2, "seed": 40, "temperature": 0.7,
                                 "top_p": 0.8, "top_k": 20, "max_seconds": 300, "mode": None},
                          ScriptedPolicy([]).description.public())
    assert report["overall"]["task_success"]["passed"] == 4 and report["disagreements"] == []
    assert report["failures"]["by_stop_reason"].get("runtime_error") == 1
    assert len({r["case"] for r in report["per_pack"]}) == 3  # the first three draws of the case deck differ
    assert str(tmp_path) not in json.dumps(report)


def test_eval_command_writes_the_report_without_absolute_paths(tmp_path, monkeypatch, capsys):
    from agent.models import backends

    garbage = ScriptedPolicy([lambda request: "not a decision"] * 200)
    monkeypatch.setattr(backends, "load_policy", lambda *args, **kwargs: garbage)
    out = tmp_path / "report"
    assert main(["eval", "--model", str(tmp_path / "m.gguf"), "--packs", "generated:2", "--runs", "2",
                 "--seed", "3", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "| **all** | | **0/4 (0 %)** |" in printed and "| stopped: invalid_decision | 4 |" in printed
    assert {"packs", "report.json", "report.md", "report.png", "runs.jsonl"} <= {p.name for p in out.iterdir()}
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["settings"]["packs"] == "generated:2" and [r["seed"] for r in report["runs"]] == [3, 4, 3, 4]
    for name in ("report.json", "report.md", "runs.jsonl"):
        assert str(tmp_path) not in (out / name).read_text(encoding="utf-8")
    assert len((out / "runs.jsonl").read_text(encoding="utf-8").splitlines()) == 4
    traces = sorted(out.glob("artifacts/*/run-*/events.jsonl"))  # each run's trace, for reading failures
    assert len(traces) == 4 and all(json.loads(t.read_text().splitlines()[-1])["type"] == "run.finished" for t in traces)


def test_an_interrupted_eval_still_reports_the_runs_that_finished(tmp_path, monkeypatch, capsys):
    from agent.models import backends

    def interrupt(request):
        raise KeyboardInterrupt

    outputs = [lambda request: "not a decision"] * 3 + [interrupt]  # run 1 ends invalid_decision, run 2 is cut
    monkeypatch.setattr(backends, "load_policy", lambda *args, **kwargs: ScriptedPolicy(outputs))
    out = tmp_path / "report"
    assert main(["eval", "--model", str(tmp_path / "m.gguf"), "--packs", "generated:2", "--out", str(out),
                 "--no-progress"]) == 130
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["settings"]["interrupted"] is True and report["overall"]["task_success"]["runs"] == 1
    assert "**Interrupted:**" in capsys.readouterr().out and (out / "report.png").is_file()


@pytest.mark.parametrize("flags,named", [
    (["--packs", "generated:0"], "generated:0"),
    (["--packs", "generated:x"], "generated:x"),
    (["--packs", "no_such_pack"], "no_such_pack"),
    (["--packs", "generated:2", "--runs", "0"], "--runs"),
    (["--packs", "generated:2", "--temperature", "3"], "--temperature"),
    (["--packs", "generated:2", "--model", "openai:http://127.0.0.1:8080/v1"], "openai:BASE_URL#MODEL_NAME"),
    (["--packs", "generated:2", "--served", "openai_compatible", "--model-name", "qwen"], "--base-url"),
])
def test_eval_refusals_run_nothing(flags, named, tmp_path, capsys):
    assert main(["eval", "--model", str(tmp_path / "m.gguf"), "--out", str(tmp_path / "out"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and named in err and "Nothing was run" in err
    assert not (tmp_path / "out").exists()


def test_eval_runs_a_served_model_named_like_run_does(tmp_path, monkeypatch, capsys):
    """``eval --model openai:URL#NAME`` loads that served model once (its host allowed, as the
    operator named it) and every run of the suite gets it."""
    from agent.models import backends

    loaded = []

    def load_model(spec, access=None, **options):
        loaded.append((spec, access))
        return ScriptedPolicy([lambda request: "not a decision"] * 50)

    monkeypatch.setattr(backends, "load_model", load_model)
    out = tmp_path / "report"
    assert main(["eval", "--model", "openai:http://127.0.0.1:8080/v1#qwen", "--packs", "generated:2",
                 "--out", str(out), "--no-progress"]) == 0
    [(spec, access)] = loaded
    assert (spec.kind, spec.base_url, spec.model) == ("openai_compatible", "http://127.0.0.1:8080/v1", "qwen")
    assert access.endpoint(spec.base_url).named  # the operator's host: it may receive the key
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["overall"]["task_success"]["runs"] == 2


def test_resolve_packs_reads_a_folder_of_packs_or_one_pack(tmp_path):
    roots = generate_packs(tmp_path / "suite", 2, seed=9)
    assert [p.name for p in resolve_packs(str(tmp_path / "suite"), tmp_path / "out", 0)] == [r.name for r in roots]
    assert [p.name for p in resolve_packs(str(roots[0]), tmp_path / "out", 0)] == [roots[0].name]
    assert [p.name for p in resolve_packs("generated:2", tmp_path / "out", 9)] == [r.name for r in roots]


# -- packs a user wrote, graded by the operator's own grader -----------------------------------------

GRADER = '''import json, sys
run, truth = (json.load(open(path, encoding="utf-8")) for path in sys.argv[1:3])
answer = (run.get("final") or {}).get("answer") or ""
why = [] if run["stop_reason"] == "completed" else ["status " + run["stop_reason"]]
why += ["answer lacks name " + name for name in truth["names"] if name not in answer]
print("PASS" if not why else "FAIL: " + "; ".join(why))
'''


def test_user_packs_with_a_truth_count_accepted_but_wrong_per_family(tmp_path):
    """A pack a user wrote is graded by the operator's grader from its truth.json (an independent
    grader: a script outside the project); the report counts its accepted-but-wrong runs per family
    and the runs that ended unverified apart."""
    from test_claims_runs import offices

    from agent.evaluation.external_grade import run_json

    pack = offices(tmp_path)
    # the grader asks for more than the gate can check: the rule's own name beside the lowest office
    lowest, rule = "Quito", "office floor"
    (pack.root / "truth.json").write_text(json.dumps({"family": "office_gap", "names": [lowest, rule]}),
                                          encoding="utf-8")
    grader = tmp_path / "grade.py"
    grader.write_text(GRADER, encoding="utf-8")
    right = (f"The lowest office is {lowest} with a Resolution Rate of 66.5. The {rule} is 70, so it falls short "
             "by 3.5 points.")
    unnamed = right.replace(f"The {rule}", "The floor")
    finals = {0: [right], 1: [unnamed], 2: ["70 >= 66.5 is True"] * 3}
    start = [json.dumps({"query": "results and rule", "top_k": 4}), json.dumps({"expression": "70 - 66.5"})]

    def policy_for(p, k):
        return ScriptedPolicy(start + [json.dumps(f) for f in finals[k]])

    runs = run_suite([pack], policy_for, Budgets(), runs=3, seed=0, artifact_root=tmp_path / "art", progress=False,
                     grader=grader)
    assert [r.stop_reason for r in runs] == ["completed", "completed", "final_unverified"]
    assert [r.independent_failures for r in runs][:2] == [[], [f"answer lacks name {rule}"]]
    assert runs[2].independent_failures[0] == "status final_unverified"
    assert {r.family for r in runs} == {"office_gap"}
    report = build_report(runs, {"packs": "user", "pack_count": 1, "runs": 3, "seed": 0, "temperature": 0.0,
                                 "top_p": 0.8, "top_k": 20, "max_seconds": 300, "mode": None}, {"name": "m.gguf"})
    wrong = report["accepted_but_wrong"]
    assert (wrong["runs"], wrong["of_accepted"]) == (1, 2)
    assert wrong["per_family"] == {"office_gap": {"runs": 3, "accepted": 2, "accepted_but_wrong": 1, "unverified": 1}}
    assert wrong["finals"][0] == {"pack": pack.name, "run": 1, "family": "office_gap", "answer": unnamed}
    markdown = to_markdown(report)
    assert "| office_gap | 3 | 2 | 1 | 1 |" in markdown and unnamed[:40] in markdown
    # the grader read the run as `run --json` prints it
    printed = json.loads((tmp_path / "art" / pack.name / "run-2" / "run.json").read_text(encoding="utf-8"))
    assert set(printed) == set(run_json(RunResult(status="stopped", stop_reason="final_unverified"), "x"))
    assert printed["final"] is None and printed["unverified"]["answer"] == "70 >= 66.5 is True"


def test_eval_refuses_a_grader_that_is_not_there(tmp_path, capsys):
    assert main(["eval", "--model", str(tmp_path / "m.gguf"), "--packs", "generated:2", "--grader",
                 str(tmp_path / "missing.py"), "--out", str(tmp_path / "out")]) == 2
    assert "--grader missing.py: no such file" in capsys.readouterr().err and not (tmp_path / "out").exists()
