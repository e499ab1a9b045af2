"""This agent beside Aider on the same folders with the same GGUF: bug-report repositories and
Exercism-style exercises, one process at a time, a table of solved and wall time.

A task is a folder under ``--tasks``, in one of two shapes:

    bug report   the repository, with ``GOAL.md`` (the report in words) and optionally ``hidden/``
                 (more tests, laid over the repository only to grade: neither arm sees them)
    exercise     Exercism's practice layout: ``.docs/instructions.md``, ``<slug>.py`` (the stub),
                 ``<slug>_test.py``; ``.meta/`` (the example solution) is never copied

Each arm works on a fresh copy (``prepare``), without ``GOAL.md``, ``hidden/``, ``.meta/``, ``.git``.
A task is solved when the visible tests and the hidden ones pass on the arm's files (in a fresh copy,
``grade``) and no test file changed. The arms:

    agent   ``python -m agent run --workspace DIR --model GGUF --json GOAL`` (the model in-process)
    aider   ``aider-chat`` 0.86.2 in its own virtual environment (made on first use, never in
            requirements.txt: ``--aider-venv``, default ~/.cache/react-agent-local/aider-venv), talking
            to ``python -m llama_cpp.server`` serving the same GGUF on loopback: ``--edit-format whole
            --test-cmd CMD --auto-test --yes-always --no-git --message GOAL FILES``

The agent arm runs first, each task to its end; then the llama.cpp server starts, the aider arm
runs, and the server stops: never two model processes at once.

    ../.venv/bin/python bench/aider_bench.py --tasks DIR --model GGUF [--arms agent,aider]
        [--out results.json] [--max-seconds 600] [--prepare-only OUT]

``--prepare-only OUT`` writes each task's prepared folder and the two commands, runs no model.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
AIDER_VERSION = "0.86.2"
DEFAULT_VENV = Path.home() / ".cache" / "react-agent-local" / "aider-venv"
#: never copied into an arm's folder: the grader's tests, the report, an exercise's solution, history
HIDDEN_NAMES = ("GOAL.md", "hidden", ".meta", ".git", "__pycache__", ".pytest_cache")
TEST_COMMAND = "python -m pytest -q"
#: Aider's own benchmark asks for exercises in these words (its benchmark.py), after the instructions
EXERCISE_ASK = ("Use the above instructions to modify the supplied files: {files}. Don't change the names of "
                "existing functions or classes, as they may be referenced from other code like unit tests, etc. "
                "Only use standard python libraries, don't suggest installing any packages.")


@dataclass(frozen=True)
class Task:
    name: str
    kind: str  # "bug_report" or "exercise"
    source: Path
    goal: str
    #: the files an arm may change (Aider is given these; the agent finds them itself)
    editable: tuple[str, ...]
    tests: tuple[str, ...]
    hidden: Path | None = None


@dataclass
class Outcome:
    task: str
    arm: str
    solved: bool
    seconds: float
    detail: str = ""
    tests_changed: list[str] = field(default_factory=list)


def _python_files(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if not any(part in HIDDEN_NAMES for part in rel.parts):
            out.append(rel.as_posix())
    return out


def _is_test(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return name.startswith("test_") or name.endswith("_test.py") or "tests/" in rel or rel.startswith("test/")


def read_task(folder: Path) -> Task:
    """The task a folder holds (see the module docstring); ValueError when it is neither shape."""
    files = _python_files(folder)
    tests = tuple(f for f in files if _is_test(f))
    editable = tuple(f for f in files if not _is_test(f) and not f.endswith("conftest.py"))
    instructions = folder / ".docs" / "instructions.md"
    if (folder / "GOAL.md").is_file():
        goal = (folder / "GOAL.md").read_text(encoding="utf-8").strip()
        hidden = folder / "hidden" if (folder / "hidden").is_dir() else None
        return Task(folder.name, "bug_report", folder, goal, editable, tests, hidden)
    if instructions.is_file():
        text = instructions.read_text(encoding="utf-8").strip()
        append = folder / ".docs" / "instructions.append.md"
        if append.is_file():
            text += "\n\n" + append.read_text(encoding="utf-8").strip()
        goal = text + "\n\n" + EXERCISE_ASK.format(files=", ".join(editable))
        return Task(folder.name, "exercise", folder, goal, editable, tests)
    raise ValueError(f"{folder.name}: neither GOAL.md nor .docs/instructions.md")


def read_tasks(root: Path) -> list[Task]:
    return [read_task(child) for child in sorted(root.iterdir()) if child.is_dir() and not child.name.startswith(".")]


def prepare(task: Task, dest: Path) -> Path:
    """A fresh copy of the task's folder for one arm, without what only the grader may see."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(task.source, dest, ignore=shutil.ignore_patterns(*HIDDEN_NAMES), symlinks=False)
    return dest


def _hashes(root: Path, files: tuple[str, ...]) -> dict[str, str | None]:
    return {f: hashlib.sha256((root / f).read_bytes()).hexdigest() if (root / f).is_file() else None for f in files}


def grade(task: Task, worked: Path, timeout: float = 300.0) -> tuple[bool, str, list[str]]:
    """(solved, why, test files changed): the visible and hidden tests on a fresh copy of the arm's files."""
    original = _hashes(task.source, task.tests)
    changed = [f for f, h in _hashes(worked, task.tests).items() if h != original[f]]
    with tempfile.TemporaryDirectory(prefix="aider-bench-grade-") as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(worked, copy, ignore=shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", ".aider*"))
        for rel in task.tests:  # graded against the tests as the task gave them
            shutil.copyfile(task.source / rel, copy / rel)
        if task.hidden is not None:
            shutil.copytree(task.hidden, copy, dirs_exist_ok=True)
        try:
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=copy,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return False, "grading timed out", changed
    last = (proc.stdout.strip().splitlines() or ["no output"])[-1]
    return proc.returncode == 0 and not changed, last[:200], changed


def agent_command(task: Task, folder: Path, model: str, max_seconds: float, runs_dir: Path) -> list[str]:
    return [sys.executable, "-m", "agent", "run", "--workspace", str(folder), "--model", model, "--json",
            "--max-seconds", str(int(max_seconds)), "--runs-dir", str(runs_dir), "--approval", "never_ask",
            "--goal", task.goal]


def aider_command(task: Task, folder: Path, venv: Path, base_url: str, test_cmd: str = TEST_COMMAND) -> list[str]:
    return [str(venv / "bin" / "aider"), "--model", "openai/local", "--openai-api-base", base_url,
            "--openai-api-key", "local", "--edit-format", "whole", "--test-cmd", test_cmd, "--auto-test",
            "--yes-always", "--no-git", "--no-auto-commits", "--no-show-model-warnings", "--no-check-update",
            "--analytics-disable", "--no-detect-urls", "--no-show-release-notes", "--no-pretty", "--no-stream",
            "--map-tokens", "0",
            "--message", task.goal, *task.editable]


def ensure_aider(venv: Path) -> Path:
    """The virtual environment with aider-chat, made and installed from the package index on first use."""
    if not (venv / "bin" / "aider").is_file():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", f"aider-chat=={AIDER_VERSION}"], check=True)
    return venv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """``python -m llama_cpp.server`` on loopback with the GGUF, for the aider arm only."""

    def __init__(self, model: str, context: int = 8192):
        self.port = _free_port()
        self.argv = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1",
                     "--port", str(self.port), "--n_ctx", str(context), "--model_alias", "local"]
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "LlamaServer":
        import urllib.request

        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("llama_cpp.server exited; is llama-cpp-python installed with its [server] extra?")
            try:
                urllib.request.urlopen(self.base_url + "/models", timeout=2).read()
                return self
            except OSError:
                time.sleep(1)
        self.__exit__()
        raise RuntimeError("llama_cpp.server did not start in 300 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None


def _timed(argv: list[str], cwd: Path, seconds: float, env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=seconds, env=env)
        tail = (proc.stdout + proc.stderr)[-300:]
    except subprocess.TimeoutExpired:
        tail = "timed out"
    return time.monotonic() - started, tail


def run_arm(arm: str, tasks: list[Task], work: Path, args: argparse.Namespace, base_url: str = "") -> list[Outcome]:
    outcomes = []
    for task in tasks:
        folder = prepare(task, work / arm / task.name)
        if arm == "agent":
            env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
            argv = agent_command(task, folder, args.model, args.max_seconds, work / "agent-runs")
            seconds, tail = _timed(argv, PACKAGE_ROOT, args.max_seconds + 120, env)
        else:
            seconds, tail = _timed(aider_command(task, folder, args.aider_venv, base_url), folder, args.max_seconds)
        solved, why, changed = grade(task, folder)
        outcomes.append(Outcome(task.name, arm, solved, round(seconds, 1), why if solved else f"{why} | {tail[-120:]}",
                                changed))
        print(f"{arm:6} {task.name:30} {'solved' if solved else 'failed':7} {seconds:7.1f} s", flush=True)
    return outcomes


def table(tasks: list[Task], outcomes: list[Outcome], arms: list[str]) -> str:
    """The markdown table: per task, per arm, solved and wall time; then each arm's total and median."""
    by = {(o.task, o.arm): o for o in outcomes}
    head = "| task | kind | " + " | ".join(f"{a} solved | {a} s" for a in arms) + " |"
    rule = "|" + "---|" * (2 + 2 * len(arms))
    rows = [head, rule]
    for task in tasks:
        cells = []
        for arm in arms:
            o = by.get((task.name, arm))
            cells += ["-", "-"] if o is None else ["yes" if o.solved else "no", f"{o.seconds:.1f}"]
        rows.append(f"| {task.name} | {task.kind} | " + " | ".join(cells) + " |")
    totals = []
    for arm in arms:
        mine = [o for o in outcomes if o.arm == arm]
        solved = [o.seconds for o in mine if o.solved]
        median = f"{statistics.median(solved):.1f}" if solved else "-"
        totals += [f"{len(solved)}/{len(mine)}", f"median solved {median}"]
    rows.append("| **total** | | " + " | ".join(totals) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", required=True, type=Path, help="a folder of task folders")
    parser.add_argument("--model", default=None, help="the GGUF both arms use")
    parser.add_argument("--arms", default="agent,aider")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="per task and arm")
    parser.add_argument("--aider-venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--work", type=Path, default=None, help="where the arms' folders go (default: a temp folder)")
    parser.add_argument("--out", type=Path, default=None, help="a JSON report of every outcome and the table")
    parser.add_argument("--prepare-only", type=Path, default=None, metavar="OUT",
                        help="write the prepared folders and the commands; run no model")
    args = parser.parse_args(argv)
    tasks = read_tasks(args.tasks)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not tasks or not set(arms) <= {"agent", "aider"}:
        parser.error("no tasks found, or --arms names an arm other than agent and aider")
    if args.prepare_only is not None:
        plan = []
        for task in tasks:
            folder = prepare(task, args.prepare_only / task.name)
            plan.append({"task": task.name, "kind": task.kind, "folder": str(folder), "editable": task.editable,
                         "agent": agent_command(task, folder, args.model or "MODEL.gguf", args.max_seconds,
                                                args.prepare_only / "agent-runs"),
                         "aider": aider_command(task, folder, args.aider_venv, "http://127.0.0.1:PORT/v1")})
        print(json.dumps(plan, indent=1))
        return 0
    if not args.model:
        parser.error("--model GGUF is needed to run the arms")
    work = args.work or Path(tempfile.mkdtemp(prefix="aider-bench-"))
    outcomes: list[Outcome] = []
    if "agent" in arms:
        outcomes += run_arm("agent", tasks, work, args)
    if "aider" in arms:
        ensure_aider(args.aider_venv)
        with LlamaServer(args.model) as server:
            outcomes += run_arm("aider", tasks, work, args, server.base_url)
    text = table(tasks, outcomes, arms)
    print(text)
    if args.out is not None:
        args.out.write_text(json.dumps({"model": Path(args.model).name, "arms": arms, "table": text,
                                        "outcomes": [o.__dict__ for o in outcomes]}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
