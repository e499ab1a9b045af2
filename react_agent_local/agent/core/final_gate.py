"""A proposed Final judged: the evidence gate (``step_evidence.premature`` and what the task strategy
still asks), then, where it passes, the claims of the answer (``agent/gate/claims.py``) on the
Observations it cites. Pure: the loop records the judgement and decides what follows."""

from __future__ import annotations

from dataclasses import dataclass

from agent.contracts.decision import FinalDecision, Observation
from agent.contracts.result import UnverifiedFinal
from agent.core.step_evidence import StepEvidence, premature
from agent.core.strategy import TaskStrategy
from agent.gate.claims import claim_problems

MAX_NAMED_CLAIMS = 5
MESSAGE_CHARS = 600


@dataclass(frozen=True)
class Judgement:
    #: why the Final comes too early (the evidence gate); its claims were not checked then
    premature: list[str]
    #: the false claims of its answer, each named
    claims: list[str]
    #: a stated number no cited Observation holds (or holds as another fact's, or as an unsound
    #: computation's): evidence first
    unfounded: bool = False

    @property
    def accepted(self) -> bool:
        return not self.premature and not self.claims

    @property
    def message(self) -> str:
        if self.accepted:
            return "final accepted"
        if self.premature:
            return ("premature final: " + "; ".join(self.premature))[:MESSAGE_CHARS]
        return ("false claims in the final: " + "; ".join(self.claims))[:MESSAGE_CHARS]


def judge_final(decision: FinalDecision, evidence: StepEvidence, observations: list[Observation], goal: str,
                strategy: TaskStrategy) -> Judgement:
    early = premature(evidence, decision.evidence_ids) + strategy.final_problems(observations, decision.evidence_ids)
    if early:
        return Judgement(early, [])
    known = {o.id: o for o in observations}
    cited = [known[i] for i in decision.evidence_ids if known[i].ok]
    found = claim_problems(decision.answer, cited, goal, evidence.guide, list(evidence.checks),
                           [o for o in observations if o.ok])
    return Judgement([], [p.text for p in found][:MAX_NAMED_CLAIMS],
                     unfounded=any(p.kind in ("number", "attribution", "computation") for p in found))


def better_unverified(best: UnverifiedFinal | None, decision: FinalDecision, claims: list[str]) -> UnverifiedFinal:
    """The refused Final with the fewest failed claims so far (the later one of equals)."""
    if best is not None and len(claims) > len(best.unverified):
        return best
    return UnverifiedFinal(answer=decision.answer, evidence_ids=list(decision.evidence_ids), unverified=claims)
