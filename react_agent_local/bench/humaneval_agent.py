"""HumanEval, our agent's arm: each problem of the seed-chosen subset as a guided workspace run.

The same packs as ``react-agent eval --packs generated:humaneval:N`` (the family's generator), the
same model and backend as the single-shot arm, one model process for the whole queue. A problem
passes when the benchmark's hidden tests pass on the final ``solution.py`` (the family's independent
grader, in the sandbox); a Final the runtime accepted whose hidden tests fail is counted as
accepted-but-wrong.

    ../.venv/bin/python bench/humaneval_agent.py --model PATH [--n 60] [--seed 0] [--out FILE.jsonl]

--out is a JSONL report, one line per problem; a run that stops resumes from it (problems already
in it are not run again), so the queue may span sessions. Prints pass@1 with a 95 % Wilson interval,
accepted-but-wrong, the median seconds per problem and the failure families.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from humaneval_single_shot import read_report, wilson  # noqa: E402

from agent.models.backends import load_policy  # noqa: E402
from agent.contracts.budgets import Budgets, Sampling  # noqa: E402
from agent.evaluation.suite import run_one  # noqa: E402
from agent.families.humaneval.generator import generate_packs  # noqa: E402
from agent.task.packs import TaskPack  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--n", type=int, default=60, help="problems of the seed-chosen subset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-seconds", type=float, default=300.0, help="deadline of each run")
    parser.add_argument("--out", default=None, help="JSONL report (resumable)")
    parser.add_argument("--artifacts", default=None, help="keep each run's events and workspace here")
    args = parser.parse_args()
    out = Path(args.out) if args.out else None
    done = read_report(out)
    work = Path(tempfile.mkdtemp(prefix="humaneval-agent-"))
    artifacts = Path(args.artifacts) if args.artifacts else work / "artifacts"
    packs = [TaskPack.load(root) for root in generate_packs(work / "packs", args.n, args.seed)]
    policy = None
    budgets = Budgets(max_seconds=args.max_seconds)
    sampling = Sampling(temperature=args.temperature, seed=args.seed)
    for i, pack in enumerate(packs, 1):
        task_id = pack.load_expected()["task_id"]
        if task_id in done:
            continue
        if policy is None:
            policy = load_policy(args.model)
        started = time.perf_counter()
        run = run_one(pack, policy, budgets, 0, artifacts / pack.name, sampling=sampling)
        failures = run.independent_failures or []
        row = {"task_id": task_id, "pack": pack.name, "passed": not failures and run.independent_failures is not None,
               "accepted": run.status == "completed", "failures": failures, "status": run.status,
               "stop_reason": run.stop_reason, "seconds": round(time.perf_counter() - started, 2),
               "steps": run.metrics.get("steps"), "input_tokens": run.metrics.get("input_tokens"),
               "output_tokens": run.metrics.get("output_tokens"), "model": policy.description.name}
        row["accepted_but_wrong"] = row["accepted"] and not row["passed"]
        done[task_id] = row
        if out is not None:
            with out.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
        print(f"[{i}/{len(packs)}] {task_id}: {'pass' if row['passed'] else 'FAIL ' + ','.join(failures)} "
              f"({row['seconds']} s, {row['steps']} steps, {row['stop_reason']})", flush=True)
    if policy is not None:
        policy.close()
    rows = [done[p.load_expected()["task_id"]] for p in packs]
    passed = sum(r["passed"] for r in rows)
    low, high = wilson(passed, len(rows))
    name = rows[0]["model"] if rows else "-"
    print(f"\nour agent, {name}, seed {args.seed}, {len(rows)} problems, T={args.temperature}: "
          f"pass@1 {passed}/{len(rows)} = {passed / len(rows):.1%} (95 % Wilson {low:.1%}-{high:.1%}), "
          f"accepted-but-wrong {sum(r['accepted_but_wrong'] for r in rows)}, "
          f"median {statistics.median(r['seconds'] for r in rows):.1f} s per problem")
    print("failure families:", dict(Counter(f for r in rows for f in r["failures"])))


if __name__ == "__main__":
    main()
