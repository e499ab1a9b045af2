"""One task run to a terminal state: ``run_agent`` picks the run's task strategy and hands the run to
the loop (``runtime.Run``).

The strategy of a run whose tools act on a workspace is the coding half's
(``agent/coding/strategy.py``, with the operator's ``WorkspaceOptions``); every other run's is the
record and fact questions' (``strategy.EvidenceStrategy``).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Iterable

from agent.coding import strategy as coding
from agent.coding.workspace import WorkspaceOptions
from agent.contracts.budgets import Budgets, Sampling
from agent.core.runtime import PolicySource, PriorTurns, Run, RunOutcome
from agent.core.strategy import EvidenceStrategy, TaskStrategy
from agent.task.packs import TaskPack
from agent.tools import ToolRegistry


def run_agent(pack: TaskPack, policy: PolicySource, budgets: Budgets | None = None, *, artifact_dir: Path,
              cancel: threading.Event | None = None, sink: Callable[[dict[str, Any]], None] | None = None,
              tools: ToolRegistry | None = None, mode: str | None = None,
              sampling: Sampling | None = None, allowed_tools: Iterable[str] | None = None,
              workspace: WorkspaceOptions | None = None, prior: PriorTurns | None = None) -> RunOutcome:
    """Run one task to a terminal state. ``policy`` may be a loaded Policy or a loader callable.
    ``allowed_tools`` narrows the pack's tools (MCP ones included); it never adds any. ``workspace``
    is the operator's choice for the workspace tools (``coding.workspace.WorkspaceOptions``). ``prior``
    carries a session's earlier turns (``runtime.PriorTurns``)."""

    def strategy(bound: TaskPack, registry: ToolRegistry) -> TaskStrategy:
        return coding.for_run(bound, registry, workspace) or EvidenceStrategy()

    run = Run(pack, policy, Budgets.layered(pack.task.budgets, budgets), artifact_dir=artifact_dir, cancel=cancel,
              sink=sink, tools=tools, mode=mode, sampling=sampling, allowed_tools=allowed_tools, strategy=strategy,
              prior=prior)
    return run.execute()
