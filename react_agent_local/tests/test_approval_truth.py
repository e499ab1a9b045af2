"""Approvals tell the truth: what the operator approves is what runs.

The attacks of issue 52: a long command whose dangerous part comes after 500 harmless characters, a
path hidden as ``<path>``, ANSI escapes that redraw the terminal's y/N prompt, bidi overrides and
zero-width characters that reorder or hide text. Checked on the real terminal approver (a pty as its
stdin, a StringIO as the terminal it writes), on the event a run's trace keeps, and through the real
runner (scripted test policy, real sandbox, the operator's folder) on what the operator's card reads.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import threading
import time
import unicodedata
from pathlib import Path
from typing import Any

import pytest

import agent.task.packs
from agent.coding.approvals import WORKSPACE_MARK, ApprovalRequest, ask_operator, terminal_approver, visible
from agent.cli.event_lines import format_event
from agent.shell_risk import grade_command
from agent.contracts.trace import redact
from server_support import answer_approval, make_client, pending_approvals, wait_for, wait_terminal
from workspace_support import FIXTEST_PACK, fixtest_script

HARMLESS = "\n".join(f"echo step {n} of the dry run: nothing is changed" for n in range(16))  # over 500 characters
WIPE = "rm -rf ./*"
#: cursor up, erase the line, carriage return: on a raw terminal the prompt then shows the lie after it
REDRAW = "\x1b[1A\x1b[2K\r"
LIE = "read_only: ls -la src  allow? [y/N]"
#: one of each kind that must never reach the operator raw
HIDDEN = ["\x00", "\x07", "\x08", "\t", "\r", "\x1b", "\x7f", "\x85", "\x9b", "\u200b", "\u200c", "\u200d", "\u200e",
          "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u2028",
          "\u2029", "\u2060", "\ufeff", "\u061c"]
RAW = re.compile("[" + "".join(re.escape(c) for c in HIDDEN) + "]")
ATTACK = HARMLESS + "\n" + WIPE + REDRAW + LIE + " " + "".join(HIDDEN).replace("\x00", "")


def escaped(char: str) -> str:
    """How ``visible`` must write one hidden character."""
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


# ---------------------------------------------------------------- the terminal prompt


def ask_terminal(command: str, answer: bytes, workspace: str | None = None) -> tuple[bool, str]:
    """The real terminal approver, its stdin a pty (a terminal) fed ``answer``, its output captured."""
    master, slave = os.openpty()
    try:
        with open(slave, "r", closefd=False) as stdin:
            screen = io.StringIO()
            approver = terminal_approver(stdin=stdin, stdout=screen)
            assert approver is not None
            os.write(master, answer)
            request = ApprovalRequest(tool="bash", command=command, level="destructive",
                                      reason="rm -rf ./* deletes\x1b[2K files", deadline=time.monotonic() + 10,
                                      workspace=workspace)
            return approver(request), screen.getvalue()
    finally:
        os.close(master)
        os.close(slave)


def test_the_terminal_prompt_shows_the_whole_command_with_every_escape_visible() -> None:
    approved, screen = ask_terminal(ATTACK, b"n\n")
    assert approved is False
    assert not RAW.search(screen), [hex(ord(c)) for c in RAW.findall(screen)]
    assert WIPE in screen and LIE in screen  # the lie is there, but after the escapes, on the rm line
    wipe_line = next(line for line in screen.splitlines() if line.startswith("  | " + WIPE))
    assert wipe_line.index(WIPE) < wipe_line.index(LIE) and "\\x1b[1A\\x1b[2K\\x0d" in wipe_line
    for line in HARMLESS.splitlines():
        assert f"  | {line}" in screen.splitlines()  # every line, each marked as part of the command
    for char in HIDDEN[1:]:
        assert escaped(char) in screen, repr(char)
    assert "deletes\\x1b[2K files" in screen  # the grade's reason, escaped the same way
    assert "17 lines" in screen and screen.rstrip().endswith("s)")  # the prompt is the last thing written
    assert ask_terminal("ls", b"y\n")[0] is True


def test_the_terminal_prompt_shows_the_workspace_as_a_mark_and_outside_paths_as_written(tmp_path: Path) -> None:
    root = str(tmp_path / "ws")
    _, screen = ask_terminal(f"cat {root}/src/a.py {root}2/x /etc/shadow; cd {root}", b"n\n", workspace=root)
    assert f"cat {WORKSPACE_MARK}/src/a.py {root}2/x /etc/shadow; cd {WORKSPACE_MARK}" in screen
    assert f"{root}/" not in screen


def test_visible_escapes_every_control_format_and_separator_character() -> None:
    for code in list(range(0x20)) + list(range(0x7f, 0xa0)) + [0x200b, 0x200e, 0x202e, 0x2066, 0x2069, 0xfeff, 0xe000]:
        char = chr(code)
        if char == "\n":
            assert visible(char) == "\n"
            continue
        shown = visible("a" + char + "b")
        assert shown == "a" + escaped(char) + "b", (hex(code), shown)
        assert all(unicodedata.category(c) not in ("Cc", "Cf") for c in shown)
    assert visible("\U000e0041") == "\\U000e0041"  # a tag character (invisible) above the BMP
    assert visible("ls -la 日本語 ✓") == "ls -la 日本語 ✓"


# ---------------------------------------------------------------- the event in the trace


def test_the_event_keeps_the_whole_command_up_to_the_bash_tools_limit_and_names_no_id() -> None:
    long_command = ("echo " + "x" * 70 + "\n") * 52 + WIPE  # 3,982 characters: the bash tool takes up to 4,000
    assert len(long_command) <= 4000
    events: list[dict[str, Any]] = []
    request = ApprovalRequest(tool="bash", command=long_command, level="destructive", reason="wipe",
                              deadline=time.monotonic() + 0.3)
    ask_operator(lambda r: False, request, emit=lambda kind, **payload: events.append(redact({"type": kind, **payload})))
    [event] = events
    assert event["command"] == long_command and event["command"].endswith(WIPE)
    assert (event["command_chars"], event["command_lines"]) == (len(long_command), 53)
    assert "approval_id" not in event and request.id not in json.dumps(event)
    assert request.operator_view()["approval_id"] == request.id


def test_every_terminal_line_of_an_event_shows_escapes() -> None:
    line = format_event({"type": "approval.decided", "step": 1, "elapsed_ms": 10, "level": "unknown",
                         "reason": "eval\x1b[2K\rread_only", "decision": "refuse", "by": "operator:denied",
                         "channel": "terminal"})
    assert line is not None and "\x1b" not in line and "\r" not in line
    assert "eval\\x1b[2K\\x0dread_only" in line and "via terminal" in line
    action = format_event({"type": "decision.valid", "step": 1, "elapsed_ms": 10, "decision_summary": "s\u202e",
                           "decision": {"type": "action", "tool": "bash", "arguments": {"command": "ls \u202etxt.hsab"}}})
    assert action is not None and "\u202e" not in action and action.count("\\u202e") == 2


# ---------------------------------------------------------------- through the runner


@pytest.fixture
def operator_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """The runner's packs plus ``fixtest_operator`` (the shipping pack without its template), whose
    workspace is the operator's folder made here, so the model's command can name its absolute path."""
    packs = tmp_path / "packs"
    packs.mkdir()
    for name in (FIXTEST_PACK, "fixtest_operator"):
        shutil.copytree(agent.task.packs.PACKS_DIR / FIXTEST_PACK, packs / name)
    task_file = packs / "fixtest_operator" / "task.json"
    task = json.loads(task_file.read_text())
    task["id"], task["workspace"]["template"] = "fixtest_operator", None
    task_file.write_text(json.dumps(task))
    folder = tmp_path / "operator-repo"
    shutil.copytree(packs / FIXTEST_PACK / "workspace", folder)
    shutil.rmtree(packs / "fixtest_operator" / "workspace")
    monkeypatch.setattr(agent.task.packs, "PACKS_DIR", packs)
    return "fixtest_operator", folder


def test_the_runner_shows_the_operator_the_whole_command_its_paths_and_the_reason(tmp_path, operator_folder) -> None:
    name, folder = operator_folder
    command = f"{HARMLESS}\ncat {folder}/shop/shipping.py /etc/shadow\n{WIPE}{REDRAW}{LIE}"
    script = fixtest_script(name)
    first_bash = next(i for i, out in enumerate(script) if isinstance(out, str) and '"command"' in out)
    script[first_bash] = json.dumps({"command": command})
    with make_client(tmp_path / "runs", script, workspace=folder) as client:
        run_id = client.post("/agent/runs", json={"model_path": "scripted", "pack": name, "approval": "always_ask",
                                                   "budgets": {"decision_max_new_tokens": 2048}}).json()["id"]
        view = wait_for(client, run_id, lambda v: any(e["type"] == "approval.requested" for e in v["events"])
                        or v["terminal"], timeout=60)
        event = next(e for e in view["events"] if e["type"] == "approval.requested")
        [question] = pending_approvals(client, run_id)
        shown = command.replace(str(folder), WORKSPACE_MARK)
        # The operator's card: the whole command, the workspace as {workspace}, the outside path real.
        assert question["command"] == shown and question["command_chars"] == len(shown)
        assert f"cat {WORKSPACE_MARK}/shop/shipping.py /etc/shadow" in question["command"] and WIPE in question["command"]
        # The grade's reason, as the grader gave it, beside the command.
        grade = grade_command(command, workspace=str(folder))
        assert question["level"] == grade.level and question["reason"] == grade.reason.replace(str(folder), WORKSPACE_MARK)
        # The trace, readable by any local process: whole, but the path outside the workspace (which
        # may name a user) stays redacted there, as in every event; the workspace path stays readable.
        assert WIPE + REDRAW + LIE in event["command"] and HARMLESS in event["command"]
        assert f"cat {WORKSPACE_MARK}/shop/shipping.py <path>" in event["command"]
        assert str(folder) not in json.dumps(view) and "/etc/shadow" not in json.dumps(view)
        assert answer_approval(client, run_id, question["approval_id"], "deny").status_code == 200
        view = wait_for(client, run_id, lambda v: any(e["type"] == "approval.decided" for e in v["events"]))
        decided = next(e for e in view["events"] if e["type"] == "approval.decided")
        assert WIPE in decided["command"] and decided["decision"] == "refuse" and decided["channel"] == "page"
        client.post(f"/agent/runs/{run_id}/cancel", json={})
        wait_terminal(client, run_id, timeout=60)
    assert (folder / "shop" / "shipping.py").exists()  # denied: nothing was wiped


def test_a_desk_question_is_listed_before_its_event_is_written() -> None:
    """The page reads the question as soon as it sees the event: the desk learns of it first."""
    from agent.coding.approvals import ApprovalDesk

    desk, cancel, seen = ApprovalDesk(), threading.Event(), []
    approver = desk.approver("run-1", cancel)
    request = ApprovalRequest(tool="bash", command="ls", level="unknown", reason="r", deadline=time.monotonic() + 0.3)
    ask_operator(approver, request, cancel, emit=lambda kind, **payload: seen.append(desk.pending("run-1")))
    assert [[q["approval_id"] for q in listed] for listed in seen] == [[request.id]]
    assert desk.pending("run-1") == [] and desk.pending("run-2") == []
