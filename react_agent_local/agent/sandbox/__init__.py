"""The workspace sandbox: every shell command and file operation of the workspace tools runs here.

    from agent.sandbox import SandboxPolicy, open_sandbox
    sandbox = open_sandbox(SandboxPolicy(workspace=Path("/path/to/repo").resolve()))
    result = sandbox.run(["bash", "-c", "pytest -q"], timeout_s=120, cancel=event)

What a command gets: the host's programs read-only, the workspace read-write except ``.git`` (and the
policy's other ``read_only`` entries), a private ``/tmp`` and home, no network unless the operator
allows it, no host secrets (the environment is built from an allowlist; the host's home, ``/run`` and
the credential files of ``/etc`` are hidden), CPU / process / file-size / memory limits, and no
process that outlives the command. See ``runner.py`` for how the confinement is chosen.

Modules: ``policy`` (what is allowed, the environment), ``runner`` (Sandbox, open_sandbox),
``process`` (spawn, capped output, timeout and cancel), ``bwrap`` (bubblewrap's mount plan),
``landlock`` and ``seccomp`` (the fallback's rules), ``limits`` (rlimits, pids cgroup), ``confine``
(the first program inside the sandbox). The file tools' operations are not here: they are
``tools/workspace_ops.py``, run as a script through ``Sandbox.run``.

This package imports nothing from the tools or the runtime: the tools call the sandbox, never the
other way round.
"""

from .policy import SandboxPolicy, SandboxUnavailable, interpreter
from .process import CommandResult
from .runner import Sandbox, open_sandbox

__all__ = ["CommandResult", "Sandbox", "SandboxPolicy", "SandboxUnavailable", "interpreter", "open_sandbox"]
