"""Which tests fail and where: a test run's output read into test ids and traceback frames, and the
workspace's source files those point at.

Read from pytest's report (``FAILED path::test - message``, ``ERROR path``, the ``path:line:`` lines
of its tracebacks) and from Python's own tracebacks (``File "path", line N, in func``: unittest,
a script, an import error). A frame's function is the one the workspace's file defines around that
line (the source, parsed), so a report that names no function still gives one.

The source a fix belongs in, best first: files of the workspace outside the tests that a failing
traceback passes through (deepest frame first), then the modules the failing test files import
from the workspace (``from pkg.mod import f``, ``import mod``) that define a name the test calls.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from agent.coding.discovery import is_test_file

_PYTEST_FAILED = re.compile(r"^(FAILED|ERROR) ([^\s:]+\.py)(?:::(\S+))?(?: - (.*))?$")
_UNITTEST = re.compile(r"^(FAIL|ERROR): (\w+) \(([\w.]+?)\)")
_PY_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')
_PYTEST_FRAME = re.compile(r"^([^\s:][^:\n]*\.py):(\d+):(?: in (\S+)|\s|$)")
_ERROR_LINE = re.compile(r"^(?:E\s+)?(\w+(?:Error|Exception|Failure)\b.*|assert .+)$")
MAX_SOURCES = 3


@dataclass(frozen=True)
class Frame:
    """One traceback frame inside the workspace."""

    path: str
    line: int
    function: str | None

    def text(self) -> str:
        return f"{self.path}:{self.line}" + (f" in {self.function}" if self.function else "")


@dataclass
class Localisation:
    """What a failing run says: its failing test ids, their frames, the error lines, the source files."""

    failing: list[str] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    test_files: list[str] = field(default_factory=list)

    def public(self) -> dict[str, object]:
        return {"failing": self.failing[:20], "frames": [f.text() for f in self.frames[:20]],
                "errors": self.errors[:5], "sources": self.sources, "test_files": self.test_files[:5]}


def _relative(path: str, root: Path) -> str | None:
    """``path`` as a workspace-relative path of an existing file, else None (the standard library,
    site-packages and anything outside the workspace)."""
    text = path.strip()
    base = str(root).rstrip("/") + "/"
    if text.startswith(base):
        text = text[len(base):]
    elif text.startswith("/"):
        return None
    text = text.removeprefix("./")
    if not text or ".." in text.split("/") or "site-packages" in text:
        return None
    candidate = root / text
    return text if candidate.is_file() and not candidate.is_symlink() else None


def enclosing_function(root: Path, path: str, line: int) -> str | None:
    """The qualified name of the innermost function (or class) of ``path`` that holds ``line``."""
    try:
        tree = ast.parse((root / path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None
    best: tuple[int, str] | None = None

    def visit(node: ast.AST, prefix: str) -> None:
        nonlocal best
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                end = child.end_lineno or child.lineno
                if child.lineno <= line <= end and (best is None or child.lineno >= best[0]):
                    best = (child.lineno, name)
                visit(child, name + ".")

    visit(tree, "")
    return best[1] if best else None


def parse_output(output: str, root: Path) -> Localisation:
    """Test ids, frames and error lines of a run's output; frames only where the file is the workspace's."""
    found = Localisation()
    # the workspace's own folder never leaves in an error line (the report and the runner show them)
    output = output.replace(str(root).rstrip("/") + "/", "").replace(str(root), ".")
    for raw in output.replace("\r\n", "\n").splitlines():
        line = raw.rstrip()
        if m := _PYTEST_FAILED.match(line.strip()):
            test = m.group(2) + (f"::{m.group(3)}" if m.group(3) else "")
            if test not in found.failing:
                found.failing.append(test)
            if m.group(4) and m.group(4) not in found.errors:
                found.errors.append(m.group(4)[:200])
            continue
        if m := _UNITTEST.match(line):
            test = f"{m.group(3)}.{m.group(2)}" if not m.group(3).endswith(m.group(2)) else m.group(3)
            if test not in found.failing:
                found.failing.append(test)
            continue
        m = _PY_FRAME.match(line) or _PYTEST_FRAME.match(line)
        if m:
            rel = _relative(m.group(1), root)
            if rel is not None:
                number = int(m.group(2))
                function = m.group(3) if m.group(3) and m.group(3) != "<module>" else None
                frame = Frame(rel, number, enclosing_function(root, rel, number) or function)
                if frame not in found.frames:
                    found.frames.append(frame)
            continue
        if (m := _ERROR_LINE.match(line.strip())) and m.group(1) not in found.errors and len(found.errors) < 10:
            found.errors.append(m.group(1)[:200])
    return found


def _module_file(root: Path, module: str) -> str | None:
    """The workspace file of a dotted module name (``pkg/mod.py``, ``pkg/mod/__init__.py``, or under
    ``src/``)."""
    parts = module.split(".")
    for base in ("", "src/"):
        for candidate in (base + "/".join(parts) + ".py", base + "/".join(parts) + "/__init__.py"):
            if (root / candidate).is_file() and not (root / candidate).is_symlink():
                return candidate
    return None


def imported_sources(root: Path, test_file: str) -> list[tuple[str, set[str]]]:
    """(workspace module file, names the test imports from it or uses as ``module.name``) of each
    workspace module the test file imports."""
    try:
        text = (root / test_file).read_text(encoding="utf-8", errors="replace")
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return []
    folder = test_file.rsplit("/", 1)[0] if "/" in test_file else ""
    out: dict[str, set[str]] = {}
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {a.name for a in node.names}
            path = _module_file(root, node.module) or (_module_file(root, f"{folder}/{node.module}".replace("/", "."))
                                                      if folder else None)
            if path:
                out.setdefault(path, set()).update(names)
            for alias in node.names:  # ``from pkg import mod``
                sub = _module_file(root, f"{node.module}.{alias.name}")
                if sub:
                    out.setdefault(sub, set())
                    aliases[alias.asname or alias.name] = sub
        elif isinstance(node, ast.Import):
            for alias in node.names:
                path = _module_file(root, alias.name)
                if path:
                    out.setdefault(path, set())
                    aliases[alias.asname or alias.name] = path
    for node in ast.walk(tree):  # ``mod.func(...)``: the names used through a module alias
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            out[aliases[node.value.id]].add(node.attr)
    return [(path, names) for path, names in out.items() if not is_test_file(path)]


def _defines(root: Path, path: str, names: set[str]) -> bool:
    try:
        tree = ast.parse((root / path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return False
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return bool(defined & names) or not names


def defines_word(root: Path, path: str, text: str) -> bool:
    """``path`` defines a top-level function or class whose name is a word of ``text`` (a goal)."""
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]{2,}", text))
    return _defines(root, path, words) if words else False


def localise(output: str, root: Path, *, limit: int = MAX_SOURCES) -> Localisation:
    """``parse_output`` with the source files a fix belongs in (see the module docstring)."""
    found = parse_output(output, root)
    tests = [t.split("::", 1)[0] for t in found.failing if t.split("::", 1)[0].endswith(".py")]
    tests += [f.path for f in found.frames if is_test_file(f.path)]
    found.test_files = list(dict.fromkeys(t for t in tests if (root / t).is_file()))
    sources = [f.path for f in reversed(found.frames) if not is_test_file(f.path)]
    for test in found.test_files:
        sources += [path for path, names in imported_sources(root, test) if _defines(root, path, names)]
    found.sources = list(dict.fromkeys(sources))[:limit]
    return found
