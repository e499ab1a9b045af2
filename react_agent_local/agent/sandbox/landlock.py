"""Landlock rules for the fallback sandbox: what the command may read, write and connect to.

Landlock (Linux >= 5.13) lets an unprivileged process restrict itself and everything it starts, with
no namespaces, so it works where bubblewrap cannot (user namespaces disabled or restricted by
AppArmor). It only *allows*: every access right this module "handles" is denied except beneath the
paths given a rule. The plan, built in the child by ``confine.py`` just before it runs the command:

- read and execute: the system directories (``/usr``, ``/bin``, ``/sbin``, ``/lib*``, ``/sys``; not
  ``/opt``, ``/var``, ``/srv``, ``/home``, ``/root``, ``/run``, ``/mnt`` or any project tree), ``/etc``
  without its secret files, the command's own ``/proc/<pid>`` and a few machine-wide ``/proc`` files,
  the Python installation and virtual environment, this package's ``agent`` code folder (not the
  folder holding it, where the packs' ``data/`` and the runs live) and the policy's ``readable``;
- read and write: the workspace, the run's private temporary directory (a host folder: its size is
  watched, see ``quota.py``) and a few character devices (``/dev/null``, ``/dev/zero``, ...);
- nothing else: not the host's home directory, not ``/tmp``, not ``/run``, not ``/dev/shm`` (so
  ``multiprocessing``'s semaphores, and with them ``Pool``, do not work under the fallback).
- TCP bind and connect (ABI >= 4) denied when the network is off (the seccomp filter also refuses
  IPv4/IPv6 sockets); signals and abstract Unix sockets scoped to the sandbox (ABI >= 6), so a
  command cannot signal the runner or reach a host service listening on an abstract socket.
  Landlock cannot refuse a ``connect`` to a *socket file* (``/run/docker.sock``, a socket in
  ``/var/tmp``), so the seccomp filter refuses ``socket(AF_UNIX)`` under the fallback
  (``socketpair`` stays), and it refuses new user namespaces (see ``seccomp.py``).

Read-only entries inside the workspace (``.git``, always; see ``SandboxPolicy.protected_entries``):
a Landlock right granted on a directory covers
everything beneath it and there are no deny rules, so a writable workspace root would make ``.git``
writable too. When a read-only entry exists, the directories on the way to it get read rights only
and every sibling gets full rights; the price is that entries cannot be created or removed directly
in those directories (in the workspace root, for ``.git``) under the fallback, while existing files
there stay editable in place. Under bubblewrap there is no such limit. Where the workspace has no
``.git``, the fallback cannot mount an empty read-only one as bubblewrap does (and making one would
freeze the workspace root), so the root stays writable and ``Sandbox.run`` removes whatever ``.git``
the command created the moment it ends (no process of the command outlives it), listing it in
``CommandResult.removed``. Landlock does not govern
metadata either: a command may ``chmod`` or ``touch`` a file it can read, ``.git``'s included (its
names and contents stay as they are).

Signals and ptrace-class access (``/proc/<pid>/environ``, ``cwd``, ``mem``, ...) to processes outside
the domain are refused by Landlock itself, except for a process holding CAP_SYS_PTRACE: a runner
started as root is root in the sandbox too, so ``caps.py`` drops every capability, and /proc is kept
narrow (``PROC_READABLE``) as a second layer.
"""

from __future__ import annotations

import ctypes
import os
import stat

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same numbers on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13       # ABI 2
TRUNCATE = 1 << 14    # ABI 3
IOCTL_DEV = 1 << 15   # ABI 5
NET_BIND_TCP = 1 << 0      # ABI 4
NET_CONNECT_TCP = 1 << 1   # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1                # ABI 6

# The only rights a rule on a non-directory may carry.
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
_READ = EXECUTE | READ_FILE | READ_DIR

SYSTEM_READABLE = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")
# Not all of /proc. A command that still holds CAP_SYS_PTRACE (any command of a root runner, until
# caps.py drops it) reads every /proc/<pid>/environ under Landlock, the runner's API keys included;
# /proc stays narrow so that the capability drop is not the only thing in the way. Readable: the
# command's own /proc/<pid> ("/proc/self" as resolved in the child, which keeps its pid across exec)
# and the machine-wide files programs read. A process the command starts cannot read its own
# /proc/self; bash's <(...) (which passes /dev/fd/N) fails under the fallback for that reason.
PROC_READABLE = ("/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/loadavg", "/proc/uptime",
                 "/proc/version", "/proc/filesystems", "/proc/sys")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
# Paths under /etc that hold credentials or host keys; everything else in /etc is readable.
ETC_SECRETS = frozenset({"shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d", "ssh",
                         "ssl/private", "krb5.keytab", "docker", "containerd"})


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI, or 0 when Landlock is absent or disabled at boot."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(_CREATE_RULESET), None, ctypes.c_size_t(0),
                          ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(result), 0)


def all_fs_rights(abi: int) -> int:
    rights = (MAKE_SYM << 1) - 1  # ABI 1: bits 0..12
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def make_spec(*, workspace: str, read_only: tuple[str, ...], readable: tuple[str, ...],
              writable: tuple[str, ...], network: bool) -> dict[str, object]:
    """What ``confine.py`` receives to build the ruleset in the child (plain data: no dataclass, whose
    import alone would add milliseconds to every command)."""
    return {"workspace": workspace, "read_only": list(read_only), "readable": list(readable),
            "writable": list(writable), "network": network}


def plan(spec: dict[str, object], abi: int) -> list[tuple[str, int]]:
    """(path, rights) rules for a spec; rights for files are cut down to what a file rule may hold."""
    full = all_fs_rights(abi) & ~(MAKE_CHAR | MAKE_BLOCK)
    read = _READ & all_fs_rights(abi)
    rules: list[tuple[str, int]] = []
    for path in (*SYSTEM_READABLE, *PROC_READABLE, *spec["readable"]):  # type: ignore[misc]
        rules.append((path, read))
    rules += _readable_except("/etc", ETC_SECRETS, read)
    for path in DEVICES:
        rules.append((path, READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV))
    for path in spec["writable"]:  # type: ignore[union-attr]
        rules.append((path, full))
    workspace = str(spec["workspace"])
    protected = {os.path.join(workspace, rel) for rel in spec["read_only"]}  # type: ignore[union-attr]
    protected = {p for p in protected if os.path.lexists(p)}
    rules += _workspace_rules(workspace, protected, full, read)
    return rules


def _readable_except(directory: str, excluded: frozenset[str], read: int) -> list[tuple[str, int]]:
    """Read rules for every entry of ``directory`` except the excluded relative paths (one level of
    nesting: ``ssl/private`` keeps ``ssl/certs`` readable)."""
    rules: list[tuple[str, int]] = []
    for entry in _scandir(directory):
        if entry.name in excluded:
            continue
        nested = frozenset(p.split("/", 1)[1] for p in excluded if p.startswith(entry.name + "/"))
        if nested and entry.is_dir(follow_symlinks=False):
            rules += _readable_except(entry.path, nested, read)
        else:
            rules.append((entry.path, read))
    return rules


def _workspace_rules(directory: str, protected: set[str], full: int, read: int) -> list[tuple[str, int]]:
    inside = [p for p in protected if p.startswith(directory + os.sep)]
    if not inside:
        return [(directory, full)]
    rules = [(directory, read)]
    for entry in _scandir(directory):
        if entry.path in protected:
            rules.append((entry.path, read))
        elif entry.is_symlink():
            continue  # a rule would follow the link and grant rights on its target
        elif entry.is_dir(follow_symlinks=False) and any(p.startswith(entry.path + os.sep) for p in inside):
            rules += _workspace_rules(entry.path, protected, full, read)
        else:
            rules.append((entry.path, full))
    return rules


def _scandir(directory: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except OSError:
        return []


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def restrict_self(spec: dict[str, object]) -> int:
    """Build the ruleset for ``spec`` and apply it to the calling process; returns the ABI used.

    The caller must already have set no_new_privs (``seccomp.set_no_new_privs``)."""
    abi = abi_version()
    if abi < 1:
        raise OSError("Landlock is not available in this kernel")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    attr = _RulesetAttr(all_fs_rights(abi), 0, 0)
    size = 8
    if abi >= 4:
        size = 16
        if not spec["network"]:
            attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
    if abi >= 6:
        size = 24
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    ruleset = libc.syscall(ctypes.c_long(_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for path, rights in plan(spec, abi):
            _add_rule(libc, int(ruleset), path, rights)
        if libc.syscall(ctypes.c_long(_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(int(ruleset))
    return abi


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a listed path this machine does not have
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FILE_RIGHTS
        if not rights:
            return
        attr = _PathBeneathAttr(rights, fd)
        if libc.syscall(ctypes.c_long(_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                        ctypes.byref(attr), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    finally:
        os.close(fd)
