"""Load check of the runner: many jobs, many pollers, no lost or duplicated events.

Starts ``algolab_local_runner.py`` as a child process with the scripted TEST policy (no model), queues
``--jobs`` runs, and lets ``--pollers`` threads poll them concurrently with ``after_seq`` the way the
page does. Reports request latency (p50/p90/p99/max) and checks, per poller, that the concatenated
events have seq 1..N without gaps or duplicates and exactly one ``run.finished``, and that they equal
the job's full trace. Exits 1 if any check fails or the time bound is hit.

    python bench/load_check.py [--jobs 50] [--pollers 100] [--interval 0.05] [--timeout 300]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from server_support import GOOD_SCRIPT, _die_with_parent, free_port  # noqa: E402  (shared with the runner tests)

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


class Poller(threading.Thread):
    def __init__(self, base_url: str, run_id: str, interval: float, deadline: float):
        super().__init__(daemon=True)
        self.base_url, self.run_id, self.interval, self.deadline = base_url, run_id, interval, deadline
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.events: list[dict] = []
        self.view: dict | None = None

    def run(self) -> None:
        after = 0
        with httpx.Client(base_url=self.base_url, timeout=30.0) as client:
            while time.monotonic() < self.deadline:
                started = time.perf_counter()
                try:
                    r = client.get(f"/agent/runs/{self.run_id}", params={"after_seq": after})
                except httpx.HTTPError as exc:
                    self.errors.append(type(exc).__name__)
                    time.sleep(self.interval)
                    continue
                self.latencies.append((time.perf_counter() - started) * 1000)
                if r.status_code != 200:
                    self.errors.append(str(r.status_code))
                    time.sleep(self.interval)
                    continue
                view = r.json()
                self.events += view["events"]
                after = view["last_seq"]
                if view["terminal"] and not view["events"]:
                    self.view = view
                    return
                time.sleep(self.interval)
            self.errors.append("deadline")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--pollers", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between one poller's requests")
    parser.add_argument("--timeout", type=float, default=300.0, help="bound on the whole check (seconds)")
    args = parser.parse_args(argv)

    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="load-check-") as tmp:
        script = Path(tmp) / "script.json"
        script.write_text(json.dumps(SCRIPT), encoding="utf-8")
        env = {**os.environ, "REACT_AGENT_TEST_POLICY": str(script)}
        proc = subprocess.Popen([sys.executable, str(PACKAGE_ROOT / "algolab_local_runner.py"), "--port", str(port),
                                 "--runs-dir", str(Path(tmp) / "runs"), "--log-level", "warning"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                preexec_fn=_die_with_parent if os.name == "posix" else None)
        try:
            return run_check(args, base_url, proc)
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


def run_check(args: argparse.Namespace, base_url: str, proc: subprocess.Popen) -> int:
    started = time.monotonic()
    deadline = started + args.timeout
    with httpx.Client(base_url=base_url, timeout=30.0) as client:
        while True:
            if proc.poll() is not None or time.monotonic() > started + 30:
                print("runner did not start", file=sys.stderr)
                return 1
            try:
                if client.get("/status").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        submit_ms, run_ids = [], []
        for _ in range(args.jobs):
            t0 = time.perf_counter()
            r = client.post("/agent/runs", json={"model_path": "scripted"})
            submit_ms.append((time.perf_counter() - t0) * 1000)
            if r.status_code != 202:
                print(f"submit failed: {r.status_code} {r.text[:200]}", file=sys.stderr)
                return 1
            run_ids.append(r.json()["id"])

        pollers = [Poller(base_url, run_ids[i % len(run_ids)], args.interval, deadline) for i in range(args.pollers)]
        for p in pollers:
            p.start()
        for p in pollers:
            p.join(max(0.0, deadline - time.monotonic()) + 5)
        wall = time.monotonic() - started

        problems: list[str] = []
        statuses: dict[str, int] = {}
        full = {rid: client.get(f"/agent/runs/{rid}").json() for rid in run_ids}
        for rid, view in full.items():
            statuses[f"{view['status']}/{view['stop_reason']}"] = statuses.get(f"{view['status']}/{view['stop_reason']}", 0) + 1
            if (problem := trace_problem(view["events"])):
                problems.append(f"{rid} full trace: {problem}")
        for i, p in enumerate(pollers):
            if p.view is None:
                problems.append(f"poller {i} ({p.run_id}) did not finish: {p.errors[-3:]}")
                continue
            if (problem := trace_problem(p.events)):
                problems.append(f"poller {i} ({p.run_id}): {problem}")
            elif p.events != full[p.run_id]["events"]:
                problems.append(f"poller {i} ({p.run_id}): events differ from the full trace")

    latencies = [ms for p in pollers for ms in p.latencies]
    errors = sum(len(p.errors) for p in pollers)
    rows = [
        ("jobs", f"{args.jobs} ({', '.join(f'{k}: {v}' for k, v in sorted(statuses.items()))})"),
        ("pollers", f"{args.pollers} (interval {args.interval * 1000:.0f} ms)"),
        ("poll requests", f"{len(latencies)} ({len(latencies) / wall:.0f}/s), errors {errors}"),
        ("poll latency p50", f"{percentile(latencies, 50):.1f} ms"),
        ("poll latency p90", f"{percentile(latencies, 90):.1f} ms"),
        ("poll latency p99", f"{percentile(latencies, 99):.1f} ms"),
        ("poll latency max", f"{max(latencies, default=float('nan')):.1f} ms"),
        ("submit latency p50/max", f"{percentile(submit_ms, 50):.1f} / {max(submit_ms):.1f} ms"),
        ("traces checked", f"{len(pollers)} pollers + {len(full)} full traces, {len(problems)} problem(s)"),
        ("wall time", f"{wall:.1f} s (bound {args.timeout:.0f} s)"),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"{'metric'.ljust(width)} | value")
    print(f"{'-' * width}-+-{'-' * 40}")
    for key, value in rows:
        print(f"{key.ljust(width)} | {value}")
    for problem in problems[:20]:
        print("PROBLEM:", problem)
    ok = not problems and errors == 0 and statuses.get("completed/completed") == args.jobs
    print("RESULT:", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
