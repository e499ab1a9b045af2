"""The seccomp filter of every sandboxed command, written as classic BPF with the standard library.

Why by hand: the filter is a few dozen instructions, and writing it here needs no libseccomp binding
(``pyseccomp`` and friends are one more native dependency that must also load inside the sandbox).
Under bubblewrap it is passed with ``--seccomp FD``; under the Landlock fallback ``confine.py``
installs it in the child, after ``PR_SET_NO_NEW_PRIVS`` and right before it ``exec``s the command.
It is inherited by every process the command starts and cannot be removed.

What it refuses (``Rules`` says which parts apply), and why each rule is there:

- ``socket()`` of any family but the allowed ones -> ``EAFNOSUPPORT``. Always allowed: ``AF_NETLINK``
  (glibc's ``getaddrinfo`` and ``ip`` read interfaces with it). ``AF_INET``/``AF_INET6`` only when the
  operator allows the network. ``AF_UNIX`` under bubblewrap only: there the mount view holds no host
  socket file (no ``/run``, no ``/var``; ``/tmp`` is private) and the network namespace keeps abstract
  sockets apart. Under Landlock the host's ``/run`` and ``/tmp`` sockets exist and Landlock cannot
  refuse a ``connect`` to a socket file, so ``socket(AF_UNIX)`` is refused there; ``socketpair`` is a
  different system call and stays allowed (``multiprocessing`` pipes, asyncio's self-pipe), while a
  server listening on a socket file (``multiprocessing.Manager``) does not start under the fallback.
  Never allowed: ``AF_VSOCK`` (the hypervisor's host), ``AF_PACKET``, ``AF_BLUETOOTH``, ``AF_ALG``...
- ``io_uring_setup`` -> ``ENOSYS``: io_uring can open sockets (``IORING_OP_SOCKET``) without passing
  through the ``socket`` system call; ``ENOSYS`` makes runtimes fall back to ordinary system calls.
- with ``block_userns`` (the Landlock fallback, which has no user namespace of its own): ``unshare`` or
  ``clone`` with ``CLONE_NEWUSER`` -> ``EPERM``, and ``clone3`` -> ``ENOSYS`` (its flags live in memory,
  out of a filter's reach; glibc then falls back to ``clone``). A new user namespace would hand the
  command every capability inside it, and with them the kernel's whole namespaced attack surface.
  Under bubblewrap ``--disable-userns`` does the same.
- on x86_64, every x32 system call (numbers with bit 30 set) -> ``EPERM``: x32 has its own numbers
  that the rules above would not match.
- any other architecture (i386 via ``int 0x80``, whose ``socketcall`` multiplexes sockets) kills the
  process: the sandbox runs 64-bit programs only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

# BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
_OFFSET_NR = 0
_OFFSET_ARCH = 4
_OFFSET_ARG0 = 16  # the low 32 bits on a little-endian machine, which is where an int argument lives
# linux/socket.h and linux/sched.h (the socket module costs milliseconds to import per command)
AF_UNIX = 1
AF_INET = 2
AF_INET6 = 10
AF_NETLINK = 16
AF_VSOCK = 40
_CLONE_NEWUSER = 0x10000000


class _Arch:
    def __init__(self, audit: int, x32: bool, **numbers: int) -> None:
        self.audit, self.x32, self.numbers = audit, x32, numbers


_ARCHES = {
    "x86_64": _Arch(0xC000003E, True, socket=41, clone=56, unshare=272, clone3=435, io_uring_setup=425),
    "aarch64": _Arch(0xC00000B7, False, socket=198, clone=220, unshare=97, clone3=435, io_uring_setup=425),
}


class SeccompUnsupported(OSError):
    """This machine's architecture or kernel cannot take the filter."""


def allowed_families(*, network: bool, unix: bool) -> tuple[int, ...]:
    """The socket families a command may create (see the module docstring)."""
    return (AF_NETLINK, *((AF_UNIX,) if unix else ()), *((AF_INET, AF_INET6) if network else ()))


def _program(arch: _Arch, families: tuple[int, ...], block_userns: bool) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) tuples; jumps are resolved from the labels below."""
    n = arch.numbers
    code: list[tuple[str, int, str | None, str | None, int]] = [
        ("", _LD_W_ABS, None, None, _OFFSET_ARCH),
        ("", _JEQ_K, None, "kill", arch.audit),
        ("", _LD_W_ABS, None, None, _OFFSET_NR),
    ]
    if arch.x32:
        code.append(("", _JGE_K, "eperm", None, 0x40000000))
    code += [("", _JEQ_K, "socket", None, n["socket"]),
             ("", _JEQ_K, "enosys", None, n["io_uring_setup"])]
    if block_userns:
        code += [("", _JEQ_K, "enosys", None, n["clone3"]),
                 ("", _JEQ_K, "flags", None, n["clone"]),
                 ("", _JEQ_K, "flags", None, n["unshare"])]
    code.append(("", _RET_K, None, None, _RET_ALLOW))
    code.append(("socket", _LD_W_ABS, None, None, _OFFSET_ARG0))
    for family in families:
        code.append(("", _JEQ_K, "allow", None, family))
    code.append(("", _RET_K, None, None, _RET_ERRNO | errno.EAFNOSUPPORT))
    if block_userns:
        code += [("flags", _LD_W_ABS, None, None, _OFFSET_ARG0),
                 ("", _JSET_K, "eperm", "allow", _CLONE_NEWUSER)]
    code += [
        ("allow", _RET_K, None, None, _RET_ALLOW),
        ("eperm", _RET_K, None, None, _RET_ERRNO | errno.EPERM),
        ("enosys", _RET_K, None, None, _RET_ERRNO | errno.ENOSYS),
        ("kill", _RET_K, None, None, _RET_KILL_PROCESS),
    ]
    labels = {label: index for index, (label, *_rest) in enumerate(code) if label}

    def offset(index: int, target: str | None) -> int:
        return 0 if target is None else labels[target] - index - 1

    return [(op, offset(i, jt), offset(i, jf), k) for i, (_l, op, jt, jf, k) in enumerate(code)]


def build_filter(*, network: bool, unix: bool, block_userns: bool) -> bytes:
    """The compiled filter for this machine (struct sock_filter[] as bytes)."""
    machine = os.uname().machine
    arch = _ARCHES.get(machine)
    if arch is None:
        raise SeccompUnsupported(f"no seccomp filter for the {machine} architecture")
    program = _program(arch, allowed_families(network=network, unix=unix), block_userns)
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def prctl(option: int, arg2: int, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    """prctl(2) with every argument passed as a full unsigned long (the kernel checks unused ones are 0)."""
    libc = ctypes.CDLL(None, use_errno=True)
    args = [ctypes.c_ulong(value) for value in (arg2, arg3, arg4, arg5)]
    if libc.prctl(ctypes.c_int(option), *args) != 0:
        return -ctypes.get_errno()
    return 0


def set_no_new_privs() -> None:
    """No setuid binary, file capability or exec transition can raise privileges from here on."""
    result = prctl(_PR_SET_NO_NEW_PRIVS, 1)
    if result:
        raise OSError(-result, "prctl(PR_SET_NO_NEW_PRIVS) failed")


def install_filter(*, network: bool, unix: bool, block_userns: bool) -> None:
    """Install the filter on the calling process (requires no_new_privs, set here too)."""
    program = build_filter(network=network, unix=unix, block_userns=block_userns)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
    set_no_new_privs()
    result = prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog))
    if result:
        raise SeccompUnsupported(-result, "prctl(PR_SET_SECCOMP) failed")
