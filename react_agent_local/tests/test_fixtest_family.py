"""The fix-the-failing-test family through the real runtime (scripted policy, real sandbox): the
guided steps and their narrowing, the Final gate (no test run, an edit after the passing run, failing
tests, changed tests), both graders with the hidden tests, the generator, and eval end to end."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from agent.models.backends.scripted import ScriptedPolicy
from agent.cli.main import main
from agent.contracts.budgets import Budgets
from agent.evaluation.suite import parse_generated, resolve_packs, run_one, run_suite
from agent.families.fixtest.bugs import BUGS
from agent.families.fixtest.generator import generate_packs
from agent.models.model_policy import ModelRequest
from agent.task.packs import PackError, TaskPack, load_pack
from agent.core.run import run_agent
from agent.coding.workspace import WorkspaceOptions
from agent.coding.grammars import MAX_EXCLUDED_CHARS
from agent.coding.workspace_grading import grade_workspace
from runtime_helpers import events_of

HAND_WRITTEN = ("fixtest_pagination", "fixtest_shipping", "fixtest_word_count")


def fix_of(pack: TaskPack) -> dict[str, str]:
    return pack.load_expected()["reference_fix"]


def read_items(pack: TaskPack) -> list[str]:
    return pack.task.subgoals["read_file"]


def guided(pack: TaskPack, *edits: tuple[str, str]) -> list[str]:
    """Continuations of a guided run: read the declared files, run the tests, then per edit the edit
    and a test run; the Final."""
    test_run = json.dumps({"command": pack.task.workspace.test_command})
    outputs = [json.dumps({"path": p}) for p in read_items(pack)] + [test_run]
    path = fix_of(pack)["path"]
    for old, new in edits:
        outputs += [json.dumps({"path": path, "old": old.strip(), "new": new.strip()}), test_run]
    return outputs + [json.dumps(f"I fixed {pack.load_expected()['function']} and the tests pass.")]


def action(tool: str, **arguments) -> str:
    return json.dumps({"type": "action", "tool": tool, "arguments": arguments})


def final(*evidence: str, answer: str = "I fixed it and the tests pass.") -> str:
    return json.dumps({"type": "final", "answer": answer, "evidence_ids": list(evidence)})


def run(pack: TaskPack, outputs: list, tmp_path: Path, **kwargs):
    policy = ScriptedPolicy(outputs)
    options = kwargs.pop("workspace", None)
    outcome = run_agent(pack, policy, kwargs.pop("budgets", Budgets()), artifact_dir=tmp_path / "run" / "artifacts",
                        workspace=options, **kwargs)
    assert outcome.events[-1]["type"] == "run.finished"
    return outcome, policy


def feedback_after(policy: ScriptedPolicy, call: int) -> str:
    return policy.requests[call].messages[-1]["content"]


# -- the guided run --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", HAND_WRITTEN)
def test_a_guided_reference_fix_passes_the_gate_and_both_graders(name, tmp_path):
    pack = load_pack(name)
    fix = fix_of(pack)
    policy = ScriptedPolicy(guided(pack, (fix["old"], fix["new"])))
    record = run_one(pack, policy, Budgets(), 0, tmp_path / "run-0")
    policy.assert_complete()
    assert (record.status, record.stop_reason, record.task_success) == ("completed", "completed", True)
    assert record.checks == {"final_accepted": True, "tests_pass": True}
    assert record.independent_failures == [] and record.case == pack.load_expected()["case"]
    workspace = tmp_path / "run-0" / "workspace"
    assert fix["new"] in (workspace / fix["path"]).read_text()
    template = pack.root / "workspace"
    assert (template / fix["path"]).read_text().count(fix["old"]) == 1  # the pack itself is never touched


def test_each_guided_step_is_narrowed_to_what_can_apply(tmp_path):
    pack = load_pack("fixtest_pagination")
    fix = fix_of(pack)
    outcome, policy = run(pack, guided(pack, (fix["old"], fix["new"])), tmp_path)
    assert outcome.result.status == "completed"
    requests = policy.requests
    tools = [r.prefix.split('"tool": "')[1].split('"')[0] for r in requests[:5]]
    assert tools == ["read_file", "read_file", "bash", "edit_file", "bash"]
    for request, item in zip(requests, read_items(pack)):  # the declared file, whole: nothing to choose
        assert request.value_schema["properties"]["path"] == {"const": item}
        assert request.value_schema["properties"]["start_line"] == {"const": 1}
        assert f"Still missing: {item}." in request.messages[-1]["content"]
    test_command = {"const": pack.task.workspace.test_command}
    assert requests[2].value_schema["properties"]["command"] == requests[4].value_schema["properties"]["command"] == test_command
    assert "a run of the tests to see what fails" in requests[2].messages[-1]["content"]
    edit = requests[3].value_schema["properties"]
    source = (pack.root / "workspace" / fix["path"]).read_text()
    code = [line.strip() for line in source.splitlines()
            if line.strip() and not line.strip().startswith(('"""', "def ", "import ", "#"))]
    assert edit["path"] == {"const": fix["path"]} and edit["old"] == {"enum": [c for c in code if source.count(c) == 1]}
    assert fix["old"].strip() in edit["old"]["enum"] and set(requests[3].value_schema["required"]) >= {"path", "old", "new"}
    differs = re.compile(edit["new"]["pattern"])
    assert not [c for c in edit["old"]["enum"] if '"' not in c and differs.match(c)]  # new changes something
    assert differs.match(fix["new"].strip()) and not differs.match(" " + fix["new"].strip())  # no indentation of its own
    assert requests[3].drafts and fix["old"].strip() in requests[3].drafts[0]
    assert "obs-bash-3 exit 1: " in requests[3].messages[-1]["content"]  # the failure the fix is for
    assert '"evidence_ids": ["obs-read_file-1", "obs-read_file-2", "obs-edit_file-4", "obs-bash-5"]' in requests[5].prefix
    ready = events_of(outcome, "workspace.ready")[0]
    assert ready["protected"] == ["tests", "pytest.ini"] and ready["sandbox"] in ("bwrap", "landlock")
    decided = events_of(outcome, "approval.decided")
    assert [(d["decision"], d["command"]) for d in decided] == [("run", pack.task.workspace.test_command)] * 2


def test_a_failing_test_run_sends_guided_mode_back_to_the_edit(tmp_path):
    pack = load_pack("fixtest_pagination")
    fix = fix_of(pack)
    wrong = ("    return max(1, math.ceil(total / per_page))", "    return max(1, math.ceil(total / per_page)) + 0")
    outcome, policy = run(pack, guided(pack, wrong, (fix["old"], fix["new"])), tmp_path)
    result = outcome.result
    assert result.status == "completed" and result.metrics.task_success is True
    after_the_change = result.observations[4]
    assert after_the_change.tool == "bash" and after_the_change.result["exit_code"] == 1
    again = policy.requests[5]
    assert '"tool": "edit_file"' in again.prefix
    assert f"Still missing: a fix that makes the tests pass ({after_the_change.id} exit 1: " in again.messages[-1]["content"]
    # the second edit is narrowed to the file as it is now, the first edit included
    choices = again.value_schema["properties"]["old"]["enum"]
    assert wrong[1].strip() in choices and wrong[0].strip() not in choices
    assert not events_of(outcome, "guard.loop_detected")


def test_three_test_runs_on_changed_files_are_progress_not_a_loop(tmp_path):
    pack = load_pack("fixtest_shipping")
    fix = fix_of(pack)
    line = "    return round(sum(prices) + shipping, 2)"
    once, twice = line.replace("shipping", "shipping + 0"), line.replace("shipping", "shipping + 0 + 0")
    tries = [(line, once), (once, twice), (fix["old"], fix["new"])]
    outcome, _ = run(pack, guided(pack, *tries), tmp_path)
    runs = [o for o in outcome.result.observations if o.tool == "bash"]
    assert [o.result["exit_code"] for o in runs] == [1, 1, 1, 0]
    assert outcome.result.stop_reason == "completed" and not events_of(outcome, "guard.loop_detected")


def test_a_change_of_comments_or_layout_only_is_the_code_that_failed_and_is_not_run_again(tmp_path):
    """The sampled 1.5B wrote a failed fix again with a comment added: the tests need not run to know
    the outcome. The next step asks for a change again, says why, and is sampled more widely."""
    pack = load_pack("fixtest_shipping")
    fix = fix_of(pack)
    line = "    return round(sum(prices) + shipping, 2)"
    tries = [(line, line + "  # the same code"), (line + "  # the same code", line.replace("+ ", "+  ")),
             (fix["old"], fix["new"])]
    # guided() puts a test run after each edit; the two that bring back the failed code get none
    outputs = [o for o in guided(pack, *tries)]
    test_run = json.dumps({"command": pack.task.workspace.test_command})
    edits = [i for i, o in enumerate(outputs) if '"old"' in o]
    for i in reversed(edits[:2]):
        assert outputs[i + 1] == test_run
        del outputs[i + 1]
    outcome, policy = run(pack, outputs, tmp_path)
    assert outcome.result.stop_reason == "completed" and outcome.result.metrics.task_success is True
    kinds = [o.tool for o in outcome.result.observations]
    assert kinds == ["read_file", "read_file", "bash", "edit_file", "edit_file", "edit_file", "bash"]
    first_run = outcome.result.observations[2]
    for i, change in ((4, outcome.result.observations[3]), (5, outcome.result.observations[4])):
        asked = policy.requests[i]
        assert '"tool": "edit_file"' in asked.prefix and asked.temperature >= 1.0  # explored, not repeated
        assert (f"Your change {change.id} made the code exactly what failed in {first_run.id} (comments and layout "
                "aside)") in asked.messages[-1]["content"]
    assert first_run.result["code_digest"] != first_run.result["files_digest"]


def test_the_same_test_run_on_the_same_files_is_a_loop(tmp_path):
    pack = load_pack("fixtest_shipping")
    command = pack.task.workspace.test_command
    outcome, _ = run(pack, [action("bash", command=command)] * 3, tmp_path, mode="free")
    assert outcome.result.stop_reason == "loop_detected"
    assert len([o for o in outcome.result.observations if o.tool == "bash"]) == 2


# -- the Final gate --------------------------------------------------------------------------------

def test_a_final_without_a_test_run_is_refused_then_accepted_after_a_passing_run(tmp_path):
    pack = load_pack("fixtest_shipping")
    fix = fix_of(pack)
    test, src = read_items(pack)
    outputs = [action("read_file", path=test), action("read_file", path=src),
               action("edit_file", path=src, old=fix["old"], new=fix["new"]),
               final("obs-edit_file-3"),
               action("bash", command=pack.task.workspace.test_command),
               final("obs-read_file-1", "obs-read_file-2", "obs-edit_file-3", "obs-bash-4")]
    outcome, policy = run(pack, outputs, tmp_path, mode="free")
    validated = events_of(outcome, "final.validated")
    assert [v["accepted"] for v in validated] == [False, True]
    assert "no run of the tests yet" in validated[0]["message"] and "no run of the tests yet" in feedback_after(policy, 4)
    assert outcome.result.metrics.task_success is True


def test_an_edit_after_the_passing_run_refuses_the_final_again(tmp_path):
    pack = load_pack("fixtest_shipping")
    fix = fix_of(pack)
    test, src = read_items(pack)
    line = "    return round(sum(prices) + shipping, 2)"
    everything = ["obs-read_file-1", "obs-read_file-2", "obs-edit_file-5", "obs-bash-6"]
    outputs = [action("read_file", path=test), action("read_file", path=src),
               action("edit_file", path=src, old=fix["old"], new=fix["new"]),
               action("bash", command=pack.task.workspace.test_command),
               action("edit_file", path=src, old=line, new=line + "  # rounded"),
               final("obs-read_file-1", "obs-read_file-2", "obs-edit_file-5", "obs-bash-4"),
               action("bash", command=pack.task.workspace.test_command),
               final(*everything)]
    outcome, policy = run(pack, outputs, tmp_path, mode="free")
    validated = events_of(outcome, "final.validated")
    assert [v["accepted"] for v in validated] == [False, True]
    assert "obs-edit_file-5 changed the files after the last test run obs-bash-4" in validated[0]["message"]
    assert "run the tests" in feedback_after(policy, 6)


def test_a_failing_run_is_no_evidence_and_the_feedback_says_why(tmp_path):
    pack = load_pack("fixtest_word_count")
    test, src = read_items(pack)
    outputs = [action("read_file", path=test), action("read_file", path=src),
               action("edit_file", path=src, old='    """How often each word occurs."""', new='    """Counts."""'),
               action("bash", command=pack.task.workspace.test_command),
               final("obs-read_file-1", "obs-read_file-2", "obs-edit_file-3", "obs-bash-4")]
    outcome, _ = run(pack, outputs, tmp_path, mode="free", budgets=Budgets(max_steps=5))
    message = events_of(outcome, "final.validated")[0]["message"]
    assert "the tests failed in obs-bash-4 (exit 1: " in message and "assert 1 == 2" in message
    assert outcome.result.stop_reason == "max_steps" and outcome.result.metrics.task_success is False


def test_changed_tests_refuse_the_final_and_fail_the_grade(tmp_path):
    """The sandbox keeps the tests read-only; a change made past it (here by the test itself, as an
    unsandboxed command could) is still caught by the gate and by the grader."""
    pack = load_pack("fixtest_word_count")
    fix = fix_of(pack)
    test, src = read_items(pack)
    workspace = tmp_path / "run" / "workspace"

    def cheat(request: ModelRequest) -> str:
        with (workspace / test).open("a") as handle:
            handle.write("\n# loosened\n")
        return final("obs-read_file-1", "obs-read_file-2", "obs-edit_file-3", "obs-bash-4")

    outputs = [action("read_file", path=test), action("read_file", path=src),
               action("edit_file", path=src, old=fix["old"], new=fix["new"]),
               action("bash", command=pack.task.workspace.test_command), cheat]
    outcome, _ = run(pack, outputs, tmp_path, mode="free", budgets=Budgets(max_steps=5))
    message = events_of(outcome, "final.validated")[0]["message"]
    assert f"the task's tests were changed ({test})" in message
    assert outcome.result.metrics.task_success is False and outcome.result.metrics.checks["tests_pass"] is False


def test_the_file_tools_refuse_the_tests_with_feedback_the_model_can_act_on(tmp_path):
    pack = load_pack("fixtest_word_count")
    test, src = read_items(pack)
    outputs = [action("edit_file", path=test, old="assert", new="assert True or")]
    outcome, policy = run(pack, outputs + [action("read_file", path=src)], tmp_path, mode="free",
                          budgets=Budgets(max_steps=2))
    failed = outcome.result.observations[0]
    assert not failed.ok and failed.error.code == "protected_path"
    assert "must not be changed" in feedback_after(policy, 1)
    assert (tmp_path / "run" / "workspace" / test).read_text() == (pack.root / "workspace" / test).read_text()


# -- the graders and the hidden tests --------------------------------------------------------------

def test_a_fix_that_only_fits_the_visible_tests_is_accepted_but_graded_wrong(tmp_path):
    pack = load_pack("fixtest_pagination")
    fix = fix_of(pack)
    hack = "    start = (page - 1) * 10"  # right for the visible tests' page size only
    policy = ScriptedPolicy(guided(pack, (fix["old"], hack)))
    record = run_one(pack, policy, Budgets(), 0, tmp_path / "run-0")
    assert record.status == "completed" and record.checks == {"final_accepted": True, "tests_pass": False}
    assert record.task_success is False and record.independent_failures == ["official_tests_fail"]


def test_the_hidden_tests_never_reach_the_workspace_or_a_prompt(tmp_path):
    pack = load_pack("fixtest_pagination")
    fix = fix_of(pack)
    outcome, policy = run(pack, guided(pack, (fix["old"], fix["new"])), tmp_path)
    hidden = [p for p in (pack.root / "data" / "hidden").rglob("*.py")]
    assert hidden
    workspace = tmp_path / "run" / "workspace"
    assert not [p for p in workspace.rglob("*") if p.name in {h.name for h in hidden}]
    prompts = "\n".join(m["content"] for r in policy.requests for m in r.messages)
    for path in hidden:
        assert path.name not in prompts
        assert not [line for line in path.read_text().splitlines() if line.startswith("def ") and line in prompts]
    assert "reference_fix" not in prompts and "data/hidden" not in prompts


def test_the_grader_reads_the_final_files_and_the_baseline(tmp_path):
    pack = load_pack("fixtest_shipping")
    fix = fix_of(pack)
    outcome, _ = run(pack, guided(pack, (fix["old"], fix["new"])), tmp_path)
    check = next(c for c in pack.load_expected()["checks"] if c["type"] == "workspace_tests")
    from agent.coding.workspace import prepare

    workspace = prepare(pack.task, pack.root, WorkspaceOptions(directory=tmp_path / "run" / "workspace"), tmp_path)
    workspace = replace(workspace, pack_root=pack.root)
    assert grade_workspace(check, workspace).passed
    (workspace.root / fix["path"]).write_text((pack.root / "workspace" / fix["path"]).read_text())  # the bug back
    reverted = grade_workspace(check, workspace)
    assert not reverted.passed and reverted.failures == ["tests_fail"] and "failed" in reverted.output


# -- where the run works ---------------------------------------------------------------------------

def test_the_operators_folder_is_used_in_place(tmp_path):
    pack = load_pack("fixtest_shipping")
    fix = fix_of(pack)
    folder = tmp_path / "mine"
    shutil.copytree(pack.root / "workspace", folder)
    outcome, _ = run(pack, guided(pack, (fix["old"], fix["new"])), tmp_path,
                     workspace=WorkspaceOptions(directory=folder))
    assert outcome.result.status == "completed"
    assert fix["new"] in (folder / fix["path"]).read_text() and not (tmp_path / "run" / "workspace").exists()


def test_no_sandbox_ends_the_run_before_any_tool_with_the_fix_named(tmp_path, monkeypatch):
    import agent.sandbox as sandbox

    def unavailable(policy, **kwargs):
        raise sandbox.SandboxUnavailable("no sandbox can start: install bubblewrap")

    monkeypatch.setattr(sandbox, "open_sandbox", unavailable)
    outcome, policy = run(load_pack("fixtest_shipping"), [], tmp_path)
    result = outcome.result
    assert (result.status, result.stop_reason, result.error.code) == ("failed", "runtime_error", "sandbox_unavailable")
    assert "install bubblewrap" in result.error.message and policy.requests == [] and result.observations == []


def test_a_pack_of_workspace_tools_without_a_workspace_is_refused(tmp_path):
    pack = load_pack("fixtest_shipping")
    spec = pack.task.model_copy(update={"workspace": pack.task.workspace.model_copy(update={"template": None})})
    outcome, _ = run(TaskPack(name=pack.name, root=pack.root, task=spec), [], tmp_path)
    assert outcome.result.error.code == "workspace_missing" and "--workspace" in outcome.result.error.message


# -- the generator ---------------------------------------------------------------------------------

def _pytest(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest"], cwd=folder, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})


def test_the_generator_is_deterministic_and_varied(tmp_path):
    first = generate_packs(tmp_path / "a", 6, seed=4)
    again = generate_packs(tmp_path / "b", 6, seed=4)
    other = generate_packs(tmp_path / "c", 6, seed=5)

    def files(root: Path) -> dict[str, str]:
        return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}

    assert [files(p) for p in first] == [files(p) for p in again]
    assert [files(p) for p in first] != [files(p) for p in other]
    with pytest.raises(FileExistsError):
        generate_packs(tmp_path / "a", 1, seed=4)
    many = generate_packs(tmp_path / "many", 40, seed=9)
    expected = [json.loads((p / "data" / "expected.json").read_text()) for p in many]
    counts = Counter(e["bug"] for e in expected)
    assert set(counts) == {b.key for b in BUGS} and max(counts.values()) - min(counts.values()) <= 1
    sources = {(p / "workspace" / e["reference_fix"]["path"]).read_text() for p, e in zip(many, expected)}
    assert len(sources) == len(many)  # no two repositories alike


def test_every_generated_bug_fails_its_tests_and_its_reference_fix_passes_them_all(tmp_path):
    roots = generate_packs(tmp_path / "packs", len(BUGS), seed=1)
    for root in roots:
        pack = TaskPack.load(root)
        expected = pack.load_expected()
        fix = expected["reference_fix"]
        repo = tmp_path / "check" / root.name
        shutil.copytree(root / "workspace", repo)
        broken = _pytest(repo)
        assert broken.returncode == 1 and "1 failed" in broken.stdout, (expected["bug"], broken.stdout[-500:])
        source = repo / fix["path"]
        assert source.read_text().count(fix["old"]) == 1
        source.write_text(source.read_text().replace(fix["old"], fix["new"]))
        shutil.copytree(root / "data" / "hidden", repo, dirs_exist_ok=True)
        fixed = _pytest(repo)
        assert fixed.returncode == 0 and "failed" not in fixed.stdout, (expected["bug"], fixed.stdout[-500:])
        test, src = pack.task.subgoals["read_file"]
        assert src == fix["path"] and (repo / test).is_file() and test.startswith("tests/")


def test_generated_fixtest_is_a_packs_source(tmp_path):
    assert parse_generated("generated:fixtest:7") == 7 and parse_generated("generated:7") == 7
    for bad in ("generated:fixtest:0", "generated:fixtest:x", "generated:nofamily:3"):
        with pytest.raises(PackError):
            parse_generated(bad)
    packs = resolve_packs("generated:fixtest:2", tmp_path, seed=3)
    assert [p.name for p in packs] == ["fixtest-3-000", "fixtest-3-001"] and all(p.task.workspace for p in packs)


# -- eval end to end -------------------------------------------------------------------------------

def oracle(fixes: dict[tuple[str, str], dict[str, str]]):
    """A scripted 'model' that solves any guided fixtest step from the packs' reference fixes."""
    def step(request: ModelRequest) -> str:
        tool = re.search(r'"tool": "([a-z_]+)"', request.prefix)
        if tool is None:
            return json.dumps("I fixed it and the tests pass.")
        properties = request.value_schema["properties"]
        if tool.group(1) == "read_file":
            return json.dumps({"path": re.findall(r"Still missing: (\S+)\.", request.messages[-1]["content"])[-1]})
        if tool.group(1) == "bash":
            return json.dumps({"command": properties["command"]["const"]})
        path = properties["path"]["const"]
        if tool.group(1) == "replace_function":  # the function shown, with the reference fix applied
            source = json.loads('"' + request.drafts[0] + '"')
            fix = next(f for (p, old), f in fixes.items() if p == path and old in source)
            return json.dumps({"path": path, "name": properties["name"]["const"],
                               "source": source.replace(fix["old"], fix["new"])})
        fix = next(f for (p, old), f in fixes.items() if p == path and old.strip() in properties["old"]["enum"])
        return json.dumps({"path": path, "old": fix["old"].strip(), "new": fix["new"].strip()})
    return step


def test_eval_of_generated_fixtest_packs_end_to_end(tmp_path, monkeypatch, capsys):
    from agent.models import backends

    n, seed = 3, 2
    fixes = {}
    for root in generate_packs(tmp_path / "preview", n, seed):
        fix = json.loads((root / "data" / "expected.json").read_text())["reference_fix"]
        fixes[(fix["path"], fix["old"])] = fix
    monkeypatch.setattr(backends, "load_policy", lambda *args, **kwargs: ScriptedPolicy([oracle(fixes)] * 6 * n))
    out = tmp_path / "report"
    assert main(["eval", "--model", str(tmp_path / "m.gguf"), "--packs", f"generated:fixtest:{n}", "--seed", str(seed),
                 "--out", str(out), "--no-progress"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["overall"]["task_success"]["passed"] == n and report["overall"]["independent"]["passed"] == n
    assert report["disagreements"] == []
    assert all((out / "artifacts" / f"fixtest-{seed}-{i:03d}" / "run-0" / "workspace").is_dir() for i in range(n))
    assert str(tmp_path) not in (out / "report.md").read_text()


def test_eval_refuses_an_unknown_family(tmp_path, capsys):
    assert main(["eval", "--model", str(tmp_path / "m.gguf"), "--packs", "generated:nofamily:2",
                 "--out", str(tmp_path / "out")]) == 2
    assert "unknown family 'nofamily'" in capsys.readouterr().err


def test_run_refuses_a_workspace_for_a_pack_without_workspace_tools(tmp_path, capsys):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")  # never opened: the flag is refused first
    assert main(["run", "--workspace", str(tmp_path), "--model", str(model), "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "uses no workspace tools" in capsys.readouterr().err and not (tmp_path / "runs").exists()


def test_a_suite_with_scripted_reference_runs_agrees_with_both_graders(tmp_path):
    packs = [load_pack(name) for name in HAND_WRITTEN]
    runs = run_suite(packs, lambda pack, k: ScriptedPolicy(guided(pack, (fix_of(pack)["old"], fix_of(pack)["new"]))),
                     Budgets(), runs=1, seed=0, artifact_root=tmp_path, progress=False)
    assert [r.task_success for r in runs] == [True] * 3 and [r.independent_failures for r in runs] == [[]] * 3


# -- rewriting the whole function (generated packs) ------------------------------------------------

def test_a_generated_pack_rewrites_the_function_the_failure_names_until_the_tests_pass(tmp_path):
    pack = TaskPack.load(generate_packs(tmp_path / "packs", 1, seed=3)[0])
    expected = pack.load_expected()
    fix, name = expected["reference_fix"], expected["function"]
    assert "replace_function" in pack.task.required_tools and "edit_file" not in pack.task.tool_names
    original = (pack.root / "workspace" / fix["path"]).read_text()
    function = next(block for block in original.split("\n\n\n") if f"def {name}(" in block).strip("\n")
    def_line = function.splitlines()[0]
    test_run = json.dumps({"command": pack.task.workspace.test_command})
    indent = fix["old"][:len(fix["old"]) - len(fix["old"].lstrip())]
    wrong = function.replace(fix["old"], f"{indent}pass  # no-op\n{fix['old']}")
    tried = fix["old"].strip() + "  # no-op"
    assert len(tried) <= MAX_EXCLUDED_CHARS  # short enough for the grammar to exclude it
    tests = "\n".join(path.read_text() for path in (pack.root / "workspace" / "tests").glob("test_*.py"))
    outputs = [json.dumps({"path": p}) for p in read_items(pack)] + [test_run]
    outputs += [json.dumps({"path": fix["path"], "name": name, "source": def_line + "\n    return (\n"}),  # no parse
                json.dumps({"path": fix["path"], "name": name, "source": wrong,
                            "diagnosis": f"The wrong line is `{fix['old'].strip()}`; it must be `{tried}`"}), test_run,
                json.dumps({"path": fix["path"], "name": name, "source": "  " + function.replace(fix["old"], fix["new"])
                            .replace("\n", "\n  ")}), test_run,
                json.dumps(f"I fixed {name} and the tests pass.")]
    outcome, policy = run(pack, outputs, tmp_path)
    policy.assert_complete()
    assert outcome.result.status == "completed" and outcome.result.metrics.task_success is True
    kinds = [(o.tool, o.ok) for o in outcome.result.observations]
    assert kinds == [("read_file", True), ("read_file", True), ("bash", True), ("replace_function", False),
                     ("replace_function", True), ("bash", True), ("replace_function", True), ("bash", True)]
    assert outcome.result.observations[3].error.code == "bad_source"
    first, after_wrong = policy.requests[3], policy.requests[6]
    for request in (first, after_wrong):
        properties = request.value_schema["properties"]
        assert properties["path"] == {"const": fix["path"]} and properties["name"] == {"const": name}
        assert list(properties) == ["path", "name", "diagnosis", "source"]  # the diagnosis is written first
        assert "diagnosis" in request.value_schema["required"]
        pattern = properties["source"]["pattern"]  # the def line and the docstring, then the new body
        assert re.match(pattern, function.replace(fix["old"], fix["new"]))
        assert not re.match(pattern, "    return 1") and not re.match(pattern, def_line + "\n    return 1")
        turn = request.messages[-1]["content"]
        assert f"{name} in {fix['path']}" in turn and "\nE   " in turn  # the source and the failure's values
        assert "The failing test, every case of which the fix must meet:\n" in turn
        assert any(block.strip() in turn for block in tests.split("\n\n\n") if f"{name}(" in block)  # whole
        assert f"def {name}(" in json.loads('"' + request.drafts[0] + '"')
    assert "def " + name not in "".join(d for d in first.drafts[1:])  # the helpers the failure never calls: not offered
    # after the failed rewrite: the function as the task gave it, the fix tried, and a diagnosis may not propose it again
    again = after_wrong.messages[-1]["content"]
    assert f"{name} in {fix['path']} as the task gave it (your rewrites failed):\n{function}" in again
    assert f"Already tried, the tests still failed: `{tried}`" in again
    assert json.loads('"' + after_wrong.drafts[0] + '"') == function
    diagnosis = re.compile(after_wrong.value_schema["properties"]["diagnosis"]["pattern"])
    wrong_line = f"The wrong line is `{fix['old'].strip()}`; it must be "
    if '"' not in tried and '"' not in fix["old"]:
        assert not diagnosis.match(wrong_line + f"`{tried}`") and not diagnosis.match(wrong_line + f"`{fix['old'].strip()}`")
    assert diagnosis.match(wrong_line + f"`{fix['new'].strip()}`")
    assert "bad_source" in policy.requests[4].messages[-1]["content"]  # the syntax error is the model's feedback
    assert fix["new"] in (tmp_path / "run" / "workspace" / fix["path"]).read_text()  # re-indented to column 0


def test_the_failure_detail_shows_the_failing_line_and_its_values():
    from agent.contracts.decision import Observation
    from agent.coding.test_output import failure_detail

    report = ("F.\n===== FAILURES =====\n____ test_a ____\ntests/test_a.py:7: in test_a\n    assert f(80) == 72\n"
              "E   assert 80 == 72\nE     \nE     comparison failed\n____ test_b ____\nsrc/a.py:3: in g\n"
              "    return 1 / x\nE   ZeroDivisionError: division by zero\n===== short test summary info =====\n"
              "FAILED tests/test_a.py::test_a - assert 80 == 72\n")
    run_obs = Observation(id="obs-bash-3", tool="bash", ok=True, result={"exit_code": 1, "stdout": report})
    assert failure_detail(run_obs) == ["tests/test_a.py:7: in test_a", "    assert f(80) == 72", "E   assert 80 == 72",
                                       "so f(80) returned 80; the test expects 72",
                                       "src/a.py:3: in g", "E   ZeroDivisionError: division by zero"]
    truth = ("===== FAILURES =====\n____ test_a ____\ntests/test_a.py:9: in test_a\n    assert not is_ok(17)\n"
             "E   assert not True\nE    +  where True = is_ok(17)\n===== 1 failed =====\n")
    run_obs = Observation(id="obs-bash-3", tool="bash", ok=True, result={"exit_code": 1, "stdout": truth})
    assert failure_detail(run_obs)[-1] == "so is_ok(17) returned True; the test expects a false value"
    plain = Observation(id="obs-bash-4", tool="bash", ok=True, result={"exit_code": 2, "stderr": "boom"})
    assert failure_detail(plain) == ["exit 2: boom"]


# -- the pure parts ---------------------------------------------------------------------------------

def test_differs_from_admits_every_string_but_the_lines():
    from agent.coding.grammars import differs_from

    lines = ["if total > 50:", "return total", "best = values[0]", "x = {a: b}"]
    pattern = re.compile(differs_from(lines, 20))
    assert not [line for line in lines if pattern.match(line)]
    for other in ("if total >= 50:", "return total + 1", "return tota", "r", "best = values[1]", "return total\nx"):
        assert pattern.match(other), other
    assert not pattern.match(" return total") and not pattern.match("") and not pattern.match("r" + "x" * 40)
    bounded = re.compile(differs_from(lines, 20, exclude="`\n"))  # a fix inside backticks ends at its backtick
    assert bounded.match("return total + 1") and not bounded.match("return total")
    assert not bounded.match("return 1` and more") and not bounded.match("return 1\nx") and not bounded.match("`")


def test_the_failure_summary_names_the_error_first():
    from agent.contracts.decision import Observation
    from agent.coding.test_output import failure_summary

    def run_of(stdout: str, code: int = 1) -> Observation:
        return Observation(id="obs-bash-1", tool="bash", ok=True, result={"exit_code": code, "stdout": stdout})

    collection = "ERROR tests/test_a.py\nE   IndentationError: unexpected indent\n1 error in 0.1s"
    assert failure_summary(run_of(collection, 2)) == "exit 2: IndentationError: unexpected indent"
    failed = "E   assert 3 == 2\nFAILED tests/test_a.py::test_a - assert 3 == 2\n1 failed"
    assert failure_summary(run_of(failed)) == "exit 1: assert 3 == 2"
    assert failure_summary(run_of("")) == "exit 1: no output"


def test_a_rewrite_starts_with_the_old_def_line_and_docstring():
    from agent.coding.grammars import def_line_pattern

    source = 'def f(x, y=[1]):\n    """Twice x, e.g. f(2) == 4."""\n    return x + x'
    pattern = re.compile(def_line_pattern(source))
    assert pattern.match(source) and pattern.match(source.replace("x + x", "2 * x"))
    assert not pattern.match('def f(x, y=[1]):\n    return 2 * x')  # the docstring is the spec: kept
    assert not pattern.match('def f(x):\n    """Twice x, e.g. f(2) == 4."""\n    return 2 * x')
    plain = re.compile(def_line_pattern("    def g(self):\n        return 1"))  # a method, without a docstring
    assert plain.match("def g(self):\n    return 2") and not plain.match("def h(self):\n    return 2")
    assert def_line_pattern('@cache\ndef f(x):\n    return x') == r"^[\s\S]*$"  # decorators: no pattern holds them
    escaped = 'def f(x):\n    "a\\\\b"\n    return x'  # a backslash is one character of the raw code like any other
    assert re.compile(def_line_pattern(escaped)).match(escaped.replace("return x", "return 2 * x"))
    assert not re.compile(def_line_pattern(escaped)).match('def f(x):\n    "ab"\n    return x')


def test_a_diagnosis_never_names_a_tried_fix_again_not_even_with_a_colon_or_semicolon_changed():
    import re

    from agent.coding.grammars import diagnosis_schema

    source = ("def largest(values):\n    best = values[0]\n    for value in values[1:]:\n"
              "        if value < best:\n            best = value\n    return best\n")
    pattern = diagnosis_schema(source, ["if value <= best:"])["pattern"]

    def allowed(fix: str, line: str = "if value < best:") -> bool:
        return re.fullmatch(pattern, f"The wrong line is `{line}`; it must be `{fix}`") is not None

    for tried in ("if value <= best:", "if value <= best", "if value <= best;", "if value <= best: ",
                  "if value < best:", "if value < best"):
        assert not allowed(tried), tried
    assert allowed("if value > best:") and allowed("if value >= best:")
    assert not allowed("if value > best:", line="if value > best:")  # only the function's own lines
    # nor the tried fix with prose after it, as the 1.5B wrote it again and again
    for again in ("if value <= best:'. The test expects this", "if value <= best; otherwise it fails",
                  "if value <= best: because the docstring", "if value <= best:. The function"):
        assert not allowed(again), again
    assert allowed("if value <= best + 1:") and allowed("if value < best or value is None:")  # code goes on


def test_a_line_fixed_two_ways_that_both_failed_is_no_longer_offered_as_the_wrong_line():
    """The 1.5B blamed the ``return`` line of ``if amount > 200: return round(amount * 0.9, 2)`` four
    times, fixing it four ways, where the ``if`` was the bug."""
    import re

    from agent.coding.grammars import diagnosis_schema

    source = ("def final_price(amount):\n    if amount > 200:\n        return round(amount * 0.9, 2)\n"
              "    return amount\n")
    blamed = "return round(amount * 0.9, 2)"
    pattern = diagnosis_schema(source, ["return round(amount * 0.9, 2) - 10"], [blamed])["pattern"]

    def allowed(line: str, fix: str) -> bool:
        return re.fullmatch(pattern, f"The wrong line is `{line}`; it must be `{fix}`") is not None

    assert not allowed(blamed, "return round(amount * 0.8, 2)")
    assert allowed("if amount > 200:", "if amount >= 200:") and allowed("return amount", "return amount * 1")
    # nor a copy of another of its lines, which would leave one of the two dead
    clamp = "def limit(n, low, high):\n    if n < low:\n        return low\n    if n < high:\n        return high\n    return n\n"
    copies = diagnosis_schema(clamp)["pattern"]
    assert not re.fullmatch(copies, "The wrong line is `if n < high:`; it must be `if n < low:`")
    assert not re.fullmatch(copies, "The wrong line is `return high`; it must be `return n`")
    assert re.fullmatch(copies, "The wrong line is `if n < high:`; it must be `if n > high:`")
    only = "def f(x):\n    return x\n"  # the one line left stays offered
    assert re.fullmatch(diagnosis_schema(only, [], ["return x"])["pattern"], "The wrong line is `return x`; it must be `return 2 * x`")


def test_after_two_failed_fixes_of_one_line_the_next_diagnosis_names_another(tmp_path):
    from agent.coding.source_lines import blamable_lines

    for root in generate_packs(tmp_path / "packs", 12, seed=3):  # a bug in a function of several lines
        pack = TaskPack.load(root)
        expected = pack.load_expected()
        fix, name = expected["reference_fix"], expected["function"]
        original = (pack.root / "workspace" / fix["path"]).read_text()
        function = next(block for block in original.split("\n\n\n") if f"def {name}(" in block).strip("\n")
        if len(blamable_lines(function)) >= 2:
            break
    else:
        pytest.fail("no generated bug in a function of two lines or more")
    test_run = json.dumps({"command": pack.task.workspace.test_command})
    old = fix["old"].strip()
    outputs = [json.dumps({"path": p}) for p in read_items(pack)] + [test_run]
    for k in (1, 2):  # the buggy line "fixed" in ways that change nothing
        outputs += [json.dumps({"path": fix["path"], "name": name,
                                "source": function.replace(fix["old"], fix["old"] + "  " + "#" * k),
                                "diagnosis": f"The wrong line is `{old}`; it must be `{old}  {'#' * k}`"}), test_run]
    outputs += [json.dumps({"path": fix["path"], "name": name, "source": function.replace(fix["old"], fix["new"])}),
                test_run, json.dumps(f"I fixed {name} and the tests pass.")]
    outcome, policy = run(pack, outputs, tmp_path, budgets=Budgets(max_tool_calls=12))
    third = policy.requests[len(read_items(pack)) + 5]
    assert f"`{old}` was fixed 2 ways and the tests still failed: the wrong line is another one" \
        in third.messages[-1]["content"]
    diagnosis = re.compile(third.value_schema["properties"]["diagnosis"]["pattern"])
    assert not diagnosis.match(f"The wrong line is `{old}`; it must be `{fix['new'].strip()}`")
    second = policy.requests[len(read_items(pack)) + 3]  # after one failed fix the line is still offered
    assert re.compile(second.value_schema["properties"]["diagnosis"]["pattern"]).match(
        f"The wrong line is `{old}`; it must be `{fix['new'].strip()}`")


def test_the_fix_a_rewrite_wrote_is_excluded_whatever_its_diagnosis_said():
    """The 1.5B's diagnosis ran on past its fix in prose ("it must be `if n <= m:'. The test
    expects..."), so the fix it wrote was never excluded, and it wrote ``<=`` three times: the
    lines a failed rewrite wrote count as tried, read from what it wrote, comments left out."""
    from agent.contracts.decision import Observation
    from agent.coding.tools.workspace_ops import numbered
    from agent.coding.workspace_evidence import function_step

    original = ("def limit(n, low, m):\n    \"\"\"n limited to low..m.\"\"\"\n    if n < low:\n        return low\n"
                "    if n < m:\n        return m\n    return n")
    written = original.replace("if n < m:", "if n <= m:  # less than or equal")

    class Files:
        def read_text(self, path):
            return written + "\n" if path == "geo/units.py" else None

    rewrite = Observation(id="obs-replace_function-4", tool="replace_function", ok=True, result={
        "path": "geo/units.py", "name": "limit", "before": original,
        "snippet": numbered(written.splitlines(), 1),
        "diagnosis": "The wrong line is `if n < m:`; it must be `if n <= m:'. The test expects it to be less than or equal to "})
    failed = Observation(id="obs-bash-5", tool="bash", ok=True, result={
        "command": "python -m pytest", "exit_code": 1, "stdout": "E       assert limit(2, 0, 10) == 2\n", "stderr": ""})
    step = function_step(["geo/units.py"], Files(), failed, [rewrite])
    pattern = dict(step.narrowed)["diagnosis"]["pattern"]
    said = "The wrong line is `if n < m:`; it must be `{}`"
    assert not re.fullmatch(pattern, said.format("if n <= m:")) and not re.fullmatch(pattern, said.format("if n <= m"))
    assert re.fullmatch(pattern, said.format("if n > m:"))
    assert "Already tried, the tests still failed: " in step.target and "`if n <= m:`" in step.target


def test_a_function_rewritten_and_failing_again_and_again_is_asked_for_anew_from_its_docstring():
    """After ``RESPEC_AFTER`` failed rewrites the step shows the function as a stub -- its def line
    and docstring, the spec -- and asks for it as a function still to be written: no diagnosis, no
    fix trial, a body that starts with no stub statement."""
    from agent.contracts.decision import Observation
    from agent.coding.tools.workspace_ops import numbered
    from agent.coding.workspace_evidence import RESPEC_AFTER, function_step
    from agent.coding.source_lines import stub_of

    original = ("def get_page(records, number, per_page):\n    \"\"\"Page number of records (the first page is 1).\"\"\"\n"
                "    start = number * per_page\n    return records[start:start + per_page]")

    class Files:
        def read_text(self, path):
            return original + "\n" if path == "toolbox/funcs.py" else None

    def rewrite(k):
        written = original.replace("number * per_page", f"number * per_page - {k}")
        return Observation(id=f"obs-replace_function-{k}", tool="replace_function", ok=True, result={
            "path": "toolbox/funcs.py", "name": "get_page", "before": original,
            "snippet": numbered(written.splitlines(), 1),
            "diagnosis": f"The wrong line is `start = number * per_page`; it must be `start = number * per_page - {k}`"})

    failed = Observation(id="obs-bash-9", tool="bash", ok=True, result={
        "command": "python -m pytest", "exit_code": 1, "stdout": "E       assert get_page([0, 1, 2], 1, 1) == [0]\n",
        "stderr": ""})
    stub = stub_of(original)
    assert stub.endswith('is 1)."""\n    ...') and "start =" not in stub
    before = function_step(["toolbox/funcs.py"], Files(), failed, [rewrite(k) for k in range(1, RESPEC_AFTER)])
    assert before.trial is not None and "diagnosis" in dict(before.narrowed)
    step = function_step(["toolbox/funcs.py"], Files(), failed, [rewrite(k) for k in range(1, RESPEC_AFTER + 1)])
    narrowed = dict(step.narrowed)
    assert step.trial is None and narrowed["diagnosis"] == {"const": None}
    assert stub in step.target and "start = number * per_page" not in step.target
    assert "implemented as its docstring says" in step.target and "get_page([0, 1, 2], 1, 1)" in step.target
    source = re.compile(narrowed["source"]["pattern"])
    assert source.match(stub.replace("...", "start = (number - 1) * per_page\n    return records[start:start + per_page]"))
    assert not source.match(stub)  # the body is written, not left a stub


def test_a_generated_pack_declares_the_budgets_a_fix_needs_and_the_callers_own_win(tmp_path):
    from agent.families.fixtest.generator import BUDGETS

    pack = TaskPack.load(generate_packs(tmp_path / "packs", 1, seed=0)[0])
    assert pack.task.budgets.model_fields_set == set(BUDGETS)
    for i, (given, want) in enumerate(((Budgets(), BUDGETS), (Budgets(max_tool_calls=5),
                                                                 {**BUDGETS, "max_tool_calls": 5}))):
        outcome, _ = run(pack, [], tmp_path / str(i), budgets=given)  # no model output: the run ends at once
        started = events_of(outcome, "run.started")[0]["budgets"]
        assert {k: started[k] for k in want} == want
        assert started["max_retries"] == Budgets().max_retries  # what neither sets stays the default


def test_after_a_compact_turn_the_next_calls_continue_after_it(tmp_path, monkeypatch):
    """A history past ``HISTORY_CHARS`` becomes one compact turn; the calls after it keep that turn
    and add theirs, so the model's KV cache holds it (rebuilt every step, a long fix-the-test run
    evaluated its whole prompt again each step: 6k tokens, 80 s on two cores)."""
    import agent.prompts.prompting as prompting

    monkeypatch.setattr(prompting, "HISTORY_CHARS", 6000)
    pack = load_pack("fixtest_shipping")
    fix = fix_of(pack)
    line = "    return round(sum(prices) + shipping, 2)"
    once, twice = line.replace("shipping", "shipping + 0"), line.replace("shipping", "shipping + 0 + 0")
    outcome, policy = run(pack, guided(pack, (line, once), (once, twice), (fix["old"], fix["new"])), tmp_path)
    assert outcome.result.stop_reason == "completed"
    roles = ["".join(m["role"][0] for m in r.messages) for r in policy.requests]
    compact = roles.index("su", 1)  # the first call past the limit: one user turn after the system message
    assert roles[compact + 1] == "suau" and roles[compact + 2] == "suauau"
    for later in policy.requests[compact + 1:compact + 3]:
        assert later.messages[:2] == policy.requests[compact].messages[:2]  # the same prefix, kept in the cache
        assert later.messages[2]["role"] == "assistant"
