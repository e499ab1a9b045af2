"""What each command name means for risk: the tables and the per-command rules.

``classify(grader, name, args)`` flags the grader with the command's level; wrappers (``timeout``,
``nice``, ``sudo``, ``xargs``, ``env``, ...) hand their inner command back to the grader, nested shells
and ``eval`` hand back their script. ``operands`` says which arguments may be paths (a grep pattern or
a sed script is not one).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .git import grade_git
from .sed import grade_sed, sed_files

if TYPE_CHECKING:
    from .grader import Grader

_READ_ONLY = frozenset({
    "ls", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "rg", "cut", "tr", "nl", "basename", "dirname",
    "realpath", "readlink", "diff", "cmp", "comm", "file", "stat", "du", "df", "tree", "seq", "sleep", "test",
    "[", "which", "type", "whoami", "id", "uname", "printenv", "md5sum", "sha1sum", "sha256sum", "sha512sum",
    "od", "hexdump", "strings", "fold", "expand", "unexpand", "rev", "paste", "join", "jq", "column", "pwd",
    "true", "false", ":", "echo", "printf", "cd", "set", "read", "unset", "date", "hostname", "env", "sort",
    "uniq", "xxd", "tee", "find", "sed", "nproc", "locale", "getconf", "less", "more",
})
TEXT_ONLY = frozenset({"echo", "printf", ":", "true", "false", "test", "["})  # arguments are not paths
_FILE_WRITERS = frozenset({"mkdir", "touch", "cp", "mv", "rmdir", "ln", "truncate", "patch", "install", "split",
                           "csplit", "mktemp", "gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "zstd", "zip",
                           "unzip", "7z", "chmod", "tar", "dd", "rm", "shuf"})
_CODE_RUNNERS = frozenset({"pytest", "py.test", "tox", "nox", "node", "deno", "bun", "ruby", "perl", "php", "lua",
                           "java", "javac", "make", "cmake", "ninja", "gcc", "cc", "g++", "c++", "clang", "clang++",
                           "rustc", "cargo", "go", "black", "ruff", "isort", "mypy", "flake8", "pylint", "pyright",
                           "coverage", "awk", "gawk", "mawk", "npm", "yarn", "pnpm", "uv", "poetry", "pip",
                           "pip3"})
_NETWORK = frozenset({"curl", "wget", "nc", "ncat", "netcat", "socat", "telnet", "ssh", "scp", "sftp", "rsync",
                      "ftp", "ping", "dig", "nslookup", "host", "traceroute", "whois", "npx", "bunx", "pnpx",
                      "gem", "conda", "aria2c", "http", "httpie"})
_PRIVILEGE = frozenset({"sudo", "su", "doas", "pkexec", "run0", "chown", "chgrp", "mount", "umount", "nsenter",
                        "unshare", "chroot", "setcap", "capsh", "insmod", "modprobe", "rmmod", "sysctl", "iptables",
                        "ip6tables", "nft", "ip", "useradd", "userdel", "usermod", "groupadd", "passwd", "chpasswd",
                        "systemctl", "service", "crontab", "at", "kill", "pkill", "killall", "docker", "podman",
                        "apt", "apt-get", "dpkg", "yum", "dnf", "apk", "pacman", "brew", "snap", "prlimit", "renice",
                        "swapon", "swapoff", "visudo", "setfacl", "bwrap", "firejail"})
_DESTRUCTIVE = frozenset({"mkfs", "mke2fs", "mkswap", "wipefs", "fdisk", "sfdisk", "parted", "shred", "reboot",
                          "shutdown", "halt", "poweroff"})
_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "fish", "ash", "busybox"})
_UNPROVABLE = {
    "eval": "eval runs a string as a script", "source": "source runs a script in this shell",
    ".": ". runs a script in this shell", "alias": "aliases change what a later command means",
    "unalias": "aliases change what a later command means", "trap": "trap runs code on a signal",
    "exec": "exec replaces the shell with another program", "xargs": "xargs builds commands from its input",
    "env": "env runs a command with a changed environment", "coproc": "coproc starts a background command",
    "shopt": "shopt changes how the shell parses", "enable": "enable changes the shell's builtins",
    "watch": "watch runs a command repeatedly", "parallel": "parallel builds commands from its input",
}
_RUNS_A_COMMAND = frozenset({"exec", "xargs", "env", "watch", "parallel", "coproc"})
_WRAPPERS = frozenset({"nice", "nohup", "timeout", "stdbuf", "time", "command", "builtin", "setsid", "ionice"})
_PYTHON = re.compile(r"^(python|pypy)(\d+(\.\d+)?)?$")
SAFE_ENV = frozenset({"LANG", "LANGUAGE", "TZ", "NO_COLOR", "COLUMNS", "TERM", "PYTHONPATH", "PYTHONHASHSEED",
                      "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "PYTHONWARNINGS", "CI", "FORCE_COLOR"})
DEVICE_SINKS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin", "/dev/tty", "/dev/zero",
                          "/dev/urandom", "/dev/random", "/dev/fd/1", "/dev/fd/2"})
_RM_DANGEROUS = frozenset({"/", "/*", "~", "~/", "~/*", ".", "./", "..", "../", "*", "./*", ".*", "../*"})


def operands(name: str, args: list[str]) -> list[str]:
    """The arguments that may be paths: patterns and scripts are dropped for the commands that take one
    first (grep's pattern, sed's script, awk's program, jq's filter, find's -name pattern)."""
    if name in ("grep", "egrep", "fgrep", "rg", "awk", "gawk", "mawk", "jq"):
        kept: list[str] = []
        pattern_given = skip = False
        for arg in args:
            if skip:
                skip = False
                if not arg.startswith("-"):
                    continue
            if arg in ("-e", "--regexp"):
                pattern_given = skip = True
            elif arg.startswith(("--regexp=", "-e")) and len(arg) > 2:
                pattern_given = True
            elif arg.startswith("-") or pattern_given:
                kept.append(arg)
            else:
                pattern_given = True  # the first operand is the pattern (the program, the filter)
        return kept
    if name == "sed":
        return [a for a in sed_files(args) if a]
    if name == "find":
        kept, skip = [], False
        for arg in args:
            if skip:
                skip = False
                continue
            if arg in ("-name", "-iname", "-path", "-ipath", "-regex", "-iregex", "-wholename", "-iwholename",
                       "-lname", "-ilname"):
                skip = True
                continue
            kept.append(arg)
        return kept
    return args


def classify(g: Grader, name: str, args: list[str]) -> None:
    if name in _UNPROVABLE:
        if name == "env" and not args:
            return  # prints the (sandbox's) environment
        if name == "eval":
            g.nested(" ".join(args), _UNPROVABLE[name])
        elif name == "trap" and args:
            g.nested(args[0], _UNPROVABLE[name])
        elif name == "alias":
            g.flag("unknown", _UNPROVABLE[name])
            for definition in args:
                if "=" in definition:
                    g.nested(definition.split("=", 1)[1], _UNPROVABLE[name])
        else:
            g.flag("unknown", _UNPROVABLE[name])
            inner = _inner_command(name, args) if name in _RUNS_A_COMMAND else None
            if inner:
                g.invocation(inner[0], inner[1:])
        return
    if name in _WRAPPERS:
        if name == "command" and any(a in ("-v", "-V") for a in args):
            return  # a lookup, nothing runs
        inner = _inner_command(name, args)
        if inner is None:
            g.flag("unknown", f"{name} with options the grader does not follow")
        elif inner:
            g.invocation(inner[0], inner[1:])
        return
    if name in ("sudo", "doas", "pkexec", "run0", "su"):
        g.flag("privilege", f"{name} runs a command as another user")
        if name == "su" and "-c" in args[:-1]:
            g.nested(args[args.index("-c") + 1], "su -c runs a script as another user")
            return
        inner = _inner_command(name, args)
        if inner:
            g.invocation(inner[0], inner[1:])
        return
    if name in _SHELLS:
        _shell(g, name, args)
        return
    if name == "git":
        grade_git(g, args)
        return
    if _PYTHON.match(name):
        _python(g, name, args)
        return
    if name in _DESTRUCTIVE or name.startswith("mkfs."):
        g.flag("destructive", f"{name} destroys data or stops the machine")
        return
    if name in _PRIVILEGE:
        g.flag("privilege", f"{name} needs or changes privileges outside the workspace")
        return
    if name in _NETWORK:
        g.flag("network", f"{name} reaches the network")
        return
    if name in _FILE_WRITERS:
        _file_writer(g, name, args)
        return
    if name in _CODE_RUNNERS:
        _code_runner(g, name, args)
        return
    if name in _READ_ONLY:
        _read_only(g, name, args)
        return
    g.flag("unknown", f"{name} is not a command the grader knows")


def _read_only(g: Grader, name: str, args: list[str]) -> None:
    positional = [a for a in args if not a.startswith("-")]
    if name == "find":
        for index, arg in enumerate(args):
            if arg in ("-exec", "-execdir", "-ok", "-okdir"):
                g.flag("workspace_write", f"find {arg} runs a command on every match")
                inner = args[index + 1:]
                end = next((i for i, a in enumerate(inner) if a in (";", "+")), len(inner))
                if inner[:end]:
                    g.invocation(inner[0], inner[1:end])
            elif arg == "-delete":
                starts = [a for a in args[:next((i for i, a in enumerate(args) if a.startswith(("-", "(", "!"))),
                                                len(args))]]
                if any(g.outside(start) for start in starts):
                    g.flag("destructive", "find -delete under a directory outside the workspace")
                g.flag("workspace_write", "find -delete removes every match")
            elif arg in ("-fprint", "-fprint0", "-fprintf", "-fls"):
                g.flag("workspace_write", f"find {arg} writes a file")
    elif name == "sed":
        grade_sed(g, args)
    elif name == "rg" and any(a.split("=")[0] in ("--pre", "--pre-glob", "--search-zip", "-z", "--hostname-bin")
                              for a in args):
        g.flag("unknown", "rg --pre / --search-zip runs other programs on the files")
    elif name == "sort":
        if any(a == "-o" or a.startswith(("--output", "-o")) for a in args):
            g.flag("workspace_write", "sort -o writes a file")
        if any(a.startswith("--compress-program") for a in args):
            g.flag("unknown", "sort --compress-program runs another program")
    elif name == "uniq" and len(positional) > 1 or name == "xxd" and "-r" in args and len(positional) > 1:
        g.flag("workspace_write", f"{name} with two files writes the second")
    elif name == "tee" and positional:
        g.flag("workspace_write", "tee writes its output to files")
    elif name == "cd" and (not positional or positional == ["-"]):
        g.flag("unknown", "cd without a directory leaves the workspace")
    elif name == "date" and any(a in ("-s", "--set") or a.startswith("--set=") for a in args):
        g.flag("privilege", "date -s sets the system clock")
    elif name == "hostname" and positional:
        g.flag("privilege", "hostname NAME renames the machine")
    elif name in ("less", "more"):
        g.flag("unknown", f"{name} is an interactive pager that can run commands")


def _file_writer(g: Grader, name: str, args: list[str]) -> None:
    positional = [a for a in args if not a.startswith("-") or a == "-"]
    if name == "rm":
        flags = "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))
        recursive = any(c in flags for c in "rR") or "--recursive" in args
        if "--no-preserve-root" in args:
            g.flag("destructive", "rm --no-preserve-root deletes the whole file system")
        for target in positional:
            if recursive and target.startswith("\0"):
                g.flag("destructive", "rm -r of a path known only when the script runs")
                return
            if (recursive and target in _RM_DANGEROUS) or g.outside(target):
                g.flag("destructive", f"rm {' '.join(args)}: deletes {target} "
                                      f"{'and everything in it' if recursive else 'outside the workspace'}")
                return
        g.flag("workspace_write", "rm deletes files in the workspace")
    elif name == "chmod":
        mode = positional[0] if positional else ""
        if re.search(r"[ugoa]*[+=][rwxXt]*s", mode) or re.fullmatch(r"[0-7]*[2-7][0-7]{3}", mode):
            g.flag("privilege", f"chmod {mode} sets a setuid/setgid bit")
        else:
            g.flag("workspace_write", "chmod changes permissions of workspace files")
    elif name == "dd":
        for arg in args:
            if arg.startswith("of="):
                target = arg[3:]
                if target.startswith("/dev/") and target not in DEVICE_SINKS:
                    g.flag("destructive", f"dd {arg} writes to a device")
                    return
                g.flag("workspace_write", f"dd {arg} writes a file")
    elif name == "tar" and any(a.split("=")[0] in ("--to-command", "--use-compress-program", "--checkpoint-action",
                                                   "--info-script", "--new-volume-script", "--rsh-command",
                                                   "--rmt-command", "-I", "-F") for a in args):
        g.flag("unknown", "tar runs another program (--to-command, -I, --checkpoint-action, ...)")
    else:
        g.flag("workspace_write", f"{name} changes files in the workspace")


def _code_runner(g: Grader, name: str, args: list[str]) -> None:
    first = next((a for a in args if not a.startswith("-")), "")
    if name in ("pip", "pip3"):
        _pip(g, name, args)
    elif name in ("npm", "yarn", "pnpm", "bun") and first in ("install", "i", "add", "ci", "update", "up", "upgrade",
                                                              "publish", "exec", "x", "dlx", "create", "view", "info",
                                                              "search", "outdated", "audit", "login", "link"):
        g.flag("network", f"{name} {first} downloads or publishes packages")
    elif name == "uv" and (first in ("add", "sync", "lock", "tool", "venv", "python", "run") or
                           first == "pip" and any(a in ("install", "sync", "compile") for a in args)):
        g.flag("network", f"uv {first} may download packages")
    elif name == "poetry" and first in ("install", "add", "update", "lock", "publish"):
        g.flag("network", f"poetry {first} downloads or publishes packages")
    elif name == "cargo" and first in ("install", "fetch", "update", "publish", "search", "add", "login"):
        g.flag("network", f"cargo {first} reaches the package registry")
    elif name == "go" and (first in ("get", "install") or first == "mod" and "download" in args):
        g.flag("network", f"go {first} downloads modules")
    elif name in ("awk", "gawk", "mawk"):
        g.flag("workspace_write", f"{name} programs can write files and run commands")
    else:
        g.flag("workspace_write", f"{name} runs code from the workspace")


def _pip(g: Grader, name: str, args: list[str]) -> None:
    first = next((a for a in args if not a.startswith("-")), "")
    if first in ("install", "download", "wheel", "index", "search"):
        g.flag("network", f"{name} {first} downloads packages")
    elif first in ("list", "show", "freeze", "check", "help", ""):
        return  # reports only
    else:
        g.flag("workspace_write", f"{name} {first} changes the installed packages")


def _python(g: Grader, name: str, args: list[str]) -> None:
    if args in (["--version"], ["-V"]):
        return
    if "-m" in args:
        module = args[args.index("-m") + 1] if args.index("-m") + 1 < len(args) else ""
        rest = args[args.index("-m") + 2:]
        if module == "pip":
            _pip(g, f"{name} -m pip", rest)
            return
        if module in ("http.server", "smtpd", "ftplib", "xmlrpc.server", "ensurepip"):
            g.flag("network", f"{name} -m {module} serves or reaches the network")
            return
    g.flag("workspace_write", f"{name} runs Python code")


def _shell(g: Grader, name: str, args: list[str]) -> None:
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in ("-o", "+o"):
            index += 2
            continue
        if arg.startswith("-") and "c" in arg[1:] and not arg.startswith("--"):
            script = args[index + 1] if index + 1 < len(args) else ""
            g.nested(script, f"{name} -c runs a script the grader can only partly see")
            return
        if arg == "-s" or arg == "-":
            break
        if not arg.startswith(("-", "+")):
            g.flag("workspace_write", f"{name} {arg} runs a script from the workspace")
            return
        index += 1
    g.flag("unknown", f"{name} reads commands from its input, which the grader does not see")


def _inner_command(name: str, args: list[str]) -> list[str] | None:
    """The command a wrapper runs ([] when it runs none, None when its options cannot be followed)."""
    with_value = {"nice": {"-n", "--adjustment"}, "timeout": {"-s", "--signal", "-k", "--kill-after"},
                  "stdbuf": {"-i", "-o", "-e", "--input", "--output", "--error"}, "ionice": {"-c", "-n", "-p"},
                  "sudo": {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user", "--group"},
                  "doas": {"-u", "-C"}, "env": {"-u", "--unset", "-C", "--chdir", "-S", "--split-string"},
                  "xargs": {"-n", "-L", "-I", "-d", "-E", "-P", "-s", "-a", "--max-args", "--max-lines",
                            "--delimiter", "--max-procs", "--arg-file", "--replace"},
                  "exec": {"-a"}, "su": {"-c", "-s", "--command", "--shell", "-g", "-G"}, "run0": {"-u"},
                  "pkexec": {"--user"}, "time": {"-f", "-o"}, "builtin": set(), "command": set(),
                  "nohup": set(), "setsid": set(), "watch": {"-n", "-d"}, "parallel": set(), "coproc": set()}
    takes = with_value.get(name, set())
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            index += 1
            break
        if name == "env" and "=" in arg and not arg.startswith("-"):
            index += 1
            continue
        if arg.startswith("-") and len(arg) > 1:
            index += 2 if arg in takes else 1
            continue
        break
    rest = args[index:]
    if name == "timeout":
        rest = rest[1:]  # the duration
    if name == "xargs" and not rest:
        return ["echo"]
    return rest
