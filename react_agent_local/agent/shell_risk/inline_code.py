"""Code an interpreter gets on its command line or standard input: ``python3 -c``, ``node -e``,
``perl -e``, ``python3 - <<'PY'``.

The grader can see this code, so it reads it rather than trusting it. Python is parsed
(``ast``): calls that delete (``shutil.rmtree``, ``os.remove``, ``Path.unlink``, ...) are judged by
their targets like ``rm`` (the workspace root, a path outside it or a name computed at run time is
destructive; a named workspace file a workspace write); writes into a ``.git`` or hooks folder are
forbidden; ``os.system`` / ``subprocess`` with a literal command are graded as that command; ``exec``,
``eval``, ``getattr``, ``__import__`` and the like hide what runs: unknown. Other languages are not
parsed: their code is unknown, destructive when it names a deleting call, forbidden when it names
``.git`` or hooks. A program read from a pipe is unknown; one read from a workspace file is a
workspace write, like running that file.
"""

from __future__ import annotations

import ast
import re
import shlex
from agent.shell_risk import paths as where
from agent.shell_risk.grades import Walk

# Inline-code options per interpreter (perl's may be bundled: -pie, -lne).
INTERPRETERS: dict[str, tuple[str, ...]] = {
    "node": ("-e", "--eval", "-p", "--print"), "nodejs": ("-e", "--eval", "-p", "--print"),
    "bun": ("-e", "--eval", "-p", "--print"), "deno": ("eval",), "perl": ("-e", "-E"), "ruby": ("-e",),
    "php": ("-r",), "lua": ("-e",)}
_MAX_CODE_CHARS = 20_000

_FOREIGN_DELETES = re.compile(r"\b(rm_rf|rm_r|rm_f|rmtree|remove_tree|rmSync|rmdirSync|unlinkSync|unlink|rmdir|"
                              r"remove_dir|remove_entry|rm|delete_all|truncate)\b|os\.remove|File\.delete|"
                              r"Dir\.delete|FileUtils")
_PY_ALWAYS_DELETES = frozenset({"rmtree", "unlink", "rmdir", "removedirs", "truncate", "ftruncate"})
_PY_MODULE_DELETES = frozenset({"remove", "rename", "renames", "replace", "move"})  # str.replace, list.remove
_PY_WRITES = frozenset({"open", "write_text", "write_bytes", "touch", "mkdir", "makedirs", "symlink", "link",
                        "symlink_to", "hardlink_to", "copy", "copy2", "copyfile", "copytree", "chmod", "lchmod"})
_PY_HIDDEN = frozenset({"exec", "eval", "compile", "__import__", "getattr", "setattr", "delattr", "globals",
                        "locals", "vars", "import_module", "run_path", "run_module", "loads", "load"})
_PY_RUN_STRING = frozenset({"system", "popen", "getoutput", "getstatusoutput"})
_PY_RUN_ARGV = frozenset({"run", "call", "check_call", "check_output", "Popen", "spawnlp", "spawnvp", "execvp",
                          "execlp", "execv", "execl", "spawn"})
_PY_HIDING_MODULES = frozenset({"ctypes", "pty", "multiprocessing", "importlib", "pickle", "marshal", "runpy",
                                "code", "codeop", "cffi"})
_FILE_MODULES = frozenset({"os", "shutil", "pathlib", "subprocess", "posix"})


def grade_interpreter(g: Walk, name: str, args: list[str]) -> bool:
    """Grade ``name``'s inline code or standard input; False when it runs a script file instead (the
    caller grades that as running workspace code)."""
    options = INTERPRETERS[name]
    for index, arg in enumerate(args):
        code = args[index + 1] if index + 1 < len(args) else ""
        if arg in options:
            grade_foreign(g, name, code)
            return True
        if any(arg.startswith(o + "=") for o in options if o.startswith("--")):
            grade_foreign(g, name, arg.split("=", 1)[1])
            return True
        if name == "perl" and re.fullmatch(r"-[a-zA-Z]*[eE]", arg):
            grade_foreign(g, name, code)
            return True
        if arg in ("-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"):
            break
        if not arg.startswith("-"):
            return g.runs_written(arg, name)
    grade_stdin(g, name, "python" if name.startswith("python") else name)
    return True


def grade_stdin(g: Walk, name: str, language: str) -> None:
    """An interpreter given no program on its command line reads it from standard input."""
    if g.stdin == "text":
        if language == "python":
            grade_python(g, name, g.stdin_text)
        else:
            grade_foreign(g, name, g.stdin_text)
    elif g.stdin == "pipe":
        g.flag("unknown", f"{name} runs a program it reads from a pipe, which the grader does not see")
    else:  # a file, or the bash tool's empty input
        g.flag("workspace_write", f"{name} runs code from the workspace")


def grade_foreign(g: Walk, name: str, code: str) -> None:
    if re.search(r"\.git\b|hook", code, re.IGNORECASE):
        g.forbid(f"{name} code names .git or a hooks folder: it may plant what git runs on the host")
    found = _FOREIGN_DELETES.search(code)
    if found:
        g.flag("destructive", f"{name} code deletes files ({found.group()}); the grader cannot see which")
    g.flag("unknown", f"{name} code is not a language the grader reads")


def grade_python(g: Walk, name: str, code: str) -> None:
    if len(code) > _MAX_CODE_CHARS:
        g.flag("unknown", f"{name} code longer than the grader reads")
        return
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        g.flag("unknown", f"{name} code that does not parse as Python")
        return
    g.flag("workspace_write", f"{name} runs Python code")
    aliases = _aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if any(m.split(".")[0] in _PY_HIDING_MODULES for m in modules):
                g.flag("unknown", f"{name} code imports {', '.join(modules)}, which can run what the grader cannot see")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            g.flag("unknown", f"{name} code reaches {node.attr}, which hides what it calls")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            _constant_path(g, name, node.value)
        elif isinstance(node, ast.Call):
            _call(g, name, node, aliases)


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local names bound by imports: ``import shutil as s`` -> s: shutil; ``from os import remove``."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module or ''}.{alias.name}"
    return bound


def _call(g: Walk, name: str, node: ast.Call, aliases: dict[str, str]) -> None:
    func = node.func
    if isinstance(func, ast.Name):
        qualified = aliases.get(func.id, func.id)
    elif isinstance(func, ast.Attribute):
        receiver = func.value
        owner = aliases.get(receiver.id, receiver.id) if isinstance(receiver, ast.Name) else ""
        qualified = f"{owner}.{func.attr}" if owner else func.attr
    else:
        g.flag("unknown", f"{name} code calls a computed function")
        return
    module, _, short = qualified.rpartition(".")
    module_root = module.split(".")[0]
    strings = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    if short in _PY_HIDDEN:
        g.flag("unknown", f"{name} code calls {short}, which hides what runs")
    elif short in _PY_RUN_STRING and module_root in ("os", "subprocess", "posix", "commands"):
        _run(g, name, qualified, node, as_script=True)
    elif short in _PY_RUN_ARGV and module_root in ("os", "subprocess", "posix"):
        _run(g, name, qualified, node, as_script=False)
    elif short in _PY_ALWAYS_DELETES or short in _PY_MODULE_DELETES and (module_root in _FILE_MODULES
                                                                         or "Path" in module):
        _deletes(g, name, qualified, strings, recursive=short in ("rmtree", "removedirs", "move", "rename",
                                                                  "renames", "replace"))
    elif short in _PY_WRITES:
        if short == "open" and not _opens_for_writing(node):
            return
        for target in strings:
            g.writes([target], f"{name} code {short}")


def _opens_for_writing(node: ast.Call) -> bool:
    mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
    if mode is None:
        return False
    return not isinstance(mode, ast.Constant) or any(c in str(mode.value) for c in "wax+")


def _deletes(g: Walk, name: str, call: str, targets: list[str], *, recursive: bool) -> None:
    if not targets:
        g.flag("destructive", f"{name} code {call}() deletes paths computed when it runs")
        return
    g.writes(targets, f"{name} code {call}")
    for target in targets:
        for path in g.resolved(target):
            if not where.inside(g.root, path):
                g.flag("destructive", f"{name} code {call}({target!r}) deletes outside the workspace")
            elif recursive and where.covers_root(g.root, path):
                g.flag("destructive", f"{name} code {call}({target!r}) deletes the workspace root")
            elif where.has_glob(target):
                g.flag("destructive", f"{name} code {call}({target!r}) deletes what a pattern matches")
    g.flag("workspace_write", f"{name} code {call}() deletes files in the workspace")


def _run(g: Walk, name: str, call: str, node: ast.Call, *, as_script: bool) -> None:
    first = node.args[0] if node.args else None
    shell = any(k.arg == "shell" and isinstance(k.value, ast.Constant) and k.value.value for k in node.keywords)
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        g.nested(first.value if as_script or shell else shlex.join(first.value.split()),
                 f"{name} code {call}() runs a command")
    elif isinstance(first, (ast.List, ast.Tuple)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in first.elts) and first.elts:
        g.nested(shlex.join([e.value for e in first.elts]), f"{name} code {call}() runs a command")  # type: ignore[union-attr]
    else:
        g.flag("unknown", f"{name} code {call}() runs a command computed when it runs")


def _constant_path(g: Walk, name: str, text: str) -> None:
    """A string in the code that names a path outside the workspace (``'/etc/passwd'``, ``'../x'``)."""
    if len(text) < 2 or "\n" in text or " " in text:
        return
    if text.startswith(("/", "~", "../")) or text == "..":
        if g.outside(text):
            g.flag("unknown", f"{name} code names {text}, outside the workspace")
