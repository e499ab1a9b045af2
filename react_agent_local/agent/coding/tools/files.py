"""read_file, write_file, edit_file, replace_function, glob and grep: the workspace's files, each
operation in the sandbox.

Every operation is ``tools/workspace_ops.py`` run as a script inside the run's sandbox (``python -I
-S -c SOURCE``, the request on stdin, the reply on stdout): the descriptor-based path rules hold in
there, and the sandbox holds even if they had a hole -- only the workspace is writable, ``.git`` and
the task's protected files are read-only, a runaway regular expression is killed at the timeout.
The tools themselves refuse, before anything runs, a write to a protected path (the task's tests)
and to ``.git``, with a message the model can act on.

A result is shown to the model compactly (``render``): a file as numbered lines (``  12| text``; the
number is not part of the file), an edit as the lines around the change.

``replace_function`` exists because a small coder model rewrites a whole small function far more
reliably than it writes an exact old/new snippet: it names a function and gives its complete new
definition, which is parsed before anything is written (a syntax error is a failed Observation naming
the line) and indented where the original stands.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from agent.sandbox import interpreter
from agent.shell_risk.paths import git_hazard
from agent.coding.tools import workspace_ops as ops
from agent.tools.base import StrictArgs, Tool, ToolContext, ToolError

OPS_SOURCE = Path(ops.__file__).read_text(encoding="utf-8")
OP_TIMEOUT_SECONDS = 10.0
MAX_REPLY_BYTES = 4 << 20


def run_op(ctx: ToolContext, op: str, args: dict[str, Any], cancel: threading.Event | None = None) -> dict[str, Any]:
    """One ``workspace_ops`` operation in the run's sandbox; its refusal as a ToolError."""
    if ctx.workspace is None or ctx.sandbox is None:
        raise ToolError("no_workspace", "this run has no workspace", retryable=False)
    timeout = OP_TIMEOUT_SECONDS
    if ctx.deadline is not None:
        timeout = max(0.1, min(timeout, ctx.deadline - time.monotonic()))
    request = json.dumps({"op": op, "args": args}, ensure_ascii=False).encode("utf-8")
    result = ctx.sandbox.run([interpreter(), "-I", "-S", "-c", OPS_SOURCE], cwd=".", timeout_s=timeout,
                             cancel=cancel, stdin=request, env=None, max_output_bytes=MAX_REPLY_BYTES)
    if result.timed_out:
        raise ToolError("tool_timeout", f"the {op} operation did not finish within {timeout:.0f} s", retryable=False)
    if result.cancelled:
        raise ToolError("cancelled", "the run was cancelled", retryable=False)
    stdout = result.stdout.decode("utf-8", "replace") if isinstance(result.stdout, bytes) else str(result.stdout)
    try:
        reply = json.loads(stdout)
    except ValueError:
        stderr = result.stderr.decode("utf-8", "replace") if isinstance(result.stderr, bytes) else str(result.stderr)
        tail = " ".join(stderr.split())[-200:]
        raise ToolError("tool_crashed", f"the {op} operation failed in the sandbox (exit {result.exit_code})"
                                        + (f": {tail}" if tail else ""), retryable=False) from None
    if not reply.get("ok"):
        raise ToolError(str(reply.get("code") or "io_error"), str(reply.get("message") or "failed")[:500], retryable=False)
    return reply["result"]


def _relative(path: str) -> str:
    try:
        return "/".join(ops.split_path(path))
    except ops.OpError as exc:
        raise ToolError(exc.code, exc.message, retryable=False) from None


def check_writable(ctx: ToolContext, path: str) -> str:
    """The normalized path, or ToolError when the task or the workspace forbids changing it."""
    rel = _relative(path)
    if rel == ".git" or rel.startswith(".git/"):
        raise ToolError("read_only", "'.git' is read-only", retryable=False)
    hazard = git_hazard(rel) or (".gitmodules names repositories git would fetch"
                                 if rel.split("/")[-1].casefold() == ".gitmodules" else None)
    if hazard is not None:  # git run by the operator in this folder later would run what it holds
        raise ToolError("read_only", f"'{rel}' cannot be written: {hazard}", retryable=False)
    if ctx.workspace is not None and ctx.workspace.is_test_machinery(rel):
        raise ToolError("protected_path", f"'{rel}' decides how the tests run (pytest's configuration, a conftest.py "
                                          "or a start-up file) and must not be changed; change the code under test "
                                          "instead", retryable=False)
    if ctx.workspace is not None and ctx.workspace.is_protected(rel):
        raise ToolError("protected_path", f"'{rel}' is one of the task's tests and must not be changed; "
                                          "change the code under test instead", retryable=False)
    return rel


# -- read_file ----------------------------------------------------------------------------------

class ReadFileArgs(StrictArgs):
    """Read a text file of the workspace as numbered lines (optionally a line range)."""

    path: str = Field(min_length=1, max_length=ops.MAX_PATH_CHARS, description="Relative to the workspace, e.g. src/app.py.")
    start_line: int | None = Field(default=None, ge=1, le=10_000_000, description="First line to show (1-based).")
    end_line: int | None = Field(default=None, ge=1, le=10_000_000, description="Last line to show.")


def _read(ctx: ToolContext, args: ReadFileArgs, cancel: threading.Event) -> dict[str, Any]:
    return run_op(ctx, "read", {"path": args.path, "start_line": args.start_line, "end_line": args.end_line}, cancel)


def _render_read(r: dict[str, Any]) -> str:
    more = f"\n(more below: start_line={r['end_line'] + 1})" if r.get("truncated") else ""
    return f"{r.get('path')} lines {r.get('start_line')}-{r.get('end_line')} of {r.get('total_lines')}:\n{r.get('text', '')}{more}"


READ_FILE = Tool(
    name="read_file",
    workspace=True,
    args_model=ReadFileArgs,
    execute=_read,
    timeout_seconds=OP_TIMEOUT_SECONDS + 5,
    digest=lambda r: [r.get("path"), r.get("start_line"), r.get("end_line"),
                      hashlib.sha256(str(r.get("text")).encode("utf-8", "replace")).hexdigest()],
    render=_render_read,
    hint="Give the path of the file to read, relative to the workspace.",
    summary="A file the task needs has not been read yet: read it.",
    covers=lambda r: r.get("path"),
    read_only=True,
)


# -- write_file ---------------------------------------------------------------------------------

class WriteFileArgs(StrictArgs):
    """Write a whole text file of the workspace (made or replaced)."""

    path: str = Field(min_length=1, max_length=ops.MAX_PATH_CHARS, description="Relative to the workspace.")
    content: str = Field(max_length=ops.MAX_WRITE_BYTES, description="The file's complete new content.")


def _write(ctx: ToolContext, args: WriteFileArgs, cancel: threading.Event) -> dict[str, Any]:
    rel = check_writable(ctx, args.path)
    return run_op(ctx, "write", {"path": rel, "content": args.content}, cancel)


WRITE_FILE = Tool(
    name="write_file",
    workspace=True,
    changes_files=True,
    args_model=WriteFileArgs,
    execute=_write,
    timeout_seconds=OP_TIMEOUT_SECONDS + 5,
    digest=lambda r: [r.get("path"), r.get("bytes")],
    render=lambda r: f"{'created' if r.get('created') else 'wrote'} {r.get('path')} ({r.get('lines')} lines)",
    hint="Write the complete content of the file.",
    summary="The file must be written.",
)


# -- edit_file ----------------------------------------------------------------------------------

class EditFileArgs(StrictArgs):
    """Replace one exact snippet of a workspace file (it must occur exactly once) with new text."""

    path: str = Field(min_length=1, max_length=ops.MAX_PATH_CHARS, description="Relative to the workspace.")
    old: str = Field(min_length=1, max_length=20_000, description="The exact text to replace, as the file has it.")
    new: str = Field(max_length=20_000, description="The text that replaces it.")


def _edit(ctx: ToolContext, args: EditFileArgs, cancel: threading.Event) -> dict[str, Any]:
    rel = check_writable(ctx, args.path)
    return run_op(ctx, "edit", {"path": rel, "old": args.old, "new": args.new}, cancel)


EDIT_FILE = Tool(
    name="edit_file",
    workspace=True,
    changes_files=True,
    args_model=EditFileArgs,
    execute=_edit,
    timeout_seconds=OP_TIMEOUT_SECONDS + 5,
    digest=lambda r: [r.get("path"), r.get("line"), r.get("snippet")],
    render=lambda r: f"edited {r.get('path')} at line {r.get('line')}; now:\n{r.get('snippet', '')}",
    hint="old: the exact line(s) to change, copied from the file without the line numbers; new: the fixed text.",
    summary="The code must change: edit the file.",
)


# -- replace_function ---------------------------------------------------------------------------

class ReplaceFunctionArgs(StrictArgs):
    """Replace one whole function of a Python file of the workspace with a new complete definition."""

    path: str = Field(min_length=1, max_length=ops.MAX_PATH_CHARS, description="Relative to the workspace.")
    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$",
                      description="The function's name (Class.method for a method).")
    diagnosis: str | None = Field(default=None, max_length=300,
                                  description="One line: which line of the function is wrong and why.")
    source: str = Field(min_length=1, max_length=20_000,
                        description="The complete new definition, from its def line to the end of its body.")


def _replace_function(ctx: ToolContext, args: ReplaceFunctionArgs, cancel: threading.Event) -> dict[str, Any]:
    rel = check_writable(ctx, args.path)
    result = run_op(ctx, "replace_function", {"path": rel, "name": args.name, "source": args.source}, cancel)
    return {**result, "diagnosis": args.diagnosis} if args.diagnosis else result


REPLACE_FUNCTION = Tool(
    name="replace_function",
    workspace=True,
    changes_files=True,
    args_model=ReplaceFunctionArgs,
    execute=_replace_function,
    timeout_seconds=OP_TIMEOUT_SECONDS + 5,
    digest=lambda r: [r.get("path"), r.get("name"), r.get("snippet")],
    render=lambda r: f"replaced {r.get('name')} in {r.get('path')} (lines {r.get('start_line')}-{r.get('end_line')}); now:\n"
                     f"{r.get('snippet', '')}",
    hint="name: the function to change; diagnosis: which line is wrong and why; source: its whole fixed definition "
         "(def line and body).",
    summary="The code must change: rewrite the function.",
)


# -- glob ---------------------------------------------------------------------------------------

class GlobArgs(StrictArgs):
    """List workspace files matching a glob pattern (** for any folders; *.py alone matches at any depth)."""

    pattern: str = Field(min_length=1, max_length=300, description="e.g. src/**/*.py or *.py")


def _glob(ctx: ToolContext, args: GlobArgs, cancel: threading.Event) -> dict[str, Any]:
    return run_op(ctx, "glob", {"pattern": args.pattern}, cancel)


GLOB = Tool(
    name="glob",
    workspace=True,
    args_model=GlobArgs,
    execute=_glob,
    timeout_seconds=OP_TIMEOUT_SECONDS + 5,
    digest=lambda r: [r.get("pattern"), r.get("matches")],
    render=lambda r: (f"{len(r.get('matches') or [])} match(es){' (first ones only)' if r.get('truncated') else ''}: "
                      + (", ".join(r.get("matches") or []) or "none")),
    hint="A glob pattern relative to the workspace.",
    summary="Find the files the task is about.",
    read_only=True,
)


# -- grep ---------------------------------------------------------------------------------------

class GrepArgs(StrictArgs):
    """Search workspace files for a regular expression; returns matching lines with their numbers."""

    pattern: str = Field(min_length=1, max_length=300, description="A Python regular expression.")
    path: str = Field(default=".", min_length=1, max_length=ops.MAX_PATH_CHARS, description="A file or folder to search.")
    glob: str | None = Field(default=None, max_length=300, description="Only files matching this glob, e.g. *.py")
    ignore_case: bool = False


def _grep(ctx: ToolContext, args: GrepArgs, cancel: threading.Event) -> dict[str, Any]:
    return run_op(ctx, "grep", {"pattern": args.pattern, "path": args.path, "glob": args.glob,
                                "ignore_case": args.ignore_case}, cancel)


def _render_grep(r: dict[str, Any]) -> str:
    matches = r.get("matches") or []
    lines = [f"{m['path']}:{m['line']}: {m['text']}" for m in matches]
    more = " (first ones only)" if r.get("truncated") else ""
    return f"{len(matches)} match(es) in {r.get('files_searched')} file(s){more}" + ("\n" + "\n".join(lines) if lines else "")


GREP = Tool(
    name="grep",
    workspace=True,
    args_model=GrepArgs,
    execute=_grep,
    timeout_seconds=OP_TIMEOUT_SECONDS + 5,
    digest=lambda r: [r.get("pattern"), r.get("matches")],
    render=_render_grep,
    hint="A regular expression; optionally a path and a glob to narrow the search.",
    summary="Search the workspace for the code the task is about.",
    read_only=True,
)

TOOLS = (READ_FILE, WRITE_FILE, EDIT_FILE, REPLACE_FUNCTION, GLOB, GREP)
