"""Load check, concurrent mode: served-model jobs side by side against a real local server.

Starts llama-cpp-python's OpenAI-compatible server (its ``[server]`` extra) with a GGUF on loopback,
then, for each ``--limits`` value, a runner (``algolab_local_runner.py --max-concurrent-served L``, no
scripted policy: every Decision comes from the served model) and queues ``--jobs`` runs of the default
pack on that server, all at once. Every job is followed through its SSE event stream from the moment
it is queued; half-way through the first model call of the last job, that job is cancelled.

Reported per limit: wall time for all jobs, the peak number of jobs running at the same moment (from
the runner's own start/finish records), median queue wait and median run seconds, how each job ended,
the cancelled job's stop latency, and the event checks: each streamed trace is seq 1..N with exactly
one ``run.started`` and one ``run.finished`` and equals the job's full trace (an event of another run
would break both). Exits 1 on any problem.

The server decodes one request at a time (llama-cpp-python has no parallel slots), so concurrency
here overlaps each job's tool calls, prompt building and waiting, not its decoding: the check is about
the runner (N jobs, own cancels, no mixed events), not about server throughput. The server is started
with ``--interrupt_requests False`` so it queues a request that arrives while another decodes; by
default it cuts the running stream instead, and each served job then ends ``model_unavailable``
("the stream ended before the reply was complete") -- what the first run of this check found.

    python bench/concurrent_check.py [--model GGUF] [--jobs 4] [--limits 1,4] [--max-steps 4]
    python bench/load_check.py --mode concurrent [...]   (the same)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from load_check import PACKAGE_ROOT, Connection, subscriber, trace_problem  # noqa: E402
from server_support import MODEL_DIR, _die_with_parent, free_port, stop_process  # noqa: E402
from served_bench import start_server  # noqa: E402

DEFAULT_MODEL = MODEL_DIR / "qwen2.5-coder-0.5b-gguf" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def start_runner(runs_dir: Path, limit: int, log: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "REACT_AGENT_TEST_POLICY"}
    proc = subprocess.Popen([sys.executable, str(PACKAGE_ROOT / "algolab_local_runner.py"), "--port", str(port),
                             "--runs-dir", str(runs_dir), "--log-level", "warning",
                             "--max-concurrent-served", str(limit)],
                            env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            preexec_fn=_die_with_parent if os.name == "posix" else None)
    return proc, port


async def wait_ready(port: int, proc: subprocess.Popen) -> bool:
    conn, deadline = Connection(port), time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if (await conn.fetch("GET", "/status"))[0] == 200:
                    return True
            except (OSError, asyncio.IncompleteReadError):
                await asyncio.sleep(0.2)
        return False
    finally:
        conn.close()


async def cancel_when_model_starts(port: int, run_id: str, result: dict[str, Any], deadline: float) -> None:
    """Cancel ``run_id`` once its stream shows a model call in progress; record how long it took to stop."""
    while time.monotonic() < deadline:
        if any(e["type"] == "model.started" for e in result["events"]):
            await asyncio.sleep(1.0)  # in the middle of the call
            conn = Connection(port)
            try:
                asked = time.monotonic()
                status, _ = await conn.fetch("POST", f"/agent/runs/{run_id}/cancel", b"{}")  # JSON, as the page sends it
                result["cancel_status"] = status
                while not result["done"] and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                result["cancel_stop_s"] = time.monotonic() - asked
            finally:
                conn.close()
            return
        await asyncio.sleep(0.1)


async def one_limit(limit: int, args: argparse.Namespace, base_url: str, tmp: Path) -> tuple[dict[str, Any], list[str]]:
    proc, port = start_runner(tmp / f"runs-{limit}", limit, tmp / f"runner-{limit}.log")
    problems: list[str] = []
    try:
        if not await wait_ready(port, proc):
            return {}, [f"limit {limit}: the runner did not start (log {tmp}/runner-{limit}.log)"]
        body = json.dumps({"model": {"kind": "openai_compatible", "base_url": base_url, "model": "bench"},
                           "budgets": {"max_steps": args.max_steps, "max_seconds": args.run_seconds}}).encode()
        conn = Connection(port)
        started = time.monotonic()
        run_ids, queued_at = [], {}
        for _ in range(args.jobs):
            status, reply = await conn.fetch("POST", "/agent/runs", body, retry=True)
            if status != 202:
                return {}, [f"limit {limit}: submit failed {status} {reply[:200]!r}"]
            run_ids.append(json.loads(reply)["id"])
            queued_at[run_ids[-1]] = time.time()
        results = [{"run_id": rid, "latencies": [], "errors": [], "events": [], "done": False, "caught_up": 0}
                   for rid in run_ids]
        deadline = started + args.timeout
        tasks = [subscriber(port, r["run_id"], r) for r in results]
        tasks.append(cancel_when_model_starts(port, run_ids[-1], results[-1], deadline))
        try:
            await asyncio.wait_for(asyncio.gather(*tasks), args.timeout + 5)
        except asyncio.TimeoutError:
            problems.append(f"limit {limit}: not finished within {args.timeout:.0f} s")
        wall = time.monotonic() - started

        views = {}
        for rid in run_ids:
            _, reply = await conn.fetch("GET", f"/agent/runs/{rid}", retry=True)
            views[rid] = json.loads(reply)
        conn.close()
    finally:
        stop_process(proc)

    intervals, waits, run_s, ends = [], [], [], {}
    for r in results:
        view = views[r["run_id"]]
        key = f"{view['status']}/{view['stop_reason']}"
        ends[key] = ends.get(key, 0) + 1
        events = r["events"]
        if not r["done"]:
            problems.append(f"limit {limit}: stream of {r['run_id']} did not finish: {r['errors'][-3:]}")
            continue
        if (problem := trace_problem(events)):
            problems.append(f"limit {limit}: {r['run_id']}: {problem}")
        if sum(1 for e in events if e["type"] == "run.started") != 1:
            problems.append(f"limit {limit}: {r['run_id']}: not exactly one run.started")
        if events != view["events"]:
            problems.append(f"limit {limit}: {r['run_id']}: streamed events differ from the full trace")
        if view.get("started_at") and view.get("finished_at"):
            begin, end = epoch(view["started_at"]), epoch(view["finished_at"])
            intervals.append((begin, end))
            waits.append(begin - queued_at[r["run_id"]])
            run_s.append(end - begin)
    cancelled = results[-1]
    if views[cancelled["run_id"]]["status"] != "cancelled":
        problems.append(f"limit {limit}: the cancelled job ended {views[cancelled['run_id']]['status']}/"
                        f"{views[cancelled['run_id']]['stop_reason']} (cancel answered "
                        f"{cancelled.get('cancel_status', 'never sent')})")
    for r in results:
        error = views[r["run_id"]].get("error")
        if error:
            problems.append(f"limit {limit}: {r['run_id']} error {error.get('code')}: {str(error.get('message'))[:160]}")
    others = [views[r["run_id"]]["status"] for r in results[:-1]]
    if any(s == "cancelled" for s in others):
        problems.append(f"limit {limit}: a cancel reached another job: {others}")
    return {
        "limit": limit, "jobs": args.jobs, "wall_s": wall, "peak_running": peak(intervals),
        "median_wait_s": statistics.median(waits) if waits else float("nan"),
        "median_run_s": statistics.median(run_s) if run_s else float("nan"),
        "ends": ends, "cancel_stop_s": cancelled.get("cancel_stop_s"),
        "events": sum(len(r["events"]) for r in results),
        "mixed_or_lost": sum(1 for p in problems if "seq" in p or "differ" in p or "run.started" in p),
    }, problems


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def peak(intervals: list[tuple[float, float]]) -> int:
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda p: (p[0], p[1]))
    running = best = 0
    for _, step in points:
        running += step
        best = max(best, running)
    return best


def print_table(rows: list[dict[str, Any]]) -> None:
    header = ["limit", "jobs", "wall s", "peak running", "median wait s", "median run s", "ends",
              "cancel stop s", "events", "lost/mixed"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        ends = ", ".join(f"{k} {v}" for k, v in sorted(r["ends"].items()))
        stop = f"{r['cancel_stop_s']:.2f}" if r["cancel_stop_s"] is not None else "-"
        print(f"| {r['limit']} | {r['jobs']} | {r['wall_s']:.1f} | {r['peak_running']} | {r['median_wait_s']:.1f} | "
              f"{r['median_run_s']:.1f} | {ends} | {stop} | {r['events']} | {r['mixed_or_lost']} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="GGUF served by llama-cpp-python")
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--limits", default="1,4", help="runner --max-concurrent-served values, comma separated")
    parser.add_argument("--max-steps", type=int, default=4, help="each job's step budget (keeps the check short)")
    parser.add_argument("--run-seconds", type=float, default=600.0, help="each job's time budget")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="server decode threads")
    parser.add_argument("--timeout", type=float, default=1200.0, help="bound on each limit's phase (seconds)")
    parser.add_argument("--mode", default="concurrent", help=argparse.SUPPRESS)  # from load_check.py
    args = parser.parse_args(argv)
    if not args.model.is_file():
        print(f"{args.model} is missing: scripts/setup.sh --model qwen2.5-coder-0.5b-gguf", file=sys.stderr)
        return 1
    rows, problems = [], []
    with tempfile.TemporaryDirectory(prefix="concurrent-check-") as name:
        tmp = Path(name)
        server, base_url = start_server(args.model, args.threads, tmp / "server.log",
                                        extra=("--interrupt_requests", "False"))
        try:
            for limit in (int(x) for x in args.limits.split(",")):
                row, found = asyncio.run(one_limit(limit, args, base_url, tmp))
                problems += found
                if row:
                    rows.append(row)
        finally:
            stop_process(server)
    print(f"served model: {args.model.name} on llama-cpp-python's server ({args.threads} threads); "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    print_table(rows)
    for problem in problems[:20]:
        print("PROBLEM:", problem)
    print("RESULT:", "OK" if not problems and rows else "FAILED")
    return 0 if not problems and rows else 1


if __name__ == "__main__":
    sys.exit(main())
