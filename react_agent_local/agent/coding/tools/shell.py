"""bash: one command in the run's sandbox, graded for risk before it runs and approved by policy.

Order of one call: ``shell_risk.grade_command`` parses the script and grades it; the run's
``ApprovalPolicy`` (``shell_risk.decide``) says run, refuse or ask; ``ask`` goes to the operator's
approver (``approvals.ask_operator``: no approver or a deadline passing is a refusal). The pack's own
test command (``task.json`` ``workspace.test_command``, chosen by the operator with the pack) needs no
question unless the policy asks for everything. The decision is an ``approval.decided`` event in the
trace and part of the result; a refused command is a failed Observation naming its grade and the
reason, so the model can try something else.

The command runs as ``bash -c`` in the sandbox, in the workspace, with a timeout (the argument, never
past the run's deadline) and the run's cancel; the sandbox kills its whole process tree on either.
Each stream is shown as its head and tail (``HEAD_CHARS``/``TAIL_CHARS``); when anything was cut, the
whole output is written to the run's artifact folder (``art-<16 hex>.txt``) and the result names it.
The result also carries the digest of the workspace's files the command ran on: the evidence a Final
needs is a passing run of the test command on the files as they are now (``workspace_evidence.py``).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from agent.coding.approvals import ApprovalRequest, ask_operator, channel_of
from agent.contracts.trace import redact_text
from agent.coding.workspace import remove_planted_git
from agent.coding.tools import workspace_ops as ops
from agent.tools.base import StrictArgs, Tool, ToolContext, ToolError

DEFAULT_TIMEOUT = 60
MAX_TIMEOUT = 600
MAX_OUTPUT_BYTES = 1 << 20
HEAD_CHARS = 900
TAIL_CHARS = 900
#: the longest an approval may keep a call waiting beyond its command's own timeout
APPROVAL_MARGIN = 120
BASH = shutil.which("bash") or "/bin/bash"


class BashArgs(StrictArgs):
    """Run one bash command in the workspace (sandboxed, no network); returns the exit code and output."""

    command: str = Field(min_length=1, max_length=4000, description="The command, e.g. python -m pytest")
    timeout: int | None = Field(default=None, ge=1, le=MAX_TIMEOUT, description=f"Seconds (default {DEFAULT_TIMEOUT}).")


def normalized_command(command: str) -> str:
    """A command as the test-command comparison sees it: whitespace runs collapsed."""
    return " ".join(command.split())


def is_test_command(ctx: ToolContext, command: str) -> bool:
    test = getattr(ctx.workspace, "test_command", None)
    return bool(test) and normalized_command(command) == normalized_command(test)


#: added to the sandbox's own environment (which holds none of the runner's variables, and puts the
#: runner's virtual environment first on PATH: ``python`` is the runner's interpreter, as for a
#: pack's MCP servers): no byte-code files in the workspace, output unbuffered, no colour codes
COMMAND_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"}
#: the task's test command also runs with the interpreter's own pytest: no module of the workspace
#: can shadow an installed one (``test_boot/sitecustomize.py`` puts the working folder last on the path)
TEST_ENV = {**COMMAND_ENV, "PYTHONSAFEPATH": "1", "PYTHONPATH": str(Path(__file__).resolve().parent / "test_boot")}


def _text(data: Any) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, (bytes, bytearray)) else str(data or "")


def head_tail(text: str, total_bytes: int, head: int = HEAD_CHARS, tail: int = TAIL_CHARS) -> tuple[str, bool]:
    """The head and tail of a stream with a marker for what lies between; True when anything was cut."""
    kept_all = total_bytes <= len(text.encode("utf-8", "replace"))
    if len(text) <= head + tail and kept_all:
        return text, False
    if len(text) <= head + tail:
        return text + f"\n[... output cut at {len(text)} of {total_bytes} bytes]", True
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[-tail:]}", True


def _shown(text: str, root: Path) -> str:
    """Output as the model, the artifact and the trace may hold it: workspace paths relative (a
    traceback still names its files), every other absolute path, key and user name redacted."""
    return redact_text(text.replace(f"{root}/", "").replace(str(root), "."))


def _write_artifact(artifact_dir: Path, command: str, stdout: str, stderr: str, complete: bool) -> dict[str, Any]:
    body = f"$ {redact_text(command)}\n\n[stdout]\n{stdout}\n\n[stderr]\n{stderr}\n".encode("utf-8", "replace")
    artifact_id = "art-" + secrets.token_hex(8)
    try:
        artifact_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(artifact_dir / f"{artifact_id}.txt",
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(body)
    except OSError as exc:
        raise ToolError("artifact_write_failed", f"could not store the command's output ({type(exc).__name__})") from None
    return {"id": artifact_id, "media_type": "text/plain", "bytes": len(body),
            "sha256": hashlib.sha256(body).hexdigest(), "complete": complete}


def approve(ctx: ToolContext, command: str, cancel: threading.Event) -> dict[str, Any]:
    """Grade ``command`` and decide whether it runs: ``{"level", "reason", "decision", "by"}``.
    The decision is emitted as an ``approval.decided`` event."""
    from agent.shell_risk import ApprovalPolicy, decide, grade_command

    # Absolute paths inside the workspace are workspace paths, not "outside".
    grade = grade_command(command, workspace=str(ctx.workspace.root) if ctx.workspace is not None else None)
    policy = ctx.approval if ctx.approval is not None else ApprovalPolicy(mode="ask_on_risk")
    decision, by = decide(grade, policy), "policy"
    if decision == "ask" and policy.mode != "always_ask" and is_test_command(ctx, command):
        decision, by = "run", "pack_test_command"
    if decision == "ask":
        deadline = time.monotonic() + ctx.approval_seconds
        if ctx.deadline is not None:
            deadline = min(deadline, ctx.deadline)
        root = str(ctx.workspace.root) if ctx.workspace is not None else None
        verdict = ask_operator(ctx.approver, ApprovalRequest(tool="bash", command=command, level=grade.level,
                                                             reason=grade.reason, deadline=deadline, workspace=root),
                               cancel, ctx.emit)
        decision, by = ("run" if verdict == "approved" else "refuse"), f"operator:{verdict}"
    outcome = {"level": grade.level, "reason": grade.reason, "decision": decision, "by": by}
    if by.startswith("operator:"):  # which channel answered: terminal, page (the operator token), ...
        outcome["channel"] = channel_of(ctx.approver)
    if ctx.emit is not None:
        ctx.emit("approval.decided", tool="bash", command=command, **outcome)
    return outcome


def _execute(ctx: ToolContext, args: BashArgs, cancel: threading.Event) -> dict[str, Any]:
    if ctx.workspace is None or ctx.sandbox is None:
        raise ToolError("no_workspace", "this run has no workspace", retryable=False)
    approval = approve(ctx, args.command, cancel)
    if approval["decision"] != "run":
        why = {"policy": "the approval policy refuses it", "operator:denied": "the operator denied it",
               "operator:no_approver": "it needs approval and nobody can approve it here",
               "operator:deadline": "nobody approved it in time"}.get(approval["by"], "it was not approved")
        raise ToolError("command_refused", f"refused: the command is graded {approval['level']} ({approval['reason']}) "
                                           f"and {why}; try a read-only command or a workspace tool", retryable=False)
    timeout = float(args.timeout or DEFAULT_TIMEOUT)
    if ctx.deadline is not None:
        timeout = min(timeout, ctx.deadline - time.monotonic() - 0.2)
        if timeout <= 0:
            raise ToolError("deadline_exceeded", "the run's deadline passed before the command could run", retryable=False)
    hashes = ctx.workspace.hashes()  # read once for both digests
    files, code = ops.digest(hashes), ctx.workspace.code_digest(hashes)
    test_run = is_test_command(ctx, args.command)
    result = ctx.sandbox.run([BASH, "--noprofile", "--norc", "-c", args.command], cwd=".", timeout_s=timeout,
                             cancel=cancel, stdin=b"", env=dict(TEST_ENV if test_run else COMMAND_ENV),
                             max_output_bytes=MAX_OUTPUT_BYTES)
    planted = remove_planted_git(ctx.workspace)
    planted += [rel for rel in result.removed if rel.split("/")[-1] == ".git" and rel not in planted]
    if result.limit_exceeded:
        if ctx.emit is not None:
            ctx.emit("workspace.limit_exceeded", tool="bash", message=result.limit_exceeded)
        raise ToolError("disk_limit_exceeded", f"the command was stopped: {result.limit_exceeded}", retryable=False)
    if planted and ctx.emit is not None:
        ctx.emit("workspace.git_removed", tool="bash", paths=planted)
    # What the sandbox printed is hostile too: keys and absolute paths leave only as events show them.
    stdout, stderr = _text(result.stdout), _text(result.stderr)
    shown_out, cut_out = head_tail(stdout, int(result.stdout_total))
    shown_err, cut_err = head_tail(stderr, int(result.stderr_total))
    root = ctx.workspace.root
    shown_out, shown_err = _shown(shown_out, root), _shown(shown_err, root)
    if planted:
        shown_err += (f"\n[the runtime removed {', '.join(planted)}: git run later in this folder would read its "
                      "config and hooks and run them on the host]")
    artifact = None
    if cut_out or cut_err:
        complete = int(result.stdout_total) <= len(result.stdout or b"") and int(result.stderr_total) <= len(result.stderr or b"")
        artifact = _write_artifact(Path(ctx.artifact_dir), args.command, _shown(stdout, root), _shown(stderr, root), complete)
    return {
        "command": args.command, "exit_code": result.exit_code, "timed_out": bool(result.timed_out),
        "cancelled": bool(result.cancelled), "duration_ms": round(float(result.duration_s) * 1000, 1),
        "timeout_s": round(timeout, 1), "sandbox": result.sandbox, "test_run": test_run, "git_removed": planted,
        "risk": {"level": approval["level"], "reason": approval["reason"]},
        "approval": {"decision": approval["decision"], "by": approval["by"]},
        "stdout": shown_out, "stderr": shown_err,
        "stdout_bytes": int(result.stdout_total), "stderr_bytes": int(result.stderr_total),
        "artifact": artifact, "files_digest": files, "code_digest": code,
    }


def render(r: dict[str, Any]) -> str:
    status = (f"timed out after {r.get('timeout_s')} s and was killed" if r.get("timed_out")
              else f"exit {r.get('exit_code')}")
    parts = [f"$ {r.get('command')}  ({status}, {r.get('duration_ms', 0) / 1000:.2f} s)"]
    for name in ("stdout", "stderr"):
        if (r.get(name) or "").strip():
            parts.append(f"{name}:\n{r[name].rstrip()}")
    if not any((r.get(name) or "").strip() for name in ("stdout", "stderr")):
        parts.append("(no output)")
    return "\n".join(parts)


BASH_TOOL = Tool(
    name="bash",
    workspace=True,
    args_model=BashArgs,
    execute=_execute,
    timeout_seconds=MAX_TIMEOUT + APPROVAL_MARGIN,
    digest=lambda r: [r.get("command"), r.get("exit_code"), r.get("stdout"), r.get("stderr"), r.get("files_digest")],
    render=render,
    hint="One bash command, run in the workspace.",
    summary="Run the command in the workspace.",
)
