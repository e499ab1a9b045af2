"""Task packs: a folder with ``task.json``, ``knowledge/*.md`` and ``data/expected.json`` (a
workspace pack has its repository template, ``workspace/`` by default, instead of ``knowledge/``).

The package root is the default pack. The runtime reads ``task.json`` and hands the knowledge folder
to the tools; the skills folders ``task.json`` names are read when the pack is loaded (``skills.py``);
``expected.json`` is read only by ``metrics.py`` after the run (never by a prompt or a tool). Other
packs live under ``packs/<name>/`` and are found by name.
"""

from __future__ import annotations

import json
import os
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .contracts import TaskSpec



def _package_root() -> Path:
    """Where prompts/, schemas/, the default pack and packs/ live: the source tree (a checkout or an
    editable install), else the data installed with the package (``pip install``), or $REACT_AGENT_HOME."""
    if os.environ.get("REACT_AGENT_HOME"):
        return Path(os.environ["REACT_AGENT_HOME"]).expanduser().resolve()
    source = Path(__file__).resolve().parent.parent
    if (source / "prompts").is_dir():
        return source
    import importlib.util

    spec = importlib.util.find_spec("react_agent_local")
    if spec is None or not spec.submodule_search_locations:
        return source  # nothing installed either: errors will name the missing folder
    return Path(list(spec.submodule_search_locations)[0]).resolve()


PACKAGE_ROOT = _package_root()
PACKS_DIR = PACKAGE_ROOT / "packs"
#: Run folders: beside the package in a checkout, else in the user's cache (site-packages is no place for them).
DEFAULT_RUNS_DIR = (PACKAGE_ROOT / ".runs" if (PACKAGE_ROOT / "agent").is_dir()
                    else Path.home() / ".cache" / "react-agent-local" / "runs")
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
    def knowledge_dir(self) -> Path:
        return self.root / "knowledge"

    @property
    def expected_path(self) -> Path:
        return self.root / "data" / "expected.json"

    def load_expected(self) -> dict[str, Any]:
        """Ground truth for metrics only (R-MET): never pass this to a prompt or a tool.

        The grading ``checks`` are generic (see ``metrics.py``); an ``expected.json`` in the first
        round's record format is translated by the knowledge tool, whose data it describes.
        """
        try:
            expected = json.loads(self.expected_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PackError(f"pack '{self.name}': cannot read data/expected.json ({type(exc).__name__})") from None
        if not isinstance(expected, dict):
            raise PackError(f"pack '{self.name}': data/expected.json must be an object")
        if "checks" not in expected:
            from .tools.knowledge import legacy_expected_checks

            expected = {**expected, "checks": legacy_expected_checks(expected)}
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
        workspace = task.workspace
        if workspace is None and not (root / "knowledge").is_dir():
            raise PackError(f"pack '{name}': knowledge/ folder not found")
        if workspace is not None and workspace.template and not (root / workspace.template).is_dir():
            raise PackError(f"pack '{name}': its workspace template {workspace.template}/ is not a folder")
        skills: tuple[Any, ...] = ()
        if task.skills:
            from .skills import SkillError, pack_skills

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
