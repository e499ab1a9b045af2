"""The walk over a bash syntax tree: statements, words, redirections and commands.

A ``Grader`` collects the most severe finding of one script (nested scripts of ``bash -c`` and
``eval`` included); what each command name means is in ``commands.py``, ``sed.py`` and ``git.py``.
Words count only when they are *literal*: fixed before the script runs (quotes and backslashes
resolved the way bash does). Anything expanded at run time makes the script unknown, and the commands
inside an expansion are graded too, so ``echo $(rm -rf /)`` reads as destructive.
"""

from __future__ import annotations

import posixpath
import re
import threading

from .commands import DEVICE_SINKS, SAFE_ENV, TEXT_ONLY, classify, operands
from .grades import SEVERITY, Level, RiskGrade

_MAX_SCRIPT_CHARS = 100_000
_MAX_NESTING = 3


_PARSERS = threading.local()  # a tree-sitter Parser must not be shared by threads


def _parser() -> object:
    parser = getattr(_PARSERS, "parser", None)
    if parser is None:
        import tree_sitter
        import tree_sitter_bash

        parser = _PARSERS.parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
    return parser


_CONTAINERS = frozenset({"program", "list", "pipeline", "subshell", "compound_statement", "negated_command",
                         "if_statement", "elif_clause", "else_clause", "while_statement", "do_group",
                         "redirected_statement"})
_TOKENS = frozenset({";", "&&", "||", "|", "|&", "\n", "(", ")", "{", "}", "!", "if", "then", "fi", "elif", "else",
                     "while", "until", "do", "done", "for", "in", "comment"})
_CONTINUATION_IN_WORD = re.compile(r"[^\s\\]\\\n")


class Grader:
    """The findings of one ``grade_command`` call: the worst level and its reason, the commands seen."""

    def __init__(self, workspace: str | None) -> None:
        self.workspace = workspace
        self.worst: tuple[int, str] = (0, "")
        self.found = False
        self.commands: list[str] = []
        self.depth = 0  # how many bash -c / eval strings deep the current script is

    def result(self) -> RiskGrade:
        severity, reason = self.worst
        level = next(name for name, value in SEVERITY.items() if value == severity)
        if not self.found:
            reason = "an empty script"
        elif not reason:
            reason = "only read-only commands: " + ", ".join(dict.fromkeys(self.commands))
        return RiskGrade(level, reason, tuple(dict.fromkeys(self.commands)))  # type: ignore[arg-type]

    def flag(self, level: Level, reason: str) -> None:
        if SEVERITY[level] > self.worst[0]:
            self.worst = (SEVERITY[level], reason)

    # -- scripts and statements --------------------------------------------------------------------

    def script(self, text: str, depth: int) -> None:
        if depth > _MAX_NESTING:
            self.flag("unknown", "scripts nested deeper than the grader follows")
            return
        if len(text) > _MAX_SCRIPT_CHARS:
            self.flag("unknown", "a script longer than the grader reads")
            return
        if "\0" in text:
            self.flag("unknown", "a NUL byte in the script")
            return
        if _CONTINUATION_IN_WORD.search(text):
            # bash joins "r\<newline>m" into one word; the parser splits it: refuse to guess
            self.flag("unknown", "a line continuation inside a word")
        tree = _parser().parse(text.encode())  # type: ignore[attr-defined]
        if tree.root_node.has_error:
            self.flag("unknown", "the script does not parse (syntax error or unsupported syntax)")
        self.depth = depth
        self.statement(tree.root_node)

    def statement(self, node: object) -> None:
        kind = node.type  # type: ignore[attr-defined]
        if kind in _CONTAINERS:
            for child in node.children:  # type: ignore[attr-defined]
                self.statement(child)
        elif kind == "command":
            self.command(node)
        elif kind in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
            self.redirect(node)
        elif kind == "&":
            self.flag("unknown", "& runs a command in the background")
        elif kind in _TOKENS or kind in ("until", "comment"):
            return
        elif kind == "for_statement":
            self.for_loop(node)
        elif kind == "test_command":
            self.found = True
            self.commands.append("test")
            self.words_only(node)
        elif kind == "variable_assignment":
            self.assignment(node, prefix=False)
        elif kind == "declaration_command":
            self.declaration(node)
        elif kind == "unset_command":
            self.found = True
        elif kind == "function_definition":
            self.function(node)
        else:
            self.flag("unknown", f"{_describe(kind)} cannot be graded")
            self.inner_commands(node)

    def inner_commands(self, node: object) -> None:
        """Grade the commands inside a construct that is itself unknown, so ``$(rm -rf /)`` still
        reads as destructive."""
        for child in node.children:  # type: ignore[attr-defined]
            if child.type in ("command", "list", "pipeline", "redirected_statement", "subshell"):
                self.statement(child)
            else:
                self.inner_commands(child)

    def for_loop(self, node: object) -> None:
        for child in node.children:  # type: ignore[attr-defined]
            if child.type == "do_group":
                self.statement(child)
            elif child.type in _TOKENS or child.type == "variable_name":
                continue
            elif self.literal(child) is None:
                self.non_literal(child)

    def words_only(self, node: object) -> None:
        for child in node.children:  # type: ignore[attr-defined]
            if child.type in _EXPANSIONS:
                self.non_literal(child)
            else:
                self.words_only(child)

    def function(self, node: object) -> None:
        name = node.child_by_field_name("name")  # type: ignore[attr-defined]
        body = node.child_by_field_name("body")  # type: ignore[attr-defined]
        label = name.text.decode(errors="replace") if name is not None else "?"
        if body is not None and label in _command_names(body):
            self.flag("destructive", f"function {label} calls itself: a fork bomb")
        else:
            self.flag("unknown", f"function {label}: its body runs wherever it is called")
        if body is not None:
            self.statement(body)

    def declaration(self, node: object) -> None:
        self.found = True
        for child in node.children[1:]:  # type: ignore[attr-defined]
            if child.type == "variable_assignment":
                self.assignment(child, prefix=False)
            elif child.type == "variable_name":
                continue
            else:
                keyword = node.children[0].type  # type: ignore[attr-defined]
                self.flag("unknown", f"{keyword} with options cannot be graded")

    def assignment(self, node: object, *, prefix: bool) -> None:
        self.found = True
        name_node = node.child_by_field_name("name")  # type: ignore[attr-defined]
        value = node.child_by_field_name("value")  # type: ignore[attr-defined]
        name = name_node.text.decode(errors="replace") if name_node is not None else "?"
        if value is not None and self.literal(value) is None:
            self.non_literal(value)
        # A lower-case shell variable means nothing to bash or to a program unless it is exported;
        # one set for a single command is exported to it, so only the known-harmless names pass there.
        if name not in SAFE_ENV and (prefix or not name.islower()):
            where = "for one command" if prefix else "in the shell"
            self.flag("unknown", f"setting {name} {where} can change what a command runs")

    # -- words ---------------------------------------------------------------------------------------

    def literal(self, node: object) -> str | None:
        """The text bash will see, when it is fixed before the script runs; None otherwise."""
        kind = node.type  # type: ignore[attr-defined]
        text = node.text.decode(errors="replace")  # type: ignore[attr-defined]
        if kind == "word" or kind == "number":
            return re.sub(r"\\(.)", r"\1", text, flags=re.S)
        if kind == "raw_string":
            return text[1:-1]
        if kind == "string":
            parts = []
            for child in node.children:  # type: ignore[attr-defined]
                if child.type == '"':
                    continue
                if child.type != "string_content":
                    return None
                parts.append(re.sub(r'\\([$`"\\\n])', r"\1", child.text.decode(errors="replace")))
            return "".join(parts)
        if kind == "concatenation":
            pieces = [self.literal(child) for child in node.children]  # type: ignore[attr-defined]
            return None if any(p is None for p in pieces) else "".join(pieces)  # type: ignore[arg-type]
        return None

    def non_literal(self, node: object) -> None:
        kind = node.type  # type: ignore[attr-defined]
        inner = [c for c in _walk(node) if c.type in _EXPANSIONS]
        what = _describe(inner[0].type) if inner else _describe(kind)
        self.flag("unknown", f"{what} is only known when the script runs")
        self.inner_commands(node)

    # -- redirections ----------------------------------------------------------------------------------

    def redirect(self, node: object) -> None:
        kind = node.type  # type: ignore[attr-defined]
        if kind == "herestring_redirect":
            for child in node.children[1:]:  # type: ignore[attr-defined]
                if self.literal(child) is None:
                    self.non_literal(child)
            return
        if kind == "heredoc_redirect":
            self.heredoc(node)
            return
        operator = next((c.type for c in node.children  # type: ignore[attr-defined]
                         if not c.is_named), "")
        destination = node.child_by_field_name("destination")  # type: ignore[attr-defined]
        if destination is None:
            return  # closing a descriptor: <&- >&-
        target = self.literal(destination)
        if target is None:
            self.non_literal(destination)
            return
        if operator in (">&", "<&") and (destination.type == "number" or target == "-"):
            return  # duplicating a descriptor: 2>&1
        writes = operator not in ("<", "<&")
        if writes and target.startswith("/dev/") and target not in DEVICE_SINKS:
            self.flag("destructive", f"{operator} {target} writes to a device")
        elif self.outside(target):
            self.flag("unknown", f"{operator} {target} is outside the workspace")
        elif writes and target not in DEVICE_SINKS:
            self.flag("workspace_write", f"{operator} {target} writes a file in the workspace")

    def heredoc(self, node: object) -> None:
        start = next((c for c in node.children if c.type == "heredoc_start"), None)  # type: ignore[attr-defined]
        quoted = start is not None and any(q in start.text.decode() for q in ("'", '"', "\\"))
        for child in node.children:  # type: ignore[attr-defined]
            if child.type == "heredoc_body":
                if not quoted and any(ch in child.text.decode(errors="replace") for ch in "$`"):
                    self.flag("unknown", "a here-document whose text is expanded when it runs")
                    self.inner_commands(child)
            elif child.type in ("heredoc_start", "heredoc_end", "<<", "<<-"):
                continue
            else:
                self.statement(child)

    # -- commands --------------------------------------------------------------------------------------

    def command(self, node: object) -> None:
        self.found = True
        name_node = node.child_by_field_name("name")  # type: ignore[attr-defined]
        args: list[str] = []
        for child in node.children:  # type: ignore[attr-defined]
            if child.type == "variable_assignment":
                self.assignment(child, prefix=True)
            elif child.type in ("file_redirect", "herestring_redirect", "heredoc_redirect"):
                self.redirect(child)
            elif child.type not in ("command_name", "comment") and child.is_named:
                value = self.literal(child)
                if value is None:
                    self.non_literal(child)
                    value = "\0expanded"
                args.append(value)
        if name_node is None:
            return
        name = self.literal(name_node.children[0]) if name_node.children else None  # type: ignore[attr-defined]
        if name is None:
            self.non_literal(name_node)
            return
        self.invocation(name, args)

    def invocation(self, name: str, args: list[str]) -> None:
        """Grade one command given as words (also used for the inner command of a wrapper)."""
        if "/" in name:
            base = posixpath.basename(name)
            directory = posixpath.dirname(name)
            if directory in ("/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin"):
                name = base
            elif self.outside(name):
                self.commands.append(name)
                self.flag("unknown", f"{name} is a program outside the workspace")
                return
            else:
                self.commands.append(name)
                self.flag("workspace_write", f"{name} runs a program from the workspace")
                self.paths(name, args)
                return
        self.commands.append(name)
        classify(self, name, args)
        if name not in TEXT_ONLY:
            self.paths(name, operands(name, args))

    def paths(self, name: str, operands: list[str]) -> None:
        for arg in operands:
            for candidate in _path_candidates(arg):
                if self.outside(candidate):
                    self.flag("unknown", f"{name} {arg}: a path outside the workspace")
                    return

    def outside(self, path: str) -> bool:
        if path.startswith("~"):
            return True
        if path.startswith("/"):
            if path in DEVICE_SINKS or path == "/tmp" or path.startswith("/tmp/"):
                return False
            return not (self.workspace and (path == self.workspace or path.startswith(self.workspace + "/")))
        normal = posixpath.normpath(path)
        return normal == ".." or normal.startswith("../")

    def nested(self, script: str, why: str) -> None:
        self.flag("unknown", why)
        depth = self.depth
        self.script(script, depth + 1)
        self.depth = depth


_EXPANSIONS = frozenset({"command_substitution", "process_substitution", "simple_expansion", "expansion",
                         "arithmetic_expansion", "ansi_c_string", "translated_string", "brace_expression"})


def _describe(kind: str) -> str:
    return {"command_substitution": "a command substitution ($(...) or backticks)",
            "process_substitution": "a process substitution (<(...) or >(...))",
            "simple_expansion": "a variable expansion ($VAR)", "expansion": "a parameter expansion (${...})",
            "arithmetic_expansion": "an arithmetic expansion ($((...)))",
            "ansi_c_string": "an ANSI-C string ($'...')", "case_statement": "a case statement",
            "c_style_for_statement": "a C-style for loop", "ERROR": "text the parser could not read",
            }.get(kind, f"a {kind.replace('_', ' ')}")


def _walk(node: object) -> list[object]:
    out = [node]
    for child in node.children:  # type: ignore[attr-defined]
        out += _walk(child)
    return out


def _command_names(node: object) -> set[str]:
    names = set()
    for child in _walk(node):
        if child.type == "command_name":  # type: ignore[attr-defined]
            names.add(child.text.decode(errors="replace"))  # type: ignore[attr-defined]
    return names


def _path_candidates(arg: str) -> list[str]:
    """The parts of one argument that bash may use as a path: the argument, the value of
    ``--opt=value``, an attached short-option value (``-o/etc/x``), and brace alternatives."""
    candidates = [arg]
    if "=" in arg:  # --opt=value, and key=value operands (dd if=..., make CC=...)
        candidates.append(arg.split("=", 1)[1])
    elif arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
        candidates.append(arg[2:])
    if "{" in arg and ("," in arg or ".." in arg):
        candidates += [part for part in re.split(r"[{},]", arg) if part]
    return candidates
