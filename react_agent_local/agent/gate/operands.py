"""A calculator expression computes with the evidence, not with numbers the model made up.

Before a calculator call runs, each number literal of its expression must be one of:

1. **observed**: a number a successful Observation of this run holds (``numbers.numbers_in``: its
   values and the numbers written in its text, ``8.19万`` both as 81900 and as 8.19) -- exactly,
   or, written with decimals, rounded to them (``0.3122`` for 0.31219411…). A rejected call's own
   arguments are no evidence, so an invented number cannot ground itself by being tried twice;
2. **in the task**: a number the pack's text states -- the goal, the tool and final hints, the
   subgoal items -- which is what the model was given to work from;
3. **a count**: the length of a list or object an Observation holds, how many successful
   Observations the run has (of one tool, or in all), or how many terms a sum inside the
   expression has (the 3 of ``(a + b + c) / 3``);
4. **a plain derivation** of a number v of 1 or 2: ``v / 100`` (a percentage as a fraction: 0.035
   from 3.5 %), ``1 + v / 100`` and ``1 - v / 100`` (a growth factor: 1.035), ``v * 100``
   (a fraction as a percentage);
5. one of the constants **0, 1, 2** (identities, halving, doubling) and **100** (percent).

Signs are operators, so ``68`` in ``12 - 68`` is grounded by an observed -68 too. Nothing here
knows any task: the rule reads only the Observations and the pack's own text. A literal that is
none of these makes the call an argument rejection (``ArgumentError`` on ``expression``) before
anything runs, and its message names the literal and the numbers the evidence does hold. An
expression the calculator cannot parse is left to the calculator, which refuses it itself.
"""

from __future__ import annotations

import ast
from collections import Counter
from typing import Any, Iterable, Sequence

from pydantic import BaseModel

from agent.contracts.decision import Observation
from agent.contracts.task import TaskSpec
from agent.gate.numbers import Number, close, numbers_in, read_numbers
from agent.tools.base import ArgumentError, ToolError
from agent.tools.calculator import CalculatorArgs, parse

CONSTANTS = (0.0, 1.0, 2.0, 100.0)
_SHOWN = 12  # evidence numbers the feedback lists per observation


def task_text(task: TaskSpec) -> list[str]:
    """The pack's own words the model was shown: goal, hints, final hints, subgoal items."""
    return [task.goal, *task.hints.values(), *task.final_hints, *(i for items in task.subgoals.values() for i in items)]


def _counts(value: Any, out: set[float]) -> None:
    if isinstance(value, dict):
        out.add(float(len(value)))
        for v in value.values():
            _counts(v, out)
    elif isinstance(value, list):
        out.add(float(len(value)))
        for v in value:
            _counts(v, out)


def _derived(values: Iterable[float]) -> set[float]:
    out: set[float] = set()
    for v in values:
        out.update(abs(d) for d in (v, v / 100, 1 + v / 100, 1 - v / 100, v * 100))
    return out


def _sum_sizes(node: ast.AST) -> set[float]:
    """How many terms each whole sum in the expression adds (``(a + b + c) / 3``: 3; the partial sums
    inside it, ``a + b``, count nothing: a 7-term sum grounds a 7, not every number from 2 to 7)."""
    def is_sum(n: ast.AST) -> bool:
        return isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub))

    def terms(n: ast.AST) -> int:
        return terms(n.left) + terms(n.right) if is_sum(n) else 1

    inner = {id(child) for n in ast.walk(node) if is_sum(n) for child in (n.left, n.right) if is_sum(child)}
    return {float(terms(n)) for n in ast.walk(node) if is_sum(n) and id(n) not in inner}


def _literals(tree: ast.Expression, source: str) -> list[str]:
    return [ast.get_source_segment(source, n) or repr(n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant)]


def ungrounded_operands(expression: str, observations: Sequence[Observation], task_texts: Sequence[str]) -> list[str]:
    """The literals of ``expression`` that none of the rules above grounds, as written, in order."""
    try:
        tree, source = parse(expression)
    except ToolError:
        return []  # the calculator refuses it itself, with its own reason
    ok = [o for o in observations if o.ok]
    observed = [r for o in ok for n in numbers_in(o.result) for r in n.readings()]
    stated = [r for text in task_texts for n in read_numbers(text) for r in n.readings()]
    counts: set[float] = {float(len(ok))} | {float(c) for c in Counter(o.tool for o in ok).values()}
    for o in ok:
        _counts(o.result, counts)
    exact = {abs(v) for v in observed + stated} | _derived(observed + stated) | counts \
        | _sum_sizes(tree) | set(CONSTANTS)
    rounded = [abs(v) for v in observed + stated]
    missing: list[str] = []
    for literal in _literals(tree, source):
        value = float(literal)
        if any(close(value, v) for v in exact):
            continue
        decimals = len(literal.partition(".")[2])
        if decimals and any(abs(v - value) <= 0.5 * 10 ** -decimals + 1e-12 for v in rounded):
            continue  # a long observed decimal copied to fewer places
        if literal not in missing:
            missing.append(literal)
    return missing


def _evidence_lines(observations: Sequence[Observation], task_texts: Sequence[str]) -> str:
    shown: list[str] = []
    for obs in observations:
        if obs.ok:
            # The result's values first, then the numbers its text mentions.
            found = [*numbers_in(obs.result, text=False), *numbers_in(obs.result)]
            written = list(dict.fromkeys(_plain(n) for n in found))
            if written:
                more = f" (+{len(written) - _SHOWN} more)" if len(written) > _SHOWN else ""
                shown.append(f"{obs.id}: {', '.join(written[:_SHOWN])}{more}")
    in_task = list(dict.fromkeys(n.text for text in task_texts for n in read_numbers(text)))
    evidence = "; ".join(shown[-4:]) if shown else "no observation holds a number yet"
    return f"{evidence}; the task states {', '.join(in_task[:_SHOWN]) if in_task else 'no number'}"


def _plain(number: Number) -> str:
    value = number.value
    return str(int(value)) if float(value).is_integer() else repr(value)


def check_operands(tool: str, arguments: BaseModel, observations: Sequence[Observation], task: TaskSpec) -> None:
    """Raise ``ArgumentError`` when a calculator expression computes with a number the evidence does
    not hold (the rules above); any other tool's arguments pass untouched."""
    if not isinstance(arguments, CalculatorArgs):
        return
    texts = task_text(task)
    missing = ungrounded_operands(arguments.expression, observations, texts)
    if not missing:
        return
    names = ", ".join(missing[:4])
    verb = "is" if len(missing) == 1 else "are"
    message = (f"{names} {verb} in no observation, not in the task and no count of observed items: compute "
               f"with the observed numbers only; the observed values are {_evidence_lines(observations, texts)}")
    raise ArgumentError(tool, message[:450], ["expression"], [], [])
