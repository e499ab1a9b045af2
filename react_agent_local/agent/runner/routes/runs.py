"""The run routes: queue a job, list the jobs, follow one (poll or Server-Sent Events), cancel it,
answer its approvals, have it explained, fetch its PNGs.

    POST /agent/runs                                 queue a job (202, its view)
    GET  /agent/runs                                 recent jobs, newest first, no events
    GET  /agent/runs/{id}?after_seq=n                status and the events after n
    GET  /agent/runs/{id}/events                     the same events as SSE (agent/runner/streaming.py)
    POST /agent/runs/{id}/cancel                     stop a queued or running job
    GET  /agent/runs/{id}/approvals                  the questions the job waits on (operator only)
    POST /agent/runs/{id}/approvals/{approval_id}    approve or deny the command the job waits on (operator only)
    POST /agent/runs/{id}/explain                    the model's explanation of a finished run (NDJSON)
    GET  /agent/runs/{id}/changes                    a goal's run: what it found and changed (the diff)
    POST /agent/runs/{id}/revert                     a goal's run: put its changed files back
    GET  /agent/runs/{id}/artifacts/{artifact_id}    one PNG of the run's plot tool

The approval routes need the runner's operator token (``context.OPERATOR_ONLY``): the trace, which
any local process may read, never carries a question's id or the real paths of its command.

The two reads of a run's events are async: they read the job store without waiting on the worker
(``agent/runner/job_store.py``), on the event loop, with no thread pool in the way.
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
from typing import Any, Callable, Iterator, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict

from agent.runner import streaming
from agent.coding.approvals import ApprovalClosed, ApprovalNotFound
from agent.runner.boundary import error_body
from agent.runner.requests import ExplainRequest, RunRequest
from agent.runner.job_store import JobAlreadyFinished, JobNotFound, QueueFull, WorkspaceBusy
from agent.models.model_policy import ModelUnavailable
from agent.util.secrets import HeldBack
from agent.contracts.trace import redact
from agent.runner.routes.context import OPERATOR_ONLY, Runner
from agent.runner.routes.errors import ApiError
from agent.runner.routes.model_checks import check_model_path

router = APIRouter()

_AFTER_SEQ = r"^[0-9]{1,10}$"


class ApprovalAnswer(BaseModel):
    """Body of POST /agent/runs/{id}/approvals/{approval_id}: the operator's answer to one question."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "deny"]


@router.post("/agent/runs", status_code=202)
def create_run(body: RunRequest, runner: Runner) -> JSONResponse:
    """Queue one agent job (a pack's, or a goal in words on the operator's folder); 202 with its public
    view (poll it with after_seq)."""
    extra: dict[str, Any] = {}
    if body.goal is not None:
        plan, extra = _admit_goal(body, runner)
    else:
        plan = runner.admit(body)
    try:
        view = runner.store.submit(body, runner.public_model(body), plan, **extra)
    except QueueFull as exc:
        raise ApiError(429, "queue_full", str(exc)) from None
    except WorkspaceBusy as exc:
        raise ApiError(409, "workspace_busy", str(exc)) from None
    return JSONResponse(view, status_code=202)


def _admit_goal(body: RunRequest, runner: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A goal's checks before it is queued: no pack beside it, tools only narrowed, the operator's folder
    configured; the plan and the store's ``public``/``run_for`` for its job."""
    from agent.coding.goal_run import goal_job
    from agent.coding.goal_task import EXTRA_TOOLS, GOAL_TOOLS
    from agent.coding.runner_workspace import RunRefused
    from agent.runner.routes.context import run_with_tools

    if body.pack is not None:
        raise ApiError(400, "goal_with_pack", "a goal's run builds its own task from the operator's folder: "
                                              "send a goal or a pack, not both")
    runner.check_model(body, must_exist=not runner.settings.test_policy)
    if body.tools is not None:
        extra = [t for t in body.tools if t not in GOAL_TOOLS + EXTRA_TOOLS]
        if extra:
            raise ApiError(400, "tools_not_in_pack", f"a goal's run cannot add tools: {', '.join(extra)[:200]}")
        missing = [t for t in GOAL_TOOLS if t not in body.tools]
        if missing:
            raise ApiError(400, "required_tool_removed", f"a goal's run needs these tools: {', '.join(missing)}")
    try:
        plan = runner.workspace.goal_plan(body.approval)
    except RunRefused as exc:
        raise ApiError(exc.status, exc.code, exc.message) from None
    root = runner.workspace.directory

    def run_pack(pack: Any, *args: Any, **kwargs: Any) -> Any:
        return run_with_tools(runner.settings.run_fn, runner.tools, pack, *args, **kwargs)

    return plan, {"public": {"goal": body.goal},
                  "run_for": lambda job_id: goal_job(root, body.goal or "", run_pack, body.budgets)}


@router.get("/agent/runs/{run_id}/changes")
def get_changes(run_id: str, runner: Runner) -> JSONResponse:
    """What a goal's run found (test command, failing tests, frames, files read, protected) and changed
    (the files and the unified diff); 404 for a run that is no goal's or has not found its task yet."""
    from agent.coding.goal_run import job_changes

    view = _goal_view(run_id, runner)
    found = job_changes(runner.store.folders.path(view["id"]))
    if found is None:
        raise ApiError(404, "not_found", "this run has found no task yet")
    return JSONResponse(redact(found))


@router.post("/agent/runs/{run_id}/revert")
def revert_run(run_id: str, runner: Runner) -> JSONResponse:
    """Put back the files a finished goal's run changed in the operator's folder; 409 ``changed_since``
    (nothing changed) when any of them changed after the run, ``workspace_busy`` while a job uses it."""
    from agent.coding.changes import RevertRefused, recorded_root, revert

    view = _goal_view(run_id, runner)
    if view["status"] in ("queued", "running"):
        raise ApiError(409, "run_not_finished", "the run is still going; revert it when it has finished")
    busy = next((j["id"] for j in runner.store.list_recent(200) if not j["terminal"] and (
        (runner.store.view(j["id"], j["last_seq"]).get("request") or {}).get("workspace") or {}).get("source")
        == "operator"), None)
    if busy:
        raise ApiError(409, "workspace_busy", f"job {busy} works in the operator's folder; wait for it or cancel it")
    run_dir = runner.store.folders.path(view["id"])
    root = runner.workspace.directory
    try:
        if root is None or recorded_root(run_dir) != root:
            raise RevertRefused("workspace_moved", "this run's changes were made in another folder than this runner's")
        restored = revert(run_dir, root)
    except RevertRefused as exc:
        status = 404 if exc.code == "no_changes_recorded" else 409
        raise ApiError(status, exc.code, exc.message) from None
    return JSONResponse({"id": view["id"], "reverted": restored})


def _goal_view(run_id: str, runner: Any) -> dict[str, Any]:
    try:
        view = runner.store.view(run_id, 0)
    except JobNotFound:
        raise ApiError(404, "not_found", "no such run") from None
    if not (view.get("request") or {}).get("goal"):
        raise ApiError(404, "not_found", "this run is no goal's run")
    return view


@router.get("/agent/runs")
def list_runs(runner: Runner, limit: int = Query(50, ge=1, le=200)) -> JSONResponse:
    """Recent jobs, newest first (no events)."""
    store = runner.store
    runs = store.list_recent(limit)
    return JSONResponse({"runs": runs, "count": len(runs), "queue_length": store.queue_length,
                         "running_job": store.running_id})


@router.get("/agent/runs/{run_id}")
async def get_run(runner: Runner, run_id: str, after_seq: str = Query(
        "0", pattern=_AFTER_SEQ, description="Integer 0..10**9: return events with seq > after_seq.")) -> Response:
    """Status, events after ``after_seq`` in order, last_seq, and final/metrics/error when terminal."""
    seq = streaming.parse_seq(after_seq)
    if seq is None:
        raise ApiError(422, "validation_error", "after_seq must be an integer from 0 to 1000000000")
    try:  # in-memory only (no store lock, no disk), so it runs on the event loop
        return Response(runner.store.view_json(run_id, seq), media_type="application/json")
    except JobNotFound:
        raise ApiError(404, "not_found", "no such run") from None


@router.get("/agent/runs/{run_id}/events", status_code=200, responses={
    200: {"content": {"text/event-stream": {}},
          "description": "One SSE event per trace event (id = seq); ends after run.finished."},
    204: {"description": "The run has finished and nothing is left after the given seq."},
})
async def stream_run_events(
    request: Request, runner: Runner, run_id: str,
    after_seq: str = Query("0", pattern=_AFTER_SEQ,
                           description="Integer 0..10**9: stream events with seq > after_seq "
                                       "(a Last-Event-ID header takes precedence)."),
) -> Response:
    """Follow a run as Server-Sent Events; resume with Last-Event-ID or after_seq."""
    store, streams, settings = runner.store, runner.streams, runner.settings
    resume = request.headers.getlist("last-event-id")
    seq = streaming.parse_seq(resume[0].strip() if len(resume) == 1 else after_seq if not resume else None)
    if seq is None:
        raise ApiError(422, "validation_error",
                       "after_seq and Last-Event-ID must be one integer from 0 to 1000000000")
    try:
        if store.finished_after(run_id, seq):
            return Response(status_code=204)
    except JobNotFound:
        raise ApiError(404, "not_found", "no such run") from None
    if not streams.take():
        return JSONResponse(error_body("too_many_streams", f"{streams.limit} event streams are open; "
                                                           "poll with after_seq or retry later"),
                            status_code=429, headers={"retry-after": "5"})
    until = asyncio.get_running_loop().time() + settings.stream_max_seconds
    return streaming.event_stream(store.follow(run_id, seq, until=until), release=streams.release,
                                  ping_seconds=settings.stream_ping_seconds,
                                  send_seconds=settings.stream_send_seconds)


@router.post("/agent/runs/{run_id}/cancel")
def cancel_run(run_id: str, runner: Runner) -> JSONResponse:
    """Cancel a queued job (sealed at once) or a running one (stops at the runtime's next check)."""
    try:
        return JSONResponse(runner.store.cancel(run_id))
    except JobNotFound:
        raise ApiError(404, "not_found", "no such run") from None
    except JobAlreadyFinished as exc:
        raise ApiError(409, "already_finished", str(exc)) from None


_OPERATOR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "No operator token (operator_token_required)."},
    403: {"description": "A wrong operator token (operator_token_invalid), or a refused Origin."},
}


@router.get("/agent/runs/{run_id}/approvals", dependencies=OPERATOR_ONLY, responses=_OPERATOR_RESPONSES)
def list_approvals(run_id: str, runner: Runner) -> JSONResponse:
    """The questions the job waits on now, each with its id, the whole command (the workspace as
    ``{workspace}``, other paths as written), its grade, reason and deadline."""
    try:
        runner.store.view(run_id, 10**9)  # an unknown run is a 404, not an empty list
    except JobNotFound:
        raise ApiError(404, "not_found", "no such run") from None
    return JSONResponse({"run_id": run_id, "approvals": runner.store.approvals.pending(run_id)})


@router.post("/agent/runs/{run_id}/approvals/{approval_id}", dependencies=OPERATOR_ONLY,
             responses=_OPERATOR_RESPONSES)
def answer_approval(run_id: str, approval_id: str, body: ApprovalAnswer, runner: Runner) -> JSONResponse:
    """Approve or deny the command a running job waits on (once, before its deadline)."""
    try:
        # A question belongs to one run: another run's id, or a malformed one, finds nothing.
        answer = runner.store.approvals.answer(run_id, approval_id, body.decision)
    except (JobNotFound, ApprovalNotFound):
        raise ApiError(404, "not_found", "no such approval for this run") from None
    except ApprovalClosed as exc:
        raise ApiError(409, "approval_closed", exc.message, reason=exc.reason) from None
    return JSONResponse(answer)


@router.post("/agent/runs/{run_id}/explain", responses={
    200: {"content": {"application/x-ndjson": {}},
          "description": "Lines of JSON: {\"delta\": text} as the model writes, then {\"done\": true, ...}."}})
def explain_run(run_id: str, body: ExplainRequest, runner: Runner) -> Response:
    """The model's short explanation of a finished run (labelled as its words, not facts)."""
    from agent.core.explain import ExplainRefused, explain, trace_digest

    try:
        view = runner.store.view(run_id, 0)
    except JobNotFound:
        raise ApiError(404, "not_found", "no such run") from None
    if view["status"] in ("queued", "running"):
        raise ApiError(409, "run_not_finished", "the run is still going; explain it when it has finished")
    try:
        trace_digest(view["events"])  # refuse before any model is loaded
    except ExplainRefused as exc:
        raise ApiError(409, exc.code, exc.message) from None
    if not runner.settings.test_policy:
        check_model_path(body.model_path)
    try:
        policy = runner.settings.explain_policy_factory(body)
    except ModelUnavailable as exc:
        raise ApiError(409, "model_unavailable", redact(exc.message)) from None
    return StreamingResponse(_explanation_lines(explain, view["events"], policy, body.language),
                             media_type="application/x-ndjson")


@router.get("/agent/runs/{run_id}/artifacts/{artifact_id}",
            responses={200: {"content": {"image/png": {}}, "description": "The PNG."}})
def get_artifact(run_id: str, artifact_id: str, runner: Runner) -> Response:
    """One PNG written by the plot tool of this run."""
    try:
        data = runner.store.read_artifact(run_id, artifact_id)  # opened without following any link
    except JobNotFound:
        raise ApiError(404, "not_found", "no such artifact for this run") from None
    return Response(data, media_type="image/png",
                    headers={"content-disposition": f'inline; filename="{artifact_id}.png"'})


def _explanation_lines(explain: Callable, events: list[dict[str, Any]], policy: Any, language: str) -> Iterator[bytes]:
    """NDJSON lines: the text as the model writes it, then the labelled result (or an error)."""
    lines: queue.Queue[bytes | None] = queue.Queue()
    held = HeldBack()  # a secret's run may be split over two pieces: the tail waits for the next one
    latest = {"text": ""}

    def send(piece: str) -> None:
        if piece:
            lines.put(json.dumps({"delta": redact(piece)}, ensure_ascii=False).encode() + b"\n")

    def on_text(text: str) -> None:
        latest["text"] = text
        send(held.piece(text))

    def work() -> None:
        try:
            result = explain(events, policy, language=language, on_text=on_text)
            send(held.piece(latest["text"], final=True))
            lines.put(json.dumps({"done": True, **result.public()}, ensure_ascii=False).encode() + b"\n")
        except ModelUnavailable as exc:
            lines.put(json.dumps({"done": True, "error": error_body(exc.code, redact(exc.message))["error"]}).encode() + b"\n")
        except Exception as exc:  # noqa: BLE001 -- the stream ends with a structured error, the server lives
            lines.put(json.dumps({"done": True, "error": {"code": "explain_failed",
                                                          "message": type(exc).__name__}}).encode() + b"\n")
        finally:
            lines.put(None)

    threading.Thread(target=work, name="explain", daemon=True).start()
    while True:
        line = lines.get()
        if line is None:
            return
        yield line
