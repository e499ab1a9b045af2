"""Served vs in-process: the same pack with the same GGUF, through an OpenAI-compatible server on
loopback (llama-cpp-python's own server, native tool calling over the ``openai`` SDK) and through the
in-process llama.cpp backend (prefix continuation under a grammar). Task Success and seconds per run
side by side.

    ../.venv/bin/python bench/served_bench.py --model PATH.gguf [--runs 2] [--pack default] [--mode guided]
    ../.venv/bin/python bench/served_bench.py --model PATH.gguf --base-url http://127.0.0.1:8000/v1 --model-name NAME

Without ``--base-url`` the bench starts ``python -m llama_cpp.server`` with the GGUF (n_ctx 8192, the
in-process default) on a free loopback port and stops it before the in-process runs, so the two never
share the CPU. Runs are greedy unless ``--temperature`` says otherwise. Nothing is scripted.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PACKAGE_ROOT))

from agent.models.backends import load_model, unload_all  # noqa: E402
from agent.contracts.budgets import Budgets, Sampling  # noqa: E402
from agent.models.providers import LocalModelSpec, OpenAICompatibleSpec
from agent.task.packs import load_pack  # noqa: E402
from agent.core.run import run_agent  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: Path, threads: int, log: Path, extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    import httpx2

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "bench",
                             "--n_ctx", "8192", "--n_threads", str(threads), "--host", "127.0.0.1", "--port", str(port), *extra],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx2.get(base_url + "/models", timeout=2).status_code == 200:
                return proc, base_url
        except httpx2.HTTPError:
            time.sleep(0.5)
        if proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit(f"llama-cpp-python's server did not start (log: {log})")


def one_run(policy: Any, pack: Any, budgets: Budgets, sampling: Sampling, mode: str | None) -> dict[str, Any]:
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        outcome = run_agent(pack, policy, budgets, artifact_dir=Path(tmp) / "a", sampling=sampling, mode=mode)
    seconds = time.monotonic() - started
    result = outcome.result
    metrics = result.metrics
    completed = [e for e in outcome.events if e["type"] in ("model.completed", "model.repair.completed")]
    return {"success": bool(metrics and metrics.task_success), "seconds": seconds, "stop_reason": result.stop_reason,
            "steps": metrics.steps if metrics else None, "model_calls": len(completed),
            "protocol_repairs": sum(e.get("protocol_repairs", 0) for e in completed),
            "invalid": sum(e["type"] == "decision.invalid" for e in outcome.events),
            "error": result.error.code if result.error else None,
            "failed_checks": sorted(k for k, v in (metrics.checks if metrics else {}).items() if not v),
            "actions": [e["decision"] for e in outcome.events if e["type"] in ("decision.valid", "decision.repaired")
                        and e["decision"]["type"] == "action"],
            "answer": result.final.answer if result.final else None}


def summarize(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    seconds = [r["seconds"] for r in runs]
    return {"path": name, "runs": len(runs), "task_success": sum(r["success"] for r in runs),
            "median_s": statistics.median(seconds), "max_s": max(seconds),
            "steps": statistics.median([r["steps"] or 0 for r in runs]),
            "model_calls": statistics.median([r["model_calls"] for r in runs]),
            "invalid_decisions": sum(r["invalid"] for r in runs),
            "protocol_repairs": sum(r["protocol_repairs"] for r in runs),
            "stop_reasons": dict(Counter(r["stop_reason"] for r in runs))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="the GGUF both paths run")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--pack", default=None)
    parser.add_argument("--mode", choices=["guided", "free"], default=None)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-seconds", type=float, default=1800)
    parser.add_argument("--base-url", default=None, help="an already running OpenAI-compatible server")
    parser.add_argument("--model-name", default="bench")
    parser.add_argument("--only", choices=["served", "in-process"], default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    pack = load_pack(args.pack)
    budgets = Budgets(max_seconds=args.max_seconds)
    table: list[dict[str, Any]] = []
    details: dict[str, list[dict[str, Any]]] = {}
    sampling = lambda i: Sampling(temperature=args.temperature, seed=1000 + i if args.temperature else None)  # noqa: E731

    if args.only != "in-process":
        proc = None
        base_url = args.base_url
        if base_url is None:
            proc, base_url = start_server(args.model, args.threads, Path(tempfile.gettempdir()) / "served_bench_server.log")
        try:
            spec = OpenAICompatibleSpec(kind="openai_compatible", base_url=base_url, model=args.model_name)
            runs = []
            for i in range(args.runs):
                policy = load_model(spec)
                runs.append(one_run(policy, pack, budgets, sampling(i), args.mode))
                policy.close()
                print("served", json.dumps(runs[-1]), flush=True)
            details["served"] = runs
            table.append(summarize("served (llama-cpp-python server, native tool calls)", runs))
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=30)

    if args.only != "served":
        policy = load_model(LocalModelSpec(path=str(args.model), backend="llama_cpp"))
        runs = []
        for i in range(args.runs):
            runs.append(one_run(policy, pack, budgets, sampling(i), args.mode))
            print("in-process", json.dumps(runs[-1]), flush=True)
        unload_all()
        details["in-process"] = runs
        table.append(summarize("in-process (llama.cpp, prefix + grammar)", runs))

    print(f"\n## {args.model.name}, pack {pack.name}, {args.mode or pack.task.mode} mode, "
          f"temperature {args.temperature}, {args.runs} run(s) per path\n")
    print("| path | Task Success | median s/run | max s | steps | model calls | invalid decisions | protocol repairs | stop reasons |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in table:
        print(f"| {row['path']} | {row['task_success']}/{row['runs']} | {row['median_s']:.1f} | {row['max_s']:.1f} | "
              f"{row['steps']} | {row['model_calls']} | {row['invalid_decisions']} | {row['protocol_repairs']} | "
              f"{row['stop_reasons']} |")
    if args.json:
        args.json.write_text(json.dumps({"table": table, "runs": details}, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
