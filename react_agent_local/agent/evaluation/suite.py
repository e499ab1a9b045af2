"""Running packs × seeds through the real runtime with one policy.

``run_suite`` is the eval loop: for every pack, ``runs`` runs with seeds ``seed, seed + 1, ...``
(so run k of every pack shares a seed), each through ``runtime.run_agent`` exactly as ``agent run``
drives it. The policy comes from ``policy_for(pack, k)``: the eval command returns one resident
model for every call; tests return a fresh scripted policy per run. Each run becomes an
``EvalRun``: the runtime's own metrics and checks, the independent grade, and its wall time.

``generated:FAMILY:N`` generates packs of a family of ``agent/families`` (``generated:fixtest:N``,
``generated:record_rules:N``, ...); ``generated:N`` of the registry's default family
(``DEFAULT_FAMILY``). A pack with a workspace gets a fresh copy of its template in its run's folder
(``run-k/workspace``), which its family's grader reads afterwards. A pack that looks facts up gets
``lookup_fact`` bound to its fact names (``tools.with_fact_names``), so the grammar offers
exactly those.

A pack a user wrote carries its own ground truth, ``truth.json``, graded by the operator's script
(``--grader``, ``external_grade.py``) in place of a family's grader; its family is the one
``truth.json`` names (else the pack's).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from agent.contracts.budgets import Budgets, Sampling
from agent.families import DEFAULT_FAMILY, FAMILIES, generator, grade_run, verdict_case
from agent.task.packs import PackError, TaskPack, load_pack
from agent.core.runtime import PolicySource
from agent.core.run import run_agent
from agent.tools import pack_registry
from agent.contracts.trace import write_events
from agent.coding.workspace import WorkspaceOptions
from agent.evaluation.external_grade import external_grade, truth_family

GENERATED = "generated:"


@dataclass
class EvalRun:
    """One run of one pack, as the report needs it (JSON-ready through ``to_dict``)."""

    pack: str
    run: int
    seed: int
    status: str
    stop_reason: str
    task_success: bool | None
    checks: dict[str, bool]
    metrics: dict[str, Any]
    seconds: float
    independent_failures: list[str] | None  # None: no independent grader for this pack's family
    case: str | None = None
    family: str | None = None  # the pack's family: its truth.json's, its task.json's, or the default
    answer: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def independent_success(self) -> bool | None:
        return None if self.independent_failures is None else not self.independent_failures

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "independent_success": self.independent_success}


def parse_generated(spec: str) -> int | None:
    """``generated:N`` or ``generated:FAMILY:N`` -> N; any other spec -> None. Raises PackError for a
    bad N or an unknown family."""
    if not spec.startswith(GENERATED):
        return None
    family, _, count = spec[len(GENERATED):].rpartition(":")
    if family and generator(family) is None:
        raise PackError(f"--packs {spec}: unknown family '{family}'; known: {', '.join(FAMILIES)}")
    try:
        n = int(count)
    except ValueError:
        raise PackError(f"--packs {spec}: expected generated:N or generated:FAMILY:N with N a whole number") from None
    if not 1 <= n <= 1000:
        raise PackError(f"--packs {spec}: N must be between 1 and 1000")
    return n


def find_packs(spec: str) -> list[TaskPack]:
    """A pack folder, a folder of pack folders (sorted by name), or a pack name the runner knows."""
    path = Path(spec).expanduser()
    if path.is_dir() and not (path / "task.json").is_file():
        packs = [TaskPack.load(child) for child in sorted(path.iterdir())
                 if child.is_dir() and (child / "task.json").is_file()]
        if not packs:
            raise PackError(f"--packs {path.name}: no pack folders (with task.json) inside")
    else:
        packs = [load_pack(path if path.is_dir() else spec)]
    for pack in packs:
        if not pack.expected_path.is_file():
            raise PackError(f"pack '{pack.name}': data/expected.json not found; eval needs the ground truth")
    return packs


def resolve_packs(spec: str, out_dir: Path, seed: int) -> list[TaskPack]:
    """Packs for ``--packs``; ``generated:N`` writes N packs under ``out_dir/packs`` first."""
    n = parse_generated(spec)
    if n is None:
        return find_packs(spec)
    family = spec[len(GENERATED):].rpartition(":")[0] or DEFAULT_FAMILY
    return [TaskPack.load(root) for root in generator(family)(out_dir / "packs", n, seed)]


def _progress(total: int, enabled: bool):
    from tqdm import tqdm
    return tqdm(total=total, desc="eval", unit="run", file=sys.stderr, disable=not enabled, dynamic_ncols=True)


def run_one(pack: TaskPack, policy: PolicySource, budgets: Budgets, k: int, artifact_dir: Path,
            mode: str | None = None, sampling: Sampling | None = None,
            workspace: WorkspaceOptions | None = None, grader: Path | None = None) -> EvalRun:
    expected = pack.load_expected()
    sampling = sampling or Sampling()
    if pack.task.workspace is not None:  # a fresh copy of the template in this run's folder
        workspace = replace(workspace or WorkspaceOptions(), directory=None, parent=artifact_dir)
    started = time.perf_counter()
    outcome = run_agent(pack, policy, budgets, artifact_dir=artifact_dir, mode=mode, sampling=sampling,
                        workspace=workspace, tools=pack_registry(pack))
    seconds = time.perf_counter() - started
    write_events(artifact_dir, outcome.events)  # for reading a failure afterwards; the report does not need it
    result = outcome.result
    metrics = result.metrics.model_dump() if result.metrics else {}
    checks = metrics.pop("checks", {}) or {}
    graded = external_grade(grader, pack.root, result, artifact_dir) if grader is not None else None
    return EvalRun(
        pack=pack.name, run=k, seed=sampling.seed if sampling.seed is not None else k, status=result.status,
        stop_reason=result.stop_reason, task_success=metrics.get("task_success"), checks=checks, metrics=metrics,
        seconds=round(seconds, 3),
        independent_failures=graded if graded is not None else grade_run(pack, artifact_dir / "workspace", result),
        case=verdict_case(pack, expected), family=truth_family(pack.root) or pack.family,
        answer=result.final.answer if result.final else None,
        error=f"{result.error.code}: {result.error.message}"[:300] if result.error else None)


def run_suite(packs: list[TaskPack], policy_for: Callable[[TaskPack, int], PolicySource], budgets: Budgets,
              *, runs: int, seed: int, artifact_root: Path, mode: str | None = None, sampling: Sampling | None = None,
              progress: bool = True, on_run: Callable[[EvalRun], None] | None = None,
              workspace: WorkspaceOptions | None = None, grader: Path | None = None) -> list[EvalRun]:
    """Every pack ``runs`` times; run k uses seed ``seed + k``. Returns the runs in order. ``grader``:
    the operator's script for the packs that carry a ``truth.json`` (``external_grade.py``)."""
    results: list[EvalRun] = []
    passed = 0
    with _progress(len(packs) * runs, progress) as bar:
        for pack in packs:
            for k in range(runs):
                run_sampling = (sampling or Sampling()).model_copy(update={"seed": seed + k})
                record = run_one(pack, policy_for(pack, k), budgets, k,
                                 artifact_root / pack.name / f"run-{k}", mode=mode, sampling=run_sampling,
                                 workspace=workspace, grader=grader)
                results.append(record)
                passed += bool(record.task_success)
                bar.set_postfix_str(f"{pack.name} {'PASS' if record.task_success else 'FAIL'} · {passed}/{len(results)}")
                bar.update(1)
                if on_run is not None:
                    on_run(record)
    return results
