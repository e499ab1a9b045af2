"""git: read-only subcommands, writes, network, history rewrites, and what would make git run a program
on the host later.

A repository the agent creates (``git init``, ``git clone``, ``git submodule add``, ``git worktree
add``) and any config key that names a program (``core.fsmonitor``, ``core.hooksPath``,
``core.pager``, ``diff.*.textconv``, filters, ``!`` aliases, ...) would run that program the next time
the operator uses git in the folder, outside every sandbox: such commands are forbidden. Config keys
are judged by an allowlist of keys that name no program (``user.name``, ``core.autocrlf``, ...), for
``git config``, ``git -c`` and ``--config-env`` alike. Discarding work on the whole tree (``git rm -r``,
``git checkout -- .``, ``git restore .``, ``git reset --hard``, ``git clean -f``) is destructive.
"""

from __future__ import annotations

import re
from agent.shell_risk import paths as where
from agent.shell_risk.grades import Walk

_GIT_READ = frozenset({"status", "log", "diff", "show", "blame", "annotate", "shortlog", "describe", "rev-parse",
                       "rev-list", "ls-files", "ls-tree", "cat-file", "grep", "show-ref", "for-each-ref",
                       "count-objects", "whatchanged", "name-rev", "merge-base", "cherry", "version", "var",
                       "check-ignore", "check-attr", "help", "diff-tree", "diff-files", "diff-index"})
_GIT_WRITE = frozenset({"add", "clean", "commit", "merge", "rebase", "cherry-pick", "revert", "switch", "mv", "rm",
                        "apply", "am", "notes", "worktree", "bisect", "format-patch", "gc", "prune",
                        "repack", "reset", "checkout", "restore", "stash", "tag", "branch", "config", "remote",
                        "reflog", "sparse-checkout", "update-index", "commit-tree", "write-tree", "read-tree",
                        "mktree", "hash-object"})
_GIT_NETWORK = frozenset({"push", "fetch", "pull", "ls-remote", "submodule", "archive", "request-pull",
                          "send-email"})
_GIT_DESTRUCTIVE = frozenset({"filter-branch", "filter-repo", "update-ref"})
_GIT_CREATES_REPOSITORY = {"init": "git init creates a repository", "init-db": "git init-db creates a repository",
                           "clone": "git clone creates a repository"}
_SUBMODULE_CREATES = frozenset({"add", "update", "init", "absorbgitdirs", "set-url", "set-branch", "sync", "deinit"})
_SUBMODULE_READ = frozenset({"status", "summary"})
# Config keys that name no program and no file git would run: everything else may run one.
_SAFE_KEYS = frozenset({
    "user.name", "user.email", "user.useconfigonly", "author.name", "author.email", "committer.name",
    "committer.email", "core.autocrlf", "core.safecrlf", "core.eol", "core.filemode", "core.ignorecase",
    "core.quotepath", "core.precomposeunicode", "core.whitespace", "core.abbrev", "core.symlinks",
    "init.defaultbranch", "pull.rebase", "pull.ff", "push.default", "push.autosetupremote", "merge.ff",
    "merge.conflictstyle", "rebase.autosquash", "rebase.autostash", "diff.renames", "diff.algorithm",
    "diff.noprefix", "diff.context", "diff.mnemonicprefix", "diff.indentheuristic", "status.showuntrackedfiles",
    "status.short", "status.branch", "log.date", "log.decorate", "log.abbrevcommit", "fetch.prune",
    "column.ui", "i18n.commitencoding", "i18n.logoutputencoding", "rerere.enabled", "branch.autosetupmerge",
    "branch.sort", "tag.sort", "gc.auto", "commit.verbose", "commit.status", "apply.whitespace"})
_SAFE_KEY_PATTERNS = (re.compile(r"(color|advice)\.[a-z0-9.-]+"),
                      re.compile(r"branch\.[^\s]+\.(remote|merge|rebase|description)"))
_CONFIG_READS = frozenset({"--get", "--get-all", "--get-regexp", "--get-urlmatch", "--get-color", "--get-colorbool",
                           "--list", "-l"})
_CONFIG_WITH_VALUE = frozenset({"-f", "--file", "--blob", "--type", "--default", "--comment", "--value"})
# Options that make a read-only git subcommand write a file or run a configured program.
_GIT_BLOCKED_OPTIONS = ("--output", "--ext-diff", "--textconv", "-O", "--open-files-in-pager", "--exec")
_GIT_GLOBAL_FLAGS = frozenset({"--no-pager", "-P", "-p", "--paginate", "--bare", "--no-replace-objects",
                               "--literal-pathspecs", "--no-optional-locks", "--glob-pathspecs",
                               "--noglob-pathspecs", "--icase-pathspecs"})


def safe_key(key: str) -> bool:
    """Whether a git config key names no program to run (section and name compared case-insensitively)."""
    section, _, rest = key.partition(".")
    subsection, _, name = rest.rpartition(".")
    folded = ".".join(p for p in (section.lower(), subsection, name.lower()) if p)
    return folded in _SAFE_KEYS or any(p.fullmatch(folded) for p in _SAFE_KEY_PATTERNS)


def grade_git(g: Walk, args: list[str]) -> None:
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "-c" or arg.startswith("-c"):
            setting = arg[2:] or (args[index + 1] if index + 1 < len(args) else "")
            key = setting.split("=", 1)[0]
            if not safe_key(key):
                g.forbid(f"git -c {key} sets a config key that can make git run a program")
                return
            index += 1 if arg[2:] else 2
            continue
        if arg.startswith("--config-env"):
            g.forbid("git --config-env sets config from the environment, which can make git run a program")
            return
        if arg.startswith("--exec-path="):
            g.flag("unknown", "git --exec-path runs git's programs from another folder")
            return
        if arg in ("--git-dir", "--work-tree", "--namespace") or arg.startswith(("--git-dir=", "--work-tree=")):
            g.flag("unknown", f"git {arg} points git at another repository")
            index += 2 if "=" not in arg else 1
            continue
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
    if sub in _GIT_CREATES_REPOSITORY:
        g.forbid(f"{_GIT_CREATES_REPOSITORY[sub]}: its config and hooks would run on the host at the operator's "
                 "next git command")
    elif sub == "submodule" and positional[:1] and positional[0] in _SUBMODULE_CREATES:
        g.forbid(f"git submodule {positional[0]} creates or configures a nested repository")
    elif sub == "submodule" and positional[:1] == ["foreach"]:
        g.nested(" ".join(positional[1:]), "git submodule foreach runs a script in every submodule")
    elif sub == "submodule" and (not positional or positional[0] in _SUBMODULE_READ):
        return
    elif sub == "worktree" and positional[:1] in (["add"], ["repair"]):
        g.forbid(f"git worktree {positional[0]} writes a checkout's .git file")
    elif sub == "maintenance" and positional[:1] != ["run"]:
        g.forbid("git maintenance registers the repository in the user's config and schedules jobs on the host")
    elif sub == "worktree" and positional[:1] == ["list"]:
        return
    elif sub == "config":
        _git_config(g, rest)
    elif sub in _GIT_READ:
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
        if sub in ("add", "mv", "rm", "checkout", "restore", "apply", "am"):
            g.writes(positional, label)
    else:
        g.flag("unknown", f"{label}: not a subcommand the grader knows (it may be an alias)")


def _git_config(g: Walk, rest: list[str]) -> None:
    """``git config``: reads pass; writing a key outside the allowlist, ``--edit``, or the user's or
    system config is forbidden."""
    words: list[str] = []
    action = ""
    index = 0
    while index < len(rest):
        arg = rest[index]
        if arg in _CONFIG_WITH_VALUE:
            if arg in ("-f", "--file") and index + 1 < len(rest):
                g.writes([rest[index + 1]], "git config --file")
            index += 2
            continue
        if arg.startswith("--file="):
            g.writes([arg.split("=", 1)[1]], "git config --file")
        if arg.startswith("-"):
            if arg in ("--global", "--system"):
                g.forbid(f"git config {arg} changes the git config the operator's own git reads")
                return
            if arg in ("--edit", "-e"):
                g.forbid("git config --edit opens an editor that can write any key")
                return
            action = action or (arg if arg in _CONFIG_READS or arg.startswith(("--unset", "--add", "--replace",
                                                                                  "--rename", "--remove")) else "")
        else:
            words.append(arg)
        index += 1
    if not action and words[:1] and words[0] in ("get", "list", "set", "unset", "rename-section",
                                                 "remove-section", "edit"):
        action, words = words[0], words[1:]
    if action in _CONFIG_READS or action in ("get", "list") or not action and len(words) <= 1:
        return
    if action == "edit":
        g.forbid("git config edit opens an editor that can write any key")
        return
    key = words[0] if words else ""
    if action in ("--rename-section", "--remove-section", "rename-section", "remove-section"):
        if words and all(word.lower() == "user" for word in words):
            g.flag("workspace_write", "git config changes the repository's config")
            return
        g.forbid(f"git config {action.lstrip('-')} {' '.join(words)} moves sections that may name programs")
        return
    if not safe_key(key):
        g.forbid(f"git config {key} is a key that can make git run a program on the host")
        return
    g.flag("workspace_write", f"git config {key} changes the repository's config")


def _whole_tree(g: Walk, pathspecs: list[str]) -> str | None:
    """The pathspec that means the whole working tree (``.``, ``:/``, the root's path, a wide glob)."""
    for spec in pathspecs:
        if spec in (":/", ":", ":(top)", ":/*") or spec.startswith(":(top)"):
            return spec
        if any(where.covers_root(g.root, p) or where.wide_glob(g.root, p) for p in g.resolved(spec)):
            return spec
    return None


def _git_write(g: Walk, sub: str, options: list[str], positional: list[str]) -> None:
    label = f"git {sub}"
    whole = _whole_tree(g, positional)
    if sub == "rm" and "--cached" not in options and (whole or any(re.fullmatch(r"-[a-zA-Z]*r[a-zA-Z]*", o)
                                                                  for o in options)):
        g.flag("destructive", f"{label} -r deletes whole folders of the working tree")
    elif sub == "clean" and any(o in ("-n", "--dry-run") or re.fullmatch(r"-[a-zA-Z]*n[a-zA-Z]*", o)
                                for o in options):
        return
    elif sub == "switch" and any(o in ("-f", "--force", "--discard-changes") for o in options):
        g.flag("destructive", f"{label} --discard-changes discards uncommitted changes")
    elif sub == "reset" and any(o in ("--hard", "--merge", "--keep") for o in options):
        g.flag("destructive", f"{label} {' '.join(options)} discards uncommitted work")
    elif sub == "clean":
        g.flag("destructive", f"{label} deletes untracked files")
    elif sub == "checkout" and (any(o in ("-f", "--force") for o in options) or whole):
        g.flag("destructive", f"{label} discards uncommitted changes in the whole tree")
    elif sub == "restore" and whole and ("--staged" not in options and "-S" not in options
                                         or any(o in ("--worktree", "-W") for o in options)):
        g.flag("destructive", f"{label} {whole} discards uncommitted changes in the whole tree")
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
