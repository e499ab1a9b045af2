"""The conversation a continuation model is shown: its earlier (user turn, model turn) pairs, which
of the run's Observations and feedback lines they have shown, and the prompt state of a step.

The history only grows (a compact turn replaces it once it is too long), so a model's KV cache keeps
what it has seen: a failed Decision hidden from a step asked again stays hidden from every later
step, and a compact turn stands for the turns before it until the history is too long again. A
served model's tool calls are replayed by its own protocol, not from here.
"""

from __future__ import annotations

from typing import Any

from agent.contracts.decision import Observation
from agent.contracts.task import AnswerGuide, TaskSpec
from agent.models.model_policy import Candidate, DecisionRequest
from agent.prompts.prompting import Branch, PromptState, check_drafts, guide_check_lines, without_failed_turns


class Conversation:
    def __init__(self, history: tuple[tuple[str, str], ...], shown_observations: int):
        self.history: list[tuple[str, str]] = list(history)  # raw model text, prompt-only, never traced
        self.shown = (shown_observations, 0)  # Observations and feedback lines the history has shown
        self._turn: str | None = None  # the user turn of the call whose Decision is being parsed
        self._compacts = False  # that turn is a compact one

    def state(self, branch: Branch, task: TaskSpec, observations: list[Observation], feedback: list[str],
              budget_left: dict[str, Any], guide: AnswerGuide | None, checks: list[tuple]) -> PromptState:
        """What the model is shown at this step (``guide``: the answer guide, for a Final)."""
        self.history[:] = without_failed_turns(self.history, branch)
        return PromptState(
            goal=task.goal, observations=observations, feedback=feedback, budget_left=budget_left,
            tool_hints=task.hints, code_prompt=task.code_prompt, final_hints=list(guide.hints) if guide else [],
            check_lines=guide_check_lines(guide, checks) if guide else [], check_drafts=check_drafts(guide, checks),
            history=list(self.history), shown_observations=self.shown[0], shown_feedback=self.shown[1])

    def asked(self, request: DecisionRequest, candidate: Candidate) -> None:
        """A call of the conversation was answered: its turn is kept until its Decision is read (a
        structured Decision, a served model's, is no turn of this conversation)."""
        self._turn = request.turn() if candidate.decision is None else None
        self._compacts = candidate.decision is None and request.compacts()

    def answered(self, model_text: str, observations: int, feedback: int) -> None:
        """Append the pending turn with the model's Decision (``model_text``), and what it has shown."""
        if self._turn is None:
            return
        if self._compacts:
            self.history.clear()
        self.history.append((self._turn, model_text))
        self.shown = (observations, feedback)
        self._turn = None
