"""Sandbox start-up overhead: the median and an interval of ``Sandbox.run(["true"])`` for each backend.

    python bench/sandbox_overhead.py [--runs N] [--backend bwrap|landlock ...]

Each backend gets a fresh temporary workspace with a small tree (a ``.git`` and a few files, as a
repository would have), one warm-up run, then N timed runs. The interval is the 2.5th..97.5th
percentile of a bootstrap of the median (2000 resamples, a fixed seed), so two runs of this script
back to back on the same machine can be compared. Printed as one line per backend, in milliseconds.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.sandbox import SandboxPolicy, open_sandbox  # noqa: E402


def bootstrap_median(samples: list[float], rounds: int = 2000, seed: int = 7) -> tuple[float, float]:
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(samples, k=len(samples))) for _ in range(rounds))
    return medians[int(0.025 * rounds)], medians[int(0.975 * rounds) - 1]


def measure(backend: str, runs: int) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="sandbox-overhead-") as directory:
        workspace = Path(directory).resolve() / "ws"
        (workspace / ".git").mkdir(parents=True)
        (workspace / "src").mkdir()
        for index in range(20):
            (workspace / "src" / f"m{index}.py").write_text("x = 1\n")
        box = open_sandbox(SandboxPolicy(workspace=workspace), backend=backend)  # type: ignore[arg-type]
        box.run(["true"], timeout_s=30)
        samples = []
        for _ in range(runs):
            started = time.perf_counter()
            result = box.run(["true"], timeout_s=30)
            samples.append((time.perf_counter() - started) * 1000)
            if result.exit_code != 0:
                raise SystemExit(f"{backend}: `true` failed: {result.stderr[-300:]!r}")
        return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--backend", action="append", choices=["bwrap", "landlock"])
    args = parser.parse_args()
    for backend in args.backend or ["bwrap", "landlock"]:
        samples = measure(backend, args.runs)
        low, high = bootstrap_median(samples)
        print(f"{backend:8s} median {statistics.median(samples):6.1f} ms  95% CI [{low:.1f}, {high:.1f}]  "
              f"min {min(samples):.1f}  max {max(samples):.1f}  n={len(samples)}")


if __name__ == "__main__":
    main()
