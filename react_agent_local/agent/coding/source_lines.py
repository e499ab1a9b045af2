"""Python source as the coding steps read it: a function's specification (its def line and
docstring), its module's context, stubs still to be written, the lines a one-line fix may name,
the lines a rewrite changed, the code lines of a file."""

from __future__ import annotations

import ast
import re
import textwrap
from typing import Any, Iterable
from agent.coding.tools import workspace_ops as ops



MAX_LINE_CHOICES = 300


MAX_CHOICE_CHARS = 300


def spec_of(text: str, name: str) -> str | None:
    """The module ``text`` with the stub ``name`` less its body (the ``pass``, ``...`` or ``raise
    NotImplementedError`` it ends with; what comes before it -- def line, docstring, an import --
    kept), stripped: what a benchmark's prompt is (a HumanEval problem's prompt is its stub's file
    less the stub's body). None where the module does not parse or ``name`` is not one function of
    its top level that ends so."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    found = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    if len(found) != 1 or len(found[0].body) < 2 or not _is_stub_statement(found[0].body[-1]):
        return None
    last = found[0].body[-1]
    lines = text.splitlines()
    return "\n".join(lines[:last.lineno - 1] + lines[last.end_lineno:]).strip()


#: the most of a module shown around a function still to be written (``module_context``)
MAX_CONTEXT_CHARS = 2400


def module_context(text: str, name: str) -> str:
    """The module ``text`` without function ``name`` (decorators included), runs of blank lines
    folded to one, at most ``MAX_CONTEXT_CHARS`` (cut at a line, marked); "" when nothing is left
    or the module does not parse."""
    try:
        spans = ops.definitions(text).get(name) or []
    except (SyntaxError, ValueError):
        return ""
    if len(spans) != 1:
        return ""
    first, _, last, _ = spans[0]
    lines = text.splitlines()
    kept: list[str] = []
    for line in lines[:first - 1] + lines[last:]:
        if line.strip() or (kept and kept[-1].strip()):
            kept.append(line.rstrip())
    around = "\n".join(kept).strip("\n")
    if len(around) > MAX_CONTEXT_CHARS:
        around = around[:around.rfind("\n", 0, MAX_CONTEXT_CHARS)].rstrip() + "\n# ... (the rest of the module is not shown)"
    return around


def stub_of(source: str) -> str | None:
    """The function's def line and docstring with ``...`` for its body (dedented); None where they
    cannot be told apart (``head_lines``) or it has no docstring."""
    head = head_lines(source)
    if len(head) < 2:
        return None
    lines = textwrap.dedent(source).splitlines()
    body = lines[len(head)] if len(lines) > len(head) else ""
    indent = body[:len(body) - len(body.lstrip())] or "    "
    return "\n".join([*head, indent + "..."])


def is_stub(source: str) -> bool:
    """A function still to be written: its body (after the docstring, and imports before it) is only
    ``pass``, ``...`` or ``raise NotImplementedError`` (a stub may import above its docstring)."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError):
        return False
    node = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    body = node.body[1:] if ast.get_docstring(node) is not None else node.body
    imports = next((i for i, statement in enumerate(body) if not isinstance(statement, (ast.Import, ast.ImportFrom))),
                   len(body))
    if 0 < imports < len(body):
        body = body[imports:]
        if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # the docstring, after the imports
    if len(body) != 1:
        return not body
    return _is_stub_statement(body[0])


def _is_stub_statement(statement: ast.stmt) -> bool:
    """``pass``, ``...`` or ``raise NotImplementedError``: a body still to be written."""
    if isinstance(statement, ast.Pass) or (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                                           and statement.value.value is Ellipsis):
        return True
    if isinstance(statement, ast.Raise) and statement.exc is not None:
        exc = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


MAX_FIX_LINES = 3  # a rewrite that changed more lines than this was no fix of one line


#: typographic quotes end a fix: in a code line they are prose (sampled wider, a model closes its fix
#: with one and goes on, "`return x or y’ to correctly handle ...`")
PROSE_QUOTES = "\u2018\u2019\u201c\u201d"


_NUMBERED = re.compile(r"^\s*\d+\| ?(.*)$")


_NOT_CODE = ("#", '"' * 3, "'" * 3)


_COMMENT = re.compile(r"\s+#[^'\"]*$")  # a trailing comment (none with a quote after the #)


def changed_lines(rewrite: dict[str, Any]) -> list[str]:
    """The code lines a ``replace_function`` result wrote that its function did not have (``before``),
    stripped: the fix it tried, whatever its diagnosis said (a diagnosis that runs on past its fix in
    prose, "it must be `if n <= m:'. The test expects...", would leave that fix itself unexcluded)."""
    old = {line.strip() for line in str(rewrite.get("before") or "").splitlines()}
    new = [_COMMENT.sub("", m.group(1)).strip() for line in str(rewrite.get("snippet") or "").splitlines()
           if (m := _NUMBERED.match(line))]
    return [line for line in dict.fromkeys(new) if line and line not in old and not line.startswith(_NOT_CODE)]


def blamable_lines(source: str) -> list[str]:
    """The lines of a function a diagnosis may name as the wrong one: its code lines after the def
    line, stripped, each once."""
    lines = [line.strip() for line in textwrap.dedent(source).splitlines()[1:]]
    return [line for line in dict.fromkeys(lines) if line and "`" not in line and "\\" not in line
            and not line.startswith(('"""', "'''", "#"))]


def line_variants(line: str) -> tuple[str, ...]:
    """A line as written, with a space after it, and with its trailing ``:``/``;``/spaces left out
    or one of them added."""
    bare = line.rstrip(" ;:")
    return (line, line + " ", bare, bare + ":", bare + ";", bare + " ")


#: a stub's body statements, which a body written for a stub may not start with
STUB_LINES = ("raise NotImplementedError", "raise NotImplementedError()", "pass", "...")


def head_lines(source: str) -> list[str]:
    """The def line and the docstring of a one-function ``source``, dedented; [] where the def
    spans lines, has decorators or the source does not parse."""
    text = textwrap.dedent(source)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    node = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.decorator_list or not node.body:
        return []
    lines = text.splitlines()
    if not lines[node.lineno - 1].rstrip().endswith(":") or node.body[0].lineno == node.lineno:
        return []
    last = node.lineno
    if ast.get_docstring(node) is not None:
        last = node.body[0].end_lineno or node.body[0].lineno
    return lines[node.lineno - 1:last]


def unique_lines(files: Iterable[tuple[str, str]]) -> list[str]:
    """The lines an ``old`` may be, without their indentation: each occurs exactly once in its file,
    and in a Python file that parses it is code -- a statement in a function or an assignment at the
    top -- not a ``def``, an import, a docstring or a comment (an edit of the ``def`` line rewrites the
    function on it). Every non-blank line where the file does not parse."""
    choices: list[str] = []
    for path, text in files:
        lines = text.splitlines()
        code = _code_lines(text) if path.endswith(".py") else None
        for number, line in enumerate(lines, start=1):
            line = line.strip()
            if code is not None and number not in code:
                continue
            if line and len(line) <= MAX_CHOICE_CHARS and text.count(line) == 1 and line not in choices:
                choices.append(line)
                if len(choices) >= MAX_LINE_CHOICES:
                    return choices
    return choices


def _code_lines(text: str) -> set[int] | None:
    """Line numbers of the statements in function bodies and of top-level assignments; None when the
    text does not parse (a change broke it: every line may be the one to repair)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    numbers: set[int] = set()

    def add(node: ast.stmt) -> None:
        numbers.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            for statement in body:
                add(statement)
        elif isinstance(node, ast.Module):
            for statement in node.body:
                if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    add(statement)
    for node in ast.walk(tree):  # a nested def inside a body is no code line of its own
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            numbers.discard(node.lineno)
    return numbers
