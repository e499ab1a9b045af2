"""The controlled ReAct loop (SPEC §3; seed 000 §20).

One outer step: budget check -> generate -> parse/repair -> validate -> guard -> dispatch/retry ->
observe -> next. The model only proposes; this module decides what is asked, what runs, what is
recorded and when the run ends. Every run ends with exactly one ``run.finished`` event.

Faults by who is at fault:
    model faults     bad JSON, unknown tool, bad arguments, premature Final -> feedback, loop goes on
    tool faults      ToolError (retryable or not), timeouts                 -> failed Observation
    operator faults  ModelUnavailable while loading                         -> failed/model_unavailable
    anything else                                                           -> failed/runtime_error
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from .claims import (ResolvedCheck, bound_forms, check_claims, evidence_numbers, fmt, number_forms, resolve,
                     resolve_checks)
from .contracts import (
    TERMINAL_STATUS,
    ActionDecision,
    AnswerGuide,
    Budgets,
    CheckSpec,
    FinalDecision,
    Observation,
    RunResult,
    Sampling,
    ToolErrorInfo,
    Usage,
)
from .decisions import DecisionError, parse_decision
from .metrics import RunRecord, compute_metrics
from .model_policy import Candidate, DecisionRequest, ModelUnavailable, Policy
from .operands import check_operands
from .packs import TaskPack, goal_language, item_key
from .prompting import INVALID_TURN, VISIBLE_OBSERVATIONS, Branch, PromptState, guide_check_lines, model_turn
from .tools import WORKSPACE_TOOLS, ArgumentError, ToolContext, ToolError, ToolRegistry, ToolTransportError, registry_for
from .tools.isolation import SUPPORTED as ISOLATION_SUPPORTED
from .tools.isolation import load_tool, worker
from .trace import Trace, sha256_text
from .workspace import WorkspaceOptions, WorkspaceUnavailable
from .workspace import bind as bind_workspace
from .workspace_evidence import action_state, final_problems, next_step

PolicySource = Policy | Callable[[], Policy]
PROGRESS_SECONDS = 1.0  # at most one model.progress event per call and second


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


class _Progress:
    """A model call's output as it arrives, as ``model.progress`` events (kind and characters so
    far, never the text), at most one per ``PROGRESS_SECONDS`` so a long call cannot crowd the trace."""

    def __init__(self, trace: Trace, step: int, attempt: int):
        self.trace, self.step, self.attempt = trace, step, attempt
        self.active = True
        self.last = time.monotonic()

    def __call__(self, kind: str, chars: int) -> None:
        now = time.monotonic()
        if self.active and now - self.last >= PROGRESS_SECONDS:
            self.last = now
            self.trace.emit("model.progress", "model", self.step, self.attempt, kind=kind, chars=chars)


class _Stop(Exception):
    """Ends the loop with a terminal stop_reason (internal control flow only)."""

    def __init__(self, stop_reason: str, error: ToolErrorInfo | None = None):
        self.stop_reason = stop_reason
        self.error = error


@dataclass
class Guards:
    """Canonical-signature counters of the loop guards (R-RT-6)."""

    invalid_arguments: Counter = field(default_factory=Counter)
    valid_actions: Counter = field(default_factory=Counter)
    result_digests: Counter = field(default_factory=Counter)
    premature_finals: int = 0
    refused_claims: int = 0
    fired: bool = False


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


class Run:
    """The state of one run; ``execute`` is the loop."""

    def __init__(self, pack: TaskPack, policy: PolicySource, budgets: Budgets, *, artifact_dir: Path,
                 cancel: threading.Event | None, sink: Callable[[dict[str, Any]], None] | None,
                 tools: ToolRegistry | None, mode: str | None, sampling: Sampling | None = None,
                 allowed_tools: Iterable[str] | None = None, workspace: WorkspaceOptions | None = None,
                 prior: PriorTurns | None = None):
        self.pack = pack
        self.workspace_options = workspace
        self.policy_source = policy
        self.policy: Policy | None = None
        self.budgets = budgets
        self.sampling = sampling or Sampling()
        self.allowed_tools = set(allowed_tools) if allowed_tools is not None else None
        self.tools = tools
        self.mode = mode or pack.task.mode
        self.language = goal_language(pack.task.goal)
        self.cancel = cancel or threading.Event()
        self.trace = Trace(sink)
        self.ctx = ToolContext(knowledge_dir=pack.knowledge_dir, artifact_dir=Path(artifact_dir), pack_dir=pack.root)
        self.started = time.monotonic()
        self.deadline = self.started + budgets.max_seconds
        self.usage = Usage()
        self.guards = Guards()
        self.record = RunRecord(usage=self.usage)
        prior = prior or PriorTurns()  # a session's earlier turns: their evidence stays citable
        self.observations: list[Observation] = list(prior.observations)
        self.feedback: list[str] = list(prior.notes)
        # The conversation so far (prompting.PromptState.history): raw model text, prompt-only, never traced.
        self._history: list[tuple[str, str]] = list(prior.history)
        self._shown = (len(self.observations), 0)  # Observations and feedback lines the history has shown
        self._turn: str | None = None  # the user turn of the call whose Decision is being parsed
        self.step = 0

    # -- the loop ---------------------------------------------------------------------------

    def execute(self) -> RunOutcome:
        final: FinalDecision | None = None
        error: ToolErrorInfo | None = None
        try:
            self._bind_tools()
            self.trace.emit("run.started", "run", task_id=self.pack.task.id, mode=self.mode,
                            budgets=self.budgets.model_dump(), sampling=self.sampling.model_dump(), required_tools=list(self.pack.task.required_tools),
                            tools=list(self.tools.names))
            self._load_policy()
            while True:
                branch = self._branch()
                self._check_cancel()
                self._stop_if(self.budgets.check_before_step(self.usage, now=time.monotonic(), deadline=self.deadline,
                                                             needs_tool=branch.kind == "action"))
                self.step += 1
                self.usage.steps += 1
                self.trace.emit("budget", "run", self.step, remaining=self._remaining())
                decision = self._decide(branch)                                   # generate, parse, repair
                if isinstance(decision, FinalDecision):
                    if self._accept_final(decision, branch):                      # evidence gate + claims
                        final = decision
                        raise _Stop("completed")
                    continue
                self.usage.action_attempts += 1
                arguments = self._validate(decision)                              # argument contract
                if arguments is None:
                    continue
                normalized = arguments.model_dump()
                self._guard_repeated_action(decision.tool, normalized)           # loop guard
                result, failure = self._dispatch_with_retry(decision.tool, arguments, normalized)  # tool
                self._observe(decision.tool, result, failure)                     # Observation + guard
        except _Stop as stop:
            stop_reason, error = stop.stop_reason, stop.error
        except Exception as exc:  # noqa: BLE001 -- the run must end with run.finished, whatever happened
            stop_reason = "runtime_error"
            error = ToolErrorInfo(code="runtime_error", message=f"{type(exc).__name__}: {exc}"[:300])
        return self._finish(stop_reason, final, error)

    def _bind_tools(self) -> None:
        """The run's registry: the one passed in, else the package's tools the pack names, composed
        with the tools of the pack's MCP servers (started here, pinned, closed by ``_finish``)."""
        task = self.pack.task
        self.mcp_tools = None
        servers = {s.name for s in task.mcp_servers}
        if self.tools is None:
            try:
                self.tools = registry_for(n for n in task.tool_names if n.partition(".")[0] not in servers or "." not in n)
            except KeyError as exc:
                raise _Stop("runtime_error", ToolErrorInfo(
                    code="pack_invalid", message=f"pack '{self.pack.name}' names unknown tools: {exc.args[0]}")) from None
        if task.mcp_servers:
            from .tools.mcp import McpStartError, McpTools, ToolCollision, compose

            try:
                self.mcp_tools = McpTools.start(task.mcp_servers, cwd=self.pack.root, cancel=self.cancel,
                                                timeout=max(0.0, min(30.0, self.deadline - time.monotonic())))
                self.trace.emit("mcp.tools.pinned", "tool", servers=self.mcp_tools.describe(),
                                skipped=self.mcp_tools.skipped)
                composed = compose(self.tools, self.mcp_tools)
            except ToolCollision as exc:
                raise _Stop("runtime_error", ToolErrorInfo(code="tool_name_collision", message=str(exc)[:300])) from None
            except McpStartError as exc:
                if self.cancel.is_set():
                    raise _Stop("cancelled") from None
                raise _Stop("runtime_error", ToolErrorInfo(code="tool_runtime", message=str(exc)[:300])) from None
            # MCP tools the pack does not name never reach a prompt.
            self.tools = composed.subset(n for n in composed.names if n in self.tools or n in task.tool_names)
        if self.allowed_tools is not None:  # a request narrowed the pack's tools (never widens them)
            self.tools = self.tools.subset(n for n in self.tools.names if n in self.allowed_tools)
        # A registry passed in (the runner's, narrowed by a request) may leave out optional tools,
        # never required ones.
        missing = [t for t in task.required_tools if t not in self.tools]
        if missing:
            offered = f" (its MCP servers offer: {', '.join(self.mcp_tools.registry.names) or 'nothing'})" \
                if self.mcp_tools is not None else ""
            raise _Stop("runtime_error", ToolErrorInfo(
                code="pack_invalid", message=(f"pack '{self.pack.name}' needs tools the run does not have: "
                                              + ", ".join(missing) + offered)[:300]))
        if WORKSPACE_TOOLS & set(self.tools.names):  # their workspace and sandbox, or no run at all
            try:
                self.ctx = bind_workspace(self.ctx, task, self.pack.root, self.workspace_options,
                                          self.ctx.artifact_dir.parent, deadline=self.deadline,
                                          emit=lambda kind, **data: self.trace.emit(kind, "tool", self.step, **data))
            except WorkspaceUnavailable as exc:
                raise _Stop("runtime_error", ToolErrorInfo(code=exc.code, message=exc.message[:300])) from None
            self.record.workspace = self.ctx.workspace
            self.trace.emit("workspace.ready", "tool", sandbox=self.ctx.sandbox.kind, **self.ctx.workspace.describe())

    # -- model ------------------------------------------------------------------------------

    def _load_policy(self) -> None:
        if not callable(self.policy_source) or hasattr(self.policy_source, "propose"):
            self.policy = self.policy_source  # an already-loaded policy
            return
        self.trace.emit("model.load.started", "model")
        started = time.perf_counter()
        try:
            self.policy = self.policy_source()
        except ModelUnavailable as exc:
            self.trace.emit("model.load.failed", "model", code=exc.code, message=exc.message)
            raise _Stop("model_unavailable", ToolErrorInfo(code=exc.code, message=exc.message)) from None
        self.trace.emit("model.load.completed", "model", model=self.policy.description.public(),
                        load_ms=round((time.perf_counter() - started) * 1000, 1))

    def _generate(self, branch: Branch, attempt: int, repair_error: str | None) -> Candidate:
        progress = _Progress(self.trace, self.step, attempt)
        request = DecisionRequest(
            branch=branch, state=self._prompt_state(branch), tools=self.tools,
            max_new_tokens=self.budgets.new_tokens(self.usage, code=branch.code_field is not None), sampling=self.sampling,
            repair_error=repair_error, deadline=self.deadline, cancel=self.cancel, on_progress=progress)
        started_type, completed_type = (("model.started", "model.completed") if repair_error is None
                                        else ("model.repair.started", "model.repair.completed"))
        self.trace.emit(started_type, "model", self.step, attempt, branch=branch.kind, tool=branch.tool,
                        max_new_tokens=request.max_new_tokens)
        try:
            candidate = self.policy.propose(request)
        except ModelUnavailable as exc:
            progress.active = False
            self.trace.emit("model.failed", "model", self.step, attempt, code=exc.code, message=exc.message)
            raise _Stop(exc.stop_reason, ToolErrorInfo(code=exc.code, message=exc.message)) from None
        progress.active = False
        self.usage.model_calls += 1
        self.usage.input_tokens += candidate.input_tokens
        self.usage.output_tokens += candidate.output_tokens
        self.usage.cached_tokens += candidate.cached_tokens
        self.usage.forced_tokens += candidate.forced_tokens
        self.usage.drafted_tokens += candidate.drafted_tokens
        self.usage.model_ms += candidate.latency_ms
        self.usage.recoverable += candidate.protocol_repairs
        self.usage.recovered += candidate.protocol_repairs
        self.trace.emit(completed_type, "model", self.step, attempt,
                        model=self.policy.description.public(),
                        usage={"input_tokens": candidate.input_tokens, "output_tokens": candidate.output_tokens,
                               "cached_tokens": candidate.cached_tokens, "forced_tokens": candidate.forced_tokens,
                               "drafted_tokens": candidate.drafted_tokens,
                               "restored_tokens": candidate.restored_tokens},
                        latency_ms=round(candidate.latency_ms, 3),
                        output_sha256=sha256_text(candidate.text if candidate.decision is None
                                                  else canonical(candidate.decision)),
                        finish_reason=candidate.finish_reason, protocol_repairs=candidate.protocol_repairs)
        if candidate.call_repairs:  # what a served reply needed fixing: kinds, hashes and field names, no text
            self.trace.emit("model.call.repaired", "model", self.step, attempt,
                            repairs=[r.model_dump(mode="json") for r in candidate.call_repairs])
        self._turn = request.turn() if candidate.decision is None else None
        if candidate.finish_reason == "cancelled" or self.cancel.is_set():
            raise _Stop("cancelled")
        if candidate.finish_reason == "deadline":
            raise _Stop("timeout")
        self._stop_if(self.budgets.check_time_and_tokens(self.usage, now=time.monotonic(), deadline=self.deadline))
        return candidate

    def _decide(self, branch: Branch) -> ActionDecision | FinalDecision:
        """Generate one Decision, repairing it in the same step up to ``max_retries`` times."""
        last: DecisionError | None = None
        for attempt in range(self.budgets.max_retries + 1):
            if attempt:
                self._check_time_and_tokens()
            generation = self._generate(branch, attempt, None if last is None else f"{last.code}: {last.message}")
            try:
                decision = self._parse(branch, generation)
            except DecisionError as error:
                self._remember_turn(INVALID_TURN)  # an invalid output is never echoed back to the model
                self.trace.emit("decision.invalid", "decision", self.step, attempt, **error.public())
                if last is None:
                    self.usage.recoverable += 1
                last = error
                continue
            self._remember_turn(model_turn(branch.prefix + generation.text + branch.suffix))
            if attempt:
                self.usage.recovered += 1
                self.trace.emit("decision.repaired", "decision", self.step, attempt, decision=decision.model_dump(),
                                decision_summary=self._summary(branch, decision), repairs=attempt)
            else:
                self.trace.emit("decision.valid", "decision", self.step, decision=decision.model_dump(),
                                decision_summary=self._summary(branch, decision))
            return decision
        raise _Stop("invalid_decision", ToolErrorInfo(code="invalid_decision", message=f"{last.code}: {last.public()['error']}"))

    def _remember_turn(self, model_text: str) -> None:
        """Append this call's turn and the model's Decision to the conversation (continuations only:
        a served model's tool calls are replayed by its own protocol)."""
        if self._turn is not None:
            self._history.append((self._turn, model_text))
            self._shown = (len(self.observations), len(self.feedback))
            self._turn = None

    def _parse(self, branch: Branch, candidate: Candidate) -> ActionDecision | FinalDecision:
        # A generation cut off at its token limit is never a Decision, even where the cut happens
        # to leave valid JSON (seed 002: finish_reason "length" is truncation, never a Final).
        if candidate.finish_reason == "length":
            raise DecisionError("truncated", "the output was cut off at the token limit; write a shorter Decision")
        if candidate.fault is not None:  # a protocol fault the policy saw (e.g. no tool call at all)
            raise DecisionError(*candidate.fault)
        if candidate.decision is not None:  # structured (native tool calling): validated like text
            return parse_decision("", json.dumps(candidate.decision, ensure_ascii=False), "",
                                  tool_names=self.tools.names)
        return parse_decision(branch.prefix, candidate.text, branch.suffix, tool_names=self.tools.names)

    # -- final ------------------------------------------------------------------------------

    def _accept_final(self, decision: FinalDecision, branch: Branch) -> bool:
        """The evidence gate (R-RT-7), then the claims (R-CLAIM). A refused Final becomes feedback."""
        known = {o.id: o for o in self.observations}
        problems = []
        unknown = [i for i in decision.evidence_ids if i not in known]
        if unknown:
            problems.append(f"evidence_ids cite observations that do not exist: {', '.join(unknown[:5])}"[:300])
        for what, obs_id in self._required_evidence():
            if obs_id is None:
                problems.append(f"no successful {what} observation yet")
            elif obs_id not in decision.evidence_ids:
                problems.append(f"evidence_ids must cite the latest successful {what} observation {obs_id}")
        for tool, check, _ in self._failing_expectations():
            problems.append(f"the latest {tool} result {_falls_short(check)}")
        problems += final_problems(self.pack.task, self.observations, self.ctx.workspace, decision.evidence_ids)
        claims: list[str] = []
        if not problems:
            guide = self._guide()
            cited = [known[i] for i in decision.evidence_ids if known[i].ok]
            claims = check_claims(decision.answer, cited, self.pack.task.goal, guide, self._resolved_checks(guide))
        accepted = not problems and not claims
        message = ("final accepted" if accepted else "premature final: " + "; ".join(problems) if problems
                   else "false claims in the final: " + "; ".join(claims))
        self.trace.emit("final.validated", "final", self.step, accepted=accepted, message=message[:600],
                        evidence_ids=decision.evidence_ids, claims_checked=not problems,
                        false_claims=len(claims))
        if accepted:
            self._mark_progress()
            self.record.final_step = self.step
            return True
        self.usage.recoverable += 1
        self.usage.pending_recoverable += 1
        self.feedback.append(message[:600])
        if problems:
            self.guards.premature_finals += 1
            count, code = self.guards.premature_finals, "repeated_premature_final"
        else:
            self.guards.refused_claims += 1
            count, code = self.guards.refused_claims, "repeated_false_claims"
        if count >= self.budgets.repeated_action_limit:
            self._fire_guard("guard.no_progress", code=code, count=count)
        return False

    def _guide(self) -> AnswerGuide | None:
        """How the Final is written and checked: the pack's declarations, completed by the guide of
        the tool whose result the answer is about (the first tool that offers one)."""
        declared = self.pack.task.declared_guide()
        offered = None
        latest = self._latest_ok()
        for tool in self.tools:
            if tool.answer_guide is not None and tool.name in latest:
                guide = tool.answer_guide(latest[tool.name].result or {}, self.language)
                if guide:
                    offered = AnswerGuide.model_validate(guide)
                    break
        if declared is None or offered is None:
            return declared or offered
        return AnswerGuide(answer_form=declared.answer_form or offered.answer_form,
                           checks=declared.checks or offered.checks, verdict=declared.verdict or offered.verdict,
                           hints=declared.hints or offered.hints, expect=declared.expect or offered.expect)

    def _failing_expectations(self, tool: str | None = None) -> list[tuple[str, ResolvedCheck, CheckSpec]]:
        """(tool, check, its spec) of each expectation on a tool's latest result that the result fails."""
        guide = self._guide()
        if guide is None or not guide.expect:
            return []
        failing, latest = [], self._latest_ok()
        for spec, check in zip(guide.expect, resolve_checks(guide.expect, latest)):
            owner = self._ref_tool(spec.left)
            # A result that lacks the value (a chart without its average line) fails too, once the
            # other side is known.
            missing = check.left is None and check.right is not None and owner in latest
            if owner is not None and (tool is None or owner == tool) and (missing or check.known and not check.holds):
                failing.append((owner, check, spec))
        return failing

    def _resolve_refs(self, schema: Any) -> Any:
        """A narrowing schema with evidence references (``{"const": "calculator.value"}``) resolved
        against the latest Observations; a reference that resolves to nothing leaves its key out."""
        if isinstance(schema, list):
            return [self._resolve_refs(v) for v in schema]
        if not isinstance(schema, dict):
            return schema
        out = {}
        for key, value in schema.items():
            if key == "const" and isinstance(value, str) and self._ref_tool(value) is not None:
                value = resolve(value, self._latest_ok())
                if value is None:
                    continue
            out[key] = self._resolve_refs(value)
        return out

    def _ref_tool(self, operand: float | str) -> str | None:
        """The tool a reference like ``calculator.value`` or ``min(server.tool.x)`` reads from."""
        if not isinstance(operand, str):
            return None
        ref = operand.split("(", 1)[-1]
        names = sorted(self.tools.names, key=len, reverse=True)
        return next((name for name in names if ref.startswith(name + ".")), None)

    def _resolved_checks(self, guide: AnswerGuide | None) -> list[ResolvedCheck]:
        return resolve_checks(guide.checks, self._latest_ok()) if guide else []

    # -- actions ----------------------------------------------------------------------------

    def _validate(self, decision: ActionDecision) -> Any | None:
        """The argument contract (R-RT-4): valid arguments, or None after a rejected Observation."""
        try:
            arguments = self.tools.validate(decision.tool, decision.arguments)
            check_operands(decision.tool, arguments, self.observations, self.pack.task)  # no invented inputs
        except ArgumentError as error:
            self._reject(decision, error)
            return None
        self.usage.valid_actions += 1
        self._mark_progress()
        return arguments

    def _guard_repeated_action(self, tool: str, normalized: dict[str, Any]) -> None:
        signature = canonical({"tool": tool, "arguments": normalized, **action_state(tool, self.ctx.workspace)})
        self.guards.valid_actions[signature] += 1
        if self.guards.valid_actions[signature] >= self.budgets.repeated_action_limit:
            # The repeated valid action is not dispatched again.
            self._fire_guard("guard.loop_detected", repeated_action={"tool": tool, "arguments": normalized},
                             count=self.guards.valid_actions[signature])

    def _reject(self, decision: ActionDecision, error: ArgumentError) -> None:
        """Argument rejection (R-RT-4): a failed Observation and feedback; no tool call is spent."""
        obs = self._append_observation(
            decision.tool, ok=False, error=ToolErrorInfo(code="invalid_arguments", message=error.message),
            attempted_arguments=decision.arguments)
        fields = error.bad_fields + error.missing + error.unexpected
        feedback = (f"{obs.id}: arguments for {decision.tool} were rejected ({error.message}). "
                    f"Fix the field(s) {', '.join(fields) or 'named above'} and follow the schema.")
        self.feedback.append(feedback[:600])
        self.trace.emit("tool.rejected", "validate", self.step, observation=obs.model_dump(),
                        bad_fields=error.bad_fields, missing_fields=error.missing,
                        unexpected_fields=error.unexpected,
                        state_delta={"observation_count": len(self.observations)})
        self.usage.recoverable += 1
        self.usage.pending_recoverable += 1
        signature = canonical({"tool": decision.tool, "arguments": decision.arguments})
        self.guards.invalid_arguments[signature] += 1
        if self.guards.invalid_arguments[signature] >= self.budgets.repeated_action_limit:
            self._fire_guard("guard.no_progress", code="repeated_invalid_arguments", tool=decision.tool,
                             validator_error=obs.error.model_dump(), count=self.guards.invalid_arguments[signature])

    def _dispatch_with_retry(self, tool: str, arguments: Any, normalized: dict[str, Any]):
        """Run the tool; replay the same action on retryable errors (R-RT-5). Returns (result, error)."""
        pending_retries = 0
        for attempt in range(1, self.budgets.max_retries + 2):
            self._check_cancel()
            self._stop_if(self.budgets.check_before_dispatch(self.usage, now=time.monotonic(), deadline=self.deadline))
            self.usage.tool_calls += 1
            self.trace.emit("tool.started", "tool", self.step, attempt, tool=tool, arguments=normalized)
            try:
                result = self._run_tool_attempt(tool, arguments)
            except ToolError as error:
                info = ToolErrorInfo(code=error.code, message=error.message[:500], retryable=error.retryable)
                can_retry = error.retryable and attempt <= self.budgets.max_retries
                if error.code == "deadline_exceeded":
                    self.trace.emit("tool.failed", "tool", self.step, attempt, tool=tool, error=info.model_dump())
                    self._observe(tool, None, info)
                    raise _Stop("timeout") from None
                self.trace.emit("tool.retry" if can_retry else "tool.failed", "tool", self.step, attempt,
                                tool=tool, error=info.model_dump())
                if not can_retry:
                    return None, info
                self.usage.recoverable += 1
                pending_retries += 1
                continue
            self.usage.recovered += pending_retries
            return result, None
        raise AssertionError("unreachable: the last attempt never retries")

    def _run_tool_attempt(self, tool: str, arguments: Any) -> dict[str, Any]:
        """One attempt, waited on for min(tool timeout, time left).

        A tool that lives at an import path runs in the worker process, which a timeout or a cancel
        kills (no CPU or late artifact left behind); any other tool runs in a thread, which cannot be
        killed: a timed-out attempt is abandoned (its late result is ignored). Either way the
        attempt is recorded as ``tool_timeout``.
        """
        spec = self.tools.get(tool)
        started = time.monotonic()
        wait_until = min(started + spec.timeout_seconds, self.deadline)
        if spec.import_path and ISOLATION_SUPPORTED and _isolatable(spec):
            try:
                result = worker().run(spec, arguments.model_dump(), self.ctx, wait_until=wait_until, cancel=self.cancel)
            finally:
                self.usage.tool_ms += (time.monotonic() - started) * 1000
            if result is not None:
                return result
            if self.cancel.is_set():
                raise _Stop("cancelled")
            if time.monotonic() >= self.deadline:
                raise ToolError("deadline_exceeded", "the run's deadline passed while the tool ran", retryable=False)
            raise ToolError("tool_timeout", f"{tool} did not finish within {spec.timeout_seconds:g} s", retryable=True)
        return self._run_in_thread(spec, arguments, started, wait_until)

    def _run_in_thread(self, spec: Any, arguments: Any, started: float, wait_until: float) -> dict[str, Any]:
        tool = spec.name
        box: dict[str, Any] = {}
        done = threading.Event()

        def work() -> None:
            try:
                box["result"] = spec.execute(self.ctx, arguments, self.cancel)
            except (ToolError, ToolTransportError) as exc:
                box["error"] = exc
            except Exception as exc:  # noqa: BLE001 -- a tool bug is a non-retryable tool error
                box["error"] = ToolError("tool_crashed", f"{tool} raised {type(exc).__name__}", retryable=False)
            finally:
                done.set()

        threading.Thread(target=work, name=f"tool-{tool}", daemon=True).start()
        while not done.wait(timeout=max(0.0, min(0.05, wait_until - time.monotonic()))):
            if self.cancel.is_set():
                self.usage.tool_ms += (time.monotonic() - started) * 1000
                raise _Stop("cancelled")
            if time.monotonic() >= wait_until:
                break
        self.usage.tool_ms += (time.monotonic() - started) * 1000
        if not done.is_set():
            if time.monotonic() >= self.deadline:
                raise ToolError("deadline_exceeded", "the run's deadline passed while the tool ran", retryable=False)
            raise ToolError("tool_timeout", f"{tool} did not finish within {spec.timeout_seconds:g} s", retryable=True)
        if isinstance(box.get("error"), ToolTransportError):
            # Not a result the model can recover from: the tool's runtime itself is broken.
            info = ToolErrorInfo(code="tool_runtime", message=box["error"].message[:300])
            self.trace.emit("tool.failed", "tool", self.step, tool=tool, error=info.model_dump())
            raise _Stop("runtime_error", info)
        if "error" in box:
            raise box["error"]
        return box["result"]

    def _observe(self, tool: str, result: dict[str, Any] | None, error: ToolErrorInfo | None) -> Observation:
        """Record the attempt's Observation; a result seen too often fires the no-progress guard."""
        obs = self._append_observation(tool, ok=result is not None, result=result, error=error)
        self.trace.emit("tool.observation", "observation", self.step, observation=obs.model_dump(),
                        state_delta={"observation_count": len(self.observations)})
        if error is not None:
            self.feedback.append(f"{obs.id}: {tool} failed ({error.code}): {error.message}"[:600])
            return obs
        self.record.successes.append((obs.id, tool, result))
        for _, check, spec in self._failing_expectations(tool):
            self.feedback.append(f"{obs.id}: {_falls_short(check)}" + (f"; {spec.hint}." if spec.hint else ".")[:600])
        digest = canonical({"tool": tool, "digest": self.tools.get(tool).digest(result)})
        self.guards.result_digests[digest] += 1
        if self.guards.result_digests[digest] >= self.budgets.no_progress_limit:
            self._fire_guard("guard.no_progress", code="repeated_result", tool=tool,
                             count=self.guards.result_digests[digest])
        return obs

    def _append_observation(self, tool: str, *, ok: bool, result: dict[str, Any] | None = None,
                            error: ToolErrorInfo | None = None,
                            attempted_arguments: dict[str, Any] | None = None) -> Observation:
        # R-RT-10: n is the position in the whole observation list.
        obs = Observation(id=f"obs-{tool}-{len(self.observations) + 1}", tool=tool, ok=ok, result=result,
                          error=error, attempted_arguments=attempted_arguments)
        self.observations.append(obs)
        self.record.observations.append(obs)
        return obs

    # -- guards and budgets -----------------------------------------------------------------

    def _fire_guard(self, event_type: str, **payload: Any) -> None:
        self.guards.fired = True
        self.record.guard_fired = True
        self.trace.emit(event_type, "run", self.step, **payload)
        raise _Stop("loop_detected")

    def _mark_progress(self) -> None:
        """A valid action or an accepted Final recovers the pending model faults before it."""
        self.usage.recovered += self.usage.pending_recoverable
        self.usage.pending_recoverable = 0

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

    # -- branch -----------------------------------------------------------------------------

    def _latest_ok(self) -> dict[str, Observation]:
        latest: dict[str, Observation] = {}
        for obs in self.observations:
            if obs.ok:
                latest[obs.tool] = obs
        return latest

    def _covered(self, tool: str) -> dict[str, str]:
        """Subgoal item key -> id of the latest successful Observation of ``tool`` that covers it."""
        covers = self.tools.get(tool).covers
        found: dict[str, str] = {}
        for obs in self.observations:
            if obs.ok and obs.tool == tool and covers is not None:
                item = covers(obs.result or {})
                if item:
                    found[item_key(item)] = obs.id
        return found

    def _required_evidence(self) -> list[tuple[str, str | None]]:
        """(what, latest successful Observation id or None) for everything a Final must cite."""
        latest = self._latest_ok()
        needed: list[tuple[str, str | None]] = []
        for tool in self.pack.task.required_tools:
            items = self.pack.task.subgoals.get(tool)
            if items:
                covered = self._covered(tool)
                needed += [(f"{tool} ({item})", covered.get(item_key(item))) for item in items]
            else:
                needed.append((tool, latest[tool].id if tool in latest else None))
        return needed

    def _branch(self) -> Branch:
        """Guided mode (§5): the first required tool (or subgoal item) without a successful
        Observation, else Final. Free mode: the model chooses among the run's tools."""
        task = self.pack.task
        if self.mode == "free":
            # The Final is one of the choices only once the evidence gate could accept one: until
            # then the grammar offers the tools alone (the 1.5B answered after one of two lookups,
            # inventing the other, until the premature-final guard: 9 of 10 free runs).
            ready = all(obs_id for _, obs_id in self._required_evidence())
            citable = tuple(o.id for o in self.observations[-VISIBLE_OBSERVATIONS:] if o.ok) if ready else ()
            form, numbers, bound = self._final_form(citable)
            # The model chooses, but it is told which declared item no Observation covers yet
            # (free-mode runs of the population pack looked the same fact up until the loop guard).
            missing = next(((tool, item) for tool, items in task.subgoals.items() if tool in self.tools
                            for item in items if item_key(item) not in self._covered(tool)), (None, None))
            return Branch("free", tool=missing[0], target=missing[1], evidence_ids=citable, answer_form=form,
                          numbers=numbers, bound=bound, language=self.language,
                          summary="Free mode: the model chooses the next tool or the final answer.")
        # A workspace task's reads, changes and test runs follow its evidence (workspace_evidence.py),
        # not the fixed order below; when it has nothing left to do, the Final comes next.
        step = next_step(task, self.observations, self.ctx.workspace) if task.workspace is not None else None
        if step is not None:
            return Branch("action", tool=step.tool, target=step.target, narrowed=step.narrowed, drafts=step.drafts,
                          code_field=step.code_field, explore=step.explore, summary=self._action_summary(step.tool))
        for tool in (task.required_tools if task.workspace is None else ()):
            items = task.subgoals.get(tool)
            if items:
                covered = self._covered(tool)
                missing = next((item for item in items if item_key(item) not in covered), None)
                if missing is not None:
                    return Branch("action", tool=tool, target=missing, summary=self._action_summary(tool))
            elif tool not in self._latest_ok():
                # After a rejected call the tool's expectations narrow the arguments they can (the
                # 0.5B repeated a chart of 4 labels and 1 value until the loop guard stopped it).
                # On the first ask the same evidence is only a draft: it speeds decoding where the
                # model copies it and never constrains what the model writes.
                narrowing, rejected = self._narrowing(tool), self._last_rejected(tool)
                return Branch("action", tool=tool, narrowed=narrowing if rejected else (),
                              drafts=() if rejected else _draft_texts(narrowing), summary=self._action_summary(tool))
            elif failing := self._failing_expectations(tool):
                # Asked again: the instruction names what the result must be, and an expectation
                # may narrow the arguments' grammar (e.g. an expression ending in a division).
                _, check, spec = failing[0]
                narrowed = self._narrowing(tool, [failed for _, _, failed in failing])
                return Branch("action", tool=tool, target=check.label + (f" ({spec.hint})" if spec.hint else ""),
                              narrowed=narrowed, summary=self._action_summary(tool))
        evidence = tuple(dict.fromkeys(obs_id for _, obs_id in self._required_evidence() if obs_id))
        form, numbers, bound = self._final_form(evidence)
        return Branch("final", evidence_ids=evidence, answer_form=form, numbers=numbers, bound=bound,
                      language=self.language,
                      summary=task.summaries.get("final", "All required observations present: answer with evidence."))

    def _narrowing(self, tool: str, specs: list[CheckSpec] | None = None) -> tuple[tuple[str, Any], ...]:
        """The argument schemas that ``specs`` (default: every expectation on ``tool``'s result)
        declare, with their evidence references resolved; a reference to nothing yet narrows nothing."""
        if specs is None:
            guide = self._guide()
            specs = [s for s in (guide.expect if guide else []) if self._ref_tool(s.left) == tool]
        narrowed = {}
        for spec in specs:
            for name, sub in (spec.arguments or {}).items():
                resolved = self._resolve_refs(sub)
                if resolved:
                    narrowed[name] = resolved
        return tuple(narrowed.items())

    def _last_rejected(self, tool: str) -> bool:
        """``tool``'s latest Observation is an argument rejection."""
        last = next((o for o in reversed(self.observations) if o.tool == tool), None)
        return last is not None and not last.ok and last.error is not None and last.error.code == "invalid_arguments"

    def _final_form(self, evidence_ids: tuple[str, ...]) -> tuple[str | None, tuple[str, ...],
                                                                  tuple[tuple[str, ...] | None, ...]]:
        """The answer form; for its number slots, the numbers the cited evidence holds; for its bound
        slots, the value each expression has on that evidence (so the grammar admits only it)."""
        guide = self._guide()
        if guide is None or not guide.answer_form:
            return None, (), ()
        cited = [o for o in self.observations if o.id in evidence_ids and o.ok]
        checks = self._resolved_checks(guide)
        values = [v for c in checks for v in (c.left, c.right) if v is not None] + evidence_numbers(cited)
        return guide.answer_form, number_forms(values), bound_forms(guide.answer_form, cited)

    def _action_summary(self, tool: str) -> str:
        return self.pack.task.summaries.get(tool) or self.tools.get(tool).summary

    def _summary(self, branch: Branch, decision: ActionDecision | FinalDecision) -> str:
        if branch.kind != "free":
            return branch.summary
        if isinstance(decision, FinalDecision):
            return "Model proposes the final answer; the evidence gate decides."
        return f"Model chose {decision.tool}; the runtime validates the arguments before any dispatch."

    def _prompt_state(self, branch: Branch) -> PromptState:
        guide = self._guide() if branch.kind != "action" else None
        return PromptState(
            goal=self.pack.task.goal, observations=self.observations, feedback=self.feedback,
            budget_left=self._remaining(), tool_hints=self.pack.task.hints,
            final_hints=list(guide.hints) if guide else [],
            check_lines=guide_check_lines(guide, [(c.label, c.left, c.op, c.right, c.holds)
                                                  for c in self._resolved_checks(guide)]) if guide else [],
            history=list(self._history), shown_observations=self._shown[0], shown_feedback=self._shown[1])

    # -- end --------------------------------------------------------------------------------

    def _finish(self, stop_reason: str, final: FinalDecision | None, error: ToolErrorInfo | None) -> RunOutcome:
        if getattr(self, "mcp_tools", None) is not None:  # MCP servers never outlive their run
            self.trace.emit("mcp.servers.stopped", "tool", self.step, servers=self.mcp_tools.close())
        status = TERMINAL_STATUS[stop_reason]
        metrics = None
        if stop_reason not in ("model_unavailable", "runtime_error"):
            self.record.usage = self.usage
            self.record.total_ms = (time.monotonic() - self.started) * 1000
            metrics = compute_metrics(self.pack, self.record, stop_reason, final)
        result = RunResult(status=status, stop_reason=stop_reason, final=final, metrics=metrics,
                           observations=self.observations, error=error)
        self.trace.emit("run.finished", "run", self.step, status=status, stop_reason=stop_reason,
                        final=final.model_dump() if final else None,
                        metrics=metrics.model_dump() if metrics else None,
                        error=error.model_dump() if error else None, trace_dropped=self.trace.dropped)
        return RunOutcome(result=result, events=self.trace.events)


def _draft_texts(narrowing: tuple[tuple[str, Any], ...]) -> tuple[str, ...]:
    """Each fixed argument value of a narrowing as the JSON the model would write for it."""
    return tuple(f'"{name}": {json.dumps(sub["const"], ensure_ascii=False)}'
                 for name, sub in narrowing if isinstance(sub, dict) and "const" in sub)


def _falls_short(check: ResolvedCheck) -> str:
    """How a result fails an expectation: a wrong value, or none at all."""
    return f"has no value for {check.label}" if check.left is None else f"{fmt(check.left)} is not {check.label}"


def _isolatable(tool: Any) -> bool:
    """Only the very Tool object at its import path runs in the worker: a copy whose ``execute`` was
    replaced (a test's flaky tool) must run as given, in a thread."""
    try:
        return load_tool(tool.import_path) is tool
    except Exception:  # noqa: BLE001 -- not importable here: run it in a thread
        return False


def run_agent(pack: TaskPack, policy: PolicySource, budgets: Budgets | None = None, *, artifact_dir: Path,
              cancel: threading.Event | None = None, sink: Callable[[dict[str, Any]], None] | None = None,
              tools: ToolRegistry | None = None, mode: str | None = None,
              sampling: Sampling | None = None, allowed_tools: Iterable[str] | None = None,
              workspace: WorkspaceOptions | None = None, prior: PriorTurns | None = None) -> RunOutcome:
    """Run one task to a terminal state. ``policy`` may be a loaded Policy or a loader callable.
    ``allowed_tools`` narrows the pack's tools (MCP ones included); it never adds any. ``workspace``
    is the operator's choice for the workspace tools (``workspace.WorkspaceOptions``). ``prior`` carries
    a session's earlier turns (``PriorTurns``)."""
    run = Run(pack, policy, budgets or Budgets(), artifact_dir=artifact_dir, cancel=cancel, sink=sink,
              tools=tools, mode=mode, sampling=sampling, allowed_tools=allowed_tools, workspace=workspace,
              prior=prior)
    return run.execute()
