"""``generated:humaneval:N``: one pack per problem of the seed-chosen subset::

    task.json                   the goal, guided: read the stub, run the examples, write the function
                                (its def line and docstring as given, then the body), run them again
    workspace/solution.py       the problem's prompt (signature, docstring) with a body to replace
    workspace/tests/examples.txt    the docstring's examples as a doctest (protected; ``examples.py``)
    data/hidden/hidden_check.py the benchmark's check(candidate), for the graders only
    data/expected.json          ground truth: the workspace_tests check and the task id

The Final is accepted by the runtime's workspace gate: the example run passed on the current files
after the last write.
"""

from __future__ import annotations

import json
from pathlib import Path

from agent.families.humaneval.examples import doctest_text, examples
from agent.families.humaneval.problems import Problem, hidden_check, subset

TEST_COMMAND = "python -m doctest tests/examples.txt"
STUB_BODY = "    raise NotImplementedError\n"
PROTECTED = ["tests"]
#: A rewrite after failed examples has its one-line diagnosis tried first (``agent/coding/fix_trials.py``:
#: the same prompt again, up to eight calls a step, each counted in full though the KV cache holds
#: it) and a code turn of a few hundred tokens: the defaults (32k prompt, 4k generated tokens) ended
#: 4 of 60 runs at 7c5579a on ``token_budget``, with time to spare. The run's deadline is the
#: caller's (``bench/humaneval_agent.py --max-seconds``, 300 s); a caller's own budgets win.
BUDGETS = {"max_steps": 20, "max_tool_calls": 16, "max_input_tokens": 200_000, "max_output_tokens": 10_000}
PROTECTED_STOP_REASONS = ["cancelled", "max_steps", "tool_budget", "token_budget", "timeout", "loop_detected",
                          "invalid_decision"]
#: The first version of the function is asked as the benchmark asks an instruct model for it (evalplus's
#: wording, ``bench/humaneval_single_shot.py``'s prompt): {code} is the problem's prompt, the stub's file
#: less its body (``workspace_evidence.spec_of``). Asked the runtime's way, the 1.5B's first version at
#: 890656b passed the examples and failed the hidden tests on 4 of 60 problems the single-shot arm passed.
CODE_PROMPT = ("Please provide a self-contained Python script that solves the following problem in a markdown "
               "code block:\n```\n{code}\n```")
HINTS = {
    "read_file": "Read solution.py.",
    "replace_function": "path: solution.py; name: {name}; source: its whole definition (the def line, the "
                        "docstring and the body), implemented as its docstring says.",
    "bash": "Run the examples.",
}
SUMMARIES = {
    "read_file": "Read the function to implement.",
    "replace_function": "Write the function's definition, implemented.",
    "bash": "Run the docstring's examples on the current file.",
    "final": "The examples passed on the current file: finish.",
}


def pack_files(name: str, problem: Problem) -> dict[str, str]:
    shown = (f"The docstring's examples are in tests/examples.txt; `{TEST_COMMAND}` must pass." if examples(problem)
             else f"The docstring shows no example that can be run: tests/examples.txt only imports solution.py, "
                  f"and `{TEST_COMMAND}` must pass.")
    goal = f"Implement `{problem.entry_point}` in solution.py as its docstring describes. {shown} Do not change the tests."
    hints = {k: v.replace("{name}", problem.entry_point) for k, v in HINTS.items()}
    task = {
        "id": name, "goal": goal, "required_tools": ["read_file", "replace_function", "bash"], "mode": "guided",
        "subgoals": {"read_file": ["solution.py"]}, "answer_form": "I implemented {name} and the examples pass.",
        "hints": hints, "summaries": SUMMARIES, "budgets": BUDGETS, "code_prompt": CODE_PROMPT,
        "workspace": {"template": "workspace", "protected": PROTECTED, "test_command": TEST_COMMAND},
    }
    expected = {
        "family": "humaneval", "task_id": problem.task_id, "entry_point": problem.entry_point,
        "checks": [{"type": "final_accepted"},
                   {"type": "workspace_tests", "name": "hidden_tests_pass", "command": "python hidden_check.py",
                    "hidden": "data/hidden", "timeout_seconds": 60}],
        "protected_stop_reasons": PROTECTED_STOP_REASONS,
    }
    return {
        "task.json": json.dumps(task, ensure_ascii=False, indent=2) + "\n",
        "workspace/solution.py": problem.prompt.rstrip("\n") + "\n" + STUB_BODY,
        "workspace/tests/examples.txt": doctest_text(problem),
        "data/hidden/hidden_check.py": hidden_check(problem),
        "data/expected.json": json.dumps(expected, ensure_ascii=False, indent=2) + "\n",
    }


def generate_packs(out_dir: Path, n: int, seed: int) -> list[Path]:
    """Write the packs ``humaneval-<number>`` of the subset under ``out_dir``."""
    roots = []
    for problem in subset(n, seed):
        root = Path(out_dir) / f"humaneval-{problem.number:03d}"
        if root.exists():
            raise FileExistsError(root.name)
        for rel, text in pack_files(root.name, problem).items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        roots.append(root)
    return roots
