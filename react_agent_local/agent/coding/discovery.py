"""The project's test command and what must not change, read from the folder and the goal's words.

The test command, first that applies:

    1. a command the goal names: in backticks (`` `python -m pytest tests/test_x.py` ``) or in words
       ("run pytest tests/test_x.py", "python -m unittest ..."), when it starts with a known runner and
       is a plain argument list (no ``;``, ``|``, ``&``, ``$``, quotes or redirection: a goal's words
       never smuggle a second command into the run's test command);
    2. pytest configuration: ``pytest.ini``, ``[tool.pytest.ini_options]`` in ``pyproject.toml``,
       ``[tool:pytest]`` in ``setup.cfg``, ``[pytest]`` in ``tox.ini``, a ``conftest.py``;
    3. test files (``test_*.py``, ``*_test.py``): ``python -m pytest`` when pytest is importable or a
       test imports it; else ``python -m unittest discover`` with the folder and pattern they need.

What must not change: the test files, the ``tests``/``test`` folders and the test runner's
configuration files -- unless the goal asks for tests to be written or changed -- plus whatever the
operator protects (``--protect``).
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

#: programs a test command may start with (anything else in backticks is code, not a command)
RUNNERS = ("python -m pytest", "python3 -m pytest", "pytest", "py.test", "python -m unittest", "python3 -m unittest",
           "tox", "make test", "make check", "nox")
#: folders a test search never enters
SKIPPED = frozenset({".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox", ".venv", "venv",
                     "node_modules", "build", "dist", ".eggs", "site-packages"})
TEST_FOLDERS = ("tests", "test")
CONFIG_FILES = ("pytest.ini", "conftest.py", "tox.ini")
MAX_FILES = 2000

_BACKTICKS = re.compile(r"`([^`\n]{2,300})`")
#: a command the goal names is a plain argument list: no shell operator, substitution or redirection
_PLAIN = re.compile(r"^[A-Za-z0-9_ ./:=,@+%-]+$")
_WORDS = re.compile(r"(?<![\w/.-])((?:python3? -m (?:pytest|unittest)|pytest|py\.test)(?:[ \t]+[^\s,;`'\"]+)*)")
#: the goal asks for tests to be written or changed (then the tests are no longer protected)
_ASKS_FOR_TESTS = re.compile(
    r"\b(?:add|write|create|extend|update|change|rename|improve|expand|cover)\w*\b[^.;\n]{0,40}\b(?:tests?|test cases?|test files?)\b"
    r"|\b(?:tests?|test files?)\b[^.;\n]{0,20}\b(?:are|is) (?:wrong|outdated|broken)\b", re.I)
_NOT_TESTS = re.compile(r"\b(?:without|not|never|don't|do not|no)\b[^.;\n]{0,30}\btests?\b", re.I)


@dataclass(frozen=True)
class TestCommand:
    """The command whose passing run is a fix's evidence, and where it was found (shown to the user)."""

    command: str
    source: str


def python_files(root: Path) -> list[str]:
    """Workspace-relative paths of the ``.py`` files (no link followed, caches and virtualenvs left out)."""
    found: list[str] = []
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED and not d.endswith(".egg-info")
                         and not (Path(folder) / d).is_symlink())
        rel = Path(folder).relative_to(root)
        for name in sorted(names):
            if name.endswith(".py") and not (Path(folder) / name).is_symlink():
                found.append((rel / name).as_posix())
                if len(found) >= MAX_FILES:
                    return found
    return found


def is_test_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    parts = path.split("/")[:-1]
    return (name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"
            or any(p in TEST_FOLDERS for p in parts))


def find_test_files(root: Path) -> list[str]:
    return [p for p in python_files(root) if is_test_file(p) and p.rsplit("/", 1)[-1] != "__init__.py"]


def named_command(goal: str) -> str | None:
    """A test command the goal names: in backticks first, then in words."""
    for text in _BACKTICKS.findall(goal):
        text = text.strip().removeprefix("$ ").strip()
        if _PLAIN.match(text) and any(text == r or text.startswith(r + " ") for r in RUNNERS):
            return text
    match = _WORDS.search(goal)
    command = match.group(1).rstrip(".") if match else None
    return command if command and _PLAIN.match(command) else None


def _pytest_configured(root: Path) -> str | None:
    """The file that configures pytest, if any."""
    def section(path: Path, name: str) -> bool:
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(path.read_text(encoding="utf-8", errors="replace"))
        except (OSError, configparser.Error):
            return False
        return parser.has_section(name)

    if (root / "pytest.ini").is_file():
        return "pytest.ini"
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8", errors="replace"))
        except (OSError, tomllib.TOMLDecodeError):
            data = {}
        if isinstance(data.get("tool"), dict) and "pytest" in data["tool"]:
            return "pyproject.toml"
    if (root / "setup.cfg").is_file() and section(root / "setup.cfg", "tool:pytest"):
        return "setup.cfg"
    if (root / "tox.ini").is_file() and section(root / "tox.ini", "pytest"):
        return "tox.ini"
    if (root / "conftest.py").is_file():
        return "conftest.py"
    return None


def _uses_pytest(root: Path, tests: list[str]) -> bool:
    for rel in tests[:50]:
        try:
            text = (root / rel).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if re.search(r"^\s*(?:import pytest|from pytest\b)", text, re.M):
            return True
    return False


def pytest_available() -> bool:
    """pytest is importable by the interpreter the sandbox runs (the same one as this process)."""
    return importlib.util.find_spec("pytest") is not None


def find_test_command(root: Path, goal: str) -> TestCommand | None:
    """The project's test command (see the module docstring); None when nothing says how to test it."""
    named = named_command(goal)
    if named:
        return TestCommand(named, "the goal")
    config = _pytest_configured(root)
    if config:
        return TestCommand("python -m pytest", config)
    tests = [t for t in find_test_files(root) if not t.endswith("conftest.py")]
    if not tests:
        return None
    if pytest_available() or _uses_pytest(root, tests):
        return TestCommand("python -m pytest", "test files " + ", ".join(tests[:3]))
    folder = next((f for f in TEST_FOLDERS if any(t.startswith(f + "/") for t in tests)), None)
    pattern = "test*.py" if any(t.rsplit("/", 1)[-1].startswith("test") for t in tests) else "*_test.py"
    command = "python -m unittest discover" + (f" -s {folder}" if folder else "") + (
        f" -p '{pattern}'" if pattern != "test*.py" else "")
    return TestCommand(command, "test files " + ", ".join(tests[:3]))


def asks_for_tests(goal: str) -> bool:
    """The goal asks for tests to be written or changed ("add a test for ...", "the tests are outdated")."""
    return any(not _NOT_TESTS.search(goal[max(0, m.start() - 30):m.end()]) for m in _ASKS_FOR_TESTS.finditer(goal))


def protected_paths(root: Path, goal: str, operator: tuple[str, ...] = ()) -> list[str]:
    """What a fix must not change: the tests and their configuration (unless the goal asks for tests),
    and the operator's ``--protect`` paths."""
    protected: list[str] = []
    if not asks_for_tests(goal):
        protected += [f for f in TEST_FOLDERS if (root / f).is_dir() and not (root / f).is_symlink()]
        protected += [t for t in find_test_files(root) if not any(t.startswith(f + "/") for f in protected)]
        protected += [c for c in (*CONFIG_FILES, "pyproject.toml", "setup.cfg")
                      if (root / c).is_file() and (c in CONFIG_FILES or _pytest_configured(root) == c)]
    protected += list(operator)
    return list(dict.fromkeys(protected))
