"""``python -m agent eval``: packs × seeds with one resident model, then the report.

    python -m agent eval --model PATH|openai:BASE_URL#NAME|anthropic:NAME --packs DIR|NAME|generated:N --runs K [--seed S]
                         [--temperature T] [--top-p P] [--top-k K] [--mode guided|free] [--out DIR]
                         [--approval never_ask|ask_on_risk|always_ask] [--unsandboxed] [--grader SCRIPT]

``--packs generated:fixtest:N`` generates N fix-the-failing-test packs (``agent/families``); their runs
work in a fresh copy of each pack's repository, in the sandbox. Nobody answers an approval during
an eval: a command the policy would ask about is refused (the pack's own test command runs).
``--grader SCRIPT`` grades the packs that carry a ``truth.json`` (packs a user wrote) with the
operator's own independent grader (``external_grade.py``); the report counts accepted-but-wrong runs
per family.

Operator mistakes (bad flag values, no model, unknown packs) are one ``error:`` line and exit 2,
before anything is loaded or written. The model is loaded once through ``backends.load_model``
(a local one is the same process-wide resident model ``agent run`` and the runner use; a served one
is one client) and every run gets it. The model flags are ``run``'s (``model_choice.add_model_arguments``).
The report goes to ``--out`` (default ``<runs dir>/eval/<timestamp>/``: ``.runs/`` beside the package in a
checkout, see ``packs.DEFAULT_RUNS_DIR``).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from agent.task.packs import DEFAULT_RUNS_DIR, PACKAGE_ROOT, PackError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from agent.models.model_choice import add_model_arguments
    from agent.cli.workspace_flags import add_workspace_arguments

    parser.add_argument("--packs", required=True,
                        help="a pack folder, a folder of pack folders, a pack name, generated:N or generated:FAMILY:N "
                             "(e.g. generated:fixtest:40)")
    parser.add_argument("--runs", type=int, default=1, help="runs per pack (seeds S, S+1, ...)")
    parser.add_argument("--seed", type=int, default=0, help="first sampling seed; also seeds generated:N")
    add_model_arguments(parser)
    parser.add_argument("--mode", default=None, choices=["guided", "free"], help="override each pack's mode")
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--top-p", type=float, default=None, help="nucleus mass when sampling (default 0.8)")
    parser.add_argument("--top-k", type=int, default=None, help="candidates kept when sampling (default 20)")
    parser.add_argument("--max-seconds", type=float, default=None, help="deadline of each run")
    parser.add_argument("--out", default=None, help="report folder (default .runs/eval/<timestamp>/ in a checkout)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--grader", default=None,
                        help="a grader script for packs with a truth.json: run as SCRIPT RUN_JSON TRUTH_JSON, "
                             "it prints PASS or FAIL: reasons")
    add_workspace_arguments(parser, directory=False)


def _refuse(message: str) -> int:
    print(f"error: {message}. Nothing was run.", file=sys.stderr)
    return 2


def _display(path: Path) -> str:
    """A path as we may print it: relative to the package, the working folder or ~, else its name."""
    for base, prefix in ((PACKAGE_ROOT, ""), (Path.cwd(), ""), (Path.home(), "~/")):
        try:
            return prefix + str(path.resolve().relative_to(base.resolve()))
        except ValueError:
            continue
    return path.name


def main(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from agent.contracts.budgets import Budgets, Sampling
    from agent.evaluation.suite import find_packs, parse_generated

    if args.runs < 1 or args.runs > 1000:
        return _refuse("--runs: must be between 1 and 1000")
    if args.grader is not None and not Path(args.grader).expanduser().is_file():
        return _refuse(f"--grader {Path(args.grader).name}: no such file")
    try:
        budgets = Budgets(**({"max_seconds": args.max_seconds} if args.max_seconds is not None else {}))
        sampling = Sampling(**{k: v for k, v in {
            "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k,
            "seed": args.seed}.items() if v is not None})
        Sampling(seed=args.seed + args.runs - 1)  # the last run's seed must be valid too
    except ValidationError as exc:
        problem = exc.errors()[0]
        return _refuse(f"--{str(problem['loc'][0]).replace('_', '-')}: {problem['msg']}")
    try:
        generated = parse_generated(args.packs)
        packs = None if generated else find_packs(args.packs)
    except PackError as exc:
        return _refuse(str(exc))
    from agent.models.model_choice import ModelChoiceError, model_spec

    try:
        spec = model_spec(args)
    except ModelChoiceError as exc:
        return _refuse(str(exc))
    return _evaluate(args, budgets, sampling, spec, packs)


def _evaluate(args: argparse.Namespace, budgets: Any, sampling: Any, spec: Any, packs: list | None) -> int:
    from agent.models.model_choice import load_spec
    from agent.cli.workspace_flags import workspace_options
    from agent.models.model_policy import ModelUnavailable
    from agent.evaluation.report import build_report, to_markdown, write_chart
    from agent.evaluation.suite import resolve_packs, run_suite

    try:
        policy = load_spec(spec)
    except ModelUnavailable as exc:
        return _refuse(exc.message)
    out = Path(args.out).expanduser() if args.out else DEFAULT_RUNS_DIR / "eval" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    packs = packs if packs is not None else resolve_packs(args.packs, out, args.seed)
    started, runs, interrupted = time.time(), [], False

    def record(run: Any) -> None:
        runs.append(run)
        log.write(json.dumps(run.to_dict(), ensure_ascii=False) + "\n")
        log.flush()

    # subtle: SIGTERM (e.g. from `timeout`) becomes KeyboardInterrupt, so the runs so far still get a report.
    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler) if on_main else None
    try:
        with (out / "runs.jsonl").open("w", encoding="utf-8") as log:
            run_suite(packs, lambda pack, k: policy, budgets, sampling=sampling, runs=args.runs, seed=args.seed,
                      artifact_root=out / "artifacts", mode=args.mode, progress=not args.no_progress, on_run=record,
                      workspace=workspace_options(args, approver=None),
                      grader=Path(args.grader).expanduser().resolve() if args.grader else None)
    except KeyboardInterrupt:
        interrupted = True
        print(f"\ninterrupted after {len(runs)} run(s); reporting those", file=sys.stderr)
    finally:
        if on_main:
            signal.signal(signal.SIGTERM, previous)
    spec = args.packs if args.packs.startswith("generated:") else Path(args.packs).name or args.packs
    settings = {"packs": spec, "pack_count": len(packs), "runs": args.runs, "seed": args.seed,
                "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
                # a pack may declare its own budgets (TaskSpec.budgets); the caller's flag wins where set
                "max_seconds": budgets.max_seconds if "max_seconds" in budgets.model_fields_set else None,
                "mode": args.mode, "grader": Path(args.grader).name if args.grader else None,
                "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
                "wall_seconds": round(time.time() - started, 1), "interrupted": interrupted}
    report = build_report(runs, settings, policy.description.public())
    (out / "report.json").write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    markdown = to_markdown(report)
    (out / "report.md").write_text(markdown, encoding="utf-8")
    write_chart(report, out / "report.png")
    print(markdown)
    where = _display(out)
    print(f"report: {where}/report.json, {where}/report.md, {where}/report.png")
    return 130 if interrupted else 0
