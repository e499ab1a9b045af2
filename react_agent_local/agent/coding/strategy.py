"""The coding half as the loop's task strategy (``agent/core/strategy.py``): a run whose tools act on a
workspace works in its folder and sandbox, follows the workspace's own next step in guided mode (a
read, a change, a run of the tests: ``workspace_evidence.next_step``), finishes only on a passing test
run of the current files, counts a repeated action as new when the files changed, and tries a
diagnosis's fix or sampled versions of a function on a scratch copy before the step's Decision
(``fix_trials.py``, ``version_trials.py``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Protocol

from agent.coding.fix_trials import Scratch, settle
from agent.coding.version_trials import settle as settle_versions
from agent.coding.version_trials import written_versions
from agent.coding.workspace import Workspace, WorkspaceOptions, WorkspaceUnavailable, prepare, sandbox_for
from agent.coding.workspace_evidence import Step, final_problems, next_step
from agent.contracts.decision import Observation, ToolErrorInfo
from agent.contracts.task import TaskSpec
from agent.prompts.prompting import Branch
from agent.shell_risk import ApprovalPolicy
from agent.task.packs import TaskPack
from agent.tools import ToolContext, ToolRegistry
from agent.tools.mcp_binding import ToolsUnavailable


class Services(Protocol):
    """What this strategy uses of the loop's ``core.strategy.Services``."""

    propose: Callable[..., Any]
    read: Callable[[Branch, Any], Any]
    emit: Callable[..., dict[str, Any]]
    observations: list[Observation]
    proposes_arguments: bool
    deadline: float | None
    cancel: Any


def for_run(pack: TaskPack, tools: ToolRegistry, options: WorkspaceOptions | None) -> "WorkspaceStrategy | None":
    """The strategy of a run whose tools include a workspace tool; None for any other run."""
    if not any(tools.get(name).workspace for name in tools.names):
        return None
    return WorkspaceStrategy(pack.task, pack.root, options, tools)


class WorkspaceStrategy:
    asks_required_tools = False  # the workspace's own steps replace the required tools' order

    def __init__(self, task: TaskSpec, pack_root: Path, options: WorkspaceOptions | None, tools: ToolRegistry):
        self.task, self.pack_root, self.options, self.tools = task, pack_root, options, tools
        self.ctx: ToolContext | None = None
        self.workspace: Workspace | None = None
        self.failed_fixes: list[tuple[str, str, str]] = []  # (path, function, fix) a trial failed
        self._step: Step | None = None  # the step the latest action branch asks for

    def bind(self, ctx: ToolContext, *, run_dir: Any, deadline: float | None,
             emit: Callable[..., dict[str, Any]]) -> ToolContext:
        """``ctx`` with the run's workspace, its sandbox, the approval policy and the operator's approver."""
        options = self.options or WorkspaceOptions()
        try:
            workspace = prepare(self.task, self.pack_root, options, run_dir)
            sandbox = sandbox_for(workspace, network=options.network)
        except WorkspaceUnavailable as exc:
            raise ToolsUnavailable("runtime_error", ToolErrorInfo(code=exc.code, message=exc.message[:300])) from None
        approval = options.approval if options.approval is not None else ApprovalPolicy(mode="ask_on_risk")
        self.ctx = replace(ctx, workspace=workspace, sandbox=sandbox, approval=approval, approver=options.approver,
                           approval_seconds=options.approval_seconds, deadline=deadline, emit=emit)
        self.workspace = workspace
        emit("workspace.ready", sandbox=self.ctx.sandbox.kind, **self.workspace.describe())
        return self.ctx

    def next_action(self, observations: list[Observation], mode: str) -> Branch | None:
        self._step = None
        if mode == "free":
            return None
        step = next_step(self.task, observations, self.workspace, self.failed_fixes)
        if step is None:
            return None
        self._step = step
        return Branch("action", tool=step.tool, target=step.target, narrowed=step.narrowed, drafts=step.drafts,
                      code_field=step.code_field, explore=step.explore, spec=step.spec,
                      summary=self.task.summaries.get(step.tool) or self.tools.get(step.tool).summary)

    def final_problems(self, observations: list[Observation], evidence_ids: list[str]) -> list[str]:
        return final_problems(self.task, observations, self.workspace, evidence_ids)

    def action_state(self, tool: str) -> dict[str, str]:
        """The files a workspace action acts on: the same test command after a fix is progress, the
        same command on the same files is not."""
        if self.workspace is None or tool not in self.tools.names or not self.tools.get(tool).workspace:
            return {}
        return {"files": self.workspace.digest()}

    def before_decision(self, branch: Branch, services: Services) -> Branch:
        step = self._step
        if step is None or branch.kind != "action":
            return branch
        if step.trial is not None:                           # a diagnosis tried first
            return self._try_fixes(branch, step, services)
        if step.versions is not None and branch.explore:     # sampled versions tried first
            return self._try_versions(branch, step, services)
        return branch

    def _try_fixes(self, branch: Branch, step: Step, services: Services) -> Branch:
        """The step's diagnosis tried on a scratch copy before any code is written (``fix_trials.py``)."""
        scratch = Scratch.open(self.ctx) if services.proposes_arguments else None
        if scratch is None:
            return branch
        with scratch:
            settled, failed = settle(
                branch, step.trial,
                lambda probe, wider: services.propose(probe, arguments_only=True, wider=wider),
                services.read, scratch, services.emit, deadline=services.deadline, cancel=services.cancel)
        self.failed_fixes += [(step.trial.path, step.trial.name, fix) for fix in failed]
        return settled

    def _try_versions(self, branch: Branch, step: Step, services: Services) -> Branch:
        """The step's sampled versions tried on a scratch copy before one is written (``version_trials.py``)."""
        scratch = Scratch.open(self.ctx) if services.proposes_arguments else None
        if scratch is None:
            return branch
        path, name = step.versions
        failed = written_versions(services.observations, self.workspace, path, name)
        with scratch:
            return settle_versions(branch, path, name, lambda probe: services.propose(probe, aside=True),
                                   services.read, scratch, services.emit, failed, deadline=services.deadline,
                                   cancel=services.cancel)
