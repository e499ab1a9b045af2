"""Drop every Linux capability before the command runs (the Landlock fallback, when the runner is root).

bubblewrap drops capabilities itself (``--cap-drop ALL``); without it a root runner would hand a root
command all of them. Landlock confines paths, not ``init_module``, ``reboot``, ``settimeofday``, raw
I/O ports or the right to read any process's memory; capabilities are what grant those. Three sets
are cleared, in the order the kernel requires:

1. the bounding set (needs CAP_SETPCAP, so first): a root process gains its bounding set on every
   ``exec``, so an empty one means no program the command runs gets a capability back;
2. the ambient set;
3. the effective, permitted and inheritable sets (``capset``).

A non-root runner has none to drop; the calls are then no-ops (``PR_CAPBSET_DROP`` fails with EPERM
and is skipped, because without CAP_SETPCAP nothing could have been raised from it anyway).
"""

from __future__ import annotations

import ctypes
import os

_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return 63  # dropping an unknown number fails harmlessly with EINVAL


def drop_all() -> None:
    """Empty every capability set of the calling process; raises OSError if one stays non-empty."""
    from seccomp import prctl  # a sibling module: this runs inside the sandbox, loaded by path

    if os.geteuid() != 0 and not _capabilities("CapEff", "CapPrm"):
        return
    for capability in range(last_capability() + 1):
        prctl(_PR_CAPBSET_DROP, capability)
    prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    number = _SYS_CAPSET.get(os.uname().machine)
    if number is None:
        raise OSError("cannot drop capabilities on this architecture")
    libc = ctypes.CDLL(None, use_errno=True)
    header = _Header(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    if libc.syscall(ctypes.c_long(number), ctypes.byref(header), ctypes.byref(data)) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    # Root also regains its bounding set on exec; anyone else cannot (no_new_privs is set).
    remaining = _capabilities("CapEff", "CapPrm", *(("CapBnd",) if os.geteuid() == 0 else ()))
    if remaining:
        raise OSError(f"capabilities remain after dropping them: {', '.join(remaining)}")


def _capabilities(*fields: str) -> list[str]:
    """Which of the named /proc/self/status capability sets are not empty."""
    with open("/proc/self/status") as handle:
        return [line.split(":")[0] for line in handle
                if line.split(":")[0] in fields and int(line.split()[1], 16)]
