"""``generated:fixtest:N``: fix-the-failing-test packs, deterministic from a seed.

Each pack is a small repository with one bug (``bugs.py``) and a failing test::

    task.json                          the goal, guided reading of the test and the source, the workspace
    workspace/pytest.ini               quiet, short tracebacks, no padding, no cache folder, tests under tests/
    workspace/<package>/__init__.py
    workspace/<package>/<module>.py    the bug, among correct helpers
    workspace/tests/test_<module>.py   fails on the bug, passes once it is fixed
    data/expected.json                 ground truth: the workspace_tests check, the reference fix
    data/hidden/tests/test_<module>_hidden.py   more cases of the same function, for the grader only

Every varied property -- the bug, the package and module, the function's and parameters' names, the
constants, the helpers beside it, the goal's wording -- is drawn from ``random.Random(seed)``; the
bugs are dealt from a shuffled deck so N packs use each bug N/k times (±1).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from agent.families.fixtest.bugs import BUGS, HELPERS, Case, instantiate, render_test

TEST_COMMAND = "python -m pytest"
PYTEST_INI = "[pytest]\naddopts = -q --tb=short -p no:cacheprovider\ntestpaths = tests\nconsole_output_style = classic\n"
PROTECTED = ["tests", "pytest.ini"]
PACKAGES = (("mathkit", "series"), ("shop", "pricing"), ("textkit", "words"), ("utils", "helpers"),
            ("calc", "core"), ("toolbox", "funcs"), ("app", "logic"), ("geo", "units"), ("report", "stats"))
GOALS = (
    "The tests fail: {test} finds a bug in {src}. Fix the code in {src} so that `{cmd}` passes, without "
    "changing the tests.",
    "`{cmd}` reports a failing test in {test}. Read the test and {src}, fix the bug in {src}, and run the "
    "tests until they pass. Do not modify the tests.",
    "A user reports that {f} in {src} gives wrong results; {test} shows it. Fix {src} so that the tests pass "
    "(`{cmd}`) and leave the tests as they are.",
)
HINTS = {
    "read_file": "Read the file named above.",
    "replace_function": "diagnosis: the line of the code that is wrong, and what it must be instead so that "
                        "the function does what its docstring says. source: the whole function with that line "
                        "changed.",
    "bash": "Run the tests.",
}
SUMMARIES = {
    "read_file": "A file the task names has not been read yet: read it.",
    "replace_function": "Fix the bug: rewrite the function.",
    "bash": "Run the tests on the current files.",
    "final": "The tests passed after the last change: finish.",
}
ANSWER_FORM = "I fixed {name} and the tests pass."
#: What a fix-the-test task needs (the defaults fit a lookup and a sum): two reads and a first test
#: run, then each attempt a rewrite and a test run -- six attempts and the Final -- at about 4k
#: prompt tokens a step and a minute an attempt on two cores; each rewrite's diagnosis is tried up
#: to three times first (``fix_trials.py``: the same prompt again, so up to four calls of it a
#: step). A caller's own budgets win.
BUDGETS = {"max_steps": 20, "max_tool_calls": 16, "max_seconds": 600, "max_input_tokens": 200_000,
           "max_output_tokens": 10_000}
PROTECTED_STOP_REASONS = ["cancelled", "max_steps", "tool_budget", "token_budget", "timeout", "loop_detected",
                          "invalid_decision"]


def _deck(rng: random.Random, options: tuple[Any, ...], n: int) -> list[Any]:
    cards: list[Any] = []
    while len(cards) < n:
        shuffled = list(options)
        rng.shuffle(shuffled)
        cards += shuffled
    return cards[:n]


def pack_files(name: str, case: Case, rng: random.Random, package: str, module: str, goal: str) -> dict[str, str]:
    """Relative path -> text of every file of one pack."""
    helpers = rng.sample(HELPERS, rng.randint(1, 3))
    blocks = [h[1] for h in helpers]
    blocks.insert(rng.randint(0, len(blocks)), case.function)
    source = f'"""{module.capitalize()}: small helpers of the {package} package."""\n\n\n' + "\n\n\n".join(blocks) + "\n"
    src = f"{package}/{module}.py"
    test = f"tests/test_{module}.py"
    names = [case.name] + [h[0] for h in helpers]
    tests = [render_test(case.name, case.visible)]
    for helper_name, helper_source, inputs in helpers:
        namespace: dict[str, Any] = {}
        exec(compile(helper_source, "<helper>", "exec"), namespace)  # noqa: S102 -- our own helper, for expected values
        tests.append(render_test(helper_name, [(args, namespace[helper_name](*args)) for args in inputs(rng)]))
    test_text = (f"import pytest\n\nfrom {package}.{module} import {', '.join(sorted(names))}\n\n\n"
                 + "\n\n".join(tests))
    hidden_text = (f"import pytest\n\nfrom {package}.{module} import {case.name}\n\n\n"
                   + render_test(case.name, case.hidden, "_more_cases"))
    task = {
        "id": name, "goal": goal.format(test=test, src=src, cmd=TEST_COMMAND, f=case.name),
        "required_tools": ["read_file", "replace_function", "bash"], "mode": "guided",
        "subgoals": {"read_file": [test, src]}, "answer_form": ANSWER_FORM, "hints": HINTS, "summaries": SUMMARIES,
        "workspace": {"template": "workspace", "protected": PROTECTED, "test_command": TEST_COMMAND},
        "budgets": BUDGETS,
    }
    expected = {
        "family": "fixtest", "case": case.bug.kind, "bug": case.bug.key, "function": case.name,
        "reference_fix": {"path": src, "old": case.buggy_line, "new": case.fixed_line},
        "checks": [{"type": "final_accepted"},
                   {"type": "workspace_tests", "name": "tests_pass", "command": TEST_COMMAND, "hidden": "data/hidden"}],
        "protected_stop_reasons": PROTECTED_STOP_REASONS,
    }
    return {
        "task.json": json.dumps(task, ensure_ascii=False, indent=2) + "\n",
        "workspace/pytest.ini": PYTEST_INI,
        f"workspace/{package}/__init__.py": "",
        f"workspace/{src}": source,
        f"workspace/{test}": test_text,
        f"data/hidden/tests/test_{module}_hidden.py": hidden_text,
        "data/expected.json": json.dumps(expected, ensure_ascii=False, indent=2) + "\n",
    }


def generate_packs(out_dir: Path, n: int, seed: int) -> list[Path]:
    """Write ``n`` packs ``fixtest-<seed>-<i>`` under ``out_dir``; raises FileExistsError for one that exists."""
    rng = random.Random(f"fixtest:{seed}")
    bugs = _deck(rng, BUGS, n)
    packages = _deck(rng, PACKAGES, n)
    goals = _deck(rng, GOALS, n)
    roots = []
    for i in range(n):
        name = f"fixtest-{seed}-{i:03d}"
        root = Path(out_dir) / name
        if root.exists():
            raise FileExistsError(name)
        case = instantiate(bugs[i], rng)
        package, module = packages[i]
        for rel, text in pack_files(name, case, rng, package, module, goals[i]).items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        roots.append(root)
    return roots
