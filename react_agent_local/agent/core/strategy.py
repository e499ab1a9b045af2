"""The task strategy: what the loop asks of the kind of task a run works on.

The loop (``runtime.Run.execute``) is the same for every task. Where a kind of task needs more than
the evidence questions' order (``next_ask.py``) and the evidence gate (``step_evidence.premature``),
it says so through these five answers, and the loop knows no more of it:

    bind             the run's tool context before the first step (a folder, its sandbox)
    next_action      its own next action in guided mode, or None for the evidence questions' ask
    final_problems   what a Final still lacks beyond the evidence gate
    action_state     what makes a repeated action new (the files it acts on)
    before_decision  what to try before the step's Decision (a fix tried on a scratch copy)

``EvidenceStrategy`` is the record and fact questions': nothing beyond the evidence. The coding
half's is ``agent/coding/strategy.py``; ``run.py`` picks one for a run. A strategy holds the state of
one run (one instance per run).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from agent.contracts.decision import ActionDecision, FinalDecision, Observation
from agent.models.model_policy import Candidate
from agent.prompts.prompting import Branch
from agent.task.packs import TaskPack
from agent.tools import ToolContext, ToolRegistry


@dataclass(frozen=True)
class Services:
    """What the loop lends a strategy's ``before_decision``: the policy's proposals outside the
    conversation, their Decisions, the trace and the run's limits."""

    #: ``propose(branch, arguments_only=, wider=, aside=)``: one candidate for a probe of ``branch``
    propose: Callable[..., Candidate]
    #: ``read(branch, candidate)``: the candidate's Decision (``DecisionError`` when it is none)
    read: Callable[[Branch, Candidate], ActionDecision | FinalDecision]
    emit: Callable[..., dict[str, Any]]
    observations: list[Observation]
    proposes_arguments: bool
    deadline: float | None
    cancel: threading.Event


class TaskStrategy(Protocol):
    #: guided mode asks for the task's required tools in order (False: ``next_action`` replaces it)
    asks_required_tools: bool

    def bind(self, ctx: ToolContext, *, run_dir: Any, deadline: float | None,
             emit: Callable[..., dict[str, Any]]) -> ToolContext:
        """The run's tool context; ``tools.mcp_binding.ToolsUnavailable`` when the run cannot start."""
        ...

    def next_action(self, observations: list[Observation], mode: str) -> Branch | None: ...

    def final_problems(self, observations: list[Observation], evidence_ids: list[str]) -> list[str]: ...

    def action_state(self, tool: str) -> dict[str, str]: ...

    def before_decision(self, branch: Branch, services: Services) -> Branch: ...


class EvidenceStrategy:
    """Questions answered from records and facts: the evidence questions' order and gate, nothing more."""

    asks_required_tools = True

    def bind(self, ctx: ToolContext, *, run_dir: Any, deadline: float | None,
             emit: Callable[..., dict[str, Any]]) -> ToolContext:
        return ctx

    def next_action(self, observations: list[Observation], mode: str) -> Branch | None:
        return None

    def final_problems(self, observations: list[Observation], evidence_ids: list[str]) -> list[str]:
        return []

    def action_state(self, tool: str) -> dict[str, str]:
        return {}

    def before_decision(self, branch: Branch, services: Services) -> Branch:
        return branch


#: picks the strategy of a run from its pack and its bound tools (``run.py``)
StrategySource = Callable[[TaskPack, ToolRegistry], TaskStrategy]
