"""Run user-written packs through the CLI and grade each Final with the packs' own independent grader.

    python bench/user_packs_bench.py --packs ../../shared/user-packs --model <GGUF> \
        [--runs greedy,0.7:1,0.7:2] [--out results/user_packs_<model>_<commit>.jsonl]

Each pack folder holds ``task.json``, ``knowledge/``, ``truth.json``; the packs folder holds
``grade.py`` (it reads a ``--json`` run and a ``truth.json`` and prints PASS or FAIL first). A run is
``greedy`` (temperature 0) or ``T:SEED`` (sampled). One model process at a time: each run is its own
``python -m agent run`` process. The table counts right answers and, separately, accepted-but-wrong
Finals (the run completed with a Final the runtime accepted, and the grader says FAIL); every such
Final is printed whole, so none is hidden behind a rate.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def run_one(pack: Path, model: str, spec: str, timeout_s: float) -> dict:
    args = [sys.executable, "-m", "agent", "run", "--pack", str(pack), "--model", model, "--json"]
    if spec == "greedy":
        args += ["--temperature", "0"]
    else:
        temperature, seed = spec.split(":")
        args += ["--temperature", temperature, "--seed", seed]
    started = time.monotonic()
    try:
        done = subprocess.run(args, cwd=HERE, capture_output=True, text=True, timeout=timeout_s)
        stdout, code = done.stdout, done.returncode
    except subprocess.TimeoutExpired as error:
        stdout, code = (error.stdout or b"").decode() if isinstance(error.stdout, bytes) else (error.stdout or ""), -9
    seconds = time.monotonic() - started
    try:
        result = json.loads(stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"pack": pack.name, "run": spec, "seconds": seconds, "exit": code, "status": "no_json",
                "verdict": "FAIL", "why": stdout[-300:], "final": None, "accepted": False}
    return {"pack": pack.name, "run": spec, "seconds": round(seconds, 1), "exit": code, "result": result}


def grade(grader: Path, pack: Path, row: dict) -> dict:
    if "result" not in row:
        return row
    result = row.pop("result")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(result, handle)
        path = handle.name
    try:
        done = subprocess.run([sys.executable, str(grader), path, str(pack / "truth.json")],
                              capture_output=True, text=True, timeout=60)
    finally:
        os.unlink(path)
    lines = done.stdout.strip().splitlines() or ["FAIL (grader printed nothing)"]
    status = result.get("status")
    final = (result.get("final") or {}).get("answer")
    row.update(status=status, stop_reason=result.get("stop_reason"), final=final,
               accepted=status == "completed" and bool(final),
               verdict="PASS" if lines[0].startswith("PASS") else "FAIL", why=" ".join(lines)[:400])
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--packs", required=True, type=Path)
    parser.add_argument("--model", required=True)
    parser.add_argument("--runs", default="greedy", help="comma-separated: greedy or T:SEED")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", default="", help="comma-separated pack folder names")
    options = parser.parse_args()
    packs_dir = options.packs.resolve()
    grader = packs_dir / "grade.py"
    packs = sorted(p for p in packs_dir.iterdir() if (p / "task.json").is_file())
    if options.only:
        packs = [p for p in packs if p.name in options.only.split(",")]
    rows = []
    for pack in packs:
        for spec in options.runs.split(","):
            row = grade(grader, pack, run_one(pack, options.model, spec, options.timeout))
            rows.append(row)
            print(f"{row['pack']:<20} {row['run']:<8} {row['verdict']:<4} {row.get('status')!s:<10} "
                  f"{row.get('stop_reason')!s:<22} {row['seconds']:>6}s", flush=True)
            if options.out:
                with options.out.open("a") as handle:
                    handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    right = sum(r["verdict"] == "PASS" for r in rows)
    wrong_accepted = [r for r in rows if r["accepted"] and r["verdict"] == "FAIL"]
    print(f"\nright: {right}/{len(rows)}   accepted but wrong: {len(wrong_accepted)}/{len(rows)}")
    for r in wrong_accepted:
        print(f"  ACCEPTED WRONG {r['pack']} {r['run']}: {r['final']!r}\n    grader: {r['why']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
