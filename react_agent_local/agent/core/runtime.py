"""The controlled ReAct loop (docs/ARCHITECTURE.md, "One step, end to end").

One step: budget check -> ask the policy for one Decision -> parse/repair -> validate -> guards ->
run the tool (retry) -> observe -> next; or, for a Final, the evidence gate and the claims -> finish.
The model only proposes; ``Run.execute`` decides what is asked, what runs, what is recorded and when
the run ends, with exactly one ``run.finished`` event. Its helpers are pure or behind one call: the
evidence of a step (``step_evidence``), what to ask next (``next_ask``), the task strategy
(``strategy``), a traced model call (``model_call``), the conversation shown (``conversation``), a
Final judged (``final_gate``), an action run with retries (``dispatch``), a served reply's calls
(``tool_batch``), limits, guards and the end (``outcome``).

Faults by who is at fault:
    model faults     bad JSON, unknown tool, bad arguments, premature Final -> feedback, loop goes on
    tool faults      ToolError (retryable or not), timeouts                 -> failed Observation
    operator faults  ModelUnavailable while loading                         -> failed/model_unavailable
    anything else                                                           -> failed/runtime_error
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable

from agent.contracts.budgets import Budgets, Sampling, Usage
from agent.contracts.decision import ActionDecision, FinalDecision, Observation, ToolErrorInfo
from agent.contracts.result import UnverifiedFinal
from agent.contracts.trace import Trace
from agent.core.conversation import Conversation
from agent.core.dispatch import Dispatch
from agent.core.final_gate import better_unverified, judge_final
from agent.core.metrics import RunRecord
from agent.core.next_ask import decision_summary, next_ask
from agent.core.outcome import Guards, Limits, PolicySource, PriorTurns, RunOutcome, Stop, finish
from agent.core.step_evidence import StepEvidence, step_evidence
from agent.core.strategy import EvidenceStrategy, Services, StrategySource
from agent.core.tool_batch import Batch, Call, plan
from agent.gate.operands import check_operands
from agent.models.decisions import DecisionError
from agent.models.model_call import ModelCall, decision_of, load_policy
from agent.models.model_policy import Candidate, DecisionRequest, ModelUnavailable
from agent.prompts.prompting import INVALID_TURN, Branch, PromptState, model_turn
from agent.task.packs import TaskPack, goal_language
from agent.tools import ArgumentError, ToolContext, ToolRegistry
from agent.tools.mcp_binding import ToolsUnavailable, bind_tools
from agent.util.canonical import canonical_json as canonical

__all__ = ["PolicySource", "PriorTurns", "Run", "RunOutcome"]


class Run:
    """The state of one run; ``execute`` is the loop."""

    def __init__(self, pack: TaskPack, policy: PolicySource, budgets: Budgets, *, artifact_dir: Path,
                 cancel: threading.Event | None, sink: Callable[[dict[str, Any]], None] | None,
                 tools: ToolRegistry | None, mode: str | None, sampling: Sampling | None = None,
                 allowed_tools: Iterable[str] | None = None, strategy: StrategySource | None = None,
                 prior: PriorTurns | None = None):
        self.pack, self.budgets, self.sampling = pack, budgets, sampling or Sampling()
        self.policy_source, self.policy = policy, None
        self.tools, self.mcp_tools = tools, None
        self.allowed_tools = set(allowed_tools) if allowed_tools is not None else None
        self.strategy_source = strategy or (lambda pack, tools: EvidenceStrategy())
        self.strategy = EvidenceStrategy()  # the run's, once its tools are bound (``strategy.py``)
        self.mode = mode or pack.task.mode
        self.language = goal_language(pack.task.goal)
        self.cancel = cancel or threading.Event()
        self.trace = Trace(sink)
        self.ctx = ToolContext(knowledge_dir=pack.knowledge_dir, artifact_dir=Path(artifact_dir), pack_dir=pack.root)
        self.started = time.monotonic()
        self.deadline = self.started + budgets.max_seconds
        self.usage = Usage()
        self.limits = Limits(budgets, self.usage, self.deadline, self.cancel)
        self.record = RunRecord(usage=self.usage)
        self.guards = Guards(self.trace, self.record)
        prior = prior or PriorTurns()  # a session's earlier turns: their evidence stays citable
        self.observations: list[Observation] = list(prior.observations)
        self._prior = len(prior.observations)
        self.evidence: StepEvidence | None = None  # of the Observations so far, rebuilt when one is added
        self.feedback: list[str] = list(prior.notes)
        self.conversation = Conversation(prior.history, len(self.observations))
        self._reply: Candidate | None = None  # the reply the latest Decision came in (its further calls)
        self.batch = Batch([], [])  # this step's calls of that reply (``tool_batch.py``)
        self._unverified: UnverifiedFinal | None = None  # the best Final refused for its claims so far
        # a Final was refused: the next ones are sampled more widely; ... for a number no Observation
        # holds: the next free step offers tools only
        self._refused = self._unfounded = False
        self.step = 0

    # -- the loop ---------------------------------------------------------------------------

    def execute(self) -> RunOutcome:
        final: FinalDecision | None = None
        error: ToolErrorInfo | None = None
        try:
            self._bind_tools()
            self.trace.emit("run.started", "run", task_id=self.pack.task.id, mode=self.mode,
                            budgets=self.budgets.model_dump(), sampling=self.sampling.model_dump(),
                            required_tools=list(self.pack.task.required_tools), tools=list(self.tools.names))
            self._load_policy()
            self.evidence = self._evidence()
            while True:
                branch = self.strategy.next_action(list(self.observations), self.mode) or next_ask(
                    self.pack.task, self.evidence, mode=self.mode, tools=self.tools, language=self.language,
                    ask_required=self.strategy.asks_required_tools)
                if self._refused and branch.kind != "action":  # the likeliest Final was refused: sample wider
                    branch = replace(branch, explore=True)
                if self._unfounded and branch.kind == "free":  # a number no Observation holds: evidence first
                    branch = replace(branch, evidence_ids=())
                self.limits.before_step(needs_tool=branch.kind == "action")
                self.step += 1
                self.usage.steps += 1
                self.trace.emit("budget", "run", self.step, remaining=self.limits.remaining())
                branch = self.strategy.before_decision(branch, self._services())  # e.g. a fix tried first
                decision = self._decide(branch)                                   # generate, parse, repair
                if isinstance(decision, FinalDecision):
                    if self._accept_final(decision):                              # evidence gate + claims
                        final = decision
                        raise Stop("completed")
                    continue
                self._unfounded = False
                for call in self._batch(decision).calls:                          # the reply's calls, in order
                    self.usage.action_attempts += 1
                    arguments = self._validate(call)                              # argument contract
                    if arguments is None:
                        continue
                    normalized = arguments.model_dump()
                    self._guard_repeated_action(call.tool, normalized)           # loop guard
                    ran = self.dispatch.run(call, arguments, normalized, self.batch, self.step)  # tool, retries
                    self._observe(call.tool, ran.result, ran.failure, **call.where)  # Observation + guard
                    if ran.timed_out:
                        raise Stop("timeout")
        except Stop as stop:
            stop_reason, error = stop.stop_reason, stop.error
        except Exception as exc:  # noqa: BLE001 -- the run must end with run.finished, whatever happened
            stop_reason = "runtime_error"
            error = ToolErrorInfo(code="runtime_error", message=f"{type(exc).__name__}: {exc}"[:300])
        return self._finish(stop_reason, final, error)

    def _bind_tools(self) -> None:
        """The run's tools and MCP servers (closed by ``_finish``), its strategy and the tool context
        the strategy binds, or no run at all."""
        try:
            self.tools, self.mcp_tools = bind_tools(self.pack, self.tools, self.allowed_tools, cancel=self.cancel,
                                                    deadline=self.deadline, emit=self._tool_event)
            self.strategy = self.strategy_source(self.pack, self.tools)
            self.ctx = self.strategy.bind(self.ctx, run_dir=self.ctx.artifact_dir.parent, deadline=self.deadline,
                                          emit=self._tool_event)
        except ToolsUnavailable as exc:
            raise Stop(exc.stop_reason, exc.error) from None
        self.record.context = self.ctx
        self.dispatch = Dispatch(self.tools, self.ctx, self.limits, self.trace)

    def _tool_event(self, kind: str, **data: Any) -> dict[str, Any]:
        return self.trace.emit(kind, "tool", self.step, **data)

    def _evidence(self) -> StepEvidence:
        return step_evidence(self.pack.task, self.observations, self.tools, self.pack.guide, self.language, self._prior)

    # -- the model --------------------------------------------------------------------------

    def _load_policy(self) -> None:
        try:
            self.policy = load_policy(self.policy_source, self.trace)
        except ModelUnavailable as exc:
            raise Stop("model_unavailable", ToolErrorInfo(code=exc.code, message=exc.message)) from None

    def _decide(self, branch: Branch) -> ActionDecision | FinalDecision:
        """Generate one Decision, repairing it in the same step up to ``max_retries`` times."""
        last: DecisionError | None = None
        for attempt in range(self.budgets.max_retries + 1):
            if attempt:
                self.limits.time_and_tokens()
            candidate = self._generate(branch, attempt, None if last is None else f"{last.code}: {last.message}")
            try:
                decision = decision_of(branch, candidate, self.tools.names)
            except DecisionError as error:
                self._answered(INVALID_TURN)  # an invalid output is never echoed back to the model
                self.trace.emit("decision.invalid", "decision", self.step, attempt, **error.public())
                if last is None:
                    self.usage.fault()
                last = error
                continue
            self._answered(model_turn(branch.prefix + candidate.text + branch.suffix))
            self._reply = candidate
            summary = decision_summary(branch, decision)
            if attempt:
                self.usage.recover()
                self.trace.emit("decision.repaired", "decision", self.step, attempt, decision=decision.model_dump(),
                                decision_summary=summary, repairs=attempt)
            else:
                self.trace.emit("decision.valid", "decision", self.step, decision=decision.model_dump(),
                                decision_summary=summary)
            return decision
        raise Stop("invalid_decision", ToolErrorInfo(code="invalid_decision", message=f"{last.code}: {last.public()['error']}"))

    def _services(self) -> Services:
        """What the strategy's ``before_decision`` may use: proposals outside the conversation."""
        return Services(propose=lambda probe, **how: self._generate(probe, 0, None, **how),
                        read=lambda probe, candidate: decision_of(probe, candidate, self.tools.names),
                        emit=self._tool_event, observations=self.observations,
                        proposes_arguments=self.policy.proposes_arguments, deadline=self.deadline, cancel=self.cancel)

    def _generate(self, branch: Branch, attempt: int, repair_error: str | None, *, arguments_only: bool = False,
                  wider: bool = False, aside: bool = False) -> Candidate:
        call = ModelCall(self.trace, self.step, attempt)
        sampling = self.sampling.for_call(self.usage.model_calls)
        sampling = sampling.wider() if wider else sampling  # a trial's fix failed: the next one is drawn wider
        request = DecisionRequest(
            branch=branch, state=self._prompt_state(branch), tools=self.tools,
            max_new_tokens=self.budgets.new_tokens(self.usage, code=branch.code_field is not None and not arguments_only),
            sampling=sampling, repair_error=repair_error, deadline=self.deadline, cancel=self.cancel,
            on_progress=call.progress, arguments_only=arguments_only)
        try:
            candidate = call.propose(self.policy, request, self.usage)
        except ModelUnavailable as exc:
            raise Stop(exc.stop_reason, ToolErrorInfo(code=exc.code, message=exc.message)) from None
        if not (arguments_only or aside):  # a trial's probe or draw is no turn of the conversation
            self.conversation.asked(request, candidate)
        if candidate.finish_reason == "cancelled" or self.cancel.is_set():
            raise Stop("cancelled")
        if candidate.finish_reason == "deadline":
            raise Stop("timeout")
        self.limits.time_and_tokens()
        return candidate

    def _prompt_state(self, branch: Branch) -> PromptState:
        checks = [(c.label, c.left, c.op, c.right, c.holds) for c in self.evidence.checks]
        return self.conversation.state(branch, self.pack.task, self.observations, self.feedback, self.limits.remaining(),
                                       self.evidence.guide if branch.kind != "action" else None, checks)

    def _answered(self, model_text: str) -> None:  # the Decision read: its turn joins the conversation
        self.conversation.answered(model_text, len(self.observations), len(self.feedback))

    # -- the Final gate ---------------------------------------------------------------------

    def _accept_final(self, decision: FinalDecision) -> bool:
        """The evidence gate, then the claims (``final_gate.py``). A refused Final becomes feedback."""
        judged = judge_final(decision, self.evidence, self.observations, self.pack.task.goal, self.strategy)
        if not judged.premature:  # a stated number no cited Observation holds: the next free step asks for evidence
            self._unfounded = judged.unfounded
        self.trace.emit("final.validated", "final", self.step, accepted=judged.accepted, message=judged.message,
                        evidence_ids=decision.evidence_ids, claims_checked=not judged.premature,
                        false_claims=len(judged.claims))
        if judged.accepted:
            self.usage.progress()
            return True
        self.usage.fault(until_progress=True)
        self.feedback.append(judged.message)
        self._refused = True
        if judged.premature:
            self._guard("guard.no_progress", self.budgets.repeated_action_limit, ("repeated_premature_final",),
                        code="repeated_premature_final")
            return False
        self._unverified = better_unverified(self._unverified, decision, judged.claims)
        # Finals that keep failing their claim check end the run honestly: unverified, never accepted.
        self._guard("guard.no_progress", self.budgets.repeated_action_limit, ("repeated_false_claims",),
                    code="repeated_false_claims", stop_reason="final_unverified")
        return False

    # -- actions ----------------------------------------------------------------------------

    def _batch(self, decision: ActionDecision) -> Batch:
        """The calls of the Decision's reply to record this step (``tool_batch.py``): its first alone,
        or a read-only batch, which has run by now."""
        self.batch = plan(decision, self._reply, self.tools, check=self._arguments,
                          budget_left=self.budgets.max_tool_calls - self.usage.tool_calls)
        if self.limits.may_dispatch():
            self.usage.tool_ms += self.batch.run(self.ctx, deadline=self.deadline, cancel=self.cancel,
                                                 emit=self._tool_event)
        self.feedback += self.batch.feedback()
        return self.batch

    def _arguments(self, decision: ActionDecision) -> Any:
        """The arguments as the tool's model; ArgumentError when they break its contract."""
        arguments = self.tools.validate(decision.tool, decision.arguments)
        check_operands(decision.tool, arguments, self.observations, self.pack.task)  # no invented inputs
        return arguments

    def _validate(self, call: Call) -> Any | None:
        """The argument contract: valid arguments, or None after a rejected Observation."""
        try:
            arguments = self._arguments(call.decision)
        except ArgumentError as error:
            self._reject(call.decision, error, **call.where)
            return None
        self.usage.valid_actions += 1
        self.usage.progress()
        return arguments

    def _reject(self, decision: ActionDecision, error: ArgumentError, **where: Any) -> None:
        """An argument rejection: a failed Observation and feedback; no tool call is spent."""
        obs = self._append_observation(
            decision.tool, ok=False, error=ToolErrorInfo(code="invalid_arguments", message=error.message),
            attempted_arguments=decision.arguments)
        fields = error.bad_fields + error.missing + error.unexpected
        self.feedback.append(f"{obs.id}: arguments for {decision.tool} were rejected ({error.message}). "
                             f"Fix the field(s) {', '.join(fields) or 'named above'} and follow the schema."[:600])
        self.trace.emit("tool.rejected", "validate", self.step, observation=obs.model_dump(),
                        bad_fields=error.bad_fields, missing_fields=error.missing, unexpected_fields=error.unexpected,
                        state_delta={"observation_count": len(self.observations)}, **where)
        self.usage.fault(until_progress=True)
        self._guard("guard.no_progress", self.budgets.repeated_action_limit,
                    ("invalid_arguments", canonical({"tool": decision.tool, "arguments": decision.arguments})),
                    code="repeated_invalid_arguments", tool=decision.tool, validator_error=obs.error.model_dump())

    def _guard_repeated_action(self, tool: str, normalized: dict[str, Any]) -> None:
        """Fired, the repeated valid action is not dispatched again."""
        signature = canonical({"tool": tool, "arguments": normalized, **self.strategy.action_state(tool)})
        self._guard("guard.loop_detected", self.budgets.repeated_action_limit, ("valid_action", signature),
                    repeated_action={"tool": tool, "arguments": normalized})

    def _observe(self, tool: str, result: dict[str, Any] | None, error: ToolErrorInfo | None,
                 **where: Any) -> Observation:
        """Record the attempt's Observation; a result seen too often fires the no-progress guard."""
        obs = self._append_observation(tool, ok=result is not None, result=result, error=error)
        self.trace.emit("tool.observation", "observation", self.step, observation=obs.model_dump(),
                        state_delta={"observation_count": len(self.observations)}, **where)
        if error is not None:
            self.feedback.append(f"{obs.id}: {tool} failed ({error.code}): {error.message}"[:600])
            return obs
        self.record.successes.append((obs.id, tool, result))
        for failing in self.evidence.failing(tool):
            hint = failing.spec.hint
            self.feedback.append(f"{obs.id}: {failing.falls_short()}" + (f"; {hint}." if hint else ".")[:600])
        self._guard("guard.no_progress", self.budgets.no_progress_limit,
                    ("result", canonical({"tool": tool, "digest": self.tools.get(tool).digest(result)})),
                    code="repeated_result", tool=tool)
        return obs

    def _append_observation(self, tool: str, *, ok: bool, result: dict[str, Any] | None = None,
                            error: ToolErrorInfo | None = None,
                            attempted_arguments: dict[str, Any] | None = None) -> Observation:
        # An id's number is the Observation's position in the whole list (a session's earlier ones included).
        obs = Observation(id=f"obs-{tool}-{len(self.observations) + 1}", tool=tool, ok=ok, result=result,
                          error=error, attempted_arguments=attempted_arguments)
        self.observations.append(obs)
        self.evidence = self._evidence()
        return obs

    def _guard(self, event_type: str, limit: int, signature: tuple[str, ...], **how: Any) -> None:
        self.guards.count(event_type, limit, signature, self.step, **how)

    def _finish(self, stop_reason: str, final: FinalDecision | None, error: ToolErrorInfo | None) -> RunOutcome:
        if self.mcp_tools is not None:  # MCP servers never outlive their run
            self.trace.emit("mcp.servers.stopped", "tool", self.step, servers=self.mcp_tools.close())
        return finish(self.pack, self.trace, self.record, self.step, self.started, stop_reason, final,
                      self._unverified, self.observations, error)
