"""A seccomp filter that refuses IPv4/IPv6 sockets, written as classic BPF with the standard library.

Why by hand: the filter is eight instructions, and writing it here needs no libseccomp binding
(``pyseccomp`` and friends are one more native dependency that must also load inside the sandbox).
The filter is installed by ``confine.py`` in the child, after ``PR_SET_NO_NEW_PRIVS`` and right before
it ``exec``s the command; it is inherited by every process the command starts and cannot be removed.

What it refuses, and why each rule is there:

- ``socket(AF_INET | AF_INET6, ...)`` -> ``EPERM``: no TCP, UDP or ICMP from the sandbox. Unix sockets
  stay allowed because test runners, ``multiprocessing`` and many tools need them.
- ``io_uring_setup`` -> ``ENOSYS``: io_uring can open sockets (``IORING_OP_SOCKET``) without passing
  through the ``socket`` system call; ``ENOSYS`` makes runtimes fall back to ordinary system calls.
- on x86_64, every x32 system call (numbers with bit 30 set) -> ``EPERM``: x32 has its own number
  for ``socket`` that the rules above would not match.
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
# linux/socket.h (the socket module costs milliseconds to import in a program that runs per command)
_AF_INET = 2
_AF_INET6 = 10


class _Arch:
    def __init__(self, audit: int, socket_nr: int, io_uring_setup_nr: int, x32: bool) -> None:
        self.audit, self.socket_nr, self.io_uring_setup_nr, self.x32 = audit, socket_nr, io_uring_setup_nr, x32


_ARCHES = {
    "x86_64": _Arch(0xC000003E, 41, 425, True),
    "aarch64": _Arch(0xC00000B7, 198, 425, False),
}


class SeccompUnsupported(OSError):
    """This machine's architecture or kernel cannot take the filter."""


def _program(arch: _Arch) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) tuples; jumps are resolved from the labels below."""
    code: list[tuple[str, int, str | None, str | None, int]] = [
        ("", _LD_W_ABS, None, None, _OFFSET_ARCH),
        ("", _JEQ_K, None, "kill", arch.audit),
        ("", _LD_W_ABS, None, None, _OFFSET_NR),
    ]
    if arch.x32:
        code.append(("", _JGE_K, "eperm", None, 0x40000000))
    code += [
        ("", _JEQ_K, "socket", None, arch.socket_nr),
        ("", _JEQ_K, "enosys", "allow", arch.io_uring_setup_nr),
        ("socket", _LD_W_ABS, None, None, _OFFSET_ARG0),
        ("", _JEQ_K, "eperm", None, _AF_INET),
        ("", _JEQ_K, "eperm", "allow", _AF_INET6),
        ("allow", _RET_K, None, None, _RET_ALLOW),
        ("eperm", _RET_K, None, None, _RET_ERRNO | errno.EPERM),
        ("enosys", _RET_K, None, None, _RET_ERRNO | errno.ENOSYS),
        ("kill", _RET_K, None, None, _RET_KILL_PROCESS),
    ]
    labels = {label: index for index, (label, *_rest) in enumerate(code) if label}

    def offset(index: int, target: str | None) -> int:
        return 0 if target is None else labels[target] - index - 1

    return [(op, offset(i, jt), offset(i, jf), k) for i, (_l, op, jt, jf, k) in enumerate(code)]


def inet_filter() -> bytes:
    """The compiled filter for this machine (struct sock_filter[] as bytes)."""
    machine = os.uname().machine
    arch = _ARCHES.get(machine)
    if arch is None:
        raise SeccompUnsupported(f"no seccomp filter for the {machine} architecture")
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in _program(arch))


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


def install_inet_filter() -> None:
    """Install the filter on the calling process (requires no_new_privs, set here too)."""
    program = inet_filter()
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
    set_no_new_privs()
    result = prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog))
    if result:
        raise SeccompUnsupported(-result, "prctl(PR_SET_SECCOMP) failed")
