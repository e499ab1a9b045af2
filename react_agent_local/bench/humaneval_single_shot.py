"""HumanEval single-shot baseline: the model writes each function once, no tools, no feedback.

The same GGUF and sampler as the agent's arm, through the same backend: Qwen's chat template, one
user message asking for the function (the prompt as evalplus words it for instruct models), greedy
unless --temperature says otherwise. The reply's first Python code block is the solution (the
prompt prepended when the block does not define the function itself), graded by the family's own
grader: the benchmark's hidden tests in the sandbox.

    ../.venv/bin/python bench/humaneval_single_shot.py --model PATH [--n 60] [--seed 0] [--out FILE.jsonl]

--out is a JSONL report, one line per problem; a run that stops resumes from it (problems already
in it are not run again). Prints pass@1 with a 95 % Wilson interval, the median seconds per problem
and the failure families.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from collections import Counter
from pathlib import Path

from agent.models.backends import load_policy
from agent.evaluation.report import wilson_interval
from agent.families.humaneval.generator import CODE_PROMPT
from agent.families.humaneval.grading import check_solution
from agent.families.humaneval.problems import Problem, subset
from agent.models.model_policy import ModelRequest

# the same words as the agent's first version is asked with (the family's code prompt)
INSTRUCTION = CODE_PROMPT.replace("{code}", "{prompt}")
# the language may sit on the fence or on a line of its own (the 0.5B writes "```\npython\n")
_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(?:(?:python|py)[ \t]*\n)?(.*?)```", re.S)


def wilson(passed: int, n: int) -> tuple[float, float]:
    """The 95 % Wilson interval (the evaluation report's, within 0-1); NaN for no problems."""
    interval = wilson_interval(passed, n)
    return interval if interval is not None else (float("nan"), float("nan"))


def read_report(out: Path | None) -> dict[str, dict]:
    """The rows of a JSONL report written so far, by task id (a resumed run skips them)."""
    done: dict[str, dict] = {}
    if out is not None and out.is_file():
        for line in out.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["task_id"]] = row
    return done


def solution_from(reply: str, problem: Problem) -> str:
    """The first code block of the reply (or the whole reply); the prompt is prepended when the block
    does not define the function (the model continued the body)."""
    blocks = _BLOCK.findall(reply)
    code = blocks[0] if blocks else reply
    if re.search(rf"^\s*def {re.escape(problem.entry_point)}\s*\(", code, re.M):
        return code
    return problem.prompt + code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--n", type=int, default=60, help="problems of the seed-chosen subset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-new-tokens", type=int, default=768)
    parser.add_argument("--out", default=None, help="JSONL report (resumable)")
    args = parser.parse_args()
    out = Path(args.out) if args.out else None
    done = read_report(out)
    policy = load_policy(args.model)
    problems = subset(args.n, args.seed)
    for i, problem in enumerate(problems, 1):
        if problem.task_id in done:
            continue
        started = time.perf_counter()
        request = ModelRequest(messages=[{"role": "user", "content": INSTRUCTION.format(prompt=problem.prompt.strip())}],
                               prefix="", value_schema=None, suffix="", max_new_tokens=args.max_new_tokens,
                               temperature=args.temperature, seed=args.seed if args.temperature > 0 else None)
        generation = policy.generate(request)
        failures = check_solution(solution_from(generation.text, problem), problem.task_id)
        row = {"task_id": problem.task_id, "passed": not failures, "failures": failures,
               "seconds": round(time.perf_counter() - started, 2), "output_tokens": generation.output_tokens,
               "finish_reason": generation.finish_reason, "model": policy.description.name}
        done[problem.task_id] = row
        if out is not None:
            with out.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
        print(f"[{i}/{len(problems)}] {problem.task_id}: {'pass' if row['passed'] else 'FAIL ' + ','.join(failures)} "
              f"({row['seconds']} s, {row['output_tokens']} tok)", flush=True)
    rows = [done[p.task_id] for p in problems]
    passed = sum(r["passed"] for r in rows)
    low, high = wilson(passed, len(rows))
    print(f"\nsingle-shot, {policy.description.name}, seed {args.seed}, {len(rows)} problems, T={args.temperature}: "
          f"pass@1 {passed}/{len(rows)} = {passed / len(rows):.1%} (95 % Wilson {low:.1%}-{high:.1%}), "
          f"median {statistics.median(r['seconds'] for r in rows):.1f} s per problem")
    print("failure families:", dict(Counter(f for r in rows for f in r["failures"])))


if __name__ == "__main__":
    main()
