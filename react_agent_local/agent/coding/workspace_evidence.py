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

Pure functions of (task, Observations, workspace); the runtime calls them from its evidence gate and
its guided branch.
"""

from __future__ import annotations

import ast
import json
import re
import textwrap
from dataclasses import dataclass, replace
from typing import Any, Iterable

from agent.contracts.decision import Observation
from agent.contracts.task import TaskSpec
from agent.task.packs import item_key
from agent.coding.tools import workspace_ops as ops
from agent.coding.tools.shell import normalized_command

CHANGE_TOOLS = ("edit_file", "write_file", "replace_function")
MAX_LINE_CHOICES = 300
MAX_CHOICE_CHARS = 300
#: a guided edit's new text: room for a few lines, never a runaway to the token limit (the 0.5B's
#: re-asked edits ran on, digit by digit, until they were cut off at 256 tokens), and no indentation of its own --
#: old is a line without its indentation, which the file keeps (the 0.5B re-indented its new line
#: by 2, 5 or 10 spaces and broke the file more often than not)
MAX_NEW_CHARS = 160
# (llguidance drops maxLength beside a pattern, so the pattern bounds the length itself)
NEW_SCHEMA = {"type": "string", "maxLength": MAX_NEW_CHARS, "pattern": rf"^\S[\s\S]{{0,{MAX_NEW_CHARS - 1}}}$"}
# What says most about a failed run, best first: an exception with its message, pytest's one-line
# summary of a failed test, an assertion, any error line.
_FAILURE_LINES = (re.compile(r"^E\s+(\w+(?:Error|Exception)\b.*)"), re.compile(r"^FAILED \S+ - (.+)"),
                  re.compile(r"^E\s+(assert .+)"), re.compile(r"^(\w+(?:Error|Exception)\b.*)"))


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


_DIAGNOSIS = re.compile(r"^The wrong line is `(.*?)`; it must be `(.*)`$")


def parse_diagnosis(diagnosis: str) -> tuple[str, str] | None:
    """(wrong line, fix) of a diagnosis in the fixed form (``diagnosis_schema``), else None."""
    m = _DIAGNOSIS.match(diagnosis or "")
    return (m.group(1), m.group(2)) if m and m.group(2).strip() else None


def _test_runs(task: TaskSpec, observations: list[Observation]) -> list[tuple[int, Observation]]:
    wanted = normalized_command(task.workspace.test_command)
    return [(i, o) for i, o in enumerate(observations)
            if o.ok and o.tool == "bash" and normalized_command(str((o.result or {}).get("command", ""))) == wanted]


def _last_change(observations: list[Observation]) -> tuple[int, Observation] | None:
    changes = [(i, o) for i, o in enumerate(observations) if o.ok and o.tool in CHANGE_TOOLS]
    return changes[-1] if changes else None


def passed(run: Observation) -> bool:
    result = run.result or {}
    return result.get("exit_code") == 0 and not result.get("timed_out") and not result.get("cancelled")


def failure_summary(run: Observation, limit: int = 200) -> str:
    """The line of a failed run that says most about why (pytest's ``E``/``FAILED`` lines, a failed
    doctest example with what it returned, an error)."""
    result = run.result or {}
    if result.get("timed_out"):
        return f"timed out after {result.get('timeout_s')} s"
    examples = doctest_failures("\n".join(str(result.get(stream) or "") for stream in ("stdout", "stderr")))
    if examples:
        return f"exit {result.get('exit_code')}: {examples[0]}"[:limit]
    lines = [line.strip() for stream in ("stdout", "stderr") for line in str(result.get(stream) or "").splitlines()]
    lines = [line for line in lines if line and not line.startswith("[...")]
    found = (m.group(1) for pattern in _FAILURE_LINES for line in lines if (m := pattern.match(line)))
    picked = next(found, lines[-1] if lines else "no output")
    return f"exit {result.get('exit_code')}: {picked}"[:limit]


_DOCTEST_BLOCK = re.compile(r"^Failed example:\n((?:    .*\n)+?)(Expected:\n((?:    .*\n)+?)Got:\n((?:    .*\n?)+)"
                            r"|Expected nothing\nGot:\n((?:    .*\n?)+)|Exception raised:\n((?:    .*\n?)+))", re.M)


def doctest_failures(output: str, limit: int = 3) -> list[str]:
    """Each failed doctest example of ``output`` in one line: the call, what it returned (or the
    exception it raised) and what the example expects."""
    def lines(block: str | None) -> list[str]:
        return [line[4:] for line in (block or "").splitlines() if line.strip()]

    found = []
    for m in _DOCTEST_BLOCK.finditer(output.replace("\r\n", "\n")):
        call = " ".join(line.lstrip(">. ").strip() for line in lines(m.group(1)))[:120]
        if m.group(3) is not None:
            got, want = " ".join(lines(m.group(4)))[:120], " ".join(lines(m.group(3)))[:120]
            found.append(f"{call} returned {got}; the example expects {want}")
        elif m.group(5) is not None:
            found.append(f"{call} returned {' '.join(lines(m.group(5)))[:120]}; the example expects nothing")
        else:
            error = next((line.strip() for line in reversed(lines(m.group(6))) if line.strip()), "an exception")
            found.append(f"{call} raised {error[:120]}")
        if len(found) >= limit:
            break
    return found


def final_problems(task: TaskSpec, observations: list[Observation], workspace: Any,
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


def next_step(task: TaskSpec, observations: list[Observation], workspace: Any,
              failed_fixes: Iterable[tuple[str, str, str]] = ()) -> Step | None:
    """The next action of a guided workspace task; None: the Final. ``failed_fixes`` are
    (path, function, fix) that a trial (``fix_trials.py``) failed: no diagnosis proposes them again."""
    failed_fixes = tuple(failed_fixes)
    if task.workspace is None or workspace is None:
        return None
    unread = _unread(task, observations)
    if unread is not None:
        # The whole file, by the path the task declares: the 0.5B added line ranges of its own and
        # re-read the test with a moving start_line until the tool budget ran out.
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
    # the greedy 1.5B wrote the same wrong body again after each failing run until the loop guard,
    # and the sampled one the same fix with a comment added (so the code is compared, not the bytes).
    code = None if tested or change is None else workspace.code_digest()
    repeated = None if code is None else next(
        (run for _, run in reversed(runs) if not passed(run)
         and ((run.result or {}).get("files_digest") == now or (run.result or {}).get("code_digest") == code)), None)
    if change is None and not runs and change_tool == "replace_function" and _stubs(files, workspace):
        # a function still to be written fails its tests by construction: write it first
        return _first_version(function_step(files, workspace, None, observations), observations)
    if not tested and repeated is None:
        # Before the first change too: the failure names the function and the wrong value (the 0.5B,
        # asked to edit straight after reading, chose a def line and rewrote the function blind).
        return Step("bash", "a run of the tests after the last change" if change else "a run of the tests to see what fails",
                    # the timeout too: a call the grammar fixes whole is written without the model
                    # reading its prompt (the 0.5B chose 600 s once, reading 3.6k tokens to do it)
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


#: at most this many lines of a failed run's report in a replace_function step's instruction
MAX_FAILURE_LINES = 6
#: at most this many functions offered (and shown) to a replace_function step
MAX_FUNCTIONS = 3
#: a guided diagnosis: one line, never a runaway (the pattern bounds the length: see NEW_SCHEMA)
DIAGNOSIS_SCHEMA = {"type": "string", "pattern": r"^[A-Za-z`][^\n]{0,159}$"}
#: the fixed line a diagnosis proposes: at most about this many characters
MAX_DIAGNOSIS_FIX = 150


def failure_detail(run: Observation, limit: int = MAX_FAILURE_LINES) -> list[str]:
    """The lines of a failed pytest run that show what went wrong: per failing test its frames
    (location and code line, each once: a recursion repeats one frame hundreds of times) and its
    first ``E`` line (the values or the error), at most ``limit`` lines; else the one-line summary."""
    result = run.result or {}
    lines = "\n".join(str(result.get(stream) or "") for stream in ("stdout", "stderr")).splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("=") and ("FAILURES" in line or "ERRORS" in line)),
                 None)
    if start is None:
        return doctest_failures("\n".join(lines), limit) or [failure_summary(run)]
    sections: list[tuple[list[str], list[str]]] = []  # (frame lines, E lines) per failing test
    for line in lines[start + 1:]:
        line = line.rstrip()[:160]
        if line.startswith(("=", "!!!")):
            break
        if line.startswith("_") or not sections:
            sections.append(([], []))
            if line.startswith("_"):
                continue
        frames, errors = sections[-1]
        if not line.strip() or not line.strip("^~ "):  # blank, or the markers under a code line
            continue
        if line.startswith("E ") or line == "E":
            if line.strip() != "E":
                errors.append(line)
        elif line not in frames:
            frames.append(line)
    picked: list[str] = []
    for frames, errors in sections:
        room = limit - len(picked)
        if room <= 0:
            break
        shown = errors[:1] + [line for line in [returned(frames, errors)] if line]
        picked += frames[:max(0, room - len(shown))] + shown[:room]
    return picked or [failure_summary(run)]


_FAILED_TEST = re.compile(r"^FAILED ([^\s:]+\.py)::([\w:]+)")
MAX_TEST_LINES = 16


def failing_tests(run: Observation, workspace: Any, limit: int = 2) -> list[str]:
    """The source of the tests a failed pytest run names (``FAILED path::test``), as the workspace
    has them, at most ``limit`` of at most ``MAX_TEST_LINES`` lines each: the report shows the first
    assertion that failed, the test shows every case the fix must meet (the 1.5B fixed ``is_leap``
    for 2000, then broke 1900, then fixed 1900 and broke 2000)."""
    result = run.result or {}
    out: list[str] = []
    for line in str(result.get("stdout") or "").splitlines():
        if len(out) >= limit:
            break
        if not (match := _FAILED_TEST.match(line.strip())):
            continue
        text = workspace.read_text(match.group(1))
        source = ops.function_source(text, match.group(2).replace("::", ".")) if text else None
        if source and len(source.splitlines()) <= MAX_TEST_LINES and source not in out:
            out.append(source)
    return out


_ASSERT_EQUAL = re.compile(r"^\s*assert (.+?) == (.+?)\s*$")
_TRUTH = re.compile(r"^\s*assert (not )?(\w[\w.]*\(.*\))\s*$")


def returned(frames: list[str], errors: list[str]) -> str | None:
    """A failed ``assert call == expected`` in words, the value the call returned beside the one the
    test expects (a small model reads "assert 50 == 45.0" as two numbers, not as what its code did)."""
    code, error = (frames[-1] if frames else ""), (errors[0] if errors else "")
    error = re.sub(r"^E\s+", "", error)
    if (want := _ASSERT_EQUAL.match(code)) and (got := _ASSERT_EQUAL.match(error)) and "(" in want.group(1):
        expected = re.sub(r"^pytest\.approx\((.*)\)$", r"\1", want.group(2))
        return f"so {want.group(1)} returned {got.group(1)}; the test expects {expected}"
    if (want := _TRUTH.match(code)) and error in ("assert False", "assert not True", "assert None"):
        expects = "a false value" if want.group(1) else "a true value"
        return f"so {want.group(2)} returned {error.split()[-1]}; the test expects {expects}"
    return None


def _functions(files: list[str], workspace: Any) -> list[tuple[str, str, str]]:
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
    wording is another likeliest version), else sampled (the greedy 1.5B wrote HumanEval/145's
    unbalanced ``sorted(...)`` three times, to the loop guard)."""
    refused = [o for o in observations if not o.ok and o.tool in CHANGE_TOOLS]
    if not refused:
        return step
    error = refused[-1].error
    note = f" Your change {refused[-1].id} was refused ({error.message if error else 'refused'}): write different code."
    if step.spec is not None and len(refused) == 1:
        return replace(step, target=step.target + note, spec=None)
    return replace(step, target=step.target + note, spec=None, explore=True)


def function_step(files: list[str], workspace: Any, run: Observation | None,
                  observations: list[Observation] = (), failed_fixes: Iterable[tuple[str, str, str]] = (),
                  reworded: bool = False) -> Step:
    """A ``replace_function`` after the failing ``run``: the functions its report calls (all of the
    files' functions when it names none), their path and name narrowed to those, the new source
    held to start with the def line and docstring when there is one candidate, and the failure and
    each candidate's source shown in the instruction (and proposed as drafts: most of a fixed
    function is copied from the old one).

    After a rewrite that failed, the source shown is the function as the task gave it (the tool
    reported it as ``before``), with the fixes already tried, and a diagnosis may propose none of
    them again: the 1.5B, shown its own failed rewrite, fixed that back to the original and went
    to and fro between the two until the tool budget ran out.

    Without a ``run`` (a stub is written before any test run: it fails by construction) the step
    offers the stubs with their source alone.

    Where the pack words a function's first version itself (``reworded``: ``TaskSpec.code_prompt``)
    and that version failed, the next is a first version again, in the runtime's words and greedy
    (``Step.anew``), before any sampled rewrite: two wordings give two of the model's likeliest
    versions (at 890656b the runtime's words' first version passed HumanEval/134, the benchmark's
    words' failed its examples, and on four other problems the other way round)."""
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
        # first bodies are no fixes (and are not shown: the 1.5B copies failed code it is shown)
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
            # its docstring better than it finds a bug: the 1.5B named a wrong line and fixed a right
            # one wrongly for ten minutes on a pager's `start = number * per_page`)
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
        # that showed the file (HumanEval/10's stub calls a helper the file defines beside it)
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


def spec_of(text: str, name: str) -> str | None:
    """The module ``text`` with the stub ``name`` less its body (the ``pass``, ``...`` or ``raise
    NotImplementedError`` it ends with; what comes before it -- def line, docstring, an import --
    kept), stripped: what a benchmark's prompt is (a HumanEval problem's prompt is its stub's file
    less the stub's body). None where the module does not parse or ``name`` is not one function of
    its top level that ends so."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    found = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    if len(found) != 1 or len(found[0].body) < 2 or not _is_stub_statement(found[0].body[-1]):
        return None
    last = found[0].body[-1]
    lines = text.splitlines()
    return "\n".join(lines[:last.lineno - 1] + lines[last.end_lineno:]).strip()


_MUST_BE = re.compile(r"it must be `(.*)`$")
_BLAMED = re.compile(r"^The wrong line is `(.*?)`; it must be `")
#: a line named wrong this many times by rewrites that all failed is no longer offered as the wrong
#: one (the 1.5B blamed a ``return`` line four times, fixing it four ways, where the ``if`` above it
#: was the bug, until the tool budget ran out)
BLAME_LIMIT = 2
#: failed rewrites of one function after which it is asked for anew from its docstring (``function_step``)
RESPEC_AFTER = 3


#: the most of a module shown around a function still to be written (``module_context``)
MAX_CONTEXT_CHARS = 2400


def module_context(text: str, name: str) -> str:
    """The module ``text`` without function ``name`` (decorators included), runs of blank lines
    folded to one, at most ``MAX_CONTEXT_CHARS`` (cut at a line, marked); "" when nothing is left
    or the module does not parse."""
    try:
        spans = ops.definitions(text).get(name) or []
    except (SyntaxError, ValueError):
        return ""
    if len(spans) != 1:
        return ""
    first, _, last, _ = spans[0]
    lines = text.splitlines()
    kept: list[str] = []
    for line in lines[:first - 1] + lines[last:]:
        if line.strip() or (kept and kept[-1].strip()):
            kept.append(line.rstrip())
    around = "\n".join(kept).strip("\n")
    if len(around) > MAX_CONTEXT_CHARS:
        around = around[:around.rfind("\n", 0, MAX_CONTEXT_CHARS)].rstrip() + "\n# ... (the rest of the module is not shown)"
    return around


def stub_of(source: str) -> str | None:
    """The function's def line and docstring with ``...`` for its body (dedented); None where they
    cannot be told apart (``_head_lines``) or it has no docstring."""
    head = _head_lines(source)
    if len(head) < 2:
        return None
    lines = textwrap.dedent(source).splitlines()
    body = lines[len(head)] if len(lines) > len(head) else ""
    indent = body[:len(body) - len(body.lstrip())] or "    "
    return "\n".join([*head, indent + "..."])


def _stubs(files: list[str], workspace: Any) -> list[tuple[str, str, str]]:
    return [f for f in _functions(files, workspace) if is_stub(f[2])]


def is_stub(source: str) -> bool:
    """A function still to be written: its body (after the docstring, and imports before it) is only
    ``pass``, ``...`` or ``raise NotImplementedError`` (HumanEval/115 imports ``math`` above its
    docstring)."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError):
        return False
    node = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    body = node.body[1:] if ast.get_docstring(node) is not None else node.body
    imports = next((i for i, statement in enumerate(body) if not isinstance(statement, (ast.Import, ast.ImportFrom))),
                   len(body))
    if 0 < imports < len(body):
        body = body[imports:]
        if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # the docstring, after the imports
    if len(body) != 1:
        return not body
    return _is_stub_statement(body[0])


def _is_stub_statement(statement: ast.stmt) -> bool:
    """``pass``, ``...`` or ``raise NotImplementedError``: a body still to be written."""
    if isinstance(statement, ast.Pass) or (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                                           and statement.value.value is Ellipsis):
        return True
    if isinstance(statement, ast.Raise) and statement.exc is not None:
        exc = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


def diagnosis_schema(source: str, tried: list[str] = (), cleared: list[str] = ()) -> dict[str, Any]:
    """The diagnosis in a fixed form: which of the function's own lines is wrong (one of them, as
    the file has it, and not one ``cleared`` -- fixed ``BLAME_LIMIT`` ways already, each failing --
    while another is left) and what it must be instead -- neither that line unchanged, nor a copy of
    another of its lines, nor a fix already ``tried`` -- before the source is written (the 1.5B,
    asked for the source straight away or for a free diagnosis, named the wrong line but copied it
    unchanged)."""
    lines = blamable_lines(source)
    choices = [line for line in lines if line not in cleared] or lines
    if not choices:
        return DIAGNOSIS_SCHEMA
    options = []
    for line in choices:
        # the fix ends at its closing backtick (unbounded, the 1.5B wrote on in prose past it)
        # a fix already tried is excluded with its trivial variants too (the 1.5B wrote a failed fix
        # again with a ';' added or its ':' left out, then the same failed function); so is a copy
        # of another line of the function, which leaves one of the two dead (the 0.5B's clamp "fix"
        # `if number < maximum:` -> `if number < low:` passed tests that never went past the maximum)
        others = [other for other in lines if other != line]
        known = [variant for text in (line, *tried, *others) for variant in _variants(text)]
        failed = [variant for text in tried for variant in _variants(text)]
        new = differs_from(list(dict.fromkeys(known)), MAX_DIAGNOSIS_FIX, exclude="`\n" + PROSE_QUOTES, closed=failed)[1:-1]
        options.append(f"{_literal(line)}`; it must be `{new}")
    return {"type": "string", "pattern": "^The wrong line is `(?:" + "|".join(options) + ")`$"}


MAX_FIX_LINES = 3  # a rewrite that changed more lines than this was no fix of one line
#: typographic quotes end a fix: in a code line they are prose (sampled wider, the 1.5B closed its fix
#: with one and went on, "`return x or y’ to correctly handle ...`", in 4 of 21 fix trials of one run)
PROSE_QUOTES = "\u2018\u2019\u201c\u201d"
_NUMBERED = re.compile(r"^\s*\d+\| ?(.*)$")
_NOT_CODE = ("#", '"' * 3, "'" * 3)
_COMMENT = re.compile(r"\s+#[^'\"]*$")  # a trailing comment (none with a quote after the #)


def changed_lines(rewrite: dict[str, Any]) -> list[str]:
    """The code lines a ``replace_function`` result wrote that its function did not have (``before``),
    stripped: the fix it tried, whatever its diagnosis said (the 1.5B's diagnosis ran on past its
    fix in prose, "it must be `if n <= m:'. The test expects...", so that fix itself was never
    excluded, and it wrote ``<=`` three times)."""
    old = {line.strip() for line in str(rewrite.get("before") or "").splitlines()}
    new = [_COMMENT.sub("", m.group(1)).strip() for line in str(rewrite.get("snippet") or "").splitlines()
           if (m := _NUMBERED.match(line))]
    return [line for line in dict.fromkeys(new) if line and line not in old and not line.startswith(_NOT_CODE)]


def blamable_lines(source: str) -> list[str]:
    """The lines of a function a diagnosis may name as the wrong one: its code lines after the def
    line, stripped, each once."""
    lines = [line.strip() for line in textwrap.dedent(source).splitlines()[1:]]
    return [line for line in dict.fromkeys(lines) if line and "`" not in line and "\\" not in line
            and not line.startswith(('"""', "'''", "#"))]


def _variants(line: str) -> tuple[str, ...]:
    """A line as written, with a space after it, and with its trailing ``:``/``;``/spaces left out
    or one of them added."""
    bare = line.rstrip(" ;:")
    return (line, line + " ", bare, bare + ":", bare + ";", bare + " ")


#: a stub's body statements, which a body written for a stub may not start with
STUB_LINES = ("raise NotImplementedError", "raise NotImplementedError()", "pass", "...")


def def_line_pattern(source: str, written: bool = False) -> str:
    """A new definition starts as the old one does: its def line and its docstring (the signature is
    not the bug, and the docstring is the spec the fix is written against: the 1.5B, free to leave
    it out, dropped it and then saw nothing wrong with the code), when a pattern can hold them (a
    function's source is written as raw text -- a code block or a code turn -- so a backslash in it
    is one character of the pattern like any other), and ends where the function does (``BODY_LINE``);
    else with any text."""
    head = _head_lines(source)
    if head:
        if written:
            # ``written``: the body is to be written, so its first line is no stub statement (the
            # 1.5B, shown a stub, copied ``raise NotImplementedError`` back three times in a row)
            lines = textwrap.dedent(source).splitlines()
            body = lines[len(head)] if len(lines) > len(head) else "    "
            indent = body[:len(body) - len(body.lstrip())] or "    "
            first = differs_from(list(STUB_LINES), 200, exclude="\n")[1:-1]
            return "^" + _literal("\n".join(head)) + "\\n" + _literal(indent) + first + BODY_LINES + "$"
        return "^" + _literal("\n".join(head)) + "\\n" + BODY_LINE + BODY_LINES + "$"
    return "^[\\s\\S]*$"


#: a line of a function's body after its def line: blank, indented or a comment -- never a statement of
#: the module (asked in a benchmark's words, "a self-contained script", the 1.5B wrote its definition and
#: then calls of it, and the definition was refused three times for the statements after it)
BODY_LINE = "(?:[ \\t#][^\\n]*)?"
BODY_LINES = "(?:\\n" + BODY_LINE + ")*"


def _head_lines(source: str) -> list[str]:
    """The def line and the docstring of a one-function ``source``, dedented; [] where the def
    spans lines, has decorators or the source does not parse."""
    text = textwrap.dedent(source)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    node = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.decorator_list or not node.body:
        return []
    lines = text.splitlines()
    if not lines[node.lineno - 1].rstrip().endswith(":") or node.body[0].lineno == node.lineno:
        return []
    last = node.lineno
    if ast.get_docstring(node) is not None:
        last = node.body[0].end_lineno or node.body[0].lineno
    return lines[node.lineno - 1:last]


def _unread(task: TaskSpec, observations: list[Observation]) -> str | None:
    """The first file the task declares to read (``subgoals.read_file``) with no successful read yet."""
    read = {item_key(str((o.result or {}).get("path"))) for o in observations if o.ok and o.tool == "read_file"}
    return next((item for item in task.subgoals.get("read_file", []) if item_key(item) not in read), None)


def _changeable_files(task: TaskSpec, observations: list[Observation], workspace: Any) -> list[str]:
    """Files the model read (else the ones the task declares to read) that the task lets change."""
    read = [str((o.result or {}).get("path")) for o in observations if o.ok and o.tool == "read_file"]
    declared = list(task.subgoals.get("read_file", []))
    files = [p for p in dict.fromkeys(read + declared) if p and not workspace.is_protected(p)]
    return files


def _change_step(tool: str, files: list[str], workspace: Any, target: str) -> Step:
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
    # new may be no line that old may be: an edit that changes nothing is no fix (the 0.5B copied
    # the line it chose into new, three times, until the loop guard)
    new = {**NEW_SCHEMA, "pattern": differs_from(choices, MAX_NEW_CHARS)}
    return Step(tool, target, narrowed=(("path", path), ("old", {"enum": choices}), ("new", new)), drafts=drafts)


def unique_lines(files: Iterable[tuple[str, str]]) -> list[str]:
    """The lines an ``old`` may be, without their indentation: each occurs exactly once in its file,
    and in a Python file that parses it is code -- a statement in a function or an assignment at the
    top -- not a ``def``, an import, a docstring or a comment (the 0.5B chose the ``def`` line of the
    broken function and rewrote the function on it). Every non-blank line where the file does not parse."""
    choices: list[str] = []
    for path, text in files:
        lines = text.splitlines()
        code = _code_lines(text) if path.endswith(".py") else None
        for number, line in enumerate(lines, start=1):
            line = line.strip()
            if code is not None and number not in code:
                continue
            if line and len(line) <= MAX_CHOICE_CHARS and text.count(line) == 1 and line not in choices:
                choices.append(line)
                if len(choices) >= MAX_LINE_CHOICES:
                    return choices
    return choices


_META = set("\\.+*?()|[]{}^$#&-~")
#: the longest string ``differs_from`` excludes (see there)
MAX_EXCLUDED_CHARS = 48


def _literal(text: str) -> str:
    return "".join("\\" + c if c in _META else c for c in text)


#: After a line ``differs_from`` closes, what may not follow: these characters at all, and these
#: characters followed by one of their own (the 1.5B wrote a failed fix again with prose after it:
#: "it must be `if n <= m:'. The test expects...", "`x - 1; otherwise ...`", "`x - 1 because ...`").
CLOSED_AFTER = ";'"
CLOSED_THEN = {" ": "A-Za-z", ".": " "}


def differs_from(lines: list[str], limit: int, exclude: str = "", closed: Iterable[str] = ()) -> str:
    """A regular expression for a string that starts with a non-space, is at most about ``limit``
    characters long, holds none of the characters in ``exclude`` and equals none of ``lines`` (but
    those with a quote or backslash): the complement of a finite set, written along the trie of
    ``lines`` (a string either ends early, leaves the trie at some character, or goes on past the
    end of a line), so its size grows with the lines' length, not its square. A line of ``closed``
    (one of ``lines``) may not go on with prose either (``CLOSED_AFTER``, ``CLOSED_THEN``)."""
    trie: dict[str, Any] = {}
    shut = set(closed)
    # llguidance lets a JSON escape (\" or \\) through any character class, so a line holding a
    # quote or a backslash cannot be excluded this way (edit_file still refuses old == new); nor can
    # a line longer than ``MAX_EXCLUDED_CHARS``: a deep trie of bounded tails is past what llguidance
    # compiles, and a grammar that does not compile constrains nothing (a function with one 85-character
    # line had its diagnosis written unconstrained, and the 1.5B wrote no JSON three times)
    for line in (line for line in lines if '"' not in line and "\\" not in line and len(line) <= MAX_EXCLUDED_CHARS):
        node = trie
        for c in line:
            node = node.setdefault(c, {})
        node[""] = {}  # the end of a line
        if line in shut:
            node["\0"] = {}  # closed: no prose after it

    banned = "".join(_literal(c) if c != "\n" else "\\n" for c in exclude)
    tail = (f"[^{banned}]" if banned else "[\\s\\S]") + f"{{0,{limit - 1}}}"

    def branch(node: dict[str, Any], root: bool, ban: str = "") -> str:
        shut_here = "\0" in node
        children = [c for c in node if c and c != "\0" and not (shut_here and c in CLOSED_AFTER)
                    and not (ban and re.fullmatch(f"[{ban}]", c))]
        nexts = {c: CLOSED_THEN[c] for c in CLOSED_THEN if shut_here}
        options = []
        if not root and "" not in node:
            options.append("")  # ends early: a proper prefix of a line
        leave = "".join(_literal(c) for c in children) + "".join(_literal(c) for c in nexts)
        leave += ("".join(_literal(c) for c in CLOSED_AFTER) if shut_here else "") + ban
        if root:
            options.append(f"[^\\s{leave}{banned}]{tail}")
        else:
            options.append((f"[^{leave}{banned}]" if leave or banned else "[\\s\\S]") + tail)
        options += [_literal(c) + branch(node[c], False, nexts.get(c, "")) for c in children]
        options += [_literal(c) + branch({}, False, then) for c, then in nexts.items() if c not in children]
        return "(?:" + "|".join(options) + ")"

    return "^" + branch(trie, True) + "$"


def _code_lines(text: str) -> set[int] | None:
    """Line numbers of the statements in function bodies and of top-level assignments; None when the
    text does not parse (a change broke it: every line may be the one to repair)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    numbers: set[int] = set()

    def add(node: ast.stmt) -> None:
        numbers.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            for statement in body:
                add(statement)
        elif isinstance(node, ast.Module):
            for statement in node.body:
                if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    add(statement)
    for node in ast.walk(tree):  # a nested def inside a body is no code line of its own
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            numbers.discard(node.lineno)
    return numbers


def action_state(tool: str, workspace: Any) -> dict[str, str]:
    """What makes a repeated workspace action new: the files it acts on (the same test command after
    a fix is progress, the same command on the same files is not)."""
    from agent.tools import WORKSPACE_TOOLS

    return {"files": workspace.digest()} if workspace is not None and tool in WORKSPACE_TOOLS else {}
