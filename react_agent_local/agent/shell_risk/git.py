"""git: read-only subcommands, writes, network, history rewrites, and the options that run programs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .grader import Grader

_GIT_READ = frozenset({"status", "log", "diff", "show", "blame", "annotate", "shortlog", "describe", "rev-parse",
                       "rev-list", "ls-files", "ls-tree", "cat-file", "grep", "show-ref", "for-each-ref",
                       "count-objects", "whatchanged", "name-rev", "merge-base", "cherry", "version", "var",
                       "check-ignore", "check-attr", "help", "diff-tree", "diff-files", "diff-index"})
_GIT_WRITE = frozenset({"add", "clean", "commit", "merge", "rebase", "cherry-pick", "revert", "switch", "mv", "rm",
                        "apply", "am", "init", "notes", "worktree", "bisect", "format-patch", "gc", "prune",
                        "repack", "reset", "checkout", "restore", "stash", "tag", "branch", "config", "remote",
                        "reflog", "sparse-checkout", "update-index", "commit-tree", "write-tree", "read-tree",
                        "mktree", "hash-object"})
_GIT_NETWORK = frozenset({"push", "fetch", "pull", "clone", "ls-remote", "submodule", "archive", "request-pull",
                          "send-email"})
_GIT_DESTRUCTIVE = frozenset({"filter-branch", "filter-repo", "update-ref"})
# Options that make a read-only git subcommand write a file or run a configured program.
_GIT_BLOCKED_OPTIONS = ("--output", "--ext-diff", "--textconv", "-O", "--open-files-in-pager", "--exec")
_GIT_GLOBAL_FLAGS = frozenset({"--no-pager", "-P", "-p", "--paginate", "--bare", "--no-replace-objects",
                               "--literal-pathspecs", "--no-optional-locks", "--glob-pathspecs",
                               "--noglob-pathspecs", "--icase-pathspecs"})


def grade_git(g: Grader, args: list[str]) -> None:
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "-c" or arg.startswith("-c") or arg.startswith("--config-env") or arg.startswith("--exec-path"):
            g.flag("unknown", "git -c / --config-env / --exec-path can make git run any program")
            return
        if arg in ("--git-dir", "--work-tree", "--namespace") or arg.startswith(("--git-dir=", "--work-tree=")):
            g.flag("unknown", f"git {arg} points git at another repository")
            return
        if arg == "-C":
            index += 2
            continue
        if arg in _GIT_GLOBAL_FLAGS:
            index += 1
            continue
        if arg.startswith("-"):
            g.flag("unknown", f"git {arg} is an option the grader does not know")
            return
        break
    if index >= len(args):
        return  # plain "git": prints help
    sub, rest = args[index], args[index + 1:]
    label = f"git {sub}"
    options = [a for a in rest if a.startswith("-")]
    positional = [a for a in rest if not a.startswith("-")]
    if sub in _GIT_READ:
        if any(o.split("=")[0] in _GIT_BLOCKED_OPTIONS for o in options):
            g.flag("unknown", f"{label} with --output / --ext-diff / --textconv / -O writes or runs a program")
    elif sub in _GIT_NETWORK:
        if sub == "push" and any(o in ("-f", "--force", "--mirror", "--delete", "-d", "--prune") or
                                 o.startswith("--force-with-lease") for o in options) \
                or any(p.startswith("+") for p in positional):
            g.flag("destructive", f"{label} --force rewrites the remote's history")
        else:
            g.flag("network", f"{label} reaches a remote")
    elif sub in _GIT_DESTRUCTIVE:
        g.flag("destructive", f"{label} rewrites or deletes history")
    elif sub in _GIT_WRITE:
        _git_write(g, sub, options, positional)
    else:
        g.flag("unknown", f"{label}: not a subcommand the grader knows (it may be an alias)")


def _git_write(g: Grader, sub: str, options: list[str], positional: list[str]) -> None:
    label = f"git {sub}"
    if sub == "reset" and any(o in ("--hard", "--merge", "--keep") for o in options):
        g.flag("destructive", f"{label} {' '.join(options)} discards uncommitted work")
    elif sub == "clean":
        g.flag("destructive", f"{label} deletes untracked files")
    elif sub == "checkout" and (any(o in ("-f", "--force") for o in options) or "." in positional):
        g.flag("destructive", f"{label} discards uncommitted changes")
    elif sub == "restore" and "--staged" not in options and "." in positional:
        g.flag("destructive", f"{label} . discards uncommitted changes")
    elif sub == "stash" and positional[:1] in (["drop"], ["clear"]):
        g.flag("destructive", f"{label} {positional[0]} deletes stashed work")
    elif sub == "branch" and ("-D" in options or
                              {"-d", "--delete"} & set(options) and {"-f", "--force"} & set(options)):
        g.flag("destructive", f"{label} -D deletes a branch that may not be merged")
    elif sub == "branch" and not positional and not any(
            o in ("-d", "-m", "-M", "-c", "-C", "--delete", "--move", "--copy", "-u", "--unset-upstream",
                  "--edit-description", "-f", "--force") or o.startswith("--set-upstream-to") for o in options):
        return  # listing branches
    elif sub == "tag" and (not positional or any(o in ("-l", "--list") for o in options)) and \
            not any(o in ("-d", "--delete", "-a", "-s", "-f") for o in options):
        return  # listing tags
    elif sub == "remote" and (not positional or positional[0] in ("show", "get-url")):
        return
    elif sub == "remote" and positional[0] in ("update", "prune"):
        g.flag("network", f"{label} {positional[0]} reaches a remote")
    elif sub == "config" and (any(o in ("--get", "--get-all", "--get-regexp", "--list", "-l") for o in options)
                              or positional[:1] in (["get"], ["list"])):
        return
    elif sub == "stash" and positional[:1] in (["list"], ["show"]):
        return
    elif sub == "reflog" and positional[:1] in ([], ["show"]):
        return
    else:
        g.flag("workspace_write", f"{label} changes the repository or the working tree")
