"""The first program inside the sandbox: apply limits and filters, then become the command.

Run as ``python -I -S confine.py SPEC -- ARGV...`` (standard library only, no site-packages, so it
starts in a few milliseconds and a workspace file cannot shadow a module it imports). SPEC is a dict
in ``marshal`` format, hex-encoded (the same interpreter writes and reads it; ``json`` would cost more
to import than the rest of this program):

- ``rlimits``: cpu seconds, processes, file bytes, address-space bytes, and ``nproc_base`` (the
  processes the user already owns, added to the process cap where there is no user namespace);
- ``seccomp``: the keyword arguments of ``seccomp.install_filter`` (network, unix, block_userns), or
  None where bubblewrap installed the filter already;
- ``landlock``: ``landlock.make_spec(...)``, or None;
- ``supervise``: stay as a supervisor instead of ``exec``-ing.

Under bubblewrap the pid namespace ends every process when the command ends, so this program only
sets the limits and ``exec``s the command, and only where the system has no ``prlimit`` (which does
the same for a fraction of the start-up time). Without bubblewrap (Landlock, or no sandbox) it forks
the command and stays as its *child subreaper*: every process the command leaves behind (``&``,
``nohup``, ``setsid``, a double fork) is re-parented to the supervisor when its parent exits, and the
supervisor kills them all before it exits with the command's status (128 + N when a signal N ended
it, as bubblewrap reports). SIGTERM to the supervisor (the runner's timeout or cancel) does the same
at once.
"""

from __future__ import annotations

import marshal
import os
import resource
import sys
import time

# Imported only where needed (Landlock mode): ctypes and signal cost milliseconds per command, and
# under bubblewrap no_new_privs and the seccomp filter are set by bwrap itself (``--seccomp``).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_SIGKILL = 9
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_KILL_ALL_SECONDS = 5.0


def apply_rlimits(limits: dict[str, int]) -> None:
    # CPU: the soft limit sends SIGXCPU, one second later the hard limit SIGKILL ends a process that
    # ignores it.
    nproc = limits["nproc"] + limits.get("nproc_base", 0)
    for which, soft, hard in ((resource.RLIMIT_CPU, limits["cpu"], limits["cpu"] + 1),
                              (resource.RLIMIT_FSIZE, limits["fsize"], limits["fsize"]),
                              (resource.RLIMIT_AS, limits["as"], limits["as"]),
                              (resource.RLIMIT_NPROC, nproc, nproc)):
        _, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:  # raising a hard limit needs a capability we dropped
            soft, hard = min(soft, current_hard), min(hard, current_hard)
        resource.setrlimit(which, (soft, hard))


def confine_and_exec(spec: dict, argv: list[str]) -> None:
    """Never returns: becomes the command, or exits 126/127 the way a shell does."""
    try:
        if spec.get("landlock") or spec.get("seccomp"):
            import caps  # sibling modules, loaded by path: this file runs outside the package
            import landlock
            import seccomp

            seccomp.set_no_new_privs()
            if spec.get("landlock"):
                landlock.restrict_self(spec["landlock"])
                caps.drop_all()
            if spec.get("seccomp"):
                seccomp.install_filter(**spec["seccomp"])
        apply_rlimits(spec["rlimits"])
    except OSError as error:
        _fail(126, f"could not confine the command: {error}")
    try:
        os.execvp(argv[0], argv)
    except FileNotFoundError:
        _fail(127, f"{argv[0]}: command not found")
    except OSError as error:
        _fail(126, f"{argv[0]}: {error.strerror}")


def _fail(code: int, message: str) -> None:
    os.write(2, f"sandbox: {message}\n".encode(errors="replace"))
    os._exit(code)


def _children() -> list[int]:
    pids: list[int] = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as handle:
                pids += [int(p) for p in handle.read().split()]
        except OSError:
            continue
    return pids


def kill_descendants() -> None:
    """SIGKILL every child until none is left; orphans of the killed ones arrive as new children."""
    deadline = time.monotonic() + _KILL_ALL_SECONDS
    while time.monotonic() < deadline:
        for pid in _children():
            try:
                os.kill(pid, _SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while True:
                pid, _status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
        except ChildProcessError:
            return
        time.sleep(0.002)


def supervise(spec: dict, argv: list[str]) -> None:
    import signal

    import seccomp

    seccomp.prctl(_PR_SET_CHILD_SUBREAPER, 1)
    supervisor = os.getpid()
    child: list[int] = []
    stopping: list[bool] = []

    def stop(_signum: int, _frame: object) -> None:
        if os.getpid() != supervisor:  # the forked child, before it has reset its handlers
            os._exit(137)
        stopping.append(True)
        for pid in child:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    # Installed before the fork, so a stop that arrives at any moment still kills the command.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)
    pid = os.fork()
    if pid == 0:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        seccomp.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != supervisor:  # the supervisor died before the death signal was armed
            os._exit(137)
        confine_and_exec(spec, argv)
    child.append(pid)
    if stopping:  # a stop that came between the fork and the line above
        stop(signal.SIGTERM, None)
    while True:
        reaped, status = os.waitpid(-1, 0)
        if reaped == pid:
            break
    kill_descendants()
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        _fail(2, "usage: confine.py SPEC -- ARGV...")
    spec = marshal.loads(bytes.fromhex(sys.argv[1]))
    argv = sys.argv[3:]
    if spec.get("supervise"):
        supervise(spec, argv)
    else:
        confine_and_exec(spec, argv)


if __name__ == "__main__":
    main()
