"""Time spent growing a llama.cpp context (``LlamaCppPolicy._fit`` when the context grows) over a
CLI command, against the command's wall time. Any ``python -m agent`` command line works, e.g.:

    PYTHONPATH=. ../.venv/bin/python bench/growth_cost_probe.py eval --model PATH \\
        --packs generated:fixtest:3 --runs 1 --seed 0 --no-progress

At exit it prints on stderr each growth (old size -> new size, tokens held, milliseconds) and their
sum as a share of the wall time.
"""
from __future__ import annotations

import atexit
import runpy
import sys
import time

import agent.models.backends.llama_cpp as backend

_fit = backend.LlamaCppPolicy._fit
grows: list[tuple[int, int, int, float]] = []
started = time.perf_counter()


def timed_fit(self, need: int) -> None:
    before, began = self._llm.n_ctx(), time.perf_counter()
    _fit(self, need)
    if self._llm.n_ctx() != before:
        grows.append((before, self._llm.n_ctx(), self._llm.n_tokens, time.perf_counter() - began))


def report() -> None:
    wall = time.perf_counter() - started
    total = sum(g[3] for g in grows)
    print(f"GROWS {len(grows)} total {total:.2f} s of {wall:.1f} s wall ({100 * total / wall:.2f} %)", file=sys.stderr)
    for before, after, held, seconds in grows:
        print(f"  {before} -> {after} holding {held} tokens: {seconds * 1000:.0f} ms", file=sys.stderr)


if __name__ == "__main__":
    backend.LlamaCppPolicy._fit = timed_fit
    atexit.register(report)
    sys.argv = ["agent", *sys.argv[1:]]
    runpy.run_module("agent", run_name="__main__", alter_sys=True)
