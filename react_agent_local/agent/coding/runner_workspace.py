"""What the runner lets a run do with the workspace tools: the operator's choices, and the rules a
request is held to.

The operator chooses when starting the runner (``algolab_local_runner.py --workspace DIR --approval
MODE --approval-seconds N``); a request can only narrow those choices:

- **Which folder.** A pack that brings its own repository (``task.json`` ``workspace.template``, the
  fix-the-failing-test packs) always works on a fresh copy of it inside the run's own folder
  (``<runs-dir>/<run-id>/workspace``): the copy belongs to the run, nothing of the operator's is
  touched, so no ``--workspace`` is needed. A pack whose workspace tools have no template works in
  the operator's ``--workspace DIR``; without one such a run is refused before it is queued
  (``workspace_not_configured``), and while one run uses that folder a second is refused
  (``workspace_busy``). A goal in words (``RunRequest.goal``, ``agent/coding/``) always works in the
  operator's folder, so it too is refused without one. No request field names a folder: ``RunRequest`` forbids unknown fields, so
  ``workspace``, ``cwd``, ``root`` ... are a 422.
- **Which tools.** The pack's, narrowed by the request (``routes.context.check_narrowed_tools``), never more.
- **Which approval policy.** The operator's ``--approval`` (default ``ask_on_risk``); a request's
  ``approval`` may only be one under which nothing runs without the operator's yes that would not
  under the operator's (``STRICTER``). ``--unsandboxed`` does not exist on the runner: every
  workspace command and file operation of a runner job runs in the sandbox, or not at all.

Nothing here waits for an answer: the questions and their answers are ``approvals.ApprovalDesk``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agent.coding.approvals import Approver
from agent.tools import WORKSPACE_TOOLS

ApprovalMode = Literal["never_ask", "ask_on_risk", "always_ask"]
APPROVAL_MODES: tuple[str, ...] = ("never_ask", "ask_on_risk", "always_ask")
#: the runner's default: longer than the CLI's, a learner reads the card before answering
RUNNER_APPROVAL_SECONDS = 120.0
#: operator mode -> modes a request may choose. ``never_ask`` refuses whatever would be asked and
#: ``always_ask`` asks for every command, so each is stricter than ``ask_on_risk``; neither is
#: stricter than the other (``always_ask`` lets a destructive command run once someone says yes).
STRICTER: dict[str, frozenset[str]] = {
    "ask_on_risk": frozenset(APPROVAL_MODES),
    "never_ask": frozenset({"never_ask"}),
    "always_ask": frozenset({"always_ask"}),
}

#: where a job's workspace comes from (public: it goes into the job's record, never a path)
Source = Literal["template", "operator"]


class RunRefused(Exception):
    """The request asks for more than the operator allowed, or for what is not configured."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class RunnerWorkspace:
    """The operator's workspace choices for every job of one runner."""

    #: the operator's folder for packs without a template (None: such packs are refused)
    directory: Path | None = None
    approval: ApprovalMode = "ask_on_risk"
    approval_seconds: float = RUNNER_APPROVAL_SECONDS

    def __post_init__(self) -> None:
        if self.approval not in APPROVAL_MODES:
            raise ValueError(f"approval must be one of {', '.join(APPROVAL_MODES)}")
        if not 1 <= float(self.approval_seconds) <= 3600:
            raise ValueError("approval seconds must be 1..3600")
        if self.directory is not None:
            folder = Path(self.directory).expanduser()
            if folder.is_symlink() or not folder.is_dir():
                raise ValueError("--workspace must name an existing folder (not a link)")
            object.__setattr__(self, "directory", folder.resolve())

    def plan(self, task: Any, tool_names: list[str], requested: str | None) -> dict[str, Any] | None:
        """The public workspace plan of a run (``{"source", "approval"}``), None when its tools need no
        workspace; RunRefused when the request asks for more than the operator allowed."""
        if requested is not None and requested not in STRICTER[self.approval]:
            raise RunRefused(400, "approval_not_allowed",
                             f"the runner's operator set the approval policy {self.approval}; a request may only "
                             f"choose a stricter one ({', '.join(sorted(STRICTER[self.approval]))})")
        if not WORKSPACE_TOOLS & set(tool_names):
            return None
        spec = task.workspace
        if spec is not None and spec.template:
            source: Source = "template"
        elif self.directory is not None:
            source = "operator"
        else:
            raise RunRefused(400, "workspace_not_configured",
                             "this pack's workspace tools work in the operator's folder, and this runner has none: "
                             "start it with --workspace DIR (a request can never name a folder)")
        return {"source": source, "approval": requested or self.approval}

    def goal_plan(self, requested: str | None) -> dict[str, Any]:
        """The public plan of a goal's run: always the operator's folder (a request never names one);
        RunRefused when this runner has none or the request asks for a looser approval policy."""
        if requested is not None and requested not in STRICTER[self.approval]:
            raise RunRefused(400, "approval_not_allowed",
                             f"the runner's operator set the approval policy {self.approval}; a request may only "
                             f"choose a stricter one ({', '.join(sorted(STRICTER[self.approval]))})")
        if self.directory is None:
            raise RunRefused(400, "workspace_not_configured",
                             "a goal works on the operator's folder, and this runner has none: start it with "
                             "--workspace DIR (a request can never name a folder)")
        return {"source": "operator", "approval": requested or self.approval}

    def options(self, plan: dict[str, Any], approver: Approver) -> Any:
        """``workspace.WorkspaceOptions`` of one job: always sandboxed, no network, the desk's approver."""
        from agent.shell_risk import ApprovalPolicy
        from agent.coding.workspace import WorkspaceOptions

        mode = plan["approval"] if plan.get("approval") in STRICTER[self.approval] else self.approval
        return WorkspaceOptions(directory=self.directory if plan.get("source") == "operator" else None,
                                approval=ApprovalPolicy(mode=mode), approver=approver,
                                approval_seconds=float(self.approval_seconds), allow_unsandboxed=False, network=False)

    def public(self) -> dict[str, Any]:
        """What ``/status`` says: whether a folder is configured (never which), the policy, the deadline."""
        return {"operator_folder": self.directory is not None, "approval": self.approval,
                "approval_seconds": float(self.approval_seconds), "approval_modes_allowed": sorted(STRICTER[self.approval]),
                "sandboxed": True, "network": False}


def check_folder(raw: str) -> str | None:
    """Why ``--workspace`` cannot be used (None: it can); the message names no path."""
    folder = Path(raw).expanduser()
    if folder.is_symlink():
        return "--workspace must not be a link"
    if not folder.is_dir():
        return "--workspace must name an existing folder"
    if not os.access(folder, os.R_OK | os.W_OK | os.X_OK):
        return "--workspace must be a folder this user can read and write"
    return None
