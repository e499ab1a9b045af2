"""File primitives that run inside the sandbox: ``Sandbox.run_python("agent.sandbox.fileops", [...])``.

Why a separate process: a file tool that opened paths in the runner would follow a link the model
planted in the workspace with the runner's rights. Run through the sandbox, the worst a path can do is
what a shell command could do, and on top of that every path is checked here to stay in the workspace
(the sandbox itself still lets a command *read* the system; these tools must not).

    python -m agent.sandbox.fileops WORKSPACE OP PATH [ARG]

    read  PATH OFFSET LIMIT   the bytes [OFFSET, OFFSET+LIMIT) of a regular file, on stdout
    write PATH                stdin replaces the file (written to a temporary file, then renamed;
                              parent directories created); prints {"bytes": N}
    stat  PATH                {"type": "file"|"dir"|"missing", "size": N}
    list  PATH LIMIT          {"entries": [...], "truncated": bool}: every file below PATH, sorted,
                              workspace-relative, links not followed, .git skipped

Exit status 0 on success; 2 with one line of JSON on stderr, ``{"error": CODE, "message": TEXT}``, where
CODE is one of outside_workspace, not_found, not_a_file, not_a_directory, invalid_argument, os_error.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile

_SKIPPED_DIRS = frozenset({".git"})


class FileOpError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def inside(workspace: str, path: str) -> str:
    """The resolved absolute path of a workspace-relative ``path``; refused when it (through ``..``
    or any link on the way) resolves outside the workspace."""
    if not path or "\0" in path or os.path.isabs(path):
        raise FileOpError("invalid_argument", f"expected a workspace-relative path: {path!r}")
    resolved = os.path.realpath(os.path.join(workspace, path))
    if resolved != workspace and not resolved.startswith(workspace + os.sep):
        raise FileOpError("outside_workspace", f"{path!r} resolves outside the workspace")
    return resolved


def read(workspace: str, path: str, offset: int, limit: int) -> bytes:
    resolved = inside(workspace, path)
    try:
        # O_NOFOLLOW: the path was resolved above, so a link here was swapped in since; refuse it.
        fd = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise FileOpError("not_found", f"{path!r} does not exist") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device would block or never end
            raise FileOpError("not_a_file", f"{path!r} is not a regular file")
        handle.seek(offset)
        return handle.read(limit)


def write(workspace: str, path: str, data: bytes) -> int:
    resolved = inside(workspace, path)
    if os.path.isdir(resolved):
        raise FileOpError("not_a_file", f"{path!r} is a directory")
    parent = os.path.dirname(resolved)
    os.makedirs(parent, exist_ok=True)
    inside(workspace, os.path.relpath(parent, workspace))  # a link created in the meantime
    fd, temporary = tempfile.mkstemp(dir=parent, prefix=".fileops-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        if os.path.exists(resolved):
            os.chmod(temporary, os.stat(resolved).st_mode & 0o7777)
        os.replace(temporary, resolved)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return len(data)


def describe(workspace: str, path: str) -> dict[str, object]:
    resolved = inside(workspace, path)
    if os.path.isdir(resolved):
        return {"type": "dir", "size": 0}
    if os.path.isfile(resolved):
        return {"type": "file", "size": os.path.getsize(resolved)}
    return {"type": "missing", "size": 0}


def listing(workspace: str, path: str, limit: int) -> dict[str, object]:
    root = inside(workspace, path)
    if not os.path.isdir(root):
        raise FileOpError("not_a_directory", f"{path!r} is not a directory")
    entries: list[str] = []
    for directory, subdirs, files in os.walk(root):  # os.walk does not follow links to directories
        subdirs[:] = sorted(d for d in subdirs if d not in _SKIPPED_DIRS)
        for name in sorted(files):
            entries.append(os.path.relpath(os.path.join(directory, name), workspace))
            if len(entries) > limit:
                return {"entries": entries[:limit], "truncated": True}
    return {"entries": entries, "truncated": False}


def main(argv: list[str]) -> int:
    try:
        if len(argv) < 3:
            raise FileOpError("invalid_argument", "usage: fileops WORKSPACE OP PATH [ARG...]")
        workspace, op, path, *rest = argv
        workspace = os.path.realpath(workspace)
        if op == "read" and len(rest) == 2:
            sys.stdout.buffer.write(read(workspace, path, _number(rest[0]), _number(rest[1])))
        elif op == "write" and not rest:
            print(json.dumps({"bytes": write(workspace, path, sys.stdin.buffer.read())}))
        elif op == "stat" and not rest:
            print(json.dumps(describe(workspace, path)))
        elif op == "list" and len(rest) == 1:
            print(json.dumps(listing(workspace, path, _number(rest[0]))))
        else:
            raise FileOpError("invalid_argument", f"unknown operation or arguments: {op!r}")
    except FileOpError as error:
        print(json.dumps({"error": error.code, "message": str(error)}), file=sys.stderr)
        return 2
    except OSError as error:
        print(json.dumps({"error": "os_error", "message": error.strerror or str(error)}), file=sys.stderr)
        return 2
    return 0


def _number(text: str) -> int:
    if not text.isdigit():
        raise FileOpError("invalid_argument", f"expected a non-negative integer: {text!r}")
    return int(text)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
