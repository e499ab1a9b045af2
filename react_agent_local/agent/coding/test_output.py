"""What a test run's output says: whether it passed, its failures in a line, the failed doctest
examples, the failing tests' assertions and the values they compared, the failing tests' sources."""

from __future__ import annotations

import re
from typing import Any
from agent.coding.workspace import Workspace
from agent.contracts.decision import Observation
from agent.coding.tools import workspace_ops as ops



# What says most about a failed run, best first: an exception with its message, pytest's one-line
# summary of a failed test, an assertion, any error line.
_FAILURE_LINES = (re.compile(r"^E\s+(\w+(?:Error|Exception)\b.*)"), re.compile(r"^FAILED \S+ - (.+)"),
                  re.compile(r"^E\s+(assert .+)"), re.compile(r"^(\w+(?:Error|Exception)\b.*)"))


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


#: at most this many lines of a failed run's report in a replace_function step's instruction
MAX_FAILURE_LINES = 6


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


def failing_tests(run: Observation, workspace: Workspace | None, limit: int = 2) -> list[str]:
    """The source of the tests a failed pytest run names (``FAILED path::test``), as the workspace
    has them, at most ``limit`` of at most ``MAX_TEST_LINES`` lines each: the report shows the first
    assertion that failed, the test shows every case the fix must meet (a fix made for the one
    failing case shown breaks another)."""
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
