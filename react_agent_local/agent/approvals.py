"""Approvals: who may let a risky command run, and for how long the run waits for them.

The bash tool grades each command (``shell_risk``) and the run's ``ApprovalPolicy`` decides ``run``,
``refuse`` or ``ask``. ``ask`` goes to the operator's ``Approver`` -- on the CLI a terminal prompt,
later the runner's approval card -- through ``ask_operator``, which waits at most until a deadline.
No approver, an approver that raises, a deadline passing or a cancelled run are all a refusal:
a command nobody approved never runs.

An HTTP request can never approve: the approver is the operator's, passed in by the code that
starts the run (``agent run`` or the runner), never read from a request.
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Literal, TextIO

#: how long a run waits for the operator's answer by default
APPROVAL_SECONDS = 60.0

Verdict = Literal["approved", "denied", "no_approver", "deadline", "cancelled"]


@dataclass(frozen=True)
class ApprovalRequest:
    """What the operator is asked about: the command, its grade and why, and until when."""

    tool: str
    command: str
    level: str
    reason: str
    deadline: float  # time.monotonic()


Approver = Callable[[ApprovalRequest], bool]


def ask_operator(approver: Approver | None, request: ApprovalRequest,
                 cancel: threading.Event | None = None) -> Verdict:
    """The operator's answer, waited for until ``request.deadline`` (or a cancel); anything but a
    clear yes before then is not an approval."""
    if approver is None:
        return "no_approver"
    box: dict[str, bool] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["approved"] = bool(approver(request))
        except Exception:  # noqa: BLE001 -- an approver that fails approves nothing
            box["approved"] = False
        finally:
            done.set()

    threading.Thread(target=work, name="approval", daemon=True).start()
    while not done.wait(timeout=max(0.0, min(0.05, request.deadline - time.monotonic()))):
        if cancel is not None and cancel.is_set():
            return "cancelled"
        if time.monotonic() >= request.deadline:
            return "deadline"
    return "approved" if box.get("approved") else "denied"


def terminal_approver(stdin: TextIO | None = None, stdout: TextIO | None = None) -> Approver | None:
    """A y/N prompt on the terminal; None (every ask refused) when stdin is not a terminal."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stderr
    try:
        interactive = stdin.isatty()
    except (AttributeError, ValueError):
        interactive = False
    if not interactive:
        return None
    lock = threading.Lock()

    def approve(request: ApprovalRequest) -> bool:
        with lock:
            left = max(0.0, request.deadline - time.monotonic())
            stdout.write(f"\n{request.tool} wants to run ({request.level}: {request.reason}):\n"
                         f"  {request.command}\nallow? [y/N] ({left:.0f} s) ")
            stdout.flush()
            return read_answer(stdin, request.deadline)

    return approve


def read_answer(stdin: TextIO, deadline: float) -> bool:
    """One line from ``stdin`` before ``deadline``: True only for y / yes."""
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    buffered = b""
    while b"\n" not in buffered:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if ready:
            chunk = os.read(fd, 256)
            if not chunk:
                break
            buffered += chunk
    return buffered.decode("utf-8", "replace").strip().lower() in ("y", "yes")
