"""The evidence a workspace task's Final needs, and what guided mode asks for next.

A workspace task (``task.json`` ``workspace``) is done when its test command passes on the files as
they are now. So a Final is accepted only when

    - a bash Observation ran exactly the test command (``workspace.test_command``) and exited 0,
    - no successful change (``edit_file``, ``write_file``) came after that run,
    - the files are still the ones that run tested (the digest the bash tool took before running it
      equals the workspace's digest now: a change made any other way shows up here too),
    - the protected files (the tests) equal their baseline from the start of the run, and
    - the Final cites that passing run.

Otherwise ``final_problems`` names what is missing in words the model can act on ("run the tests
after your last edit", "the tests failed: ..."). ``next_step`` is the same reading of the evidence
turned into guided mode's next action: the files the task declares to read (``subgoals.read_file``,
whole, by their declared path), a test run (first to see what fails, then after each change), a
change after a failing run, else the Final. A change's arguments are narrowed to what can apply:
the path to the files read that the task lets change, and for ``edit_file`` the old text to one of
their code lines that occurs exactly once, so the model chooses which line and writes its fix,
and never loses a step to an ``old`` that is not in the file. For ``replace_function`` the change is
narrowed to the functions the failing run names (``name(`` in its output), and the step's instruction
shows the failure (the assertion and its values, and the failing test's source) beside each such
function's source as it is now, so the model rewrites the function with both in front of it.

Pure functions of (task, Observations, workspace); the coding strategy (``strategy.py``) calls them
for the loop. What a test run's output says is ``test_output.py``'s, the reading of Python source
``source_lines.py``'s, the argument grammars ``grammars.py``'s.
"""


from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any, Iterable

from agent.coding.workspace import Workspace
from agent.coding.grammars import (
    DIAGNOSIS_SCHEMA, MAX_NEW_CHARS, NEW_SCHEMA, def_line_pattern, diagnosis_schema, differs_from, parse_diagnosis
)
from agent.coding.source_lines import (
    MAX_FIX_LINES, blamable_lines, changed_lines, is_stub, module_context, spec_of, stub_of, unique_lines
)
from agent.coding.test_output import failing_tests, failure_detail, failure_summary, passed
from agent.coding.tools import workspace_ops as ops
from agent.coding.tools.files import TOOLS as FILE_TOOLS
from agent.coding.tools.shell import normalized_command
from agent.contracts.decision import Observation
from agent.contracts.task import TaskSpec
from agent.task.packs import item_key

#: the tools whose success changes the files (a test run must follow): ``Tool.changes_files``
CHANGE_TOOLS = tuple(tool.name for tool in FILE_TOOLS if tool.changes_files)


@dataclass(frozen=True)
class Step:
    """Guided mode's next action: the tool, what it is still missing, how its arguments are narrowed."""

    tool: str
    target: str
    narrowed: tuple[tuple[str, Any], ...] = ()
    drafts: tuple[str, ...] = ()
    #: the argument that holds Python source (see ``prompting.Branch.code_field``)
    code_field: str | None = None
    #: the last change brought back files a test run had already failed on: sample, don't repeat
    explore: bool = False
    #: a diagnosis this step asks for can be tried before the code is written (``FixTrial``)
    trial: "FixTrial | None" = None
    #: a function written the first time: its file with its def line and docstring, no body (``spec_of``)
    spec: str | None = None
    #: a first version asked again, in the runtime's words, after the pack's words' version failed: greedy
    anew: bool = False
    #: (path, name) of the one function this step writes from its docstring: its sampled versions can
    #: be tried before one is written (``version_trials.py``)
    versions: tuple[str, str] | None = None


@dataclass(frozen=True)
class FixTrial:
    """A fix-one-line diagnosis as the runtime can try it before any code is written
    (``agent/coding/fix_trials.py``): the function as the task gave it (``original``, at ``path``), the
    fixes already tried and the lines no longer offered as the wrong one, so the diagnosis schema can
    be rebuilt without the fixes a trial failed."""

    path: str
    name: str
    original: str
    tried: tuple[str, ...] = ()
    cleared: tuple[str, ...] = ()

    def schema(self, failed: Iterable[str] = (), only: str | None = None) -> dict[str, Any]:
        """The diagnosis schema with the ``failed`` fixes excluded too; with ``only``, one that
        names that line of the function as the wrong one and no other."""
        cleared = list(self.cleared) if only is None else [line for line in blamable_lines(self.original) if line != only]
        return diagnosis_schema(self.original, [*self.tried, *failed], cleared)

    def lines(self) -> list[str]:
        """The lines a diagnosis may name as the wrong one, those not cleared already."""
        return [line for line in blamable_lines(self.original) if line not in self.cleared]

    def fixed_source(self, diagnosis: str) -> str | None:
        """The function with the diagnosis applied: the first line that is the named wrong line
        (stripped) replaced by the fix at its indentation; None when the diagnosis is not in the
        fixed form or names no line of the function."""
        found = parse_diagnosis(diagnosis)
        if found is None:
            return None
        wrong, fix = found
        lines = self.original.splitlines()
        for i, line in enumerate(lines[1:], start=1):
            if line.strip() == wrong:
                indent = line[:len(line) - len(line.lstrip())]
                return "\n".join([*lines[:i], indent + fix.strip(), *lines[i + 1:]])
        return None


def _test_runs(task: TaskSpec, observations: list[Observation]) -> list[tuple[int, Observation]]:
    wanted = normalized_command(task.workspace.test_command)
    return [(i, o) for i, o in enumerate(observations)
            if o.ok and o.tool == "bash" and normalized_command(str((o.result or {}).get("command", ""))) == wanted]


def _last_change(observations: list[Observation]) -> tuple[int, Observation] | None:
    changes = [(i, o) for i, o in enumerate(observations) if o.ok and o.tool in CHANGE_TOOLS]
    return changes[-1] if changes else None


def final_problems(task: TaskSpec, observations: list[Observation], workspace: Workspace | None,
                   evidence_ids: Iterable[str]) -> list[str]:
    """Why a Final of a workspace task is premature; empty when the evidence holds (or the task has no workspace)."""
    if task.workspace is None or workspace is None:
        return []
    command = task.workspace.test_command
    runs = _test_runs(task, observations)
    if not runs:
        return [f"no run of the tests yet: run `{command}` with bash and finish only when it passes"]
    index, run = runs[-1]
    change = _last_change(observations)
    if change is None and any(t in CHANGE_TOOLS for t in task.required_tools):
        return [f"no change yet: the task asks you to change the files ({', '.join(t for t in task.required_tools if t in CHANGE_TOOLS)})"]
    if change is not None and change[0] > index:
        return [f"{change[1].id} changed the files after the last test run {run.id}: "
                f"run the tests (`{command}`) again after your last edit"]
    if not passed(run):
        return [f"the tests failed in {run.id} ({failure_summary(run)}): fix the code, then run the tests again"]
    problems = []
    if (run.result or {}).get("files_digest") != workspace.digest():
        problems.append(f"the files changed since the test run {run.id}: run the tests (`{command}`) again")
    changed = workspace.protected_changes()
    if changed:
        problems.append(f"the task's tests were changed ({', '.join(changed[:3])}); they must stay as they were")
    if run.id not in set(evidence_ids):
        problems.append(f"evidence_ids must cite the passing test run {run.id}")
    return problems


def next_step(task: TaskSpec, observations: list[Observation], workspace: Workspace | None,
              failed_fixes: Iterable[tuple[str, str, str]] = ()) -> Step | None:
    """The next action of a guided workspace task; None: the Final. ``failed_fixes`` are
    (path, function, fix) that a trial (``fix_trials.py``) failed: no diagnosis proposes them again."""
    failed_fixes = tuple(failed_fixes)
    if task.workspace is None or workspace is None:
        return None
    unread = _unread(task, observations)
    if unread is not None:
        # The whole file, by the path the task declares: a small model given line ranges of its own
        # re-reads a file with a moving start_line until the tool budget runs out.
        return Step("read_file", unread, narrowed=(("path", {"const": unread}), ("start_line", {"const": 1}),
                                                     ("end_line", {"const": None})))
    change_tool = next((t for t in task.required_tools if t in CHANGE_TOOLS), None)
    runs = _test_runs(task, observations)
    change = _last_change(observations)
    last_run = runs[-1] if runs else None
    files = _changeable_files(task, observations, workspace)
    now = workspace.digest()
    tested = (last_run is not None and (change is None or last_run[0] > change[0])
              and (last_run[1].result or {}).get("files_digest") == now)
    # A change that brought back files a run already failed on needs no run to know the outcome:
    # a model writes the same wrong body again, or the same fix with a comment added (so the code
    # is compared, not the bytes).
    code = None if tested or change is None else workspace.code_digest()
    repeated = None if code is None else next(
        (run for _, run in reversed(runs) if not passed(run)
         and ((run.result or {}).get("files_digest") == now or (run.result or {}).get("code_digest") == code)), None)
    if change is None and not runs and change_tool == "replace_function" and _stubs(files, workspace):
        # a function still to be written fails its tests by construction: write it first
        return _first_version(function_step(files, workspace, None, observations), observations)
    if not tested and repeated is None:
        # Before the first change too: the failure names the function and the wrong value (asked to
        # edit straight after reading, a model rewrites a function blind).
        return Step("bash", "a run of the tests after the last change" if change else "a run of the tests to see what fails",
                    # the timeout too: a call the grammar fixes whole is written without the model
                    # reading its prompt (left free, the timeout costs a read of the prompt and may be
                    # the longest allowed)
                    narrowed=(("command", {"const": task.workspace.test_command}), ("timeout", {"const": None})))
    failing = repeated or last_run[1]
    if change_tool is None:
        return None
    if passed(failing):
        if change is not None:
            return None
        # the task asks for a change: examples that pass on the files as given prove nothing
        if change_tool == "replace_function":
            return function_step(files, workspace, failing, observations, failed_fixes)
        return _change_step(change_tool, files, workspace,
                            f"the change the task asks for ({failing.id} passed on the files as given)")
    # ... and so does a change refused for changing nothing since that run
    refused = None if repeated is not None else next(
        (o for o in observations[last_run[0] + 1:] if not o.ok and o.tool in CHANGE_TOOLS), None)
    note = (f" Your change {change[1].id} made the code exactly what failed in {repeated.id} (comments and layout "
            f"aside): write different code."
            if repeated is not None else
            f" Your change {refused.id} would have changed nothing: write different code." if refused is not None else "")
    # a change the tests failed on was the model's likeliest answer: the next one is sampled (but for a
    # first version asked anew in other words, unless that repeated a failed one)
    explore = repeated is not None or refused is not None or change is not None
    if change_tool == "replace_function":
        step = function_step(files, workspace, failing, observations, failed_fixes, reworded=task.code_prompt is not None)
        return replace(step, target=step.target + note, explore=explore and not (step.anew and not note))
    step = _change_step(change_tool, files, workspace,
                        f"a fix that makes the tests pass ({failing.id} {failure_summary(failing)}).{note}")
    return replace(step, explore=explore)


#: at most this many functions offered (and shown) to a replace_function step
MAX_FUNCTIONS = 3


def _functions(files: list[str], workspace: Workspace | None) -> list[tuple[str, str, str]]:
    """(path, qualified name, source now) of every function the Python files among ``files`` define."""
    found = []
    for path in files:
        text = workspace.read_text(path) if path.endswith(".py") else None
        if not text:
            continue
        try:
            names = ops.definitions(text)
        except (SyntaxError, ValueError):
            continue
        for name in names:
            source = ops.function_source(text, name)
            if source is not None:
                found.append((path, name, source))
    return found


def _first_version(step: Step, observations: list[Observation]) -> Step:
    """The first version's step after the tool refused the last one (a syntax error): asked again
    with the refusal said, in the runtime's words where the last was in the pack's (greedy: another
    wording is another likeliest version), else sampled (greedy, the same refused version comes back
    until the loop guard)."""
    refused = [o for o in observations if not o.ok and o.tool in CHANGE_TOOLS]
    if not refused:
        return step
    error = refused[-1].error
    note = f" Your change {refused[-1].id} was refused ({error.message if error else 'refused'}): write different code."
    if step.spec is not None and len(refused) == 1:
        return replace(step, target=step.target + note, spec=None)
    return replace(step, target=step.target + note, spec=None, explore=True)


def function_step(files: list[str], workspace: Workspace | None, run: Observation | None,
                  observations: list[Observation] = (), failed_fixes: Iterable[tuple[str, str, str]] = (),
                  reworded: bool = False) -> Step:
    """A ``replace_function`` after the failing ``run``: the functions its report calls (all of the
    files' functions when it names none), their path and name narrowed to those, the new source
    held to start with the def line and docstring when there is one candidate, and the failure and
    each candidate's source shown in the instruction (and proposed as drafts: most of a fixed
    function is copied from the old one).

    After a rewrite that failed, the source shown is the function as the task gave it (the tool
    reported it as ``before``), with the fixes already tried, and a diagnosis may propose none of
    them again: a model shown its own failed rewrite fixes that back to the original and goes to
    and fro between the two.

    Without a ``run`` (a stub is written before any test run: it fails by construction) the step
    offers the stubs with their source alone.

    Where the pack words a function's first version itself (``reworded``: ``TaskSpec.code_prompt``)
    and that version failed, the next is a first version again, in the runtime's words and greedy
    (``Step.anew``), before any sampled rewrite: two wordings give two of the model's likeliest
    versions, and either may be the one that passes."""
    result = (run.result if run is not None else None) or {}
    output = "\n".join(str(result.get(stream) or "") for stream in ("stdout", "stderr"))
    functions = _functions(files, workspace)
    called = [f for f in functions if re.search(r"(?<!\w)" + re.escape(f[1].rpartition(".")[2]) + r"\(", output)]
    # a function still to be written comes first (a HumanEval file holds implemented helpers beside it)
    stubs = [f for f in (called or functions) if is_stub(f[2])]
    chosen = (stubs or called or functions)[:MAX_FUNCTIONS]
    detail = "\n".join(failure_detail(run)) if run is not None else ""
    tests = failing_tests(run, workspace) if run is not None and not passed(run) else []
    if tests:
        detail += "\nThe failing test, every case of which the fix must meet:\n" + "\n".join(tests)
    if not chosen:
        return Step("replace_function", f"a fix that makes the tests pass ({run.id} {failure_summary(run)})")
    rewrites = [o.result or {} for o in observations if o.ok and o.tool == "replace_function"]
    shown, originals, tried = [], [], []
    anew = False
    for path, name, source in chosen:
        mine = [r for r in rewrites if r.get("path") == path and r.get("name") == name]
        original = str(mine[0].get("before") or source) if mine else source
        # a fix of a written function changed a line or two, and those are the fix it tried; a stub's
        # first bodies are no fixes (and are not shown: a model copies failed code it is shown)
        fixes = [] if is_stub(original) else [lines for r in mine if len(lines := changed_lines(r)) <= MAX_FIX_LINES]
        trials = [fix for p, n, fix in failed_fixes if (p, n) == (path, name)]
        tries = list(dict.fromkeys([*(m.group(1) for r in mine if (m := _MUST_BE.search(str(r.get("diagnosis") or "")))),
                                    *(line for lines in fixes for line in lines), *trials]))
        blamed = [m.group(1) for r in mine if (m := _BLAMED.search(str(r.get("diagnosis") or "")))]
        cleared = [line for line in dict.fromkeys(blamed) if blamed.count(line) >= BLAME_LIMIT]
        if not set(blamable_lines(original)) - set(cleared):
            cleared = []  # no other line to name
        if len(chosen) == 1 and len(mine) >= RESPEC_AFTER and not is_stub(original) and (stub := stub_of(original)):
            # rewritten again and again and still failing: asked for anew, from its signature and
            # docstring, as a function still to be written is (a coding model writes a function from
            # its docstring better than it finds a bug)
            originals.append(stub)
            tried.append(([], []))
            shown.append(f"{name} in {path}: your {len(mine)} rewrites of it failed. Forget its old body; "
                         f"its signature and docstring, the spec to write it against:\n{stub}")
            continue
        originals.append(original)
        tried.append((tries, cleared))
        if anew := (reworded and len(chosen) == 1 and len(mine) == 1 and is_stub(original) and not trials):
            shown.append(f"{name} in {path} as the task gave it:\n{original}")
        elif mine or trials:
            shown.append(f"{name} in {path} as the task gave it{' (your rewrites failed)' if mine else ''}:\n{original}"
                         + (f"\nAlready tried, the tests still failed: {', '.join(f'`{t}`' for t in tries)}" if tries else "")
                         + "".join(f"\n`{line}` was fixed {blamed.count(line)} ways and the tests still failed: "
                                   "the wrong line is another one" for line in cleared))
        else:
            shown.append(f"{name} in {path}, now:\n{source}")
    paths = list(dict.fromkeys(path for path, _, _ in chosen))
    names = list(dict.fromkeys(name for _, name, _ in chosen))
    # a stub has no wrong line to name: its body is written from its docstring
    unwritten = all(is_stub(original) for original in originals)
    anew = anew and len(chosen) == 1
    outcome = ("" if run is None or anew else f"The tests pass ({run.id}) but the task asks for this change:\n"
               if passed(run) else f"The tests fail ({run.id}):\n{detail}\n")
    ask = ("implemented as its docstring says" if unwritten else "with the bug fixed")
    if unwritten and len(chosen) == 1 and (around := module_context(workspace.read_text(paths[0]) or "", names[0])):
        # what the function may use: the code turn is a conversation of its own, without the read
        # that showed the file (a stub may call a helper the file defines beside it)
        shown.insert(0, f"{paths[0]} around it (imports and other code, as the file has them):\n{around}")
    target = (f"{'an implementation' if unwritten else 'a fix'} that makes the tests pass. {outcome}" + "\n".join(shown) + "\n"
              f"Write the whole definition of {' or '.join(names)}{'' if unwritten else ' again'}, {ask}")
    narrowed: list[tuple[str, Any]] = [("path", {"const": paths[0]} if len(paths) == 1 else {"enum": paths}),
                                       ("name", {"const": names[0]} if len(names) == 1 else {"enum": names})]
    # the diagnosis first: the source is written after the model has said which line is wrong
    trial = None
    if unwritten:
        narrowed.append(("diagnosis", {"const": None}))
    elif len(chosen) == 1:
        schema = diagnosis_schema(originals[0], *tried[0])
        narrowed.append(("diagnosis", schema))
        if schema is not DIAGNOSIS_SCHEMA:  # a fix of one of its lines, which can be tried as it is
            trial = FixTrial(paths[0], names[0], originals[0], tuple(tried[0][0]), tuple(tried[0][1]))
    else:
        narrowed.append(("diagnosis", DIAGNOSIS_SCHEMA))
    if len(chosen) == 1:
        pattern = def_line_pattern(originals[0], written=unwritten)
        narrowed.append(("source", {"type": "string", "pattern": pattern}))
    drafts = tuple(json.dumps(source, ensure_ascii=False)[1:-1] for source in originals)
    first = unwritten and len(chosen) == 1 and not any(r.get("path") == paths[0] and r.get("name") == names[0]
                                                       for r in rewrites)
    spec = spec_of(workspace.read_text(paths[0]) or "", names[0]) if first else None
    versions = (paths[0], names[0]) if unwritten and len(chosen) == 1 else None
    return Step("replace_function", target, narrowed=tuple(narrowed), drafts=drafts, code_field="source", trial=trial,
                spec=spec, anew=anew, versions=versions)


_MUST_BE = re.compile(r"it must be `(.*)`$")


_BLAMED = re.compile(r"^The wrong line is `(.*?)`; it must be `")


#: a line named wrong this many times by rewrites that all failed is no longer offered as the wrong
#: one (a model keeps blaming one line, fixing it new ways, where the bug is in another)
BLAME_LIMIT = 2


#: failed rewrites of one function after which it is asked for anew from its docstring (``function_step``)
RESPEC_AFTER = 3


def _stubs(files: list[str], workspace: Workspace | None) -> list[tuple[str, str, str]]:
    return [f for f in _functions(files, workspace) if is_stub(f[2])]


def _unread(task: TaskSpec, observations: list[Observation]) -> str | None:
    """The first file the task declares to read (``subgoals.read_file``) with no successful read yet."""
    read = {item_key(str((o.result or {}).get("path"))) for o in observations if o.ok and o.tool == "read_file"}
    return next((item for item in task.subgoals.get("read_file", []) if item_key(item) not in read), None)


def _changeable_files(task: TaskSpec, observations: list[Observation], workspace: Workspace | None) -> list[str]:
    """Files the model read (else the ones the task declares to read) that the task lets change."""
    read = [str((o.result or {}).get("path")) for o in observations if o.ok and o.tool == "read_file"]
    declared = list(task.subgoals.get("read_file", []))
    files = [p for p in dict.fromkeys(read + declared) if p and not workspace.is_protected(p)]
    return files


def _change_step(tool: str, files: list[str], workspace: Workspace | None, target: str) -> Step:
    if not files:
        return Step(tool, target)
    path = {"const": files[0]} if len(files) == 1 else {"enum": files}
    texts = [(f, workspace.read_text(f)) for f in files]
    drafts = tuple(json.dumps(text, ensure_ascii=False)[1:-1] for _, text in texts if text)
    if tool != "edit_file":
        code = "content" if tool == "write_file" and all(f.endswith(".py") for f in files) else None
        return Step(tool, target, narrowed=(("path", path),), drafts=drafts, code_field=code)
    choices = unique_lines((f, text) for f, text in texts if text)
    if not choices:
        return Step(tool, target, narrowed=(("path", path), ("new", NEW_SCHEMA)), drafts=drafts)
    # new may be no line that old may be: an edit that changes nothing is no fix (a small model
    # copies the line it chose into new)
    new = {**NEW_SCHEMA, "pattern": differs_from(choices, MAX_NEW_CHARS)}
    return Step(tool, target, narrowed=(("path", path), ("old", {"enum": choices}), ("new", new)), drafts=drafts)
