"""The runner's job store: a FIFO queue served by one worker thread, with persisted traces (R-API).

Jobs run one at a time (one model in memory). Each job has its own cancel ``Event``. The runtime
hands every event to the job's sink as it happens; the store appends it to the job's in-memory log,
so a poller using ``after_seq`` (or a stream following the job) sees the run grow, and readers
always get copies. What leaves the store is public: the model's name and path hash, never its path.

On disk, ``<runs_dir>/<run-id>/`` holds ``job.json`` (the request minus the model path, status and
result), ``events.jsonl`` (appended as events arrive) and ``artifacts/`` (the plot PNGs). The store
writes only what it can read back: every event and record passes ``trace.redact`` (public and
JSON-safe) and is serialized once, as strict JSON, before it is kept in memory or on disk. Run files
are opened relative to folder descriptors without following a link on any component below
``runs_dir``, so a run folder or ``artifacts/`` swapped for a symlink is refused, never read through. A restarted
runner reloads finished jobs; a job that was queued or running when the process died is sealed as
failed/runtime_error with its own ``run.finished``. Retention keeps the newest ``max_runs`` jobs and
at most ``max_bytes`` on disk, deleting the oldest finished ones first. It runs on every path that
ends a job -- finished, failed, cancelled while queued, sealed at a restart -- and when a job is
created, so a storm of create + cancel cannot pile up folders while a long job runs.

A job whose tools work in a workspace carries its public plan (``request.workspace``: ``source``
template or operator, and the approval policy; ``agent/runner_workspace.py``): the store turns it
into the run's ``WorkspaceOptions`` with an approver of the store's ``ApprovalDesk``. The desk learns
of each question from the run's ``approval.requested`` event, before that event is stored, so a page
that reads it can answer at once; the end of the job closes its questions. At most one job at a
time uses the operator's folder (``WorkspaceBusy``).

Locks, and why reads are cheap: the store's ``_lock`` guards the job table, the queue and the
running id; each job's ``lock`` guards that job's state and event log and is held only to append to
or slice in-memory lists; its ``io_lock`` orders that job's disk writes. Order: store, io, job;
no disk write happens under a job lock. So a read (``view``, ``view_json``, ``follow``) takes no
store lock and one job's lock for microseconds: it never waits on the worker, the model, a tool,
or any run's disk writes. Async readers (the SSE stream) are woken with ``call_soon_threadsafe``,
so the worker never waits on them either.
"""

from __future__ import annotations

import asyncio
import bisect
import errno
import json
import logging
import os
import queue
import re
import secrets
import shutil
import stat
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from .approvals import ApprovalDesk
from .contracts import TERMINAL_STATUS, Budgets, RunRequest
from .packs import load_pack
from .runner_workspace import RunnerWorkspace
from .trace import MAX_EVENTS, redact, strip_hidden_reasoning

log = logging.getLogger(__name__)

RUN_ID = re.compile(r"^run-[0-9a-f]{12}$")
ARTIFACT_ID = re.compile(r"^art-[0-9a-f]{16}$")
TERMINAL = frozenset(TERMINAL_STATUS.values())
MAX_ARTIFACT_BYTES = 20 * 1024 * 1024
MAX_RECORD_BYTES = 16 * 1024 * 1024  # job.json
EVENT_FIELDS = ("seq", "type", "step", "attempt", "phase", "elapsed_ms")
STOPPED_MESSAGE = "runner stopped before the run finished"

#: run_agent's signature (agent/runtime.py); injectable so tests can drive the store directly.
RunFunction = Callable[..., Any]
#: RunRequest -> Policy, or a zero-argument callable the runtime calls to load the model.
PolicyFactory = Callable[[RunRequest], Any]
#: (job id, public request) -> a callable fed every event the job records while it runs (telemetry).
EventObserverFactory = Callable[[str, dict[str, Any]], Callable[[dict[str, Any]], None]]


class JobNotFound(LookupError):
    """No job with that id (or the id is malformed)."""


class JobAlreadyFinished(Exception):
    """The job is terminal; it cannot be cancelled any more."""


class QueueFull(Exception):
    """Too many jobs are waiting; the caller should retry later."""


class WorkspaceBusy(Exception):
    """Another queued or running job works in the operator's folder."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Job:
    id: str
    created_at: str
    request: dict[str, Any]  # public: pack, budgets, sampling, model kind, device, dtype, backend (no model path)
    model: dict[str, Any]  # public: name, path_hash, test_policy
    status: str = "queued"
    stop_reason: str | None = None
    final: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    started_at: str | None = None
    finished_at: str | None = None
    cancel_requested: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)
    last_seq: int = 0
    dropped_events: int = 0
    finished_event: bool = False
    artifact_ids: list[str] = field(default_factory=list)
    disk_bytes: int = 0
    cancel: threading.Event = field(default_factory=threading.Event)
    run_request: RunRequest | None = None  # in memory only, dropped when the job ends
    run_fn: RunFunction | None = field(default=None, repr=False)  # this job's own; in memory, dropped when it ends
    # The event log beside ``events``: each event's seq, its stored JSON (no newline) and the
    # wall-clock time it was recorded; appended under ``lock``, never mutated, trimmed together.
    seqs: list[int] = field(default_factory=list)
    lines: list[bytes] = field(default_factory=list)
    recorded: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    io_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Async readers waiting for the next event, by event loop (woken with call_soon_threadsafe).
    waiters: dict[Any, set[asyncio.Event]] = field(default_factory=dict, repr=False)
    observer: Callable[[dict[str, Any]], None] | None = field(default=None, repr=False)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def record(self) -> dict[str, Any]:
        """What job.json holds."""
        return {
            "id": self.id,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "request": self.request,
            "model": self.model,
            "final": self.final,
            "metrics": self.metrics,
            "error": self.error,
            "cancel_requested": self.cancel_requested,
            "dropped_events": self.dropped_events,
        }


def _find_artifact_ids(value: Any, found: list[str]) -> None:
    if isinstance(value, dict):
        art = value.get("artifact")
        if isinstance(art, dict) and isinstance(art.get("id"), str) and ARTIFACT_ID.match(art["id"]):
            if art["id"] not in found:
                found.append(art["id"])
        for v in value.values():
            if isinstance(v, (dict, list)):
                _find_artifact_ids(v, found)
    elif isinstance(value, list):
        for v in value:
            _find_artifact_ids(v, found)


def _dir_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _strict_json(value: Any, **options: Any) -> bytes:
    """The one serialization of what the store keeps: strict JSON (no NaN), encoded as UTF-8."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, **options).encode("utf-8")


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_DIR_FD = bool(_NOFOLLOW) and os.open in os.supports_dir_fd


class _Folder:
    """``runs_dir/<parts>`` opened without following a link on any component below ``runs_dir``.

    ``runs_dir`` itself is the operator's choice and may be a link. Files are opened relative to the
    folder's descriptor with ``O_NOFOLLOW``, so swapping the run folder, ``artifacts/`` or a file for
    a symlink makes the open fail instead of reaching outside (the course site's reader does the same).
    Without ``dir_fd`` (Windows) each component is checked with ``lstat`` before use.
    """

    def __init__(self, root: Path, *parts: str):
        self.path = Path(root).joinpath(*parts)
        self.fd: int | None = None
        if not _DIR_FD:
            for i in range(1, len(parts) + 1):
                _refuse_link(Path(root).joinpath(*parts[:i]), directory=True)
            return
        fds = [os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)]
        try:
            for part in parts:
                fds.append(os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=fds[-1]))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        for fd in fds[:-1]:
            os.close(fd)
        self.fd = fds[-1]

    def __enter__(self) -> "_Folder":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def open(self, name: str, flags: int, mode: int = 0o644) -> int:
        if self.fd is not None:
            return os.open(name, flags | _NOFOLLOW | _CLOEXEC, mode, dir_fd=self.fd)
        _refuse_link(self.path / name, directory=False)
        return os.open(self.path / name, flags | getattr(os, "O_BINARY", 0), mode)

    def read(self, name: str, limit: int) -> bytes:
        """A regular file of at most ``limit`` bytes (no FIFO, device or link); OSError otherwise."""
        fd = self.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
                raise OSError(errno.EINVAL, "not a regular file of the expected size")
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise OSError(errno.EFBIG, "file grew past its limit")
        return data

    def append(self, name: str, data: bytes) -> None:
        fd = self.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    def write_atomic(self, name: str, data: bytes) -> None:
        tmp = name + ".tmp"
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        if self.fd is not None:
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        else:
            os.replace(self.path / tmp, self.path / name)


def _wake_all(wakes: tuple[asyncio.Event, ...]) -> None:
    for wake in wakes:
        wake.set()


def _refuse_link(path: Path, *, directory: bool) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if directory:
            raise
        return  # a file about to be created
    if stat.S_ISLNK(st.st_mode) or (directory and not stat.S_ISDIR(st.st_mode)):
        raise OSError(errno.ELOOP, "a run path component is a link")


class JobStore:
    def __init__(
        self,
        runs_dir: Path,
        run_fn: RunFunction,
        policy_factory: PolicyFactory,
        *,
        max_runs: int = 200,
        max_bytes: int = 500 * 1024 * 1024,
        max_queued: int = 100,
        observer_factory: EventObserverFactory | None = None,
        max_concurrent_served: int = 4,
        workspace: RunnerWorkspace | None = None,
    ):
        self.runs_dir = Path(runs_dir)
        self.workspace = workspace or RunnerWorkspace()
        self.approvals = ApprovalDesk()
        self._observer_factory = observer_factory
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self._run_fn = run_fn
        self._policy_factory = policy_factory
        self.max_runs = max_runs
        self.max_bytes = max_bytes
        self.max_queued = max_queued
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}  # insertion order == creation order
        # One worker for in-process models (one model in memory, one job at a time); up to
        # ``max_concurrent_served`` for served models, each job with its own cancel and budgets.
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._served_queue: queue.Queue[str | None] = queue.Queue()
        self._queued_ids: list[str] = []
        self._running_ids: list[str] = []
        self._closed = False
        self._load_existing()
        self._enforce_retention()
        self._workers = [threading.Thread(target=self._work, args=(self._queue,), name="agent-job-worker", daemon=True)]
        self._workers += [threading.Thread(target=self._work, args=(self._served_queue,), daemon=True,
                                           name=f"agent-served-job-worker-{i}") for i in range(max(1, max_concurrent_served))]
        for worker in self._workers:
            worker.start()

    # ---------------------------------------------------------------- public API (HTTP side)

    def submit(self, run_request: RunRequest, model: dict[str, Any], workspace: dict[str, Any] | None = None, *,
               public: dict[str, Any] | None = None,
               run_for: Callable[[str], RunFunction] | None = None) -> dict[str, Any]:
        """Queue a job. ``workspace``: its public plan (``RunnerWorkspace.plan``), None without workspace tools.
        ``public``: more public fields of its request. ``run_for(job_id)``: the job's own run function, called
        like the store's (a session's turn: ``agent/session_routes.py``)."""
        spec = run_request.model
        public_request = {
            "pack": run_request.pack or "default",
            "model_kind": spec.kind,
            "device": getattr(spec, "device", None),  # a served spec has none of these three
            "dtype": getattr(spec, "dtype", None),
            "backend": getattr(spec, "backend", spec.kind),
            "budgets": run_request.budgets.model_dump(),
            "sampling": run_request.sampling.model_dump(),
            "tools": run_request.tools,
        }
        if workspace is not None:
            public_request["workspace"] = dict(workspace)
        public_request.update(public or {})
        with self._lock:
            if self._closed:
                raise QueueFull("the runner is shutting down")
            if workspace is not None and workspace.get("source") == "operator":
                busy = next((j.id for j in self._jobs.values() if not j.terminal
                             and (j.request.get("workspace") or {}).get("source") == "operator"), None)
                if busy is not None:
                    raise WorkspaceBusy(f"job {busy} works in the operator's folder; wait for it or cancel it")
            if len(self._queued_ids) >= self.max_queued:
                raise QueueFull(f"{len(self._queued_ids)} jobs are already queued; try again later")
            job_id = self._new_id()
            job = Job(id=job_id, created_at=_now(), request=redact(public_request), model=redact(dict(model)),
                      run_request=run_request, run_fn=run_for(job_id) if run_for is not None else None)
            self._job_dir(job_id).joinpath("artifacts").mkdir(parents=True, exist_ok=True)
            self._persist(job)
            self._jobs[job_id] = job
            self._queued_ids.append(job_id)
            served = getattr(run_request.model, "kind", "local") != "local"
            view = self._view(job, 0)
        (self._served_queue if served else self._queue).put(job_id)
        self._enforce_retention()
        return view

    def view(self, job_id: str, after_seq: int = 0) -> dict[str, Any]:
        return self._view(self._get(job_id), after_seq)

    def view_json(self, job_id: str, after_seq: int = 0) -> bytes:
        """``view`` as the JSON bytes of the HTTP response, splicing in the events' stored JSON."""
        job = self._get(job_id)
        with job.lock:
            head = self._view_head(job)
            lines = job.lines[bisect.bisect_right(job.seqs, after_seq):]
        body = _strict_json(head, separators=(",", ":"))
        return body[:-1] + b',"events":[' + b",".join(lines) + b"]}"

    def finished_after(self, job_id: str, after_seq: int) -> bool:
        """True when the job has recorded run.finished and nothing is left after ``after_seq``."""
        job = self._get(job_id)
        with job.lock:
            return job.finished_event and after_seq >= job.last_seq

    async def follow(self, job_id: str, after_seq: int,
                     until: float | None = None) -> AsyncIterator[tuple[int, bytes, float]]:
        """(seq, stored JSON, recorded-at unix time) of each event after ``after_seq`` as it arrives.

        Ends after run.finished, or when the event loop's clock passes ``until``. Waiting costs the
        worker nothing: it only schedules a wake-up on this event loop. The wake-up is cleared
        before each read, so an event recorded between the read and the wait still wakes the
        reader (no lost wake-up, no busy loop).
        """
        job = self._get(job_id)
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        with job.lock:
            job.waiters.setdefault(loop, set()).add(wake)
        try:
            while True:
                wake.clear()
                with job.lock:
                    start = bisect.bisect_right(job.seqs, after_seq)
                    batch = list(zip(job.seqs[start:], job.lines[start:], job.recorded[start:]))
                    done = job.finished_event
                for item in batch:
                    yield item
                    after_seq = item[0]
                remaining = None if until is None else until - loop.time()
                if done or (remaining is not None and remaining <= 0):
                    return
                try:
                    await asyncio.wait_for(wake.wait(), remaining)
                except asyncio.TimeoutError:
                    return
        finally:
            with job.lock:
                waiting = job.waiters.get(loop)
                if waiting is not None:
                    waiting.discard(wake)
                    if not waiting:
                        del job.waiters[loop]

    def list_recent(self, limit: int = 50) -> list[dict[str, Any]]:
        with self._lock:
            jobs = list(self._jobs.values())[-limit:]
        return [self._summary(job) for job in reversed(jobs)]

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel a queued job (sealed here) or signal a running one (the runtime stops at its next wait)."""
        with self._lock:
            job = self._get(job_id)
            with job.lock:
                if job.terminal:
                    raise JobAlreadyFinished(f"job {job.id} already finished ({job.status}/{job.stop_reason})")
                job.cancel_requested = True
                job.cancel.set()
            ended = job.status == "queued"
            if ended:
                self._queued_ids.remove(job.id)
                # A queued job never reached the runtime: no metrics, one run.finished of its own.
                self._seal(job, "cancelled", "cancelled", error=None)
            else:
                self.approvals.close_run(job.id)  # an answer now would come for a run that is stopping
                self._persist(job)
            view = self._view(job, job.last_seq)
        if ended:  # a running job is ended (and retention run) by its worker
            self._enforce_retention()
        return view

    def read_artifact(self, job_id: str, artifact_id: str) -> bytes:
        """The PNG of ``artifact_id`` if it belongs to ``job_id``; JobNotFound otherwise.

        Read from a descriptor opened without following links (``_Folder``): a run folder,
        ``artifacts/`` or PNG replaced by a symlink is "missing", never served.
        """
        if not isinstance(artifact_id, str) or not ARTIFACT_ID.match(artifact_id):
            raise JobNotFound("unknown artifact")
        job = self._get(job_id)
        with job.lock:
            if artifact_id not in job.artifact_ids:
                raise JobNotFound("unknown artifact")
        try:
            with _Folder(self.runs_dir, job_id, "artifacts") as folder:
                return folder.read(f"{artifact_id}.png", MAX_ARTIFACT_BYTES)
        except OSError:
            raise JobNotFound("artifact file is missing") from None

    # Single reads of a list length or an attribute are atomic in CPython: no lock to wait on.
    @property
    def queue_length(self) -> int:
        return len(self._queued_ids)

    @property
    def running_id(self) -> str | None:
        """The running job (the oldest, when served jobs run side by side)."""
        running = self.running_ids
        return running[0] if running else None

    @property
    def running_ids(self) -> list[str]:
        """Jobs a worker is running. A job whose run.finished is out counts no more, though its worker
        may still be writing job.json: a client that saw it end may unload the model at once."""
        return [i for i in list(self._running_ids) if (job := self._jobs.get(i)) is not None and not job.terminal]

    def close(self, timeout: float = 10.0) -> None:
        """Stop taking jobs, cancel the running ones and wait briefly for the workers."""
        with self._lock:
            self._closed = True
            for job_id in self._running_ids:
                self._jobs[job_id].cancel.set()
        self._queue.put(None)
        for _ in self._workers[1:]:
            self._served_queue.put(None)
        deadline = time.monotonic() + timeout
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))

    # ---------------------------------------------------------------- the worker

    def _work(self, jobs: "queue.Queue[str | None]") -> None:
        while True:
            job_id = jobs.get()
            if job_id is None:
                return
            with self._lock:
                job = self._jobs.get(job_id)
                if self._closed:
                    return
                if job is None or job.status != "queued":  # cancelled while queued, or deleted
                    continue
                self._queued_ids.remove(job_id)
                with job.lock:
                    job.status = "running"
                    job.started_at = _now()
                self._running_ids.append(job_id)
            self._persist(job)
            try:
                self._execute(job)
            finally:
                with self._lock:
                    self._running_ids.remove(job_id)
            self._enforce_retention()

    def _execute(self, job: Job) -> None:
        def sink(event: dict[str, Any]) -> None:
            if event.get("type") == "approval.requested":  # answerable before anyone can read it
                self.approvals.open(job.id, event.get("approval_id"), event.get("seconds") or 0.0)
            self._append(job, event)  # only this worker appends to a running job

        if self._observer_factory is not None:
            try:
                job.observer = self._observer_factory(job.id, job.request)
            except Exception:  # noqa: BLE001 -- telemetry never stops a run
                log.exception("event observer of %s failed", job.id)
        try:
            assert job.run_request is not None
            pack = load_pack(job.request["pack"])
            budgets = Budgets.model_validate(job.request["budgets"])
            policy = self._policy_factory(job.run_request)
            narrowed: dict[str, Any] = {"allowed_tools": job.run_request.tools} if job.run_request.tools is not None else {}
            plan = job.request.get("workspace")
            if plan:
                narrowed["workspace"] = self.workspace.options(plan, self.approvals.approver(job.id, job.cancel))
            run = job.run_fn or self._run_fn
            outcome = run(pack, policy, budgets, sampling=job.run_request.sampling, **narrowed,
                          artifact_dir=self._job_dir(job.id) / "artifacts", cancel=job.cancel, sink=sink)
            result = outcome.result
            dump = lambda m: redact(m.model_dump(mode="json")) if m is not None else None  # noqa: E731
            self._seal(job, result.status, result.stop_reason, error=dump(result.error),
                       final=dump(result.final), metrics=dump(result.metrics))
        except Exception as exc:  # the runtime should never raise; if it does, the job still ends
            log.exception("job %s failed outside the runtime", job.id)
            self._seal(job, "failed", "runtime_error",
                       error={"code": "runtime_error", "message": f"runtime error ({type(exc).__name__})",
                              "retryable": False})
        finally:
            job.observer = None
            self.approvals.close_run(job.id)

    # ---------------------------------------------------------------- internals

    def _new_id(self) -> str:
        while True:
            job_id = "run-" + secrets.token_hex(6)
            if job_id not in self._jobs and not os.path.lexists(self._job_dir(job_id)):
                return job_id

    def _job_dir(self, job_id: str) -> Path:
        return self.runs_dir / job_id

    def _get(self, job_id: str) -> Job:
        if not isinstance(job_id, str) or not RUN_ID.match(job_id):
            raise JobNotFound("malformed run id")
        job = self._jobs.get(job_id)
        if job is None:
            raise JobNotFound("no such run")
        return job

    def _append(self, job: Job, event: dict[str, Any], persist: bool = True) -> None:
        """Store one event; exactly one run.finished per job, events after it are ignored.

        The event is made public and JSON-safe, then serialized once; what is kept in memory is
        exactly what ``events.jsonl`` holds. An event that still cannot be written is replaced by
        a marker with its seq and type, so the trace never has a gap. The job's lock is held only
        for the in-memory append: the disk write, the wake-ups and the observer come after it.
        """
        seq = event.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool):
            return
        event = strip_hidden_reasoning(redact(event))  # redact first: it bounds the depth
        try:
            line = _strict_json(event) + b"\n"
        except (ValueError, TypeError, RecursionError):  # redact() makes this unreachable; the trace still has no gap
            event = {k: event.get(k) for k in EVENT_FIELDS} | {"unstorable": True}
            event["type"] = str(event["type"])
            if event["type"] == "run.finished":
                event.update(status="failed", stop_reason="runtime_error")
            line = _strict_json(redact(event)) + b"\n"
        artifacts: list[str] = []
        _find_artifact_ids(event, artifacts)
        with job.lock:
            if job.finished_event or seq <= job.last_seq:
                return
            job.events.append(event)
            job.seqs.append(seq)
            job.lines.append(line[:-1])
            job.recorded.append(time.time())
            job.last_seq = seq
            if len(job.events) > MAX_EVENTS:  # run.finished is always the newest, so it is never dropped
                del job.events[0], job.seqs[0], job.lines[0], job.recorded[0]
                job.dropped_events += 1
            job.artifact_ids.extend(a for a in artifacts if a not in job.artifact_ids)
            if event.get("type") == "run.finished":
                job.finished_event = True
                # Pollers see the terminal state with the event; _seal confirms it from the RunResult.
                status = event.get("status")
                if status in TERMINAL:
                    job.status = status
                    job.stop_reason = event.get("stop_reason")
                    job.final = event.get("final")
                    job.metrics = event.get("metrics")
                    job.error = event.get("error")
                    job.finished_at = job.finished_at or _now()
            waiters = [(loop, tuple(wakes)) for loop, wakes in job.waiters.items()]
        for loop, wakes in waiters:
            try:
                loop.call_soon_threadsafe(_wake_all, wakes)
            except RuntimeError:  # that loop is closed; its readers are gone
                pass
        if persist:
            try:
                with job.io_lock, _Folder(self.runs_dir, job.id) as folder:
                    folder.append("events.jsonl", line)
            except OSError:
                log.warning("cannot append to the event log of %s", job.id)
        if job.observer is not None:
            try:
                job.observer(event)
            except Exception:  # noqa: BLE001 -- telemetry never stops a run
                log.exception("event observer of %s failed", job.id)
                job.observer = None

    def _seal(self, job: Job, status: str, stop_reason: str, *, error: dict[str, Any] | None,
              final: dict[str, Any] | None = None, metrics: dict[str, Any] | None = None) -> None:
        """Make the job terminal; add its run.finished if the runtime did not emit one."""
        error, final, metrics = redact(error), redact(final), redact(metrics)
        if not job.finished_event:  # only this thread appends to the job, so the check holds
            self._append(job, {
                "seq": job.last_seq + 1, "type": "run.finished", "step": 0, "attempt": 0, "phase": "run",
                "elapsed_ms": 0.0, "status": status, "stop_reason": stop_reason, "final": final,
                "metrics": metrics, "error": error,
            })
        with job.lock:
            job.status, job.stop_reason = status, stop_reason
            job.final, job.metrics, job.error = final, metrics, error
            job.finished_at = job.finished_at or _now()
            job.run_request = None  # forget the model path
            job.run_fn = None
        self._persist(job)
        job.disk_bytes = _dir_bytes(self._job_dir(job.id))

    def _persist(self, job: Job) -> None:
        # io_lock first: two writers snapshot and write in the same order, so the newest state wins.
        try:
            with job.io_lock:
                with job.lock:
                    record = job.record()
                data = _strict_json(redact(record), indent=1)
                with _Folder(self.runs_dir, job.id) as folder:
                    folder.write_atomic("job.json", data)
        except (OSError, ValueError):
            log.warning("cannot write job.json of %s", job.id)

    def _summary(self, job: Job) -> dict[str, Any]:
        with job.lock:
            return self._summary_locked(job)

    def _queue_position(self, job: Job) -> int | None:
        if job.status != "queued":
            return None
        try:  # a snapshot: the store's lock is not taken on the read path
            return tuple(self._queued_ids).index(job.id) + 1
        except ValueError:  # just dequeued or cancelled
            return None

    def _summary_locked(self, job: Job) -> dict[str, Any]:
        return {
            "id": job.id,
            "status": job.status,
            "stop_reason": job.stop_reason,
            "terminal": job.terminal,
            "created_at": job.created_at,
            "started_at": job.started_at,
            "finished_at": job.finished_at,
            "model": dict(job.model),
            "test_policy": bool(job.model.get("test_policy")),
            "pack": job.request.get("pack"),
            "last_seq": job.last_seq,
            "cancel_requested": job.cancel_requested,
            "queue_position": self._queue_position(job),
        }

    def _view_head(self, job: Job) -> dict[str, Any]:
        """The view without its events (job lock held). Stored values are replaced, never mutated."""
        view = self._summary_locked(job)
        view.update({
            "dropped_events": job.dropped_events,
            "request": job.request,
            "final": job.final,
            "metrics": job.metrics if job.terminal else None,
            "error": job.error,
            "artifacts": list(job.artifact_ids),
        })
        return view

    def _view(self, job: Job, after_seq: int) -> dict[str, Any]:
        with job.lock:
            view = self._view_head(job)
            # Events are never mutated after they are stored, so a new list of them is a safe copy.
            view["events"] = job.events[bisect.bisect_right(job.seqs, after_seq):]
        view["request"] = json.loads(json.dumps(view["request"]))
        return view

    # ---------------------------------------------------------------- startup and retention

    def _load_existing(self) -> None:
        loaded: list[Job] = []
        for child in self.runs_dir.iterdir():
            if not RUN_ID.match(child.name) or child.is_symlink() or not child.is_dir():
                continue
            try:
                loaded.append(self._load_job(child))
            except (OSError, ValueError, KeyError, TypeError, RecursionError):
                log.warning("skipping unreadable run folder %s", child.name)
        for job in sorted(loaded, key=lambda j: j.created_at):
            self._jobs[job.id] = job

    def _load_job(self, folder: Path) -> Job:
        with _Folder(self.runs_dir, folder.name) as run_folder:
            record = redact(json.loads(run_folder.read("job.json", MAX_RECORD_BYTES)))
            lines = self._read_event_lines(run_folder)
        if not isinstance(record, dict) or record.get("id") != folder.name:
            raise ValueError("job.json does not match its folder")
        job = Job(id=folder.name, created_at=str(record["created_at"]), request=dict(record["request"]),
                  model=dict(record["model"]), cancel_requested=bool(record.get("cancel_requested")))
        job.started_at = record.get("started_at")
        job.dropped_events = int(record.get("dropped_events") or 0)
        for line in lines:
            try:
                event = json.loads(line.decode("utf-8", errors="replace"))
            except (ValueError, RecursionError):  # a line cut short by a crash
                continue
            if isinstance(event, dict):
                self._append(job, event, persist=False)  # made JSON-safe there: an old "Infinity" becomes a marker
        status = record.get("status")
        if status in TERMINAL:
            job.status = status
            job.stop_reason, job.final = record.get("stop_reason"), record.get("final")
            job.metrics, job.error = record.get("metrics"), record.get("error")
            job.finished_at = record.get("finished_at")
            if not job.finished_event:
                self._seal(job, status, job.stop_reason or "runtime_error", error=job.error,
                           final=job.final, metrics=job.metrics)
        elif job.finished_event:  # died after run.finished but before job.json caught up
            self._persist(job)
        else:
            self._seal(job, "failed", "runtime_error",
                       error={"code": "runtime_error", "message": STOPPED_MESSAGE, "retryable": False})
        job.disk_bytes = _dir_bytes(folder)
        return job

    @staticmethod
    def _read_event_lines(folder: _Folder) -> list[bytes]:
        """The lines of events.jsonl; none when it is missing or not a regular file (a link, a FIFO)."""
        try:
            fd = folder.open("events.jsonl", os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            return []
        except OSError:
            log.warning("ignoring the event log of %s: not a regular file", folder.path.name)
            return []
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                log.warning("ignoring the event log of %s: not a regular file", folder.path.name)
                return []
            return fh.readlines()

    def _enforce_retention(self) -> None:
        """Delete the oldest finished jobs until at most ``max_runs`` jobs and ``max_bytes`` remain
        (jobs still queued or running count, but are never deleted)."""
        with self._lock:
            finished = [j for j in self._jobs.values() if j.terminal]  # oldest first
            count = len(self._jobs)
            total = sum(j.disk_bytes for j in self._jobs.values())
            victims = []
            for job in finished:
                if count <= self.max_runs and total <= self.max_bytes:
                    break
                victims.append(job)
                count -= 1
                total -= job.disk_bytes
                del self._jobs[job.id]
        for job in victims:
            shutil.rmtree(self._job_dir(job.id), ignore_errors=True)
