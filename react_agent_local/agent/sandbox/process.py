"""Run one sandbox process: feed stdin, keep the head and tail of its output, stop it on time.

Everything happens in the calling thread with one selector over the pipes, so a command that writes
gigabytes, or never reads its stdin, cannot block the runner: the pipes are drained as fast as they
fill, and only ``max_output_bytes`` per stream are kept (the first half and the last half; the
totals count every byte). The same loop watches the deadline and the cancel event every 50 ms.

How a process is stopped depends on who can end its descendants:

- ``"kill_group"`` (bubblewrap): SIGKILL to the process group. bubblewrap dies, its
  ``--die-with-parent`` kills the sandbox's init, and the kernel ends every process of the pid
  namespace with it.
- ``"supervisor"`` (Landlock, unsandboxed): SIGTERM to ``confine.py``'s supervisor, which kills the
  command and every descendant it reaped as subreaper; SIGKILL to the group only if it has not
  finished within its own bound (a process the supervisor never saw would otherwise be orphaned).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

StopMode = Literal["kill_group", "supervisor"]

_POLL_SECONDS = 0.05
_CHUNK = 1 << 16
_SUPERVISOR_GRACE_SECONDS = 6.0   # confine.py bounds its kill loop at 5 s
_DRAIN_AFTER_EXIT_SECONDS = 2.0   # pipes still open this long after exit belong to no sandbox process


@dataclass
class CommandResult:
    """What a command did. ``exit_code`` is None when the runner killed it (timeout or cancel); a
    signal that ended it otherwise reads as 128 + N, as a shell reports it (SIGXCPU: 152)."""

    exit_code: int | None
    """None also when a disk cap stopped it (``limit_exceeded`` then says which)."""
    stdout: bytes
    stderr: bytes
    stdout_total: int
    stderr_total: int
    timed_out: bool
    cancelled: bool
    duration_s: float
    sandbox: str
    limit_exceeded: str | None = None
    """Set when the command broke a disk cap (the workspace's growth over the run, or the fallback's
    private ``/tmp``): what happened and what was removed. The tool layer reports it as a failure,
    whatever the exit code."""
    removed: tuple[str, ...] = field(default=())
    """Workspace-relative paths the sandbox removed after the command: files over the workspace cap,
    a ``.git`` the command created where none existed (the fallback cannot mount one read-only)."""

    @property
    def stdout_truncated(self) -> bool:
        """True when the middle of stdout was dropped (``stdout`` is its head followed by its tail)."""
        return self.stdout_total > len(self.stdout)

    @property
    def stderr_truncated(self) -> bool:
        return self.stderr_total > len(self.stderr)


class _HeadTail:
    """The first and last ``limit // 2`` bytes of a stream, and how many bytes it had."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit - limit // 2
        self.tail_limit = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_limit:
            self.tail += chunk
            if len(self.tail) > 2 * self.tail_limit:  # trimmed in batches: amortised linear time
                del self.tail[: len(self.tail) - self.tail_limit]

    def value(self) -> bytes:
        return bytes(self.head) + bytes(self.tail[-self.tail_limit:] if self.tail_limit else b"")


def run_process(argv: list[str], *, env: dict[str, str], cwd: str, timeout_s: float,
                cancel: threading.Event | None, stdin: bytes | None, max_output_bytes: int,
                stop_mode: StopMode, sandbox: str, pass_fds: tuple[int, ...] = (),
                over_limit: Callable[[], bool] | None = None) -> CommandResult:
    """``over_limit`` is polled with the deadline; True stops the command as a timeout does, and
    ``limit_exceeded`` is set in the result."""
    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    if max_output_bytes < 0:
        raise ValueError("max_output_bytes must not be negative")
    started = time.monotonic()
    deadline = started + timeout_s
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            close_fds=True, pass_fds=pass_fds)
    outputs = {proc.stdout.fileno(): _HeadTail(max_output_bytes),  # type: ignore[union-attr]
               proc.stderr.fileno(): _HeadTail(max_output_bytes)}  # type: ignore[union-attr]
    selector = selectors.DefaultSelector()
    for fd in outputs:
        selector.register(fd, selectors.EVENT_READ)
    pending = memoryview(stdin or b"")
    if stdin:
        os.set_blocking(proc.stdin.fileno(), False)  # type: ignore[union-attr]
        selector.register(proc.stdin.fileno(), selectors.EVENT_WRITE)  # type: ignore[union-attr]
    timed_out = cancelled = limit_stopped = False
    stop_sent_at: float | None = None
    escalated = False
    exited_at: float | None = None
    try:
        while True:
            # A command that closed its output but keeps running is still waited for (and timed).
            if not selector.get_map() and proc.poll() is not None:
                break
            events = selector.select(_POLL_SECONDS) if selector.get_map() else _wait(proc, _POLL_SECONDS)
            for key, _mask in events:
                if key.fd in outputs:
                    chunk = os.read(key.fd, _CHUNK)
                    if chunk:
                        outputs[key.fd].add(chunk)
                    else:
                        selector.unregister(key.fd)
                else:
                    pending = _feed(selector, proc, pending)
            now = time.monotonic()
            if stop_sent_at is None:
                if cancel is not None and cancel.is_set():
                    cancelled = True
                elif now >= deadline:
                    timed_out = True
                elif over_limit is not None and over_limit():
                    limit_stopped = True
                if timed_out or cancelled or limit_stopped:
                    stop_sent_at = now
                    _stop(proc, stop_mode)
            if stop_sent_at is not None and not escalated and stop_mode == "supervisor" \
                    and proc.poll() is None and now - stop_sent_at > _SUPERVISOR_GRACE_SECONDS:
                escalated = True
                _kill_group(proc)
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > _DRAIN_AFTER_EXIT_SECONDS:
                break
        returncode = proc.wait()
    finally:
        selector.close()
        if proc.poll() is None:
            _kill_group(proc)
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    out, err = outputs.values()
    return CommandResult(exit_code=None if (timed_out or cancelled or limit_stopped) else _exit_code(returncode),
                         stdout=out.value(), stderr=err.value(), stdout_total=out.total,
                         stderr_total=err.total, timed_out=timed_out, cancelled=cancelled,
                         duration_s=time.monotonic() - started, sandbox=sandbox,
                         limit_exceeded="stopped: over a disk cap" if limit_stopped else None)


def _wait(proc: subprocess.Popen[bytes], seconds: float) -> list[tuple[selectors.SelectorKey, int]]:
    """With both pipes closed, wait for the exit itself (returns the moment it happens)."""
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pass
    return []


def _feed(selector: selectors.BaseSelector, proc: subprocess.Popen[bytes], pending: memoryview) -> memoryview:
    fd = proc.stdin.fileno()  # type: ignore[union-attr]
    try:
        written = os.write(fd, pending[:_CHUNK])
        pending = pending[written:]
    except BlockingIOError:
        return pending
    except BrokenPipeError:
        pending = pending[:0]
    if not pending:
        selector.unregister(fd)
        proc.stdin.close()  # type: ignore[union-attr]
    return pending


def _exit_code(returncode: int) -> int:
    # Popen reports "killed by signal N" as -N; the sandbox layers report 128 + N. One convention.
    return 128 - returncode if returncode < 0 else returncode


def _stop(proc: subprocess.Popen[bytes], mode: StopMode) -> None:
    if mode == "supervisor":
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    else:
        _kill_group(proc)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
