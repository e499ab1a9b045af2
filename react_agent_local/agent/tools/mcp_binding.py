"""The tools of one run: the package's tools a pack names, with the tools of its MCP servers.

``bind_tools`` starts the pack's MCP servers (over stdio, their tools pinned by hash:
``tools/mcp.py``), composes their tools with the local ones, keeps only the tools the pack names,
narrows them to a request's choice (never widening it) and checks every required tool is there.
It returns the registry and the running servers, which the caller closes when the run ends; when
binding fails after the servers started, it stops them itself before it raises.

Failures are ``ToolsUnavailable`` with the stop_reason and error the run ends with:
``pack_invalid`` (unknown or missing tools), ``tool_name_collision``, ``tool_runtime`` (a server
that would not start), or ``cancelled`` while the servers were starting.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

from agent.contracts.decision import ToolErrorInfo
from agent.tools import ToolRegistry, local_tool_names, registry_for

if TYPE_CHECKING:
    from agent.task.packs import TaskPack
    from agent.tools.mcp import McpTools

#: how long the pack's servers may take to start, at most (less when the run's deadline is nearer)
START_SECONDS = 30.0


class ToolsUnavailable(Exception):
    """The run cannot have the tools its pack needs: it ends with ``stop_reason`` before its first step."""

    def __init__(self, stop_reason: str, error: ToolErrorInfo | None = None):
        self.stop_reason = stop_reason
        self.error = error


def bind_tools(pack: TaskPack, tools: ToolRegistry | None, allowed_tools: set[str] | None, *, cancel: threading.Event,
               deadline: float, emit: Callable[..., Any]) -> tuple[ToolRegistry, McpTools | None]:
    """The run's registry and its MCP servers (None without any). ``tools``: a registry passed in
    (the runner's), else the package's tools the pack names. ``emit(type, **payload)`` traces."""
    task = pack.task
    if tools is None:
        try:
            tools = registry_for(local_tool_names(task))
        except KeyError as exc:
            raise ToolsUnavailable("runtime_error", ToolErrorInfo(
                code="pack_invalid", message=f"pack '{pack.name}' names unknown tools: {exc.args[0]}")) from None
    mcp = _start(pack, cancel=cancel, deadline=deadline, emit=emit) if task.mcp_servers else None
    try:
        return _narrowed(pack, tools, mcp, allowed_tools), mcp
    except ToolsUnavailable:
        if mcp is not None:  # MCP servers never outlive their run
            emit("mcp.servers.stopped", servers=mcp.close())
        raise


def _start(pack: TaskPack, *, cancel: threading.Event, deadline: float, emit: Callable[..., Any]) -> McpTools:
    from agent.tools.mcp import McpStartError, McpTools, ToolCollision

    try:
        mcp = McpTools.start(pack.task.mcp_servers, cwd=pack.root, cancel=cancel,
                             timeout=max(0.0, min(START_SECONDS, deadline - time.monotonic())))
    except ToolCollision as exc:
        raise ToolsUnavailable("runtime_error", ToolErrorInfo(code="tool_name_collision", message=str(exc)[:300])) from None
    except McpStartError as exc:
        if cancel.is_set():
            raise ToolsUnavailable("cancelled") from None
        raise ToolsUnavailable("runtime_error", ToolErrorInfo(code="tool_runtime", message=str(exc)[:300])) from None
    emit("mcp.tools.pinned", servers=mcp.describe(), skipped=mcp.skipped)
    return mcp


def _narrowed(pack: TaskPack, tools: ToolRegistry, mcp: McpTools | None, allowed_tools: Iterable[str] | None) -> ToolRegistry:
    task = pack.task
    if mcp is not None:
        from agent.tools.mcp import ToolCollision, compose

        try:
            composed = compose(tools, mcp)
        except ToolCollision as exc:
            raise ToolsUnavailable("runtime_error", ToolErrorInfo(code="tool_name_collision", message=str(exc)[:300])) from None
        # MCP tools the pack does not name never reach a prompt.
        tools = composed.subset(n for n in composed.names if n in tools or n in task.tool_names)
    if allowed_tools is not None:  # a request narrowed the pack's tools (never widens them)
        allowed = set(allowed_tools)
        tools = tools.subset(n for n in tools.names if n in allowed)
    # A registry passed in (the runner's, narrowed by a request) may leave out optional tools,
    # never required ones.
    missing = [t for t in task.required_tools if t not in tools]
    if missing:
        offered = f" (its MCP servers offer: {', '.join(mcp.registry.names) or 'nothing'})" if mcp is not None else ""
        raise ToolsUnavailable("runtime_error", ToolErrorInfo(
            code="pack_invalid", message=(f"pack '{pack.name}' needs tools the run does not have: "
                                          + ", ".join(missing) + offered)[:300]))
    return tools
