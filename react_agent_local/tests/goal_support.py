"""Small repositories with one bug and a failing test, made with random names, and a scripted 'model'
that works a guided goal run from what each step offers (never from the repository's names)."""

from __future__ import annotations

import json
import random
import re
import string
from dataclasses import dataclass
from pathlib import Path

from agent.models.model_policy import ModelRequest


def _name(rng: random.Random, n: int = 7) -> str:
    return rng.choice(string.ascii_lowercase) + "".join(rng.choice(string.ascii_lowercase + "_") for _ in range(n))


@dataclass(frozen=True)
class Repo:
    root: Path
    package: str
    module: str
    function: str
    source: str  # workspace-relative source file
    test: str  # workspace-relative test file
    #: the buggy line and its fix, as the source has them (stripped)
    wrong: str
    right: str
    #: the module's other function (sorts its items), which its tests do not cover
    helper: str


def make_repo(parent: Path, seed: int, *, layout: str = "tests", config: str | None = None) -> Repo:
    """A repository whose one function drops a factor: ``layout`` ``tests`` (tests/test_m.py importing
    pkg.m) or ``flat`` (an Exercism-like folder: m.py beside m_test.py); ``config`` a pytest config file."""
    rng = random.Random(seed)
    package, module, function, helper = _name(rng), _name(rng), _name(rng), _name(rng)
    helper = "sort_" + helper
    factor = rng.randint(3, 9)
    wrong, right = "return value + offset", f"return value * {factor} + offset"
    root = parent / _name(rng, 10)
    body = (f'"""Helpers."""\n\n\ndef {helper}(items):\n    return sorted(items)\n\n\n'
            f"def {function}(value, offset=0):\n    {wrong}\n")
    if layout == "flat":
        source, test = f"{module}.py", f"{module}_test.py"
        imported = module
    else:
        source, test = f"{package}/{module}.py", f"tests/test_{module}.py"
        imported = f"{package}.{module}"
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
        (root / "tests").mkdir()
    root.mkdir(parents=True, exist_ok=True)
    (root / source).write_text(body)
    (root / test).write_text(f"from {imported} import {function}\n\n\ndef test_{function}():\n"
                             f"    assert {function}(2) == {2 * factor}\n    assert {function}(1, 1) == {factor + 1}\n")
    if config == "pytest.ini":
        (root / "pytest.ini").write_text("[pytest]\naddopts = -q\n")
    elif config == "pyproject.toml":
        (root / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.pytest.ini_options]\naddopts = '-q'\n")
    elif config == "setup.cfg":
        (root / "setup.cfg").write_text("[metadata]\nname = x\n\n[tool:pytest]\naddopts = -q\n")
    elif config == "tox.ini":
        (root / "tox.ini").write_text("[tox]\nenvlist = py\n\n[pytest]\naddopts = -q\n")
    return Repo(root, package, module, function, source, test, wrong, right, helper)


class GoalModel:
    """A scripted model for guided goal runs: reads what it is asked to, runs the command it is given,
    writes the function it is shown with ``wrong`` replaced by ``right``, and finishes. It records every
    path a step offered, so a test can check what the runtime asked for."""

    def __init__(self, wrong: str, right: str, answer: str = "I fixed the function and the tests pass.",
                 more: tuple[tuple[str, str], ...] = ()):
        self.fixes = ((wrong, right), *more)
        self.answer = answer
        self.asked: list[tuple[str, object]] = []  # (tool, the path schema the step offered)

    def __call__(self, request: ModelRequest) -> str:
        tool = re.search(r'"tool": "([a-z_]+)"', request.prefix)
        if tool is None:
            return json.dumps(self.answer)
        properties = (request.value_schema or {}).get("properties", {})
        self.asked.append((tool.group(1), properties.get("path")))
        if tool.group(1) == "read_file":
            return json.dumps({"path": properties["path"]["const"]})
        if tool.group(1) == "bash":
            return json.dumps({"command": properties["command"]["const"]})
        if tool.group(1) == "replace_function":
            path = properties["path"].get("const") or properties["path"]["enum"][0]
            name = properties["name"].get("const") or properties["name"]["enum"][0]
            source = json.loads('"' + request.drafts[0] + '"')
            for wrong, right in self.fixes:
                source = source.replace(wrong, right)
            return json.dumps({"path": path, "name": name, "source": source})
        raise AssertionError(f"a goal run asked for {tool.group(1)}")


def static_script(repo: Repo) -> list[str]:
    """A guided goal run's model outputs written out (a runner process takes strings only): read the
    failing test and the source, run the tests, the function with its fix, run them again, the Final."""
    from agent.coding.tools import workspace_ops as ops

    fixed = ops.function_source((repo.root / repo.source).read_text(), repo.function).replace(repo.wrong, repo.right)
    run = json.dumps({"command": "python -m pytest"})
    return [json.dumps({"path": repo.test}), json.dumps({"path": repo.source}), run,
            json.dumps({"path": repo.source, "name": repo.function, "source": fixed}), run,
            json.dumps("I fixed it and the tests pass.")]
