"""One tool attempt behind one call: ``run_attempt(tool, arguments, ctx, deadline=, cancel=)``.

Where the attempt runs is the ``Executor``'s business:

    ProcessExecutor  a tool that lives at an import path (``Tool.import_path``) runs in the worker
                     process of ``tools/isolation.py``, which a timeout or a cancel kills: no CPU or
                     late artifact is left behind
    ThreadExecutor   any other tool (a closure, a copy made in a test, an MCP tool), and every tool
                     where the worker cannot run (no file descriptors to pass: Windows), runs in a
                     thread, which cannot be killed: a timed-out attempt is abandoned and its late
                     result ignored

Either way an attempt is waited on for min(the tool's timeout, the run's deadline), and ends in a
result or one of::

    ToolError("tool_timeout", retryable)         the tool's own timeout passed
    ToolError("deadline_exceeded")               the run's deadline passed while it ran
    ToolError(...)                               the tool's own error (``tool_crashed`` for a bug)
    ToolTransportError                           the tool's runtime broke (an MCP server died)
    Cancelled                                    the run was cancelled while it ran
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from pydantic import BaseModel

from agent.tools import Tool, ToolContext, ToolError, ToolTransportError
from agent.tools.isolation import SUPPORTED as ISOLATION_SUPPORTED
from agent.tools.isolation import worker


class Cancelled(Exception):
    """The run was cancelled while a tool attempt ran."""


class Executor(Protocol):
    def run(self, tool: Tool, arguments: BaseModel, ctx: ToolContext, *, wait_until: float,
            cancel: threading.Event) -> dict[str, Any] | None:
        """The tool's result; None when ``wait_until`` passed or ``cancel`` was set first. The
        tool's ToolError (or ToolTransportError) is raised as is."""


class ProcessExecutor:
    """The process-wide worker of ``tools/isolation.py`` (it re-imports the tool by its path)."""

    def run(self, tool: Tool, arguments: BaseModel, ctx: ToolContext, *, wait_until: float,
            cancel: threading.Event) -> dict[str, Any] | None:
        return worker().run(tool, arguments.model_dump(), ctx, wait_until=wait_until, cancel=cancel)


class ThreadExecutor:
    """A daemon thread per attempt, polled so a cancel is seen within 50 ms."""

    def run(self, tool: Tool, arguments: BaseModel, ctx: ToolContext, *, wait_until: float,
            cancel: threading.Event) -> dict[str, Any] | None:
        box: dict[str, Any] = {}
        done = threading.Event()

        def work() -> None:
            try:
                box["result"] = tool.execute(ctx, arguments, cancel)
            except (ToolError, ToolTransportError) as exc:
                box["error"] = exc
            except Exception as exc:  # noqa: BLE001 -- a tool bug is a non-retryable tool error
                box["error"] = ToolError("tool_crashed", f"{tool.name} raised {type(exc).__name__}", retryable=False)
            finally:
                done.set()

        threading.Thread(target=work, name=f"tool-{tool.name}", daemon=True).start()
        while not done.wait(timeout=max(0.0, min(0.05, wait_until - time.monotonic()))):
            if cancel.is_set():
                return None
            if time.monotonic() >= wait_until:
                break
        if not done.is_set():
            return None
        if "error" in box:
            raise box["error"]
        return box["result"]


PROCESS, THREAD = ProcessExecutor(), ThreadExecutor()


def executor_for(tool: Tool) -> Executor:
    """The worker process for a tool at an import path (where it can run), else a thread."""
    return PROCESS if tool.import_path and ISOLATION_SUPPORTED else THREAD


def run_attempt(tool: Tool, arguments: BaseModel, ctx: ToolContext, *, deadline: float,
            cancel: threading.Event) -> dict[str, Any]:
    """Run one attempt of ``tool`` to its result (see the module docstring for how it may end)."""
    wait_until = min(time.monotonic() + tool.timeout_seconds, deadline)
    result = executor_for(tool).run(tool, arguments, ctx, wait_until=wait_until, cancel=cancel)
    if result is not None:
        return result
    if cancel.is_set():
        raise Cancelled
    if time.monotonic() >= deadline:
        raise ToolError("deadline_exceeded", "the run's deadline passed while the tool ran", retryable=False)
    raise ToolError("tool_timeout", f"{tool.name} did not finish within {tool.timeout_seconds:g} s", retryable=True)
