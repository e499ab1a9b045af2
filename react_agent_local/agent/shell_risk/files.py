"""Commands that create, change or delete files: which of their operands they write, and when that is
more than a workspace write.

Deleting or overwriting more than named files is destructive: the workspace root by any spelling
(``.``, ``./``, its absolute path, ``../<its name>``, a folder above it), a wide glob at the root
(``*``, ``[a-z]*``, ``?*``; see ``paths.wide_glob``), ``find`` deleting without a narrowing name test,
``rsync --delete``. Writing where git finds programs to run (a ``.git`` at any depth, a hooks folder,
``chmod +x`` of a file under one) is forbidden. Anything else these commands do is a workspace write.
"""

from __future__ import annotations

import re
from agent.shell_risk import paths as where
from agent.shell_risk.grades import Walk

FILE_WRITERS = frozenset({"mkdir", "touch", "cp", "mv", "rmdir", "ln", "truncate", "patch", "install", "split",
                          "csplit", "mktemp", "gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "zstd", "zip",
                          "unzip", "7z", "chmod", "tar", "dd", "rm", "shuf", "unlink"})
# Commands that delete or replace the files they are given (a compressor replaces x by x.gz).
_CONSUMES = frozenset({"rm", "unlink", "truncate", "mv", "gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz",
                       "zstd", "shred"})
DELETERS = frozenset({"rm", "rmdir", "unlink", "shred", "truncate", "mv"})
_TARGET_OPTIONS = ("-t", "--target-directory", "-C", "--directory", "-d", "-o", "--output")
_NAME_TESTS = frozenset({"-name", "-iname", "-path", "-ipath", "-regex", "-iregex", "-wholename", "-iwholename",
                         "-lname", "-ilname"})
_FIND_BRANCHES = frozenset({"-o", "-or", "!", "-not", ","})


def positional(args: list[str]) -> list[str]:
    return [a for a in args if not a.startswith("-") or a == "-"]


def written(name: str, args: list[str]) -> list[str]:
    """The operands a file command may create or change (for ``cp`` only its destination)."""
    targets: list[str] = []
    for index, arg in enumerate(args):
        if arg in _TARGET_OPTIONS and index + 1 < len(args):
            targets.append(args[index + 1])
        elif arg.startswith(tuple(o + "=" for o in _TARGET_OPTIONS if o.startswith("--"))):
            targets.append(arg.split("=", 1)[1])
        elif arg.startswith("of="):
            targets.append(arg[3:])
    operands = positional(args)
    if name == "chmod":
        operands = operands[1:]
    elif name in ("cp", "install") and not targets and not _links(args):
        operands = operands[-1:]  # a copy leaves its sources alone; a link (cp -l, -s) may be written through
    elif name == "dd":
        operands = []
    return targets + operands


def grade_file_writer(g: Walk, name: str, args: list[str]) -> None:
    g.writes(written(name, args), name)
    operands = positional(args)
    consumes = name in _CONSUMES or name == "tar" and "--remove-files" in args or \
        name == "zip" and any(a == "--move" or re.fullmatch(r"-[a-zA-Z]*m[a-zA-Z]*", a) for a in args)
    if consumes and _deletes_more_than_named(g, name, args, operands):
        return
    if name == "rm":
        recursive = _recursive(args)
        if "--no-preserve-root" in args:
            g.flag("destructive", "rm --no-preserve-root deletes the whole file system")
        for target in operands:
            if recursive and target.startswith("\0"):
                g.flag("destructive", "rm -r of a path known only when the script runs")
                return
            if not target.startswith("\0") and g.outside(target):
                g.flag("destructive", f"rm deletes {target} outside the workspace")
                return
        g.flag("workspace_write", "rm deletes files in the workspace")
    elif name == "chmod":
        mode = operands[0] if operands else ""
        if re.search(r"[ugoa]*[+=][rwxXt]*s", mode) or re.fullmatch(r"[0-7]*[2-7][0-7]{3}", mode):
            g.flag("privilege", f"chmod {mode} sets a setuid/setgid bit")
        elif _adds_execute(mode) and any(where.under_hooks(p) for t in operands[1:] for p in g.resolved(t)):
            g.forbid(f"chmod {mode} makes a file in a hooks folder executable: git may run it on the host")
        else:
            g.flag("workspace_write", "chmod changes permissions of workspace files")
    elif name == "dd":
        for arg in args:
            if arg.startswith("of="):
                if any(p is not None and p.startswith("/dev/") and p not in where.DEVICE_SINKS
                       for p in g.resolved(arg[3:])):
                    g.flag("destructive", f"dd {arg} writes to a device")
                    return
                g.flag("workspace_write", f"dd {arg} writes a file")
    elif name == "tar" and any(a.split("=")[0] in ("--to-command", "--use-compress-program", "--checkpoint-action",
                                                   "--info-script", "--new-volume-script", "--rsh-command",
                                                   "--rmt-command", "-I", "-F") for a in args):
        g.flag("unknown", "tar runs another program (--to-command, -I, --checkpoint-action, ...)")
    else:
        g.flag("workspace_write", f"{name} changes files in the workspace")


def _links(args: list[str]) -> bool:
    return any(a in ("--link", "--symbolic-link") or re.fullmatch(r"-[a-zA-Z]*[ls][a-zA-Z]*", a) for a in args)


def _recursive(args: list[str]) -> bool:
    flags = "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))
    return any(c in flags for c in "rR") or "--recursive" in args


def _adds_execute(mode: str) -> bool:
    if re.fullmatch(r"[0-7]+", mode):
        return any(int(digit) & 1 for digit in mode[-3:])
    return bool(re.search(r"[+=][rwXst]*[xX]", mode))


def _deletes_more_than_named(g: Walk, name: str, args: list[str], operands: list[str]) -> bool:
    """Flag a command that deletes or replaces the workspace root or everything a wide glob matches."""
    sources = operands[:-1] if name == "mv" and not any(a.startswith(("-t", "--target-directory")) for a in args) \
        else operands
    # moving a folder away, or archiving it with --remove-files, removes it as surely as rm -r
    whole = name in ("mv", "tar", "zip") or _recursive(args)
    for operand in sources:
        for arg in where.candidates(operand):
            for path in g.resolved(arg):
                if path is None:
                    continue  # the home folder or a run-time name: judged as outside or unknown below
                if whole and where.covers_root(g.root, path):
                    what = "the whole file system" if path == "/" else "the workspace root" \
                        if path == g.root else "a folder the workspace is in"
                    verb = {"mv": "moves away", "truncate": "empties every file in", "rm": "-r deletes",
                            "shred": "destroys", "tar": "--remove-files deletes", "zip": "-m deletes"}.get(
                        name, "-r replaces every file in")
                    g.flag("destructive", f"{name} {verb} {what}")
                    return True
                if where.wide_glob(g.root, path):
                    g.flag("destructive", f"{name} {arg} matches every file at the workspace root, "
                                          "more than named files")
                    return True
    return False


def grade_find(g: Walk, args: list[str]) -> None:
    """``find`` reads unless it deletes, runs a command per match or writes a listing; deleting (or
    running a deleting command) everything under the workspace root is destructive."""
    end = next((i for i, a in enumerate(args) if a.startswith(("-", "(", "!", ","))), len(args))
    starts = args[:end] or ["."]
    expression = args[end:]
    narrowed = not _FIND_BRANCHES & set(expression) and any(
        test in _NAME_TESTS and index + 1 < len(expression) and not where.wide_pattern(expression[index + 1].rsplit("/", 1)[-1])
        for index, test in enumerate(expression))
    everything = not narrowed and any(where.covers_root(g.root, p) for s in starts for p in g.resolved(s))
    for index, arg in enumerate(expression):
        if arg in ("-exec", "-execdir", "-ok", "-okdir"):
            g.flag("workspace_write", f"find {arg} runs a command on every match")
            inner = expression[index + 1:]
            stop = next((i for i, a in enumerate(inner) if a in (";", "+")), len(inner))
            if inner[:stop]:
                if everything and inner[0] in DELETERS:
                    g.flag("destructive", f"find {arg} {inner[0]} on every file under the workspace root")
                if inner[0] in FILE_WRITERS:
                    g.writes(starts, f"find {arg} {inner[0]}")
                g.invocation(inner[0], inner[1:stop])
        elif arg == "-delete":
            g.writes(starts, "find -delete")
            if any(g.outside(start) for start in starts):
                g.flag("destructive", "find -delete under a directory outside the workspace")
            elif everything:
                g.flag("destructive", "find -delete deletes every file under the workspace root")
            g.flag("workspace_write", "find -delete removes every match")
        elif arg in ("-fprint", "-fprint0", "-fprintf", "-fls"):
            g.writes(expression[index + 1:index + 2], f"find {arg}")
            g.flag("workspace_write", f"find {arg} writes a file")


def grade_rsync(g: Walk, args: list[str]) -> None:
    if any(a.startswith(("--delete", "--remove-source-files", "--del")) for a in args):
        g.flag("destructive", "rsync --delete removes every file the source lacks")
    else:
        g.writes(positional(args)[-1:], "rsync")
        g.flag("network", "rsync copies files, possibly over the network")
