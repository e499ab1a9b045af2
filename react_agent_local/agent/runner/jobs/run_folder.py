"""The run folders on disk: ``<runs_dir>/<run-id>/``, opened without following a link, reloaded at a
restart, pruned by retention.

A run folder holds ``job.json`` (the public request, status and result), ``events.jsonl`` (one stored
event a line, appended as they arrive) and ``artifacts/`` (the plot PNGs). Every file is opened
relative to folder descriptors without following a link on any component below ``runs_dir``
(``agent/util/no_follow.py``), so a run folder, ``artifacts/`` or a file swapped for a symlink is refused,
never read or written through. What the files hold is the job store's business
(``agent/runner/job_store.py``); here they are bytes, and a read is bounded in size.

Retention (``over_limits``) picks the oldest finished runs to delete until at most ``max_runs`` runs
and ``max_bytes`` remain; runs still queued or running count, but are never picked.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from agent.contracts.trace import redact
from agent.util.no_follow import NoFollowFolder

log = logging.getLogger(__name__)

RUN_ID = re.compile(r"^run-[0-9a-f]{12}$")
ARTIFACT_ID = re.compile(r"^art-[0-9a-f]{16}$")
MAX_ARTIFACT_BYTES = 20 * 1024 * 1024
MAX_RECORD_BYTES = 16 * 1024 * 1024  # job.json
RECORD = "job.json"
EVENTS = "events.jsonl"

@dataclass(frozen=True)
class SavedRun:
    """A run folder as a restarted runner finds it: its job.json (redacted) and its event lines."""

    id: str
    record: dict[str, Any]
    lines: list[bytes]


class RunFolders:
    """``runs_dir`` and its run folders. Every method raises ``OSError`` when the disk says no."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, run_id: str) -> Path:
        return self.root / run_id

    def artifacts(self, run_id: str) -> Path:
        return self.root / run_id / "artifacts"

    def taken(self, run_id: str) -> bool:
        return os.path.lexists(self.path(run_id))

    def create(self, run_id: str) -> None:
        self.artifacts(run_id).mkdir(parents=True, exist_ok=True)

    def write_record(self, run_id: str, data: bytes) -> None:
        with NoFollowFolder(self.root, run_id) as folder:
            folder.write_atomic(RECORD, data)

    def append_event(self, run_id: str, line: bytes) -> None:
        with NoFollowFolder(self.root, run_id) as folder:
            folder.append(EVENTS, line)

    def read_artifact(self, run_id: str, artifact_id: str) -> bytes:
        with NoFollowFolder(self.root, run_id, "artifacts") as folder:
            return folder.read(f"{artifact_id}.png", MAX_ARTIFACT_BYTES)

    def size(self, run_id: str) -> int:
        """Bytes of the files below the run folder (links counted as themselves, never followed)."""
        total = 0
        for root, _dirs, files in os.walk(self.path(run_id)):
            for name in files:
                try:
                    total += os.lstat(os.path.join(root, name)).st_size
                except OSError:
                    pass
        return total

    def delete(self, run_id: str) -> None:
        shutil.rmtree(self.path(run_id), ignore_errors=True)

    def saved(self) -> Iterator[SavedRun]:
        """Each run folder whose job.json can be read and names it; the others are skipped with a warning."""
        for child in self.root.iterdir():
            if not RUN_ID.match(child.name) or child.is_symlink() or not child.is_dir():
                continue
            try:
                with NoFollowFolder(self.root, child.name) as folder:
                    record = redact(json.loads(folder.read(RECORD, MAX_RECORD_BYTES)))
                    lines = folder.read_lines(EVENTS)
                if not isinstance(record, dict) or record.get("id") != child.name:
                    raise ValueError("job.json does not match its folder")
            except (OSError, ValueError, RecursionError):
                log.warning("skipping unreadable run folder %s", child.name)
                continue
            yield SavedRun(child.name, record, lines)


def over_limits(runs: Sequence[tuple[str, bool, int]], *, max_runs: int, max_bytes: int) -> list[str]:
    """The runs to delete, oldest first, so that at most ``max_runs`` runs and ``max_bytes`` remain.

    ``runs`` are (id, finished, bytes), oldest first; one not finished counts but is never picked.
    """
    count, total = len(runs), sum(size for _, _, size in runs)
    victims = []
    for run_id, finished, size in runs:
        if count <= max_runs and total <= max_bytes:
            break
        if finished:
            victims.append(run_id)
            count -= 1
            total -= size
    return victims
