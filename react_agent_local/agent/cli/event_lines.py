"""One trace event as a line a person reads in the terminal (``format_event``): the steps that
``react-agent run`` and ``react-agent chat`` print as a run goes (``cli.py``, ``sessions/command.py``).
An event nobody shows is None. Text a command or a model wrote is printed with its control and
bidi characters as visible escapes (``approvals.visible``): no event can redraw the terminal.
"""

from __future__ import annotations

import json
from typing import Any

from agent.coding.approvals import visible


def _short(value: Any, limit: int = 140) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_event(e: dict[str, Any]) -> str | None:
    """The line of one event, every control and bidi character in it a visible escape."""
    line = _line(e)
    return visible(line) if line is not None else None


def _line(e: dict[str, Any]) -> str | None:
    t, step = e["type"], e.get("step", 0)
    head = f"[{e['elapsed_ms'] / 1000:7.2f}s] step {step:>2} "
    if t == "run.started":
        return f"run started: task {e['task_id']} ({e['mode']} mode), required tools {', '.join(e['required_tools'])}"
    if t == "model.load.started":
        return "loading model…"
    if t == "model.load.completed":
        m = e["model"]
        return f"model loaded: {m['name']} ({m['backend']}, {m['device']}) in {e['load_ms'] / 1000:.1f}s"
    if t in ("model.completed", "model.repair.completed"):
        u = e["usage"]
        kind = "repair" if "repair" in t else "model"
        return (head + f"{kind}: {u['input_tokens']} prompt tok ({u.get('cached_tokens', 0)} cached"
                + (f", {u['restored_tokens']} restored from disk" if u.get("restored_tokens") else "") + "), "
                f"{u['output_tokens']} out tok" + (f" ({u['forced_tokens']} forced)" if u.get("forced_tokens") else "")
                + (f" ({u['drafted_tokens']} from a draft)" if u.get("drafted_tokens") else "")
                + f", {e['latency_ms'] / 1000:.2f}s, finish={e['finish_reason']}")
    if t in ("decision.valid", "decision.repaired"):
        d = e["decision"]
        what = (f"action {d['tool']} {_short(d['arguments'])}" if d["type"] == "action"
                else f"final citing {', '.join(d['evidence_ids'])}")
        return head + f"decision{' (repaired)' if t == 'decision.repaired' else ''}: {what}\n" \
                      f"{'':>19}summary: {e['decision_summary']}"
    if t == "decision.invalid":
        return head + f"invalid decision ({e['code']}): {e['error']}"
    if t == "final.validated":
        return head + ("final accepted" if e["accepted"] else f"final refused: {e['message']}")
    if t == "tool.rejected":
        return head + f"arguments rejected: {e['observation']['error']['message']}"
    if t in ("tool.retry", "tool.failed"):
        return head + f"{t} attempt {e['attempt']}: {e['error']['code']}: {e['error']['message']}"
    if t == "tool.observation":
        o = e["observation"]
        body = (o.get("result") or {}).get("summary") or _short(
            {k: v for k, v in (o.get("result") or {}).items() if k not in ("citations",)}) if o["ok"] else o["error"]
        return head + f"observation {o['id']} ({'ok' if o['ok'] else 'FAILED'}): {_short(body)}"
    if t.startswith("guard."):
        return head + f"GUARD {t}: {_short({k: v for k, v in e.items() if k not in ('seq', 'type', 'step', 'attempt', 'phase', 'elapsed_ms')})}"
    if t == "mcp.tools.pinned":
        return "MCP tools pinned: " + ", ".join(f"{tool['name']} (sha256 {tool['sha256'][:12]})"
                                                for server in e["servers"] for tool in server["tools"])
    if t == "workspace.ready":
        return (f"workspace: {e['files']} files, sandbox {e['sandbox']}"
                + (f", tests {e['test_command']}" if e.get("test_command") else ""))
    if t == "fix.trial" and e.get("refused"):
        return head + f"fix trial {e['trial']} of {e['function']} refused, {_short(e['summary'], 100)}"
    if t == "fix.trial":
        outcome = "the tests passed" if e["passed"] else f"failed ({_short(e['summary'], 100)})"
        cut = " (the fix as written cut where it stopped parsing)" if e.get("written") else ""
        return head + f"fix trial {e['trial']} of {e['function']} on a scratch copy{cut}: {outcome}, {e['duration_ms'] / 1000:.2f}s"
    if t == "version.trial" and e.get("refused"):
        return head + f"version {e['trial']} of {e['function']} not tried: {_short(e['summary'], 100)}"
    if t == "version.trial":
        outcome = "the tests passed" if e["passed"] else f"failed ({_short(e['summary'], 100)})"
        return (head + f"version {e['trial']} of {e['function']} ({e.get('lines', '?')} lines) on a scratch copy: "
                f"{outcome}, {e['duration_ms'] / 1000:.2f}s")
    if t == "approval.decided":
        channel = f" via {e['channel']}" if e.get("channel") else ""
        return head + f"bash graded {e['level']} ({_short(e['reason'], 80)}): {e['decision']} ({e['by']}{channel})"
    if t == "run.finished":
        return f"run finished: {e['status']}/{e['stop_reason']}" + (f" ({e['error']['message']})" if e.get("error") else "")
    return None
