"""What the runner's routes share: the operator's settings and the objects ``create_app`` builds once.

``RunnerSettings`` is the operator's configuration (``agent.runner.server.main`` fills it from the command
line). ``RunnerContext`` holds what every router needs -- the tool registry, served-model access,
the workspace rules, the job store, the session store and the stream slots -- and the checks a job
passes before it is queued (``admit``). ``create_app`` puts one in ``app.state.runner``; a route asks
for it with a parameter typed ``Runner`` (a FastAPI dependency, resolved on the event loop, so an
async route still never leaves it). A route only the operator may call lists ``OPERATOR_ONLY`` in
its dependencies: it needs the runner's operator token (``agent/runner/operator_token.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable

from fastapi import Depends, Request

from agent.runner.requests import RunRequest
from agent.runner.job_store import JobStore, PolicyFactory, RunFunction
from agent.runner.operator_token import bearer, new_token
from agent.task.packs import DEFAULT_RUNS_DIR, PackError, available_packs, load_pack
from agent.coding.runner_workspace import RUNNER_APPROVAL_SECONDS, RunnerWorkspace, RunRefused
from agent.sessions.store import SessionStore
from agent.runner.streaming import StreamSlots
from agent.tools import ToolRegistry, with_fact_names, with_skills
from agent.contracts.trace import redact
from agent.runner.routes.errors import ApiError
from agent.runner.routes.model_checks import check_request_model, default_policy_factory, load_explainer, public_model

if TYPE_CHECKING:
    from agent.models.backends.served_access import ServedAccess

DEFAULT_PORT = 4890
DEFAULT_ORIGINS = ("http://127.0.0.1:8017", "http://localhost:8017")
MAX_BODY_BYTES = 256 * 1024


def _default_run_fn(*args: Any, **kwargs: Any) -> Any:
    from agent.core.run import run_agent

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
    explain_policy_factory: Callable[[Any], Any] = field(default=lambda body: load_explainer(body))
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
    #: The operator's token (``agent/runner/operator_token.py``): made fresh for each runner, printed at
    #: start; reading and answering approvals needs it. Never part of a request, a response or a log.
    operator_token: str = field(default_factory=new_token, repr=False)


def pack_tools(tools: ToolRegistry, pack: Any) -> ToolRegistry:
    """The registry of one run: this runner's tools narrowed to the pack's (and by the runtime to
    what the request allows: allowed_tools), with load_skill when the pack has skills and
    lookup_fact bound to the pack's fact names. A pack naming a tool the runner lacks fails the run
    with pack_invalid."""
    names = [n for n in pack.task.tool_names if n in tools]
    return with_fact_names(with_skills(tools.subset(names), pack.skills), pack)


def run_with_tools(run_fn: RunFunction, tools: ToolRegistry, pack: Any, *args: Any, **kwargs: Any) -> Any:
    """``run_fn`` (the runtime's ``run_agent``) on the pack's registry: the job store's run function."""
    return run_fn(pack, *args, tools=pack_tools(tools, pack), **kwargs)


def check_narrowed_tools(body: RunRequest, task: Any) -> None:
    """A request may narrow the pack's tools, never widen them, and must leave the required ones."""
    extra = [t for t in body.tools or [] if t not in task.tool_names]
    if extra:
        raise ApiError(400, "tools_not_in_pack", f"tools the pack does not use cannot be added: {', '.join(extra)[:200]}")
    missing = [t for t in task.required_tools if t not in (body.tools or [])]
    if missing:
        raise ApiError(400, "required_tool_removed", f"the pack needs these tools: {', '.join(missing)}")


@dataclass(frozen=True)
class RunnerContext:
    settings: RunnerSettings
    tools: ToolRegistry
    #: Where served models may live and which key goes where (read once, when the app is created).
    access: ServedAccess
    workspace: RunnerWorkspace
    store: JobStore
    sessions: SessionStore
    streams: StreamSlots

    def pack_tools(self, pack: Any) -> ToolRegistry:
        return pack_tools(self.tools, pack)

    def public_model(self, body: RunRequest) -> dict[str, Any]:
        return public_model(body, self.settings.test_policy)

    def check_model(self, body: Any, *, must_exist: bool = True) -> None:
        """A local model's path, or a served model's origin (``model_checks``)."""
        check_request_model(body, self.access, must_exist=must_exist)

    def admit(self, body: RunRequest) -> dict[str, Any] | None:
        """The checks a job passes before it is queued (a run, or a session's turn): its model, its pack,
        the tools it narrows, its workspace. Returns the workspace plan (None without workspace tools)."""
        self.check_model(body, must_exist=not self.settings.test_policy)
        if (body.pack or "default") not in available_packs():
            raise ApiError(400, "unknown_pack", f"unknown pack; known: {', '.join(available_packs())}")
        try:
            task = load_pack(body.pack).task
        except PackError as exc:
            raise ApiError(400, "unknown_pack", redact(str(exc))) from None
        if body.tools is not None:
            check_narrowed_tools(body, task)
        offered = [t for t in (body.tools if body.tools is not None else task.tool_names) if t in self.tools]
        try:
            return self.workspace.plan(task, offered, body.approval)
        except RunRefused as exc:
            raise ApiError(exc.status, exc.code, exc.message) from None


async def runner_context(request: Request) -> RunnerContext:
    return request.app.state.runner


#: A route's parameter for the runner's shared objects.
Runner = Annotated[RunnerContext, Depends(runner_context)]


async def operator_only(request: Request) -> None:
    """Refuse a request without the operator's token: 401 when none is sent, 403 when it is wrong."""
    problem = bearer(request.headers.getlist("authorization"), request.app.state.runner.settings.operator_token)
    if problem == "required":
        raise ApiError(401, "operator_token_required",
                       "only the operator may do this: open the lab page from the link the runner printed at start "
                       "(or send Authorization: Bearer <the token in the runner's token file>)")
    if problem is not None:
        raise ApiError(403, "operator_token_invalid", "this is not the token of this runner (it changes at each start)")


#: Dependencies of a route only the operator may call.
OPERATOR_ONLY = [Depends(operator_only)]
