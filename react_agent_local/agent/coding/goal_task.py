"""A goal in words on the user's folder becomes a task: what a pack would declare, found by the runtime.

``prepare_goal(folder, goal)`` finds the test command and what must not change (``discovery.py``),
runs the tests once in the workspace's sandbox (the reproduction), reads which tests fail and where
(``localise.py``), and builds a ``TaskSpec`` with the general plan:

    reproduce   the run above, its failing tests and frames said in the task's goal
    localise    the source files the frames and the failing tests' imports point at
    read        guided mode's read steps: the failing test file, then that source (``subgoals.read_file``)
    change      ``replace_function`` on the files read that are not protected (never a test)
    verify      the test command; a Final is accepted only on its passing run after the last change
    report      the Final, with the changed files and the diff (``changes.py``) beside it

When no test fails before any change, the task says so: what the goal asks is not something a test
checks, and the report must say the tests do not cover it.

The task is written as ``task.json`` into its own folder in the run's folder, so the run's record
holds what the runtime declared on the user's behalf.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.contracts.task import TaskSpec
from agent.task.packs import TaskPack
from agent.coding.discovery import TestCommand, find_test_command, protected_paths
from agent.coding.localise import Localisation, localise

#: the tools of a goal run: read, change a function, run the tests; search for free mode
GOAL_TOOLS = ["read_file", "replace_function", "bash"]
EXTRA_TOOLS = ["grep", "glob"]
#: the reproduction's wall-clock limit (the tests of a small project; the run's own test runs have the bash tool's)
REPRODUCE_SECONDS = 120.0
MAX_GOAL_CHARS = 2000
#: what a fix needs: the reads and a first test run, then per attempt a rewrite and a test run
BUDGETS = {"max_tool_calls": 16, "max_steps": 20, "max_seconds": 900, "max_input_tokens": 200_000,
           "max_output_tokens": 10_000}
SUMMARIES = {
    "read_file": "Read a file the failing tests point at.",
    "replace_function": "Change the code the failure points at.",
    "bash": "Run the project's tests on the current files.",
    "final": "The tests passed after the last change: report what changed.",
}


class GoalRefused(Exception):
    """The folder and the goal give no way to check a change (no test command): nothing was run."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True)
class GoalTask:
    """The task built for a goal, and what the runtime found to build it (shown to the user, kept in the run)."""

    pack: TaskPack
    command: TestCommand
    protected: list[str]
    localisation: Localisation
    #: the reproduction exited 0: no test fails before any change
    tests_pass: bool
    reproduced_output: str

    def public(self) -> dict[str, Any]:
        return {"test_command": self.command.command, "found_in": self.command.source, "protected": self.protected,
                "tests_pass_before": self.tests_pass, "reads": list(self.pack.task.subgoals.get("read_file", [])),
                **self.localisation.public()}


    def lines(self) -> str:
        """What was found, for a terminal: the command, what fails and where, what is read and protected."""
        found = self.public()
        failing = found["failing"]
        lines = [f"tests: `{found['test_command']}` (found in {found['found_in']})",
                 "before any change: " + ("the tests pass (no test checks what the goal asks)" if self.tests_pass
                                          else f"{len(failing)} failing: {', '.join(failing[:5])}")]
        if found["frames"]:
            lines.append("traceback: " + "; ".join(found["frames"][:5]))
        lines.append("to read: " + (", ".join(found["reads"]) or "(nothing localised)"))
        lines.append("protected: " + (", ".join(found["protected"]) or "(nothing)"))
        return "\n".join(lines)


def reproduce(root: Path, command: str, *, protected: tuple[str, ...] = (), allow_unsandboxed: bool = False,
              seconds: float = REPRODUCE_SECONDS) -> tuple[int | None, str]:
    """(exit code, stdout + stderr) of one run of ``command`` in the workspace's sandbox (no network),
    with the ``protected`` paths read-only and whatever git entry the run plants removed after it.

    The command may come from the goal's own words (a request's): it runs before any approval can be
    asked, so it runs only where the grader would let a run with nobody to ask run it (read-only or
    workspace writes); GoalRefused otherwise."""
    from agent.coding.tools.shell import BASH, MAX_OUTPUT_BYTES, TEST_ENV
    from agent.coding.workspace import Workspace, remove_planted_git, sandbox_for
    from agent.shell_risk import ApprovalPolicy, decide, grade_command
    from agent.shell_risk.grader import printable

    grade = grade_command(command, workspace=str(root))
    if decide(grade, ApprovalPolicy(mode="never_ask")) != "run":
        raise GoalRefused("test_command_refused",
                          f"the test command `{printable(command)[:200]}` is not one a run may start unasked "
                          f"({grade.level}: {grade.reason[:200]}); name a plain test command")
    workspace = Workspace(root=root, protected=tuple(protected), allow_unsandboxed=allow_unsandboxed)
    sandbox = sandbox_for(workspace)
    try:
        result = sandbox.run([BASH, "--noprofile", "--norc", "-c", command], cwd=".", timeout_s=seconds, stdin=b"",
                             env=dict(TEST_ENV), max_output_bytes=MAX_OUTPUT_BYTES)
    finally:
        remove_planted_git(workspace)
    text = (result.stdout or b"").decode("utf-8", "replace") + "\n" + (result.stderr or b"").decode("utf-8", "replace")
    return (None if result.timed_out else result.exit_code), text


def _findings(command: TestCommand, found: Localisation, passing: bool, protected: list[str], reads: list[str]) -> str:
    parts = [f"The project's tests: `{command.command}` (found in {command.source})."]
    if passing:
        parts.append("They pass on the files as they are: no test checks what the goal asks, so say in the final "
                     "answer that the tests do not cover it.")
    else:
        if found.failing:
            parts.append("Failing now: " + ", ".join(found.failing[:5]) + ("." if len(found.failing) <= 5 else ", ..."))
        if found.errors:
            parts.append("Error: " + found.errors[0][:200])
        frames = [f.text() for f in found.frames if f.path in found.sources][:3]
        if frames:
            parts.append("The traceback passes through " + "; ".join(frames) + ".")
    sources = [r for r in reads if r in found.sources]
    if sources:
        parts.append("The code to change is in " + ", ".join(sources) + ".")
    if protected:
        parts.append("Do not change: " + ", ".join(protected[:8]) + ".")
    return " ".join(parts)


def goal_task_spec(goal: str, command: TestCommand, found: Localisation, *, passing: bool, protected: list[str],
                   root: Path) -> TaskSpec:
    """The ``TaskSpec`` of a goal: the general plan over what was found (see the module docstring)."""
    reads = found.test_files[:1] + found.sources
    if not reads:  # nothing localised by a failure: the goal's words, else the workspace's source files
        from agent.coding.discovery import is_test_file, python_files
        from agent.coding.localise import defines_word

        source = [p for p in python_files(root) if not is_test_file(p)]
        named = [p for p in source if p in goal or p.rsplit("/", 1)[-1] in goal or defines_word(root, p, goal)]
        reads = (named or [p for p in source if not p.endswith("__init__.py")])[:3]
    findings = _findings(command, found, passing, protected, reads)
    room = MAX_GOAL_CHARS - len(findings) - 2
    text = (goal.strip()[:max(0, room)] + "\n\n" + findings)[:MAX_GOAL_CHARS]
    ident = "goal-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    return TaskSpec.model_validate({
        "id": ident, "goal": text, "required_tools": GOAL_TOOLS, "tools": EXTRA_TOOLS, "mode": "guided",
        "family": None, "subgoals": {"read_file": reads} if reads else {}, "summaries": SUMMARIES,
        "workspace": {"template": None, "protected": protected, "test_command": command.command},
        "budgets": BUDGETS})


def prepare_goal(root: Path, goal: str, task_dir: Path, *, protect: tuple[str, ...] = (),
                 allow_unsandboxed: bool = False) -> GoalTask:
    """The task of ``goal`` on the folder ``root``, its ``task.json`` written to ``task_dir`` (a new folder
    of the run's). GoalRefused when no test command can be found; the sandbox's WorkspaceUnavailable
    when the tests cannot be run confined."""
    goal = goal.strip()
    if not goal:
        raise GoalRefused("goal_empty", "the goal is empty: say what to change")
    root = Path(root).resolve()
    command = find_test_command(root, goal)
    if command is None:
        raise GoalRefused("no_test_command", "no test command found: the folder has no pytest/unittest configuration "
                                             "or test files, and the goal names no command (write it in backticks, "
                                             "e.g. `python -m pytest`)")
    protected = protected_paths(root, goal, protect)
    code, output = reproduce(root, command.command, protected=tuple(protected), allow_unsandboxed=allow_unsandboxed)
    passing = code == 0
    found = localise(output, root) if not passing else localise("", root)
    task = goal_task_spec(goal, command, found, passing=passing, protected=protected, root=root)
    task_dir.mkdir(parents=True, exist_ok=True)
    (task_dir / "task.json").write_text(task.model_dump_json(indent=2), encoding="utf-8")
    (task_dir / "discovery.json").write_text(json.dumps({**GoalTask(
        TaskPack(name=task.id, root=task_dir, task=task), command, protected, found, passing, "").public()},
        indent=2), encoding="utf-8")
    return GoalTask(pack=TaskPack(name=task.id, root=task_dir, task=task), command=command, protected=protected,
                    localisation=found, tests_pass=passing, reproduced_output=output[-4000:])
