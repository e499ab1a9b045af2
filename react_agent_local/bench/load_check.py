"""Load check of the runner: many jobs, many readers, no lost or duplicated events.

Starts ``algolab_local_runner.py`` as a child process with the scripted TEST policy (no model) and
measures the two ways of following a run, one phase after the other on the same runner:

- ``poll``: ``--jobs`` runs are queued and ``--pollers`` clients poll them with ``after_seq`` every
  ``--interval`` the way the page's fallback does; reported: request latency p50/p90/p99/max;
- ``sse``: another ``--jobs`` runs are queued and ``--subscribers`` clients follow them through
  ``GET /agent/runs/{id}/events``; reported: delivery latency, from the moment the runner recorded
  an event (the ``: t=`` comment of its frame) to the moment the client has parsed the frame
  (events recorded before a subscriber's stream opened are replayed, checked, and not timed).

Reader ``i`` follows job ``i % jobs``. Every reader's events must be seq 1..N without gaps or
duplicates with exactly one ``run.finished``, and equal the job's full trace. Exits 1 if any check
fails or the time bound is hit.

The clients are asyncio tasks on raw keep-alive HTTP/1.1 connections in one thread: a lighter
client than 100 threads of httpx, so that the latency measured is mostly the runner's, not the
client's own GIL contention (the runner and the client share the machine's cores).

    python bench/load_check.py [--mode both|poll|sse] [--jobs 50] [--pollers 100] [--subscribers 100]
                               [--interval 0.05] [--timeout 300]

``--mode concurrent`` is the check with a real served model instead of the scripted policy: several
jobs at once on one runner against llama-cpp-python's server (``bench/concurrent_check.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from server_support import GOOD_SCRIPT, _die_with_parent, free_port, stop_process  # noqa: E402  (shared with the runner tests)

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = GOOD_SCRIPT  # the scripted test policy's outputs: search, calculate, plot, answer


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def trace_problem(events: list[dict]) -> str | None:
    seqs = [e["seq"] for e in events]
    if seqs != list(range(1, len(seqs) + 1)):
        return f"seq not 1..N: {seqs[:5]}...{seqs[-5:]}"
    finished = sum(1 for e in events if e["type"] == "run.finished")
    if finished != 1 or events[-1]["type"] != "run.finished":
        return f"{finished} run.finished events"
    return None


class Connection:
    """One keep-alive HTTP/1.1 connection to the runner (requests are sent one at a time)."""

    def __init__(self, port: int):
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port, limit=1 << 22)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, dict[str, str]]:
        """Send a request and read the status line and headers (the body is the caller's)."""
        if self.writer is None:
            await self._open()
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + (body or b""))
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name:
                headers[name.strip().lower()] = value.strip()
        return int(lines[0].split(" ")[1]), headers

    async def fetch(self, method: str, path: str, body: bytes | None = None,
                    retry: bool = False) -> tuple[int, bytes]:
        """One request; ``retry`` resends it once on a fresh connection if the reused one was closed
        by the runner while idle (keep-alive timeout); readers never retry (an error is counted)."""
        reused = self.writer is not None
        try:
            status, headers = await self.request(method, path, body)
            data = await self.reader.readexactly(int(headers.get("content-length", "0")))
            if headers.get("connection", "").lower() == "close":
                self.close()
            return status, data
        except (OSError, asyncio.IncompleteReadError):
            self.close()
            if retry and reused:
                return await self.fetch(method, path, body)
            raise

    async def chunks(self):
        """The chunked body of a streamed response, chunk by chunk."""
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self.reader.readuntil(b"\r\n")
                return
            data = await self.reader.readexactly(size + 2)
            yield data[:-2]


async def poller(port: int, run_id: str, interval: float, deadline: float, result: dict[str, Any]) -> None:
    conn, after = Connection(port), 0
    latencies, errors, events = result["latencies"], result["errors"], result["events"]
    try:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                status, body = await conn.fetch("GET", f"/agent/runs/{run_id}?after_seq={after}")
            except (OSError, asyncio.IncompleteReadError) as exc:
                errors.append(type(exc).__name__)
                await asyncio.sleep(interval)
                continue
            latencies.append((time.perf_counter() - started) * 1000)
            if status != 200:
                errors.append(str(status))
                await asyncio.sleep(interval)
                continue
            view = json.loads(body)
            events += view["events"]
            after = view["last_seq"]
            if view["terminal"] and not view["events"]:
                result["done"] = True
                return
            await asyncio.sleep(interval)
        errors.append("deadline")
    finally:
        conn.close()


async def subscriber(port: int, run_id: str, result: dict[str, Any]) -> None:
    """Follow one run's event stream to run.finished, timing each frame against its recorded time."""
    conn = Connection(port)
    latencies, events = result["latencies"], result["events"]
    try:
        status, headers = await conn.request("GET", f"/agent/runs/{run_id}/events")
        if status != 200 or "chunked" not in headers.get("transfer-encoding", ""):
            result["errors"].append(f"stream status {status}")
            return
        # Events recorded before the stream was open are a catch-up, not a delivery: not timed.
        opened = time.time()
        buffer = b""
        async for chunk in conn.chunks():
            buffer += chunk
            while b"\r\n\r\n" in buffer:
                frame, buffer = buffer.split(b"\r\n\r\n", 1)
                recorded, data = None, None
                for line in frame.split(b"\r\n"):
                    if line.startswith(b": t="):
                        recorded = float(line[4:])
                    elif line.startswith(b"data: "):
                        data = line[6:]
                if data is None:
                    continue
                if recorded is not None and recorded >= opened:
                    latencies.append((time.time() - recorded) * 1000)
                else:
                    result["caught_up"] += 1
                events.append(json.loads(data))
        result["done"] = True
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        result["errors"].append(type(exc).__name__)
    finally:
        conn.close()


async def submit_jobs(conn: Connection, count: int) -> tuple[list[str], list[float]] | None:
    run_ids, submit_ms = [], []
    for _ in range(count):
        t0 = time.perf_counter()
        status, body = await conn.fetch("POST", "/agent/runs", json.dumps({"model_path": "scripted"}).encode(),
                                        retry=True)
        submit_ms.append((time.perf_counter() - t0) * 1000)
        if status != 202:
            print(f"submit failed: {status} {body[:200]!r}", file=sys.stderr)
            return None
        run_ids.append(json.loads(body)["id"])
    return run_ids, submit_ms


async def phase(mode: str, args: argparse.Namespace, port: int, conn: Connection) -> tuple[list, list[str]] | None:
    """Queue the jobs, let the readers follow them, check every reader's events."""
    submitted = await submit_jobs(conn, args.jobs)
    if submitted is None:
        return None
    run_ids, submit_ms = submitted
    readers = args.pollers if mode == "poll" else args.subscribers
    results = [{"run_id": run_ids[i % len(run_ids)], "latencies": [], "errors": [], "events": [], "done": False,
                "caught_up": 0} for i in range(readers)]
    started = time.monotonic()
    deadline = started + args.timeout
    if mode == "poll":
        tasks = [poller(port, r["run_id"], args.interval, deadline, r) for r in results]
    else:
        tasks = [subscriber(port, r["run_id"], r) for r in results]
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), args.timeout + 5)
    except asyncio.TimeoutError:
        pass
    wall = time.monotonic() - started

    problems: list[str] = []
    statuses: dict[str, int] = {}
    full = {}
    for rid in run_ids:
        status, body = await conn.fetch("GET", f"/agent/runs/{rid}", retry=True)
        full[rid] = json.loads(body)
        view = full[rid]
        key = f"{view['status']}/{view['stop_reason']}"
        statuses[key] = statuses.get(key, 0) + 1
        if (problem := trace_problem(view["events"])):
            problems.append(f"{rid} full trace: {problem}")
    for i, r in enumerate(results):
        if not r["done"]:
            problems.append(f"{mode} reader {i} ({r['run_id']}) did not finish: {r['errors'][-3:]}")
        elif (problem := trace_problem(r["events"])):
            problems.append(f"{mode} reader {i} ({r['run_id']}): {problem}")
        elif r["events"] != full[r["run_id"]]["events"]:
            problems.append(f"{mode} reader {i} ({r['run_id']}): events differ from the full trace")
    if statuses.get("completed/completed") != args.jobs:
        problems.append(f"{mode}: not every job completed: {statuses}")

    latencies = [ms for r in results for ms in r["latencies"]]
    errors = sum(len(r["errors"]) for r in results)
    events = sum(len(r["events"]) for r in results)
    what = "poll latency" if mode == "poll" else "SSE delivery"
    if mode == "poll":
        rows = [("poll: readers", f"{readers} pollers every {args.interval * 1000:.0f} ms on {args.jobs} jobs "
                                  f"({', '.join(f'{k}: {v}' for k, v in sorted(statuses.items()))})"),
                ("poll: requests", f"{len(latencies)} ({len(latencies) / wall:.0f}/s), errors {errors}")]
    else:
        rows = [("sse: readers", f"{readers} subscribers on {args.jobs} jobs "
                                 f"({', '.join(f'{k}: {v}' for k, v in sorted(statuses.items()))})"),
                ("sse: events delivered", f"{events} ({len(latencies)} timed; {events - len(latencies)} recorded "
                                          f"before their stream opened, not timed), errors {errors}")]
    rows += [
        (f"{what} p50", f"{percentile(latencies, 50):.1f} ms"),
        (f"{what} p90", f"{percentile(latencies, 90):.1f} ms"),
        (f"{what} p99", f"{percentile(latencies, 99):.1f} ms"),
        (f"{what} max", f"{max(latencies, default=float('nan')):.1f} ms"),
        (f"{mode}: submit p50/max", f"{percentile(submit_ms, 50):.1f} / {max(submit_ms):.1f} ms"),
        (f"{mode}: traces checked", f"{readers} readers + {len(full)} full traces: "
                                    f"{len(problems)} problem(s), lost/duplicated events: "
                                    f"{sum(1 for p in problems if 'seq not' in p or 'differ' in p)} readers"),
        (f"{mode}: wall time", f"{wall:.1f} s"),
    ]
    return rows, problems + [f"{errors} request errors"] * bool(errors)


async def run_check(args: argparse.Namespace, port: int, proc: subprocess.Popen) -> int:
    conn = Connection(port)
    started = time.monotonic()
    while True:
        if proc.poll() is not None or time.monotonic() > started + 30:
            print("runner did not start", file=sys.stderr)
            return 1
        try:
            if (await conn.fetch("GET", "/status"))[0] == 200:
                break
        except (OSError, asyncio.IncompleteReadError):
            await asyncio.sleep(0.1)
    rows: list[tuple[str, str]] = []
    problems: list[str] = []
    for mode in (("poll", "sse") if args.mode == "both" else (args.mode,)):
        outcome = await phase(mode, args, port, conn)
        if outcome is None:
            return 1
        rows += outcome[0]
        problems += outcome[1]
    conn.close()

    width = max(len(k) for k, _ in rows)
    print(f"{'metric'.ljust(width)} | value")
    print(f"{'-' * width}-+-{'-' * 40}")
    for key, value in rows:
        print(f"{key.ljust(width)} | {value}")
    print(f"{'machine'.ljust(width)} | {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    for problem in problems[:20]:
        print("PROBLEM:", problem)
    print("RESULT:", "OK" if not problems else "FAILED")
    return 0 if not problems else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("both", "poll", "sse", "concurrent"), default="both")
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--pollers", type=int, default=100)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between one poller's requests")
    parser.add_argument("--timeout", type=float, default=300.0, help="bound on each phase (seconds)")
    args, rest = parser.parse_known_args(argv)
    if args.mode == "concurrent":  # its own options and defaults (--model, --jobs 4, --limits, ...)
        import concurrent_check

        return concurrent_check.main(sys.argv[1:] if argv is None else argv)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="load-check-") as tmp:
        script = Path(tmp) / "script.json"
        script.write_text(json.dumps(SCRIPT), encoding="utf-8")
        env = {**os.environ, "REACT_AGENT_TEST_POLICY": str(script)}
        proc = subprocess.Popen([sys.executable, str(PACKAGE_ROOT / "algolab_local_runner.py"), "--port", str(port),
                                 "--runs-dir", str(Path(tmp) / "runs"), "--log-level", "warning"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                preexec_fn=_die_with_parent if os.name == "posix" else None)
        try:
            return asyncio.run(run_check(args, port, proc))
        finally:
            stop_process(proc)


if __name__ == "__main__":
    sys.exit(main())
