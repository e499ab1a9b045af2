"""Per-command cost of the workspace sandbox: wall time of ``true`` unsandboxed, under bubblewrap and
under the Landlock fallback, and of one file operation (what each file tool call pays: the tools'
``workspace_ops`` script reading one file, through ``tools/files.run_op`` in the sandbox).

"unsandboxed" is the same spawn-and-capture path (``process.run_process``) with no confinement, so
the difference is what the sandbox itself adds. The modes are interleaved run by run, so a load
spike on a shared machine hits all of them alike. Prints the median and a 95% interval (2.5th-97.5th
percentile) in milliseconds, and the median overhead over unsandboxed (target: <= 50 ms).

    ../.venv/bin/python bench/sandbox_bench.py [--runs 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.sandbox import SandboxPolicy, open_sandbox  # noqa: E402
from agent.sandbox.policy import base_environment  # noqa: E402
from agent.sandbox.process import run_process  # noqa: E402
from agent.tools import ToolContext  # noqa: E402
from agent.coding.tools.files import run_op  # noqa: E402
from agent.coding.workspace import Workspace  # noqa: E402


def file_operation(sandbox: object, workspace: Path) -> Callable[[], object]:
    """One ``read_file`` operation exactly as the tool runs it, in ``sandbox``."""
    ctx = ToolContext(knowledge_dir=workspace, artifact_dir=workspace / "artifacts",
                      workspace=Workspace(root=workspace), sandbox=sandbox)
    return lambda: run_op(ctx, "read", {"path": "notes.txt"})


def interval(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=40, method="inclusive")
    return cuts[0], cuts[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp).resolve()
        (workspace / ".git").mkdir()
        (workspace / "notes.txt").write_text("hello\n")
        policy = SandboxPolicy(workspace=workspace)
        bwrap = open_sandbox(policy, backend="bwrap")
        landlock = open_sandbox(policy, backend="landlock")
        env = base_environment(str(workspace), tmp)
        modes: dict[str, Callable[[], object]] = {
            "unsandboxed": lambda: run_process(["true"], env=env, cwd=str(workspace), timeout_s=10, cancel=None,
                                               stdin=None, max_output_bytes=1 << 20, stop_mode="kill_group",
                                               sandbox="none"),
            "bwrap": lambda: bwrap.run(["true"], timeout_s=10),
            "landlock": lambda: landlock.run(["true"], timeout_s=10),
            "bwrap file operation": file_operation(bwrap, workspace),
            "landlock file operation": file_operation(landlock, workspace),
        }
        samples: dict[str, list[float]] = {name: [] for name in modes}
        for index in range(args.runs + 3):
            for name, run in modes.items():
                started = time.perf_counter()
                result = run()
                elapsed = (time.perf_counter() - started) * 1000
                # a command's result has its exit code; a file operation's reply is the file (run_op raises on failure)
                assert getattr(result, "exit_code", 0) == 0 and result, (name, result)
                if index >= 3:  # warm-up: page cache, the first cgroup, the interpreter's own imports
                    samples[name].append(elapsed)
    print(f"runs={args.runs} per mode; {bwrap.description}")
    print(f"{'mode':24s} {'median ms':>10s} {'95% interval ms':>18s} {'overhead ms':>12s}")
    base = statistics.median(samples["unsandboxed"])
    for name, values in samples.items():
        low, high = interval(values)
        median = statistics.median(values)
        overhead = "" if name == "unsandboxed" else f"{median - base:+.1f}"
        print(f"{name:24s} {median:10.1f} {f'{low:.1f} - {high:.1f}':>18s} {overhead:>12s}")


if __name__ == "__main__":
    main()
