"""The workspace flags the terminal's ``run`` and ``eval`` share, and the ``WorkspaceOptions`` they make.

They are the operator's choices (a request to the runner never makes them): the folder, when a
bash command needs a yes, and whether a command may run unsandboxed. ``cli.py`` and
``evaluation/command.py`` both build their parsers from here, so neither imports the other.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.coding.approvals import Approver
from agent.coding.workspace import WorkspaceOptions
from agent.shell_risk import ApprovalPolicy


def add_workspace_arguments(parser: argparse.ArgumentParser, *, directory: bool = True) -> None:
    """The workspace flags of ``run`` (and, without ``--workspace``, of ``eval``): the operator's choices."""
    if directory:
        parser.add_argument("--workspace", default=None, metavar="DIR",
                            help="the folder the workspace tools work in (default: a fresh copy of the pack's "
                                 "repository template in the run's folder)")
    parser.add_argument("--approval", default="ask_on_risk", choices=["never_ask", "ask_on_risk", "always_ask"],
                        help="when a bash command needs the operator's yes (a y/N prompt on a terminal; "
                             "without one, or in eval, asking means refused)")
    parser.add_argument("--unsandboxed", action="store_true",
                        help="run workspace commands on the host when no sandbox can start (the operator's "
                             "explicit opt-out; never available to a request)")


def workspace_options(args: argparse.Namespace, approver: Approver | None) -> WorkspaceOptions:
    """The ``WorkspaceOptions`` of the workspace flags."""
    directory = getattr(args, "workspace", None)
    return WorkspaceOptions(directory=Path(directory).expanduser() if directory else None,
                            approval=ApprovalPolicy(mode=args.approval), approver=approver,
                            allow_unsandboxed=bool(args.unsandboxed))
