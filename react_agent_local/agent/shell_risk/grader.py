"""The walk over a bash syntax tree: statements, words, redirections, commands and the working folder.

A ``Grader`` collects the most severe finding of one script (nested scripts of ``bash -c`` and
``eval`` included); what each command name means is in ``commands.py``, ``files.py``, ``sed.py``,
``git.py`` and ``inline_code.py``. Words count only when they are *literal*: fixed before the script
runs (quotes and backslashes resolved the way bash does). Anything expanded at run time makes the
script unknown, and the commands inside an expansion are graded too, so ``echo $(rm -rf /)`` reads as
destructive.

Paths are judged after normalising (``paths.py``): the walk follows the working folder through the
script as a set of the folders it may be in: ``cd X`` moves it, but a ``cd`` may fail, so after
``cd X; cmd`` both the old and the new folder count, while after ``cd X && cmd`` only the new one
does. Subshells, pipeline parts and command substitutions keep their ``cd`` to themselves; a ``cd``
inside a loop makes the folder unknown. Every finding's reason ends with the words of the command it
is about, quoted and made printable, so an approval card can show which part of a script it means.
"""

from __future__ import annotations

import re
import threading
from typing import Literal

from agent.shell_risk import paths as where
from agent.shell_risk.commands import SAFE_ENV, TEXT_ONLY, classify, operands
from agent.shell_risk.grades import SEVERITY, Level, RiskGrade, StdinKind
from agent.shell_risk.inline_code import grade_foreign, grade_python

_MAX_SCRIPT_CHARS = 100_000
_MAX_NESTING = 3
_MAX_CITED_CHARS = 160
_MAX_FOLDERS = 16


_PARSERS = threading.local()  # a tree-sitter Parser must not be shared by threads


def _parser() -> object:
    parser = getattr(_PARSERS, "parser", None)
    if parser is None:
        import tree_sitter
        import tree_sitter_bash

        parser = _PARSERS.parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
    return parser


_CONTAINERS = frozenset({"program", "compound_statement", "negated_command", "if_statement", "elif_clause",
                         "else_clause", "do_group"})
_TOKENS = frozenset({";", "&&", "||", "|", "|&", "\n", "(", ")", "{", "}", "!", "if", "then", "fi", "elif", "else",
                     "while", "until", "do", "done", "for", "in", "comment"})
_CONTINUATION_IN_WORD = re.compile(r"[^\s\\]\\\n")
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
_BIN_DIRS = ("/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin")


def printable(text: str) -> str:
    """One line with whitespace runs folded and control, escape and bidi characters written as
    visible escapes, so a reason cannot redraw a terminal prompt or reorder a card."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode(), " ".join(text.split()))


def cite(text: str) -> str:
    """Command words for a reason: printable, a long text cut with a mark."""
    line = printable(text)
    return line if len(line) <= _MAX_CITED_CHARS else line[:_MAX_CITED_CHARS - 1] + "…"


class Grader:
    """The findings of one ``grade_command`` call: the worst level and its reason, the commands seen,
    the folders the script may be in at the current point of the walk."""

    def __init__(self, workspace: str | None) -> None:
        self.root = workspace or where.UNNAMED_ROOT
        self.worst: tuple[int, str] = (0, "")
        self.forbidden: str | None = None
        self.found = False
        self.commands: list[str] = []
        self.depth = 0  # how many bash -c / eval strings deep the current script is
        self.cwds: frozenset[str] = frozenset({self.root})
        """The folders the next statement may start in."""
        self.failed: frozenset[str] = self.cwds
        """The folders the script is in if the last statement failed (a failed ``cd`` stays put)."""
        self.part = ""  # the words of the command being graded, for reasons
        self.stdin: StdinKind = "empty"  # the bash tool gives a command no input
        self.stdin_text = ""
        self.written: dict[str, str | None] = {}
        """Files this script writes, with their text where it is literal (``cat > x.sh <<'EOF'``), so
        running one later in the script grades what it holds."""
        self.output_text: str | None = None  # the literal output of the command being redirected
        self.last_output: str | None = None  # the literal output of the last simple command, if known

    def result(self) -> RiskGrade:
        severity, reason = self.worst
        level = next(name for name, value in SEVERITY.items() if value == severity)
        if self.forbidden is not None:
            return RiskGrade("destructive", self.forbidden, tuple(dict.fromkeys(self.commands)), forbidden=True)
        if not self.found:
            reason = "an empty script"
        elif not reason:
            reason = "only read-only commands: " + ", ".join(dict.fromkeys(self.commands))
        return RiskGrade(level, reason, tuple(dict.fromkeys(self.commands)))  # type: ignore[arg-type]

    def flag(self, level: Level, reason: str) -> None:
        if SEVERITY[level] > self.worst[0]:
            self.worst = (SEVERITY[level], self.cited(reason))

    def forbid(self, reason: str) -> None:
        """A finding no policy may allow: the command would make git run a program on the host later."""
        if self.forbidden is None:
            self.forbidden = self.cited(reason)
        self.flag("destructive", reason)

    def cited(self, reason: str) -> str:
        part, reason = cite(self.part), printable(reason)
        return f"{reason}: `{part}`" if part and f"`{part}`" not in reason else reason

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
                self.cwds = self.failed = self.cwds | self.failed  # each part may follow a failure
                self.statement(child)
            if kind not in ("program", "compound_statement"):
                # an if may skip its body, a ! swaps success and failure: either outcome may follow
                self.cwds = self.failed = self.cwds | self.failed
        elif kind == "list":
            self.chain(node)
        elif kind in ("pipeline", "subshell"):
            self.isolated(node)
        elif kind == "redirected_statement":
            self.redirected(node)
        elif kind == "while_statement":
            self.loop(node)
        elif kind == "command":
            self.command(node)
        elif kind in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
            self.redirect(node)
        elif kind == "&":
            self.flag("unknown", "& runs a command in the background")
        elif kind in _TOKENS or kind in ("until", "comment"):
            return
        elif kind == "for_statement":
            self.loop(node)
        elif kind == "test_command":
            self.found = True
            self.commands.append("test")
            self.part = node.text.decode(errors="replace")  # type: ignore[attr-defined]
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

    def chain(self, node: object) -> None:
        """``A && B`` runs B only where A succeeded, ``A || B`` only where it failed: B starts in the
        folders of that outcome."""
        children = [c for c in node.children if c.type != "comment"]  # type: ignore[attr-defined]
        if len(children) != 3 or children[1].type not in ("&&", "||"):
            for child in children:  # an unparsed remnant (already graded unknown): keep every outcome
                self.cwds = self.failed = self.cwds | self.failed
                self.statement(child)
            return
        left, operator, right = children[0], children[1].type, children[-1]
        self.statement(left)
        succeeded, failed = self.cwds, self.failed
        self.cwds = self.failed = succeeded if operator == "&&" else failed
        self.statement(right)
        if operator == "&&":
            self.failed = self.failed | failed
        else:
            self.cwds = self.cwds | succeeded

    def isolated(self, node: object) -> None:
        """A subshell, or a pipeline whose parts each run in one: their ``cd`` ends with them."""
        before, stdin = self.cwds | self.failed, (self.stdin, self.stdin_text)
        subshell = node.type == "subshell"  # type: ignore[attr-defined]
        for child in node.children:  # type: ignore[attr-defined]
            if child.type in ("|", "|&"):
                self.stdin, self.stdin_text = "pipe", ""
            if not subshell:
                self.cwds = self.failed = before
            else:  # inside ( ... ) statements follow one another as in a script
                self.cwds = self.failed = self.cwds | self.failed
            self.statement(child)
        self.cwds = self.failed = before
        self.stdin, self.stdin_text = stdin

    def redirected(self, node: object) -> None:
        """A statement with redirections: what they feed its standard input matters to an interpreter
        (``python3 - <<'PY'`` runs the here-document)."""
        stdin = (self.stdin, self.stdin_text)
        for child in node.children[1:]:  # type: ignore[attr-defined]
            if child.type == "heredoc_redirect":
                body = next((c for c in child.children if c.type == "heredoc_body"), None)
                self.stdin, self.stdin_text = "text", body.text.decode(errors="replace") if body is not None else ""
            elif child.type == "file_redirect" and any(c.type == "<" for c in child.children):
                self.stdin, self.stdin_text = "file", ""
        body, *redirects = node.children  # type: ignore[attr-defined]
        self.last_output = None
        self.statement(body)
        self.output_text = self.last_output if body.type == "command" else None
        self.stdin, self.stdin_text = stdin
        for child in redirects:
            self.part = (node if body.type == "command" else child).text.decode(errors="replace")
            self.statement(child)

    def loop(self, node: object) -> None:
        before = self.cwds | self.failed
        if node.type == "for_statement":  # type: ignore[attr-defined]
            self.for_loop(node)
        else:
            for child in node.children:  # type: ignore[attr-defined]
                self.statement(child)
        if self.cwds | self.failed != before:
            self.flag("unknown", "cd inside a loop: the working folder cannot be followed")
            before = frozenset({where.UNKNOWN_DIR})
        self.cwds = self.failed = before

    def inner_commands(self, node: object) -> None:
        """Grade the commands inside a construct that is itself unknown, so ``$(rm -rf /)`` still
        reads as destructive; they run in a subshell, so their ``cd`` stays inside."""
        before, part = self.cwds | self.failed, self.part
        for child in node.children:  # type: ignore[attr-defined]
            if child.type in ("command", "list", "pipeline", "redirected_statement", "subshell"):
                self.statement(child)
            else:
                self.inner_commands(child)
        self.cwds = self.failed = before
        self.part = part

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
        self.part = f"{label}()"
        if body is not None and label in _command_names(body):
            self.flag("destructive", f"function {label} calls itself: a fork bomb")
        else:
            self.flag("unknown", f"function {label}: its body runs wherever it is called")
        if body is not None:
            before = self.cwds | self.failed
            self.statement(body)
            moved = self.cwds | self.failed != before
            # a call may come anywhere later: a body that moves the folder leaves it unknown
            self.cwds = self.failed = frozenset({where.UNKNOWN_DIR}) if moved else before

    def declaration(self, node: object) -> None:
        self.found = True
        self.part = node.text.decode(errors="replace")  # type: ignore[attr-defined]
        for child in node.children[1:]:  # type: ignore[attr-defined]
            if child.type == "variable_assignment":
                self.assignment(child, prefix=False)
            elif child.type == "variable_name":
                self.assignment(child, prefix=False)
            else:
                keyword = node.children[0].type  # type: ignore[attr-defined]
                self.flag("unknown", f"{keyword} with options cannot be graded")

    def assignment(self, node: object, *, prefix: bool) -> None:
        self.found = True
        if not prefix:
            self.part = node.text.decode(errors="replace")  # type: ignore[attr-defined]
        if node.type == "variable_name":  # type: ignore[attr-defined]
            name_node, value = node, None
        else:
            name_node = node.child_by_field_name("name")  # type: ignore[attr-defined]
            value = node.child_by_field_name("value")  # type: ignore[attr-defined]
        name = name_node.text.decode(errors="replace") if name_node is not None else "?"
        if value is not None and self.literal(value) is None:
            self.non_literal(value)
        if name.startswith("GIT_CONFIG"):
            self.forbid(f"setting {name} gives git config keys that may name a program to run")
        # A lower-case shell variable means nothing to bash or to a program unless it is exported;
        # one set for a single command is exported to it, so only the known-harmless names pass there.
        elif name not in SAFE_ENV and (prefix or not name.islower()) and node.type != "variable_name":  # type: ignore[attr-defined]
            where_set = "for one command" if prefix else "in the shell"
            self.flag("unknown", f"setting {name} {where_set} can change what a command runs")

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
            if any(c.type not in ('"', "string_content") for c in node.children):  # type: ignore[attr-defined]
                return None
            # from the source, not the parts: the parser leaves the newlines between parts out
            return re.sub(r'\\([$`"\\\n])', r"\1", text[1:-1])
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
        resolved = self.resolved(target)
        if writes:
            self.writes([target], f"{operator} {target}")
            for path in resolved:
                if path is not None:
                    self.written[path] = self.output_text if operator in (">", ">|") else None
        if any(p is not None and p.startswith(("/dev/tcp/", "/dev/udp/")) for p in resolved):
            self.flag("network", f"{operator} {target} opens a network connection (bash's /dev/tcp)")
        elif writes and any(p is not None and p.startswith("/dev/") and p not in where.DEVICE_SINKS
                            for p in resolved):
            self.flag("destructive", f"{operator} {target} writes to a device")
        elif self.outside(target):
            self.flag("unknown", f"{operator} {target}: {self.real(target)}, outside the workspace")
        elif writes and not all(p in where.DEVICE_SINKS for p in resolved):
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
        self.failed = self.cwds
        self.part = node.text.decode(errors="replace")  # type: ignore[attr-defined]
        name_node = node.child_by_field_name("name")  # type: ignore[attr-defined]
        args: list[str] = []
        stdin = (self.stdin, self.stdin_text)
        echo = name_node is not None and name_node.text == b"echo"  # type: ignore[attr-defined]
        for child in node.children:  # type: ignore[attr-defined]
            self.output_text = _echoed(args) if echo else None
            if child.type == "variable_assignment":
                self.assignment(child, prefix=True)
            elif child.type in ("file_redirect", "herestring_redirect", "heredoc_redirect"):
                if child.type == "herestring_redirect":
                    text = [self.literal(c) for c in child.children[1:]]
                    self.stdin, self.stdin_text = ("text", f"{text[0]}\n") if text and text[0] is not None \
                        else ("pipe", "")
                elif any(c.type == "<" for c in child.children):
                    self.stdin, self.stdin_text = "file", ""
                self.redirect(child)
            elif child.type not in ("command_name", "comment") and child.is_named:
                value = self.literal(child)
                if value is None:
                    self.non_literal(child)
                    value = "\0expanded"
                args.append(value)
        if name_node is not None:
            name = self.literal(name_node.children[0]) if name_node.children else None  # type: ignore[attr-defined]
            if name is None:
                self.non_literal(name_node)
            else:
                self.part = node.text.decode(errors="replace")  # type: ignore[attr-defined]
                self.invocation(name, args)
        cat = name_node is not None and name_node.text == b"cat" and not args  # type: ignore[attr-defined]
        self.last_output = _echoed(args) if echo else self.stdin_text if cat and self.stdin == "text" else None
        self.stdin, self.stdin_text = stdin

    def invocation(self, name: str, args: list[str]) -> None:
        """Grade one command given as words (also used for the inner command of a wrapper)."""
        if "/" in name and self.runs_written(name, "shell"):
            self.commands.append(name)
            return
        if "/" in name:
            program = self.resolved(name)
            if all(p is not None and _dirname(p) in _BIN_DIRS for p in program):
                name = name.rsplit("/", 1)[1]
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

    # -- paths and the working folder ----------------------------------------------------------------

    def resolved(self, path: str) -> list[str | None]:
        """Where ``path`` points from each folder the script may be in (None: not knowable)."""
        if path.startswith("\0"):
            return [None]
        return [where.resolve(cwd, path) for cwd in sorted(self.cwds)]

    def outside(self, path: str) -> bool:
        return not all(where.inside(self.root, p) for p in self.resolved(path))

    def paths(self, name: str, operands: list[str]) -> None:
        for arg in operands:
            if arg.startswith("\0"):
                continue  # an expansion, already graded unknown
            for candidate in where.candidates(arg):
                if self.outside(candidate):
                    self.flag("unknown", f"{name} {arg}: {self.real(candidate)}, outside the workspace")
                    return

    def real(self, path: str) -> str:
        """Where a path outside the workspace really points, for a reason: ``/tmp/../etc`` is /etc."""
        if path.startswith("~"):
            return "in the home folder"
        found = [p for p in self.resolved(path) if not where.inside(self.root, p)]
        if not found or found[0] is None:
            return "from a folder known only when the script runs"
        return "the file system root" if found[0] == "/" else found[0]

    def change_directory(self, target: str | None) -> None:
        """``cd target``: where it succeeds the script moves there; where it fails it stays."""
        before = self.cwds
        if target is None or target.startswith("\0"):
            self.cwds = frozenset({where.UNKNOWN_DIR})
        else:
            self.cwds = frozenset(p if p is not None else where.UNKNOWN_DIR for p in self.resolved(target))
        self.failed = before
        if len(self.cwds | self.failed) > _MAX_FOLDERS:  # each cd that may fail doubles the set
            self.flag("unknown", "more cd commands than the grader follows")
            self.cwds = self.failed = frozenset({where.UNKNOWN_DIR})

    def writes(self, targets: list[str], what: str) -> None:
        """Paths a command creates or changes: none may be where git finds programs to run."""
        for target in targets:
            for path in self.resolved(target):
                hazard = where.git_hazard(path)
                if hazard is not None:
                    self.forbid(f"{what} writes {where.shown(self.root, path)}, inside {hazard}")
                    return

    def runs_written(self, path: str, language: str) -> bool:
        """Grade running a file this script wrote: its literal text as a script, or unknown. False when
        the script did not write it (the caller grades it as a workspace file)."""
        texts = [self.written[p] for p in self.resolved(path) if p is not None and p in self.written]
        if not texts:
            return False
        self.flag("unknown", f"{path} is a file this script writes and then runs")
        for text in texts:
            first = text.split("\n", 1)[0] if text else ""
            if text is None:
                self.flag("unknown", f"{path} was written with text the grader cannot follow")
            elif language == "python" or first.startswith("#!") and "python" in first:
                grade_python(self, path, text)
            elif language == "shell" and not (first.startswith("#!") and not re.search(r"\b(ba|da|z|k)?sh\b", first)):
                self.nested(text, f"{path} runs the script written above")
            else:
                grade_foreign(self, path, text)
        return True

    def nested(self, script: str, why: str, *, shell: Literal["child", "same", "later"] = "child") -> None:
        """Grade a script inside this one. ``shell``: where it runs: a child process (``bash -c``: its
        ``cd`` ends with it), this shell now (``eval``: its ``cd`` stays), or this shell at some later
        point (an alias, a trap: if it moves the folder, the folder is unknown from here on)."""
        self.flag("unknown", why)
        depth, part, before = self.depth, self.part, self.cwds | self.failed
        self.script(script, depth + 1)
        self.depth, self.part = depth, part
        moved = self.cwds | self.failed != before
        if shell == "child" or shell == "later" and not moved:
            self.cwds = self.failed = before
        elif shell == "later":
            self.cwds = self.failed = frozenset({where.UNKNOWN_DIR})


def _echoed(args: list[str]) -> str | None:
    """What ``echo`` prints, when its words are literal and it takes no options."""
    if any(a.startswith("\0") or a.startswith("-") for a in args[:1]) or any(a.startswith("\0") for a in args):
        return None
    return " ".join(args) + "\n"


def _dirname(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


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
