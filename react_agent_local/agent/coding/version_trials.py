"""Sampled versions of a function, tried on a scratch copy of the workspace before one is written.

A function written from its docstring (a stub, or one asked for anew after its rewrites failed) is
asked for greedily first; once that likeliest version failed its tests, the next is sampled
(``Step.explore``). Writing a sampled version and running the tests costs the run two tool calls, a
step and the prompt of each, and one failed draw teaches a small model little: drawn, written, run
and failed one at a time, sampled rewrites spend a run's tool budget or deadline.

So before a sampled version is written, the runtime (``Run._try_versions``) draws up to
``MAX_VERSIONS`` of them from the step's own prompt -- the model writes each whole, the arguments
around the code fixed as the step fixed them -- and tries each on a scratch copy of the workspace
(``fix_trials.Scratch``: the real sandbox, the task's own test command, nothing of the run's
workspace touched). The first version the tests pass on becomes the step's Decision, its source a
``const`` (no code is sampled again), which the real workspace then writes and tests through the
usual tools and evidence gate. When none passes, the last one drawn that the tests ran on is the
Decision (one the tool refused, a syntax error, only when no draw ran), so the tests' report on it
reaches the model as the next step's Observation, as before (a draw the tool would refuse, written,
spends tool calls on nothing the model has not seen).

A version whose code (by syntax tree: comments and layout aside) already failed, in this step or an
earlier one, is not run again (``refused``). Each draw is a ``version.trial`` event: its number,
whether the tests passed, the exit code, the time and the failure's one line; the version's code is
the model's and stays in the policy (the one written is the Decision's, as for every step).

Trials run only where fix trials do (``Scratch.open``): the task's own test command, run without a
question by the approval policy, on a workspace ``workspace.copy_template`` can copy, and a policy
that answers one Decision at a time in process (``proposes_arguments``).
"""

from __future__ import annotations

import textwrap
import time
from typing import Any, Callable, Iterable

from agent.coding.workspace import Workspace
from agent.models.decisions import DecisionError
from agent.coding.fix_trials import Scratch, TrialOutcome, narrowed_with
from agent.coding.tools import workspace_ops as ops

#: the most versions drawn and tried per step before the last one is written (each draw costs a
#: whole function's generation; the run's deadline bounds them all)
MAX_VERSIONS = 4


def version_key(source: str) -> str:
    """The version's code as compared: its syntax tree's hash, or its text where it does not parse."""
    return ops.syntax_hash(textwrap.dedent(source)) or source.strip()


def written_versions(observations: Iterable[Any], workspace: Workspace | None, path: str, name: str) -> set[str]:
    """The keys of the versions of ``name`` in ``path`` the run wrote already: each one a later
    ``replace_function`` replaced (its ``before``), and the one the file holds now. A step that
    draws versions follows a failed test run, so the tests failed on every one of them."""
    versions = [str((o.result or {}).get("before") or "") for o in observations
                if o.ok and o.tool == "replace_function" and (o.result or {}).get("path") == path
                and (o.result or {}).get("name") == name]
    text = workspace.read_text(path) or ""
    try:
        spans = ops.definitions(text).get(name) or []
    except (SyntaxError, ValueError):
        spans = []
    if len(spans) == 1:
        versions.append("\n".join(text.splitlines()[spans[0][0] - 1:spans[0][2]]))
    return {version_key(v) for v in versions if v.strip()}


def settle(branch: Any, path: str, name: str, propose: Callable[[Any], Any], read: Callable[[Any, Any], Any],
           scratch: Scratch, emit: Callable[..., Any], failed: set[str], *, deadline: float | None, cancel: Any,
           limit: int = MAX_VERSIONS) -> Any:
    """The step's branch with the version to write settled: the first of up to ``limit`` drawn
    versions the tests pass on, else the last one drawn that the tests ran on, else the last one
    the tool refused (the branch as it was when every draw failed already or could not be read).
    ``propose(branch)`` asks the policy for one whole Decision, ``read(branch, candidate)`` is its
    Decision (a ``DecisionError``: that draw is lost, the next is asked for). ``failed`` holds the
    keys (``version_key``) of versions the tests failed on; it gains this step's."""
    chosen: str | None = None
    for n in range(1, limit + 1):
        started = time.monotonic()
        try:
            decision = read(branch, propose(branch))
        except DecisionError as error:
            emit("version.trial", trial=n, path=path, function=name, refused=True,
                 **TrialOutcome(False, None, (time.monotonic() - started) * 1000,
                                f"not a Decision: {error.message}"[:200]).public())
            continue
        source = str((decision.arguments or {}).get("source") or "")
        key = version_key(source)
        if key in failed:
            outcome = TrialOutcome(False, None, 0.0, "the tests failed on this code already")
        else:
            outcome = scratch.try_source(path, name, source, deadline=deadline, cancel=cancel)
            if outcome.exit_code is not None or chosen is None:  # one the tool refused only when none ran
                chosen = source
        emit("version.trial", trial=n, path=path, function=name, refused=key in failed,
             lines=len(source.splitlines()), **outcome.public())
        if outcome.passed:
            break
        failed.add(key)
    if chosen is None:
        return branch
    return narrowed_with(branch, source={"type": "string", "const": chosen})
