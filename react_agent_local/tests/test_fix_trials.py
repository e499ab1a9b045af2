"""Fix trials (``agent/coding/fix_trials.py``) through the real runtime, the real sandbox and a generated
fix-the-test pack: a diagnosis is tried on a scratch copy before any code is written; a passing fix
becomes the step's Decision without a code turn, a failing one is excluded, the run's workspace is
never touched by a trial and the copies are removed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agent.models.backends.scripted import ScriptedPolicy
from agent.contracts.budgets import Budgets
from agent.cli.event_lines import format_event
from agent.families.fixtest.generator import generate_packs
from agent.coding.fix_trials import WIDER_TRIALS, degenerate, trimmed, unreachable
from agent.task.packs import TaskPack
from agent.core.run import run_agent
from agent.coding.grammars import MAX_EXCLUDED_CHARS, parse_diagnosis
from agent.coding.workspace_evidence import FixTrial


def pack_and_fix(tmp_path: Path, seed: int = 3) -> tuple[TaskPack, dict, str, str]:
    """A generated pack (seed 3: a one-line function): the pack, its reference fix, the function's
    name and its source."""
    pack = TaskPack.load(generate_packs(tmp_path / "packs", 1, seed=seed)[0])
    expected = pack.load_expected()
    fix, name = expected["reference_fix"], expected["function"]
    original = (pack.root / "workspace" / fix["path"]).read_text()
    function = next(block for block in original.split("\n\n\n") if f"def {name}(" in block).strip("\n")
    return pack, fix, name, function


def unchanged(line: str, n: int = 0) -> str:
    """A fix of ``line`` that runs and does what the line did (the tests still fail): another
    syntax tree, so it is no copy of the line (``degenerate``), and no placeholder."""
    line = line.strip()
    if line.startswith(("if ", "elif ")) and line.endswith(":"):
        head, cond = line.split(" ", 1)
        return f"{head} ({cond[:-1]}) and {n} < {n + 1}:"
    if line.startswith("return "):
        return f"return [{line[7:]}, {n}][0]"
    return f"{line}; _unused = {n}"


def diagnosis(wrong: str, fix: str) -> str:
    return f"The wrong line is `{wrong.strip()}`; it must be `{fix.strip()}`"


def run(pack: TaskPack, outputs: list, tmp_path: Path, proposes_arguments: bool = True):
    policy = ScriptedPolicy(outputs, proposes_arguments=proposes_arguments)
    outcome = run_agent(pack, policy, Budgets(), artifact_dir=tmp_path / "run" / "artifacts")
    assert outcome.events[-1]["type"] == "run.finished"
    return outcome, policy


def sweep_to_the_fix(pack: TaskPack, fix: dict, name: str, sweep: list[str], outputs: list, wrong_fix, tmp_path: Path):
    """Run the pack with ``outputs`` followed by one diagnosis per line of ``sweep`` (``wrong_fix`` of
    each, the right fix at the wrong line, where the sweep stops), the Decision, the test run and the
    Final; the run passed. (outcome, policy, its fix.trial events)."""
    for line in sweep:
        fixed = fix["new"] if line == fix["old"].strip() else wrong_fix(line)
        outputs.append(json.dumps({"path": fix["path"], "name": name, "diagnosis": diagnosis(line, fixed)}))
        if line == fix["old"].strip():
            break
    right = diagnosis(fix["old"], fix["new"])
    test_run = json.dumps({"command": pack.task.workspace.test_command})
    outputs += [json.dumps({"path": fix["path"], "name": name, "diagnosis": right}), test_run,
                json.dumps(f"I fixed {name} and the tests pass.")]
    outcome, policy = run(pack, outputs, tmp_path)
    policy.assert_complete()
    assert outcome.result.metrics.task_success is True
    return outcome, policy, [e for e in outcome.events if e["type"] == "fix.trial"]


def clamp_pack(tmp_path: Path) -> tuple[TaskPack, dict, str, str, list[str]]:
    """``pack_and_fix`` of a generated clamp (its third line is wrong), and the function's blamable lines."""
    pack, fix, name, function = pack_and_fix(tmp_path, seed=6)
    return pack, fix, name, function, FixTrial(fix["path"], name, function).lines()


def start(pack: TaskPack) -> list[str]:
    test_run = json.dumps({"command": pack.task.workspace.test_command})
    return [json.dumps({"path": p}) for p in pack.task.subgoals["read_file"]] + [test_run]


def test_a_failed_fix_is_tried_and_excluded_and_a_passing_one_is_the_decision_with_no_code_turn(tmp_path, scratch_parent):
    pack, fix, name, function = pack_and_fix(tmp_path)
    test_run = json.dumps({"command": pack.task.workspace.test_command})
    wrong_fix = unchanged(fix["old"])  # what the line did: the tests still fail
    right = diagnosis(fix["old"], fix["new"])
    outputs = start(pack) + [
        json.dumps({"path": fix["path"], "name": name, "diagnosis": diagnosis(fix["old"], wrong_fix)}),  # trial 1
        json.dumps({"path": fix["path"], "name": name, "diagnosis": right}),                              # trial 2
        json.dumps({"path": fix["path"], "name": name, "diagnosis": right}),  # the Decision: every argument const
        test_run, json.dumps(f"I fixed {name} and the tests pass.")]
    outcome, policy = run(pack, outputs, tmp_path)
    policy.assert_complete()  # no code turn was asked for: the source was settled by the trial
    assert outcome.result.status == "completed" and outcome.result.metrics.task_success is True
    assert [(o.tool, o.ok) for o in outcome.result.observations] == [
        ("read_file", True), ("read_file", True), ("bash", True), ("replace_function", True), ("bash", True)]
    trials = [e for e in outcome.events if e["type"] == "fix.trial"]
    assert [(t["trial"], t["passed"]) for t in trials] == [(1, False), (2, True)]
    assert trials[0]["exit_code"] not in (0, None) and trials[0]["summary"]
    assert trials[0]["function"] == name and trials[0]["path"] == fix["path"]
    assert format_event(trials[1]).endswith(f"fix trial 2 of {name} on a scratch copy: the tests passed, "
                                            f"{trials[1]['duration_ms'] / 1000:.2f}s")
    first, second, decision = policy.requests[3], policy.requests[4], policy.requests[5]
    for probe in (first, second):  # a probe asks for the arguments alone
        assert "source" not in probe.value_schema["properties"]
    # the failed fix is excluded from the second probe's diagnosis; the right one is not
    pattern = re.compile(second.value_schema["properties"]["diagnosis"]["pattern"])
    if '"' not in fix["old"] and len(wrong_fix) <= 48:
        assert not pattern.match(diagnosis(fix["old"], wrong_fix))
    assert pattern.match(right)
    assert second.temperature >= 1.0  # drawn more widely after a failed trial
    properties = decision.value_schema["properties"]
    assert properties["diagnosis"] == {"const": right}
    assert "source" not in properties  # asked as a code turn's arguments; the source is the tried one
    applied = outcome.result.observations[3].result
    assert fix["new"].strip() in (tmp_path / "run" / "workspace" / fix["path"]).read_text()
    assert wrong_fix not in (tmp_path / "run" / "workspace" / fix["path"]).read_text()  # trial 1 touched only its copy
    assert applied["name"] == name
    assert list(scratch_parent.iterdir()) == []  # every scratch copy is removed


def test_fixes_that_all_fail_their_trials_are_excluded_and_shown_as_tried_for_the_rest_of_the_run(tmp_path, scratch_parent):
    pack, fix, name, function = pack_and_fix(tmp_path)
    test_run = json.dumps({"command": pack.task.workspace.test_command})
    trials_a_step = 1 + WIDER_TRIALS  # the pack's function has one line: nothing to name but the model's own
    wrong = [unchanged(fix["old"], n) for n in range(trials_a_step)]
    outputs = start(pack) + [json.dumps({"path": fix["path"], "name": name, "diagnosis": diagnosis(fix["old"], w)})
                             for w in wrong]
    # none passed: the step is asked as before (the model writes the source), and that rewrite fails too
    indent = fix["old"][:len(fix["old"]) - len(fix["old"].lstrip())]
    bad = function.replace(fix["old"], indent + "return -1")
    outputs += [json.dumps({"path": fix["path"], "name": name, "diagnosis": diagnosis(fix["old"], "return 0"),
                            "source": bad}), test_run]
    right = diagnosis(fix["old"], fix["new"])
    outputs += [json.dumps({"path": fix["path"], "name": name, "diagnosis": right}),   # the next step's trial
                json.dumps({"path": fix["path"], "name": name, "diagnosis": right})]   # its Decision
    policy = ScriptedPolicy(outputs, proposes_arguments=True)
    outcome = run_agent(pack, policy, Budgets(max_tool_calls=6), artifact_dir=tmp_path / "run" / "artifacts")
    policy.assert_complete()
    assert outcome.result.stop_reason == "tool_budget"
    trials = [e for e in outcome.events if e["type"] == "fix.trial"]
    assert [t["passed"] for t in trials] == [False] * trials_a_step + [True]
    assert [(o.tool, o.ok) for o in outcome.result.observations][3:] == [
        ("replace_function", True), ("bash", True), ("replace_function", True)]
    assert outcome.result.observations[4].result["exit_code"] != 0
    decision = policy.requests[3 + trials_a_step]  # asked as before: the source is the model's
    assert "source" in decision.value_schema["properties"]
    later = policy.requests[3 + trials_a_step + 2]  # the next step's first trial
    turn = later.messages[-1]["content"]
    assert "Already tried, the tests still failed: " in turn
    assert all(f"`{w}`" in turn for w in wrong)  # the failed trials' fixes are shown as tried
    for request in (decision, later):
        pattern = re.compile(request.value_schema["properties"]["diagnosis"]["pattern"])
        if '"' not in fix["old"]:
            assert not any(pattern.match(diagnosis(fix["old"], w)) for w in wrong if len(w) <= 48)
        assert pattern.match(right)
    assert fix["new"].strip() in (tmp_path / "run" / "workspace" / fix["path"]).read_text()
    assert list(scratch_parent.iterdir()) == []


def test_without_the_capability_no_trial_runs_and_the_step_is_asked_as_before(tmp_path, scratch_parent):
    pack, fix, name, function = pack_and_fix(tmp_path)
    test_run = json.dumps({"command": pack.task.workspace.test_command})
    outputs = start(pack) + [
        json.dumps({"path": fix["path"], "name": name, "diagnosis": diagnosis(fix["old"], fix["new"]),
                    "source": function.replace(fix["old"], fix["new"])}),
        test_run, json.dumps(f"I fixed {name} and the tests pass.")]
    outcome, policy = run(pack, outputs, tmp_path, proposes_arguments=False)
    policy.assert_complete()
    assert outcome.result.metrics.task_success is True
    assert not [e for e in outcome.events if e["type"] == "fix.trial"]


def test_a_diagnosis_is_applied_exactly_at_the_named_lines_indentation():
    trial = FixTrial("m.py", "f", "def f(n):\n    if n > 1:\n        return n - 1\n    return 0")
    assert trial.fixed_source("The wrong line is `return n - 1`; it must be `return n`") == (
        "def f(n):\n    if n > 1:\n        return n\n    return 0")
    assert trial.fixed_source("The wrong line is `if n > 1:`; it must be `if n >= 1:`").splitlines()[1] == "    if n >= 1:"
    assert trial.fixed_source("The wrong line is `return 7`; it must be `return 8`") is None  # no such line
    assert trial.fixed_source("the bug is somewhere") is None
    assert parse_diagnosis("The wrong line is `a`; it must be ` `") is None  # an empty fix is none


def test_after_the_models_own_line_fails_each_other_line_is_named_for_it_in_turn(tmp_path, scratch_parent):
    pack, fix, name, function, lines = clamp_pack(tmp_path)
    wrong = fix["old"].strip()
    others = [line for line in lines if line != wrong]
    assert len(others) >= 2  # the pack's function has lines enough to sweep
    blamed = others[-1]  # the model's own first choice: a line that is not the wrong one
    sweep = [line for line in lines if line != blamed]
    outputs = start(pack) + [json.dumps({"path": fix["path"], "name": name,
                                         "diagnosis": diagnosis(blamed, unchanged(blamed))})]
    outcome, policy, trials = sweep_to_the_fix(pack, fix, name, sweep, outputs, unchanged, tmp_path)
    position = sweep.index(wrong)
    assert position >= 1  # a line named for the model failed before the wrong one was named
    assert [t["passed"] for t in trials] == [False] * (position + 1) + [True]
    probes = policy.requests[4:4 + len(trials) - 1]  # the sweep's probes, after the model's own
    for line, probe in zip(sweep, probes):
        pattern = re.compile(probe.value_schema["properties"]["diagnosis"]["pattern"])
        assert pattern.match(diagnosis(line, line + " + 1"))  # the named line, with a fix of the model's
        assert not any(pattern.match(diagnosis(other, other + " + 1")) for other in lines if other != line)
        assert probe.temperature == policy.requests[3].temperature  # asked as the first was, not drawn wider
    assert fix["new"].strip() in (tmp_path / "run" / "workspace" / fix["path"]).read_text()
    assert list(scratch_parent.iterdir()) == []


@pytest.mark.parametrize("fix, why", [
    ("return number if number < maximum else number", "both branches"),
    ("return x or x", "same operand twice"),
    ("if (a and b) or (a and b):", "same operand twice"),
    ("elif value == value:", "compares an expression with itself"),
    ("if low < value < value:", "compares an expression with itself"),
    ("total = total", "assigns a name to itself"),
    ("if True:", "constant"),
    ("while 0:", "constant"),
    ("return a if True else b", "constant"),
])
def test_a_fix_that_does_nothing_a_fix_could_mean_is_named_degenerate(fix, why):
    assert why in (degenerate(fix) or "")


@pytest.mark.parametrize("wrong, fix, why", [
    ("if number < maximum:", "if number<maximum :", "the wrong line again"),
    ("return (a + b)", "return a + b", "the wrong line again"),
    ("return total", "return total[...]", "placeholder"),
    ("for i in range(n):", "for i in range(...):", "placeholder"),
])
def test_a_fix_that_is_the_wrong_line_again_or_a_placeholder_is_named_degenerate(wrong, fix, why):
    assert why in (degenerate(fix, wrong) or "")


@pytest.mark.parametrize("fix", ["return number if number < maximum else maximum", "if value > high:",
                                 "while True:", "total = total + value", "return a or b", "else:",
                                 "return sorted(values)[-1]", "for i in range(n", "x == y"])
def test_a_fix_that_changes_something_is_not_named_degenerate(fix):
    assert degenerate(fix) is None


def test_a_degenerate_fix_is_refused_without_a_test_run_and_the_sweep_goes_on(tmp_path, scratch_parent):
    pack, fix, name, function, lines = clamp_pack(tmp_path)
    wrong = fix["old"].strip()
    value = function.split("(", 1)[1].split(",", 1)[0]
    blamed = lines[lines.index(wrong) + 1]  # `return <high>`, the line after the wrong condition
    assert blamed.startswith("return ")
    # what the 1.5B wrote at ae669ba: a conditional whose two branches are the same
    same = f"return {value} if {value} < {blamed.split()[1]} else {value}"
    outputs = start(pack) + [json.dumps({"path": fix["path"], "name": name, "diagnosis": diagnosis(blamed, same)})]
    outcome, policy, trials = sweep_to_the_fix(pack, fix, name, [line for line in lines if line != blamed], outputs,
                                               lambda line: line + "  # no-op", tmp_path)
    first = trials[0]
    assert first["refused"] is True and first["passed"] is False and first["exit_code"] is None
    assert first["duration_ms"] == 0.0 and first["summary"].startswith("not tried: both branches")
    assert f"fix trial 1 of {name} refused, not tried: both branches" in format_event(first)
    # the sweep's `# no-op` fixes are their lines again: refused as well, untried
    assert all(t["refused"] and "the wrong line again" in t["summary"] for t in trials[1:-1])
    assert not trials[-1]["refused"] and trials[-1]["passed"] is True
    assert same not in (tmp_path / "run" / "workspace" / fix["path"]).read_text()


CLAMP = """def limit(number, low, maximum):
    \"\"\"number limited to the range low..maximum.\"\"\"
    if number < low:
        return low
    if {fixed}:
        return maximum
    return number"""


@pytest.mark.parametrize("source, fix, why", [
    (CLAMP, "if number < low and number > maximum:", "needs `number < low`, on which the function has already left"),
    (CLAMP, "if number > maximum and number < low:", "needs `number < low`"),
    (CLAMP, "if number < low:", "needs `number < low`"),
    ("def f(x):\n    if x < 0:\n        y = 1\n    elif x < 0 and x > 5:\n        y = 2\n    return y",
     "elif x < 0 and x > 5:", "which the `if` above it already took"),
    ("def f(x):\n    if x < 0:\n        raise ValueError(x)\n    while x < 0 and x > 9:\n        x += 1\n    return x",
     "while x < 0 and x > 9:", "on which the function has already left"),
])
def test_a_fix_whose_branch_can_never_run_is_named_unreachable(source, fix, why):
    assert why in (unreachable(source.replace("{fixed}", fix[3:-1]), fix) or "")


@pytest.mark.parametrize("source, fix", [
    (CLAMP, "if number > maximum:"),
    (CLAMP, "if number < low or number > maximum:"),  # `or`: the other side can hold
    (CLAMP.replace("        return low\n", "        return low\n    number = abs(number)\n"), "if number < low and number > maximum:"),
    (CLAMP.replace("        return low\n", "        low = 0\n"), "if number < low and number > maximum:"),  # no return
    ("def f(x):\n    if x < 0:\n        y = 1\n    elif x > 5:\n        y = 2\n    return y", "elif x > 5:"),
    (CLAMP, "return number"),  # no branch
])
def test_a_fix_whose_branch_can_run_is_not_named_unreachable(source, fix):
    assert unreachable(source.replace("{fixed}", fix[3:-1] if fix.startswith("if ") else "number > maximum"), fix) is None


def test_an_unreachable_fix_is_refused_without_a_test_run(tmp_path, scratch_parent):
    """What the 0.5B wrote at 6449cb3 (fixtest-0-012, accepted but wrong): the clamp's condition
    under the one the function already returned on, so it never clamps; the visible tests passed."""
    pack, fix, name, function, lines = clamp_pack(tmp_path)
    wrong, guard = fix["old"].strip(), lines[0]  # `if <value> < <low>:`, whose branch returns
    assert guard.startswith("if ") and lines[1].startswith("return ") and wrong != guard
    dead = f"if {guard[3:-1]} and {fix['new'].strip()[3:-1]}:"
    outputs = start(pack) + [json.dumps({"path": fix["path"], "name": name, "diagnosis": diagnosis(wrong, dead)})]
    outcome, policy, trials = sweep_to_the_fix(pack, fix, name, [line for line in lines if line != wrong] + [wrong],
                                               outputs, lambda line: line + "  # no-op", tmp_path)
    first = trials[0]
    assert first["refused"] is True and first["exit_code"] is None and "never runs" in first["summary"]
    assert not trials[-1]["refused"] and trials[-1]["passed"] is True
    assert dead not in (tmp_path / "run" / "workspace" / fix["path"]).read_text()


def test_a_failed_fix_too_long_for_the_grammar_to_exclude_is_not_run_again(tmp_path, scratch_parent):
    pack, fix, name, function = pack_and_fix(tmp_path)  # one line: after it, the wider draws
    expression = fix["old"].strip()[len("return "):]
    long_wrong = f"return [{expression}, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][0]"
    assert len(long_wrong) > MAX_EXCLUDED_CHARS  # past what the diagnosis grammar excludes
    right = diagnosis(fix["old"], fix["new"])
    test_run = json.dumps({"command": pack.task.workspace.test_command})
    outputs = start(pack) + [json.dumps({"path": fix["path"], "name": name, "diagnosis": diagnosis(fix["old"], long_wrong)})
                             for _ in range(2)]
    outputs += [json.dumps({"path": fix["path"], "name": name, "diagnosis": right}),
                json.dumps({"path": fix["path"], "name": name, "diagnosis": right}), test_run,
                json.dumps(f"I fixed {name} and the tests pass.")]
    outcome, policy = run(pack, outputs, tmp_path)
    policy.assert_complete()
    assert outcome.result.metrics.task_success is True
    trials = [e for e in outcome.events if e["type"] == "fix.trial"]
    assert [(t["passed"], t["refused"]) for t in trials] == [(False, False), (False, True), (True, False)]
    assert trials[0]["exit_code"] not in (0, None)  # the first time it ran
    assert trials[1]["exit_code"] is None and trials[1]["summary"] == "not tried: it was tried already and the tests failed"


def test_a_fix_that_runs_on_past_its_code_is_cut_to_the_longest_prefix_that_parses():
    trial = FixTrial("m.py", "clamp", "def clamp(number, low, high):\n    if number < low:\n        return low\n"
                                      "    if number > high:\n        return low\n    return number")
    said = {  # as the 0.5B wrote them: a brace, a full stop, a placeholder, prose after the code
        "return high }": "return high",
        "return high.": "return high",
        "return high <this line>": "return high",
        "if number >= high: source is asked for the next line": "if number >= high:",
    }
    for written, cut in said.items():
        wrong = "if number > high:" if written.startswith("if") else "return low"
        repaired = trimmed(trial, diagnosis(wrong, written))
        assert parse_diagnosis(repaired) == (wrong, cut), written
        assert cut in trial.fixed_source(repaired)
    assert trimmed(trial, diagnosis("return low", "return high")) is None  # it parses as written
    assert trimmed(trial, diagnosis("return low", "return highest}")) == diagnosis("return low", "return highest")
    # a number or a name is never split (`return 12`), nor a value cut away (`return`)
    assert trimmed(trial, diagnosis("return low", "return 12abc")) is None
    assert trimmed(trial, diagnosis("return low", "return number }")) is None  # a copy of another line
    assert trimmed(trial, diagnosis("return low", "}}")) is None  # no prefix parses


def test_a_trial_runs_the_fix_cut_where_it_stops_parsing_and_the_event_keeps_what_was_written(tmp_path, scratch_parent):
    pack, fix, name, function = pack_and_fix(tmp_path)
    test_run = json.dumps({"command": pack.task.workspace.test_command})
    written = fix["new"].strip() + " } <this line>"
    right = diagnosis(fix["old"], fix["new"])
    outputs = start(pack) + [
        json.dumps({"path": fix["path"], "name": name, "diagnosis": diagnosis(fix["old"], written)}),  # trial 1
        json.dumps({"path": fix["path"], "name": name, "diagnosis": right}),  # the Decision: every argument const
        test_run, json.dumps(f"I fixed {name} and the tests pass.")]
    outcome, policy = run(pack, outputs, tmp_path)
    policy.assert_complete()
    assert outcome.result.metrics.task_success is True
    trials = [e for e in outcome.events if e["type"] == "fix.trial"]
    assert [(t["passed"], t["fix"], t["written"]) for t in trials] == [(True, fix["new"].strip(), written)]
    assert policy.requests[4].value_schema["properties"]["diagnosis"] == {"const": right}
    assert "(the fix as written cut where it stopped parsing): the tests passed" in format_event(trials[0])
