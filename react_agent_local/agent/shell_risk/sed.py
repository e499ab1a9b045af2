"""sed: which scripts only print, which write a file, which run what the grader cannot see."""

from __future__ import annotations

import re
from typing import Literal

from agent.shell_risk import paths as where
from agent.shell_risk.grades import Walk


def grade_sed(g: Walk, args: list[str]) -> None:
    scripts, in_place, from_file = _sed_scripts(args)
    if from_file:
        g.flag("unknown", "sed -f reads its script from a file the grader does not see")
        return
    for script in scripts:
        verdict, written = _sed_script(script)
        if verdict == "unknown":
            g.flag("unknown", f"sed script {script!r} runs commands or is not one the grader reads")
        for target in written:
            g.writes([target], f"sed script {script!r}")
            if g.outside(target):
                g.flag("unknown", f"sed script {script!r} writes {target}, outside the workspace")
            else:
                g.flag("workspace_write", f"sed script {script!r} writes a file")
    if in_place:
        files = sed_files(args)
        g.writes(files, "sed -i")
        if any(where.wide_glob(g.root, path) for name in files for path in g.resolved(name)):
            g.flag("destructive", "sed -i rewrites every file a wide glob matches at the workspace root")
        g.flag("workspace_write", "sed -i edits files in place")


def _sed_scripts(args: list[str]) -> tuple[list[str], bool, bool]:
    scripts: list[str] = []
    in_place = from_file = False
    explicit = False
    index = 0
    positional: list[str] = []
    while index < len(args):
        arg = args[index]
        if arg in ("-e", "--expression") and index + 1 < len(args):
            scripts.append(args[index + 1])
            explicit = True
            index += 2
            continue
        if arg.startswith("--expression="):
            scripts.append(arg.split("=", 1)[1])
            explicit = True
        elif arg in ("-f", "--file") or arg.startswith("--file="):
            from_file = True
        elif arg.startswith("--in-place") or arg == "-i":
            in_place = True
        elif arg.startswith("-") and not arg.startswith("--") and len(arg) > 1:
            letters = arg[1:]
            for position, letter in enumerate(letters):
                if letter == "i":
                    in_place = True
                    break  # the rest is the backup suffix
                if letter == "f":
                    from_file = True
                    break
                if letter == "e":
                    rest = letters[position + 1:]
                    if rest:
                        scripts.append(rest)
                    elif index + 1 < len(args):
                        scripts.append(args[index + 1])
                        index += 1
                    explicit = True
                    break
        elif not arg.startswith("-"):
            positional.append(arg)
        index += 1
    if not explicit and positional:
        scripts.append(positional[0])
    return scripts, in_place, from_file


def sed_files(args: list[str]) -> list[str]:
    scripts, _in_place, _from_file = _sed_scripts(args)
    files = [a for a in args if not a.startswith("-") and a not in scripts]
    return files


_SED_ADDRESS = r"(?:\d+|\$|/(?:[^/\\]|\\.)*/)?(?:,(?:\d+|\$|/(?:[^/\\]|\\.)*/))?!?"
_SED_PRINT = re.compile(rf"^{_SED_ADDRESS}\s*[pdqn=]$")


def _sed_script(script: str) -> tuple[Literal["read_only", "unknown"], list[str]]:
    """sed commands that only print: p, d, q, n, = with line/regex addresses, and s/// whose flags
    are g, p, i, I or a number; the files ``w``/``W`` (command or s flag) write are returned. ``e``
    (command or s flag) and ``r``/``R`` run or read what the grader cannot see: unknown."""
    written: list[str] = []
    for command in _split_sed(script):
        command = command.strip()
        if not command:
            continue
        if _SED_PRINT.match(command):
            continue
        write = re.match(rf"^{_SED_ADDRESS}\s*[wW]\s*(\S.*)$", command)
        if write:
            written.append(write.group(1).strip())
            continue
        match = re.match(rf"^{_SED_ADDRESS}\s*s(.)", command)
        if match is None:
            return "unknown", written
        delimiter = re.escape(match.group(1))
        part = rf"((?:[^\\{delimiter}]|\\.)*)"  # text up to the next unescaped delimiter
        body = re.match(rf"^{_SED_ADDRESS}\s*s{delimiter}{part}{delimiter}{part}{delimiter}([gpiIm0-9]*)(w\s*\S.*)?$",
                        command, re.S)
        if body is None:
            return "unknown", written
        if body.group(4):
            written.append(body.group(4)[1:].strip())
    return "read_only", written


def _split_sed(script: str) -> list[str]:
    """Commands of a sed script separated by ';' or newlines, keeping separators inside s/// intact."""
    commands, current, index = [], "", 0
    while index < len(script):
        char = script[index]
        if char in ";\n":
            commands.append(current)
            current = ""
            index += 1
            continue
        match = re.match(r"s(.)", script[index:]) if not current.strip() or re.fullmatch(
            _SED_ADDRESS + r"\s*", current) else None
        if match and match.group(1) not in ";\n\\":
            delimiter = match.group(1)
            seen, j = 0, index + 2
            while j < len(script) and seen < 2:
                if script[j] == "\\":
                    j += 2
                    continue
                if script[j] == delimiter:
                    seen += 1
                j += 1
            current += script[index:j]
            index = j
            continue
        current += char
        index += 1
    commands.append(current)
    return commands
