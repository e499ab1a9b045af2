"""How risky a bash command is, decided by parsing it (tree-sitter-bash), never by looking for substrings.

``grade_command(script)`` walks the syntax tree and grades every simple command it finds; the script's
grade is the most severe one, in this order::

    read_only < workspace_write < network < unknown < privilege < destructive

- **read_only**: only plain word commands joined by ``&& || ; |`` (and grouping), each on the
  read-only allowlist with none of its blocked options: ``ls``, ``cat``, ``grep``, ``find`` without
  ``-exec``/``-delete``/``-fprint``, ``sed`` printing only, ``git`` read-only subcommands without
  ``-c``/``--config-env``/``--exec-path``, ...
- **workspace_write**: redirections and file commands on workspace paths, and anything that runs
  code (``python``, ``pytest``, ``node``, ``make``, a workspace script): the sandbox confines code to
  the workspace, the grader cannot see what the code does.
- **network**, **privilege**, **destructive**: ``curl``, ``git push``, ``pip install`` / ``sudo``,
  ``chown``, ``chmod u+s``, ``mount`` / ``rm -rf /``, ``mkfs``, ``dd`` to a device, a fork bomb,
  ``git reset --hard``, ``git clean -f``.
- **unknown**: whatever the parser cannot prove: ``$()`` and backticks, ``eval``, ``source``,
  aliases, functions, ``env CMD``, ``xargs``, ``bash -c``, ``exec``, a command name or argument
  computed by expansion, a here-document with expansions, process substitution, background jobs,
  parse errors, a path outside the workspace, a command the grader does not know.

Wrappers are seen through: ``timeout 5 rm -rf /`` and ``sudo rm -rf /`` grade as the ``rm`` they run
(``sudo`` adds privilege); the strings of ``bash -c``, ``sh -c`` and ``eval`` are parsed as scripts, so
the grade is at least unknown and higher when the inner script is worse. ``decide`` turns a grade and
the run's ``ApprovalPolicy`` into run / ask / refuse.

Modules: ``grades`` (RiskGrade, ApprovalPolicy, decide), ``grader`` (the walk over the syntax tree:
statements, words, redirections, paths), ``commands`` (what each command name means), ``sed`` and
``git`` (the two commands whose scripts and subcommands need their own reading). Nothing here runs a
command: the bash tool grades, asks, and then runs the script in ``agent.sandbox``.
"""

from __future__ import annotations

from .grader import Grader
from .grades import SEVERITY, ApprovalPolicy, Level, RiskGrade, decide

__all__ = ["SEVERITY", "ApprovalPolicy", "Level", "RiskGrade", "decide", "grade_command"]


def grade_command(script: str, *, workspace: str | None = None) -> RiskGrade:
    """The grade of a bash script. ``workspace``: its absolute path, so absolute paths inside it are
    treated like relative ones (without it every absolute path but ``/dev/null`` and ``/tmp`` is outside)."""
    grader = Grader(workspace.rstrip("/") if workspace else None)
    grader.script(script, depth=0)
    return grader.result()
