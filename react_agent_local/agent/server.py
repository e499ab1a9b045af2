"""The loopback Runner (R-API): FastAPI on 127.0.0.1:4890, one agent job at a time.

Any web page the user opens can send requests to a loopback port, so the browser boundary comes
first (``BrowserBoundary``, a pure ASGI middleware that runs before routing): Host allowlist against
DNS rebinding, exact Origin allowlist for CORS, JSON content type on every write, only GET/POST/
OPTIONS, request bodies of at most 256 KiB counted while they stream. No GET changes state.

Every error that crosses HTTP has the shape ``{"error": {"code", "message"}}`` with a stable code:
bad_request, not_found, forbidden_host, forbidden_origin, method_not_allowed, unsupported_media_type,
payload_too_large, validation_error, already_finished, model_unavailable, unknown_pack, queue_full,
too_many_streams, runner_busy, workspace_not_configured, workspace_busy, approval_not_allowed,
approval_closed, internal_error (the session routes add theirs: ``agent/session_routes.py``).

Workspace tools (``agent/runner_workspace.py``): the operator's ``--workspace DIR``, ``--approval`` and
``--approval-seconds`` are the most any job gets; a request may narrow them, never widen them, and
never names a folder or opts out of the sandbox. While a job's bash command waits for approval its
trace has an ``approval.requested`` event; ``POST /agent/runs/{id}/approvals/{approval_id}`` with
``{"decision": "approve" | "deny"}`` answers it once, before its deadline (``approvals.ApprovalDesk``).

A run is followed by polling ``GET /agent/runs/{id}?after_seq=n`` or through the Server-Sent Events
of ``GET /agent/runs/{id}/events`` (R-STREAM, agent/streaming.py). Both read the job store without
waiting on the worker, on the event loop (no thread pool in the way). OpenTelemetry spans of each
run (R-OTEL, agent/telemetry.py) are off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``--otel-file``
is set.

``REACT_AGENT_TEST_POLICY=<script.json>`` (read by ``main`` only) swaps the model for the scripted
test policy; every job and ``/status`` then say ``test_policy: true`` and the model is named
``scripted-test-policy``, so such a run can never pass for a real one.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import logging
import os
import platform
import re
import stat
import queue
import sys
import threading
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import __version__
from . import streaming
from .boundary import BrowserBoundary, error_body
from .connections import KEEP_ALIVE_SECONDS, REQUEST_READ_SECONDS, read_deadline_protocol, server_config  # noqa: F401
from .contracts import RECOMMENDED_BUDGETS, Budgets, ExplainRequest, InspectRequest, RunRequest, Sampling
from .approvals import ApprovalClosed, ApprovalNotFound
from .job_store import JobAlreadyFinished, JobNotFound, JobStore, PolicyFactory, QueueFull, RunFunction, WorkspaceBusy
from .model_policy import ModelUnavailable
from .packs import DEFAULT_RUNS_DIR, PackError, available_packs, load_pack
from .runner_workspace import APPROVAL_MODES, RUNNER_APPROVAL_SECONDS, RunnerWorkspace, RunRefused, check_folder
from .schemas import decision_schema
from .secrets import HeldBack
from .sessions.store import SessionStore
from .tools import ArgumentError, ToolRegistry, catalog, with_skills
from .tools.facts import with_fact_names
from .trace import path_hash, redact

log = logging.getLogger(__name__)

DEFAULT_PORT = 4890
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
DEFAULT_ORIGINS = ("http://127.0.0.1:8017", "http://localhost:8017")
MAX_BODY_BYTES = 256 * 1024
TEST_POLICY_ENV = "REACT_AGENT_TEST_POLICY"
#: What the scripted TEST policy "explains" (the continuation of a JSON string); never a real model's words.
TEST_EXPLANATION = 'scripted test explanation: the runtime asked for each required tool in turn, then the final."' 
TEST_POLICY_NAME = "scripted-test-policy"
DEPENDENCIES = {  # import name -> distribution name; read from metadata, never imported here
    "fastapi": "fastapi",
    "pydantic": "pydantic",
    "matplotlib": "matplotlib",
    "llama_cpp": "llama-cpp-python",
    "torch": "torch",
    "transformers": "transformers",
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# --------------------------------------------------------------------------------------------
# Settings and errors
# --------------------------------------------------------------------------------------------


def policy_factory_for(access: Any = None) -> PolicyFactory:
    """Load (or reuse) the real model inside the run, so the HTTP side never waits on it. A served
    model (R-SERVE) may live on loopback or on an origin ``access`` (a ``ServedAccess``, built
    from the operator's configuration; default: loopback only, no keys) allows."""

    def factory(request: RunRequest) -> Callable[[], Any]:
        def load() -> Any:
            try:
                from .backends import load_model
            except ImportError as exc:
                raise ModelUnavailable(f"model backends cannot be imported ({type(exc).__name__})") from None
            return load_model(request.model, access)

        return load

    return factory


default_policy_factory = policy_factory_for()


def _load_explainer(body: Any) -> Any:
    try:
        from .backends import load_policy
    except ImportError as exc:
        raise ModelUnavailable(f"model backends cannot be imported ({type(exc).__name__})") from None
    spec = body.model
    return load_policy(spec.path, spec.device, spec.dtype, spec.backend)


def _default_run_fn(*args: Any, **kwargs: Any) -> Any:
    from .runtime import run_agent

    return run_agent(*args, **kwargs)


@dataclass
class RunnerSettings:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    allow_origins: tuple[str, ...] = DEFAULT_ORIGINS
    runs_dir: Path = DEFAULT_RUNS_DIR
    max_runs: int = 200
    max_run_bytes: int = 500 * 1024 * 1024
    max_queued: int = 100
    max_body_bytes: int = MAX_BODY_BYTES
    policy_factory: PolicyFactory = field(default=default_policy_factory)
    run_fn: RunFunction = field(default=_default_run_fn)
    #: True when policy_factory is a scripted test policy: jobs are labelled and no model path is needed.
    test_policy: bool = False
    #: The tools this runner offers (default: the package's); a run gets those its pack names.
    tools: ToolRegistry | None = None
    #: Jobs on a served model that may run at once (in-process models always run one at a time).
    max_concurrent_served: int = 4
    #: The model that explains a finished run (default: the local model the request names).
    explain_policy_factory: Callable[[Any], Any] = field(default=lambda body: _load_explainer(body))
    #: Origins a served model may live on besides loopback (``--allow-model-host``; each pins scheme
    #: and port).
    allow_model_hosts: tuple[str, ...] = ()
    #: Which key goes to which provider and origin: ``KIND@ORIGIN=VARIABLE`` (``--model-key``), read
    #: from this process's environment when the app is created. A request never names a key.
    model_keys: tuple[str, ...] = ()
    #: Event streams open at once at most; one more is refused with 429 too_many_streams.
    max_streams: int = 200
    #: Seconds one stream write may take, and (``main``) the connection's write deadline: a client
    #: that stopped reading, or accepts no byte of a heartbeat, is cut off after it.
    stream_send_seconds: float = 10.0
    #: Seconds between keep-alive comments on a quiet stream.
    stream_ping_seconds: float = 15.0
    #: Seconds a stream stays open; then it ends and the browser resumes it with Last-Event-ID.
    stream_max_seconds: float = 300.0
    #: OpenTelemetry export (agent/telemetry.Telemetry); None, the default, means off.
    telemetry: Any = None
    #: The operator's folder for packs whose workspace tools have no template (``--workspace``);
    #: None: such runs are refused. Packs with a template work on a copy in the run's folder.
    workspace: Path | None = None
    #: The approval policy of every job's bash commands (``--approval``); a request may only tighten it.
    approval: str = "ask_on_risk"
    #: Seconds a job waits for the page's answer to one approval (``--approval-seconds``); then refused.
    approval_seconds: float = RUNNER_APPROVAL_SECONDS
    #: Sessions kept in ``runs_dir/sessions`` (the oldest not in use go first), and the size cap of one
    #: session file (``agent/sessions/store.py``).
    max_sessions: int = 100
    max_session_bytes: int = 8 * 1024 * 1024


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, **extra: Any):
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    """Every 4xx/5xx body."""

    error: ErrorDetail


class ApprovalAnswer(BaseModel):
    """Body of POST /agent/runs/{id}/approvals/{approval_id}: the operator's answer to one question."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "deny"]


class ValidateArgumentsRequest(BaseModel):
    """Body of POST /schema/validate (Experiment 2): one tool name and its candidate arguments."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(min_length=1, max_length=64)
    arguments: dict[str, Any]


_STATUS_CODES = {
    400: "bad_request", 403: "forbidden", 404: "not_found", 405: "method_not_allowed", 409: "conflict",
    413: "payload_too_large", 415: "unsupported_media_type", 421: "forbidden_host", 422: "validation_error",
    429: "queue_full", 500: "internal_error", 503: "unavailable",
}
_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (400, 403, 404, 405, 409, 413, 415, 421, 422, 429)
}


def _error(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse(error_body(code, message, **extra), status_code=status)


# --------------------------------------------------------------------------------------------
# Helpers of the endpoints
# --------------------------------------------------------------------------------------------


def check_model_path(raw: str, *, must_exist: bool = True) -> None:
    """Refuse paths that no backend should touch, reading nothing (not even the first byte).

    The message never repeats the path: it may name a private folder.
    """
    if _CONTROL.search(raw):
        raise ApiError(400, "model_unavailable", "the model path contains a NUL or control character",
                       reason="invalid_model_path")
    if not must_exist:
        return
    try:
        st = os.stat(os.path.expanduser(raw))  # follows links; a loop raises ELOOP
    except (OSError, ValueError):
        raise ApiError(400, "model_unavailable", "the model path does not exist or cannot be accessed",
                       reason="invalid_model_path") from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise ApiError(400, "model_unavailable",
                       "the model path is not a regular file or directory (devices, FIFOs and sockets are refused)",
                       reason="not_a_model")


def dependency_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name, dist in DEPENDENCIES.items():
        try:
            versions[name] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _loaded_models() -> list[dict[str, Any]]:
    try:
        from .backends import loaded_models
    except ImportError:
        return []
    try:
        return redact(loaded_models())
    except Exception:  # noqa: BLE001 -- a status page must not fail because a backend misbehaves
        log.exception("loaded_models failed")
        return []


def _explanation_lines(explain: Callable, events: list[dict[str, Any]], policy: Any, language: str) -> Any:
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


def _check_narrowed_tools(body: RunRequest, task: Any) -> None:
    """A request may narrow the pack's tools, never widen them, and must leave the required ones."""
    extra = [t for t in body.tools or [] if t not in task.tool_names]
    if extra:
        raise ApiError(400, "tools_not_in_pack", f"tools the pack does not use cannot be added: {', '.join(extra)[:200]}")
    missing = [t for t in task.required_tools if t not in (body.tools or [])]
    if missing:
        raise ApiError(400, "required_tool_removed", f"the pack needs these tools: {', '.join(missing)}")


def _budget_form_schema() -> dict[str, Any]:
    schema = Budgets.model_json_schema()
    sampling = Sampling.model_json_schema()
    return {**schema, "properties": {**schema["properties"], **sampling["properties"]}}


def pack_list() -> list[dict[str, Any]]:
    packs = []
    for name in available_packs():
        try:
            task = load_pack(name).task
        except PackError as exc:
            packs.append({"name": name, "ok": False, "error": redact(str(exc))})
            continue
        packs.append({"name": name, "ok": True, "task_id": task.id, "goal": task.goal,
                      "required_tools": list(task.required_tools), "tools": task.tool_names, "mode": task.mode})
    return packs


def _check_served_model(body: RunRequest | InspectRequest, access: Any) -> None:
    """A served model's origin is checked before the job is queued (and again when it loads); the
    request may not name a key's variable: which key goes where is the operator's configuration."""
    from .backends.served import ServedModelError, base_url_of

    if "api_key_env" in body.model.model_fields_set:
        raise ApiError(422, "validation_error", "model.api_key_env: a request cannot choose a key; which key "
                       "goes to which provider and host is the runner operator's configuration (--model-key)",
                       fields=[{"loc": ["body", "model", "api_key_env"], "msg": "not accepted in a request",
                                "type": "key_not_requestable"}])
    try:
        access.endpoint(base_url_of(body.model))
    except ServedModelError as exc:
        raise ApiError(400, "model_unavailable", exc.message, reason=exc.code) from None


def _public_model(request: RunRequest, test_policy: bool) -> dict[str, Any]:
    if request.model.kind != "local":  # served: its name, host and a hash (never a key)
        from .backends.served import public_hash

        return {"name": redact(request.model.model)[:120], "path_hash": public_hash(request.model),
                "test_policy": test_policy, "kind": request.model.kind}
    if test_policy:
        return {"name": TEST_POLICY_NAME, "path_hash": path_hash(request.model_path), "test_policy": True}
    try:  # the same name and hash that model.load.completed will show (the resolved model file)
        from .backends import locate_model

        loc = locate_model(request.model_path)
        return {"name": loc.name[:120], "path_hash": loc.path_hash, "test_policy": False}
    except (ImportError, ModelUnavailable):
        name = redact(os.path.basename(request.model_path.rstrip("/\\")) or "model")
        return {"name": name[:120], "path_hash": path_hash(request.model_path), "test_policy": False}


# --------------------------------------------------------------------------------------------
# The application
# --------------------------------------------------------------------------------------------


def create_app(settings: RunnerSettings | None = None) -> FastAPI:
    settings = settings or RunnerSettings()
    tools = settings.tools if settings.tools is not None else catalog()

    def pack_tools(pack: Any) -> ToolRegistry:
        # Every run reads the registry of this runner, narrowed to the pack's tools (and by the
        # runtime to what the request allows: allowed_tools), with load_skill when the pack has
        # skills and lookup_fact bound to the pack's fact names; a pack naming a tool the runner
        # lacks fails the run with pack_invalid.
        names = [n for n in pack.task.tool_names if n in tools]
        return with_fact_names(with_skills(tools.subset(names), pack.skills), pack)

    def run_with_tools(pack: Any, *args: Any, **kwargs: Any) -> Any:
        return settings.run_fn(pack, *args, tools=pack_tools(pack), **kwargs)

    telemetry = settings.telemetry
    from .backends.served_access import ServedAccess

    # The operator's keys are read once, here, and registered with the redactor (agent/secrets.py).
    access = ServedAccess.of(settings.allow_model_hosts, settings.model_keys)
    policy_factory = (policy_factory_for(access)
                      if settings.policy_factory is default_policy_factory else settings.policy_factory)
    # An operator fault (a missing folder, an unknown mode) stops the runner here, before it listens.
    workspace = RunnerWorkspace(directory=settings.workspace, approval=settings.approval,  # type: ignore[arg-type]
                                approval_seconds=settings.approval_seconds)
    store = JobStore(settings.runs_dir, run_with_tools, policy_factory,
                     max_runs=settings.max_runs, max_bytes=settings.max_run_bytes, max_queued=settings.max_queued,
                     observer_factory=telemetry.observer if telemetry is not None else None,
                     max_concurrent_served=settings.max_concurrent_served, workspace=workspace)
    sessions = SessionStore(settings.runs_dir / "sessions", max_sessions=settings.max_sessions,
                            max_session_bytes=settings.max_session_bytes)
    streams = streaming.StreamSlots(settings.max_streams)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        store.close()
        sessions.close()
        if telemetry is not None:
            telemetry.shutdown()

    app = FastAPI(title="ReAct Agent Local runner", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None, responses=_ERROR_RESPONSES)
    app.state.store = store
    app.state.settings = settings
    app.add_middleware(BrowserBoundary, port=settings.port, allow_origins=tuple(settings.allow_origins),
                       max_body_bytes=settings.max_body_bytes)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.code, exc.message, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        # Field locations and messages only: input values (a model path, say) are never echoed.
        fields = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))[:200],
                   "type": str(e.get("type", ""))} for e in exc.errors()[:20]]
        message = "; ".join(f"{'.'.join(f['loc'])}: {f['msg']}" for f in fields)[:600] or "invalid request"
        return _error(422, "validation_error", redact(message), fields=redact(fields))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "bad_request" if exc.status_code < 500 else "internal_error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        return JSONResponse(error_body(code, redact(message)), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return _error(500, "internal_error", f"internal error ({type(exc).__name__})")

    @app.get("/status")
    def status() -> JSONResponse:
        """Runner version, capabilities, this interpreter's dependency versions, loaded models, queue."""
        return JSONResponse({
            "runner": "react-agent-local",
            "version": __version__,
            "capabilities": ["agent"],
            "python": {"version": platform.python_version(), "implementation": platform.python_implementation()},
            "dependencies": dependency_versions(),
            "models": _loaded_models(),
            "queue_length": store.queue_length,
            "running_job": store.running_id,
            "running_jobs": store.running_ids,
            "test_policy": settings.test_policy,
            "served_models": {"kinds": ["openai_compatible", "anthropic"], **access.public()},
            "workspace": workspace.public(),
            "limits": {"max_body_bytes": settings.max_body_bytes, "max_queued": settings.max_queued,
                       "max_streams": settings.max_streams},
            "streams_open": streams.open,
        })

    @app.get("/schema")
    def schema() -> JSONResponse:
        """Decision schema, tool argument schemas with timeouts, budget ranges, presets and packs."""
        return JSONResponse({
            # The same generator as the committed schemas/*.json (agent/schemas.py).
            "decision": decision_schema(),
            "tools": tools.describe(),
            # The page's budget form holds the limits and the sampling settings (RunRequest accepts
            # both inside "budgets"); "sampling" is the Sampling object on its own.
            "budgets": _budget_form_schema(),
            "sampling": Sampling.model_json_schema(),
            "recommended_budgets": {k: getattr(RECOMMENDED_BUDGETS, k) for k in (
                "max_steps", "max_tool_calls", "max_seconds", "max_input_tokens", "max_output_tokens")},
            "packs": pack_list(),
        })

    @app.post("/schema/validate")
    def validate_arguments(body: ValidateArgumentsRequest) -> JSONResponse:
        """Validate candidate tool arguments exactly as the runtime would (no tool runs)."""
        registry = tools
        if body.tool not in registry:
            return JSONResponse({"ok": False, "tool": body.tool, "error": {
                "code": "unknown_tool", "message": f"unknown tool; known: {', '.join(registry.tools)}"}})
        try:
            normalized = registry.validate(body.tool, body.arguments)
        except ArgumentError as exc:
            return JSONResponse({"ok": False, "tool": body.tool, "error": {
                "code": "invalid_arguments", "message": exc.message, "bad_fields": exc.bad_fields,
                "missing": exc.missing, "unexpected": exc.unexpected}})
        return JSONResponse({"ok": True, "tool": body.tool, "arguments": normalized.model_dump(mode="json")})

    @app.post("/models/inspect")
    def inspect_model(body: InspectRequest) -> JSONResponse:
        """Check config, tokenizer, weights, dependencies, device and dtype.

        200 with the report when the model is usable; otherwise 400 ``model_unavailable`` whose
        error carries ``reason`` (the backend's code) and the same ``report``.
        """
        if body.model.kind == "local":
            check_model_path(body.model_path)
        else:
            _check_served_model(body, access)
        try:
            from .backends import inspect_model as inspect, inspect_served
        except ImportError as exc:
            raise ApiError(400, "model_unavailable", f"model backends cannot be imported ({type(exc).__name__})")
        try:
            if body.model.kind != "local":  # served: host allowed, SDK, key, GET /models (5 s)
                report = inspect_served(body.model, access)
            else:
                report = inspect(body.model.path, body.model.device, body.model.dtype, body.model.backend)
        except ModelUnavailable as exc:
            # One stable code for the page; the backend's finer reason (not_a_model, ...) rides along.
            raise ApiError(400, "model_unavailable", redact(exc.message), reason=exc.code) from None
        except Exception as exc:  # noqa: BLE001 -- a backend bug is still a refusal, never a 5xx
            log.exception("inspect_model failed")
            raise ApiError(400, "model_unavailable", f"the model cannot be inspected ({type(exc).__name__})",
                           reason="inspect_failed") from None
        report = redact(report)
        if not report.get("ok"):  # refused: 400 with the reasons, and the report for the page to show
            problems = [str(p) for p in report.get("problems") or []] or ["the model cannot be used"]
            raise ApiError(400, "model_unavailable", "; ".join(problems)[:1000],
                           reason=report.get("code") or "model_unavailable", report=report)
        return JSONResponse(report)

    @app.post("/models/unload")
    def unload_models() -> JSONResponse:
        """Free every cached model; refused while a job is running (it is using the model)."""
        if store.running_id is not None:
            raise ApiError(409, "runner_busy", "a job is running; cancel it or wait before unloading")
        try:
            from .backends import unload_all
        except ImportError:
            return JSONResponse({"unloaded": []})
        return JSONResponse(redact(unload_all()))

    def admit(body: RunRequest) -> dict[str, Any] | None:
        """The checks a job passes before it is queued (a run, or a session's turn): its model, its pack,
        the tools it narrows, its workspace. Returns the workspace plan (None without workspace tools)."""
        if body.model.kind == "local":
            check_model_path(body.model_path, must_exist=not settings.test_policy)
        else:
            _check_served_model(body, access)
        if (body.pack or "default") not in available_packs():
            raise ApiError(400, "unknown_pack", f"unknown pack; known: {', '.join(available_packs())}")
        try:
            task = load_pack(body.pack).task
        except PackError as exc:
            raise ApiError(400, "unknown_pack", redact(str(exc))) from None
        if body.tools is not None:
            _check_narrowed_tools(body, task)
        offered = [t for t in (body.tools if body.tools is not None else task.tool_names) if t in tools]
        try:
            return workspace.plan(task, offered, body.approval)
        except RunRefused as exc:
            raise ApiError(exc.status, exc.code, exc.message) from None

    @app.post("/agent/runs", status_code=202)
    def create_run(body: RunRequest) -> JSONResponse:
        """Queue one agent job; 202 with its public view (poll it with after_seq)."""
        plan = admit(body)
        try:
            view = store.submit(body, _public_model(body, settings.test_policy), plan)
        except QueueFull as exc:
            raise ApiError(429, "queue_full", str(exc)) from None
        except WorkspaceBusy as exc:
            raise ApiError(409, "workspace_busy", str(exc)) from None
        return JSONResponse(view, status_code=202)

    @app.get("/agent/runs")
    def list_runs(limit: int = Query(50, ge=1, le=200)) -> JSONResponse:
        """Recent jobs, newest first (no events)."""
        runs = store.list_recent(limit)
        return JSONResponse({"runs": runs, "count": len(runs), "queue_length": store.queue_length,
                             "running_job": store.running_id})

    @app.get("/agent/runs/{run_id}")
    async def get_run(run_id: str, after_seq: str = Query("0", pattern=r"^[0-9]{1,10}$",
                                                           description="Integer 0..10**9: return events with seq > after_seq.")) -> Response:
        """Status, events after ``after_seq`` in order, last_seq, and final/metrics/error when terminal."""
        seq = streaming.parse_seq(after_seq)
        if seq is None:
            raise ApiError(422, "validation_error", "after_seq must be an integer from 0 to 1000000000")
        try:  # in-memory only (no store lock, no disk), so it runs on the event loop
            return Response(store.view_json(run_id, seq), media_type="application/json")
        except JobNotFound:
            raise ApiError(404, "not_found", "no such run") from None

    @app.get("/agent/runs/{run_id}/events", status_code=200, responses={
        200: {"content": {"text/event-stream": {}},
              "description": "One SSE event per trace event (id = seq); ends after run.finished."},
        204: {"description": "The run has finished and nothing is left after the given seq."},
    })
    async def stream_run_events(
        request: Request, run_id: str,
        after_seq: str = Query("0", pattern=r"^[0-9]{1,10}$",
                               description="Integer 0..10**9: stream events with seq > after_seq "
                                           "(a Last-Event-ID header takes precedence)."),
    ) -> Response:
        """Follow a run as Server-Sent Events (R-STREAM); resume with Last-Event-ID or after_seq."""
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

    @app.post("/agent/runs/{run_id}/cancel")
    def cancel_run(run_id: str) -> JSONResponse:
        """Cancel a queued job (sealed at once) or a running one (stops at the runtime's next check)."""
        try:
            return JSONResponse(store.cancel(run_id))
        except JobNotFound:
            raise ApiError(404, "not_found", "no such run") from None
        except JobAlreadyFinished as exc:
            raise ApiError(409, "already_finished", str(exc)) from None

    @app.post("/agent/runs/{run_id}/approvals/{approval_id}")
    def answer_approval(run_id: str, approval_id: str, body: ApprovalAnswer) -> JSONResponse:
        """Approve or deny the command a running job waits on (once, before its deadline)."""
        try:
            # A question belongs to one run: another run's id, or a malformed one, finds nothing.
            answer = store.approvals.answer(run_id, approval_id, body.decision)
        except (JobNotFound, ApprovalNotFound):
            raise ApiError(404, "not_found", "no such approval for this run") from None
        except ApprovalClosed as exc:
            raise ApiError(409, "approval_closed", exc.message, reason=exc.reason) from None
        return JSONResponse(answer)

    @app.post("/agent/runs/{run_id}/explain", responses={
        200: {"content": {"application/x-ndjson": {}},
              "description": "Lines of JSON: {\"delta\": text} as the model writes, then {\"done\": true, ...}."}})
    def explain_run(run_id: str, body: ExplainRequest) -> Response:
        """The model's short explanation of a finished run (labelled as its words, not facts)."""
        from .explain import ExplainRefused, explain, trace_digest

        try:
            view = store.view(run_id, 0)
        except JobNotFound:
            raise ApiError(404, "not_found", "no such run") from None
        if view["status"] in ("queued", "running"):
            raise ApiError(409, "run_not_finished", "the run is still going; explain it when it has finished")
        try:
            trace_digest(view["events"])  # refuse before any model is loaded
        except ExplainRefused as exc:
            raise ApiError(409, exc.code, exc.message) from None
        if not settings.test_policy:
            check_model_path(body.model_path)
        try:
            policy = settings.explain_policy_factory(body)
        except ModelUnavailable as exc:
            raise ApiError(409, "model_unavailable", redact(exc.message)) from None
        return StreamingResponse(_explanation_lines(explain, view["events"], policy, body.language),
                                 media_type="application/x-ndjson")

    @app.get("/agent/runs/{run_id}/artifacts/{artifact_id}",
             responses={200: {"content": {"image/png": {}}, "description": "The PNG."}})
    def get_artifact(run_id: str, artifact_id: str) -> Response:
        """One PNG written by the plot tool of this run."""
        try:
            data = store.read_artifact(run_id, artifact_id)  # opened without following any link
        except JobNotFound:
            raise ApiError(404, "not_found", "no such artifact for this run") from None
        return Response(data, media_type="image/png",
                        headers={"content-disposition": f'inline; filename="{artifact_id}.png"'})

    from .session_routes import SessionDesk, session_router

    app.include_router(session_router(SessionDesk(
        store, sessions, admit=admit, public_model=lambda body: _public_model(body, settings.test_policy),
        pack_tools=pack_tools)))
    return app


# --------------------------------------------------------------------------------------------
# Test policy hook and the command line
# --------------------------------------------------------------------------------------------


def scripted_policy_factory(script: list[Any]) -> PolicyFactory:
    """Each job gets a fresh ScriptedPolicy over the same canned outputs.

    ``script`` items are strings (what the model writes after the runtime's prefix) or
    ``{"text": ..., "seconds": ...}`` for a slow output that honours cancel and deadline.
    """
    from .backends.scripted import ScriptedPolicy, Slow

    steps: list[Any] = []
    for item in script:
        if isinstance(item, str):
            steps.append(item)
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            steps.append(Slow(item["text"], float(item.get("seconds", 0.0))))
        else:
            raise ValueError("each scripted output is a string or {\"text\": str, \"seconds\": number}")
    return lambda request: ScriptedPolicy(list(steps))


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="algolab_local_runner.py",
                                     description="ReAct Agent Local runner (loopback only).")
    parser.add_argument("--host", default="127.0.0.1", help="127.0.0.1 (default), ::1 or localhost")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--allow-origin", action="append", dest="allow_origins", metavar="ORIGIN",
                        help=f"exact Origin allowed to call the runner (repeatable; default {', '.join(DEFAULT_ORIGINS)})")
    parser.add_argument("--runs-dir", type=Path, default=DEFAULT_RUNS_DIR)
    parser.add_argument("--allow-model-host", action="append", dest="allow_model_hosts", default=[], metavar="ORIGIN",
                        help="an origin a served model may live on besides loopback (repeatable): HOST, HOST:PORT or "
                             "http(s)://HOST[:PORT], pinning scheme and port (without a scheme: https, or http for "
                             "a loopback host; without a port: the scheme's)")
    parser.add_argument("--model-key", action="append", dest="model_keys", default=[], metavar="KIND@ORIGIN=VARIABLE",
                        help="send the key in this process's environment variable VARIABLE to provider KIND "
                             "(openai_compatible or anthropic) at exactly ORIGIN, over https or to loopback; the origin "
                             "is allowed too (repeatable; without one, OPENAI_API_KEY goes to https://api.openai.com "
                             "and ANTHROPIC_API_KEY to https://api.anthropic.com when those are allowed)")
    parser.add_argument("--max-runs", type=int, default=200, help="finished runs kept on disk (oldest deleted)")
    parser.add_argument("--max-concurrent-served", type=int, default=4,
                        help="jobs on a served model that may run at once (in-process models: one at a time)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.add_argument("--access-log", action="store_true", help="log every request")
    parser.add_argument("--otel-file", type=Path, metavar="PATH",
                        help="write OpenTelemetry spans of each run to PATH as JSON lines "
                             "(OTEL_EXPORTER_OTLP_ENDPOINT sends them to an OTLP collector instead or as well)")
    parser.add_argument("--workspace", type=Path, default=None, metavar="DIR",
                        help="the folder the workspace tools of packs without their own repository template work in "
                             "(packs with one, like the fixtest_* packs, always work on a fresh copy in the run's "
                             "folder); no request can name another. Commands always run in the sandbox: there is "
                             "no --unsandboxed on the runner")
    parser.add_argument("--approval", default="ask_on_risk", choices=list(APPROVAL_MODES),
                        help="when a job's bash command waits for the lab page's 批准/拒绝 (default ask_on_risk); a "
                             "request may only choose a stricter policy")
    parser.add_argument("--approval-seconds", type=float, default=RUNNER_APPROVAL_SECONDS, metavar="SECONDS",
                        help=f"how long a job waits for that answer before the command is refused "
                             f"(default {RUNNER_APPROVAL_SECONDS:.0f})")
    args = parser.parse_args(argv)
    if args.workspace is not None and (problem := check_folder(str(args.workspace))):
        parser.error(problem)
    if not 1 <= args.approval_seconds <= 3600:
        parser.error("--approval-seconds must be 1..3600")
    if args.host.lower() not in LOOPBACK_HOSTS:
        parser.error(f"--host must be one of {', '.join(LOOPBACK_HOSTS)}: the runner is loopback only")
    if not 1 <= args.port <= 65535:
        parser.error("--port must be 1..65535")
    if args.max_runs < 1:
        parser.error("--max-runs must be at least 1")
    for origin in args.allow_origins or ():
        if not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+", origin):
            parser.error(f"--allow-origin must be scheme://host[:port] without a path: {origin!r}")
    from .backends.served_access import parse_key_entry, parse_origin

    for flag, entries, check in (("--allow-model-host", args.allow_model_hosts, parse_origin),
                                 ("--model-key", args.model_keys, parse_key_entry)):
        for entry in entries:
            try:
                check(entry)
            except ValueError as exc:
                parser.error(f"{flag}: {exc}")
    return args


#: Seconds a client has to send one whole request (headers and body) once it connects or once the
#: previous response ends; a client dribbling bytes is disconnected after it. Idle keep-alive
#: connections close sooner (KEEP_ALIVE_SECONDS).
def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    import uvicorn

    settings = RunnerSettings(host=args.host.lower(), port=args.port, runs_dir=args.runs_dir,
                              allow_model_hosts=tuple(args.allow_model_hosts), model_keys=tuple(args.model_keys),
                              allow_origins=tuple(args.allow_origins or DEFAULT_ORIGINS), max_runs=args.max_runs,
                              max_concurrent_served=max(1, args.max_concurrent_served),
                              workspace=args.workspace, approval=args.approval, approval_seconds=args.approval_seconds)
    script_file = os.environ.get(TEST_POLICY_ENV)
    if script_file:
        script = json.loads(Path(script_file).read_text(encoding="utf-8"))
        settings.policy_factory = scripted_policy_factory(script)
        settings.test_policy = True
        settings.explain_policy_factory = lambda body: scripted_policy_factory([TEST_EXPLANATION])(None)
        print(f"WARNING: {TEST_POLICY_ENV} is set: every job uses the scripted TEST policy, not a model.",
              file=sys.stderr, flush=True)
    try:
        from .telemetry import from_environment

        settings.telemetry = from_environment(args.otel_file)
    except (ImportError, OSError) as exc:
        print(f"error: OpenTelemetry export cannot start: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    if settings.telemetry is not None:
        print(f"OpenTelemetry spans of each run: {settings.telemetry.description}", flush=True)
    print(f"workspace tools: {'the --workspace folder' if settings.workspace else 'no operator folder'} for packs without a "
          f"template, a copy in the run's folder for packs with one; always sandboxed; approval {settings.approval}, "
          f"{settings.approval_seconds:.0f} s to answer", flush=True)
    bind = "127.0.0.1" if settings.host == "localhost" else settings.host
    app = create_app(settings)
    shown = f"[{bind}]" if ":" in bind else bind
    print(f"ReAct Agent Local runner {__version__} on http://{shown}:{args.port} "
          f"(origins: {', '.join(settings.allow_origins)}; Python {platform.python_version()})", flush=True)
    server = uvicorn.Server(server_config(app, bind, args.port, write_seconds=settings.stream_send_seconds,
                                          log_level=args.log_level, access_log=args.access_log))
    server.run()
    if not server.started:  # the port is taken, say; as uvicorn.run does
        sys.exit(3)
