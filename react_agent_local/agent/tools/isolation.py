"""Tools that really stop: an attempt runs in a worker process that a timeout or a cancel kills.

A Python thread cannot be stopped, so a tool that hangs or spins in a thread keeps its CPU and may
still write its artifact after the runtime has moved on. Here a tool with an ``import_path`` runs in
a child process -- a fresh interpreter started with ``subprocess`` (not ``multiprocessing``, whose
``spawn`` re-imports the parent's main script, which an embedding program, a notebook or ``python -``
may not have): the parent sends the tool's import path, the validated arguments and the context over
a pipe and waits for at most the time the runtime allows. When that passes, or the run is cancelled,
the child is killed (SIGKILL after a short SIGTERM) and replaced by a fresh one on the next attempt.
Where file descriptors cannot be passed (Windows), tools run in a thread as before.

Artifacts: the child writes into a staging folder inside the run's artifact folder; the parent moves
the files into place only when the attempt succeeded, and removes the staging folder whatever
happened, so a killed attempt leaves nothing behind.

The worker is process-wide and reused across runs (starting one imports the tools: about a second);
attempts are serialised through it, like the model. Tools without an ``import_path`` (built in a
test, closures) run in a thread as before.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from agent.util.secrets import without_secrets
from agent.tools.base import Tool, ToolContext, ToolError

_KILL_GRACE_SECONDS = 0.2


def load_tool(import_path: str) -> Tool:
    module, _, attribute = import_path.partition(":")
    tool = getattr(importlib.import_module(module), attribute)
    if not isinstance(tool, Tool):
        raise TypeError(f"{import_path} is not a Tool")
    return tool


SUPPORTED = os.name == "posix"


def child_main(read_fd: int, write_fd: int) -> None:
    """Entry point of the worker process (``python -c``): serve requests until the pipe closes."""
    _serve(Connection(read_fd, writable=False), Connection(write_fd, readable=False))


def _serve(requests: Any, replies: Any) -> None:
    """The child's loop: one request at a time, one reply each; exits when the pipe closes."""
    tools: dict[str, Tool] = {}
    while True:
        try:
            import_path, arguments, knowledge_dir, staging_dir, pack_dir = requests.recv()
        except (EOFError, OSError):
            return
        try:
            tool = tools.get(import_path) or tools.setdefault(import_path, load_tool(import_path))
            args = tool.args_model.model_validate(arguments)
            ctx = ToolContext(knowledge_dir=Path(knowledge_dir), artifact_dir=Path(staging_dir),
                              pack_dir=Path(pack_dir) if pack_dir else None)
            reply = ("ok", tool.execute(ctx, args, threading.Event()))
        except ToolError as exc:
            reply = ("error", exc.code, exc.message, exc.retryable)
        except Exception as exc:  # noqa: BLE001 -- a tool bug is a non-retryable tool error
            reply = ("error", "tool_crashed", f"the tool raised {type(exc).__name__}", False)
        try:
            replies.send(reply)
        except (OSError, ValueError):
            return


class ToolWorker:
    """One child process that runs tool attempts; killed and replaced when an attempt overruns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._send: Any = None
        self._conn: Any = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def _start(self) -> None:
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        # The child imports what the parent can: the same interpreter and the same sys.path.
        # No credential reaches a tool's process: a tool that echoes its environment cannot leak a key.
        env = {**without_secrets(os.environ),
               "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))}
        try:
            process = subprocess.Popen(
                [sys.executable, "-c",
                 f"from agent.tools.isolation import child_main; child_main({to_child_r}, {to_parent_w})"],
                pass_fds=(to_child_r, to_parent_w), env=env, stdin=subprocess.DEVNULL, close_fds=True)
        finally:
            os.close(to_child_r)
            os.close(to_parent_w)
        self._process = process
        self._send = Connection(to_child_w, readable=False)
        self._conn = Connection(to_parent_r, writable=False)

    def kill(self) -> None:
        process, send, conn = self._process, self._send, self._conn
        self._process = self._send = self._conn = None
        for end in (send, conn):
            if end is not None:
                end.close()
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(_KILL_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(1.0)

    def run(self, tool: Tool, arguments: dict[str, Any], ctx: ToolContext, *, wait_until: float,
            cancel: threading.Event) -> dict[str, Any] | None:
        """The tool's result; None when ``wait_until`` passed or ``cancel`` was set (the attempt was
        killed). A ToolError from the tool is raised as is."""
        staging = Path(ctx.artifact_dir) / f".attempt-{os.getpid()}-{time.monotonic_ns()}"
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self.kill()
                self._start()
            try:
                self._send.send((tool.import_path, arguments, str(ctx.knowledge_dir), str(staging),
                                 str(ctx.pack_dir) if ctx.pack_dir else None))
                reply = None
                while reply is None:
                    if cancel.is_set() or time.monotonic() >= wait_until:
                        self.kill()
                        return None
                    if self._conn.poll(max(0.0, min(0.05, wait_until - time.monotonic()))):
                        reply = self._conn.recv()
            except (EOFError, OSError, BrokenPipeError):
                self.kill()  # the child died mid-attempt (e.g. killed by the OS): a failed attempt
                raise ToolError("tool_crashed", f"{tool.name}'s worker process died", retryable=True) from None
            finally:
                if reply is None or reply[0] != "ok":
                    shutil.rmtree(staging, ignore_errors=True)
        if reply[0] == "error":
            _, code, message, retryable = reply
            raise ToolError(code, message, retryable)
        _publish(staging, Path(ctx.artifact_dir))
        return reply[1]


def _publish(staging: Path, artifact_dir: Path) -> None:
    """Move a successful attempt's files into the artifact folder; remove the staging folder."""
    try:
        if staging.is_dir() and not staging.is_symlink():
            for item in staging.iterdir():
                if item.is_file() and not item.is_symlink():
                    os.replace(item, artifact_dir / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


_WORKER: ToolWorker | None = None
_WORKER_LOCK = threading.Lock()


def worker() -> ToolWorker:
    """The process-wide tool worker."""
    global _WORKER
    with _WORKER_LOCK:
        if _WORKER is None:
            _WORKER = ToolWorker()
        return _WORKER
