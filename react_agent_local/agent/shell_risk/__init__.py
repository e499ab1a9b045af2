"""How risky a bash command is, decided by parsing it (tree-sitter-bash), never by looking for substrings.

``grade_command(script)`` walks the syntax tree and grades every simple command it finds; the script's
grade is the most severe one, in this order::

    read_only < workspace_write < network < unknown < privilege < destructive

- **read_only**: only plain word commands joined by ``&& || ; |`` (and grouping), each on the
  read-only allowlist with none of its blocked options, every path inside the workspace: ``ls``,
  ``cat``, ``grep``, ``find`` without ``-exec``/``-delete``/``-fprint``, ``sed`` printing only,
  ``git`` read-only subcommands, ...
- **workspace_write**: redirections and file commands on named workspace paths, and anything that
  runs code (``python``, ``pytest``, ``node``, ``make``, a workspace script): the sandbox confines code
  to the workspace, the grader cannot see what the code does.
- **network**, **privilege**: ``curl``, ``git push``, ``pip install`` / ``sudo``, ``chown``,
  ``chmod u+s``, ``mount``.
- **destructive**: deleting or overwriting more than named files: the workspace root by any spelling
  (``rm -rf .``, its absolute path, ``../<its name>``, ``"$PWD"``), a wide glob at the root
  (``rm -rf [a-z]*``), ``find . -delete``, ``git rm -r``, ``git clean -f``, ``git reset --hard``,
  ``git checkout -- .``, ``rsync --delete``, scripted deletion (``python3 -c "shutil.rmtree('.')"``);
  ``rm -rf /``, ``mkfs``, ``dd`` to a device, a fork bomb.
- **forbidden** (a destructive grade that ``decide`` refuses under every policy): what would make git
  run a program on the host later: ``git init`` / ``clone`` / ``submodule add`` / ``worktree add``, a
  config key outside the harmless allowlist (``git config``, ``git -c``, ``GIT_CONFIG_*``), a write
  into a ``.git`` at any depth or a hooks folder, ``chmod +x`` of a hook.
- **unknown**: whatever the parser cannot prove: ``$()`` and backticks, ``eval``, ``source``,
  aliases, functions, ``env CMD``, ``xargs``, ``bash -c``, ``exec``, a command name or argument
  computed by expansion, a here-document with expansions, process substitution, background jobs,
  parse errors, a path outside the workspace, code in a language the grader does not read, a program
  read from a pipe, a command the grader does not know.

Paths are normalised first: resolved against the folder the script is in as ``cd`` moves it, ``..``
folded, ``~`` outside, so ``cat /tmp/../etc/passwd`` and ``cd /tmp/.. && cat etc/passwd`` read outside
the workspace. Wrappers are seen through: ``timeout 5 rm -rf /`` and ``sudo rm -rf /`` grade as the
``rm`` they run (``sudo`` adds privilege); the strings of ``bash -c``, ``sh -c``, ``eval``, a literal
here-document fed to a shell and ``os.system`` in inline Python are parsed as scripts, so the grade is
at least unknown and higher when the inner script is worse. Every reason ends with the words of the
command it is about (``deletes the workspace root: `rm -rf .` ``), printable and cut with a mark.
``decide`` turns a grade and the run's ``ApprovalPolicy`` into run / ask / refuse.

Modules: ``grades`` (RiskGrade, ApprovalPolicy, decide), ``grader`` (the walk over the syntax tree:
statements, words, redirections, the working folder), ``paths`` (normalising a path and what it
names: inside, the root, a wide glob, a git hazard), ``commands`` (what each command name means),
``files`` (commands that write or delete files), ``inline_code`` (an interpreter's ``-c``/``-e`` code
and standard input), ``sed`` and ``git`` (the two commands whose scripts and subcommands need their
own reading). Nothing here runs a
command: the bash tool grades, asks, and then runs the script in ``agent.sandbox``.
"""

from __future__ import annotations

import posixpath

from agent.shell_risk.grader import Grader
from agent.shell_risk.grades import SEVERITY, ApprovalPolicy, Level, RiskGrade, decide

__all__ = ["SEVERITY", "ApprovalPolicy", "Level", "RiskGrade", "decide", "grade_command"]


def grade_command(script: str, *, workspace: str | None = None) -> RiskGrade:
    """The grade of a bash script run from the workspace root. ``workspace``: the root's absolute path,
    so absolute paths inside it are treated like relative ones and ``rm -rf <its path>`` is seen as
    deleting the root (without it, relative spellings of the root are still found, and every absolute
    path but ``/dev/null`` and ``/tmp`` is outside)."""
    root = "/" + posixpath.normpath(workspace).lstrip("/") if workspace and workspace.startswith("/") else None
    grader = Grader(root if root != "/" else None)
    grader.script(script, depth=0)
    return grader.result()
