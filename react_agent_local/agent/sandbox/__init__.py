"""The workspace sandbox: every shell command and file operation of the workspace tools runs here.

    from agent.sandbox import SandboxPolicy, open_sandbox
    sandbox = open_sandbox(SandboxPolicy(workspace=Path("/path/to/repo").resolve()))
    result = sandbox.run(["bash", "-c", "pytest -q"], timeout_s=120, cancel=event)

What a command gets, in both backends: an allowlist view of the host (the system folders, ``/etc``
without its credential files, the Python installation and this package's ``agent`` code, read-only;
no home, ``/var``, ``/srv``, ``/opt``, ``/run``, project trees, runs or packs' ``data/``), the workspace
read-write except ``.git`` (always read-only, an empty one where none exists) and the policy's other
``read_only`` entries, a private size-capped ``/tmp`` and home, no network unless the operator allows
it, no AF_VSOCK or other exotic socket family, no host socket file, no new user namespace, no host
secrets (the environment is built from an allowlist), CPU / process / file-size / memory limits, a
cap on how much the workspace may grow over the run (``quota.py``), and no process that outlives the
command. See ``runner.py`` for how the confinement is chosen.

Modules: ``policy`` (what is allowed, the environment), ``runner`` (Sandbox, open_sandbox),
``process`` (spawn, capped output, timeout and cancel), ``bwrap`` (bubblewrap's mount plan),
``landlock`` and ``seccomp`` (the fallback's rules; the filter serves both), ``limits`` (rlimits, pids
cgroup), ``quota`` (the workspace and /tmp disk caps), ``caps`` (capability drop), ``confine``
(the first program inside the sandbox). The file tools' operations are not here: they are
``tools/workspace_ops.py``, run as a script through ``Sandbox.run``.

This package imports nothing from the tools or the runtime: the tools call the sandbox, never the
other way round.
"""

from agent.sandbox.policy import SandboxPolicy, SandboxUnavailable, interpreter
from agent.sandbox.process import CommandResult
from agent.sandbox.runner import Sandbox, open_sandbox

__all__ = ["CommandResult", "Sandbox", "SandboxPolicy", "SandboxUnavailable", "interpreter", "open_sandbox"]
