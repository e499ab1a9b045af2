"""Approvals: who may let a risky command run, what they are shown, and how long the run waits.

The bash tool grades each command (``shell_risk``) and the run's ``ApprovalPolicy`` decides ``run``,
``refuse`` or ``ask``. ``ask`` goes to the operator's ``Approver`` -- on the CLI a terminal prompt
(``terminal_approver``), on the runner the lab page's approval card (``ApprovalDesk``) -- through
``ask_operator``, which first puts an ``approval.requested`` event in the trace (the command, its
grade and reason, the deadline) and then waits at most until the deadline. No approver, an approver
that raises, a deadline passing or a cancelled run are all a refusal: a command nobody approved
never runs. Each approver names its ``channel`` (``terminal``, ``page``), which the trace records.

What the operator is shown is the truth:

- the whole command, never cut (the bash tool's own limit keeps it small; the card scrolls);
- with every control, escape, bidi and zero-width character written as a visible escape
  (``visible``: ``\\x1b``, ``\\u202e``), so a command cannot redraw the prompt or reorder its text;
- with the workspace's absolute path shown as ``{workspace}`` (it names the user's home) and every
  other path as written: the operator must see what ``cat /etc/shadow`` reads (``for_operator``).

The trace is readable by any local process, so its event keeps the trace's redaction (paths outside
the workspace become ``<path>``) and never carries the question's ``approval_id``: the id and the
real paths are served only to the operator (``GET /agent/runs/{id}/approvals`` with the runner's
operator token, ``agent/runner/operator_token.py``), and only the operator's token can answer.

The request that starts a run can never approve anything: the approver is the operator's, passed in
by the code that starts the run (``agent run`` or the runner), never read from that request.

Exceptions of the desk::

    ApprovalNotFound   no such question for this run (or the run asked none) -> 404
    ApprovalClosed     answered already, past its deadline, or the run stopped waiting -> 409
"""

from __future__ import annotations

import os
import re
import secrets
import select
import sys
import threading
import time
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Literal, TextIO

from agent.util.secrets import scrub

#: how long a run waits for the operator's answer by default
APPROVAL_SECONDS = 60.0
#: an answer the approver took just before the deadline still counts if it lands within this much after
ANSWER_GRACE_SECONDS = 0.2
APPROVAL_ID = re.compile(r"^apr-[0-9a-f]{16}$")

Verdict = Literal["approved", "denied", "no_approver", "deadline", "cancelled"]
#: The workspace root in what the operator reads (braces, not angle brackets: the trace keeps what follows it).
WORKSPACE_MARK = "{workspace}"
#: Unicode categories never shown raw: controls, format characters (bidi marks and overrides,
#: zero-width ones), line and paragraph separators, surrogates, private use and unassigned.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


_SURROGATE = re.compile("[\ud800-\udfff]")


def visible(text: str) -> str:
    """``text`` with every character that could hide, move or redraw text written as an escape:
    ``\\x1b`` for a control below U+0100, ``\\u202e`` (or ``\\U000e0001``) above; newlines stay."""
    out = []
    for char in text:
        if char != "\n" and unicodedata.category(char) in _HIDDEN_CATEGORIES:
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out)


def for_operator(text: str, workspace: str | None) -> str:
    """What the operator reads of a command or reason: the workspace's absolute path (the user's
    home is in it) as ``{workspace}``, every other path as written, registered secrets scrubbed."""
    text = scrub(text)
    if workspace:
        roots = sorted({workspace.rstrip("/"), os.path.realpath(workspace).rstrip("/")}, key=len, reverse=True)
        for root in (r for r in roots if len(r) > 1):
            text = re.sub(re.escape(root) + r"(?![^/\s'\";|&()<>`$])", WORKSPACE_MARK, text)
    return text


@dataclass(frozen=True)
class ApprovalRequest:
    """What the operator is asked about: the command, its grade and why, and until when."""

    tool: str
    command: str
    level: str
    reason: str
    deadline: float  # time.monotonic()
    #: the run's workspace root, shown as ``{workspace}`` wherever the command names it
    workspace: str | None = None
    #: names this question in the answer's URL; served to the operator only, never put in the trace
    id: str = field(default_factory=lambda: "apr-" + secrets.token_hex(8))

    def _timing(self) -> dict[str, Any]:
        left = max(0.0, self.deadline - time.monotonic())
        expires = datetime.fromtimestamp(time.time() + left, timezone.utc)
        return {"seconds": round(left, 1), "expires_at": expires.isoformat(timespec="milliseconds").replace("+00:00", "Z")}

    def public(self) -> dict[str, Any]:
        """The ``approval.requested`` payload: the whole command (the trace then redacts secrets and
        paths outside the workspace from it), no ``approval_id``."""
        command = for_operator(self.command, self.workspace)
        return {"tool": self.tool, "command": command, "command_chars": len(command),
                "command_lines": command.count("\n") + 1, "level": self.level,
                "reason": for_operator(self.reason, self.workspace), **self._timing()}

    def operator_view(self) -> dict[str, Any]:
        """The question as the operator's card shows it: ``public`` with its id and the real paths
        (lone surrogates, which JSON cannot carry as UTF-8, written as escapes)."""
        view = {"approval_id": self.id, **self.public()}
        for key in ("tool", "command", "level", "reason"):
            view[key] = _SURROGATE.sub(lambda m: visible(m.group()), view[key])
        return view


Answer = Callable[[ApprovalRequest], bool]


@dataclass(frozen=True)
class ChannelApprover:
    """An approver that says where its answer comes from (``terminal``, ``page``) for the trace;
    ``announce`` (optional) learns of the question before its event is written."""

    channel: str
    answer: Answer
    announce: Callable[[ApprovalRequest], None] | None = None

    def __call__(self, request: ApprovalRequest) -> bool:
        return self.answer(request)


#: A plain callable approves too (tests, embedders); its channel is ``callback``.
Approver = ChannelApprover | Answer


def channel_of(approver: Approver | None) -> str:
    """The channel an approver answers through, as the trace records it."""
    if approver is None:
        return "none"
    return approver.channel if isinstance(approver, ChannelApprover) else "callback"


def ask_operator(approver: Approver | None, request: ApprovalRequest,
                 cancel: threading.Event | None = None, emit: Callable[..., None] | None = None) -> Verdict:
    """The operator's answer, waited for until ``request.deadline`` (or a cancel); anything but a
    clear yes before then is not an approval. ``emit`` (the run's trace) gets the question first, so
    whoever answers can see it before the approver starts waiting."""
    if approver is None:
        return "no_approver"
    if isinstance(approver, ChannelApprover) and approver.announce is not None:
        approver.announce(request)  # answerable before anyone can read the question
    if emit is not None:
        emit("approval.requested", **request.public())
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
            # A yes taken just before the deadline may still be on its way out of the approver.
            if done.wait(ANSWER_GRACE_SECONDS) and box.get("approved"):
                return "approved"
            return "deadline"
    if box.get("approved"):
        return "approved"
    # An approver that stops waiting with a no -- a desk closing a cancelled run's questions, a
    # prompt nobody typed into before the deadline -- was not answered: that is no denial.
    if cancel is not None and cancel.is_set():
        return "cancelled"
    return "deadline" if time.monotonic() >= request.deadline else "denied"


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
            stdout.write(terminal_question(request) + f"allow? [y/N] ({left:.0f} s) ")
            stdout.flush()
            return read_answer(stdin, request.deadline)

    return ChannelApprover("terminal", approve)


def terminal_question(request: ApprovalRequest) -> str:
    """The prompt's text: every line of the whole command, indented, escapes visible, so nothing in
    the command can move the cursor, clear a line or reorder what the operator reads."""
    shown = lambda text: visible(for_operator(text, request.workspace))  # noqa: E731
    command = for_operator(request.command, request.workspace)
    lines = visible(command).split("\n")
    body = "".join(f"  | {line}\n" for line in lines)
    size = f"{len(lines)} lines, " if len(lines) > 1 else ""
    return (f"\n{shown(request.tool)} wants to run ({size}{len(command)} characters; graded "
            f"{shown(request.level)}: {shown(request.reason)}):\n{body}")


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


# -- the runner's approvals: questions that wait for the page's answer -------------------------------


class ApprovalNotFound(LookupError):
    """No such question for this run."""


class ApprovalClosed(Exception):
    """The question takes no answer any more: ``reason`` is answered, deadline or run_stopped."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class _Question:
    run_id: str
    deadline: float  # time.monotonic()
    answered: threading.Event = field(default_factory=threading.Event)
    decision: Literal["approve", "deny"] | None = None
    closed: str | None = None  # why no answer is taken: deadline, run_stopped
    request: ApprovalRequest | None = None  # what the operator's card shows


class ApprovalDesk:
    """The runner's questions, each waiting for one answer over HTTP until its deadline.

    A question is opened when the run announces it (``ChannelApprover.announce``, called by
    ``ask_operator`` before the ``approval.requested`` event is written, so the operator's page never
    reads an event whose question the desk does not know yet) and answered at most once, for
    the run that asked it, before its deadline. The run's approver (``approver``) waits on it; a
    cancel or the end of the run closes it. Closed questions are kept (up to ``MAX_KEPT``) so that a
    late or repeated answer gets a clear 409 rather than a 404.
    """

    MAX_KEPT = 1000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._questions: OrderedDict[str, _Question] = OrderedDict()

    def open(self, run_id: str, approval_id: str, seconds: float) -> None:
        """Register a question announced by ``run_id`` (its id and the seconds left)."""
        if not isinstance(approval_id, str) or not APPROVAL_ID.match(approval_id):
            return
        with self._lock:
            if approval_id not in self._questions:
                self._questions[approval_id] = _Question(run_id, time.monotonic() + max(0.0, float(seconds)))
            while len(self._questions) > self.MAX_KEPT:
                oldest = next(iter(self._questions))
                if self._questions[oldest].closed is None and self._questions[oldest].decision is None:
                    break  # never forget a question a run is still waiting on
                del self._questions[oldest]

    def approver(self, run_id: str, cancel: threading.Event) -> ChannelApprover:
        """The approver of one runner job: waits for the page's answer, the deadline or the cancel."""

        def announce(request: ApprovalRequest) -> None:
            self.open(run_id, request.id, request.deadline - time.monotonic())
            with self._lock:
                question = self._questions.get(request.id)
                if question is not None and question.run_id == run_id:
                    question.request = request

        def approve(request: ApprovalRequest) -> bool:
            announce(request)
            with self._lock:
                question = self._questions.get(request.id)
                if question is None or question.run_id != run_id:
                    return False
                question.deadline = min(question.deadline, request.deadline)
            while not question.answered.wait(max(0.0, min(0.05, question.deadline - time.monotonic()))):
                if cancel.is_set() or time.monotonic() >= question.deadline:
                    break
            with self._lock:
                if question.decision is None and question.closed is None:
                    question.closed = "run_stopped" if cancel.is_set() else "deadline"
                return question.decision == "approve"

        return ChannelApprover("page", approve, announce)

    def pending(self, run_id: str) -> list[dict[str, Any]]:
        """The questions ``run_id`` waits on now, as the operator's card shows them (oldest first)."""
        now = time.monotonic()
        with self._lock:
            return [q.request.operator_view() for q in self._questions.values()
                    if q.run_id == run_id and q.request is not None and q.decision is None
                    and q.closed is None and now < q.deadline]

    def answer(self, run_id: str, approval_id: str, decision: Literal["approve", "deny"]) -> dict[str, Any]:
        """Record the one answer to a question of ``run_id``."""
        with self._lock:
            question = self._questions.get(approval_id) if APPROVAL_ID.match(approval_id or "") else None
            if question is None or question.run_id != run_id:
                raise ApprovalNotFound("no such approval for this run")
            if question.decision is not None:
                raise ApprovalClosed("answered", f"this approval was already answered ({question.decision})")
            if question.closed == "run_stopped":
                raise ApprovalClosed("run_stopped", "the run no longer waits for this approval")
            if question.closed is not None or time.monotonic() >= question.deadline:
                question.closed = question.closed or "deadline"
                raise ApprovalClosed("deadline", "the deadline of this approval has passed: the command was refused")
            question.decision = decision
            question.answered.set()
        return {"run_id": run_id, "approval_id": approval_id, "decision": decision}

    def close_run(self, run_id: str) -> None:
        """The run ended: none of its questions takes an answer any more."""
        with self._lock:
            for question in self._questions.values():
                if question.run_id == run_id and question.decision is None and question.closed is None:
                    question.closed = "run_stopped"
                    question.answered.set()

    def waiting(self, run_id: str) -> int:
        """How many of the run's questions wait for an answer now."""
        now = time.monotonic()
        with self._lock:
            return sum(1 for q in self._questions.values()
                       if q.run_id == run_id and q.decision is None and q.closed is None and now < q.deadline)
