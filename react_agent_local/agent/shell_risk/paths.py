"""Where a path operand points, judged after normalising it, never by its raw prefix.

A path is resolved against the working folder the script has at that point (``cd`` moves it; see
``Grader``), ``..`` and ``.`` are folded the way bash's logical ``cd`` folds them, and only then is it
compared with the workspace: ``/tmp/../etc`` is ``/etc``, ``cd sub && rm ../x`` removes the
workspace's ``x``. Symlinks are not followed (the grader reads no file): a planted link is the
sandbox's to contain.

Besides inside / outside, this module names the targets that are worse than a workspace write:
the workspace root or a folder above it (deleting it deletes the operator's work), a wide glob at the
root (``*``, ``[a-z]*``, ``?*``: more than named files) and the places from which git runs programs on
the host later (a ``.git`` at any depth, a hooks folder).
"""

from __future__ import annotations

import posixpath
import re

UNKNOWN_DIR = "\0unknown"
"""A working folder only known when the script runs (``cd "$X"``): every relative path from it is
outside, since nothing about it can be proven."""

# bash rejects a NUL in a script, so no literal path can name this stand-in for an unknown workspace.
UNNAMED_ROOT = "/\0workspace"

_ALWAYS_INSIDE = ("/tmp",)  # the sandbox's private /tmp
DEVICE_SINKS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin", "/dev/tty", "/dev/zero",
                          "/dev/urandom", "/dev/random", "/dev/fd/1", "/dev/fd/2"})

GLOB_PART = re.compile(r"\[!?\]?[^]]*\]|[*?]")
# Folders that projects point core.hooksPath at; anything written there may run at the next commit.
HOOK_DIRS = frozenset({".githooks", "githooks", ".git-hooks", "git-hooks", ".husky", ".hooks"})
GIT_HOOK_NAMES = frozenset({
    "applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit", "prepare-commit-msg",
    "commit-msg", "post-commit", "pre-rebase", "post-checkout", "post-merge", "pre-push", "pre-receive", "update",
    "proc-receive", "post-receive", "post-update", "reference-transaction", "push-to-checkout", "pre-auto-gc",
    "post-rewrite", "sendemail-validate", "fsmonitor-watchman", "p4-changelist", "p4-prepare-changelist",
    "p4-post-changelist", "p4-pre-submit", "post-index-change"})


def resolve(cwd: str, path: str) -> str | None:
    """The absolute, folded path bash would use; None when it depends on the home folder or on a
    working folder known only at run time."""
    if path.startswith("~") or not path:
        return None
    if not path.startswith("/"):
        if cwd == UNKNOWN_DIR:
            return None
        path = cwd + "/" + path
    # POSIX keeps a leading "//" apart; bash and the kernel treat it as "/"
    return "/" + posixpath.normpath(path).lstrip("/")


def inside(root: str, path: str | None) -> bool:
    """Whether an absolute, folded path is the workspace, under it, the sandbox's /tmp or a harmless
    device (``/dev/null``)."""
    if path is None:
        return False
    if path in DEVICE_SINKS:
        return True
    return any(path == base or path.startswith(base + "/") for base in (root, *_ALWAYS_INSIDE))


def covers_root(root: str, path: str | None) -> bool:
    """Whether deleting ``path`` recursively deletes the whole workspace: the root or a folder above it."""
    if path is None:
        return True
    return path == "/" or path == root or root.startswith(path + "/")


def shown(root: str, path: str | None) -> str:
    """A resolved path as an approval card should show it: workspace-relative inside, real outside."""
    if path is None:
        return "a path known only when the script runs"
    if path == root:
        return "the workspace root"
    return path[len(root) + 1:] if path.startswith(root + "/") else path


def has_glob(word: str) -> bool:
    return bool(GLOB_PART.search(word))


def wide_glob(root: str, path: str | None) -> bool:
    """Whether a glob matches more than named files at the root: its first wildcard component sits in
    the workspace root (or above) and has fewer than two literal characters (``*``, ``.*``, ``[a-z]*``,
    ``?*``, ``s*``, ``*.*``); ``*.pyc`` or ``build/*`` name what they match."""
    if path is None or not has_glob(path):
        return False
    parts = path.split("/")
    first = next((i for i, part in enumerate(parts) if has_glob(part)), None)
    if first is None:  # a bracket that spans a "/" (``[y/N]``) is literal to bash
        return False
    parent = "/".join(parts[:first]) or "/"
    return covers_root(root, parent) and wide_pattern(parts[first])


def wide_pattern(component: str) -> bool:
    """Whether one glob component has fewer than two literal characters, or only dots (a component
    without a wildcard names one file)."""
    if not has_glob(component):
        return False
    literal = GLOB_PART.sub("", component)
    return len(literal) < 2 or not literal.strip(".")


def git_hazard(path: str | None) -> str | None:
    """Why writing ``path`` could make git run a program on the host later, or None: a ``.git`` folder
    or file at any depth (its config and hooks run), or a hooks folder. Compared case-insensitively,
    since git on a case-insensitive file system reads ``.GIT`` as ``.git``."""
    if path is None:
        return None
    parts = [part.casefold() for part in path.split("/")]
    if ".git" in parts or any(part.startswith(".git~") or part == "git~1" for part in parts):
        return "a .git folder or file (git reads its config and hooks)"
    if HOOK_DIRS & set(parts):
        return "a git hooks folder (its files run at the next commit)"
    if len(parts) >= 2 and parts[-1] in GIT_HOOK_NAMES and "hook" in parts[-2]:
        return "a git hook file"
    return None


def under_hooks(path: str | None) -> bool:
    """Whether ``path`` sits in any folder whose name says hooks: making such a file executable may
    arm a hook for ``core.hooksPath``."""
    return path is None or any("hook" in part.casefold() for part in path.split("/")[:-1])


def candidates(arg: str) -> list[str]:
    """The parts of one argument that bash or the program may use as a path: the argument, the value
    of ``--opt=value``, an attached short-option value (``-o/etc/x``), and brace alternatives."""
    found = [arg]
    if "=" in arg:  # --opt=value, and key=value operands (dd if=..., make CC=...)
        found.append(arg.split("=", 1)[1])
    elif arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
        found.append(arg[2:])
    if "{" in arg and ("," in arg or ".." in arg):
        found += [part for part in re.split(r"[{},]", arg) if part]
        prefix, _, rest = arg.partition("{")
        inner, _, suffix = rest.partition("}")
        found += [prefix + part + suffix for part in inner.split(",")]
    return found
