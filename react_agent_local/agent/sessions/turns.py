"""One turn of a session, run by the real runtime: ``Conversation.run_turn(message)``.

A turn is one run of ``runtime.run_agent`` on the session's pack whose goal is the user's message.
The run starts from what the earlier turns left (``runtime.PriorTurns``): every Observation of the
session (citable by its id; the Final gate and the claim check read them like the run's own, and
the run's ids continue their numbering), the carried conversation (``compaction.Context``) and a
note that states the new message. Everything the run emits is recorded as it happens::

    [compaction, when due: the file rewritten with a ``compacted`` record]
    turn.started (fsynced)  ->  [event session.compacted]  ->  event ... event  ->  turn.finished (fsynced)

A process killed inside a turn leaves it open; the next ``SessionStore.open`` marks it
``turn.interrupted`` and its Observations stay in the session. ``run_turn`` refuses a turn only
before it starts: an empty or overlong message (``ValueError``) or a session at its size cap that
compaction cannot shrink (``errors.SessionFull``); once started, a turn always ends with
``turn.finished`` (the runtime ends every run with ``run.finished``, whatever happened).

Use (the runner's endpoints and ``react-agent chat`` do the same)::

    store = SessionStore(folder)
    with store.create(pack="default") as session:        # or store.open(session_id) to resume
        chat = Conversation(session, load_pack("default"), policy)
        result = chat.run_turn("What is the average Task Success?", sink=print)
        result.result.final, result.events, result.compaction

The pack's question and a follow-up's. The first turn, and any turn whose message is the pack's own
goal, asks the pack's question: its Final is held to the pack's answer guide (its answer form,
checks, verdict and expectations, or the ones its family offers) and its metrics grade it against
the pack's ground truth. Any other turn is a follow-up that asks its own question
(``follow_up_pack``): the pack's tools, mode, subgoals and data, none of what the pack says about
its own answer (``FOLLOW_UP_CLEARS``), so its Final is free prose, still gated by the runtime on its
evidence and its claims (cited Observations that exist, numbers grounded in them, comparisons that
hold); and no ground truth describes its question, so its metrics report Task Success, tool
argument accuracy and the checks as N/A (None, ``{}``). ``turn.started`` records which it was
(``question``: ``pack`` or ``follow_up``).

Event numbers. A compaction happens before the turn's run starts; its ``session.compacted`` event is
the turn's first event (``seq`` 1) and the run's events follow it (their ``seq`` one higher than
the run's own trace numbers them), so the turn's run view on the runner (``after_seq``) and the
session file show the same events under the same numbers.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any, Callable

from agent.contracts.budgets import Budgets, Sampling
from agent.contracts.result import RunResult
from agent.contracts.task import TaskSpec
from agent.models.model_policy import ModelUnavailable
from agent.task.packs import PackError, TaskPack
from agent.coding.workspace import WorkspaceOptions
from agent.core.runtime import PolicySource, PriorTurns
from agent.core.run import run_agent
from agent.tools import ToolRegistry, registry_for
from agent.contracts.trace import redact
from agent.sessions.compaction import (
    SUMMARY_GIVEN_UP, Budget, Compaction, CompactionSettings, Context, build_context, compact
)
from agent.sessions.errors import SessionError, SessionFull
from agent.sessions.store import Session

MAX_MESSAGE_CHARS = 2000  # a turn's message is its goal (contracts.TaskSpec.goal)
NOTE = ("The user's next message, the task of this turn: {message} "
        "Observations of earlier turns keep their ids and may be cited.")
#: events the session does not keep (the live view's progress ticks)
UNRECORDED_EVENTS = frozenset({"model.progress"})
#: What a follow-up turn's task leaves out of the pack's: everything the pack says about the answer
#: to its own question -- the answer guide's fields (answer form, checks, verdict, final hints,
#: expectations on tool results), the family whose default guide would fill them in, and the tool
#: hints and step summaries written for that question. Each is set, not left out, because a field
#: ``task.json`` sets, even empty, replaces the family's default (``contracts.TaskSpec.guide_over``).
#: The tools, mode, subgoals (the evidence a Final cites) and data stay the pack's.
FOLLOW_UP_CLEARS = ("family", "answer_form", "checks", "verdict", "final_hints", "expect", "hints", "summaries")
NO_GROUND_TRUTH = "a follow-up turn asks its own question: the pack's ground truth grades the pack's question only"

Sink = Callable[[dict[str, Any]], None]


@dataclass
class TurnResult:
    """A finished turn: its number, the run's result (``observations`` holds the session's, earlier
    turns' first), the turn's events as its run view numbers them (the compaction's first, when one
    ran), the ids of the Observations it made, the compaction that ran before it (its
    ``session.compacted`` event), if one did, and whether it was a follow-up (its own question, not
    the pack's)."""

    turn: int
    result: RunResult
    events: list[dict[str, Any]]
    observation_ids: list[str]
    compaction: dict[str, Any] | None = None
    follow_up: bool = False


class FollowUpPack(TaskPack):
    """A pack as a follow-up turn runs it (``follow_up_pack``): the pack's ground truth describes the
    pack's question, not the turn's, so there is none to load and the run's metrics report no Task
    Success (``metrics.compute_metrics`` reads a ``PackError`` as "no ground truth")."""

    def load_expected(self) -> dict[str, Any]:
        raise PackError(NO_GROUND_TRUTH)


def follow_up_task(task: TaskSpec, message: str) -> TaskSpec:
    """``task`` with ``message`` as its goal and the fields of ``FOLLOW_UP_CLEARS`` set to their defaults."""
    cleared = {name: TaskSpec.model_fields[name].get_default(call_default_factory=True) for name in FOLLOW_UP_CLEARS}
    return task.model_copy(update={"goal": message, **cleared})


def follow_up_pack(pack: TaskPack, message: str) -> FollowUpPack:
    """The pack a follow-up turn with ``message`` runs (see the module docstring)."""
    fields = {f.name: getattr(pack, f.name) for f in dataclasses.fields(pack)}
    return FollowUpPack(**{**fields, "task": follow_up_task(pack.task, message)})


def asks_pack_question(pack: TaskPack, number: int, message: str) -> bool:
    """Turn ``number`` with ``message`` asks the pack's own question: it is the first, or its
    message is the pack's goal (compared as ``run_turn`` writes a message, on one line)."""
    return number == 1 or message == " ".join(pack.task.goal.split())


class Conversation:
    """A session driven turn by turn with the real runtime.

    ``policy`` is a loaded Policy or a loader; a loader is called once, by the first turn that needs
    the model, whose trace then holds the model.load events. ``compaction`` says when the carried
    conversation is compacted; the summariser is the same policy.
    """

    def __init__(self, session: Session, pack: TaskPack, policy: PolicySource, *, budgets: Budgets | None = None,
                 sampling: Sampling | None = None, mode: str | None = None, tools: ToolRegistry | None = None,
                 compaction: CompactionSettings | None = None, workspace: WorkspaceOptions | None = None):
        self.session = session
        self.pack = pack
        self.budgets = budgets or Budgets()
        self.sampling = sampling
        self.mode = mode
        self.tools = tools
        self.workspace = workspace
        self.settings = compaction or CompactionSettings()
        self._source = policy
        self._policy = policy if (not callable(policy) or hasattr(policy, "propose")) else None
        self._lock = threading.Lock()  # one turn at a time per conversation
        self.registry = tools if tools is not None else _registry(pack)

    # -- the public API ------------------------------------------------------------------------

    def context(self) -> Context:
        """The conversation the next turn would carry (before any compaction it would run)."""
        return build_context(self.session.log, self.registry)

    def run_turn(self, message: str, *, sink: Sink | None = None,
                 cancel: threading.Event | None = None) -> TurnResult:
        """Run one turn with ``message`` as its goal; ``sink`` receives each event as it happens
        (``session.compacted`` first when compaction ran, then the run's trace events, numbered
        as the turn numbers them: see "Event numbers" above)."""
        message = " ".join(str(message).split())  # one line: the goal of a run
        if not message:
            raise ValueError("a turn needs a message")
        if len(message) > MAX_MESSAGE_CHARS:
            raise ValueError(f"a message has at most {MAX_MESSAGE_CHARS} characters")
        with self._lock:
            compaction = self._compact_if_due(cancel)
            if compaction is not None:
                # the turn's first event: the run's own follow it, numbered from 2 (``_run``)
                compaction = {"seq": 1, "step": 0, "attempt": 0, "elapsed_ms": 0.0, **compaction}
                if sink is not None:
                    sink(compaction)
            if self.session.size > self.session.store.max_session_bytes:
                raise SessionFull(f"session {self.session.id} is at its size cap "
                                  f"({self.session.size} bytes); start a new session")
            return self._run(message, sink, cancel, compaction)

    # -- a turn ----------------------------------------------------------------------------------

    def _run(self, message: str, sink: Sink | None, cancel: threading.Event | None,
             compaction: dict[str, Any] | None) -> TurnResult:
        session = self.session
        log = session.log
        context = build_context(log, self.registry)
        observations = tuple(log.observations())
        number = log.next_turn()
        follow_up = not asks_pack_question(self.pack, number, message)
        prior = PriorTurns(observations=observations, history=tuple(context.pairs),
                           notes=(NOTE.format(message=message),) if context.pairs else ())
        session.append("turn.started", turn=number, message=message, question="follow_up" if follow_up else "pack",
                       prior_observations=len(observations), carried_messages=2 * len(context.pairs))
        session.sync()
        session.dropped_events = 0
        unrecorded = [0]
        offset = 0 if compaction is None else compaction["seq"]  # the events before the run's first

        def keep(event: dict[str, Any]) -> None:
            if event.get("type") not in UNRECORDED_EVENTS:
                try:
                    session.append("event", turn=number, event=event)
                except (OSError, SessionError):  # a full disk must not end the turn; turn.finished says so
                    unrecorded[0] += 1

        def record(event: dict[str, Any]) -> None:
            event = _renumbered(event, offset)
            keep(event)
            if sink is not None:
                sink(event)

        if compaction is not None:
            keep(compaction)  # the sink has had it, before the turn started
        pack = (follow_up_pack(self.pack, message) if follow_up
                else dataclasses.replace(self.pack, task=self.pack.task.model_copy(update={"goal": message})))
        artifact_dir = session.store.artifact_dir(session.id) / f"turn-{number}"
        try:
            outcome = run_agent(pack, self._policy or self._load, self.budgets, artifact_dir=artifact_dir,
                                cancel=cancel, sink=record, tools=self.tools, mode=self.mode,
                                sampling=self.sampling, workspace=self.workspace, prior=prior)
        except BaseException as exc:  # a second Ctrl-C, or a sink that raised: the turn did not finish
            session.append("turn.interrupted", turn=number, reason=f"the turn was interrupted ({type(exc).__name__})")
            session.sync()
            raise
        result = outcome.result
        events = [*([compaction] if compaction is not None else []), *(_renumbered(e, offset) for e in outcome.events)]
        new_ids = [o.id for o in result.observations[len(observations):]]
        session.append("turn.finished", turn=number, status=result.status, stop_reason=result.stop_reason,
                       final=result.final.model_dump() if result.final else None,
                       error=result.error.model_dump() if result.error else None,
                       metrics=result.metrics.model_dump() if result.metrics else None,
                       observation_ids=new_ids, dropped_events=session.dropped_events + unrecorded[0])
        session.sync()
        return TurnResult(turn=number, result=result, events=events, observation_ids=new_ids, compaction=compaction,
                          follow_up=follow_up)

    def _load(self) -> Any:
        """The runtime's model loader for the first turn: load once, keep it for the next turns."""
        if self._policy is None:
            self._policy = self._source()
        return self._policy

    # -- compaction ------------------------------------------------------------------------------

    def _compact_if_due(self, cancel: threading.Event | None) -> dict[str, Any] | None:
        """Compact when the carried conversation or the file is too large; never raises (a broken
        compaction is reported in its event and the turn goes on)."""
        session = self.session
        try:
            log = session.log
            context = build_context(log, self.registry)
            if not context.pairs:
                return None
            policy = self._summariser()
            budget = Budget.of(policy, self.settings, self.registry)
            long = budget.over(budget.size(context.pairs))
            if not long and session.size <= session.store.compact_bytes:
                return None
            through = max(t.number for t in log.turns())
            earlier = log.compaction() or {}
            done: Compaction = compact(context, log.observations(), policy=policy, settings=self.settings,
                                       budget=budget, registry=self.registry, through_turn=through, shrink=long,
                                       cancel=cancel, summarise=earlier.get("fallback_reason") not in SUMMARY_GIVEN_UP)
            event = done.event()
            session.compact(through, method=done.method, fallback_reason=done.fallback_reason,
                            messages=[list(p) for p in done.context.pairs], summary=done.summary,
                            digested=done.digested, before=done.before.public(), after=done.after.public())
            return {**event, "bytes_after": session.size}
        except Exception as exc:  # noqa: BLE001 -- compaction never brings a turn down
            return redact({"type": "session.compacted", "phase": "session", "method": "failed",
                           "fallback_reason": f"{type(exc).__name__}: {exc}"[:300]})

    def _summariser(self) -> Any:
        """The loaded policy for a summary (loading it if needed); None when it cannot load (the
        turn itself then reports why)."""
        if self._policy is None:
            try:
                self._policy = self._source()
            except ModelUnavailable:
                return None
        return self._policy


def _renumbered(event: dict[str, Any], offset: int) -> dict[str, Any]:
    """A run's event as the turn numbers it: ``offset`` events (the compaction's) come before the run's."""
    return {**event, "seq": event["seq"] + offset} if offset and isinstance(event.get("seq"), int) else event


def _registry(pack: TaskPack) -> ToolRegistry:
    """The package tools of the pack (how earlier Observations are rendered); MCP tools render as JSON."""
    try:
        return registry_for(n for n in pack.task.tool_names if "." not in n)
    except KeyError:
        return ToolRegistry()
