"""``react-agent chat`` and ``react-agent sessions``: conversations from the terminal.

``chat`` reads user messages from stdin, one per line (so it can be scripted: ``printf 'q1\\nq2\\n' |
react-agent chat``), runs each as a turn of a session (``turns.Conversation``) with a real model,
prints the turn's steps and its answer (or, with ``--json``, one JSON object per turn), and ends
at the end of input. ``--resume ID`` continues a session (a unique prefix of the id will do);
without it a new one is created and its id printed first. Ctrl-C cancels the turn in progress (it
is recorded as cancelled); a second Ctrl-C leaves. ``sessions`` lists the sessions, newest first.

Exit status: 0 when every turn completed, 1 when one did not, 2 when nothing could be run.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

from ..event_lines import format_event
from ..model_choice import ModelChoiceError, add_model_arguments, load_spec, model_spec
from ..packs import PackError, load_pack
from .store import DEFAULT_SESSIONS_DIR, SessionError, SessionStore


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

    from ..contracts import Budgets, Sampling
    from .turns import Conversation

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
    try:
        spec = model_spec(args)
    except ModelChoiceError as exc:
        return refuse(str(exc))
    store = SessionStore(args.sessions_dir)
    try:
        session = store.open(store.resolve(args.resume)) if args.resume else None
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
            session = store.create(pack=pack.name)
    except SessionError as exc:
        return refuse(exc.message)

    cancel = threading.Event()
    previous = _on_interrupt(cancel)
    completed = True
    try:
        with session:
            print(f"session {session.id}" + (" (resumed)" if args.resume else ""), flush=True)
            chat = Conversation(session, pack, lambda: load_spec(spec), budgets=budgets, sampling=sampling,
                                mode=args.mode)

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
                    turn = chat.run_turn(message, sink=show, cancel=cancel)
                except (ValueError, SessionError) as exc:
                    print(f"error: {getattr(exc, 'message', exc)}", file=sys.stderr, flush=True)
                    completed = False
                    continue
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
