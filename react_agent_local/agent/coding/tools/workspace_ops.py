"""File operations inside one workspace folder, resolved path by path through directory descriptors.

Standard library only, and no import from the package: the file tools run this module's source as a
script inside the sandbox (``python -I -S -c SOURCE``, one JSON request on stdin, one JSON reply on
stdout), and the runtime calls the same functions in-process for its own reads of the workspace
(the files' digest, the lines an edit may replace). So the rules below hold on both sides.

Paths are workspace-relative, ``/``-separated. A path is refused before anything is opened when it
is absolute, holds ``..``, a NUL or a backslash; then every component is opened with ``openat``
(``dir_fd``) and ``O_NOFOLLOW``, so a symbolic link anywhere on the path -- planted in the workspace,
or swapped in for a file between a check and its use -- is refused by the kernel, never followed
(``Path.resolve`` followed by a string check would be racy). Regular files only; a file with more
than one hard link is refused too (writing it would change a file outside the workspace). Writes go
to a new file in the same folder that is renamed over the target: they never write through whatever
the name pointed at.

Errors are ``OpError(code, message)`` with a message the model can act on.
"""

from __future__ import annotations

import ast
import difflib
import errno
import fnmatch
import hashlib
import json
import os
import re
import secrets
import stat
import sys
from typing import Any, Iterator

MAX_READ_FILE_BYTES = 2 << 20  # read_file/edit_file refuse larger files (grep skips them)
MAX_SHOWN_LINES = 400
MAX_SHOWN_CHARS = 24_000
MAX_LINE_CHARS = 400
MAX_WRITE_BYTES = 512 << 10
MAX_GLOB_RESULTS = 200
MAX_GREP_MATCHES = 100
MAX_WALK_ENTRIES = 20_000
MAX_DIGEST_BYTES = 64 << 20
MAX_PATH_CHARS = 1024
MAX_DEPTH = 32
BINARY_SNIFF = 8192
#: folders no listing or search walks into (a repository's history, caches the tests leave)
SKIPPED_DIRS = frozenset({".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
#: what the workspace digest leaves out: files that running Python or the tests create by themselves
_CACHE_SUFFIXES = (".pyc", ".pyo")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class OpError(Exception):
    """An operation was refused or failed; ``message`` says why in words the model can act on."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


# -- paths ------------------------------------------------------------------------------------

def split_path(path: Any, *, allow_root: bool = False) -> list[str]:
    """The components of a workspace-relative path; OpError ``path_refused`` for anything else."""
    if not isinstance(path, str):
        raise OpError("path_refused", "a path must be a string")
    if "\x00" in path:
        raise OpError("path_refused", "a path must not contain NUL")
    if len(path) > MAX_PATH_CHARS:
        raise OpError("path_refused", f"a path has at most {MAX_PATH_CHARS} characters")
    if path.startswith("/") or path.startswith("~"):
        raise OpError("path_refused", f"'{path}' is not relative: paths are relative to the workspace, e.g. src/app.py")
    if "\\" in path:
        raise OpError("path_refused", "write paths with '/', not '\\'")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise OpError("path_refused", f"'{path}' leaves the workspace ('..' is not allowed)")
    if len(parts) > MAX_DEPTH:
        raise OpError("path_refused", f"a path has at most {MAX_DEPTH} components")
    if not parts and not allow_root:
        raise OpError("path_refused", "the path names the workspace itself, not a file")
    return parts


def _refusal(exc: OSError, shown: str) -> OpError:
    if exc.errno in (errno.ELOOP, errno.EMLINK):
        return OpError("symlink_refused", f"'{shown}' is a symbolic link; the workspace tools never follow links")
    if exc.errno == errno.ENOTDIR:
        return OpError("not_a_directory", f"'{shown}' is not a folder")
    if exc.errno == errno.ENOENT:
        return OpError("not_found", f"'{shown}' does not exist")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return OpError("permission_denied", f"'{shown}' cannot be accessed here (read-only or not permitted)")
    return OpError("io_error", f"'{shown}': {os.strerror(exc.errno or 0)}")


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_dir(root_fd: int, parts: list[str], *, create: bool = False) -> int:
    """A descriptor of the folder ``parts`` below ``root_fd``, every component opened with
    O_NOFOLLOW; ``create`` makes missing folders (each with ``mkdirat``). The caller closes it."""
    fd = os.dup(root_fd)
    try:
        for i, name in enumerate(parts):
            shown = "/".join(parts[:i + 1])
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise OpError("not_found", f"folder '{shown}' does not exist") from None
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _refusal(exc, shown) from None
            except OSError as exc:
                if exc.errno == errno.ENOTDIR and _is_link(fd, name):
                    raise OpError("symlink_refused",
                                  f"'{shown}' is a symbolic link; the workspace tools never follow links") from None
                raise _refusal(exc, shown) from None
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_file(root_fd: int, parts: list[str]) -> tuple[int, os.stat_result]:
    """A read descriptor of the regular file ``parts`` and its stat; links and hard-linked files are refused."""
    shown = "/".join(parts)
    parent = open_dir(root_fd, parts[:-1])
    try:
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
        except OSError as exc:
            raise _refusal(exc, shown) from None
    finally:
        os.close(parent)
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        os.close(fd)
        raise OpError("is_a_directory", f"'{shown}' is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OpError("not_a_file", f"'{shown}' is not a regular file")
    if st.st_nlink > 1:
        os.close(fd)
        raise OpError("hard_link_refused", f"'{shown}' has other hard links; the workspace tools refuse it")
    return fd, st


def read_bytes(root_fd: int, parts: list[str], limit: int = MAX_READ_FILE_BYTES) -> bytes:
    fd, st = open_file(root_fd, parts)
    try:
        if st.st_size > limit:
            raise OpError("file_too_large", f"'{'/'.join(parts)}' has {st.st_size} bytes; the limit is {limit}")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OpError("file_too_large", f"'{'/'.join(parts)}' is larger than {limit} bytes")
    return data


def is_binary(data: bytes) -> bool:
    return b"\x00" in data[:BINARY_SNIFF]


def read_text(root_fd: int, parts: list[str]) -> str:
    """A text file's content; OpError ``binary_file`` for a file that is not UTF-8 text."""
    data = read_bytes(root_fd, parts)
    if is_binary(data):
        raise OpError("binary_file", f"'{'/'.join(parts)}' is a binary file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise OpError("binary_file", f"'{'/'.join(parts)}' is not UTF-8 text") from None


def write_bytes(root_fd: int, parts: list[str], data: bytes) -> bool:
    """Write ``data`` to ``parts`` (parents made as needed) through a new file renamed over the
    target; True when the file is new. A link, folder or hard-linked file at the target is refused."""
    shown = "/".join(parts)
    parent = open_dir(root_fd, parts[:-1], create=True)
    try:
        name, mode, created = parts[-1], 0o644, True
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _refusal(exc, shown) from None
        else:
            if stat.S_ISLNK(st.st_mode):
                raise OpError("symlink_refused", f"'{shown}' is a symbolic link; the workspace tools never follow links")
            if stat.S_ISDIR(st.st_mode):
                raise OpError("is_a_directory", f"'{shown}' is a folder, not a file")
            if not stat.S_ISREG(st.st_mode):
                raise OpError("not_a_file", f"'{shown}' is not a regular file")
            if st.st_nlink > 1:
                raise OpError("hard_link_refused", f"'{shown}' has other hard links; the workspace tools refuse it")
            mode, created = stat.S_IMODE(st.st_mode), False
        temp = f".{name[:40]}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
        except OSError as exc:
            raise _refusal(exc, shown) from None
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            # rename replaces the name itself: whatever it pointed at a moment ago is never written
            os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except OSError as exc:
            try:
                os.unlink(temp, dir_fd=parent)
            except OSError:
                pass
            raise _refusal(exc, shown) from None
        return created
    finally:
        os.close(parent)


# -- walking ----------------------------------------------------------------------------------

def walk(root_fd: int, parts: list[str], *, limit: int = MAX_WALK_ENTRIES,
         skip: frozenset[str] = SKIPPED_DIRS) -> Iterator[tuple[str, str]]:
    """(relative path, kind) of every entry below ``parts``, kind ``file``, ``dir``, ``link`` or
    ``other``; links are reported, never entered. Each folder is reopened from the root component
    by component (O_NOFOLLOW), so one swapped for a link while we walk is not entered. Stops after
    ``limit`` entries."""
    count = 0
    pending = ["/".join(parts)]
    while pending:
        prefix = pending.pop()
        try:
            fd = open_dir(root_fd, prefix.split("/") if prefix else [])
        except OpError:
            if prefix == "/".join(parts):
                raise
            continue  # replaced by a link or removed while we walked: not entered
        try:
            with os.scandir(fd) as entries:
                listed = sorted((e.name, e.is_symlink(), e.is_dir(follow_symlinks=False),
                                 e.is_file(follow_symlinks=False)) for e in entries)
        finally:
            os.close(fd)
        subdirs = []
        for name, is_link, is_dir, is_file in listed:
            count += 1
            if count > limit:
                return
            rel = f"{prefix}/{name}" if prefix else name
            kind = "link" if is_link else "dir" if is_dir else "file" if is_file else "other"
            yield rel, kind
            if kind == "dir" and name not in skip:
                subdirs.append(rel)
        pending.extend(reversed(subdirs))


def glob_match(pattern_parts: list[str], path_parts: list[str]) -> bool:
    """Shell-style matching segment by segment; ``**`` matches any number of segments."""
    if not pattern_parts:
        return not path_parts
    head = pattern_parts[0]
    if head == "**":
        return any(glob_match(pattern_parts[1:], path_parts[i:]) for i in range(len(path_parts) + 1))
    return bool(path_parts) and fnmatch.fnmatchcase(path_parts[0], head) and glob_match(pattern_parts[1:], path_parts[1:])


def pattern_parts(pattern: str) -> list[str]:
    """A glob pattern as segments. Without a ``/`` it matches a name at any depth (as in .gitignore):
    a small model writes ``*.py`` and means every Python file."""
    parts = split_path(pattern)
    return parts if "/" in pattern.strip("/") else ["**", *parts]


# -- operations -------------------------------------------------------------------------------

def numbered(lines: list[str], first: int) -> str:
    """Lines as ``  12| text`` (the number is not part of the file)."""
    return "\n".join(f"{n:>4}| {line[:MAX_LINE_CHARS]}" for n, line in enumerate(lines, start=first))


def op_read(root_fd: int, path: str, start_line: int | None = None, end_line: int | None = None) -> dict[str, Any]:
    parts = split_path(path)
    text = read_text(root_fd, parts)
    lines = text.splitlines()
    total = len(lines)
    first = max(1, start_line or 1)
    last = min(total, end_line or total)
    if total and first > total:
        raise OpError("bad_range", f"'{path}' has {total} lines; start_line {first} is past the end")
    if end_line is not None and start_line is not None and end_line < start_line:
        raise OpError("bad_range", "end_line is before start_line")
    shown, chars = [], 0
    for line in lines[first - 1:last]:
        chars += min(len(line), MAX_LINE_CHARS) + 7
        if len(shown) >= MAX_SHOWN_LINES or chars > MAX_SHOWN_CHARS:
            break
        shown.append(line)
    end = first + len(shown) - 1
    return {"path": "/".join(parts), "start_line": first, "end_line": end, "total_lines": total,
            "truncated": end < last, "text": numbered(shown, first)}


def op_write(root_fd: int, path: str, content: str) -> dict[str, Any]:
    parts = split_path(path)
    data = content.encode("utf-8")
    if len(data) > MAX_WRITE_BYTES:
        raise OpError("content_too_large", f"content has {len(data)} bytes; the limit is {MAX_WRITE_BYTES}")
    created = write_bytes(root_fd, parts, data)
    return {"path": "/".join(parts), "bytes": len(data), "lines": len(content.splitlines()), "created": created}


def closest_lines(text: str, old: str, n: int = 2) -> list[tuple[int, str]]:
    """(line number, line) of the lines most like ``old``'s first line, best first."""
    lines = text.splitlines()
    wanted = (old.strip().splitlines() or [""])[0].strip()
    scored = sorted(((difflib.SequenceMatcher(None, wanted, line.strip()).ratio(), i) for i, line in enumerate(lines)
                     if line.strip()), reverse=True)
    return [(i + 1, lines[i]) for score, i in scored[:n] if score >= 0.4]


def op_edit(root_fd: int, path: str, old: str, new: str) -> dict[str, Any]:
    parts = split_path(path)
    shown = "/".join(parts)
    if old == new:
        raise OpError("edit_not_applied", "old and new are the same: nothing would change")
    try:
        text = read_text(root_fd, parts)
    except OpError as exc:
        if exc.code == "not_found":
            raise OpError("file_missing", f"'{shown}' does not exist; edit_file changes an existing file "
                                          "(write_file makes a new one)") from None
        raise
    count = text.count(old)
    if count == 0:
        near = closest_lines(text, old)
        hint = ("; the closest line" + ("s are " if len(near) > 1 else " is ")
                + ", ".join(f"{n}: {line!r}" for n, line in near)) if near else ""
        numbered_hint = " (line numbers are not part of the file)" if re.match(r"\s*\d+\|", old) else ""
        raise OpError("edit_not_applied", f"old was not found in '{shown}'{hint}{numbered_hint}; "
                                          "copy old exactly as the file has it")
    if count > 1:
        at, lines_at, start = [], [], 0
        while len(at) < 5 and (found := text.find(old, start)) >= 0:
            at.append(found)
            lines_at.append(text.count("\n", 0, found) + 1)
            start = found + 1
        raise OpError("edit_not_applied", f"old occurs {count} times in '{shown}' (lines "
                                          f"{', '.join(map(str, lines_at))}); include more of its lines so it is unique")
    at = text.index(old)
    updated = text[:at] + new + text[at + len(old):]
    write_bytes(root_fd, parts, updated.encode("utf-8"))
    first = text.count("\n", 0, at) + 1
    new_lines = updated.splitlines()
    last = first + new.count("\n")
    lo, hi = max(1, first - 2), min(len(new_lines), last + 2)
    return {"path": shown, "line": first, "replaced": 1, "lines_now": len(new_lines),
            "snippet": numbered(new_lines[lo - 1:hi], lo)}


# -- replace a whole function ---------------------------------------------------------------------

def definitions(text: str) -> dict[str, list[tuple[int, int, int, int]]]:
    """Qualified name (``f``, ``Class.method``) -> (first line with decorators, def line, last line,
    column) of each function the module defines at its top or in its classes (a function inside a
    function is part of that function). Raises SyntaxError/ValueError when ``text`` does not parse."""
    found: dict[str, list[tuple[int, int, int, int]]] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                found.setdefault(prefix + node.name, []).append(
                    (first, node.lineno, node.end_lineno or node.lineno, node.col_offset))
            elif isinstance(node, ast.ClassDef):
                visit(node.body, prefix + node.name + ".")

    visit(ast.parse(text).body, "")
    return found


def function_source(text: str, name: str) -> str | None:
    """The source of function ``name`` (decorators included) as the file has it; None when the file
    does not parse or defines no single function of that name."""
    try:
        spans = definitions(text).get(name) or []
    except (SyntaxError, ValueError):
        return None
    if len(spans) != 1:
        return None
    first, _, last, _ = spans[0]
    return "\n".join(text.splitlines()[first - 1:last])


def _syntax_message(exc: SyntaxError, lines: list[str]) -> str:
    number = exc.lineno or 0
    shown = lines[number - 1].strip() if 0 < number <= len(lines) else ""
    return f"line {number} of source: {exc.msg}" + (f": {shown[:120]!r}" if shown else "")


def normalized_definition(source: str, name: str, column: int) -> list[str]:
    """``source`` as lines of one whole definition of ``name`` at ``column``: dedented as a block
    (a small model indents its text its own way), re-indented to where the original def stands.
    OpError ``bad_source`` naming the line when it does not parse or is not that one definition."""
    lines = source.expandtabs(4).strip("\n").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    depth = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    lines = [line[depth:] if line.strip() else "" for line in lines]
    try:
        tree = ast.parse("\n".join(lines) + "\n")
    except SyntaxError as exc:
        raise OpError("bad_source", _syntax_message(exc, lines) + "; nothing was written") from None
    except ValueError as exc:
        raise OpError("bad_source", f"source does not parse: {exc}; nothing was written") from None
    short = name.rpartition(".")[2]
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(tree.body) != 1 or len(defs) != 1 or defs[0].name != short:
        got = ", ".join(type(n).__name__ if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                        else f"def {n.name}" for n in tree.body) or "nothing"
        raise OpError("bad_source", f"source must be exactly one whole definition `def {short}(...):` with its body "
                                    f"(it holds: {got}); nothing was written")
    return [" " * column + line if line else "" for line in lines]


def op_replace_function(root_fd: int, path: str, name: str, source: str) -> dict[str, Any]:
    parts = split_path(path)
    shown = "/".join(parts)
    text = read_text(root_fd, parts)
    try:
        spans = definitions(text)
    except (SyntaxError, ValueError) as exc:
        raise OpError("file_does_not_parse", f"'{shown}' does not parse ({exc}); repair it with edit_file") from None
    if name not in spans:
        known = ", ".join(sorted(spans)[:20]) or "none"
        raise OpError("function_missing", f"'{shown}' defines no function {name!r} (it defines: {known})")
    if len(spans[name]) > 1:
        raise OpError("function_ambiguous", f"'{shown}' defines {name!r} {len(spans[name])} times")
    first, def_line, last, column = spans[name][0]
    new = normalized_definition(source, name, column)
    if not new[0].lstrip().startswith("@"):
        first = def_line  # a definition without decorators keeps the original's
    lines = text.splitlines()
    updated_lines = lines[:first - 1] + new + lines[last:]
    updated = "\n".join(updated_lines) + ("\n" if text.endswith("\n") or not text else "")
    if updated == text:
        raise OpError("edit_not_applied", f"source is {name} as the file has it already: nothing would change")
    try:
        ast.parse(updated)
    except SyntaxError as exc:  # e.g. a definition the class around it cannot hold
        raise OpError("bad_source", f"'{shown}' would not parse: line {exc.lineno}: {exc.msg}; nothing was written") from None
    write_bytes(root_fd, parts, updated.encode("utf-8"))
    before = "\n".join(lines[spans[name][0][0] - 1:last])
    return {"path": shown, "name": name, "start_line": first, "end_line": first + len(new) - 1,
            "lines_now": len(updated_lines), "snippet": numbered(new, first), "before": before}


def op_glob(root_fd: int, pattern: str) -> dict[str, Any]:
    wanted = pattern_parts(pattern)
    matches, more = [], False
    for rel, kind in walk(root_fd, []):
        if kind in ("file", "dir") and glob_match(wanted, rel.split("/")):
            if len(matches) >= MAX_GLOB_RESULTS:
                more = True
                break
            matches.append(rel + ("/" if kind == "dir" else ""))
    return {"pattern": pattern, "matches": sorted(matches), "truncated": more}


def op_grep(root_fd: int, pattern: str, path: str = ".", glob: str | None = None,
            ignore_case: bool = False) -> dict[str, Any]:
    try:
        regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise OpError("bad_regex", f"the pattern is not a valid regular expression: {exc}") from None
    parts = split_path(path, allow_root=True)
    wanted = pattern_parts(glob) if glob else None
    files = [("/".join(parts), "file")] if parts and _is_file(root_fd, parts) else \
        [(rel, kind) for rel, kind in walk(root_fd, parts) if kind == "file"]
    matches, searched, more = [], 0, False
    for rel, _ in files:
        if wanted is not None and not glob_match(wanted, rel.split("/")):
            continue
        try:
            data = read_bytes(root_fd, rel.split("/"))
        except OpError:
            continue  # too large, a link or gone: not searched
        if is_binary(data):
            continue
        searched += 1
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
            if regex.search(line):
                if len(matches) >= MAX_GREP_MATCHES:
                    more = True
                    break
                matches.append({"path": rel, "line": number, "text": line.strip()[:200]})
        if more:
            break
    return {"pattern": pattern, "matches": matches, "files_searched": searched, "truncated": more}


def _is_file(root_fd: int, parts: list[str]) -> bool:
    parent = open_dir(root_fd, parts[:-1])
    try:
        st = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        raise OpError("not_found", f"'{'/'.join(parts)}' does not exist") from None
    finally:
        os.close(parent)
    if stat.S_ISLNK(st.st_mode):
        raise OpError("symlink_refused", f"'{'/'.join(parts)}' is a symbolic link; the workspace tools never follow links")
    return stat.S_ISREG(st.st_mode)


def file_hashes(root_fd: int, skip: frozenset[str] = SKIPPED_DIRS) -> dict[str, str]:
    """Relative path -> SHA-256 of every file below the root (links by their target text), caches
    left out; bounded by ``MAX_WALK_ENTRIES`` and ``MAX_DIGEST_BYTES``."""
    hashes: dict[str, str] = {}
    budget = MAX_DIGEST_BYTES
    for rel, kind in walk(root_fd, [], skip=skip):
        if rel.endswith(_CACHE_SUFFIXES):
            continue
        parts = rel.split("/")
        if kind == "link":
            parent = open_dir(root_fd, parts[:-1])
            try:
                hashes[rel] = "link:" + os.readlink(parts[-1], dir_fd=parent)
            except OSError:
                hashes[rel] = "link:?"
            finally:
                os.close(parent)
        elif kind == "file":
            try:
                data = read_bytes(root_fd, parts, limit=max(0, min(budget, MAX_READ_FILE_BYTES * 8)))
            except OpError as exc:
                hashes[rel] = f"unreadable:{exc.code}"
                continue
            budget -= len(data)
            hashes[rel] = hashlib.sha256(data).hexdigest()
    return hashes


def syntax_hash(text: str | None) -> str | None:
    """SHA-256 of a Python source's syntax tree (``ast.dump``: no comments, no layout, no line
    numbers); None when there is no text or it does not parse."""
    if text is None:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return "ast:" + hashlib.sha256(ast.dump(tree).encode("utf-8")).hexdigest()


def digest(hashes: dict[str, str]) -> str:
    """One SHA-256 over a ``file_hashes`` map: equal exactly when every file is."""
    return hashlib.sha256(json.dumps(sorted(hashes.items())).encode("utf-8")).hexdigest()


OPERATIONS = {"read": op_read, "write": op_write, "edit": op_edit, "replace_function": op_replace_function,
              "glob": op_glob, "grep": op_grep}


def perform(root_fd: int, op: str, args: dict[str, Any]) -> dict[str, Any]:
    """One operation as a reply: ``{"ok": true, "result": ...}`` or ``{"ok": false, "code", "message"}``."""
    try:
        if op not in OPERATIONS:
            raise OpError("unknown_operation", f"unknown operation {op!r}")
        return {"ok": True, "result": OPERATIONS[op](root_fd, **args)}
    except OpError as exc:
        return {"ok": False, "code": exc.code, "message": exc.message}
    except (OSError, ValueError, TypeError) as exc:
        return {"ok": False, "code": "io_error", "message": f"{type(exc).__name__}: {exc}"[:300]}


def main() -> int:
    """Script entry inside the sandbox: the workspace is the working folder."""
    request = json.loads(sys.stdin.buffer.read(4 << 20).decode("utf-8"))
    root_fd = os.open(".", _DIR_FLAGS)
    try:
        reply = perform(root_fd, request["op"], request.get("args") or {})
    finally:
        os.close(root_fd)
    sys.stdout.write(json.dumps(reply, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
