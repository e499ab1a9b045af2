"""One goal's run from start to record: the task found (``goal_task.py``), the files read before, the
run, and what it changed kept in the run's folder (``changes.py``). The terminal's ``run`` and the
runner's jobs both go through ``run_goal``; the runner's job function is ``goal_job``.

The run's folder then holds ``task/task.json`` and ``task/discovery.json`` (what the runtime declared
and why), ``changes.json`` and ``changes.diff``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from agent.contracts.result import RunResult
from agent.contracts.decision import ToolErrorInfo
from agent.task.packs import TaskPack
from agent.coding.changes import Snapshot, load, record
from agent.coding.goal_task import GoalRefused, GoalTask, prepare_goal

#: runs a pack to its outcome (``runtime.run_agent`` with everything but the pack bound)
RunPack = Callable[[TaskPack], Any]
DISCOVERY_FILE = "task/discovery.json"


@dataclass(frozen=True)
class GoalOutcome:
    task: GoalTask
    #: ``runtime.RunOutcome``
    outcome: Any
    #: ``changes.record``'s public summary, with ``tests_pass_before``
    changes: dict[str, object]


def run_goal(root: Path, goal: str, run_dir: Path, run_pack: RunPack, *, protect: tuple[str, ...] = (),
             allow_unsandboxed: bool = False, ready: Callable[[GoalTask], bool] | None = None) -> GoalOutcome | None:
    """Find the task, run it, record its changes. ``ready(task)`` may stop it before the run (False:
    None is returned, nothing was run). GoalRefused / ``workspace.WorkspaceUnavailable`` when the
    task cannot be found or its tests cannot be run confined."""
    root = Path(root).expanduser().resolve()
    task = prepare_goal(root, goal, run_dir / "task", protect=protect, allow_unsandboxed=allow_unsandboxed)
    if ready is not None and not ready(task):
        return None
    before = Snapshot.take(root)
    outcome = run_pack(task.pack)
    summary = {**record(run_dir, before.changes(root), root=root), "tests_pass_before": task.tests_pass}
    return GoalOutcome(task, outcome, summary)


@dataclass(frozen=True)
class _Refused:
    """A job's outcome when its goal could not become a run (the store seals it with its run.finished)."""

    result: RunResult
    events: list[dict[str, Any]]


def goal_job(root: Path, goal: str, run_pack: Callable[..., Any], budgets: Any) -> Callable[..., Any]:
    """A job store run function (``job_store.RunFunction``) for a goal on the operator's folder
    ``root``: the store's pack argument is ignored (the task is found), and the request's own
    ``budgets`` are used (its explicitly set fields over what the task needs). The run's
    ``run.finished`` reaches the store only once the changes are recorded: a page that sees the run
    finished finds its diff."""
    def run(_pack: Any, policy: Any, _budgets: Any, **kwargs: Any) -> Any:
        from agent.coding.workspace import WorkspaceUnavailable

        run_dir = Path(kwargs["artifact_dir"]).parent
        sink, finished = kwargs.pop("sink", None), []

        def holding(event: dict[str, Any]) -> None:
            if event.get("type") == "run.finished":
                finished.append(event)
            elif sink is not None:
                sink(event)

        try:
            done = run_goal(root, goal, run_dir, lambda pack: run_pack(pack, policy, budgets, sink=holding, **kwargs))
        except (GoalRefused, WorkspaceUnavailable) as exc:
            return _Refused(RunResult(status="failed", stop_reason="runtime_error",
                                      error=ToolErrorInfo(code=exc.code, message=exc.message[:300])), [])
        finally:
            for event in finished:
                if sink is not None:
                    sink(event)
        assert done is not None
        return done.outcome
    return run


def job_changes(run_dir: Path) -> dict[str, object] | None:
    """What a goal job found and changed, for the runner's changes route (None: not a goal's run)."""
    try:
        discovery = json.loads((run_dir / DISCOVERY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return {"discovery": discovery, "changes": load(run_dir)}
