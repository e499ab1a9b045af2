"""What a run changed in its workspace, shown as a unified diff, kept, and undone on request.

``Snapshot.take(root)`` reads every file of the workspace before the run (descriptor-based, no link
followed: ``tools/workspace_ops.py``); ``Snapshot.changes(root)`` compares the files after it. The
run keeps ``changes.json`` in its folder -- per changed file its path, the SHA-256 before and after,
and its previous contents (text, or base64 for a binary file; none for a file the run created) --
and ``changes.diff``, the unified diff.

``revert(run_dir, root)`` puts the previous contents back, and removes the files the run created;
it refuses, changing nothing, when any of those files differs from what the run left (someone or
something changed it since), naming the files.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from agent.coding.tools import workspace_ops as ops

CHANGES_FILE = "changes.json"
DIFF_FILE = "changes.diff"
#: a diff longer than this is cut in what is shown (the artifact keeps the contents whole)
MAX_DIFF_CHARS = 200_000


class RevertRefused(Exception):
    """The revert cannot be done safely; nothing was changed. ``code`` is stable, ``message`` public."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def _sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _open(root: Path) -> int:
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _read(fd: int, rel: str) -> bytes | None:
    try:
        return ops.read_bytes(fd, ops.split_path(rel), limit=ops.MAX_READ_FILE_BYTES * 8)
    except ops.OpError:
        return None


@dataclass(frozen=True)
class FileChange:
    path: str
    before: bytes | None
    after: bytes | None

    @property
    def kind(self) -> str:
        return "added" if self.before is None else "deleted" if self.after is None else "modified"

    def diff(self) -> str:
        def lines(data: bytes | None) -> list[str]:
            if data is None:
                return []
            if ops.is_binary(data):
                return [f"(binary file, {len(data)} bytes)\n"]
            return data.decode("utf-8", "replace").splitlines(keepends=True)

        old, new = lines(self.before), lines(self.after)
        text = "".join(difflib.unified_diff(old, new, "/dev/null" if self.before is None else f"a/{self.path}",
                                            "/dev/null" if self.after is None else f"b/{self.path}"))
        return text if text.endswith("\n") or not text else text + "\n\\ No newline at end of file\n"


@dataclass(frozen=True)
class Snapshot:
    """Every file of a workspace at one moment: path -> bytes."""

    files: dict[str, bytes]

    @classmethod
    def take(cls, root: Path) -> "Snapshot":
        fd = _open(Path(root))
        try:
            files = {}
            for rel, h in ops.file_hashes(fd).items():
                if h.startswith(("link:", "unreadable:")):
                    continue
                data = _read(fd, rel)
                if data is not None:
                    files[rel] = data
            return cls(files)
        finally:
            os.close(fd)

    def changes(self, root: Path) -> list[FileChange]:
        now = Snapshot.take(root).files
        return [FileChange(rel, self.files.get(rel), now.get(rel)) for rel in sorted(set(self.files) | set(now))
                if self.files.get(rel) != now.get(rel)]


def unified_diff(changes: list[FileChange]) -> str:
    return "".join(c.diff() for c in changes)


def record(run_dir: Path, changes: list[FileChange], *, root: Path) -> dict[str, object]:
    """Write ``changes.json`` (with the workspace's folder, which only a revert on this machine reads)
    and ``changes.diff`` into the run's folder; the public summary (no path but workspace-relative ones)."""
    entries = []
    for c in changes:
        entry: dict[str, object] = {"path": c.path, "kind": c.kind, "before_sha256": _sha(c.before),
                                    "after_sha256": _sha(c.after)}
        if c.before is not None:
            if ops.is_binary(c.before):
                entry["before_base64"] = base64.b64encode(c.before).decode("ascii")
            else:
                try:
                    entry["before_text"] = c.before.decode("utf-8")
                except UnicodeDecodeError:
                    entry["before_base64"] = base64.b64encode(c.before).decode("ascii")
        entries.append(entry)
    diff = unified_diff(changes)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CHANGES_FILE).write_text(json.dumps({"root": str(Path(root).resolve()), "files": entries, "reverted": False}, indent=1), encoding="utf-8")
    (run_dir / DIFF_FILE).write_text(diff, encoding="utf-8")
    return summary(entries, diff)


def summary(entries: list[dict[str, object]], diff: str) -> dict[str, object]:
    return {"files": [{"path": e["path"], "kind": e["kind"]} for e in entries], "diff": diff[:MAX_DIFF_CHARS],
            "diff_truncated": len(diff) > MAX_DIFF_CHARS}


def load(run_dir: Path) -> dict[str, object] | None:
    """The run's recorded changes (``changes.json`` with the diff), None when it recorded none."""
    try:
        data = json.loads((run_dir / CHANGES_FILE).read_text(encoding="utf-8"))
        diff = (run_dir / DIFF_FILE).read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None
    return {**summary(data.get("files") or [], diff), "reverted": bool(data.get("reverted"))}


def recorded_root(run_dir: Path) -> Path:
    """The workspace folder a run's changes were made in; RevertRefused when the run recorded none."""
    try:
        root = json.loads((run_dir / CHANGES_FILE).read_text(encoding="utf-8"))["root"]
    except (OSError, ValueError, KeyError, TypeError):
        raise RevertRefused("no_changes_recorded", "this run recorded no changes to revert") from None
    return Path(str(root))


def revert(run_dir: Path, root: Path) -> list[str]:
    """Put back what the run changed (see the module docstring); the paths restored. RevertRefused,
    with nothing changed, when the record is missing, already reverted, or a file changed since."""
    try:
        data = json.loads((run_dir / CHANGES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise RevertRefused("no_changes_recorded", "this run recorded no changes to revert") from None
    if data.get("reverted"):
        raise RevertRefused("already_reverted", "this run's changes were reverted already")
    entries = data.get("files") or []
    try:
        fd = _open(Path(root))
    except OSError:
        raise RevertRefused("workspace_missing", "the run's workspace folder cannot be opened") from None
    try:
        moved = []
        for e in entries:
            parts = ops.split_path(str(e["path"]))  # a record's path is workspace-relative or refused
            now = _read(fd, "/".join(parts))
            if _sha(now) != e.get("after_sha256"):
                moved.append(str(e["path"]))
        if moved:
            raise RevertRefused("changed_since", "nothing was reverted: these files changed since the run: "
                                + ", ".join(moved[:10]) + (" ..." if len(moved) > 10 else ""))
        restored = []
        for e in entries:
            parts = ops.split_path(str(e["path"]))
            if e.get("before_sha256") is None:
                parent = ops.open_dir(fd, parts[:-1])
                try:
                    os.unlink(parts[-1], dir_fd=parent)
                finally:
                    os.close(parent)
            else:
                before = (base64.b64decode(str(e["before_base64"])) if "before_base64" in e
                          else str(e.get("before_text", "")).encode("utf-8"))
                ops.write_bytes(fd, parts, before)
            restored.append(str(e["path"]))
    finally:
        os.close(fd)
    data["reverted"] = True
    (run_dir / CHANGES_FILE).write_text(json.dumps(data, indent=1), encoding="utf-8")
    return restored
