"""The runner's job store: a FIFO queue served by worker threads, each job with its event log and its
run folder.

Jobs on an in-process model run one at a time (one model in memory) on one worker; jobs on a served
model on up to ``max_concurrent_served`` more. Each job has its own cancel ``Event``. The runtime
hands every event to the job's sink as it happens; the store appends it to the job's event log
(``agent/runner/jobs/event_log.py``), so a poller using ``after_seq`` (or a stream following the job) sees
the run grow, and readers always get copies. What leaves the store is public: the model's name and
path hash, never its path.

On disk each job has its run folder (``agent/runner/jobs/run_folder.py``): ``job.json`` (the request minus
the model path, status and result), ``events.jsonl`` (appended as events arrive) and ``artifacts/``
(the plot PNGs). The store writes only what it can read back: every event and record passes
``trace.redact`` (public and JSON-safe) and is serialized once, as strict JSON, before it is kept in
memory or on disk. A restarted runner reloads finished jobs; a job that was queued or running when
the process died is sealed as failed/runtime_error with its own ``run.finished``. Retention keeps the
newest ``max_runs`` jobs and at most ``max_bytes`` on disk, deleting the oldest finished ones first.
It runs on every path that ends a job -- finished, failed, cancelled while queued, sealed at a
restart -- and when a job is created, so a storm of create + cancel cannot pile up folders while a
long job runs.

A job whose tools work in a workspace carries its public plan (``request.workspace``: ``source``
template or operator, and the approval policy; ``agent/coding/runner_workspace.py``): the store turns it
into the run's ``WorkspaceOptions`` with an approver of the store's ``ApprovalDesk``. The desk learns
of each question from the run's ``approval.requested`` event, before that event is stored, so a page
that reads it can answer at once; the end of the job closes its questions. At most one job at a
time uses the operator's folder (``WorkspaceBusy``).

Locks, and why reads are cheap: the store's ``_lock`` guards the job table, the queue and the
running id; each job's ``lock`` (its event log's) guards that job's state and event log and is held
only to append to or slice in-memory lists; its ``io_lock`` orders that job's disk writes. Order:
store, io, job; no disk write happens under a job lock. So a read (``view``, ``view_json``,
``follow``) takes no store lock and one job's lock for microseconds: it never waits on the worker,
the model, a tool, or any run's disk writes. Async readers (the SSE stream) are woken with
``call_soon_threadsafe``, so the worker never waits on them either.
"""

from __future__ import annotations

import json
import logging
import queue
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from agent.coding.approvals import ApprovalDesk
from agent.contracts.result import TERMINAL_STATUS
from agent.contracts.budgets import Budgets
from agent.runner.requests import RunRequest
from agent.runner.jobs.event_log import EventLog, entry_of, strict_json
from agent.runner.jobs.run_folder import ARTIFACT_ID, RUN_ID, RunFolders, SavedRun, over_limits
from agent.task.packs import load_pack
from agent.coding.runner_workspace import RunnerWorkspace
from agent.contracts.trace import redact

log = logging.getLogger(__name__)

TERMINAL = frozenset(TERMINAL_STATUS.values())
STOPPED_MESSAGE = "runner stopped before the run finished"

#: run_agent's signature (agent/core/runtime.py); injectable so tests can drive the store directly.
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
    log: EventLog = field(default_factory=EventLog, repr=False)
    artifact_ids: list[str] = field(default_factory=list)
    disk_bytes: int = 0
    cancel: threading.Event = field(default_factory=threading.Event)
    run_request: RunRequest | None = None  # in memory only, dropped when the job ends
    run_fn: RunFunction | None = field(default=None, repr=False)  # this job's own; in memory, dropped when it ends
    io_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    observer: Callable[[dict[str, Any]], None] | None = field(default=None, repr=False)

    @property
    def lock(self) -> threading.Lock:
        """The job's lock is its event log's: one lock guards its state and its events."""
        return self.log.lock

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
            "dropped_events": self.log.dropped,
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
        self.folders = RunFolders(runs_dir)
        self.runs_dir = self.folders.root
        self.workspace = workspace or RunnerWorkspace()
        self.approvals = ApprovalDesk()
        self._observer_factory = observer_factory
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

    # ---------------------------------------------------------------- admission and cancel

    def submit(self, run_request: RunRequest, model: dict[str, Any], workspace: dict[str, Any] | None = None, *,
               public: dict[str, Any] | None = None,
               run_for: Callable[[str], RunFunction] | None = None) -> dict[str, Any]:
        """Queue a job. ``workspace``: its public plan (``RunnerWorkspace.plan``), None without workspace tools.
        ``public``: more public fields of its request. ``run_for(job_id)``: the job's own run function, called
        like the store's (a session's turn: ``agent/runner/session_routes.py``)."""
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
            self.folders.create(job_id)
            self._persist(job)
            self._jobs[job_id] = job
            self._queued_ids.append(job_id)
            served = getattr(run_request.model, "kind", "local") != "local"
            view = self._view(job, 0)
        (self._served_queue if served else self._queue).put(job_id)
        self._enforce_retention()
        return view

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
            view = self._view(job, job.log.last_seq)
        if ended:  # a running job is ended (and retention run) by its worker
            self._enforce_retention()
        return view

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

    # ---------------------------------------------------------------- reads (no store lock, no disk)

    def view(self, job_id: str, after_seq: int = 0) -> dict[str, Any]:
        return self._view(self._get(job_id), after_seq)

    def view_json(self, job_id: str, after_seq: int = 0) -> bytes:
        """``view`` as the JSON bytes of the HTTP response, splicing in the events' stored JSON."""
        job = self._get(job_id)
        with job.lock:
            head = self._view_head(job)
            entries = job.log.since(after_seq)
        body = strict_json(head, separators=(",", ":"))
        return body[:-1] + b',"events":[' + b",".join(e.line for e in entries) + b"]}"

    def finished_after(self, job_id: str, after_seq: int) -> bool:
        """True when the job has recorded run.finished and nothing is left after ``after_seq``."""
        job = self._get(job_id)
        with job.lock:
            return job.log.finished and after_seq >= job.log.last_seq

    def follow(self, job_id: str, after_seq: int,
               until: float | None = None) -> AsyncIterator[tuple[int, bytes, float]]:
        """(seq, stored JSON, recorded-at unix time) of each event after ``after_seq`` as it arrives,
        until run.finished or ``until`` (``EventLog.follow``); JobNotFound at once for an unknown id."""
        return self._get(job_id).log.follow(after_seq, until)

    def list_recent(self, limit: int = 50) -> list[dict[str, Any]]:
        with self._lock:
            jobs = list(self._jobs.values())[-limit:]
        return [self._summary(job) for job in reversed(jobs)]

    def read_artifact(self, job_id: str, artifact_id: str) -> bytes:
        """The PNG of ``artifact_id`` if it belongs to ``job_id``; JobNotFound otherwise.

        Read from a descriptor opened without following links (``NoFollowFolder``): a run folder,
        ``artifacts/`` or PNG replaced by a symlink is "missing", never served.
        """
        if not isinstance(artifact_id, str) or not ARTIFACT_ID.match(artifact_id):
            raise JobNotFound("unknown artifact")
        job = self._get(job_id)
        with job.lock:
            if artifact_id not in job.artifact_ids:
                raise JobNotFound("unknown artifact")
        try:
            return self.folders.read_artifact(job_id, artifact_id)
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
                          artifact_dir=self.folders.artifacts(job.id), cancel=job.cancel, sink=sink)
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

    # ---------------------------------------------------------------- recording a job

    def _new_id(self) -> str:
        while True:
            job_id = "run-" + secrets.token_hex(6)
            if job_id not in self._jobs and not self.folders.taken(job_id):
                return job_id

    def _get(self, job_id: str) -> Job:
        if not isinstance(job_id, str) or not RUN_ID.match(job_id):
            raise JobNotFound("malformed run id")
        job = self._jobs.get(job_id)
        if job is None:
            raise JobNotFound("no such run")
        return job

    def _append(self, job: Job, event: dict[str, Any], persist: bool = True) -> None:
        """Store one event; exactly one run.finished per job, events after it are ignored.

        What is kept in memory is exactly what ``events.jsonl`` holds (``entry_of``). The job's
        lock is held only for the in-memory append: the disk write, the wake-ups and the observer
        come after it.
        """
        entry = entry_of(event)
        if entry is None:
            return
        event = entry.event
        artifacts: list[str] = []
        _find_artifact_ids(event, artifacts)
        with job.lock:
            if not job.log.add(entry):
                return
            job.artifact_ids.extend(a for a in artifacts if a not in job.artifact_ids)
            if event.get("type") == "run.finished":
                # Pollers see the terminal state with the event; _seal confirms it from the RunResult.
                status = event.get("status")
                if status in TERMINAL:
                    job.status = status
                    job.stop_reason = event.get("stop_reason")
                    job.final = event.get("final")
                    job.metrics = event.get("metrics")
                    job.error = event.get("error")
                    job.finished_at = job.finished_at or _now()
        job.log.wake()
        if persist:
            try:
                with job.io_lock:
                    self.folders.append_event(job.id, entry.line + b"\n")
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
        if not job.log.finished:  # only this thread appends to the job, so the check holds
            self._append(job, {
                "seq": job.log.last_seq + 1, "type": "run.finished", "step": 0, "attempt": 0, "phase": "run",
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
        job.disk_bytes = self.folders.size(job.id)

    def _persist(self, job: Job) -> None:
        # io_lock first: two writers snapshot and write in the same order, so the newest state wins.
        try:
            with job.io_lock:
                with job.lock:
                    record = job.record()
                self.folders.write_record(job.id, strict_json(redact(record), indent=1))
        except (OSError, ValueError):
            log.warning("cannot write job.json of %s", job.id)

    # ---------------------------------------------------------------- views

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
            "last_seq": job.log.last_seq,
            "cancel_requested": job.cancel_requested,
            "queue_position": self._queue_position(job),
        }

    def _view_head(self, job: Job) -> dict[str, Any]:
        """The view without its events (job lock held). Stored values are replaced, never mutated."""
        view = self._summary_locked(job)
        view.update({
            "dropped_events": job.log.dropped,
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
            entries = job.log.since(after_seq)
        # Events are never mutated after they are stored, so a new list of them is a safe copy.
        view["events"] = [e.event for e in entries]
        view["request"] = json.loads(json.dumps(view["request"]))
        return view

    # ---------------------------------------------------------------- startup and retention

    def _load_existing(self) -> None:
        loaded: list[Job] = []
        for saved in self.folders.saved():
            try:
                loaded.append(self._reload(saved))
            except (OSError, ValueError, KeyError, TypeError, RecursionError):
                log.warning("skipping unreadable run folder %s", saved.id)
        for job in sorted(loaded, key=lambda j: j.created_at):
            self._jobs[job.id] = job

    def _reload(self, saved: SavedRun) -> Job:
        """The job of a run folder, its events replayed; sealed as failed if it never finished."""
        record = saved.record
        job = Job(id=saved.id, created_at=str(record["created_at"]), request=dict(record["request"]),
                  model=dict(record["model"]), cancel_requested=bool(record.get("cancel_requested")))
        job.started_at = record.get("started_at")
        job.log.dropped = int(record.get("dropped_events") or 0)
        for line in saved.lines:
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
            if not job.log.finished:
                self._seal(job, status, job.stop_reason or "runtime_error", error=job.error,
                           final=job.final, metrics=job.metrics)
        elif job.log.finished:  # died after run.finished but before job.json caught up
            self._persist(job)
        else:
            self._seal(job, "failed", "runtime_error",
                       error={"code": "runtime_error", "message": STOPPED_MESSAGE, "retryable": False})
        job.disk_bytes = self.folders.size(job.id)
        return job

    def _enforce_retention(self) -> None:
        """Delete the oldest finished jobs until at most ``max_runs`` jobs and ``max_bytes`` remain
        (jobs still queued or running count, but are never deleted)."""
        with self._lock:
            victims = over_limits([(j.id, j.terminal, j.disk_bytes) for j in self._jobs.values()],
                                  max_runs=self.max_runs, max_bytes=self.max_bytes)
            for job_id in victims:
                del self._jobs[job_id]
        for job_id in victims:
            self.folders.delete(job_id)
