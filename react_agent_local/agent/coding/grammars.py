"""The argument grammars of the coding steps: the diagnosis of a one-line fix, a function's def line
as it must stay, and text that differs from what failed before, as JSON-schema patterns."""

from __future__ import annotations

import re
import textwrap
from typing import Any, Iterable

from agent.coding.source_lines import PROSE_QUOTES, STUB_LINES, head_lines, line_variants, blamable_lines


#: a guided edit's new text: room for a few lines, never a runaway to the token limit (a small model's
#: re-asked edit can run on, digit by digit), and no indentation of its own -- old is a line without
#: its indentation, which the file keeps (a model's own indentation of the new line breaks the file)
MAX_NEW_CHARS = 160


# (llguidance drops maxLength beside a pattern, so the pattern bounds the length itself)
NEW_SCHEMA = {"type": "string", "maxLength": MAX_NEW_CHARS, "pattern": rf"^\S[\s\S]{{0,{MAX_NEW_CHARS - 1}}}$"}


_DIAGNOSIS = re.compile(r"^The wrong line is `(.*?)`; it must be `(.*)`$")


def parse_diagnosis(diagnosis: str) -> tuple[str, str] | None:
    """(wrong line, fix) of a diagnosis in the fixed form (``diagnosis_schema``), else None."""
    m = _DIAGNOSIS.match(diagnosis or "")
    return (m.group(1), m.group(2)) if m and m.group(2).strip() else None


#: a guided diagnosis: one line, never a runaway (the pattern bounds the length: see NEW_SCHEMA)
DIAGNOSIS_SCHEMA = {"type": "string", "pattern": r"^[A-Za-z`][^\n]{0,159}$"}


#: the fixed line a diagnosis proposes: at most about this many characters
MAX_DIAGNOSIS_FIX = 150


def diagnosis_schema(source: str, tried: list[str] = (), cleared: list[str] = ()) -> dict[str, Any]:
    """The diagnosis in a fixed form: which of the function's own lines is wrong (one of them, as
    the file has it, and not one ``cleared`` -- fixed ``BLAME_LIMIT`` ways already, each failing --
    while another is left) and what it must be instead -- neither that line unchanged, nor a copy of
    another of its lines, nor a fix already ``tried`` -- before the source is written (asked for the
    source straight away or for a free diagnosis, a small model names the wrong line but copies it
    unchanged)."""
    lines = blamable_lines(source)
    choices = [line for line in lines if line not in cleared] or lines
    if not choices:
        return DIAGNOSIS_SCHEMA
    options = []
    for line in choices:
        # the fix ends at its closing backtick (unbounded, a model writes on in prose past it)
        # a fix already tried is excluded with its trivial variants too (a ';' added or a ':' left
        # out is the same failed fix again); so is a copy of another line of the function, which
        # leaves one of the two dead (and passes any test that never reaches the dead branch)
        others = [other for other in lines if other != line]
        known = [variant for text in (line, *tried, *others) for variant in line_variants(text)]
        failed = [variant for text in tried for variant in line_variants(text)]
        new = differs_from(list(dict.fromkeys(known)), MAX_DIAGNOSIS_FIX, exclude="`\n" + PROSE_QUOTES, closed=failed)[1:-1]
        options.append(f"{_literal(line)}`; it must be `{new}")
    return {"type": "string", "pattern": "^The wrong line is `(?:" + "|".join(options) + ")`$"}


def def_line_pattern(source: str, written: bool = False) -> str:
    """A new definition starts as the old one does: its def line and its docstring (the signature is
    not the bug, and the docstring is the spec the fix is written against: a model that drops it
    has nothing left to find the code wrong against), when a pattern can hold them (a
    function's source is written as raw text -- a code block or a code turn -- so a backslash in it
    is one character of the pattern like any other), and ends where the function does (``BODY_LINE``);
    else with any text."""
    head = head_lines(source)
    if head:
        if written:
            # ``written``: the body is to be written, so its first line is no stub statement (a
            # model shown a stub copies ``raise NotImplementedError`` back)
            lines = textwrap.dedent(source).splitlines()
            body = lines[len(head)] if len(lines) > len(head) else "    "
            indent = body[:len(body) - len(body.lstrip())] or "    "
            first = differs_from(list(STUB_LINES), 200, exclude="\n")[1:-1]
            return "^" + _literal("\n".join(head)) + "\\n" + _literal(indent) + first + BODY_LINES + "$"
        return "^" + _literal("\n".join(head)) + "\\n" + BODY_LINE + BODY_LINES + "$"
    return "^[\\s\\S]*$"


#: a line of a function's body after its def line: blank, indented or a comment -- never a statement of
#: the module (asked for "a self-contained script", a model writes calls after its definition, and the
#: definition would be refused for the statements after it)
BODY_LINE = "(?:[ \\t#][^\\n]*)?"


BODY_LINES = "(?:\\n" + BODY_LINE + ")*"


_META = set("\\.+*?()|[]{}^$#&-~")


#: the longest string ``differs_from`` excludes (see there)
MAX_EXCLUDED_CHARS = 48


def _literal(text: str) -> str:
    return "".join("\\" + c if c in _META else c for c in text)


#: After a line ``differs_from`` closes, what may not follow: these characters at all, and these
#: characters followed by one of their own (a failed fix with prose after it is the same fix again:
#: "`x - 1; otherwise ...`", "`x - 1 because ...`").
CLOSED_AFTER = ";'"


CLOSED_THEN = {" ": "A-Za-z", ".": " "}


def differs_from(lines: list[str], limit: int, exclude: str = "", closed: Iterable[str] = ()) -> str:
    """A regular expression for a string that starts with a non-space, is at most about ``limit``
    characters long, holds none of the characters in ``exclude`` and equals none of ``lines`` (but
    those with a quote or backslash): the complement of a finite set, written along the trie of
    ``lines`` (a string either ends early, leaves the trie at some character, or goes on past the
    end of a line), so its size grows with the lines' length, not its square. A line of ``closed``
    (one of ``lines``) may not go on with prose either (``CLOSED_AFTER``, ``CLOSED_THEN``)."""
    trie: dict[str, Any] = {}
    shut = set(closed)
    # llguidance lets a JSON escape (\" or \\) through any character class, so a line holding a
    # quote or a backslash cannot be excluded this way (edit_file still refuses old == new); nor can
    # a line longer than ``MAX_EXCLUDED_CHARS``: a deep trie of bounded tails is past what llguidance
    # compiles, and a grammar that does not compile constrains nothing (the diagnosis is then written
    # unconstrained, and may be no JSON at all)
    for line in (line for line in lines if '"' not in line and "\\" not in line and len(line) <= MAX_EXCLUDED_CHARS):
        node = trie
        for c in line:
            node = node.setdefault(c, {})
        node[""] = {}  # the end of a line
        if line in shut:
            node["\0"] = {}  # closed: no prose after it

    banned = "".join(_literal(c) if c != "\n" else "\\n" for c in exclude)
    tail = (f"[^{banned}]" if banned else "[\\s\\S]") + f"{{0,{limit - 1}}}"

    def branch(node: dict[str, Any], root: bool, ban: str = "") -> str:
        shut_here = "\0" in node
        children = [c for c in node if c and c != "\0" and not (shut_here and c in CLOSED_AFTER)
                    and not (ban and re.fullmatch(f"[{ban}]", c))]
        nexts = {c: CLOSED_THEN[c] for c in CLOSED_THEN if shut_here}
        options = []
        if not root and "" not in node:
            options.append("")  # ends early: a proper prefix of a line
        leave = "".join(_literal(c) for c in children) + "".join(_literal(c) for c in nexts)
        leave += ("".join(_literal(c) for c in CLOSED_AFTER) if shut_here else "") + ban
        if root:
            options.append(f"[^\\s{leave}{banned}]{tail}")
        else:
            options.append((f"[^{leave}{banned}]" if leave or banned else "[\\s\\S]") + tail)
        options += [_literal(c) + branch(node[c], False, nexts.get(c, "")) for c in children]
        options += [_literal(c) + branch({}, False, then) for c, then in nexts.items() if c not in children]
        return "(?:" + "|".join(options) + ")"

    return "^" + branch(trie, True) + "$"
