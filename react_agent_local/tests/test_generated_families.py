"""The generated families beyond the release rule (agent/families/record_rules, record_change,
fact_arithmetic, interest): each generator is deterministic and its packs read back as the data
they were drawn from; the scripted eval of every family passes both graders with answers computed
from each pack's own data, and a wrong number, a wrong verdict, an invented operand, a calculator
expression that computes something else or a wrong bound slot is refused by the gate or failed by
the family's grader."""

from __future__ import annotations

import json
import re
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Callable

import pytest

from agent.models.backends.scripted import ScriptedPolicy
from agent.gate.check_language import parse
from agent.gate.claims import bound_slots
from agent.contracts.budgets import Budgets
from agent.contracts.decision import FinalDecision, Observation
from agent.contracts.result import RunResult
from agent.evaluation.report import build_report, to_markdown
from agent.evaluation.suite import parse_generated, resolve_packs, run_suite
from agent.families import FAMILIES, generator
from agent.families import grade_run as family_grade
from agent.families.fact_arithmetic.grading import right_result
from agent.families.interest.grading import right_value
from agent.families.packkit import number, rounded, text_of
from agent.families.record_change.generator import NEGATIVE as CHANGE_NO
from agent.families.record_change.generator import POSITIVE as CHANGE_YES
from agent.families.record_change.grading import right_change
from agent.families.record_rules.generator import NEGATIVE, POSITIVE
from agent.families.record_rules.grading import right_answer
from agent.models.model_policy import ModelRequest
from agent.task.packs import TaskPack
from agent.tools.facts import load_facts
from agent.tools.knowledge import search_knowledge
from agent.util.number_text import number_text as fmt

NEW = ("record_rules", "record_change", "fact_arithmetic", "interest")
SETTINGS = {"packs": "generated", "pack_count": 1, "runs": 1, "seed": 0, "temperature": 0.0, "top_p": 0.8,
            "top_k": 20, "max_seconds": 300, "mode": None}


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _packs(tmp_path: Path, family: str, n: int, seed: int = 0) -> list[TaskPack]:
    return [TaskPack.load(root) for root in generator(family)(tmp_path / f"{family}-{seed}", n, seed)]


# -- what a right run writes, from the pack's own data ------------------------------------------------

def _expression(pack: TaskPack) -> str:
    expected = pack.load_expected()
    d, family = expected["data"], expected["family"]
    if family == "record_rules":
        values, t = list(d["values"].values()), d["rules"][d["rule"]]
        return {"gap": f"{fmt(min(values))} - {fmt(t)}", "spread": f"{fmt(max(values))} - {fmt(min(values))}",
                "average": f"({' + '.join(fmt(v) for v in values)}) / {len(values)}"}[d["question"]]
    if family == "record_change":
        a, b = d["before"][d["group"]], d["after"][d["group"]]
        return f"{b} - {a}" if d["variant"] == "difference" else f"({b} - {a}) / {a} * 100"
    if family == "fact_arithmetic":
        v = [fmt(d["facts"][name]["value"]) for name in d["needed"]]
        return {"sum": " + ".join(v), "per_1000": f"{v[0]} / {v[1]} * 1000", "density": f"{v[0]} / {v[1]}"}[d["question"]]
    n, kind = d["numbers"], d["kind"]
    if kind == "compound":
        return str(n["principal"]) + f" * (1 + {n['rate']} / 100)" * int(n["years"])
    if kind == "percent_of":
        return f"{n['amount']} * {n['rate']} / 100"
    if kind == "percent_change":
        return f"({n['after']} - {n['before']}) / {n['before']} * 100"
    if kind == "discount_tax":
        return f"{n['price']} * (1 - {n['discount']} / 100) * (1 + {n['tax']} / 100)"
    return f"{n['principal']} * {n['rate']} / 100 * {n['years']}"


def _fill(form: str, values: list[str]) -> str:
    """The answer form with its slots filled in order."""
    values = list(values)
    return re.sub(r"\{[^{}]*\}", lambda m: values.pop(0), form)


def right_answer_text(pack: TaskPack, *, verdict: bool | None = None, slot_shift: float = 0) -> str:
    """The answer a right run gives (or one with the opposite verdict, or its first computed value shifted)."""
    expected, form = pack.load_expected(), pack.task.answer_form
    d, family = expected["data"], expected["family"]
    if family == "record_rules":
        right = right_answer(d)
        values, t = list(d["values"].values()), d["rules"][d["rule"]]
        low, high = min(values), max(values)
        value = fmt(number(right["value"] + Fraction(slot_shift)))
        holds = right["holds"] if verdict is None else verdict
        phrase = POSITIVE[d["question"]] if holds else NEGATIVE[d["question"]]
        truth = str(right["holds"])
        slots = {"gap": [fmt(low), fmt(t), value, fmt(low), fmt(t), truth, phrase],
                 "spread": [fmt(high), fmt(low), value, fmt(number(right["value"])), fmt(t), truth, phrase],
                 "lowest": [right["group"], value, fmt(low), fmt(t), truth, phrase],
                 "highest": [right["group"], value, fmt(high), fmt(t), truth, phrase],
                 "average": [value, fmt(number(right["value"])), fmt(t), truth, phrase]}[d["question"]]
        return _fill(form, slots)
    if family == "record_change":
        exact, stated, holds = right_change(d)
        shown = fmt(number(stated + Fraction(slot_shift))) if d["variant"] == "difference" \
            else text_of(stated + Fraction(slot_shift), 1)
        check = fmt(number(stated)) if d["variant"] == "difference" else text_of(stated, 1)
        phrase = CHANGE_YES if (holds if verdict is None else verdict) else CHANGE_NO
        g = d["group"]
        return _fill(form, [fmt(d["before"][g]), fmt(d["after"][g]), shown, check, fmt(-d["allowed"]), str(holds), phrase])
    if family == "fact_arithmetic":
        _, stated = right_result(d)
        stated += Fraction(slot_shift)
        return _fill(form, [text_of(stated, d["digits"]) if d["digits"] else fmt(number(stated))])
    stated = rounded(right_value(d), d["digits"]) + Fraction(slot_shift)
    return _fill(form, [text_of(stated, d["digits"])])


def scripted(pack: TaskPack, *, final: Callable[[], str] | None = None,
             calculator: list[str] | None = None, calls: int = 12) -> ScriptedPolicy:
    """A policy that answers each guided step from the pack's own data (nothing typed in)."""
    expected = pack.load_expected()
    needed = list(expected["data"].get("needed", []))
    expressions = list(calculator or [])
    keys = expected["data"].get("keys")

    def respond(request: ModelRequest) -> str:
        if '"tool": "knowledge_search"' in request.prefix:
            query = f"{keys[0]} and {keys[1]} records" if keys else "the record's values and rules"
            return json.dumps({"query": query}, ensure_ascii=False)
        if '"tool": "lookup_fact"' in request.prefix:
            missing = re.search(r"Still missing: (.+?)\. ", request.messages[-1]["content"]).group(1)
            target = next(n for n in needed if n == missing)
            return json.dumps({"query": target}, ensure_ascii=False)
        if '"tool": "calculator"' in request.prefix:
            return json.dumps({"expression": expressions.pop(0) if expressions else _expression(pack)})
        return json.dumps(final() if final else right_answer_text(pack), ensure_ascii=False)

    return ScriptedPolicy([respond] * calls)


def _run(tmp_path: Path, packs: list[TaskPack], policy_for) -> list:
    return run_suite(packs, policy_for, Budgets(), runs=1, seed=0, artifact_root=tmp_path / "runs", progress=False)


def _events(tmp_path: Path, run) -> list[dict]:
    path = tmp_path / "runs" / run.pack / "run-0" / "events.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# -- the registry and the generators ---------------------------------------------------------------------

def test_every_new_family_is_registered_behind_generated_family_n(tmp_path):
    for family in NEW:
        assert family in FAMILIES and parse_generated(f"generated:{family}:3") == 3
        packs = resolve_packs(f"generated:{family}:2", tmp_path / family, seed=4)
        assert [p.name for p in packs] == [f"{family}-4-000", f"{family}-4-001"]


@pytest.mark.parametrize("family", NEW)
def test_generators_are_deterministic_from_their_seed(tmp_path, family):
    make = generator(family)
    first, again, other = make(tmp_path / "a", 6, 11), make(tmp_path / "b", 6, 11), make(tmp_path / "c", 6, 12)
    assert [p.name for p in first] == [p.name for p in again]
    assert [_files(p) for p in first] == [_files(p) for p in again]
    assert [_files(p) for p in first] != [_files(p) for p in other]
    with pytest.raises(FileExistsError):
        make(tmp_path / "a", 1, 11)


@pytest.mark.parametrize("family", NEW)
def test_every_pack_is_valid_and_its_expressions_are_in_the_check_language(tmp_path, family):
    cases = Counter()
    for pack in _packs(tmp_path, family, 30, seed=3):
        expected = pack.load_expected()
        assert expected["family"] == family and expected["checks"][0] == {"type": "final_accepted"}
        cases[expected["case"]] += 1
        task = pack.task
        for spec in [*task.checks, *task.expect]:
            for operand in (spec.left, spec.right):
                if isinstance(operand, str):
                    parse(operand)
        assert bound_slots(task.answer_form), task.answer_form  # every family binds its answer's number
        for slot in bound_slots(task.answer_form):
            parse(slot.expression)
        assert '"' not in task.answer_form
    assert len(cases) >= 3, cases  # the questions are drawn evenly, not by chance


def test_record_packs_read_back_as_the_data_they_were_drawn_from(tmp_path):
    shapes = Counter()
    for pack in _packs(tmp_path, "record_rules", 20, seed=1):
        d = pack.load_expected()["data"]
        result = search_knowledge(pack.knowledge_dir, "values and rules", 3)
        (record,) = result["records"].values()
        assert (record["values"], record["rules"]) == (d["values"], d["rules"]), pack.name
        shapes[json.loads((pack.root / "task.json").read_text())["answer_form"][:12]] += 1
        text = "".join(p.read_text(encoding="utf-8") for p in pack.knowledge_dir.glob("*.md"))
        for marker in ("---\n", "| rule |", "```yaml", "- "):
            shapes[marker] += marker in text
    assert all(shapes[m] for m in ("---\n", "| rule |", "```yaml"))
    for pack in _packs(tmp_path, "record_change", 12, seed=1):
        d = pack.load_expected()["data"]
        k1, k2 = d["keys"]
        result = search_knowledge(pack.knowledge_dir, f"{k1} and {k2}", 1)
        assert list(result["records"]) == [k1, k2] and result["named_records"] == [k1, k2]
        assert result["records"][k1]["values"] == d["before"] and result["records"][k2]["values"] == d["after"]
        assert result["records"][k2]["rules"][d["rule"]] == d["allowed"]
        assert {c["source_id"] for c in result["citations"]} >= {result["records"][k]["source_id"] for k in (k1, k2)}
    for pack in _packs(tmp_path, "fact_arithmetic", 12, seed=1):
        d = pack.load_expected()["data"]
        facts = load_facts(pack.knowledge_dir)
        assert facts == d["facts"] and set(d["needed"]) < set(facts) or len(facts) == len(d["needed"])


# -- the scripted eval of every family ----------------------------------------------------------------------

@pytest.mark.parametrize("family", NEW)
def test_right_answers_pass_both_graders(tmp_path, family):
    packs = _packs(tmp_path, family, 10, seed=2)
    runs = _run(tmp_path, packs, lambda pack, k: scripted(pack))
    summary = [(r.pack, r.case, r.stop_reason, r.checks, r.independent_failures, r.error) for r in runs]
    assert all(r.stop_reason == "completed" and r.task_success for r in runs), summary
    assert all(r.independent_failures == [] for r in runs), summary
    report = build_report(runs, SETTINGS, ScriptedPolicy([]).description.public())
    assert report["accepted_but_wrong"]["runs"] == 0 and report["accepted_but_wrong"]["of_accepted"] == 10
    assert "**Accepted but wrong**" in to_markdown(report)


def test_the_fact_names_are_a_grammar_choice_in_an_eval(tmp_path):
    (pack,) = _packs(tmp_path, "fact_arithmetic", 1, seed=5)
    policy = scripted(pack)
    (run,) = _run(tmp_path, [pack], lambda p, k: policy)
    assert run.task_success
    lookup = next(r for r in policy.requests if '"tool": "lookup_fact"' in r.prefix)
    assert set(lookup.value_schema["properties"]["query"]["enum"]) == set(load_facts(pack.knowledge_dir))


@pytest.mark.parametrize("family", NEW)
def test_a_wrong_bound_slot_is_refused_by_the_gate(tmp_path, family):
    packs = _packs(tmp_path, family, 4, seed=6)
    runs = _run(tmp_path, packs, lambda pack, k: scripted(pack, final=lambda p=pack: right_answer_text(p, slot_shift=3)))
    for run in runs:
        assert run.stop_reason != "completed" and not run.task_success, run  # never accepted
        refusals = [e["message"] for e in _events(tmp_path, run) if e["type"] == "final.validated"]
        assert refusals and all("slot holds" in m for m in refusals), refusals


@pytest.mark.parametrize("family", ["record_rules", "record_change"])
def test_a_wrong_verdict_is_refused_by_the_gate(tmp_path, family):
    packs = _packs(tmp_path, family, 4, seed=7)
    calls: dict[str, int] = Counter()

    def policy_for(pack, k):
        holds = not any(c.get("expected") == "negative" for c in pack.load_expected()["checks"])

        def final():  # first the opposite verdict, then the right one
            calls[pack.name] += 1
            return right_answer_text(pack, verdict=(not holds) if calls[pack.name] == 1 else None)
        return scripted(pack, final=final)

    runs = _run(tmp_path, packs, policy_for)
    for run in runs:
        assert run.stop_reason == "completed" and run.task_success and run.independent_failures == [], run
        refused = [e["message"] for e in _events(tmp_path, run) if e["type"] == "final.validated" and not e["accepted"]]
        assert len(refused) == 1 and "the verdict contradicts the checks" in refused[0], refused


@pytest.mark.parametrize("family", NEW)
def test_an_invented_operand_is_refused_before_the_calculator_runs(tmp_path, family):
    packs = [p for p in _packs(tmp_path, family, 8, seed=8) if "calculator" in p.task.required_tools][:3]
    runs = _run(tmp_path, packs, lambda pack, k: scripted(pack, calculator=["987654 - 123"]))
    for run in runs:
        assert run.stop_reason == "completed" and run.task_success, run
        rejected = [e for e in _events(tmp_path, run) if e["type"] == "tool.rejected"]
        assert rejected and "987654" in rejected[0]["observation"]["error"]["message"]


def _plausible_wrong(pack: TaskPack) -> str:
    """An expression over numbers the evidence holds that computes something else than asked."""
    right = _expression(pack)
    if right.startswith("(") and ") / " in right:
        return right.rsplit(" / ", 1)[0]  # a sum without its division
    if " - " in right:
        return right.replace(" - ", " + ", 1)
    if " + " in right:
        return right.rsplit(" + ", 1)[0]  # one term left out
    if " / " in right:
        return right.replace(" / ", " * ", 1)
    return right.replace(" * ", " + ", 1)


@pytest.mark.parametrize("family", NEW)
def test_a_calculator_that_computes_the_wrong_thing_is_asked_again(tmp_path, family):
    packs = [p for p in _packs(tmp_path, family, 8, seed=9) if "calculator" in p.task.required_tools][:3]
    policies = {pack.name: scripted(pack, calculator=[_plausible_wrong(pack)]) for pack in packs}
    runs = _run(tmp_path, packs, lambda pack, k: policies[pack.name])
    for pack, run in zip(packs, runs):
        asks = [r for r in policies[pack.name].requests if '"tool": "calculator"' in r.prefix]
        # asked again, the expression's grammar is the shape the pack's expectation declares
        assert asks[1].value_schema["properties"]["expression"] == pack.task.expect[0].arguments["expression"]
        events = _events(tmp_path, run)
        values = [e["observation"]["result"]["value"] for e in events
                  if e["type"] == "tool.observation" and e["observation"]["tool"] == "calculator" and e["observation"]["ok"]]
        assert len(values) == 2, run  # the wrong value was observed, then the calculator asked again
        assert run.stop_reason == "completed" and run.task_success and run.independent_failures == [], run


@pytest.mark.parametrize("family", NEW)
def test_the_family_grader_fails_a_wrong_answer_on_its_own(tmp_path, family):
    """Graded without the gate: a Final with another number (or group, or verdict) fails the
    family's grader, which recomputes the answer from the generated data."""
    for pack in _packs(tmp_path, family, 5, seed=10):
        observations = []
        if "calculator" in pack.task.required_tools:
            from agent.tools.calculator import evaluate

            observations.append(Observation(id="obs-calculator-1", tool="calculator", ok=True,
                                            result={"expression": _expression(pack), "value": evaluate(_expression(pack))}))
        if family == "fact_arithmetic":
            observations += [Observation(id=f"obs-lookup_fact-{i}", tool="lookup_fact", ok=True, result={"fact": n})
                             for i, n in enumerate(pack.load_expected()["data"]["needed"], start=2)]

        def result(answer: str) -> RunResult:
            return RunResult(status="completed", stop_reason="completed", observations=observations,
                             final=FinalDecision(type="final", answer=answer, evidence_ids=["obs-calculator-1"]))

        assert family_grade(pack, None, result(right_answer_text(pack))) == [], pack.name
        assert family_grade(pack, None, result(right_answer_text(pack, slot_shift=5))), pack.name
        if family in ("record_rules", "record_change"):
            holds = not any(c.get("expected") == "negative" for c in pack.load_expected()["checks"])
            assert "wrong_verdict" in family_grade(pack, None, result(right_answer_text(pack, verdict=not holds)))
        stopped = RunResult(status="stopped", stop_reason="max_steps")
        assert family_grade(pack, None, stopped) == ["stopped:max_steps"]


def test_a_wrong_group_fails_the_record_grader(tmp_path):
    packs = [p for p in _packs(tmp_path, "record_rules", 12, seed=11)
             if p.load_expected()["data"]["question"] in ("lowest", "highest")]
    assert packs
    for pack in packs:
        d = pack.load_expected()["data"]
        right = right_answer(d)
        other = next(label for label in d["values"] if label != right["group"])
        answer = right_answer_text(pack).replace(right["group"], other, 1)
        result = RunResult(status="completed", stop_reason="completed", observations=[],
                           final=FinalDecision(type="final", answer=answer, evidence_ids=["obs-knowledge_search-1"]))
        assert "wrong_group" in family_grade(pack, None, result)


def test_accepted_but_wrong_is_its_own_number_in_the_report(tmp_path):
    from agent.evaluation.suite import EvalRun

    def run(name, stop, ok, independent):
        return EvalRun(pack=name, run=0, seed=0, status="completed" if stop == "completed" else "stopped",
                       stop_reason=stop, task_success=ok, checks={}, metrics={}, seconds=1.0,
                       independent_failures=independent)

    runs = [run("a", "completed", True, []), run("b", "completed", True, ["answer_lacks_result"]),
            run("c", "max_steps", False, ["stopped:max_steps"]), run("d", "completed", True, None)]
    report = build_report(runs, SETTINGS, {"name": "m.gguf"})
    wrong = report["accepted_but_wrong"]
    assert (wrong["runs"], wrong["of_accepted"], wrong["share"]) == (1, 2, 0.5)
    assert wrong["list"] == [{"pack": "b", "run": 0, "independent_failures": ["answer_lacks_result"]}]
    markdown = to_markdown(report)
    assert "**Accepted but wrong** (the gate accepted the Final, the independent grader fails it): 1 of 2" in markdown
    assert "- b run 0: answer_lacks_result" in markdown
