"""The loopback Runner: FastAPI on 127.0.0.1:4890 for the lab page; ``create_app`` wires it, ``main``
starts it from the command line.

Any web page the user opens can send requests to a loopback port, so the browser boundary comes
first (``agent/runner/boundary.py``, a pure ASGI middleware that runs before routing): Host allowlist against
DNS rebinding, exact Origin allowlist for CORS, JSON content type on every write, only GET/POST/
OPTIONS, request bodies of at most 256 KiB counted while they stream. No GET changes state.

The routes live in ``agent/runner/routes/`` (status, schema, models, runs) and ``agent/runner/session_routes.py``;
each gets the objects built here -- the tool registry, served-model access, the workspace rules, the
job store (``agent/runner/job_store.py``), the session store, the stream slots -- as one
``routes.context.RunnerContext``.

Every error that crosses HTTP has the shape ``{"error": {"code", "message"}}`` with a stable code
(``agent/runner/routes/errors.py``): bad_request, not_found, forbidden_host, forbidden_origin,
method_not_allowed, unsupported_media_type, payload_too_large, validation_error, already_finished,
model_unavailable, unknown_pack, queue_full, too_many_streams, runner_busy, workspace_not_configured,
workspace_busy, approval_not_allowed, approval_closed, operator_token_required (401),
operator_token_invalid (403), internal_error (the session routes add theirs:
``agent/runner/session_routes.py``).

Workspace tools (``agent/coding/runner_workspace.py``): the operator's ``--workspace DIR``, ``--approval`` and
``--approval-seconds`` are the most any job gets; a request may narrow them, never widen them, and
never names a folder or opts out of the sandbox. While a job's bash command waits for approval its
trace has an ``approval.requested`` event (the whole command, no id); only the operator -- who holds
the token the runner makes and prints at start (``agent/runner/operator_token.py``) -- can read the question
(``GET /agent/runs/{id}/approvals``) and answer it once, before its deadline, with
``POST /agent/runs/{id}/approvals/{approval_id}`` and ``{"decision": "approve" | "deny"}``
(``approvals.ApprovalDesk``).

A run is followed by polling ``GET /agent/runs/{id}?after_seq=n`` or through the Server-Sent Events
of ``GET /agent/runs/{id}/events`` (agent/runner/streaming.py). OpenTelemetry spans of each run
(agent/runner/telemetry.py) are off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``--otel-file`` is set.

``REACT_AGENT_TEST_POLICY=<script.json>`` (read by ``main`` only) swaps the model for the scripted
test policy; every job and ``/status`` then say ``test_policy: true`` and the model is named
``scripted-test-policy``, so such a run can never pass for a real one.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import re
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from agent import __version__
from agent.util import secrets as secret_values
from agent.runner.boundary import BrowserBoundary
# KEEP_ALIVE_SECONDS: the keep-alive main's server runs with (tests read it here).
from agent.runner.connections import KEEP_ALIVE_SECONDS, server_config  # noqa: F401
from agent.runner.job_store import JobStore, PolicyFactory
from agent.runner.operator_token import default_token_file, page_link, remove_token_file, write_token_file
from agent.task.packs import DEFAULT_RUNS_DIR
from agent.runner.routes import models, runs, schema, status
from agent.runner.routes.context import DEFAULT_ORIGINS, DEFAULT_PORT, RunnerContext, RunnerSettings, run_with_tools
from agent.runner.routes.errors import ERROR_RESPONSES, install_error_handlers
from agent.runner.routes.model_checks import default_policy_factory, policy_factory_for
from agent.coding.runner_workspace import APPROVAL_MODES, RUNNER_APPROVAL_SECONDS, RunnerWorkspace, check_folder
from agent.runner.session_routes import SessionDesk, session_router
from agent.sessions.store import SessionStore
from agent.runner.streaming import StreamSlots
from agent.tools import catalog

LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
TEST_POLICY_ENV = "REACT_AGENT_TEST_POLICY"
#: What the scripted TEST policy "explains" (the continuation of a JSON string); never a real model's words.
TEST_EXPLANATION = 'scripted test explanation: the runtime asked for each required tool in turn, then the final."'


def create_app(settings: RunnerSettings | None = None) -> FastAPI:
    settings = settings or RunnerSettings()
    tools = settings.tools if settings.tools is not None else catalog()
    telemetry = settings.telemetry
    from agent.models.backends.served_access import ServedAccess

    # The operator's keys are read once, here, and registered with the redactor (agent/util/secrets.py).
    access = ServedAccess.of(settings.allow_model_hosts, settings.model_keys)
    policy_factory = (policy_factory_for(access)
                      if settings.policy_factory is default_policy_factory else settings.policy_factory)
    # An operator fault (a missing folder, an unknown mode) stops the runner here, before it listens.
    workspace = RunnerWorkspace(directory=settings.workspace, approval=settings.approval,  # type: ignore[arg-type]
                                approval_seconds=settings.approval_seconds)
    store = JobStore(settings.runs_dir, functools.partial(run_with_tools, settings.run_fn, tools), policy_factory,
                     max_runs=settings.max_runs, max_bytes=settings.max_run_bytes, max_queued=settings.max_queued,
                     observer_factory=telemetry.observer if telemetry is not None else None,
                     max_concurrent_served=settings.max_concurrent_served, workspace=workspace)
    sessions = SessionStore(settings.runs_dir / "sessions", max_sessions=settings.max_sessions,
                            max_session_bytes=settings.max_session_bytes)
    runner = RunnerContext(settings=settings, tools=tools, access=access, workspace=workspace, store=store,
                           sessions=sessions, streams=StreamSlots(settings.max_streams))

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        store.close()
        sessions.close()
        for cleanup in app.state.on_shutdown:  # main's token file: gone before uvicorn re-raises the signal
            cleanup()
        if telemetry is not None:
            telemetry.shutdown()

    app = FastAPI(title="ReAct Agent Local runner", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None, responses=ERROR_RESPONSES)
    app.state.runner = runner
    app.state.store = store
    app.state.settings = settings
    app.state.on_shutdown = []
    app.add_middleware(BrowserBoundary, port=settings.port, allow_origins=tuple(settings.allow_origins),
                       max_body_bytes=settings.max_body_bytes)
    install_error_handlers(app)
    for router in (status.router, schema.router, models.router, runs.router):
        app.include_router(router)
    app.include_router(session_router(SessionDesk(store, sessions, admit=runner.admit,
                                                  public_model=runner.public_model, pack_tools=runner.pack_tools)))
    return app


# --------------------------------------------------------------------------------------------
# Test policy hook and the command line
# --------------------------------------------------------------------------------------------


def scripted_policy_factory(script: list[Any]) -> PolicyFactory:
    """Each job gets a fresh ScriptedPolicy over the same canned outputs.

    ``script`` items are strings (what the model writes after the runtime's prefix) or
    ``{"text": ..., "seconds": ...}`` for a slow output that honours cancel and deadline.
    """
    from agent.models.backends.scripted import ScriptedPolicy, Slow

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
    parser.add_argument("--token-file", type=Path, default=None, metavar="PATH",
                        help="where to write this runner's operator token, readable by you only (default "
                             "~/.cache/react-agent-local/runner-<port>.token); the lab page gets it from the link "
                             "printed at start, and only it can answer approvals")
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
    from agent.models.backends.served_access import parse_key_entry, parse_origin

    for flag, entries, check in (("--allow-model-host", args.allow_model_hosts, parse_origin),
                                 ("--model-key", args.model_keys, parse_key_entry)):
        for entry in entries:
            try:
                check(entry)
            except ValueError as exc:
                parser.error(f"{flag}: {exc}")
    return args


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
        from agent.runner.telemetry import from_environment

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
    # Nothing the runner writes or serves may echo the operator token: the redactor knows it too.
    secret_values.register([settings.operator_token])
    app = create_app(settings)
    shown = f"[{bind}]" if ":" in bind else bind
    base = f"http://{shown}:{args.port}"
    print(f"ReAct Agent Local runner {__version__} on {base} "
          f"(origins: {', '.join(settings.allow_origins)}; Python {platform.python_version()})", flush=True)
    token_file = args.token_file or default_token_file(args.port)
    try:
        write_token_file(token_file, settings.operator_token)
    except OSError as exc:
        print(f"error: cannot write the operator token file ({type(exc).__name__}); choose one with --token-file",
              file=sys.stderr, flush=True)
        sys.exit(2)
    # The operator's terminal is the one place the token is shown (as Jupyter does): whoever opens
    # this link is the operator; the page removes the token from its address bar at once.
    app.state.on_shutdown.append(lambda: remove_token_file(token_file, settings.operator_token))
    print(f"operator link (approvals are answered only from it; keep it private):\n    "
          f"{page_link(settings.allow_origins[0], base, settings.operator_token)}\n"
          f"the token is also in {token_file} (readable by you only)", flush=True)
    server = uvicorn.Server(server_config(app, bind, args.port, write_seconds=settings.stream_send_seconds,
                                          log_level=args.log_level, access_log=args.access_log))
    try:
        server.run()
    finally:
        remove_token_file(token_file, settings.operator_token)
    if not server.started:  # the port is taken, say; as uvicorn.run does
        sys.exit(3)
