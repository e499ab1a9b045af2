"""A diagnosis's one-line fix, tried on a scratch copy of the workspace before any code is written.

A guided ``replace_function`` step after a failing test run asks first for a diagnosis in a fixed
form -- "The wrong line is `X`; it must be `Y`" (``workspace_evidence.diagnosis_schema``) -- and
then for the function's new source. Writing the source and running the tests again costs a small
model on two cores a code turn and two more steps, and a wrong diagnosis costs all of them: wrong
one-line fixes proposed and tested one at a time spend the whole tool budget.

So the runtime tries the diagnosis first (``Run._try_fixes``): the model proposes the arguments but
the code (``DecisionRequest.arguments_only``), and the runtime applies the fix exactly as written to
the function as the task gave it (``FixTrial.fixed_source``), in a scratch copy of the workspace
(``Scratch``: the real sandbox, the task's test command, nothing of the run's workspace touched). A
fix the tests pass on becomes the step's Decision -- the diagnosis and that source, as ``const``
arguments, so no code is sampled -- which the real workspace then runs through the usual tools and
evidence gate. A failing fix is excluded from the diagnosis and the next one is asked for, up to
``MAX_TRIALS`` a step: first one for each other line of the function, named for the model (after a
failed fix, the model's own next choice seldom passes), then the model's own choice again, drawn
more widely. When none passes, the step goes on as before,
without the failed fixes. Each trial is a ``fix.trial`` event: its number, the line and the fix
(``named``: the line was the runtime's to name), whether the tests passed, the exit code, the time
and the failure's one line (tool output, as an Observation shows it).

A fix that cannot change what the function does where it matters -- the wrong line again, a
``...`` placeholder (both of which a small model writes often), a conditional whose two
branches are the same, a comparison of a thing with itself, ``x or x``, ``x = x``, a condition
that is a constant (``degenerate``), a branch that can never run (``unreachable``) -- is not
tried: it counts as a failed trial (``refused``) and is excluded like one; so is a fix the tests
already failed on (one too long for the diagnosis grammar to exclude can be proposed again). A
degenerate fix can pass a pack's few visible tests while the function no longer does its job (a
clamp whose branches are the same no longer clamps), and would be accepted.

Trials run only the task's own test command, only where the approval policy runs it without a
question, and only for a workspace ``workspace.copy_template`` can copy (folders and regular files
within its size caps): otherwise the step is asked as before.
"""

from __future__ import annotations

import ast
import re
import shutil
import textwrap
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from agent.contracts.decision import Observation
from agent.models.decisions import DecisionError
from agent.tools import ToolContext, ToolError
from agent.coding.workspace_evidence import FixTrial
from agent.coding.source_lines import blamable_lines
from agent.coding.test_output import failure_summary, passed
from agent.coding.grammars import parse_diagnosis

#: the most diagnoses tried per step before the step is asked as before: the model's first, one for
#: each other line of a short function (the generated packs' have one to five), then wider draws
MAX_TRIALS = 8
#: wider draws of the model's own choice after the named lines (they seldom pass, and each costs a
#: test run: more of them a step spend the time a short function's run needs for its code turns)
WIDER_TRIALS = 2
#: the longest one trial's test run may take (never past the run's deadline)
TRIAL_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class TrialOutcome:
    passed: bool
    exit_code: int | None
    duration_ms: float
    summary: str  # the failure's one line ("" when the tests passed)

    def public(self) -> dict[str, Any]:
        return {"passed": self.passed, "exit_code": self.exit_code, "duration_ms": round(self.duration_ms, 1),
                "summary": self.summary}


class Scratch:
    """A throwaway copy of the run's workspace with a sandbox of its own (a context manager; the
    copy is removed on exit). ``open`` gives None where trials cannot run (see the module)."""

    def __init__(self, ctx: ToolContext, folder: Path):
        from agent.coding.workspace import Workspace, sandbox_for

        workspace = ctx.workspace
        self.folder = folder
        self.root = folder / "workspace"
        self.workspace = Workspace(root=self.root, protected=workspace.protected, test_command=workspace.test_command,
                                   allow_unsandboxed=workspace.allow_unsandboxed)
        self.ctx = replace(ctx, workspace=self.workspace, sandbox=sandbox_for(self.workspace), emit=None)

    @classmethod
    def open(cls, ctx: ToolContext) -> "Scratch | None":
        from agent.coding.workspace import WorkspaceUnavailable, copy_template

        workspace = ctx.workspace
        if workspace is None or ctx.sandbox is None or not workspace.test_command:
            return None
        if ctx.approval is not None and getattr(ctx.approval, "mode", None) == "always_ask":
            return None  # every command is the operator's to approve: no runs of the runtime's own
        folder = Path(tempfile.mkdtemp(prefix="react-agent-trial-"))
        try:
            copy_template(Path(workspace.root), folder / "workspace")
            return cls(ctx, folder)
        except (WorkspaceUnavailable, OSError):
            shutil.rmtree(folder, ignore_errors=True)
            return None

    def __enter__(self) -> "Scratch":
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def try_source(self, path: str, name: str, source: str, *, deadline: float | None, cancel: Any) -> TrialOutcome:
        """Replace function ``name`` in ``path`` with ``source`` (as ``replace_function`` does, in
        the sandbox) and run the test command on the copy."""
        from agent.coding.tools.files import run_op
        from agent.coding.tools.shell import BASH, COMMAND_ENV, MAX_OUTPUT_BYTES

        started = time.monotonic()
        try:
            run_op(self.ctx, "replace_function", {"path": path, "name": name, "source": source}, cancel)
        except ToolError as exc:
            return TrialOutcome(False, None, (time.monotonic() - started) * 1000, exc.message[:200])
        timeout = TRIAL_TIMEOUT_SECONDS if deadline is None else min(TRIAL_TIMEOUT_SECONDS,
                                                                      deadline - time.monotonic() - 0.2)
        if timeout <= 0:
            return TrialOutcome(False, None, 0.0, "the run's deadline passed")
        result = self.ctx.sandbox.run([BASH, "--noprofile", "--norc", "-c", self.workspace.test_command], cwd=".",
                                      timeout_s=timeout, cancel=cancel, stdin=b"", env=dict(COMMAND_ENV),
                                      max_output_bytes=MAX_OUTPUT_BYTES)
        run = Observation(id="obs-trial-0", tool="bash", ok=True, result={
            "exit_code": result.exit_code, "timed_out": bool(result.timed_out), "cancelled": bool(result.cancelled),
            "timeout_s": round(timeout, 1), "stdout": _text(result.stdout), "stderr": _text(result.stderr)})
        ok = passed(run)
        return TrialOutcome(ok, result.exit_code, (time.monotonic() - started) * 1000,
                            "" if ok else failure_summary(run))


def degenerate(fix: str, wrong: str = "") -> str | None:
    """Why the one-line ``fix`` of the line ``wrong`` does nothing a fix could mean, or None: the
    wrong line again (the same syntax tree, spacing aside), a ``...`` placeholder, a conditional
    expression whose branches are the same, a comparison of an expression with itself, a boolean
    operator over the same operand twice, an assignment of a name to itself, or an ``if``,
    ``elif``, ``while`` or conditional expression on a constant. A line that does not parse alone
    (an ``if x:`` header, a ``return`` outside a function) is read with a body or inside a
    function; one that still does not parse is not judged here (the tests judge it).
    ``while True:`` is a loop, not dead code."""
    tree = _parse_line(fix.strip())
    if tree is None:
        return None
    before = _parse_line(wrong.strip()) if wrong.strip() else None
    if before is not None and ast.dump(before) == ast.dump(tree):
        return "it is the wrong line again, so nothing would change"
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value is Ellipsis:
            return "it holds `...`, a placeholder, not code"
        if isinstance(node, ast.IfExp) and _same(node.body, node.orelse):
            return "both branches of its conditional are the same expression, so the condition does nothing"
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_same(a, b) for a, b in zip(operands, operands[1:])):
                return "it compares an expression with itself, which is always the same answer"
        if isinstance(node, ast.BoolOp):
            operands = [ast.unparse(v) for v in node.values]
            if len(set(operands)) < len(operands):
                return "its `and`/`or` has the same operand twice"
        if isinstance(node, ast.Assign) and any(_same(t, node.value) for t in node.targets):
            return "it assigns a name to itself"
        if isinstance(node, (ast.If, ast.IfExp, ast.While)) and isinstance(node.test, ast.Constant) \
                and not (isinstance(node, ast.While) and node.test.value):  # `while True:` is a loop
            return "its condition is a constant, so one branch is dead code"
    return None


def unreachable(source: str | None, fix: str) -> str | None:
    """Why the branch of the fixed line (an ``if``/``elif``/``while``) can never run, or None: its
    condition requires (alone or under ``and``) a condition that an earlier ``if`` of the same block
    already left the function on (no ``else``, its body ending in ``return`` or ``raise``, nothing
    in between assigning a name that condition reads), or one an ``elif`` chain above it already
    took. A branch no input reaches fixes nothing, yet it can pass a pack's few visible tests by never
    running (``if number < low and number > maximum:`` below ``if number < low: return low``)."""
    line = _parse_line(fix.strip())
    header = next((n for n in ast.walk(line) if isinstance(n, (ast.If, ast.While))), None) if line else None
    if header is None or source is None:
        return None
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return None
    condition = ast.unparse(header.test)
    for block in _blocks(tree):
        for at, stmt in enumerate(block):
            if not (isinstance(stmt, (ast.If, ast.While)) and ast.unparse(stmt.test) == condition):
                continue
            required = _conjuncts(stmt.test)
            for before in range(at - 1, -1, -1):
                guard = block[before]
                if not (isinstance(guard, ast.If) and not guard.orelse
                        and isinstance(guard.body[-1], (ast.Return, ast.Raise))):
                    continue
                if ast.unparse(guard.test) in required and not _assigned(block[before + 1:at]) & _read(guard.test):
                    return (f"its condition needs `{ast.unparse(guard.test)}`, on which the function has already "
                            "left above, so its branch never runs")
    for node in ast.walk(tree):  # an elif: the If in its chain's orelse
        if isinstance(node, ast.If) and len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            inner = node.orelse[0]
            if ast.unparse(inner.test) == condition and ast.unparse(node.test) in _conjuncts(inner.test):
                return (f"its condition needs `{ast.unparse(node.test)}`, which the `if` above it already "
                        "took, so its branch never runs")
    return None


def _conjuncts(test: ast.expr) -> set[str]:
    """The conditions ``test`` requires: the operands of an ``and``, else ``test`` itself (as source)."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    return {ast.unparse(part) for part in parts}


def _blocks(tree: ast.AST) -> list[list[ast.stmt]]:
    """Every statement list in ``tree`` (bodies, else branches, handlers)."""
    return [value for node in ast.walk(tree) for field in ("body", "orelse", "finalbody")
            if isinstance(value := getattr(node, field, None), list) and value and isinstance(value[0], ast.stmt)]


def _assigned(statements: list[ast.stmt]) -> set[str]:
    return {n.id for s in statements for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _read(expression: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(expression) if isinstance(n, ast.Name)}


def trimmed(trial: Any, diagnosis: str) -> str | None:
    """The diagnosis with its fix cut to the longest prefix with which ``trial``'s function parses,
    where the fix as written does not and the prefix ends where a token ends (never inside a name
    or a number); None where the fix parses as written or no such prefix does. A prefix that is a
    copy of another of the function's lines is no fix (it would leave one of the two dead), nor is
    a bare ``return`` whose value was cut away."""
    found = parse_diagnosis(diagnosis)
    if found is None or _parses(trial.fixed_source(diagnosis)):
        return None
    wrong, fix = found
    fix = _PLACEHOLDER.split(fix, 1)[0].strip()  # `return x <this line>` would parse up to `<this`
    others = set(blamable_lines(trial.original))
    for end in range(len(fix), 0, -1):
        cut = fix[:end].rstrip()
        if len(cut) < end or (end < len(fix) and _word(fix[end - 1]) and _word(fix[end])):
            continue  # the space before is tried as its own end; a name or number is never split
        if cut in _BARE:
            return None  # its value cut away: no fix of what it returns
        candidate = f"The wrong line is `{wrong}`; it must be `{cut}`"
        if _parses(trial.fixed_source(candidate)):
            return None if cut in others else candidate
    return None


_BARE = {"return", "yield", "raise"}


#: a placeholder in angle brackets with words inside: ``<this line>``, ``<the fixed condition>``
_PLACEHOLDER = re.compile(r"<[A-Za-z_ ]*[A-Za-z_] [A-Za-z_ ]*>")


def _word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _parses(source: str | None) -> bool:
    if source is None:
        return False
    try:
        ast.parse(textwrap.dedent(source))
        return True
    except (SyntaxError, ValueError):
        return False


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.unparse(a) == ast.unparse(b)  # source, not dump: a Store and a Load of x are the same x


def _parse_line(line: str) -> ast.AST | None:
    """The line as a module: alone, then with a body (a block header), then in a function (a
    ``return``, ``yield``); an ``elif``/``else`` header is read as an ``if``."""
    if line.startswith("elif "):
        line = line[2:]
    for text in (line, line + "\n    pass", "def _f():\n    " + line, "def _f():\n    " + line + "\n        pass"):
        try:
            return ast.parse(text)
        except SyntaxError:
            continue
    return None


def _text(data: Any) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data or "")


def settle(branch: Any, trial: FixTrial, propose: Callable[[Any, bool], Any], read: Callable[[Any, Any], Any],
           scratch: Scratch, emit: Callable[..., Any], *, deadline: float | None,
           cancel: Any) -> tuple[Any, list[str]]:
    """The step's branch after its diagnosis (``trial``) was tried, and the fixes that failed.

    The first diagnosis is the model's own choice of line; after it fails, each other line of the
    function is named in turn and the model asked for its fix (``sweep``), then the model's choice
    again, sampled more widely. ``propose(probe, wider)`` asks the policy for the arguments alone;
    ``read(probe, candidate)`` is the candidate's Decision (a ``DecisionError`` ends the trials). A
    passing fix settles the branch: its diagnosis and the fixed source become ``const``."""
    failed: list[str] = []
    sweep: list[str] | None = None  # the lines still to be named, once the first diagnosis failed
    wider = WIDER_TRIALS
    for n in range(1, MAX_TRIALS + 1):
        only = sweep.pop(0) if sweep else None
        if n > 1 and only is None:
            if not wider:
                break
            wider -= 1
        probe = narrowed_with(branch, diagnosis=trial.schema(failed, only=only))
        try:
            decision = read(probe, propose(probe, n > 1 and only is None))
        except DecisionError:
            break
        diagnosis = str((decision.arguments or {}).get("diagnosis") or "")
        written = parse_diagnosis(diagnosis)
        diagnosis = trimmed(trial, diagnosis) or diagnosis
        source = trial.fixed_source(diagnosis)
        if source is None:
            if only is not None:
                continue
            break
        wrong, fix = parse_diagnosis(diagnosis)
        # a fix too long for the grammar to exclude (``workspace_evidence.MAX_EXCLUDED_CHARS``) can
        # come back: the tests failed on it already
        refusal = ("it was tried already and the tests failed" if fix.strip() in {f.strip() for f in (*trial.tried, *failed)}
                   else degenerate(fix, wrong) or unreachable(source, fix))
        outcome = TrialOutcome(False, None, 0.0, "not tried: " + refusal) if refusal else \
            scratch.try_source(trial.path, trial.name, source, deadline=deadline, cancel=cancel)
        emit("fix.trial", trial=n, path=trial.path, function=trial.name, line=wrong, fix=fix,
             named=only is not None, refused=refusal is not None, **outcome.public(),
             **({"written": written[1]} if written and written[1] != fix else {}))
        if outcome.passed:
            return narrowed_with(branch, diagnosis={"const": diagnosis}, source={"type": "string", "const": source}), \
                failed
        if fix not in failed:
            failed.append(fix)
        if sweep is None:
            sweep = [line for line in trial.lines() if line != wrong]
    if not failed:
        return branch, failed
    return narrowed_with(branch, diagnosis=trial.schema(failed)), failed


def narrowed_with(branch: Any, **schemas: dict[str, Any]) -> Any:
    """``branch`` with these arguments' narrowed schemas replaced (added where it had none)."""
    narrowed = [(name, schemas.get(name, schema)) for name, schema in branch.narrowed]
    narrowed += [(name, schema) for name, schema in schemas.items() if name not in dict(branch.narrowed)]
    return replace(branch, narrowed=tuple(narrowed))
