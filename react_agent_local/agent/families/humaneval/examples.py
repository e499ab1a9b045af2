"""The examples a HumanEval docstring shows, as the doctest file ``tests/examples.txt`` the agent runs.

HumanEval writes its examples in a dozen ways: doctests (``>>> f(3)`` then ``5``, or ``>>> f(3) == 5``
with no output), prose lines (``f(3) ==> 5``, ``* f(3) -> 5``, ``f(3)  # returns 5``, ``assert f(3) => 5``),
sentences (``For lst = [1,2,3] the output should be 14``) and blocks (``Input: arr = [4,2,3], k = 2``
then ``Output: [2, 1]``). Reading is liberal -- every reading of a line is a candidate -- because the
benchmark's reference solution then decides: a candidate is kept only if the reference, called as
written, returns the value written. Nothing is made up: every kept example is one the model sees in
its prompt, and a docstring whose examples the reference contradicts (a few do) keeps none of those.

The docstring is read as written in the source, not as Python's string value, so an example holding
an escape (``remove_vowels("abcdef\\nghijklm")``) stays one line.
"""

from __future__ import annotations

import ast
import doctest
import re
from dataclasses import dataclass
from typing import Any

from agent.families.humaneval.problems import Problem

#: The most characters read for one value: HumanEval's longest written value is a few hundred.
MAX_VALUE_CHARS = 400
#: What may stand between a call and the value it gives, in prose (``f(3) ==> 5``, ``f(3)  # returns 5``).
_ARROW = re.compile(r"\s*(?:#\s*)?(?:==>|=>|==|->|➞|→|=|:|should return|should be|returns?|gives)\s*", re.I)
#: ``For lst = [1, 2] the output should be 5``; ``For s = "ab", c = "a", the result should be ('b', True)``.
_SENTENCE = re.compile(r"\bfor\s+(?P<inputs>\w+\s*=.+?)\s*,?\s*the (?:output|result|answer) (?:should be|is)\s*"
                       r"(?P<value>.+)$", re.I)
#: ``Input: ...`` up to ``Output: ...``, across lines.
_BLOCK = re.compile(r"\binput\s*:\s*(?P<inputs>.+?)\s*\boutput\s*:\s*(?P<value>.+?)(?:\n\s*\n|\n\s*\w+\s*:|$)",
                    re.I | re.S)
#: ``name = value`` or ``name : value`` inside a sentence or an Input block.
_ASSIGNMENT = re.compile(r"(?<![\w.])(?P<name>[A-Za-z_]\w*)\s*[:=]\s*(?!=)")
_WORDS = {"true": "True", "false": "False", "none": "None", "null": "None"}


@dataclass(frozen=True)
class Example:
    call: str   # source of the call, e.g. "add(2, 3)"
    want: str   # the doctest output the reference gives: repr of its value ("" for None)


def examples(problem: Problem) -> list[Example]:
    """The docstring's examples that the reference solution satisfies, once each, in docstring order."""
    namespace: dict[str, Any] = {}
    exec(compile(problem.reference, problem.task_id, "exec"), namespace)  # noqa: S102 -- the benchmark's own reference
    kept: list[Example] = []
    for call, written in candidates(problem):
        if any(e.call == call for e in kept):
            continue
        try:
            value = eval(compile(call, "<example>", "eval"), dict(namespace))  # noqa: S307 -- a docstring's call
        except Exception:  # a statement, a call on names the docstring never defines, or one the reference raises on
            continue
        want = "" if value is None else repr(value)
        agrees = value is None if written is None else _agrees(written, value, want)
        if agrees:
            kept.append(Example(call, want))
    return kept


def doctest_text(problem: Problem) -> str:
    """``tests/examples.txt``: a doctest file that imports the solution and runs the kept examples."""
    lines = [f"The examples from the docstring of {problem.entry_point}.", "", ">>> from solution import *"]
    for example in examples(problem):
        lines.append(">>> " + example.call)
        if example.want:
            lines.append(example.want)
    return "\n".join(lines) + "\n"


def _agrees(written: str, value: Any, want: str) -> bool:
    """Does the value the docstring writes equal the reference's value?"""
    try:
        return bool(eval(compile(written, "<value>", "eval"), {}) == value)  # noqa: S307 -- a docstring literal
    except Exception:
        return written == want


def candidates(problem: Problem) -> list[tuple[str, str | None]]:
    """(call, written value, or None for a doctest that shows no output) for every reading of the
    docstring that names the function or its inputs."""
    function = _function(problem)
    if function is None:
        return []
    text = _docstring_source(problem.prompt, function)
    name = problem.entry_point
    params = [a.arg for a in function.args.posonlyargs + function.args.args]
    found: list[tuple[str, str | None]] = []
    found += _doctests(text, name)
    for line in text.splitlines():
        if line.strip().startswith(">>>"):
            continue
        found += _prose(line, name)
        sentence = _SENTENCE.search(line)
        if sentence:
            found += _with_inputs(name, params, sentence["inputs"], sentence["value"])
    for block in _BLOCK.finditer(text):
        found += _with_inputs(name, params, block["inputs"], block["value"])
    return found


def _function(problem: Problem) -> ast.FunctionDef | None:
    try:
        tree = ast.parse(problem.prompt)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == problem.entry_point:
            return node
    return None


def _docstring_source(prompt: str, function: ast.FunctionDef) -> str:
    """The function's first string statement as it is written (HumanEval/115 puts an import before
    it, so it is not the docstring to Python), quotes stripped, escapes kept."""
    for statement in function.body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
                and isinstance(statement.value.value, str):
            source = ast.get_source_segment(prompt, statement.value) or ""
            match = re.match(r'^[rRuU]?("""|\'\'\'|"|\')(.*)\1$', source, re.S)
            return match.group(2) if match else statement.value.value
    return ""


def _doctests(text: str, name: str) -> list[tuple[str, str | None]]:
    try:
        parsed = doctest.DocTestParser().get_examples(text)
    except ValueError:  # inconsistent indentation: the prose readings still apply
        return []
    found: list[tuple[str, str | None]] = []
    for example in parsed:
        source, want = example.source.strip(), example.want.strip()
        compared = None if want else _comparison(source, name)
        found.append(compared or (source, want or None))
    return found


def _comparison(source: str, name: str) -> tuple[str, str] | None:
    """``f(3) == 5`` written as a doctest with no output: the call and the value it is compared with."""
    try:
        tree = ast.parse(source, mode="eval").body
    except SyntaxError:
        return None
    if isinstance(tree, ast.Compare) and len(tree.ops) == 1 and isinstance(tree.ops[0], ast.Eq) \
            and _is_call_to(tree.left, name):
        return ast.get_source_segment(source, tree.left) or "", ast.get_source_segment(source, tree.comparators[0]) or ""
    return None


def _is_call_to(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def _prose(line: str, name: str) -> list[tuple[str, str]]:
    """Every ``name(...)`` on the line that is followed by an arrow and a value."""
    found = []
    for start in (m.start() for m in re.finditer(rf"(?<![\w.]){re.escape(name)}\(", line)):
        call = _call_at(line, start, name)
        if call is None:
            continue
        arrow = _ARROW.match(line, start + len(call))
        if arrow and arrow.end() > start + len(call):
            found += [(call, value) for value in _values(line[arrow.end():])]
    return found


def _call_at(line: str, start: int, name: str) -> str | None:
    """The shortest text from ``start`` that parses as a call to ``name`` (its closing parenthesis)."""
    for end in (i + 1 for i in range(start, len(line)) if line[i] == ")"):
        try:
            tree = ast.parse(line[start:end], mode="eval").body
        except SyntaxError:
            continue
        if _is_call_to(tree, name):
            return line[start:end]
    return None


def _values(text: str) -> list[str]:
    """Readings of the value written at the start of ``text``: the longest literal it starts with
    (``'No' (the name should start...)`` reads ``'No'``), ``true``/``false`` as Python's, and the last
    term of a worked sum (``19 - 5 - 6 = 8`` reads ``8``)."""
    text = text.strip()[:MAX_VALUE_CHARS]
    readings = []
    literal = _longest_literal(text)
    if literal is not None:
        readings.append(literal)
    word = re.match(r"[A-Za-z]+", text)
    if word and word.group(0).lower() in _WORDS:
        readings.append(_WORDS[word.group(0).lower()])
    if "=" in text:
        last = _longest_literal(text.rsplit("=", 1)[1].strip())
        if last is not None:
            readings.append(last)
    return readings


def _longest_literal(text: str) -> str | None:
    """The longest prefix of ``text`` that is one Python literal (not a bare tuple made by a comma)."""
    for end in range(len(text), 0, -1):
        prefix = text[:end].rstrip()
        if not prefix or prefix.endswith(","):
            continue
        try:
            ast.literal_eval(prefix)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        return prefix
    return None


def _with_inputs(name: str, params: list[str], inputs: str, value: str) -> list[tuple[str, str]]:
    """A call built from written inputs (``arr = [1, 2], k = 3``; ``grid : [[0, 1]]``; or bare values)
    and the written value: by name when the names are the parameters', else in the order written."""
    values = _values(value)
    if not values:
        return []
    args = _arguments(inputs, params)
    if args is None:
        return []
    call = f"{name}({', '.join(args)})"
    return [(call, v) for v in values]


def _arguments(inputs: str, params: list[str]) -> list[str] | None:
    inputs = " ".join(inputs.split())
    names = list(_ASSIGNMENT.finditer(inputs))
    if not names:  # bare values: one per parameter
        literal = _longest_literal(inputs)
        if literal is None:
            return None
        if len(params) == 1:
            return [literal]
        parsed = ast.literal_eval(literal)
        if isinstance(parsed, tuple) and len(parsed) == len(params):
            return [repr(v) for v in parsed]
        return None
    written: list[tuple[str, str]] = []
    for match in names:
        literal = _longest_literal(inputs[match.end():])
        if literal is not None:
            written.append((match["name"], literal))
    if len(written) != len(params):
        return None
    by_name = dict(written)
    if set(by_name) == set(params):
        return [by_name[p] for p in params]
    return [v for _, v in written]
