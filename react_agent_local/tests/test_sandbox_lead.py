"""The sandbox sees only what a command needs (SECURITY 37): no host file outside the system, the
interpreter and the agent's code; no other run's folder, no pack answer key; no pathname unix socket
of the host, no AF_VSOCK, no new user namespace under the fallback; a sized /tmp and a capped
workspace; the root ``.git`` read-only even where the workspace had none. Both backends, for real."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.paths import PACKAGE_ROOT, user_cache
from agent.sandbox import Sandbox, SandboxPolicy, open_sandbox

BACKENDS = ("bwrap", "landlock")


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\n")
    return root


def box(workspace: Path, backend: str, **policy) -> Sandbox:
    return open_sandbox(SandboxPolicy(workspace=workspace, **policy), backend=backend)  # type: ignore[arg-type]


def sh(sandbox: Sandbox, script: str, timeout_s: float = 60):
    return sandbox.run(["bash", "-c", script], timeout_s=timeout_s)


@pytest.fixture()
def planted() -> Iterator[list[Path]]:
    """Host files a command must not read: one in /var/tmp, one in the runner's own cache (another
    run's folder), and a pack's answer key beside the agent's code."""
    token = uuid.uuid4().hex
    paths = [Path("/var/tmp") / f"planted-{token}", user_cache("runs-probe") / token / "events.jsonl",
             PACKAGE_ROOT / "packs" / f"probe-{token}" / "data" / "expected.json"]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"SECRET-{token}\n")
    yield paths
    for path in paths:
        shutil.rmtree(path.parent if path.parent.name != "tmp" else path, ignore_errors=True)
    shutil.rmtree(PACKAGE_ROOT / "packs" / f"probe-{token}", ignore_errors=True)
    shutil.rmtree(user_cache("runs-probe"), ignore_errors=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_hosts_files_beyond_what_a_command_needs_are_not_readable(workspace, backend, planted) -> None:
    sandbox = box(workspace, backend)
    for path in planted:
        result = sh(sandbox, f"cat {path}")
        assert result.exit_code != 0 and b"SECRET-" not in result.stdout, (path, result)
    # The project tree that holds the runner (its README, its other folders) is not visible either.
    assert sh(sandbox, f"cat {PACKAGE_ROOT / 'README.md'}").exit_code != 0
    # What a command does need still works: the interpreter, the agent's code, the workspace.
    ok = sh(sandbox, "python -c 'import json, agent.sandbox; print(1)' && cat src/app.py")
    assert ok.exit_code == 0 and b"print('hi')" in ok.stdout, ok


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_host_unix_socket_and_no_vsock(workspace, backend, tmp_path) -> None:
    folder = tmp_path / "service"
    folder.mkdir()
    path = folder / "s.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    accepted: list[bool] = []

    def accept() -> None:
        server.settimeout(8)
        try:
            server.accept()
            accepted.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        probe = ("import socket\n"
                 f"s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect({str(path)!r}); print('CONNECTED')\n")
        result = box(workspace, backend).run(["python", "-c", probe], timeout_s=30)
        assert b"CONNECTED" not in result.stdout and result.exit_code != 0
        vsock = box(workspace, backend).run(["python", "-c", "import socket; socket.socket(40, socket.SOCK_STREAM); "
                                                             "print('VSOCK')"], timeout_s=30)
        assert b"VSOCK" not in vsock.stdout and vsock.exit_code != 0
        # socketpair (multiprocessing, asyncio) keeps working.
        pair = box(workspace, backend).run(["python", "-c", "import socket; a, b = socket.socketpair(); "
                                                            "a.send(b'x'); print(b.recv(1))"], timeout_s=30)
        assert pair.exit_code == 0 and b"b'x'" in pair.stdout, pair
    finally:
        thread.join()
        server.close()
    assert not accepted


def test_no_new_user_namespace_under_the_fallback(workspace) -> None:
    result = box(workspace, "landlock").run(["python", "-c", "import os; os.unshare(os.CLONE_NEWUSER); print('NS')"],
                                            timeout_s=30)
    assert b"NS" not in result.stdout and result.exit_code != 0
    assert sh(box(workspace, "landlock"), "unshare -U true").exit_code != 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_workspace_cannot_grow_past_its_cap(workspace, backend) -> None:
    cap = 16 << 20
    result = sh(box(workspace, backend, max_workspace_bytes=cap),
                "for i in 1 2 3 4 5 6; do head -c 8388608 /dev/zero > big$i.bin; done; echo done")
    assert result.limit_exceeded, result
    used = sum(p.stat().st_size for p in workspace.rglob("*") if p.is_file())
    assert used <= cap + (8 << 20)  # at most the one file a poll missed, and it is reported
    assert (workspace / "src" / "app.py").exists()  # the user's files are never what goes


def test_the_private_tmp_is_sized_and_not_the_hosts_memory(workspace) -> None:
    before = shutil.disk_usage("/dev/shm").used if os.path.isdir("/dev/shm") else 0
    result = sh(box(workspace, "bwrap", max_tmp_bytes=32 << 20),
                "head -c 134217728 /dev/zero > /tmp/fill; echo rc=$?; ls -l /tmp/fill")
    assert b"No space left" in result.stderr or b"rc=1" in result.stdout, result
    after = shutil.disk_usage("/dev/shm").used if os.path.isdir("/dev/shm") else 0
    assert after - before < (64 << 20)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_workspace_without_git_gets_none_a_command_could_configure(workspace, backend, tmp_path) -> None:
    marker = tmp_path / "ran"
    sh(box(workspace, backend), f"git init -q . ; git config core.fsmonitor 'touch {marker}'; ls -a .git")
    assert not (workspace / ".git" / "config").exists()
    subprocess.run(["git", "status"], cwd=workspace, capture_output=True, timeout=60,
                   env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"})
    assert not marker.exists()
