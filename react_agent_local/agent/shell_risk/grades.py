"""A risk grade and what a run's approval policy does with it.

A grade may also be *forbidden*: the command would leave something that git runs on the host later
(a repository, a hook, a config key that names a program). Its level is the strongest one,
``destructive``, and ``decide`` refuses it under every policy: no operator approval can make it safe,
since the program would run outside every sandbox, after the run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

Level = Literal["read_only", "workspace_write", "network", "privilege", "destructive", "unknown"]
# The order in which grades combine: a script is as risky as its riskiest part. unknown sits above
# network because an unprovable construct may hide anything, below privilege and destructive because
# those are known to be bad and say more.
SEVERITY: dict[str, int] = {"read_only": 0, "workspace_write": 1, "network": 2, "unknown": 3, "privilege": 4,
                            "destructive": 5}


@dataclass(frozen=True)
class RiskGrade:
    level: Level
    """The most severe level of any part of the script (``SEVERITY`` orders them)."""
    reason: str
    """One line a learner can read: which command or construct, and why."""
    commands: tuple[str, ...]
    """The command names found, wrappers and nested scripts included, in order."""
    forbidden: bool = False
    """The command would make git run a program on the host later: refused whatever the policy."""


@dataclass(frozen=True)
class ApprovalPolicy:
    """A run's approval rules: ``never_ask`` runs read-only and workspace writes and refuses the rest
    (nobody is there to ask); ``ask_on_risk`` runs those two and asks for the rest; ``always_ask`` asks
    for everything. A command named in ``deny`` (anywhere in the script) is always refused."""

    mode: Literal["never_ask", "ask_on_risk", "always_ask"] = "ask_on_risk"
    deny: tuple[str, ...] = ()


def decide(grade: RiskGrade, policy: ApprovalPolicy) -> Literal["run", "ask", "refuse"]:
    """What to do with a graded command under a run's policy (a forbidden grade and the deny list win
    over every mode)."""
    if grade.forbidden:
        return "refuse"
    if any(name in policy.deny for name in grade.commands):
        return "refuse"
    if policy.mode == "always_ask":
        return "ask"
    if grade.level in ("read_only", "workspace_write"):
        return "run"
    return "refuse" if policy.mode == "never_ask" else "ask"


StdinKind = Literal["empty", "pipe", "file", "text"]


class Walk(Protocol):
    """What a command's grading rule (``commands``, ``files``, ``git``, ``sed``, ``inline_code``) may
    ask of the walk over a script (``grader.Grader`` is the one): the folders it is in, what it has
    found, and the nested scripts and commands to grade next."""

    root: str
    stdin: StdinKind
    stdin_text: str

    def flag(self, level: Level, reason: str) -> None: ...

    def forbid(self, reason: str) -> None: ...

    def invocation(self, name: str, args: list[str]) -> None: ...

    def nested(self, script: str, why: str, *, shell: Literal["child", "same", "later"] = "child") -> None: ...

    def resolved(self, path: str) -> list[str | None]: ...

    def outside(self, path: str) -> bool: ...

    def change_directory(self, target: str | None) -> None: ...

    def writes(self, targets: list[str], what: str) -> None: ...

    def runs_written(self, path: str, language: str) -> bool: ...
