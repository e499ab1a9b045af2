"""Sessions on the runner: conversations of turns, each turn a job of the job store.

A session (``agent/sessions/``) is a JSONL file in ``<runs_dir>/sessions/``, beside the run folders
(``react-agent chat`` uses the same folder by default, so a conversation begun in the terminal can
go on from the lab page). Every turn is queued as a job of the runner's ``JobStore`` with a run
function of its own (``turns.Conversation.run_turn``), so the run views work for each turn as for
any run: ``GET /agent/runs/{id}``, its event stream, cancel, approvals, artifacts, explain.

    POST /agent/sessions                 create one: the body of POST /agent/runs (model, pack, budgets,
                                         sampling, tools, approval), the ``mode`` of its turns and
                                         optionally ``from_run``: a finished run that becomes turn 1
    GET  /agent/sessions                 the list entries, newest first (``SessionLog.summary``)
    GET  /agent/sessions/{id}            its turns: message, question (``pack`` or ``follow_up``), state,
                                         final, stop_reason, run_id
    POST /agent/sessions/{id}/turns      ``{"message"}``: queue the next turn; 202 with its run id

The routes sit behind the runner's browser boundary like every other; only the POSTs change
anything. What they return holds ids, times and redacted text, never a path. Each session's model is
kept in memory and in the session's private settings file (``SessionStore.remember``: this user's
only, never in a view or the session's public records), so a turn after a runner restart continues
with it; a turn may name the model again, and that one is kept. The public part of the request (mode,
budgets, sampling, tools, approval) is the session's ``session_meta`` record, so it outlives a
restart. The run of each turn is recorded before the turn starts, as a ``turn.run`` record
(``turn``, ``run_id``) that the session store keeps like any other.

One turn of a session is queued or running at a time (409 ``session_busy`` for the next), and its
job opens the session only for the turn, so the store's retention and caps hold on every session
not in use. A turn's plot writes its PNG where the session keeps the turn's artifacts; it is copied
into the job's ``artifacts/`` before the event that names it is stored, so the run's artifact
route serves it. Packs with workspace tools are refused here: their folder and approvals are a
job's, not a session's.

Error codes besides the runner's: ``session_busy``, ``session_model_unknown``, ``session_corrupt``,
``session_full`` (a turn's run error), ``pack_mismatch``, ``run_not_finished``, ``run_in_session``,
``workspace_not_supported``.
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path
from typing import Any, Callable, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agent.models.providers import ModelSpec
from agent.runner.requests import RunRequest, _legacy_model
from agent.contracts.result import RunResult
from agent.contracts.decision import ToolErrorInfo
from agent.runner.job_store import JobNotFound, JobStore, QueueFull, RunFunction
from agent.runner.jobs.run_folder import ARTIFACT_ID, MAX_ARTIFACT_BYTES, RUN_ID
from agent.util.no_follow import NoFollowFolder
from agent.task.packs import PackError, load_pack
from agent.runner.routes.errors import ApiError
from agent.sessions.records import OBSERVATION_EVENTS
from agent.sessions.errors import SessionError, SessionNotFound
from agent.sessions.store import Session, SessionStore
from agent.sessions.turns import MAX_MESSAGE_CHARS, UNRECORDED_EVENTS
from agent.tools import ToolRegistry

log = logging.getLogger(__name__)

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class SessionRequest(RunRequest):
    """Body of POST /agent/sessions."""

    mode: Literal["guided", "free"] | None = Field(
        default=None, description="The mode of the session's turns (default: the pack's).")
    from_run: str | None = Field(
        default=None, pattern=RUN_ID.pattern,
        description="A finished run of this runner that becomes the session's first turn (its pack is the session's).")


class TurnRequest(BaseModel):
    """Body of POST /agent/sessions/{id}/turns: the user's next message, the goal of the turn's run."""

    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    model: ModelSpec | None = Field(
        default=None, description="The model, as POST /agent/runs names it (default: the session's own).")

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        return _legacy_model(data)

    @field_validator("message")
    @classmethod
    def _one_line(cls, value: str) -> str:
        value = " ".join(value.split())  # as turns.Conversation does: one line, the goal of a run
        if not value:
            raise ValueError("a message needs at least one word")
        if _CONTROL.search(value):
            raise ValueError("a message cannot contain control characters")
        return value


class SessionDesk:
    """The runner's sessions: the store, each session's model (in memory), the turn each one runs.

    ``admit`` is the runner's check of a job before it is queued (it raises ``ApiError`` and returns
    the workspace plan), ``public_model`` the public description of a request's model, ``pack_tools``
    the runner's registry for a pack.
    """

    def __init__(self, jobs: JobStore, store: SessionStore, *, admit: Callable[[RunRequest], Any],
                 public_model: Callable[[RunRequest], dict[str, Any]], pack_tools: Callable[[Any], ToolRegistry]):
        self.jobs = jobs
        self.store = store
        self._admit = admit
        self._public_model = public_model
        self._pack_tools = pack_tools
        self._lock = threading.Lock()  # guards the three tables below
        self._models: dict[str, Any] = {}  # session id -> ModelSpec, never written
        self._running: dict[str, str] = {}  # session id -> run id of its latest turn
        self._turn_locks: dict[str, threading.Lock] = {}  # held by a turn's job while the session is open

    # -- the routes' work ----------------------------------------------------------------------

    def create(self, body: SessionRequest) -> dict[str, Any]:
        source = None
        if body.from_run is not None:
            source = self._finished_run(body.from_run)
            if body.pack is not None and body.pack != source["pack"]:
                raise ApiError(400, "pack_mismatch", f"run {source['id']} is a run of pack '{source['pack']}'")
            body = body.model_copy(update={"pack": source["pack"]})
        if self._admit(body) is not None:
            raise ApiError(400, "workspace_not_supported",
                           "sessions do not take packs with workspace tools; start a run of this pack instead")
        public = {"mode": body.mode, "budgets": body.budgets.model_dump(), "sampling": body.sampling.model_dump(),
                  "tools": body.tools, "approval": body.approval}
        with self.store.create(pack=body.pack or "default", runner=public,
                               from_run=source["id"] if source else None) as session:
            if source is not None:
                _import_run(session, source)
        self._remember_model(session.id, body.model)
        with self._lock:
            self._models[session.id] = body.model
            kept = set(self.store.ids())  # forget what retention deleted
            for table in (self._models, self._running, self._turn_locks):
                for session_id in [i for i in table if i not in kept]:
                    del table[session_id]
        return self.view(session.id)

    def start_turn(self, session_id: str, body: TurnRequest) -> dict[str, Any]:
        meta = self._read(session_id).meta
        public = meta.get("runner") if isinstance(meta.get("runner"), dict) else {}
        with self._lock:
            model = body.model or self._models.get(session_id)
        model = model or self._remembered_model(session_id)
        if model is None:
            raise ApiError(409, "session_model_unknown", "this runner does not know the model of this session "
                           "(it was created elsewhere, or before the runner restarted): send the model with the message")
        try:
            request = RunRequest(model=model, pack=meta.get("pack"), budgets=public.get("budgets") or {},
                                 sampling=public.get("sampling") or {}, tools=public.get("tools"),
                                 approval=public.get("approval"))
        except ValidationError:
            raise ApiError(409, "session_corrupt", "the settings this session was created with are not valid") from None
        if self._admit(request) is not None:
            raise ApiError(400, "workspace_not_supported", "sessions do not take packs with workspace tools")
        mode = public.get("mode") if public.get("mode") in ("guided", "free") else None
        with self._lock:
            busy = self._running_turn(session_id)
            if busy is not None:
                raise ApiError(409, "session_busy", f"turn {busy} of this session is still running; "
                               "wait for it to finish or cancel it")
            try:
                view = self.jobs.submit(request, self._public_model(request), None,
                                        public={"session": session_id, "mode": mode},
                                        run_for=lambda run_id: self._turn(session_id, body.message, mode, run_id))
            except QueueFull as exc:
                raise ApiError(429, "queue_full", str(exc)) from None
            self._running[session_id] = view["id"]
            self._models[session_id] = model
        if body.model is not None:
            self._remember_model(session_id, model)
        return {"session_id": session_id, "run_id": view["id"], "run": view}

    def _remember_model(self, session_id: str, model: Any) -> None:
        """The session's model outlives a restart (``SessionStore.remember``: private, never in a view)."""
        try:
            self.store.remember(session_id, model=model.model_dump(mode="json"))
        except (OSError, SessionError):
            log.warning("cannot remember the model of session %s", session_id)

    def _remembered_model(self, session_id: str) -> Any:
        from pydantic import TypeAdapter

        kept = (self.store.remembered(session_id) or {}).get("model")
        try:
            return TypeAdapter(ModelSpec).validate_python(kept) if isinstance(kept, dict) else None
        except ValidationError:
            return None

    def view(self, session_id: str) -> dict[str, Any]:
        log = self._read(session_id)
        run_ids: dict[int, str] = {}
        for record in log.records:
            if record.get("type") == "turn.run" and isinstance(record.get("turn"), int):
                run_ids[record["turn"]] = str(record.get("run_id"))
        runner = log.meta.get("runner") if isinstance(log.meta.get("runner"), dict) else {}
        with self._lock:
            running = self._running_turn(session_id)
        return {**log.summary(), "mode": runner.get("mode"), "from_run": log.meta.get("from_run"),
                "running_run_id": running,
                "turns": [{"turn": t.number, "message": t.message, "question": t.question, "state": t.state,
                           "stop_reason": t.stop_reason, "final": t.final,
                           "observation_ids": [o.id for o in t.observations], "run_id": run_ids.get(t.number)}
                          for t in log.turns()]}

    def list(self) -> list[dict[str, Any]]:
        return self.store.list()

    # -- a turn's job ----------------------------------------------------------------------------

    def _turn(self, session_id: str, message: str, mode: str | None, run_id: str) -> RunFunction:
        """The run function of one turn's job: called on the job's worker like ``runtime.run_agent``."""

        def run(pack: Any, policy: Any, budgets: Any, *, artifact_dir: Path, cancel: threading.Event,
                sink: Callable[[dict[str, Any]], None], sampling: Any = None,
                allowed_tools: list[str] | None = None, **_: Any) -> Any:
            from agent.sessions.turns import Conversation

            with self._lock:
                turn_lock = self._turn_locks.setdefault(session_id, threading.Lock())
            # The job before ends with run.finished and then writes turn.finished: wait for it to close.
            with turn_lock:
                try:
                    session = self.store.open(session_id)
                except SessionError as exc:
                    return _refused(exc.code, exc.message)
                with session:
                    registry = self._pack_tools(pack)
                    if allowed_tools is not None:  # as the runtime narrows a run's tools: never widened
                        registry = registry.subset(n for n in registry.names if n in set(allowed_tools))
                    number = session.log.next_turn()
                    session.append("turn.run", turn=number, run_id=run_id)
                    copy = _ArtifactCopy(self.jobs.runs_dir, self.store.artifact_dir(session_id) / f"turn-{number}",
                                         Path(artifact_dir))

                    def forward(event: dict[str, Any]) -> None:
                        copy(event)
                        sink(event)

                    chat = Conversation(session, pack, policy, budgets=budgets, sampling=sampling, mode=mode,
                                        tools=registry)
                    try:
                        return chat.run_turn(message, sink=forward, cancel=cancel)
                    except ValueError as exc:
                        return _refused("invalid_message", str(exc))
                    except SessionError as exc:
                        return _refused(exc.code, exc.message)

        return run

    # -- helpers ---------------------------------------------------------------------------------

    def _read(self, session_id: str) -> Any:
        try:
            return self.store.read(session_id)
        except SessionNotFound:
            raise ApiError(404, "not_found", "no such session") from None
        except SessionError as exc:
            raise ApiError(409, exc.code, exc.message) from None

    def _running_turn(self, session_id: str) -> str | None:
        """The run id of the session's turn still queued or running (``_lock`` held)."""
        run_id = self._running.get(session_id)
        if run_id is None:
            return None
        try:
            return None if self.jobs.view(run_id, 10**9)["terminal"] else run_id
        except JobNotFound:
            return None

    def _finished_run(self, run_id: str) -> dict[str, Any]:
        try:
            view = self.jobs.view(run_id, 0)
        except JobNotFound:
            raise ApiError(404, "not_found", "no such run") from None
        if not view["terminal"]:
            raise ApiError(409, "run_not_finished", "the run is still going; continue it when it has finished")
        if view["request"].get("session"):
            raise ApiError(400, "run_in_session", f"run {run_id} is a turn of session {view['request']['session']}; "
                           "continue that session")
        if view["request"].get("workspace"):
            raise ApiError(400, "workspace_not_supported", "sessions do not take runs with workspace tools")
        return view


def session_router(desk: SessionDesk) -> APIRouter:
    router = APIRouter()

    @router.post("/agent/sessions", status_code=201)
    def create_session(body: SessionRequest) -> JSONResponse:
        """Create a session (empty, or with a finished run as its first turn); 201 with its view."""
        return JSONResponse(desk.create(body), status_code=201)

    @router.get("/agent/sessions")
    def list_sessions() -> JSONResponse:
        """The sessions, newest first: id, times, pack, turns, the last message's preview, size."""
        sessions = desk.list()
        return JSONResponse({"sessions": sessions, "count": len(sessions)})

    @router.get("/agent/sessions/{session_id}")
    def get_session(session_id: str) -> JSONResponse:
        """One session: its list entry and its turns (message, state, final, run id), no events."""
        return JSONResponse(desk.view(session_id))

    @router.post("/agent/sessions/{session_id}/turns", status_code=202)
    def start_turn(session_id: str, body: TurnRequest) -> JSONResponse:
        """Queue the session's next turn as a run; 202 with its run id (follow it like any run)."""
        return JSONResponse(desk.start_turn(session_id, body), status_code=202)

    return router


# -- module helpers --------------------------------------------------------------------------------


def _refused(code: str, message: str) -> Any:
    """The outcome of a turn that could not start: the job ends failed, with the store's reason."""
    from agent.core.runtime import RunOutcome

    return RunOutcome(result=RunResult(status="failed", stop_reason="runtime_error",
                                       error=ToolErrorInfo(code=code, message=message[:300])), events=[])


def _import_run(session: Session, run: dict[str, Any]) -> None:
    """Write a finished run as turn 1, as ``turns.Conversation`` would have written it."""
    try:
        goal = " ".join(load_pack(run["pack"]).task.goal.split())
    except PackError:
        goal = ""
    events = [e for e in run["events"] if e.get("type") not in UNRECORDED_EVENTS]
    observation_ids: list[str] = []
    for event in events:
        obs = event.get("observation") if event.get("type") in OBSERVATION_EVENTS else None
        if isinstance(obs, dict) and isinstance(obs.get("id"), str) and obs["id"] not in observation_ids:
            observation_ids.append(obs["id"])
    session.append("turn.run", turn=1, run_id=run["id"])
    session.append("turn.started", turn=1, message=goal, question="pack", prior_observations=0, carried_messages=0,
                   from_run=run["id"])
    session.sync()
    for event in events:
        session.append("event", turn=1, event=event)
    session.append("turn.finished", turn=1, status=run["status"], stop_reason=run["stop_reason"],
                   final=run["final"], error=run["error"], metrics=run["metrics"],
                   observation_ids=observation_ids, dropped_events=run.get("dropped_events", 0))
    session.sync()


class _ArtifactCopy:
    """Copies a turn's PNG from the session's artifacts into the job's, both opened without following
    a link below the runs folder (``util.no_follow.NoFollowFolder``), so ``GET /agent/runs/{id}/artifacts/..``
    finds it."""

    def __init__(self, runs_dir: Path, source: Path, target: Path):
        self.runs_dir = Path(runs_dir)
        self.source = Path(source).relative_to(self.runs_dir).parts
        self.target = Path(target).relative_to(self.runs_dir).parts

    def __call__(self, event: dict[str, Any]) -> None:
        obs = event.get("observation") if event.get("type") == "tool.observation" else None
        result = obs.get("result") if isinstance(obs, dict) else None
        artifact = result.get("artifact") if isinstance(result, dict) else None
        if not (isinstance(artifact, dict) and isinstance(artifact.get("id"), str) and ARTIFACT_ID.match(artifact["id"])
                and artifact.get("media_type", "image/png") == "image/png"):
            return
        name = f"{artifact['id']}.png"
        try:
            with NoFollowFolder(self.runs_dir, *self.source) as source:
                data = source.read(name, MAX_ARTIFACT_BYTES)
            with NoFollowFolder(self.runs_dir, *self.target) as target:
                target.write_atomic(name, data)
        except OSError:  # the run goes on; its artifact route answers 404 for this one
            log.warning("cannot copy artifact %s of a session turn", artifact["id"])
