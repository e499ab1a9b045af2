"""The policy as the loop calls it, traced: loading it, one call's events and usage, its Candidate read as a Decision.

``load_policy`` loads a policy from its loader (``model.load.*`` events) or takes a loaded one.

``ModelCall(trace, step, attempt).propose(policy, request, usage)`` emits ``model.started`` (or
``model.repair.started`` for a repair), forwards the policy's progress as ``model.progress``
events (kinds and character counts, never the text, at most one per ``PROGRESS_SECONDS``), counts
the call into ``Usage`` and emits ``model.completed`` with the output's SHA-256 (and
``model.call.repaired`` for what a served reply needed fixing). A ``ModelUnavailable`` from the
policy is traced as ``model.failed`` and raised as is: what it ends is the runtime's decision.

``decision_of`` reads a Candidate as a Decision the way ``decisions.py`` parses text, whether the
policy wrote text after the branch's prefix or returned the Decision as structured data.
"""

from __future__ import annotations

import json
import time
from typing import Any

from agent.contracts.decision import ActionDecision, FinalDecision
from agent.contracts.budgets import Usage
from agent.models.decisions import DecisionError, parse_decision
from agent.models.model_policy import Candidate, DecisionRequest, ModelUnavailable, Policy
from agent.prompts.prompting import Branch
from agent.contracts.trace import Trace, sha256_text
from agent.util.canonical import canonical_json

PROGRESS_SECONDS = 1.0  # at most one model.progress event per call and second
CALL_TOKENS = ("input_tokens", "output_tokens", "cached_tokens", "forced_tokens", "drafted_tokens", "restored_tokens")


class ModelCall:
    """One call at ``step`` and ``attempt`` (0: the step's first; more: its repairs)."""

    def __init__(self, trace: Trace, step: int, attempt: int):
        self.trace, self.step, self.attempt = trace, step, attempt
        self.active = True
        self.last = time.monotonic()

    def progress(self, kind: str, chars: int) -> None:
        """``DecisionRequest.on_progress``: the output so far, as counts only."""
        now = time.monotonic()
        if self.active and now - self.last >= PROGRESS_SECONDS:
            self.last = now
            self._emit("model.progress", kind=kind, chars=chars)

    def propose(self, policy: Policy, request: DecisionRequest, usage: Usage) -> Candidate:
        kind = "model" if request.repair_error is None else "model.repair"
        self._emit(f"{kind}.started", branch=request.branch.kind, tool=request.branch.tool,
                   max_new_tokens=request.max_new_tokens)
        try:
            candidate = policy.propose(request)
        except ModelUnavailable as exc:
            self.active = False
            self._emit("model.failed", code=exc.code, message=exc.message)
            raise
        self.active = False
        usage.add_call(candidate)
        self._emit(f"{kind}.completed", model=policy.description.public(),
                   usage={name: getattr(candidate, name) for name in CALL_TOKENS},
                   latency_ms=round(candidate.latency_ms, 3),
                   output_sha256=sha256_text(candidate.text if candidate.decision is None
                                             else canonical_json(candidate.decision)),
                   finish_reason=candidate.finish_reason, protocol_repairs=candidate.protocol_repairs,
                   # a schema past what the backend's grammar compiler takes constrained less, or nothing
                   **({"grammar": candidate.grammar} if candidate.grammar in ("relaxed", "none") else {}))
        if candidate.call_repairs:  # what a served reply needed fixing: kinds, hashes and field names, no text
            self._emit("model.call.repaired", repairs=[r.model_dump(mode="json") for r in candidate.call_repairs])
        return candidate

    def _emit(self, event_type: str, **payload: Any) -> None:
        self.trace.emit(event_type, "model", self.step, self.attempt, **payload)


def load_policy(source: Any, trace: Trace) -> Policy:
    """The policy: ``source`` itself when loaded already, else what the loader returns, traced as
    ``model.load.*``. ``ModelUnavailable`` (the operator's fault) is traced and raised as is."""
    if not callable(source) or hasattr(source, "propose"):
        return source
    trace.emit("model.load.started", "model")
    started = time.perf_counter()
    try:
        policy = source()
    except ModelUnavailable as exc:
        trace.emit("model.load.failed", "model", code=exc.code, message=exc.message)
        raise
    trace.emit("model.load.completed", "model", model=policy.description.public(),
               load_ms=round((time.perf_counter() - started) * 1000, 1))
    return policy


def decision_of(branch: Branch, candidate: Candidate, tool_names: list[str]) -> ActionDecision | FinalDecision:
    """The candidate as a Decision; DecisionError (the model's fault) when it is none."""
    # A generation cut off at its token limit is never a Decision, even where the cut happens
    # to leave valid JSON (finish_reason "length" is truncation, never a Final).
    if candidate.finish_reason == "length":
        raise DecisionError("truncated", "the output was cut off at the token limit; write a shorter Decision")
    if candidate.fault is not None:  # a protocol fault the policy saw (e.g. no tool call at all)
        raise DecisionError(*candidate.fault)
    if candidate.decision is not None:  # structured (native tool calling): validated like text
        return parse_decision("", json.dumps(candidate.decision, ensure_ascii=False), "", tool_names=tool_names)
    return parse_decision(branch.prefix, candidate.text, branch.suffix, tool_names=tool_names)
