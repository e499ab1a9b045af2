"""``react-agent chat`` and ``react-agent sessions``: conversations from the terminal.

``chat`` reads user messages from stdin, one per line (so it can be scripted: ``printf 'q1\\nq2\\n' |
react-agent chat``), runs each as a turn of a session (``turns.Conversation``) with a real model,
prints the turn's steps and its answer (or, with ``--json``, one JSON object per turn), and ends
at the end of input. ``--resume ID`` continues a session (a unique prefix of the id will do);
without it a new one is created and its id printed first. Ctrl-C cancels the turn in progress (it
is recorded as cancelled); a second Ctrl-C leaves. ``sessions`` lists the sessions, newest first.

With ``--workspace DIR`` each message is a goal on that folder (``agent/coding/``: the tests found and
run, the code they point at read, the change verified by them), run as a turn of the session, so a
follow-up ("now make the tie rule configurable") sees the earlier turns; each turn prints its diff.
A session remembers its model and its folder (``SessionStore.remember``): ``--resume ID`` alone
continues with both.

Exit status: 0 when every turn completed, 1 when one did not, 2 when nothing could be run.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from agent.cli.event_lines import format_event
from agent.models.model_choice import ModelChoiceError, add_model_arguments, load_spec, model_spec
from agent.task.packs import PackError, load_pack
from agent.sessions.store import DEFAULT_SESSIONS_DIR, SessionError, SessionStore


def add_chat_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pack", default=None, help="task pack name or directory (default: the package itself; "
                                                     "a resumed session keeps its own)")
    parser.add_argument("--resume", default=None, metavar="ID",
                        help="continue this session (its id or a unique prefix)")
    add_model_arguments(parser)
    parser.add_argument("--sessions-dir", default=str(DEFAULT_SESSIONS_DIR), metavar="DIR")
    parser.add_argument("--mode", default=None, choices=["guided", "free"], help="override the pack's mode")
    parser.add_argument("--max-steps", type=int, default=None, help="per turn")
    parser.add_argument("--max-seconds", type=float, default=None, help="per turn")
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="one JSON object per turn instead of the steps")
    parser.add_argument("--workspace", default=None, metavar="DIR",
                        help="each message is a goal on this folder (a resumed session keeps its own)")
    parser.add_argument("--protect", action="append", default=[], metavar="PATH",
                        help="with --workspace: a file or folder no turn may change (besides the tests)")
    from agent.cli.workspace_flags import add_workspace_arguments

    add_workspace_arguments(parser, directory=False)


def add_list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions-dir", default=str(DEFAULT_SESSIONS_DIR), metavar="DIR")
    parser.add_argument("--json", action="store_true", help="one JSON array of the list entries")


def list_main(args: argparse.Namespace) -> int:
    store = SessionStore(args.sessions_dir)
    entries = store.list()
    if args.json:
        print(json.dumps(entries, ensure_ascii=False))
        return 0
    if not entries:
        print("no sessions")
        return 0
    for e in entries:
        print(f"{e['id']}  {e['created_at']}  {e['turns']:>3} turns  {e['bytes']:>9} B  {e['last_message']}")
    return 0


def chat_main(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from agent.contracts.budgets import Budgets, Sampling
    from agent.sessions.turns import Conversation

    def refuse(message: str) -> int:
        print(f"error: {message}. Nothing was run.", file=sys.stderr)
        return 2

    try:
        budgets = Budgets(**{k: v for k, v in {"max_steps": args.max_steps, "max_seconds": args.max_seconds}.items()
                             if v is not None})
        sampling = Sampling(**{k: v for k, v in {"temperature": args.temperature, "seed": args.seed}.items()
                               if v is not None})
    except ValidationError as exc:
        problem = exc.errors()[0]
        return refuse("--" + "-".join(str(p) for p in problem["loc"]).replace("_", "-") + ": " + problem["msg"])
    store = SessionStore(args.sessions_dir)
    try:
        resumed = store.resolve(args.resume) if args.resume else None
    except SessionError as exc:
        return refuse(exc.message)
    kept = (store.remembered(resumed) or {}) if resumed else {}
    try:
        spec = _remembered_spec(kept) if resumed and not _names_a_model(args) else None
        spec = spec or model_spec(args)
    except ModelChoiceError as exc:
        return refuse(str(exc))
    folder = args.workspace or kept.get("workspace")
    if folder is not None:
        from agent.coding.runner_workspace import check_folder

        problem = check_folder(folder)
        if problem:
            return refuse(problem)
        if args.pack is not None:
            return refuse("--pack: a workspace chat builds each turn's task from the folder; give one or the other")
    try:
        session = store.open(resumed) if resumed else None
        pack_name = session.log.meta.get("pack") if session is not None else None
        try:
            pack = load_pack(args.pack or pack_name)
        except PackError as exc:
            if session is not None:
                session.close()
            return refuse(str(exc))
        if session is not None and pack_name and pack.name != pack_name:
            session.close()
            return refuse(f"--pack: session {session.id} belongs to pack '{pack_name}'")
        if session is None:
            session = store.create(pack=pack.name, workspace_chat=folder is not None)
        store.remember(session.id, model=spec.model_dump(mode="json"),
                       **({"workspace": str(Path(folder).expanduser().resolve())} if folder else {}))
    except SessionError as exc:
        return refuse(exc.message)

    cancel = threading.Event()
    previous = _on_interrupt(cancel)
    completed = True
    try:
        with session:
            print(f"session {session.id}" + (" (resumed)" if args.resume else ""), flush=True)
            loaded: dict[str, Any] = {}

            def policy() -> Any:  # loaded once, for every turn (a workspace chat makes one Conversation a turn)
                if "policy" not in loaded:
                    loaded["policy"] = load_spec(spec)
                return loaded["policy"]

            chat = Conversation(session, pack, policy, budgets=budgets, sampling=sampling, mode=args.mode)

            def show(event: dict[str, Any]) -> None:
                if args.json:
                    return
                if event.get("type") == "session.compacted":
                    print(_compaction_line(event), flush=True)
                    return
                line = format_event(event)
                if line:
                    print(line, flush=True)

            for line in sys.stdin:
                message = line.strip()
                if not message:
                    continue
                cancel.clear()
                if not args.json:
                    print(f"\n> {message}", flush=True)
                try:
                    if folder is not None:
                        turn, report = _goal_turn(session, Path(folder), message, args, policy, budgets, sampling,
                                                  show, cancel)
                        if turn is None:
                            completed = False
                            continue
                    else:
                        turn, report = chat.run_turn(message, sink=show, cancel=cancel), None
                except (ValueError, SessionError) as exc:
                    print(f"error: {getattr(exc, 'message', exc)}", file=sys.stderr, flush=True)
                    completed = False
                    continue
                if report and not args.json:
                    print(report, flush=True)
                result = turn.result
                completed = completed and result.status == "completed"
                if args.json:
                    print(json.dumps({"session": session.id, "turn": turn.turn,
                                      "question": "follow_up" if turn.follow_up else "pack", "status": result.status,
                                      "stop_reason": result.stop_reason,
                                      "final": result.final.model_dump() if result.final else None,
                                      "observation_ids": turn.observation_ids,
                                      "error": result.error.model_dump() if result.error else None,
                                      "compaction": turn.compaction}, ensure_ascii=False), flush=True)
                elif result.final:
                    print(f"ANSWER (turn {turn.turn}): {result.final.answer}\n"
                          f"  evidence: {', '.join(result.final.evidence_ids)}", flush=True)
                else:
                    print(f"turn {turn.turn} ended without an answer: {result.status}/{result.stop_reason}"
                          + (f" ({result.error.message})" if result.error else ""), flush=True)
            if not args.json:
                print(f"\nsession {session.id}: continue it with react-agent chat --resume {session.id}")
    except KeyboardInterrupt:
        print(f"\ninterrupted; continue with react-agent chat --resume {session.id}", file=sys.stderr)
        completed = False
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return 0 if completed else 1


def _names_a_model(args: argparse.Namespace) -> bool:
    return bool(args.model or args.served or args.base_url or args.model_name)


def _remembered_spec(kept: dict[str, Any]) -> Any:
    """The model a resumed session was chatting with (``SessionStore.remember``), None when none."""
    from pydantic import TypeAdapter, ValidationError

    from agent.models.providers import ModelSpec

    try:
        return TypeAdapter(ModelSpec).validate_python(kept["model"]) if isinstance(kept.get("model"), dict) else None
    except ValidationError:
        return None


def _goal_turn(session: Any, folder: Path, message: str, args: argparse.Namespace, policy: Any, budgets: Any,
               sampling: Any, show: Any, cancel: threading.Event) -> tuple[Any, str | None]:
    """One turn of a workspace chat: the message is a goal on the folder (``coding.goal_run``), run as a
    turn of the session (its earlier turns' evidence carried); (turn, the report of its changes)."""
    from agent.coding.approvals import terminal_approver
    from agent.coding.goal_run import run_goal
    from agent.coding.goal_task import GoalRefused
    from agent.coding.workspace import WorkspaceUnavailable
    from agent.cli.workspace_flags import workspace_options
    from agent.sessions.turns import Conversation

    args.workspace = str(folder)
    options = workspace_options(args, terminal_approver())
    run_dir = session.store.artifact_dir(session.id) / f"goal-{session.log.next_turn()}"

    def run_pack(pack: Any) -> Any:
        return Conversation(session, pack, policy, budgets=budgets, sampling=sampling, mode=args.mode,
                            workspace=options).run_turn(pack.task.goal, sink=show, cancel=cancel)

    def ready(task: Any) -> bool:
        if not args.json:
            print(task.lines(), flush=True)
        return True

    try:
        done = run_goal(folder, message, run_dir, run_pack, protect=tuple(args.protect),
                        allow_unsandboxed=bool(args.unsandboxed), ready=ready)
    except (GoalRefused, WorkspaceUnavailable) as exc:
        print(f"error: {exc.message}. Nothing was changed.", file=sys.stderr, flush=True)
        return None, None
    assert done is not None
    files = done.changes["files"]
    if not files:
        return done.outcome, "changed files: none"
    listed = ", ".join(f"{f['path']} ({f['kind']})" for f in files)
    return done.outcome, f"changed files: {listed}\n{done.changes['diff'].rstrip()}"


def _compaction_line(event: dict[str, Any]) -> str:
    if event.get("method") == "failed":
        return f"conversation not compacted ({event.get('fallback_reason')}); the turn goes on"
    why = f", the summary was not used: {event['fallback_reason']}" if event.get("fallback_reason") else ""
    return (f"conversation compacted ({event['method']}{why}): {event['messages_before']} -> "
            f"{event['messages_after']} messages, {event['tokens_before']} -> {event['tokens_after']} tokens")


def _on_interrupt(cancel: threading.Event) -> Any:
    """Ctrl-C cancels the turn in progress; a second one while it is cancelled leaves."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: Any) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()

    return signal.signal(signal.SIGINT, handler)
