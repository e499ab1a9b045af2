"""Terminal entry point: ``python -m agent run``, ``python -m agent eval`` (see ``evaluation/``),
``python -m agent chat`` / ``sessions`` (see ``sessions/command.py``) and ``python -m agent schemas``.

``run`` drives the real runtime with a real model -- a local one, or a served one named
``openai:BASE_URL#NAME`` / ``anthropic:NAME`` (never the scripted test policy) -- and prints
a readable step-by-step trace and the metrics, or with ``--json`` one JSON object with ``status``,
``stop_reason``, ``final``, ``metrics`` and ``observations``. Which model the flags name is
``model_choice.py``'s; the workspace flags are ``workspace_flags.py``'s (``eval`` shares both); the
trace lines are ``event_lines.py``'s (``chat`` prints them too).

``run --workspace DIR "goal"`` (or ``--goal``) takes a goal in words instead of a pack: the task is
found in the folder (``coding/``: the test command, the failing tests, the code they point at, what
must not change; ``--protect`` adds more), the run's report lists the changed files and prints the
unified diff, and ``revert RUN_ID`` puts those files back unless one changed since.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.contracts.budgets import Budgets, Sampling
from agent.cli.event_lines import format_event
from agent.models.model_choice import ModelChoiceError, add_model_arguments, default_model, load_spec, model_spec
from agent.task.packs import DEFAULT_RUNS_DIR, PackError, load_pack
from agent.util.paths import PACKAGE_ROOT
from agent.contracts.trace import write_events
from agent.cli.workspace_flags import add_workspace_arguments, workspace_options


def print_metrics(metrics: dict[str, Any] | None) -> None:
    if not metrics:
        print("metrics: N/A (the run never reached a decision)")
        return

    def pct(v: float | None) -> str:
        return "N/A" if v is None else f"{v * 100:.0f}%"

    def yes(v: bool | None) -> str:
        return "N/A" if v is None else ("PASS" if v else "FAIL")

    print("metrics:")
    print(f"  Task Success            {yes(metrics['task_success'])}  {metrics.get('checks') or ''}")
    print(f"  Valid Action Rate       {pct(metrics['valid_action_rate'])}")
    print(f"  Tool/Argument Accuracy  {pct(metrics['tool_argument_accuracy'])}")
    print(f"  Recovery Rate           {pct(metrics['recovery_rate'])}")
    print(f"  Loop Rate               {pct(metrics['loop_rate'])}")
    print(f"  Termination Correctness {yes(metrics['termination_correctness'])}")
    print(f"  Steps / model calls / tool calls  {metrics['steps']} / {metrics['model_calls']} / {metrics['tool_calls']}")
    print(f"  Latency  total {metrics['total_latency_ms'] / 1000:.2f}s, model {metrics['model_latency_ms'] / 1000:.2f}s, "
          f"tools {metrics['tool_latency_ms'] / 1000:.3f}s")
    print(f"  Tokens   {metrics['input_tokens']} in / {metrics['output_tokens']} out, "
          f"cost units {metrics['cost_units']} (normalized, not money)")


# -- commands -------------------------------------------------------------------------------

def cmd_run(args: argparse.Namespace) -> int:
    from agent.models.model_policy import ModelUnavailable  # noqa: F401  (documented failure type)
    from agent.core.run import run_agent

    goal = _goal_of(args)
    if goal is not None:
        refusal = _goal_refusal(args)
        if refusal:
            print(f"error: {refusal}. Nothing was run.", file=sys.stderr)
            return 2
    elif args.protect:
        print("error: --protect: only a goal's run finds what to protect; packs declare it. Nothing was run.",
              file=sys.stderr)
        return 2
    try:
        pack = load_pack(args.pack) if goal is None else None  # a goal's task is built from the folder below
    except PackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if goal is None:
        pack = _extended(pack, args)
        if pack is None:
            return 2
    try:
        spec = model_spec(args)
    except ModelChoiceError as exc:
        print(f"error: {exc}. Nothing was run.", file=sys.stderr)
        return 2
    try:
        budgets = Budgets(**{k: v for k, v in {
            "max_steps": args.max_steps, "max_tool_calls": args.max_tool_calls,
            "max_seconds": args.max_seconds}.items() if v is not None})
        sampling = Sampling(**{k: v for k, v in {
            "temperature": args.temperature, "seed": args.seed, "top_p": args.top_p,
            "top_k": args.top_k}.items() if v is not None})
    except ValidationError as exc:
        for problem in exc.errors():
            flag = "--" + "-".join(str(part) for part in problem["loc"]).replace("_", "-")
            print(f"error: {flag}: {problem['msg']}. Nothing was run.", file=sys.stderr)
        return 2

    def load():
        return load_spec(spec)

    run_id = "cli-" + secrets.token_hex(6)
    run_dir = Path(args.runs_dir) / run_id
    artifact_dir = run_dir / "artifacts"
    from agent.coding.approvals import terminal_approver
    from agent.tools import WORKSPACE_TOOLS, pack_registry

    workspace = workspace_options(args, terminal_approver())

    def sink(event: dict[str, Any]) -> None:
        if not args.json:
            line = format_event(event)
            if line:
                print(line, flush=True)

    def run_pack(chosen_pack: Any, allowed: list[str] | None) -> Any:
        return run_agent(chosen_pack, load, budgets, artifact_dir=artifact_dir, sink=sink, mode=args.mode,
                         sampling=sampling, allowed_tools=allowed, workspace=workspace, tools=pack_registry(chosen_pack))

    goal_task = changed = None
    if goal is not None:
        from agent.coding.goal_run import run_goal
        from agent.coding.goal_task import GoalRefused
        from agent.coding.workspace import WorkspaceUnavailable

        chosen: dict[str, Any] = {}

        def ready(task: Any) -> bool:
            if not args.json:
                print(task.lines(), flush=True)
            found = _extended(task.pack, args)
            problem = None if found is None else _tools_refusal(found, args)
            if found is None or problem:
                if problem:
                    print(problem, file=sys.stderr)
                return False
            chosen["pack"], chosen["allowed"] = found, _allowed(args)
            return True

        try:
            done = run_goal(Path(args.workspace), goal, run_dir, lambda _: run_pack(chosen["pack"], chosen["allowed"]),
                            protect=tuple(args.protect), allow_unsandboxed=bool(args.unsandboxed), ready=ready)
        except (GoalRefused, WorkspaceUnavailable) as exc:
            print(f"error: {exc.message}. Nothing was changed.", file=sys.stderr)
            return 2
        if done is None:
            return 2
        goal_task, outcome, changed = done.task, done.outcome, done.changes
    else:
        problem = _tools_refusal(pack, args)
        if problem:
            print(problem, file=sys.stderr)
            return 2
        if args.workspace is not None and not WORKSPACE_TOOLS & set(pack.task.tool_names):
            print(f"error: --workspace: pack '{pack.name}' uses no workspace tools. Nothing was run.", file=sys.stderr)
            return 2
        outcome = run_pack(pack, _allowed(args))
    result = outcome.result
    if not write_events(run_dir, outcome.events):
        print("note: the trace could not be saved", file=sys.stderr)
    if args.json:
        print(json.dumps({
            "status": result.status,
            "stop_reason": result.stop_reason,
            "final": result.final.model_dump() if result.final else None,
            "unverified": result.unverified.model_dump() if result.unverified else None,
            "metrics": result.metrics.model_dump() if result.metrics else None,
            "observations": [o.model_dump() for o in result.observations],
            "error": result.error.model_dump() if result.error else None,
            "run_id": run_id,
            **({"changes": changed, "discovery": goal_task.public()} if goal_task is not None else {}),
        }, ensure_ascii=False))
    else:
        if result.final:
            print(f"\nFINAL: {result.final.answer}\n  evidence: {', '.join(result.final.evidence_ids)}")
        elif result.unverified:  # never an accepted answer: shown with the claims that failed
            print(f"\nUNVERIFIED (not accepted): {result.unverified.answer}\n  failed: "
                  + "; ".join(result.unverified.unverified))
        if changed is not None:
            print(_change_report(changed, goal_task, run_id))
        print_metrics(result.metrics.model_dump() if result.metrics else None)
        print(f"artifacts: .runs/{run_id}/artifacts/" if artifact_dir.exists() else "")
        print(f"trace: .runs/{run_id}/events.jsonl (react-agent explain {run_id})")
    return 0 if result.status == "completed" else 1


def _allowed(args: argparse.Namespace) -> list[str] | None:
    return None if args.tools is None else [t.strip() for t in args.tools.split(",") if t.strip()]


def _tools_refusal(pack: Any, args: argparse.Namespace) -> str | None:
    """Why ``--tools`` cannot narrow the pack's tools (it never widens them); None when it can."""
    from agent.tools.skill import TOOL_NAME as SKILL_TOOL

    allowed = _allowed(args)
    if allowed is None:
        return None
    extra = [t for t in allowed if t not in pack.task.tool_names and not (t == SKILL_TOOL and pack.skills)]
    missing = [t for t in pack.task.required_tools if t not in allowed]
    if extra or missing:
        return (f"error: --tools: {'not tools of the pack: ' + ', '.join(extra) if extra else ''}"
                f"{'; ' if extra and missing else ''}{'the pack needs: ' + ', '.join(missing) if missing else ''}."
                " Nothing was run.")
    if args.skills and SKILL_TOOL not in allowed:
        return f"error: --tools leaves out {SKILL_TOOL}, so the skills of --skills could never be loaded. Nothing was run."
    return None


def _extended(pack: Any, args: argparse.Namespace) -> Any:
    """The pack with the operator's ``--mcp`` servers and ``--skills`` folders; None (said) when refused."""
    try:
        if args.mcp:
            from agent.tools.mcp import parse_server_option, with_servers
            pack = with_servers(pack, [parse_server_option(option) for option in args.mcp])
    except (PackError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    if args.skills:
        from agent.task.skills import SkillError, with_folders
        try:
            pack = with_folders(pack, args.skills)
        except SkillError as exc:
            print(f"error: --skills: {exc}. Nothing was run.", file=sys.stderr)
            return None
    return pack


def _goal_of(args: argparse.Namespace) -> str | None:
    words = getattr(args, "goal_words", None) or []
    flag = getattr(args, "goal", None)
    if words and flag:
        return "\0both"
    text = flag if flag is not None else " ".join(words) if words else None
    return None if text is None else text.strip()


def _goal_refusal(args: argparse.Namespace) -> str | None:
    """Why a goal's run cannot start (None: it can)."""
    from agent.coding.runner_workspace import check_folder

    goal = _goal_of(args)
    if goal == "\0both":
        return "give the goal once: as an argument or with --goal"
    if not goal:
        return "the goal is empty: say what to change"
    if args.pack is not None:
        return "--pack: a goal's run builds its own task from the folder; give a goal or a pack, not both"
    if args.workspace is None:
        return "a goal needs the folder it is about: --workspace DIR"
    return check_folder(args.workspace)


def _change_report(changed: dict[str, Any], goal_task: Any, run_id: str) -> str:
    files = changed["files"]
    if not files:
        return "changed files: none"
    lines = ["changed files: " + ", ".join(f"{f['path']} ({f['kind']})" for f in files)]
    if goal_task.tests_pass:
        lines.append("note: the tests passed before any change: no test checks what the goal asked")
    lines += ["", changed["diff"].rstrip("\n"), "", f"undo: react-agent revert {run_id}"]
    return "\n".join(lines)


def cmd_revert(args: argparse.Namespace) -> int:
    """Put back the files a goal's run changed, unless one changed since."""
    from agent.coding.changes import RevertRefused, recorded_root, revert

    if not re.fullmatch(r"[A-Za-z0-9_\-]{1,64}", args.run_id):
        print("error: RUN_ID: letters, digits, _ and - only. Nothing was changed.", file=sys.stderr)
        return 2
    run_dir = Path(args.runs_dir) / args.run_id
    try:
        root = recorded_root(run_dir)
        restored = revert(run_dir, root)
    except RevertRefused as exc:
        print(f"error: {exc.message}. Nothing was changed.", file=sys.stderr)
        return 2
    print("reverted: " + (", ".join(restored) or "(no files had changed)"))
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    """The model's explanation of a finished run, streamed as it writes."""
    from agent.core.explain import ExplainRefused, explain
    from agent.models.model_policy import ModelUnavailable

    if not re.fullmatch(r"[A-Za-z0-9_\-]{1,64}", args.run_id):
        print("error: RUN_ID: letters, digits, _ and - only. Nothing was run.", file=sys.stderr)
        return 2
    path = Path(args.runs_dir) / args.run_id / "events.jsonl"
    try:
        events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[:1000] if line.strip()]
    except (OSError, ValueError):
        print(f"error: no readable trace for run {args.run_id} in the runs folder. Nothing was run.", file=sys.stderr)
        return 2
    model = Path(args.model).expanduser() if args.model else default_model()
    if model is None:
        print("error: no local model found to explain the run with. Nothing was run.", file=sys.stderr)
        return 2
    shown = {"n": 0}

    def on_text(text: str) -> None:
        print(text[shown["n"]:], end="", flush=True)
        shown["n"] = max(shown["n"], len(text))

    try:
        from agent.models.backends import load_policy

        policy = load_policy(str(model))
        result = explain(events, policy, language=args.language, on_text=on_text)
    except ExplainRefused as exc:
        print(f"error: {exc.message}. Nothing was run.", file=sys.stderr)
        return 2
    except ModelUnavailable as exc:
        print(f"error: {exc.message}. Nothing was run.", file=sys.stderr)
        return 2
    print(result.text[shown["n"]:])
    print(f"\n[{result.label}]")
    return 0


def cmd_schemas(args: argparse.Namespace) -> int:
    from agent.tools.schemas import check_schemas, write_schemas

    if args.write:
        for path in write_schemas():
            print(f"wrote {path.relative_to(PACKAGE_ROOT)}")
        return 0
    drift = check_schemas()
    for name in drift:
        print(f"drift: schemas/{name} differs from agent/contracts.py (run: python -m agent schemas --write)")
    return 1 if drift else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent", description="ReAct Agent Local")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a task pack with a real local model")
    run.add_argument("--pack", default=None, help="task pack name or directory (default: the package itself)")
    add_model_arguments(run)
    run.add_argument("--mode", default=None, choices=["guided", "free"], help="override the pack's mode")
    run.add_argument("--tools", default=None, help="comma-separated: narrow the pack's tools to these (never widen)")
    run.add_argument("--max-steps", type=int, default=None)
    run.add_argument("--max-tool-calls", type=int, default=None)
    run.add_argument("--max-seconds", type=float, default=None)
    run.add_argument("--temperature", type=float, default=None)
    run.add_argument("--seed", type=int, default=None)
    run.add_argument("--top-p", type=float, default=None, help="nucleus mass when sampling (default 0.8)")
    run.add_argument("--top-k", type=int, default=None, help="candidates kept when sampling (default 20)")
    run.add_argument("--runs-dir", default=str(DEFAULT_RUNS_DIR))
    run.add_argument("--json", action="store_true", help="print one JSON object instead of the trace")
    run.add_argument("--mcp", action="append", default=[], metavar="NAME=COMMAND",
                     help="an MCP server whose tools (NAME.tool) join the run; replaces the pack's server NAME")
    run.add_argument("--skills", action="append", default=[], metavar="DIR",
                     help="a folder of skills (<name>/SKILL.md) the model may load, besides the pack's; "
                          "a skill never adds a tool")
    add_workspace_arguments(run)
    run.add_argument("goal_words", nargs="*", metavar="GOAL",
                     help="a goal in words on the --workspace folder (e.g. \"the importer loses quotes; fix it\")")
    run.add_argument("--goal", default=None, help="the goal, as a flag instead of the argument")
    run.add_argument("--protect", action="append", default=[], metavar="PATH",
                     help="a workspace-relative file or folder a goal's run must not change (besides the tests)")
    run.set_defaults(func=cmd_run)
    revert = sub.add_parser("revert", help="put back the files a goal's run changed (refused if they changed since)")
    revert.add_argument("run_id", metavar="RUN_ID")
    revert.add_argument("--runs-dir", default=str(DEFAULT_RUNS_DIR))
    revert.set_defaults(func=cmd_revert)
    explain = sub.add_parser("explain", help="the local model explains a finished run (its words, not facts)")
    explain.add_argument("run_id", metavar="RUN_ID")
    explain.add_argument("--runs-dir", default=str(DEFAULT_RUNS_DIR))
    explain.add_argument("--model", default=None, help="GGUF file or model directory (default: the downloaded 1.5B)")
    explain.add_argument("--language", default="en", choices=["en", "zh"])
    explain.set_defaults(func=cmd_explain)
    schemas = sub.add_parser("schemas", help="check (default) or --write schemas/*.json from contracts.py")
    schemas.add_argument("--write", action="store_true")
    schemas.set_defaults(func=cmd_schemas)
    from agent.cli import eval as evaluation
    evaluate = sub.add_parser("eval", help="run task packs x seeds with one resident model and write a report")
    evaluation.add_arguments(evaluate)
    evaluate.set_defaults(func=evaluation.main)
    from agent.cli import chat as sessions  # conversations: turns of a session (agent/sessions/)
    chat = sub.add_parser("chat", help="a conversation: user messages from stdin, one turn each, kept as a session")
    sessions.add_chat_arguments(chat)
    chat.set_defaults(func=sessions.chat_main)
    listing = sub.add_parser("sessions", help="list the chat sessions, newest first")
    sessions.add_list_arguments(listing)
    listing.set_defaults(func=sessions.list_main)
    from agent.tools import mcp_server
    mcp = sub.add_parser("mcp", help="the package's tools as an MCP server")
    serve = mcp.add_subparsers(dest="mcp_command", required=True).add_parser(
        "serve", help="serve knowledge_search, calculator, plot and lookup_fact over stdio")
    mcp_server.add_arguments(serve)
    serve.set_defaults(func=mcp_server.main)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:  # pydantic budget errors and the like: operator input
        print(f"error: {exc}", file=sys.stderr)
        return 2
