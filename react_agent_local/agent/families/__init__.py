"""Task families kept as folders: everything one family knows -- how its packs are generated, how
its runs are graded independently of ``metrics.py`` -- lives in its folder, and the eval suite
finds it here by name (``--packs generated:FAMILY:N``).

    fixtest          fix the failing test of a small repository with the workspace tools
    humaneval        implement a HumanEval function, run its docstring's examples; hidden tests grade it
    record_rules     one evaluation record under other rules: gap to a floor, spread, lowest/highest group, a target
    record_change    the change of a group across two records (keyed by date or title), against an allowed drop
    fact_arithmetic  sums, per-1,000 ratios and densities of looked-up facts, with near-miss names and units
    interest         percentage and compound-interest word problems for the calculator

``packkit.py`` is what the generated families share (decks, writing a pack, reading an answer).

The release-rule family of the knowledge tool predates this and still lives beside that tool
(``tools/record_packs.py``, ``tools/record_grading.py``; ``generated:N``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

#: family -> its package below agent.families (a ``generator`` module with ``generate_packs`` and a
#: ``grading`` module with ``grade_run``)
FAMILIES = {"fixtest": "fixtest", "humaneval": "humaneval", "record_rules": "record_rules",
            "record_change": "record_change", "fact_arithmetic": "fact_arithmetic", "interest": "interest"}


def _module(family: str, name: str) -> Any:
    return importlib.import_module(f"{__name__}.{FAMILIES[family]}.{name}")


def generator(family: str) -> Callable[[Path, int, int], list[Path]] | None:
    """``generate_packs(out_dir, n, seed)`` of a family, or None for an unknown one."""
    return _module(family, "generator").generate_packs if family in FAMILIES else None


def grade_run(pack: Any, workspace_root: Path | None, result: Any) -> list[str] | None:
    """The independent grade of a run by the family its ground truth names; None when no family here grades it."""
    family = pack.load_expected().get("family")
    if family not in FAMILIES:
        return None
    return _module(family, "grading").grade_run(pack, workspace_root, result)
