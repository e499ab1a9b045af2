"""The controlled ReAct loop (docs/ARCHITECTURE.md, "One step, end to end").

One step: budget check -> ask the policy for one Decision -> parse/repair -> validate -> guards ->
execute the tool (retry) -> observe -> next; or, for a Final, the evidence gate -> finish -> metrics.
The model only proposes; this module decides what is asked, what runs, what is recorded and when
the run ends. Every run ends with exactly one ``run.finished`` event. Its helpers are pure or behind
one call: the evidence of a step (``step_evidence.py``), what to ask next (``next_ask.py``), a
traced call of the policy (``model_call.py``), one tool attempt in a thread or the worker process
(``execution.py``), the calls of one served reply, run together when all are read-only
(``tool_batch.py``), the run's tools and MCP servers (``mcp_binding.py``).

Faults by who is at fault:
    model faults     bad JSON, unknown tool, bad arguments, premature Final -> feedback, loop goes on
    tool faults      ToolError (retryable or not), timeouts                 -> failed Observation
    operator faults  ModelUnavailable while loading                         -> failed/model_unavailable
    anything else                                                           -> failed/runtime_error
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable

from agent.gate.claims import claim_problems
from agent.contracts.result import TERMINAL_STATUS, RunResult, UnverifiedFinal
from agent.contracts.decision import ActionDecision, FinalDecision, Observation, ToolErrorInfo
from agent.contracts.budgets import Budgets, Sampling, Usage
from agent.models.decisions import DecisionError
from agent.core.execution import Cancelled, run_attempt
from agent.core.strategy import EvidenceStrategy, Services, StrategySource
from agent.tools.mcp_binding import ToolsUnavailable, bind_tools
from agent.core.metrics import RunRecord, compute_metrics
from agent.models.model_call import ModelCall, decision_of, load_policy
from agent.util.canonical import canonical_json as canonical
from agent.models.model_policy import EXPLORE_TEMPERATURE, Candidate, DecisionRequest, ModelUnavailable, Policy
from agent.core.next_ask import decision_summary, next_ask
from agent.gate.operands import check_operands
from agent.task.packs import TaskPack, goal_language
from agent.prompts.prompting import (
    INVALID_TURN, Branch, PromptState, check_drafts, guide_check_lines, model_turn, without_failed_turns
)
from agent.core.step_evidence import StepEvidence, premature, step_evidence
from agent.core.tool_batch import Batch, Call, plan
from agent.tools import ArgumentError, ToolContext, ToolError, ToolRegistry, ToolTransportError
from agent.contracts.trace import Trace

PolicySource = Policy | Callable[[], Policy]


@dataclass
class RunOutcome:
    result: RunResult
    events: list[dict[str, Any]]


@dataclass(frozen=True)
class PriorTurns:
    """What the earlier turns of a session leave to this run (built by ``agent/sessions/turns.py``).

    ``observations`` keep their ids: a Final may cite them and the evidence gate and the claim check
    read them like this run's own, and this run's ids continue their numbering. ``history`` is the
    conversation so far as (user turn, model turn) pairs, shown before this run's first turn;
    ``notes`` are lines that turn shows as feedback (the new message, since a prompt with history
    states the task only in its first turn).
    """

    observations: tuple[Observation, ...] = ()
    history: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()


class _Stop(Exception):
    """Ends the loop with a terminal stop_reason (internal control flow only)."""

    def __init__(self, stop_reason: str, error: ToolErrorInfo | None = None):
        self.stop_reason = stop_reason
        self.error = error


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
        self.guards: Counter = Counter()  # the loop guards' signatures, how often each was seen
        self.record = RunRecord(usage=self.usage)
        prior = prior or PriorTurns()  # a session's earlier turns: their evidence stays citable
        self.observations: list[Observation] = list(prior.observations)
        self._prior = len(prior.observations)
        self.evidence: StepEvidence | None = None  # of the Observations so far, rebuilt when one is added
        self.feedback: list[str] = list(prior.notes)
        # The conversation so far (prompting.PromptState.history): raw model text, prompt-only, never traced.
        self._history: list[tuple[str, str]] = list(prior.history)
        self._shown = (len(self.observations), 0)  # Observations and feedback lines the history has shown
        self._turn: str | None = None  # the user turn of the call whose Decision is being parsed
        self._turn_compacts = False  # that turn is a compact one (``_remember_turn``)
        self._reply: Candidate | None = None  # the reply the latest Decision came in (its further calls)
        self.batch = Batch([], [])  # this step's calls of that reply (``tool_batch.py``)
        self._refused = False  # a Final was refused: the next ones are sampled more widely
        self._unverified: UnverifiedFinal | None = None  # the best Final refused for its claims so far
        self._unfounded = False  # ... for a number no Observation holds: the next free step offers tools only
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
                self._check_cancel()
                self._stop_if(self.budgets.check_before_step(self.usage, now=time.monotonic(), deadline=self.deadline,
                                                             needs_tool=branch.kind == "action"))
                self.step += 1
                self.usage.steps += 1
                self.trace.emit("budget", "run", self.step, remaining=self._remaining())
                branch = self.strategy.before_decision(branch, self._services())  # e.g. a fix tried first
                decision = self._decide(branch)                                   # generate, parse, repair
                if isinstance(decision, FinalDecision):
                    if self._accept_final(decision):                              # evidence gate + claims
                        final = decision
                        raise _Stop("completed")
                    continue
                self._unfounded = False
                for call in self._batch(decision).calls:                          # the reply's calls, in order
                    self.usage.action_attempts += 1
                    arguments = self._validate(call)                              # argument contract
                    if arguments is None:
                        continue
                    normalized = arguments.model_dump()
                    self._guard_repeated_action(call.tool, normalized)           # loop guard
                    result, failure = self._dispatch_with_retry(call, arguments, normalized)  # tool
                    self._observe(call.tool, result, failure, **call.where)      # Observation + guard
        except _Stop as stop:
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
            raise _Stop(exc.stop_reason, exc.error) from None
        self.record.context = self.ctx

    def _tool_event(self, kind: str, **data: Any) -> dict[str, Any]:
        return self.trace.emit(kind, "tool", self.step, **data)

    def _evidence(self) -> StepEvidence:
        return step_evidence(self.pack.task, self.observations, self.tools, self.pack.guide, self.language,
                             self._prior)

    # -- the model --------------------------------------------------------------------------

    def _load_policy(self) -> None:
        try:
            self.policy = load_policy(self.policy_source, self.trace)
        except ModelUnavailable as exc:
            raise _Stop("model_unavailable", ToolErrorInfo(code=exc.code, message=exc.message)) from None

    def _decide(self, branch: Branch) -> ActionDecision | FinalDecision:
        """Generate one Decision, repairing it in the same step up to ``max_retries`` times."""
        last: DecisionError | None = None
        for attempt in range(self.budgets.max_retries + 1):
            if attempt:
                self._check_time_and_tokens()
            candidate = self._generate(branch, attempt, None if last is None else f"{last.code}: {last.message}")
            try:
                decision = decision_of(branch, candidate, self.tools.names)
            except DecisionError as error:
                self._remember_turn(INVALID_TURN)  # an invalid output is never echoed back to the model
                self.trace.emit("decision.invalid", "decision", self.step, attempt, **error.public())
                if last is None:
                    self.usage.fault()
                last = error
                continue
            self._remember_turn(model_turn(branch.prefix + candidate.text + branch.suffix))
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
        raise _Stop("invalid_decision", ToolErrorInfo(code="invalid_decision", message=f"{last.code}: {last.public()['error']}"))

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
        if wider:  # a trial's fix failed: the next one is drawn more widely
            sampling = sampling.model_copy(update={"temperature": max(sampling.temperature, EXPLORE_TEMPERATURE),
                                                   "top_p": max(sampling.top_p, 0.95), "top_k": max(sampling.top_k, 50)})
        request = DecisionRequest(
            branch=branch, state=self._prompt_state(branch), tools=self.tools,
            max_new_tokens=self.budgets.new_tokens(self.usage, code=branch.code_field is not None and not arguments_only),
            sampling=sampling, repair_error=repair_error, deadline=self.deadline, cancel=self.cancel,
            on_progress=call.progress, arguments_only=arguments_only)
        try:
            candidate = call.propose(self.policy, request, self.usage)
        except ModelUnavailable as exc:
            raise _Stop(exc.stop_reason, ToolErrorInfo(code=exc.code, message=exc.message)) from None
        if not (arguments_only or aside):  # a trial's probe or draw is no turn of the conversation
            self._turn = request.turn() if candidate.decision is None else None
            self._turn_compacts = candidate.decision is None and request.compacts()
        if candidate.finish_reason == "cancelled" or self.cancel.is_set():
            raise _Stop("cancelled")
        if candidate.finish_reason == "deadline":
            raise _Stop("timeout")
        self._check_time_and_tokens()
        return candidate

    def _prompt_state(self, branch: Branch) -> PromptState:
        guide = self.evidence.guide if branch.kind != "action" else None
        # A failed Decision hidden from a step asked again stays hidden from every later step: the
        # history only grows, so the model's KV cache keeps it (shown again to the next test run, a
        # fix-the-test run re-evaluated its history from the first rewrite at every step, 30-80 s).
        self._history[:] = without_failed_turns(self._history, branch)
        checks = [(c.label, c.left, c.op, c.right, c.holds) for c in self.evidence.checks]
        return PromptState(
            goal=self.pack.task.goal, observations=self.observations, feedback=self.feedback,
            budget_left=self._remaining(), tool_hints=self.pack.task.hints, code_prompt=self.pack.task.code_prompt,
            final_hints=list(guide.hints) if guide else [], check_lines=guide_check_lines(guide, checks) if guide else [],
            check_drafts=check_drafts(guide, checks),
            history=list(self._history), shown_observations=self._shown[0],
            shown_feedback=self._shown[1])

    def _remember_turn(self, model_text: str) -> None:
        """Append this call's turn and the model's Decision to the conversation (continuations only:
        a served model's tool calls are replayed by its own protocol)."""
        if self._turn is not None:
            # A compact turn stands for the turns before it: later calls continue after it, so the
            # model's KV cache keeps it until the history is too long again (rebuilt every step, a
            # long fix-the-test run evaluated 6k prompt tokens a step, 80 s on two cores).
            if self._turn_compacts:
                self._history.clear()
            self._history.append((self._turn, model_text))
            self._shown = (len(self.observations), len(self.feedback))
            self._turn = None

    # -- the Final gate ---------------------------------------------------------------------

    def _accept_final(self, decision: FinalDecision) -> bool:
        """The evidence gate, then the claims (``claims.py``). A refused Final becomes feedback."""
        problems = premature(self.evidence, decision.evidence_ids) + \
            self.strategy.final_problems(list(self.observations), decision.evidence_ids)
        claims: list[str] = []
        if not problems:
            known = {o.id: o for o in self.observations}
            cited = [known[i] for i in decision.evidence_ids if known[i].ok]
            found = claim_problems(decision.answer, cited, self.pack.task.goal, self.evidence.guide,
                                   list(self.evidence.checks), [o for o in self.observations if o.ok])
            claims = [p.text for p in found][:5]
            # free mode: a stated number no cited Observation holds (or holds as another fact's) asks for
            # evidence before the next Final (a session's follow-ups answered a fact from memory three
            # times, never looking it up)
            self._unfounded = any(p.kind in ("number", "attribution") for p in found)
        accepted = not problems and not claims
        message = ("final accepted" if accepted else "premature final: " + "; ".join(problems) if problems
                   else "false claims in the final: " + "; ".join(claims))
        self.trace.emit("final.validated", "final", self.step, accepted=accepted, message=message[:600],
                        evidence_ids=decision.evidence_ids, claims_checked=not problems, false_claims=len(claims))
        if accepted:
            self.usage.progress()
            return True
        self.usage.fault(until_progress=True)
        self.feedback.append(message[:600])
        self._refused = True
        if problems:
            self._guard("guard.no_progress", self.budgets.repeated_action_limit, ("repeated_premature_final",),
                        code="repeated_premature_final")
            return False
        self._keep_unverified(decision, claims)
        # Finals that keep failing their claim check end the run honestly: unverified, never accepted.
        self._guard("guard.no_progress", self.budgets.repeated_action_limit, ("repeated_false_claims",),
                    code="repeated_false_claims", stop_reason="final_unverified")
        return False

    def _keep_unverified(self, decision: FinalDecision, claims: list[str]) -> None:
        """Remember the refused Final with the fewest failed claims (the later one of equals)."""
        if self._unverified is None or len(claims) <= len(self._unverified.unverified):
            self._unverified = UnverifiedFinal(answer=decision.answer, evidence_ids=list(decision.evidence_ids),
                                               unverified=claims)

    # -- actions ----------------------------------------------------------------------------

    def _batch(self, decision: ActionDecision) -> Batch:
        """The calls of the Decision's reply to record this step (``tool_batch.py``): its first alone,
        or a read-only batch, which has run by now."""
        self.batch = plan(decision, self._reply, self.tools, check=self._arguments,
                          budget_left=self.budgets.max_tool_calls - self.usage.tool_calls)
        if self.budgets.check_before_dispatch(self.usage, now=time.monotonic(), deadline=self.deadline) is None:
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
        signature = canonical({"tool": tool, "arguments": normalized, **self.strategy.action_state(tool)})
        # fired, the repeated valid action is not dispatched again
        self._guard("guard.loop_detected", self.budgets.repeated_action_limit, ("valid_action", signature),
                    repeated_action={"tool": tool, "arguments": normalized})

    def _dispatch_with_retry(self, call: Call, arguments: Any, normalized: dict[str, Any]):
        """Run the tool; replay the same action on retryable errors. Returns (result, error)."""
        tool, where = call.tool, call.where
        retries = 0
        for attempt in range(1, self.budgets.max_retries + 2):
            self._check_cancel()
            self._stop_if(self.budgets.check_before_dispatch(self.usage, now=time.monotonic(), deadline=self.deadline))
            self.usage.tool_calls += 1
            self.trace.emit("tool.started", "tool", self.step, attempt, tool=tool, arguments=normalized, **where)
            try:
                result = self._attempt(call, arguments)
            except ToolError as error:
                info = ToolErrorInfo(code=error.code, message=error.message[:500], retryable=error.retryable)
                can_retry = error.retryable and attempt <= self.budgets.max_retries
                if error.code == "deadline_exceeded":
                    self.trace.emit("tool.failed", "tool", self.step, attempt, tool=tool, error=info.model_dump(),
                                    **where)
                    self._observe(tool, None, info, **where)
                    raise _Stop("timeout") from None
                self.trace.emit("tool.retry" if can_retry else "tool.failed", "tool", self.step, attempt,
                                tool=tool, error=info.model_dump(), **where)
                if not can_retry:
                    return None, info
                self.usage.fault()
                retries += 1
                continue
            self.usage.recover(retries)
            return result, None
        raise AssertionError("unreachable: the last attempt never retries")

    def _attempt(self, call: Call, arguments: Any) -> dict[str, Any]:
        """One attempt (``execution.py``), waited on for min(tool timeout, time left), or the one its
        batch ran already; its time counts however it ends."""
        started = time.monotonic()
        try:
            ran = self.batch.take(call)
            if ran is not None:
                return ran.result()
            return run_attempt(self.tools.get(call.tool), arguments, self.ctx, deadline=self.deadline,
                               cancel=self.cancel)
        except Cancelled:
            raise _Stop("cancelled") from None
        except ToolTransportError as exc:
            # Not a result the model can recover from: the tool's runtime itself is broken.
            info = ToolErrorInfo(code="tool_runtime", message=exc.message[:300])
            self.trace.emit("tool.failed", "tool", self.step, tool=call.tool, error=info.model_dump(), **call.where)
            raise _Stop("runtime_error", info) from None
        finally:
            self.usage.tool_ms += (time.monotonic() - started) * 1000

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

    # -- guards and budgets -----------------------------------------------------------------

    def _guard(self, event_type: str, limit: int, signature: tuple[str, ...], *,
               stop_reason: str = "loop_detected", **payload: Any) -> None:
        """Count ``signature``; seen ``limit`` times, the guard fires and the loop stops with ``stop_reason``."""
        self.guards[signature] += 1
        if self.guards[signature] >= limit:
            self.record.guard_fired = True
            self.trace.emit(event_type, "run", self.step, **payload, count=self.guards[signature])
            raise _Stop(stop_reason)

    def _stop_if(self, stop_reason: str | None) -> None:
        if stop_reason is not None:
            raise _Stop(stop_reason)

    def _check_cancel(self) -> None:
        if self.cancel.is_set():
            raise _Stop("cancelled")

    def _check_time_and_tokens(self) -> None:
        self._check_cancel()
        self._stop_if(self.budgets.check_time_and_tokens(self.usage, now=time.monotonic(), deadline=self.deadline))

    def _remaining(self) -> dict[str, Any]:
        return self.budgets.remaining(self.usage, now=time.monotonic(), deadline=self.deadline)

    # -- the end ----------------------------------------------------------------------------

    def _finish(self, stop_reason: str, final: FinalDecision | None, error: ToolErrorInfo | None) -> RunOutcome:
        if self.mcp_tools is not None:  # MCP servers never outlive their run
            self.trace.emit("mcp.servers.stopped", "tool", self.step, servers=self.mcp_tools.close())
        status = TERMINAL_STATUS[stop_reason]
        metrics = None
        if stop_reason not in ("model_unavailable", "runtime_error"):
            self.record.total_ms = (time.monotonic() - self.started) * 1000
            metrics = compute_metrics(self.pack, self.record, stop_reason, final)
        unverified = self._unverified if final is None else None
        result = RunResult(status=status, stop_reason=stop_reason, final=final, metrics=metrics,
                           observations=self.observations, error=error, unverified=unverified)
        self.trace.emit("run.finished", "run", self.step, status=status, stop_reason=stop_reason,
                        final=final.model_dump() if final else None,
                        **({"unverified": unverified.model_dump()} if unverified else {}),
                        metrics=metrics.model_dump() if metrics else None,
                        error=error.model_dump() if error else None, trace_dropped=self.trace.dropped)
        return RunOutcome(result=result, events=self.trace.events)

