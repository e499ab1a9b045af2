"""Runtime overhead per step, measured with the scripted test policy (no model time).

overhead per step = (run wall time - tool time - scripted model time) / steps, over N runs of the
normal chain of a pack; prints the median, p90 and min in microseconds.

    ../.venv/bin/python bench/runtime_overhead.py [--runs 50] [--pack NAME]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from agent.models.backends.scripted import ScriptedPolicy  # noqa: E402
from agent.contracts.budgets import Budgets  # noqa: E402
from agent.task.packs import load_pack  # noqa: E402
from agent.core.run import run_agent  # noqa: E402
from runtime_helpers import chain_outputs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--pack", default=None)
    args = parser.parse_args()
    pack = load_pack(args.pack)
    outputs = chain_outputs(pack)
    per_step, tool_share = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs + 3):
            started = time.perf_counter()
            outcome = run_agent(pack, ScriptedPolicy(list(outputs)), Budgets(), artifact_dir=Path(tmp) / str(i))
            wall_ms = (time.perf_counter() - started) * 1000
            m = outcome.result.metrics
            assert outcome.result.stop_reason == "completed"
            if i < 3:
                continue  # warm-up: imports, matplotlib font cache, BM25 index
            overhead_ms = wall_ms - m.tool_latency_ms - m.model_latency_ms
            per_step.append(overhead_ms * 1000 / m.steps)
            tool_share.append(m.tool_latency_ms)
    q = statistics.quantiles(per_step, n=10)
    print(f"runs={args.runs} steps/run={m.steps} events/run={len(outcome.events)}")
    print(f"runtime overhead per step: median {statistics.median(per_step):.0f} us, p90 {q[-1]:.0f} us, "
          f"min {min(per_step):.0f} us")
    print(f"tool time per run (knowledge+calculator+plot): median {statistics.median(tool_share):.1f} ms")


if __name__ == "__main__":
    main()
