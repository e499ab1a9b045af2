"""The sandbox as a boundary (SECURITY.md 35, 37): what a command can see, reach, fill and plant.

Each test runs real commands through ``open_sandbox`` under both backends (bubblewrap, and the
Landlock + seccomp fallback forced) and checks the host afterwards. The probes are planted where the
runner's user can read them on the host, so a sandbox that showed the host would print them: a 0600
file in ``/var/tmp``, ``/opt`` and ``/srv``, a file in the home, a pack's ``data/expected.json`` and
another run's folder beside this package, the package's own files outside ``agent/``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.sandbox import CommandResult, Sandbox, SandboxPolicy, open_sandbox
from agent.sandbox.policy import package_root

BACKENDS = ["bwrap", "landlock"]
MIB = 1 << 20


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_app.py").write_text("from src.app import add\n\ndef test_add():\n    assert add(1, 2) == 3\n")
    return root


def allocated(root: Path) -> int:
    """Bytes the tree's files take on disk (measured here, not by the code under test)."""
    return sum(os.lstat(os.path.join(folder, name)).st_blocks * 512
               for folder, _dirs, names in os.walk(root) for name in names)


def sh(box: Sandbox, script: str, timeout_s: float = 60) -> CommandResult:
    return box.run(["bash", "-c", script], timeout_s=timeout_s)


def _plant(path: Path, text: str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.fixture()
def probes() -> Iterator[dict[str, Path]]:
    """Secret files the runner's user can read on the host, each holding its own marker."""
    tag = uuid.uuid4().hex[:12]
    made: list[Path] = []   # what to remove afterwards (a folder made for the probe, or the file)
    found: dict[str, Path] = {}

    def plant(name: str, folder: Path, relative: str) -> None:
        top = folder / f"react-sandbox-probe-{tag}"
        made.append(top)
        found[name] = _plant(top / relative, f"SECRET-{name}-{tag}\n")

    plant("var_tmp", Path("/var/tmp"), "secret.txt")
    for name, folder in (("opt", Path("/opt")), ("srv", Path("/srv")), ("home", Path.home())):
        if os.access(folder, os.W_OK):
            plant(name, folder, "secret.txt")
    # Beside the package: a pack's answer key and another run's trace, as the runner keeps them.
    plant("pack_data", package_root() / "packs", "data/expected.json")
    plant("other_run", package_root(), f"runs/{tag}/events.jsonl")
    # The package's own tree outside agent/: readable on the host, not in the sandbox.
    found["package_file"] = package_root() / "pyproject.toml"
    yield found
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


# -- 1. the sandbox sees only what it needs ---------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_host_outside_the_allowlist_is_unreadable(backend: str, workspace: Path,
                                                      probes: dict[str, Path]) -> None:
    box = open_sandbox(SandboxPolicy(workspace=workspace), backend=backend)  # type: ignore[arg-type]
    for name, path in probes.items():
        secret = path.read_bytes()
        assert secret, name  # the host itself reads it: the check below can fail
        result = sh(box, f"cat {path}; ls -la {path.parent}; find {path.parent} -type f")
        output = result.stdout + result.stderr
        assert secret not in output, (backend, name)
        assert path.name.encode() not in result.stdout, (backend, name)  # not even listed
    listing = sh(box, f"ls -a {package_root()}; ls {package_root()}/packs").stdout
    assert b"prompts" not in listing and b"fixtest" not in listing.lower()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_workspace_python_and_pytest_still_work(backend: str, workspace: Path) -> None:
    box = open_sandbox(SandboxPolicy(workspace=workspace), backend=backend)  # type: ignore[arg-type]
    result = sh(box, "python -m pytest -q -p no:cacheprovider tests && echo changed >> src/app.py "
                     "&& python -c 'import json, sqlite3, ssl, locale; print(\"stdlib ok\")'", timeout_s=120)
    assert result.exit_code == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert b"1 passed" in result.stdout and b"stdlib ok" in result.stdout
    assert (workspace / "src" / "app.py").read_text().endswith("changed\n")
    ran = box.run_python("agent.util.paths", [], timeout_s=60)  # the package imports from its agent/ folder alone
    assert ran.exit_code == 0, ran.stderr[-800:]


# -- 2. sockets and namespaces ------------------------------------------------------------------------------


@pytest.fixture(params=["/var/tmp", "/run"])
def unix_server(request: pytest.FixtureRequest) -> Iterator[tuple[Path, socket.socket]]:
    """A host service listening on a socket file outside the workspace (as Docker's does in /run)."""
    if not os.access(request.param, os.W_OK):
        pytest.fail(f"{request.param} is not writable here: the test cannot plant its host service")
    folder = Path(tempfile.mkdtemp(prefix="react-sandbox-sock-", dir=request.param))
    path = folder / "service.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    path.chmod(0o777)
    server.listen(4)
    server.settimeout(0.3)
    yield path, server
    server.close()
    shutil.rmtree(folder, ignore_errors=True)


def _accepted(server: socket.socket) -> bool:
    try:
        connection, _ = server.accept()
    except (socket.timeout, BlockingIOError):
        return False
    connection.close()
    return True


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_host_unix_socket_is_not_reachable(backend: str, workspace: Path,
                                             unix_server: tuple[Path, socket.socket]) -> None:
    path, server = unix_server
    control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    control.connect(str(path))  # reachable from the host: the sandbox's refusal below is what stops it
    control.close()
    assert _accepted(server)
    box = open_sandbox(SandboxPolicy(workspace=workspace, network=True), backend=backend)  # type: ignore[arg-type]
    result = sh(box, f"python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{path}\")'")
    assert result.exit_code != 0
    assert not _accepted(server)


@pytest.mark.parametrize("backend", BACKENDS)
def test_vsock_is_refused_and_socketpair_still_works(backend: str, workspace: Path) -> None:
    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()  # the host can: the refusal is the sandbox's
    for network in (False, True):
        box = open_sandbox(SandboxPolicy(workspace=workspace, network=network), backend=backend)  # type: ignore[arg-type]
        vsock = sh(box, "python3 -c 'import socket; socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)'")
        assert vsock.exit_code != 0 and b"Errno 97" in vsock.stderr, (network, vsock.stderr[-400:])
        pair = sh(box, "python3 -c 'import socket, multiprocessing as mp\n"
                       "a, b = socket.socketpair(); a.send(b\"x\"); assert b.recv(1) == b\"x\"\n"
                       "parent, child = mp.Pipe()\n"
                       "worker = mp.Process(target=child.send, args=(3,)); worker.start(); print(parent.recv()); "
                       "worker.join()'")
        assert pair.exit_code == 0 and pair.stdout == b"3\n", (network, pair.stderr[-800:])


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_new_user_namespace(backend: str, workspace: Path) -> None:
    assert subprocess.run(["unshare", "-U", "true"]).returncode == 0  # the host allows them
    box = open_sandbox(SandboxPolicy(workspace=workspace), backend=backend)  # type: ignore[arg-type]
    script = ("import ctypes, os, sys\n"
              "libc = ctypes.CDLL(None, use_errno=True)\n"
              "print(libc.unshare(0x10000000), ctypes.get_errno())\n")
    result = box.run(["python3", "-c", script], timeout_s=30)
    assert result.stdout.split()[0] == b"-1", result.stdout + result.stderr
    assert sh(box, "unshare -U true").exit_code != 0
    assert sh(box, "unshare -U -r id -u").stdout.strip() != b"0"
    # Threads and subprocesses still start (glibc falls back from clone3 to clone).
    threads = sh(box, "python3 -c 'import threading, subprocess; t = threading.Thread(target=print, args=(1,)); "
                      "t.start(); t.join(); subprocess.run([\"true\"], check=True)'")
    assert threads.exit_code == 0 and threads.stdout == b"1\n", threads.stderr[-600:]


@pytest.mark.parametrize("backend", BACKENDS)
def test_network_true_still_allows_inet(backend: str, workspace: Path) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(2)
    server.settimeout(5)
    try:
        box = open_sandbox(SandboxPolicy(workspace=workspace, network=True), backend=backend)  # type: ignore[arg-type]
        port = server.getsockname()[1]
        result = sh(box, f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=5)'")
        assert result.exit_code == 0, result.stderr[-600:]
        assert _accepted(server)
    finally:
        server.close()


# -- 3. disk caps ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_300_mib_into_the_workspace_is_stopped_and_removed(backend: str, workspace: Path) -> None:
    box = open_sandbox(SandboxPolicy(workspace=workspace), backend=backend)  # type: ignore[arg-type]
    cap = box.policy.max_workspace_bytes
    before = allocated(workspace)
    # Six files under the 64 MiB file-size limit: only the workspace cap can stop the total.
    result = sh(box, "for i in 1 2 3 4 5 6; do head -c 50M /dev/zero > big$i.bin || exit 9; done; echo wrote")
    after = allocated(workspace)
    assert result.limit_exceeded is not None and "the workspace" in result.limit_exceeded, result.stderr[-400:]
    assert b"wrote" not in result.stdout or result.removed  # stopped, or measured after and cleaned
    assert after - before <= cap
    assert result.removed and all(name.startswith("big") for name in result.removed)
    assert (workspace / "src" / "app.py").exists()  # what the command did not create stays


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_workspace_cap_counts_over_the_whole_run(backend: str, workspace: Path) -> None:
    box = open_sandbox(SandboxPolicy(workspace=workspace, max_workspace_bytes=100 * MIB), backend=backend)  # type: ignore[arg-type]
    first = sh(box, "head -c 60M /dev/zero > one.bin")
    assert first.exit_code == 0 and first.limit_exceeded is None
    second = sh(box, "head -c 60M /dev/zero > two.bin")
    assert second.limit_exceeded is not None and second.removed == ("two.bin",)
    assert (workspace / "one.bin").exists() and not (workspace / "two.bin").exists()
    freed = sh(box, "rm one.bin && head -c 60M /dev/zero > three.bin")  # room again once freed
    assert freed.exit_code == 0 and freed.limit_exceeded is None


def _shmem_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no Shmem line in /proc/meminfo")


@pytest.mark.parametrize("backend", BACKENDS)
def test_960_mib_into_tmp_stays_within_the_cap(backend: str, workspace: Path) -> None:
    cap = 128 * MIB
    box = open_sandbox(SandboxPolicy(workspace=workspace, max_tmp_bytes=cap), backend=backend)  # type: ignore[arg-type]
    peak = [_shmem_bytes()]
    start = peak[0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _shmem_bytes())
            done.wait(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        # 16 x 60 MiB = 960 MiB, each file under the 64 MiB file-size limit; du after each write.
        result = sh(box, 'for i in $(seq 16); do head -c 60M /dev/zero > "$TMPDIR/f$i"; '
                         'du -skc "$TMPDIR"/f* | tail -n1 | cut -f1; done')  # its own files: a checkout under /tmp is bound there too
    finally:
        done.set()
        sampler.join()
    seen = [int(line) * 1024 for line in result.stdout.split()]
    assert seen, result.stderr[-400:]
    if backend == "bwrap":  # a tmpfs of the cap's size: the kernel refuses the excess
        assert max(seen) <= cap + MIB  # du counts the folders too
        assert b"No space left on device" in result.stderr
    else:  # a watched host folder: stopped within a poll, reported, removed
        assert result.limit_exceeded is not None and "/tmp" in result.limit_exceeded
        assert max(seen) <= cap + 256 * MIB
    # The host's shared memory rose by at most the cap (and other processes' noise), not 960 MiB.
    assert peak[0] - start <= cap + 64 * MIB
    assert not list(Path(tempfile.gettempdir()).glob("react-agent-sandbox-*/f1"))


# -- 4. the workspace's .git is always read-only -------------------------------------------------------------------


def _host_git(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The operator's own git in the folder, with an empty global config."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(workspace.parent), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CEILING_DIRECTORIES": str(workspace.parent)}
    return subprocess.run(["git", *args], cwd=workspace, env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("backend", BACKENDS)
def test_git_init_in_a_workspace_without_git_leaves_nothing(backend: str, workspace: Path, tmp_path: Path) -> None:
    marker = tmp_path / f"fsmonitor-ran-{uuid.uuid4().hex[:8]}"
    box = open_sandbox(SandboxPolicy(workspace=workspace), backend=backend)  # type: ignore[arg-type]
    sh(box, f"git init -q . && git config core.fsmonitor 'touch {marker}' && git config core.hooksPath .githooks")
    assert not (workspace / ".git" / "config").exists()
    assert not os.path.lexists(workspace / ".git")  # neither a repository nor the empty mount point
    _host_git(workspace, "status")
    assert not marker.exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_git_stays_read_only_whatever_the_policy_lists(backend: str, workspace: Path) -> None:
    git = workspace / ".git"
    (git / "hooks").mkdir(parents=True)
    (git / "config").write_text("[core]\n\tbare = false\n")
    box = open_sandbox(SandboxPolicy(workspace=workspace, read_only=()), backend=backend)  # type: ignore[arg-type]
    for script in ("git config core.fsmonitor 'touch /tmp/x'", "echo '[core] pager = evil' >> .git/config",
                   "printf '#!/bin/sh\\ntouch /tmp/x\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit"):
        sh(box, script)
    assert (git / "config").read_text() == "[core]\n\tbare = false\n"
    assert list((git / "hooks").iterdir()) == []
