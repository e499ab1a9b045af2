"""Task families kept as folders: everything one family knows -- how its packs are generated, how
its runs are graded independently of ``metrics.py``, how a Final over its evidence is written and
checked where its packs declare nothing -- lives in its folder, and the core finds it here by name
(``--packs generated:FAMILY:N``, ``TaskSpec.family``).

    release_rule     groups of one record with a mean and a release rule (the default pack; ``generated:N``)
    fixtest          fix the failing test of a small repository with the workspace tools
    humaneval        implement a HumanEval function, run its docstring's examples; hidden tests grade it
    record_rules     one evaluation record under other rules: gap to a floor, spread, lowest/highest group, a target
    record_change    the change of a group across two records (keyed by date or title), against an allowed drop
    fact_arithmetic  sums, per-1,000 ratios and densities of looked-up facts, with near-miss names and units
    interest         percentage and compound-interest word problems for the calculator

A family's package has ``generator.py`` (``generate_packs(out_dir, n, seed)``) and ``grading.py``
(``grade_run(pack, workspace_root, result)``, optionally ``verdict_case(expected)``), and may have
``guide.py``: ``answer_guide(latest_ok, language)``, the family's default ``AnswerGuide`` computed
from the latest successful Observations, and ``expected_checks(expected)``, the grading checks of an
``expected.json`` that declares none. The default family also has ``record.py``, the record every
knowledge search reads into its ``data`` (``knowledge_record``). ``packkit.py`` is what the
generated families share (decks, writing a pack, reading an answer).

``packs.py`` reaches this registry by name when a pack asks for its family's guide, and the
knowledge tool when it reads, shows or hands on its ``data``: the loop, the claim gate and the
prompts import both and never a family (pyproject.toml's import contracts), so a family is a plugin
looked up by name, like a tool's ``import_path``.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping

#: family -> its package below agent.families
FAMILIES = {"release_rule": "release_rule", "fixtest": "fixtest", "humaneval": "humaneval",
            "record_rules": "record_rules", "record_change": "record_change",
            "fact_arithmetic": "fact_arithmetic", "interest": "interest"}
#: The family of ``generated:N`` and of a pack whose task.json names none: the first family, whose
#: packs predate ``TaskSpec.family``.
DEFAULT_FAMILY = "release_rule"


def _module(family: str, name: str) -> Any:
    return importlib.import_module(f"{__name__}.{FAMILIES[family]}.{name}")


@lru_cache(maxsize=None)
def _guide_module(family: str) -> Any:
    """The family's ``guide`` module, or None when it has none (its packs declare everything)."""
    name = f"{__name__}.{FAMILIES[family]}.guide"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:  # a missing import inside the module is a bug, not a family without a guide
            raise
        return None


def generator(family: str) -> Callable[[Path, int, int], list[Path]] | None:
    """``generate_packs(out_dir, n, seed)`` of a family, or None for an unknown one."""
    return _module(family, "generator").generate_packs if family in FAMILIES else None


def _grading_family(pack: Any, expected: dict[str, Any]) -> str | None:
    # The ground truth names its family where a generator wrote it so; else the pack's own family.
    family = expected.get("family") or pack.family
    return family if family in FAMILIES else None


def grade_run(pack: Any, workspace_root: Path | None, result: Any) -> list[str] | None:
    """The independent grade of a run by the family its ground truth (or else its task.json) names;
    None when no family here grades it."""
    family = _grading_family(pack, pack.load_expected())
    if family is None:
        return None
    return _module(family, "grading").grade_run(pack, workspace_root, result)


def verdict_case(pack: Any, expected: dict[str, Any]) -> str | None:
    """Which case of its family's verdicts a pack's ground truth is: computed by the family where it
    can be (``grading.verdict_case``), else as ``expected.json`` states it (``case``)."""
    family = _grading_family(pack, expected)
    computed = getattr(_module(family, "grading"), "verdict_case", None) if family else None
    return (computed(expected) if computed else None) or expected.get("case")


def answer_guide(family: str, latest_ok: Mapping[str, Any], language: str) -> dict[str, Any] | None:
    """The family's default guide for the latest successful Observations (by tool name), as the
    fields of an ``AnswerGuide``; None when the family offers none for this evidence."""
    module = _guide_module(family)
    offer = getattr(module, "answer_guide", None)
    return offer(latest_ok, language) if offer else None


def expected_checks(expected: dict[str, Any]) -> list[dict[str, Any]]:
    """Grading checks for an ``expected.json`` that declares none: it is in the first round's format,
    which only the default family wrote (its ``guide.expected_checks``)."""
    return _guide_module(DEFAULT_FAMILY).expected_checks(expected)


def knowledge_record() -> Any:
    """The record a knowledge search reads into its ``data``, shows and hands to the check language
    (the knowledge tool's ``FamilyRecord``): the default family's ``record.py``, read on every search
    whatever the pack's family, as before families existed."""
    return _module(DEFAULT_FAMILY, "record")
