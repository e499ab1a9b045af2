"""Task packs: a folder with ``task.json``, ``knowledge/*.md`` and ``data/expected.json`` (a
workspace pack has its repository template, ``workspace/`` by default, instead of ``knowledge/``).

The package root is the default pack. The runtime reads ``task.json`` and hands the knowledge folder
to the tools; the skills folders ``task.json`` names are read when the pack is loaded (``skills.py``);
``expected.json`` is read only by ``metrics.py`` after the run (never by a prompt or a tool). Other
packs live under ``packs/<name>/`` and are found by name.

A pack belongs to a task family (``TaskSpec.family``; ``agent/families/``): ``TaskPack.guide`` is
how its Final is written and checked, the family's default guide for the latest Observations with
every answer field ``task.json`` sets in its place. The family registry is found by name
(``FAMILY_REGISTRY``), not imported: the loop, the claim gate and the prompts import this module,
and they must never import a family (pyproject.toml's import contracts).
"""

from __future__ import annotations

import importlib
import json
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from agent.contracts.task import AnswerGuide, TaskSpec
from agent.contracts.decision import Observation
from agent.util.paths import PACKAGE_ROOT, user_cache

#: The package whose ``__init__`` is the registry of task families (``DEFAULT_FAMILY``, ``FAMILIES``,
#: ``answer_guide``, ``expected_checks``).
FAMILY_REGISTRY = "agent.families"


def _families() -> Any:
    return importlib.import_module(FAMILY_REGISTRY)


PACKS_DIR = PACKAGE_ROOT / "packs"
#: Run folders: beside the package in a checkout, else in the user's cache (site-packages is no place for them).
DEFAULT_RUNS_DIR = (PACKAGE_ROOT / ".runs" if (PACKAGE_ROOT / "agent").is_dir()
                    else user_cache("runs"))
DEFAULT_PACK_NAME = "default"


class PackError(Exception):
    """The pack folder is missing a file or a file breaks its contract (operator fault)."""


@dataclass(frozen=True)
class TaskPack:
    name: str
    root: Path
    task: TaskSpec
    #: ``skills.Skill``: those of the folders ``task.json`` names, then any the operator added
    #: (``skills.with_folders``); read and checked when the pack is loaded
    skills: tuple[Any, ...] = ()

    @property
    def family(self) -> str | None:
        """The task family of this pack: the one ``task.json`` names (an explicit null: none), else
        the registry's default family."""
        if "family" in self.task.model_fields_set:
            return self.task.family
        return _families().DEFAULT_FAMILY

    def guide(self, latest_ok: Mapping[str, Observation], language: str) -> AnswerGuide | None:
        """How the Final is written and checked, given the latest successful Observations by tool:
        the family's default guide with the pack's declarations in its place (``TaskSpec.guide_over``)."""
        family = self.family
        offered = _families().answer_guide(family, latest_ok, language) if family else None
        return self.task.guide_over(AnswerGuide.model_validate(offered) if offered else None)

    @property
    def knowledge_dir(self) -> Path:
        return self.root / "knowledge"

    @property
    def expected_path(self) -> Path:
        return self.root / "data" / "expected.json"

    def load_expected(self) -> dict[str, Any]:
        """Ground truth for metrics only: never pass this to a prompt or a tool.

        The grading ``checks`` are generic (see ``metrics.py``); an ``expected.json`` without them is
        in the first round's record format, which the family registry translates.
        """
        try:
            expected = json.loads(self.expected_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PackError(f"pack '{self.name}': cannot read data/expected.json ({type(exc).__name__})") from None
        if not isinstance(expected, dict):
            raise PackError(f"pack '{self.name}': data/expected.json must be an object")
        if "checks" not in expected:
            expected = {**expected, "checks": _families().expected_checks(expected)}
        return expected

    @classmethod
    def load(cls, root: Path, name: str | None = None) -> "TaskPack":
        root = Path(root).resolve()
        name = name or root.name
        task_file = root / "task.json"
        try:
            task = TaskSpec.model_validate_json(task_file.read_text(encoding="utf-8"))
        except OSError:
            raise PackError(f"pack '{name}': task.json not found") from None
        except ValueError as exc:
            raise PackError(f"pack '{name}': task.json is invalid: {exc}") from None
        if task.family is not None and task.family not in _families().FAMILIES:
            known = ", ".join(_families().FAMILIES)
            raise PackError(f"pack '{name}': task.json names an unknown family '{task.family}'; known: {known}")
        workspace = task.workspace
        if workspace is None and not (root / "knowledge").is_dir():
            raise PackError(f"pack '{name}': knowledge/ folder not found")
        if workspace is not None and workspace.template and not (root / workspace.template).is_dir():
            raise PackError(f"pack '{name}': its workspace template {workspace.template}/ is not a folder")
        skills: tuple[Any, ...] = ()
        if task.skills:
            from agent.task.skills import SkillError, pack_skills

            try:
                skills = pack_skills(root, task.skills)
            except SkillError as exc:
                raise PackError(f"pack '{name}': {exc}") from None
        return cls(name=name, root=root, task=task, skills=skills)


def available_packs() -> dict[str, Path]:
    """Pack names the runner accepts: ``default`` plus every folder under ``packs/``."""
    packs = {DEFAULT_PACK_NAME: PACKAGE_ROOT}
    if PACKS_DIR.is_dir():
        for child in sorted(PACKS_DIR.iterdir()):
            if child.is_dir() and (child / "task.json").is_file() and not child.is_symlink():
                packs[child.name] = child
    return packs


def load_pack(name_or_dir: str | Path | None) -> TaskPack:
    """Load by name (``default``, a folder under packs/) or, from the CLI, by directory."""
    if name_or_dir is None or name_or_dir == DEFAULT_PACK_NAME:
        return TaskPack.load(PACKAGE_ROOT, DEFAULT_PACK_NAME)
    packs = available_packs()
    if isinstance(name_or_dir, str) and name_or_dir in packs:
        return TaskPack.load(packs[name_or_dir], name_or_dir)
    path = Path(name_or_dir)
    if path.is_dir():
        return TaskPack.load(path)
    raise PackError(f"unknown pack '{name_or_dir}'; known: {', '.join(packs)}")


def goal_language(goal: str) -> str:
    """``zh`` when the goal is mostly written in Chinese characters, else ``en``."""
    han = sum(1 for c in goal if "\u4e00" <= c <= "\u9fff")
    latin = sum(1 for c in goal if c.isascii() and c.isalpha())
    return "zh" if han * 2 >= latin and han > 0 else "en"


def item_key(text: str) -> str:
    """A subgoal item compared the way people mean it: NFKC, case-folded, letters and digits only."""
    return "".join(c for c in unicodedata.normalize("NFKC", text).casefold() if c.isalnum())
