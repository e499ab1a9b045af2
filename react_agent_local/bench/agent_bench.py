"""Real-model benchmark: N real runs per model and decoding mode, Task Success and where time goes.

For each model it runs the default pack greedily once and sampled (temperature 0.7, a different seed
per run) N times, plus the alternative pack(s), and prints:
  - Task Success count, median and p90 wall seconds per run, steps;
  - per-step means: prompt tokens evaluated vs reused from the KV cache, output tokens, model
    seconds, plus per run tool seconds and runtime overhead (wall - model - tool);
  - per run: prompt tokens evaluated and reused from the KV cache, output tokens sampled and forced
    (the grammar's only continuation, appended at prompt speed), and the *new information* per step:
    the prompt tokens a call does not share with the previous call of the run (the new Observation,
    feedback, budget line and instruction; the whole prompt for a run's first call);
  - the "physical limit": what the run cannot avoid -- reading the new information and the forced
    tokens at this model's measured prompt-processing rate, and deciding the sampled tokens at its
    generation rate (both measured here, through the same backend, before the runs) -- and wall / limit.

    ../.venv/bin/python bench/agent_bench.py --model PATH [--model PATH2] [--runs 10] [--backend auto]
    ../.venv/bin/python bench/agent_bench.py --model PATH --json out.json
    ../.venv/bin/python bench/agent_bench.py --model PATH --runs 0 --fresh 5   # fresh CLI processes only

``--fresh N`` also runs the default pack N times in fresh CLI processes (greedy), first with the
prefix cache off and then with a warm one, and prints per process: the first model step's latency,
prompt tokens evaluated vs restored from disk, wall seconds including the model load, and peak RSS
(the child's own ``ru_maxrss``) against the model file's size.

Nothing here is scripted: every Decision comes from the model.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
from collections import Counter
import tempfile
import time
from pathlib import Path
from typing import Any


from agent.models.backends import load_policy, unload_all  # noqa: E402
from agent.contracts.budgets import Budgets, Sampling  # noqa: E402
from agent.models.model_policy import ModelRequest  # noqa: E402
from agent.task.packs import load_pack  # noqa: E402
from agent.core.run import run_agent  # noqa: E402


def p90(values: list[float]) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def measure_rates(policy: Any) -> dict[str, float]:
    """Prompt-processing and generation tokens/s of this model here (median of 3, fresh prompts)."""
    pp, gen = [], []
    # One unmeasured call first: a backend's first generate pays one-off costs (allocations, kernels).
    policy.generate(ModelRequest(messages=[{"role": "user", "content": "Say hello."}], prefix="",
                                 value_schema=None, suffix="", max_new_tokens=4))
    for _ in range(3):
        filler = " ".join(secrets.token_hex(3) for _ in range(180))  # unique: nothing reusable in the cache
        request = ModelRequest(messages=[{"role": "user", "content": f"Repeat: {filler}"}], prefix="",
                               value_schema=None, suffix="", max_new_tokens=1)
        g = policy.generate(request)
        evaluated = g.input_tokens - g.cached_tokens
        pp.append(evaluated / ((g.prompt_eval_ms or g.latency_ms) / 1000))
        # An open JSON string: no backend's "value complete" stop cuts the generation short.
        request = ModelRequest(messages=[{"role": "user", "content": "Write one long sentence about the sea."}],
                               prefix='"', value_schema=None, suffix="", max_new_tokens=64)
        g = policy.generate(request)
        gen_ms = g.latency_ms - (g.prompt_eval_ms or 0.0)
        if g.output_tokens:
            gen.append(g.output_tokens / (gen_ms / 1000))
    return {"prompt_tokens_per_s": statistics.median(pp), "gen_tokens_per_s": statistics.median(gen)}


class NewInformation:
    """Wraps a local policy: per call, the prompt tokens that are new information -- not in the previous
    call's prompt and the model's own reply to it; for a run's first call, not in the previous run's
    first prompt (the system message with the tools is the same for every run of a pack's tools)."""

    def __init__(self, policy: Any):
        self.policy, self.description = policy, policy.description
        self.proposes_arguments = policy.proposes_arguments
        self.previous: list[int] | None = None
        self.first: list[int] | None = None
        self.new: list[int] = []

    def start_run(self) -> None:
        self.previous, self.new = self.first, []

    def propose(self, request: Any) -> Any:
        tokenize, render = getattr(self.policy, "tokenize", None), getattr(self.policy, "render_prompt", None)
        if not (tokenize and render):
            return self.policy.propose(request)
        prompt = render(request.continuation())
        tokens = tokenize(prompt)
        shared = 0
        for a, b in zip(self.previous or [], tokens):
            if a != b:
                break
            shared += 1
        self.new.append(len(tokens) - shared)
        if not self.new[:-1]:
            self.first = tokens
        candidate = self.policy.propose(request)
        self.previous = tokenize(prompt + (candidate.text or ""))
        return candidate

    def close(self) -> None:
        pass


_WATCHERS: dict[int, NewInformation] = {}  # one per loaded policy: it carries the previous run's first prompt


def one_run(policy: Any, pack_name: str | None, temperature: float, seed: int | None, max_seconds: float,
            sampling: dict[str, Any] | None = None, mode: str | None = None) -> dict[str, Any]:
    pack = load_pack(pack_name)
    budgets = Budgets(max_seconds=max_seconds)
    settings = Sampling(temperature=temperature, seed=seed, **(sampling or {}))
    watched = _WATCHERS.setdefault(id(policy), NewInformation(policy))
    watched.start_run()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        outcome = run_agent(pack, watched, budgets, artifact_dir=Path(tmp), mode=mode, sampling=settings)
    wall = time.perf_counter() - started
    m = outcome.result.metrics
    calls = [e for e in outcome.events if e["type"] in ("model.completed", "model.repair.completed")]
    return {
        "pack": pack.name,
        "temperature": temperature,
        "seed": seed,
        "status": outcome.result.status,
        "stop_reason": outcome.result.stop_reason,
        "task_success": bool(m and m.task_success),
        "checks": m.checks if m else {},
        "wall_s": wall,
        "steps": m.steps if m else 0,
        "model_calls": len(calls),
        "prompt_tokens": sum(e["usage"]["input_tokens"] for e in calls),
        "cached_tokens": sum(e["usage"]["cached_tokens"] for e in calls),
        "output_tokens": sum(e["usage"]["output_tokens"] for e in calls),
        "forced_tokens": sum(e["usage"].get("forced_tokens", 0) for e in calls),
        "drafted_tokens": sum(e["usage"].get("drafted_tokens", 0) for e in calls),
        "new_tokens": sum(watched.new) if watched.new else None,
        "model_s": sum(e["latency_ms"] for e in calls) / 1000,
        "tool_s": (m.tool_latency_ms / 1000) if m else 0.0,
        "answer": outcome.result.final.answer if outcome.result.final else None,
        "actions": [{e["decision"]["tool"]: e["decision"]["arguments"]} for e in outcome.events
                    if e["type"] in ("decision.valid", "decision.repaired") and e["decision"]["type"] == "action"],
    }


def summarize(label: str, runs: list[dict[str, Any]], rates: dict[str, float]) -> dict[str, Any]:
    walls = [r["wall_s"] for r in runs]
    calls = sum(r["model_calls"] for r in runs) or 1
    evaluated = [r["prompt_tokens"] - r["cached_tokens"] for r in runs]
    # What a run cannot avoid: read what is new (at prompt speed), decide the sampled tokens (at
    # generation speed); forced tokens are evaluated in a batch (prompt speed). Sampled tokens a draft
    # proposed count at generation speed too: they are the model's decisions, only verified in a
    # batch, so a run that drafts well can beat this limit (wall / limit < 1).
    limits = [((r["new_tokens"] if r["new_tokens"] is not None else e) + r["forced_tokens"]) / rates["prompt_tokens_per_s"]
              + (r["output_tokens"] - r["forced_tokens"]) / rates["gen_tokens_per_s"] for e, r in zip(evaluated, runs)]
    overhead = [r["wall_s"] - r["model_s"] - r["tool_s"] for r in runs]
    return {
        "label": label,
        "runs": len(runs),
        "task_success": sum(r["task_success"] for r in runs),
        "stop_reasons": dict(Counter(r["stop_reason"] for r in runs)),
        "wall_median_s": statistics.median(walls),
        "wall_p90_s": p90(walls),
        "steps_median": statistics.median(r["steps"] for r in runs),
        "per_call_prompt_evaluated": sum(evaluated) / calls,
        "per_call_prompt_cached": sum(r["cached_tokens"] for r in runs) / calls,
        "per_call_output": sum(r["output_tokens"] for r in runs) / calls,
        "per_call_model_s": sum(r["model_s"] for r in runs) / calls,
        "tool_s_median": statistics.median(r["tool_s"] for r in runs),
        "overhead_s_median": statistics.median(overhead),
        "physical_limit_median_s": statistics.median(limits),
        "wall_over_limit_median": statistics.median(r["wall_s"] / lim for r, lim in zip(runs, limits)),
        "per_run_evaluated": statistics.median(evaluated),
        "per_run_cached": statistics.median(r["cached_tokens"] for r in runs),
        "per_run_sampled": statistics.median(r["output_tokens"] - r["forced_tokens"] for r in runs),
        "per_run_forced": statistics.median(r["forced_tokens"] for r in runs),
        "per_run_drafted": statistics.median(r.get("drafted_tokens", 0) for r in runs),
        "per_run_new": statistics.median(r["new_tokens"] or 0 for r in runs),
    }


def print_table(model: str, rates: dict[str, float], rows: list[dict[str, Any]]) -> None:
    print(f"\n## {model}")
    print(f"measured here: prompt processing {rates['prompt_tokens_per_s']:.0f} tok/s, "
          f"generation {rates['gen_tokens_per_s']:.1f} tok/s, load {rates.get('load_s', 0):.1f} s")
    print("| runs | Task Success | stop reasons | median s | p90 s | steps | per call: prompt eval / cached / out tok, model s "
          "| tool s | overhead s | physical limit s | wall / limit |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in rows:
        print(f"| {s['label']} | {s['task_success']}/{s['runs']} | {s['stop_reasons']} | {s['wall_median_s']:.1f} | "
              f"{s['wall_p90_s']:.1f} | {s['steps_median']:.0f} | {s['per_call_prompt_evaluated']:.0f} / "
              f"{s['per_call_prompt_cached']:.0f} / {s['per_call_output']:.0f}, {s['per_call_model_s']:.2f} | "
              f"{s['tool_s_median']:.2f} | {s['overhead_s_median']:.3f} | {s['physical_limit_median_s']:.1f} | "
              f"{s['wall_over_limit_median']:.2f} |")
    print("\nper run (medians): | runs | prompt tokens evaluated | cached | new information | output sampled "
          "(of them from a draft) | forced |")
    print("|---|---|---|---|---|---|")
    for s in rows:
        print(f"| {s['label']} | {s['per_run_evaluated']:.0f} | {s['per_run_cached']:.0f} | {s['per_run_new']:.0f} | "
              f"{s['per_run_sampled']:.0f} ({s['per_run_drafted']:.0f}) | {s['per_run_forced']:.0f} |")


def fresh_process(model: str, cache: str, runs_dir: Path) -> dict[str, Any]:
    """One greedy default run in a new CLI process: what a user who types the command waits for."""
    env = {**os.environ, "REACT_AGENT_PREFIX_CACHE": cache}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "--model", model, "--json", "--temperature", "0",
                             "--runs-dir", str(runs_dir)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=env, cwd=Path(__file__).resolve().parent.parent)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    result = json.loads(out.decode().strip().splitlines()[-1])
    events = [json.loads(line) for line in (runs_dir / result["run_id"] / "events.jsonl").read_text().splitlines()]
    calls = [e for e in events if e["type"] in ("model.completed", "model.repair.completed")]
    first = calls[0]["usage"] if calls else {}
    return {"wall_s": wall, "rss_mb": usage.ru_maxrss / 1024, "exit": os.waitstatus_to_exitcode(status),
            "task_success": bool((result.get("metrics") or {}).get("task_success")),
            "first_step_s": calls[0]["latency_ms"] / 1000 if calls else float("nan"),
            "first_prompt": first.get("input_tokens", 0), "first_restored": first.get("restored_tokens", 0),
            "evaluated": sum(e["usage"]["input_tokens"] - e["usage"]["cached_tokens"] for e in calls),
            "restored": sum(e["usage"].get("restored_tokens", 0) for e in calls)}


def fresh_processes(model: str, n: int) -> list[dict[str, Any]]:
    size_mb = Path(model).stat().st_size / (1 << 20)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "prefix-kv"
        runs_dir = Path(tmp) / "runs"
        runs_dir.mkdir()
        fresh_process(model, str(cache), runs_dir)  # fills the cache (and the page cache): not counted
        for label, where in (("prefix cache off", "0"), ("prefix cache warm", str(cache))):
            got = [fresh_process(model, where, runs_dir) for _ in range(n)]
            rows.append({"label": label, "runs": got})
    print(f"\nfresh CLI processes, default pack, greedy, model file {size_mb:.0f} MiB:")
    print("| processes | Task Success | first step s (median) | first prompt tok / restored | evaluated tok per run "
          "| wall s incl. load (median, min-max) | peak RSS MiB (median) | RSS / file |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        r = row["runs"]
        walls = [x["wall_s"] for x in r]
        rss = statistics.median(x["rss_mb"] for x in r)
        print(f"| {row['label']} ({len(r)}) | {sum(x['task_success'] for x in r)}/{len(r)} | "
              f"{statistics.median(x['first_step_s'] for x in r):.2f} | {r[0]['first_prompt']} / "
              f"{statistics.median(x['first_restored'] for x in r):.0f} | {statistics.median(x['evaluated'] for x in r):.0f} | "
              f"{statistics.median(walls):.1f} ({min(walls):.1f}-{max(walls):.1f}) | {rss:.0f} | {rss / size_mb:.2f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, help="GGUF file or model dir (repeatable)")
    parser.add_argument("--backend", default="auto", choices=["auto", "llama_cpp", "transformers"])
    parser.add_argument("--runs", type=int, default=10, help="sampled runs per model (temperature 0.7)")
    parser.add_argument("--alt-pack", action="append", default=None, help="extra pack(s), greedy (default release_hold)")
    parser.add_argument("--max-seconds", type=float, default=300.0)
    parser.add_argument("--seed-base", type=int, default=1000, help="sampled run i uses seed seed-base + i")
    parser.add_argument("--sampled-pack", default=None, help="pack of the sampled runs (default: the default pack)")
    parser.add_argument("--mode", default=None, choices=["guided", "free"], help="override the packs' mode")
    parser.add_argument("--top-p", type=float, default=None, help="sampled runs' top_p (default: Sampling's)")
    parser.add_argument("--top-k", type=int, default=None, help="sampled runs' top_k (default: Sampling's)")
    parser.add_argument("--json", default=None, help="also write all runs and summaries here")
    parser.add_argument("--fresh", type=int, default=0, help="also N fresh CLI processes per model, cache off and warm")
    args = parser.parse_args()
    alt_packs = args.alt_pack or ["release_hold"]
    sampling = {k: v for k, v in {"top_p": args.top_p, "top_k": args.top_k}.items() if v is not None}
    shown = Sampling(**sampling)
    print(f"sampled runs: temperature 0.7, top_p {shown.top_p}, top_k {shown.top_k}; "
          f"mode: {args.mode or 'as each pack says'}")
    report = []
    for model in args.model:
        fresh = fresh_processes(model, args.fresh) if args.fresh else []
        if not args.runs:
            report.append({"model": model, "fresh": fresh})
            continue
        unload_all()
        started = time.perf_counter()
        policy = load_policy(model, backend=args.backend)
        load_s = time.perf_counter() - started
        rates = measure_rates(policy)
        rates["load_s"] = load_s
        name = policy.description.name
        greedy = [one_run(policy, None, 0.0, None, args.max_seconds, mode=args.mode)]
        sampled = [one_run(policy, args.sampled_pack, 0.7, args.seed_base + i, args.max_seconds, sampling, args.mode)
                   for i in range(args.runs)]
        alt = [one_run(policy, p, 0.0, None, args.max_seconds, mode=args.mode) for p in alt_packs]
        rows = [summarize("default, greedy", greedy, rates), summarize(f"{args.sampled_pack or 'default'}, T=0.7", sampled, rates),
                summarize("alt packs, greedy", alt, rates)]
        print_table(f"{name} ({policy.description.backend})", rates, rows)
        for r in greedy + sampled + alt:
            if not r["task_success"]:
                failed = [k for k, v in r["checks"].items() if not v]
                print(f"  failed run: pack={r['pack']} T={r['temperature']} seed={r['seed']} "
                      f"{r['status']}/{r['stop_reason']} failed checks={failed} answer={r['answer']!r}")
                print(f"    actions: {r['actions']}")
        report.append({"model": name, "backend": policy.description.backend, "rates": rates,
                       "summaries": rows, "runs": greedy + sampled + alt, "fresh": fresh})
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
