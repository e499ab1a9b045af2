"""What each command name means for risk: the tables and the per-command rules.

``classify(grader, name, args)`` flags the grader with the command's level; wrappers (``timeout``,
``nice``, ``sudo``, ``xargs``, ``env``, ...) hand their inner command back to the grader (``xargs``
with an argument known only at run time), nested shells and ``eval`` hand back their script, and
``cd`` moves the grader's working folder. File commands are read in ``files.py``, interpreters' inline
code in ``inline_code.py``. ``operands`` says which arguments may be paths (a grep pattern or a sed
script is not one).
"""

from __future__ import annotations

import re
from agent.shell_risk.files import FILE_WRITERS, grade_file_writer, grade_find, grade_rsync
from agent.shell_risk.git import grade_git
from agent.shell_risk.inline_code import INTERPRETERS, grade_interpreter, grade_python, grade_stdin
from agent.shell_risk.sed import grade_sed, sed_files
from agent.shell_risk.grades import Walk

_READ_ONLY = frozenset({
    "ls", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "rg", "cut", "tr", "nl", "basename", "dirname",
    "realpath", "readlink", "diff", "cmp", "comm", "file", "stat", "du", "df", "tree", "seq", "sleep", "test",
    "[", "which", "type", "whoami", "id", "uname", "printenv", "md5sum", "sha1sum", "sha256sum", "sha512sum",
    "od", "hexdump", "strings", "fold", "expand", "unexpand", "rev", "paste", "join", "jq", "column", "pwd",
    "true", "false", ":", "echo", "printf", "cd", "set", "read", "unset", "date", "hostname", "env", "sort",
    "uniq", "xxd", "tee", "find", "sed", "nproc", "locale", "getconf", "less", "more",
})
TEXT_ONLY = frozenset({"echo", "printf", ":", "true", "false", "test", "["})  # arguments are not paths
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
_STDIN_FILES = frozenset({"/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})  # a script path that reads the input
_PYTHON = re.compile(r"^(python|pypy)(\d+(\.\d+)?)?$")
SAFE_ENV = frozenset({"LANG", "LANGUAGE", "TZ", "NO_COLOR", "COLUMNS", "TERM", "PYTHONPATH", "PYTHONHASHSEED",
                      "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "PYTHONWARNINGS", "CI", "FORCE_COLOR"})


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


def classify(g: Walk, name: str, args: list[str]) -> None:
    if name in _UNPROVABLE:
        if name == "env" and not args:
            return  # prints the (sandbox's) environment
        if name == "eval":
            g.nested(" ".join(args), _UNPROVABLE[name], shell="same")
        elif name == "trap" and args:
            g.nested(args[0], _UNPROVABLE[name], shell="later")
        elif name == "alias":
            g.flag("unknown", _UNPROVABLE[name])
            for definition in args:
                if "=" in definition:
                    g.nested(definition.split("=", 1)[1], _UNPROVABLE[name], shell="later")
        else:
            g.flag("unknown", _UNPROVABLE[name])
            if name in ("source", "."):
                g.change_directory(None)  # the sourced script may cd anywhere
            split = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-S", "--split-string")), None)
            if name == "env" and split is not None:
                g.nested(split, "env -S splits a string into the command it runs")
            if name == "env" and any(a.startswith("GIT_CONFIG") and "=" in a for a in args):
                g.forbid("env GIT_CONFIG_* gives git config keys that may name a program to run")
            inner = _inner_command(name, args) if name in _RUNS_A_COMMAND else None
            if inner and name in ("xargs", "parallel"):
                inner.append("\0expanded")  # the arguments it reads from its input
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
    if name in INTERPRETERS and grade_interpreter(g, name, args):
        return
    if name == "rsync":
        grade_rsync(g, args)
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
    if name in FILE_WRITERS:
        grade_file_writer(g, name, args)
        return
    if name in _CODE_RUNNERS:
        _code_runner(g, name, args)
        return
    if name in _READ_ONLY:
        _read_only(g, name, args)
        return
    g.flag("unknown", f"{name} is not a command the grader knows")


def _read_only(g: Walk, name: str, args: list[str]) -> None:
    positional = [a for a in args if not a.startswith("-")]
    if name == "find":
        grade_find(g, args)
    elif name == "sed":
        grade_sed(g, args)
    elif name == "rg" and any(a.split("=")[0] in ("--pre", "--pre-glob", "--search-zip", "-z", "--hostname-bin")
                              for a in args):
        g.flag("unknown", "rg --pre / --search-zip runs other programs on the files")
    elif name == "sort":
        if any(a == "-o" or a.startswith(("--output", "-o")) for a in args):
            g.writes(_sort_outputs(args), "sort -o")
            g.flag("workspace_write", "sort -o writes a file")
        if any(a.startswith("--compress-program") for a in args):
            g.flag("unknown", "sort --compress-program runs another program")
    elif name == "uniq" and len(positional) > 1 or name == "xxd" and "-r" in args and len(positional) > 1:
        g.flag("workspace_write", f"{name} with two files writes the second")
    elif name == "tee" and positional:
        g.writes(positional, "tee")
        g.flag("workspace_write", "tee writes its output to files")
    elif name == "cd":
        if not positional or positional == ["-"]:
            g.flag("unknown", "cd without a directory leaves the workspace")
        g.change_directory(positional[0] if positional and positional != ["-"] else None)
    elif name == "date" and any(a in ("-s", "--set") or a.startswith("--set=") for a in args):
        g.flag("privilege", "date -s sets the system clock")
    elif name == "hostname" and positional:
        g.flag("privilege", "hostname NAME renames the machine")
    elif name in ("less", "more"):
        g.flag("unknown", f"{name} is an interactive pager that can run commands")


def _code_runner(g: Walk, name: str, args: list[str]) -> None:
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
        program = next((a for a in args if not a.startswith("-")), "")
        if any(a == "-f" or a.startswith(("-f", "--file", "-E", "--exec")) for a in args):
            g.flag("unknown", f"{name} -f runs a program from a file the grader does not read")
        elif re.search(r"\.git\b|hook", program, re.IGNORECASE):
            g.forbid(f"{name} program names .git or a hooks folder: it may plant what git runs on the host")
        elif re.search(r"\bsystem\s*\(|\|\s*(getline|\")|\|&", program):
            g.flag("unknown", f"{name} program runs commands (system, a pipe)")
        else:
            g.flag("workspace_write", f"{name} programs can write files")
    else:
        g.flag("workspace_write", f"{name} runs code from the workspace")


def _pip(g: Walk, name: str, args: list[str]) -> None:
    first = next((a for a in args if not a.startswith("-")), "")
    if first in ("install", "download", "wheel", "index", "search"):
        g.flag("network", f"{name} {first} downloads packages")
    elif first in ("list", "show", "freeze", "check", "help", ""):
        return  # reports only
    else:
        g.flag("workspace_write", f"{name} {first} changes the installed packages")


def _python(g: Walk, name: str, args: list[str]) -> None:
    if args in (["--version"], ["-V"]):
        return
    index = 0
    while index < len(args):
        arg = args[index]
        value = args[index + 1] if index + 1 < len(args) else ""
        if arg in ("-W", "-X", "--check-hash-based-pycs"):
            index += 2
            continue
        if arg == "-":
            break
        if arg.startswith("-") and not arg.startswith("--"):
            # flags bundle until the first one that takes a value: -Ic CODE, -mpytest, -Wignore
            letter = next((ch for ch in arg[1:] if ch in "cmWX"), "")
            attached = arg[arg.index(letter) + 1:] if letter else ""
            if letter == "c":
                grade_python(g, name, attached or value)
                return
            if letter == "m":
                _python_module(g, name, attached or value, args[index + (1 if attached else 2):])
                return
            if letter and not attached:
                index += 1  # -W / -X take the next word
        elif arg in _STDIN_FILES:
            break
        elif not arg.startswith("-"):
            if not g.runs_written(arg, "python"):
                g.flag("workspace_write", f"{name} runs a Python script from the workspace")
            return
        index += 1
    grade_stdin(g, name, "python")


def _python_module(g: Walk, name: str, module: str, rest: list[str]) -> None:
    if module == "pip":
        _pip(g, f"{name} -m pip", rest)
    elif module in ("http.server", "smtpd", "ftplib", "xmlrpc.server", "ensurepip"):
        g.flag("network", f"{name} -m {module} serves or reaches the network")
    else:
        g.flag("workspace_write", f"{name} -m {module} runs Python code")


def _sort_outputs(args: list[str]) -> list[str]:
    outputs = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "-o"]
    return outputs + [a.split("=", 1)[1] if a.startswith("--output=") else a[2:]
                      for a in args if a.startswith(("--output=", "-o")) and a != "-o"]


def _shell(g: Walk, name: str, args: list[str]) -> None:
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
        if arg in _STDIN_FILES:
            break
        if not arg.startswith(("-", "+")):
            if not g.runs_written(arg, "shell"):
                g.flag("workspace_write", f"{name} {arg} runs a script from the workspace")
            return
        index += 1
    if g.stdin == "text":
        g.nested(g.stdin_text, f"{name} runs the script it reads from a here-document")
    else:
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
