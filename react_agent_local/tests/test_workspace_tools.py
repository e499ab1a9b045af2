"""The workspace tools against the real sandbox: read_file, write_file, edit_file, glob, grep and bash,
their errors, path attacks (``..``, absolute paths, planted links, a linked parent folder,
/proc/self/root, hard links, a file swapped for a link between check and use), output bounds, risk
grading and approvals, timeout and cancel."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agent.coding.approvals import ApprovalRequest, ask_operator, read_answer
from agent.tools import WORKSPACE_TOOLS, ArgumentError, ToolContext, ToolError, catalog
from agent.coding.tools import files as file_tools
from agent.coding.tools import workspace_ops as ops
from agent.coding.tools.shell import HEAD_CHARS, TAIL_CHARS, head_tail
from agent.coding.workspace import Workspace, WorkspaceUnavailable, copy_template, sandbox_for

REGISTRY = catalog()
APP = '''def add(a, b):
    return a - b


def sub(a, b):
    return a - b
'''
TEST = '''from src.app import add


def test_add():
    assert add(2, 3) == 5
'''
SECRET = "outside secret\n"


@pytest.fixture
def repo(tmp_path):
    root, outside = tmp_path / "repo", tmp_path / "outside"
    for rel, text in {"src/app.py": APP, "src/__init__.py": "", "tests/test_app.py": TEST,
                      "README.md": "# demo\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    return root, outside


def context(root: Path, tmp_path: Path, *, approval=None, approver=None, approval_seconds=5.0,
            events: list | None = None, test_command="python -m pytest -q", deadline=None) -> ToolContext:
    from agent.shell_risk import ApprovalPolicy

    workspace = Workspace(root=root.resolve(), protected=("tests",), test_command=test_command)
    workspace = replace(workspace, baseline=workspace.protected_hashes())
    sink = events if events is not None else []
    return ToolContext(knowledge_dir=tmp_path, artifact_dir=tmp_path / "artifacts", workspace=workspace,
                       sandbox=sandbox_for(workspace), approval=approval or ApprovalPolicy(mode="ask_on_risk"),
                       approver=approver, approval_seconds=approval_seconds, deadline=deadline,
                       emit=lambda kind, **data: sink.append({"type": kind, **data}))


@pytest.fixture
def ctx(repo, tmp_path):
    """An operator who approves whatever is asked (the approval tests make their own contexts)."""
    return context(repo[0], tmp_path, approver=lambda request: True)


def call(ctx: ToolContext, tool: str, cancel: threading.Event | None = None, **arguments):
    spec = REGISTRY.get(tool)
    return spec.execute(ctx, spec.validate(arguments), cancel or threading.Event())


def refused(ctx: ToolContext, tool: str, **arguments) -> ToolError:
    with pytest.raises(ToolError) as info:
        call(ctx, tool, **arguments)
    return info.value


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink()}


# -- the registry ----------------------------------------------------------------------------------

def test_workspace_tools_are_in_the_one_registry_with_schemas():
    described = {t["name"]: t for t in REGISTRY.describe()}
    assert WORKSPACE_TOOLS <= set(described)
    assert WORKSPACE_TOOLS == {t.name for t in catalog() if t.workspace}  # the name list and the field agree
    assert set(described["edit_file"]["arguments_schema"]["required"]) == {"path", "old", "new"}
    assert described["bash"]["arguments_schema"]["required"] == ["command"]
    committed = json.loads((Path(__file__).resolve().parent.parent / "schemas" / "tool_registry.json").read_text())
    assert {t["name"] for t in committed["tools"]} == set(described)


# -- read_file -------------------------------------------------------------------------------------

def test_read_file_numbers_lines_and_reads_ranges(ctx):
    whole = call(ctx, "read_file", path="src/app.py")
    lines = APP.splitlines()
    assert (whole["start_line"], whole["end_line"], whole["total_lines"], whole["truncated"]) == (1, len(lines), len(lines), False)
    assert whole["text"].splitlines()[1] == f"{2:>4}| {lines[1]}"
    part = call(ctx, "read_file", path="./src//app.py", start_line=5, end_line=6)
    assert part["path"] == "src/app.py" and part["text"] == "\n".join(f"{n:>4}| {lines[n - 1]}" for n in (5, 6))
    assert "src/app.py lines 5-6 of 6" in REGISTRY.get("read_file").render(part)
    assert refused(ctx, "read_file", path="src/app.py", start_line=99).code == "bad_range"


def test_read_file_caps_what_it_shows_and_says_where_to_go_on(ctx, repo):
    (repo[0] / "big.txt").write_text("".join(f"line {i}\n" for i in range(ops.MAX_SHOWN_LINES + 50)))
    first = call(ctx, "read_file", path="big.txt")
    assert first["truncated"] and first["end_line"] == ops.MAX_SHOWN_LINES
    assert f"start_line={ops.MAX_SHOWN_LINES + 1}" in REGISTRY.get("read_file").render(first)
    rest = call(ctx, "read_file", path="big.txt", start_line=first["end_line"] + 1)
    assert rest["end_line"] == ops.MAX_SHOWN_LINES + 50 and not rest["truncated"]


def test_read_file_refuses_binary_large_missing_and_folders(ctx, repo):
    (repo[0] / "blob.bin").write_bytes(b"\x00\x01\x02" * 10)
    (repo[0] / "huge.txt").write_bytes(b"a" * (ops.MAX_READ_FILE_BYTES + 1))
    (repo[0] / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    assert refused(ctx, "read_file", path="blob.bin").code == "binary_file"
    assert refused(ctx, "read_file", path="latin1.txt").code == "binary_file"
    assert refused(ctx, "read_file", path="huge.txt").code == "file_too_large"
    assert refused(ctx, "read_file", path="nope.py").code == "not_found"
    assert refused(ctx, "read_file", path="src").code == "is_a_directory"
    os.mkfifo(repo[0] / "pipe")
    assert refused(ctx, "read_file", path="pipe").code == "not_a_file"  # never blocks on a FIFO


# -- write_file ------------------------------------------------------------------------------------

def test_write_file_makes_folders_and_replaces_files(ctx, repo):
    made = call(ctx, "write_file", path="pkg/sub/new.py", content="x = 1\ny = 2\n")
    assert made == {"path": "pkg/sub/new.py", "bytes": 12, "lines": 2, "created": True}
    assert (repo[0] / "pkg/sub/new.py").read_text() == "x = 1\ny = 2\n"
    os.chmod(repo[0] / "src/app.py", 0o640)
    again = call(ctx, "write_file", path="src/app.py", content="pass\n")
    assert again["created"] is False and (repo[0] / "src/app.py").read_text() == "pass\n"
    assert (os.stat(repo[0] / "src/app.py").st_mode & 0o777) == 0o640  # the file keeps its mode
    assert not [p for p in (repo[0] / "src").iterdir() if p.name.endswith(".tmp")]  # no temporary file left


def test_write_and_edit_refuse_the_tasks_tests_and_git(ctx, repo):
    (repo[0] / ".git").mkdir()
    before = tree(repo[0])
    for tool, arguments in (("write_file", {"content": "x"}), ("edit_file", {"old": "add", "new": "plus"})):
        error = refused(ctx, tool, path="tests/test_app.py", **arguments)
        assert error.code == "protected_path" and "tests" in error.message
        assert refused(ctx, tool, path="./tests//test_app.py", **arguments).code == "protected_path"
        assert refused(ctx, tool, path=".git/config", **arguments).code == "read_only"
    assert tree(repo[0]) == before


def test_write_file_content_is_bounded_by_its_contract():
    with pytest.raises(ArgumentError) as info:
        REGISTRY.validate("write_file", {"path": "a.txt", "content": "x" * (ops.MAX_WRITE_BYTES + 1)})
    assert info.value.bad_fields == ["content"]


# -- edit_file -------------------------------------------------------------------------------------

def test_edit_file_replaces_one_exact_snippet(ctx, repo):
    result = call(ctx, "edit_file", path="src/app.py", old="def add(a, b):\n    return a - b",
                  new="def add(a, b):\n    return a + b")
    assert result["line"] == 1 and result["replaced"] == 1
    assert (repo[0] / "src/app.py").read_text() == APP.replace("return a - b", "return a + b", 1)
    assert "   2|     return a + b" in result["snippet"]


def test_edit_file_says_why_it_did_not_apply(ctx, repo):
    before = tree(repo[0])
    twice = refused(ctx, "edit_file", path="src/app.py", old="    return a - b", new="    return a + b")
    lines = [str(i + 1) for i, line in enumerate(APP.splitlines()) if line == "    return a - b"]
    assert twice.code == "edit_not_applied" and f"occurs {len(lines)} times" in twice.message
    assert f"lines {', '.join(lines)}" in twice.message
    missing = refused(ctx, "edit_file", path="src/app.py", old="    return a * b", new="x")
    assert missing.code == "edit_not_applied" and "not found" in missing.message
    assert "2: '    return a - b'" in missing.message  # the closest line, as the file has it
    numbered = refused(ctx, "edit_file", path="src/app.py", old="   2|     return a * b", new="x")
    assert "line numbers are not part of the file" in numbered.message
    assert refused(ctx, "edit_file", path="src/nope.py", old="a", new="b").code == "file_missing"
    (repo[0] / "blob.bin").write_bytes(b"\x00abc")
    assert refused(ctx, "edit_file", path="blob.bin", old="abc", new="x").code == "binary_file"
    assert "the same" in refused(ctx, "edit_file", path="src/app.py", old="add", new="add").message
    assert tree(repo[0]) == {**before, "blob.bin": b"\x00abc"}


# -- replace_function ------------------------------------------------------------------------------

def test_replace_function_rewrites_one_whole_function_indented_where_it_stands(ctx, repo):
    result = call(ctx, "replace_function", path="src/app.py", name="add", source="def add(a, b):\n    return a + b")
    assert (result["name"], result["start_line"], result["end_line"]) == ("add", 1, 2)
    assert (repo[0] / "src/app.py").read_text() == APP.replace("return a - b", "return a + b", 1)
    assert "   2|     return a + b" in REGISTRY.get("replace_function").render(result)
    # a method, written at column 0 with its body indented by 2 and surrounded by blank lines
    (repo[0] / "src/shapes.py").write_text(
        "class Box:\n    @property\n    def area(self):\n        return self.w + self.h\n\n    def name(self):\n"
        "        return 'box'\n")
    call(ctx, "replace_function", path="src/shapes.py", name="Box.area",
         source="\n  def area(self):\n    return self.w * self.h\n\n")
    assert (repo[0] / "src/shapes.py").read_text() == (
        "class Box:\n    @property\n    def area(self):\n      return self.w * self.h\n\n    def name(self):\n"
        "        return 'box'\n")  # moved as a block; the decorator kept, the next method untouched


def test_replace_function_refuses_what_is_not_one_whole_parsing_definition(ctx, repo):
    before = tree(repo[0])
    broken = refused(ctx, "replace_function", path="src/app.py", name="add",
                     source="def add(a, b):\n    return (a +\n")
    assert broken.code == "bad_source" and "line 2" in broken.message and "nothing was written" in broken.message
    body = refused(ctx, "replace_function", path="src/app.py", name="add", source="return a + b")
    assert body.code == "bad_source" and "def add(" in body.message
    other = refused(ctx, "replace_function", path="src/app.py", name="add", source="def plus(a, b):\n    return a + b")
    assert other.code == "bad_source" and "def plus" in other.message
    two = refused(ctx, "replace_function", path="src/app.py", name="add",
                  source="def add(a, b):\n    return a + b\nx = 1")
    assert two.code == "bad_source"
    missing = refused(ctx, "replace_function", path="src/app.py", name="mul", source="def mul(a, b):\n    return a * b")
    assert missing.code == "function_missing" and "add, sub" in missing.message
    same = refused(ctx, "replace_function", path="src/app.py", name="sub", source="def sub(a, b):\n    return a - b")
    assert same.code == "edit_not_applied"
    protected = refused(ctx, "replace_function", path="tests/test_app.py", name="test_add", source="def test_add():\n    pass")
    assert protected.code == "protected_path"
    assert tree(repo[0]) == before


# -- glob and grep ---------------------------------------------------------------------------------

def test_glob_matches_at_any_depth_and_is_bounded(ctx, repo):
    assert call(ctx, "glob", pattern="*.py")["matches"] == ["src/__init__.py", "src/app.py", "tests/test_app.py"]
    assert call(ctx, "glob", pattern="src/*.py")["matches"] == ["src/__init__.py", "src/app.py"]
    assert call(ctx, "glob", pattern="**/test_*.py")["matches"] == ["tests/test_app.py"]
    (repo[0] / "many").mkdir()
    for i in range(ops.MAX_GLOB_RESULTS + 20):
        (repo[0] / "many" / f"f{i:03d}.txt").write_text("")
    listed = call(ctx, "glob", pattern="many/*.txt")
    assert len(listed["matches"]) == ops.MAX_GLOB_RESULTS and listed["truncated"]
    assert refused(ctx, "glob", pattern="../*").code == "path_refused"


def test_grep_finds_lines_with_numbers_and_is_bounded(ctx, repo):
    found = call(ctx, "grep", pattern=r"return a \- b")
    want = [{"path": "src/app.py", "line": i + 1, "text": line.strip()} for i, line in enumerate(APP.splitlines())
            if "return a - b" in line]
    assert found["matches"] == want
    assert call(ctx, "grep", pattern="ADD", ignore_case=True, glob="tests/*.py")["matches"][0]["path"] == "tests/test_app.py"
    assert call(ctx, "grep", pattern="def", path="src/app.py")["files_searched"] == 1
    (repo[0] / "noise.txt").write_text("hit\n" * (ops.MAX_GREP_MATCHES + 30))
    bounded = call(ctx, "grep", pattern="hit", path="noise.txt")
    assert len(bounded["matches"]) == ops.MAX_GREP_MATCHES and bounded["truncated"]
    assert refused(ctx, "grep", pattern="(unclosed").code == "bad_regex"
    (repo[0] / "blob.bin").write_bytes(b"\x00hit")
    assert all(m["path"] != "blob.bin" for m in call(ctx, "grep", pattern="hit")["matches"])


def test_a_runaway_regular_expression_is_killed_in_the_sandbox(ctx, repo, monkeypatch):
    monkeypatch.setattr(file_tools, "OP_TIMEOUT_SECONDS", 1.0)
    (repo[0] / "evil.txt").write_text("a" * 40 + "!\n")
    started = time.monotonic()
    assert refused(ctx, "grep", pattern="(a+)+$", path="evil.txt").code == "tool_timeout"
    assert time.monotonic() - started < 5


# -- path attacks ----------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["../outside/secret.txt", "src/../../outside/secret.txt", "/etc/passwd",
                                  "~/.ssh/id_rsa", "src\\..\\..\\x", "a\x00b", "/proc/self/root/etc/passwd"])
def test_paths_that_leave_the_workspace_are_refused(ctx, repo, path):
    before = tree(repo[0]), tree(repo[1])
    for tool, arguments in (("read_file", {}), ("write_file", {"content": "pwned"}),
                            ("edit_file", {"old": "outside", "new": "pwned"})):
        assert refused(ctx, tool, path=path, **arguments).code == "path_refused"
    assert (tree(repo[0]), tree(repo[1])) == before


def test_planted_links_are_never_followed(ctx, repo):
    root, outside = repo
    (root / "link.txt").symlink_to(outside / "secret.txt")
    (root / "linkdir").symlink_to(outside)
    (root / "src" / "up").symlink_to("../..")
    (root / "proc_root").symlink_to("/proc/self/root")
    for path in ("link.txt", "linkdir/secret.txt", "src/up/outside/secret.txt", "proc_root/etc/hostname"):
        for tool, arguments in (("read_file", {}), ("write_file", {"content": "pwned"}),
                                ("edit_file", {"old": "secret", "new": "pwned"})):
            error = refused(ctx, tool, path=path, **arguments)
            assert error.code == "symlink_refused" and "link" in error.message, (path, tool)
    assert call(ctx, "grep", pattern="secret")["matches"] == []
    assert [m for m in call(ctx, "glob", pattern="**")["matches"] if "secret" in m] == []
    assert refused(ctx, "write_file", path="linkdir/new.txt", content="x").code == "symlink_refused"
    assert tree(outside) == {"secret.txt": SECRET.encode()}


def test_hard_links_to_outside_files_are_refused(ctx, repo):
    root, outside = repo
    os.link(outside / "secret.txt", root / "hard.txt")
    assert refused(ctx, "read_file", path="hard.txt").code == "hard_link_refused"
    assert refused(ctx, "write_file", path="hard.txt", content="pwned").code == "hard_link_refused"
    assert refused(ctx, "edit_file", path="hard.txt", old="secret", new="pwned").code == "hard_link_refused"
    assert (outside / "secret.txt").read_text() == SECRET


def test_a_file_swapped_for_a_link_between_check_and_use_is_not_followed(repo, monkeypatch):
    """In-process, so the swap can be timed: after the folder is opened (the check), before the
    file is opened (read) or renamed over (write)."""
    root, outside = repo
    target = root / "src" / "app.py"

    def swap() -> None:
        if not target.is_symlink():
            target.unlink()
            target.symlink_to(outside / "secret.txt")

    real_open_dir = ops.open_dir

    def open_then_swap(root_fd, parts, **kwargs):
        fd = real_open_dir(root_fd, parts, **kwargs)
        if parts == ["src"]:
            swap()
        return fd

    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        monkeypatch.setattr(ops, "open_dir", open_then_swap)
        assert ops.perform(fd, "read", {"path": "src/app.py"})["code"] == "symlink_refused"
        monkeypatch.setattr(ops, "open_dir", real_open_dir)
        target.unlink()
        target.write_text(APP)
        real_token = ops.secrets.token_hex

        def swap_after_the_check(n):  # write_bytes names its temporary file after the target's check
            swap()
            return real_token(n)

        monkeypatch.setattr(ops.secrets, "token_hex", swap_after_the_check)
        reply = ops.perform(fd, "write", {"path": "src/app.py", "content": "written\n"})
    finally:
        os.close(fd)
    assert reply["ok"]  # the rename replaced the link itself ...
    assert not target.is_symlink() and target.read_text() == "written\n"
    assert (outside / "secret.txt").read_text() == SECRET  # ... and never wrote through it


def test_a_template_with_a_link_is_refused(tmp_path, repo):
    (repo[0] / "leak").symlink_to(repo[1] / "secret.txt")
    with pytest.raises(WorkspaceUnavailable) as info:
        copy_template(repo[0], tmp_path / "copy")
    assert info.value.code == "pack_invalid"


# -- bash: output, artifacts, timeout, cancel ------------------------------------------------------

def test_bash_runs_in_the_workspace_and_reports_exit_code_and_durations(ctx, repo):
    result = call(ctx, "bash", command="pwd; ls src; echo oops >&2; exit 3")
    assert result["exit_code"] == 3 and result["sandbox"] == ctx.sandbox.kind
    # the workspace's own path is shown relative: the model, the trace and the artifact see "."
    assert result["stdout"].splitlines() == [".", "__init__.py", "app.py"]
    assert result["stderr"] == "oops\n" and result["duration_ms"] > 0 and result["artifact"] is None
    assert result["files_digest"] == ctx.workspace.digest()
    assert REGISTRY.get("bash").render(result).startswith("$ pwd; ls src; echo oops >&2; exit 3  (exit 3,")


def test_bash_keeps_head_and_tail_and_writes_the_whole_output_as_an_artifact(ctx, tmp_path):
    lines = 20_000
    result = call(ctx, "bash", command=f"seq 1 {lines}")
    full = "".join(f"{i}\n" for i in range(1, lines + 1))
    assert result["stdout_bytes"] == len(full)
    assert result["stdout"].startswith(full[:HEAD_CHARS]) and result["stdout"].endswith(full[-TAIL_CHARS:])
    assert len(result["stdout"]) < HEAD_CHARS + TAIL_CHARS + 100
    artifact = result["artifact"]
    body = (tmp_path / "artifacts" / f"{artifact['id']}.txt").read_bytes()
    assert artifact["complete"] and artifact["bytes"] == len(body) and full.encode() in body
    assert len(REGISTRY.get("bash").render(result)) < 3000  # an Observation line's cap


def test_bash_output_beyond_the_kept_bytes_and_binary_output_stay_bounded(ctx):
    result = call(ctx, "bash", command="head -c 3000000 /dev/zero; head -c 4096 /dev/urandom >&2")
    assert result["stdout_bytes"] == 3_000_000 and result["stderr_bytes"] == 4096
    assert not result["artifact"]["complete"]  # the sandbox kept its head and tail only
    assert len(result["stdout"]) + len(result["stderr"]) < 2 * (HEAD_CHARS + TAIL_CHARS) + 200
    json.dumps(result, allow_nan=False)  # undecodable bytes became replacement characters


def test_head_tail_marks_what_it_cut():
    text = "".join(chr(65 + i % 26) for i in range(HEAD_CHARS + TAIL_CHARS + 500))
    shown, cut = head_tail(text, len(text))
    assert cut and shown.startswith(text[:HEAD_CHARS]) and shown.endswith(text[-TAIL_CHARS:]) and "500 characters cut" in shown
    assert head_tail("short", 5) == ("short", False)


def _alive(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(int(pid))
        except OSError:
            continue
    return found


def test_bash_timeout_kills_the_command_and_its_children(ctx):
    started = time.monotonic()
    result = call(ctx, "bash", command="sleep 97.531 & sleep 97.532; echo never", timeout=1)
    assert result["timed_out"] and result["exit_code"] is None and "never" not in result["stdout"]
    assert time.monotonic() - started < 10
    assert "timed out" in REGISTRY.get("bash").render(result)
    time.sleep(0.3)
    assert _alive("sleep 97.53") == []


def test_bash_cancel_kills_the_command(ctx):
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    started = time.monotonic()
    result = call(ctx, "bash", cancel, command="sleep 86.421")
    assert result["cancelled"] and time.monotonic() - started < 10
    time.sleep(0.3)
    assert _alive("sleep 86.421") == []


def test_bash_never_outlives_the_runs_deadline(repo, tmp_path):
    ctx = context(repo[0], tmp_path, deadline=time.monotonic() + 1.5)
    started = time.monotonic()
    result = call(ctx, "bash", command="sleep 75.319", timeout=60)
    assert result["timed_out"] and time.monotonic() - started < 6


def test_bash_cannot_write_outside_the_workspace_or_into_the_tests(ctx, repo):
    root, outside = repo
    result = call(ctx, "bash", command=f"echo pwned > {outside}/new.txt; echo pwned >> tests/test_app.py; "
                                       f"touch tests/planted.py; echo ok > src/made.txt")
    assert "tests/test_app.py" in result["stderr"] and "tests/planted.py" in result["stderr"]  # both refused
    assert tree(outside) == {"secret.txt": SECRET.encode()}  # the host's folder; /tmp in there is private
    assert (root / "tests/test_app.py").read_text() == TEST and not (root / "tests/planted.py").exists()
    assert (root / "src/made.txt").read_text() == "ok\n"  # the workspace itself is writable
    assert ctx.workspace.protected_changes() == []


# -- bash: risk and approvals ----------------------------------------------------------------------

READ_ONLY = "ls src"
RISKY = 'eval "rm -rf src"'  # eval: what it runs cannot be proven safe by parsing


def _grade(command: str, workspace: Path | None = None):
    from agent.shell_risk import grade_command

    return grade_command(command, workspace=str(workspace.resolve()) if workspace else None)


def test_the_shell_risk_grades_the_commands_these_tests_use():
    from agent.shell_risk import ApprovalPolicy, decide

    assert _grade(READ_ONLY).level == "read_only"
    assert _grade(RISKY).level not in ("read_only", "workspace_write")
    assert decide(_grade(RISKY), ApprovalPolicy(mode="ask_on_risk")) == "ask"


def test_a_read_only_command_runs_without_asking_and_the_decision_is_an_event(repo, tmp_path):
    events: list = []
    ctx = context(repo[0], tmp_path, events=events)
    result = call(ctx, "bash", command=READ_ONLY)
    grade = _grade(READ_ONLY)
    assert result["exit_code"] == 0 and result["risk"] == {"level": grade.level, "reason": grade.reason}
    assert result["approval"] == {"decision": "run", "by": "policy"}
    assert events == [{"type": "approval.decided", "tool": "bash", "command": READ_ONLY, "level": grade.level,
                       "reason": grade.reason, "decision": "run", "by": "policy"}]


def test_a_risky_command_is_refused_when_nobody_can_approve(repo, tmp_path):
    from agent.shell_risk import ApprovalPolicy, decide

    events: list = []
    ctx = context(repo[0], tmp_path, events=events)
    assert decide(_grade(RISKY), ApprovalPolicy(mode="ask_on_risk")) == "ask"
    error = refused(ctx, "bash", command=RISKY)
    assert error.code == "command_refused" and _grade(RISKY).level in error.message
    assert "nobody can approve" in error.message and (repo[0] / "src/app.py").exists()
    assert events[-1]["decision"] == "refuse" and events[-1]["by"] == "operator:no_approver"


def test_the_operator_approves_or_denies_a_risky_command(repo, tmp_path):
    asked: list[ApprovalRequest] = []

    def yes(request):
        asked.append(request)
        return True

    result = call(context(repo[0], tmp_path, approver=yes), "bash", command=RISKY)
    assert result["exit_code"] == 0 and result["approval"] == {"decision": "run", "by": "operator:approved"}
    assert not (repo[0] / "src").exists()
    assert asked[0].command == RISKY and asked[0].level == _grade(RISKY).level and asked[0].deadline > time.monotonic() - 60
    (repo[0] / "src").mkdir()
    error = refused(context(repo[0], tmp_path, approver=lambda request: False), "bash", command=RISKY)
    assert "the operator denied it" in error.message and (repo[0] / "src").exists()


def test_an_approval_that_does_not_come_in_time_is_a_refusal(repo, tmp_path):
    events: list = []
    ctx = context(repo[0], tmp_path, approver=lambda request: time.sleep(5) or True, approval_seconds=0.5,
                  events=events)
    started = time.monotonic()
    error = refused(ctx, "bash", command=RISKY)
    assert "nobody approved it in time" in error.message and time.monotonic() - started < 3
    assert events[-1]["by"] == "operator:deadline" and (repo[0] / "src").exists()


def test_policies_never_ask_and_always_ask(repo, tmp_path):
    from agent.shell_risk import ApprovalPolicy, decide

    never = ApprovalPolicy(mode="never_ask")
    outcome = decide(_grade(RISKY), never)
    ctx = context(repo[0], tmp_path, approval=never)
    assert outcome == "refuse"  # nobody to ask: what would be asked is refused
    assert refused(ctx, "bash", command=RISKY).code == "command_refused" and (repo[0] / "src").exists()
    write = "rm -f src/__init__.py"
    assert decide(_grade(write), never) == "run" and call(ctx, "bash", command=write)["exit_code"] == 0
    assert not (repo[0] / "src/__init__.py").exists()
    asked: list = []
    always = context(repo[0], tmp_path, approval=ApprovalPolicy(mode="always_ask"),
                     approver=lambda request: asked.append(request) or True)
    assert call(always, "bash", command=READ_ONLY)["approval"]["by"] == "operator:approved"
    assert [r.command for r in asked] == [READ_ONLY]


def test_a_deny_list_refuses_without_asking(repo, tmp_path):
    from agent.shell_risk import ApprovalPolicy, decide

    policy = ApprovalPolicy(mode="never_ask", deny=("ls",))
    assert decide(_grade(READ_ONLY), policy) == "refuse"
    asked: list = []
    ctx = context(repo[0], tmp_path, approval=policy, approver=lambda request: asked.append(request) or True)
    assert refused(ctx, "bash", command=READ_ONLY).code == "command_refused" and asked == []


def test_the_packs_test_command_runs_without_a_question_unless_everything_is_asked(repo, tmp_path):
    from agent.shell_risk import ApprovalPolicy

    command = "python -m pytest -q"
    result = call(context(repo[0], tmp_path, test_command=command), "bash", command=command)
    assert result["test_run"] and result["approval"]["decision"] == "run"
    assert result["approval"]["by"] in ("policy", "pack_test_command") and result["exit_code"] == 1  # add() is wrong
    always = context(repo[0], tmp_path, test_command=command, approval=ApprovalPolicy(mode="always_ask"))
    assert refused(always, "bash", command=command).code == "command_refused"
    # Another command is not the test command because it starts like it.
    other = call(context(repo[0], tmp_path, test_command=command, approver=lambda r: True), "bash",
                 command=command + " -x")
    assert not other["test_run"]


def test_ask_operator_waits_for_an_answer_until_the_deadline_or_a_cancel():
    def request(seconds):
        return ApprovalRequest(tool="bash", command="x", level="unknown", reason="r", deadline=time.monotonic() + seconds)

    assert ask_operator(None, request(1)) == "no_approver"
    assert ask_operator(lambda r: True, request(1)) == "approved"
    assert ask_operator(lambda r: False, request(1)) == "denied"
    assert ask_operator(lambda r: 1 / 0, request(1)) == "denied"
    assert ask_operator(lambda r: time.sleep(2) or True, request(0.2)) == "deadline"
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    assert ask_operator(lambda r: time.sleep(2) or True, request(5), cancel) == "cancelled"


def test_a_terminal_answer_is_yes_only_when_it_says_so():
    for text, want in ((b"y\n", True), (b"YES\n", True), (b"n\n", False), (b"\n", False), (b"maybe\n", False)):
        read, write = os.pipe()
        os.write(write, text)
        with os.fdopen(read) as stream:
            assert read_answer(stream, time.monotonic() + 2) is want
        os.close(write)
    read, write = os.pipe()
    with os.fdopen(read) as stream:
        started = time.monotonic()
        assert read_answer(stream, time.monotonic() + 0.3) is False  # nobody typed: refused at the deadline
        assert time.monotonic() - started < 2
    os.close(write)


def test_file_operations_cost_one_sandboxed_process_each(ctx):
    """The price of running every file operation in the sandbox, measured (reported, bounded loosely)."""
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        call(ctx, "read_file", path="src/app.py")
        timings.append(time.perf_counter() - started)
    assert sorted(timings)[2] < 1.0
