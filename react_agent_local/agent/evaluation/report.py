"""The eval report: Task Success with a 95 % Wilson score interval, metric means, seconds per run
and failure families, as one JSON object, a markdown page and a PNG chart.

Two success rates are reported side by side: the runtime's ``metrics.task_success`` and
the independent grade of ``grading.py``; runs where they disagree are listed, since one of the
two graders is then wrong. *Accepted but wrong* counts on its own the runs whose Final the
runtime's gate accepted and the independent grader fails: the answers a user would have been
handed as checked -- overall and per family (a generated family's, or the one a user pack's
``truth.json`` names). Runs that ended ``final_unverified`` are counted apart: the user got the
candidate marked unverified, never as an answer. Nothing here prints or stores an absolute path: packs are named by
their folder name and the model by its file name.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agent.evaluation.suite import EvalRun

Z95 = 1.959963984540054  # the 97.5th percentile of the standard normal distribution
CASE_TITLES = {"both": "both rules hold", "avg_fails": "only the average fails",
               "floor_fails": "only the floor fails", "both_fail": "both rules fail", None: "unknown"}


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval for a binomial proportion; None when there are no trials."""
    if n == 0:
        return None
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def quantile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def rate(outcomes: Iterable[bool | None]) -> dict[str, Any]:
    """Passed of the runs that have an outcome (None, e.g. no independent grader, is left out)."""
    outcomes = [bool(o) for o in outcomes if o is not None]
    passed, n = sum(outcomes), len(outcomes)
    interval = wilson_interval(passed, n)
    return {"passed": passed, "runs": n, "rate": round(passed / n, 4) if n else None,
            "ci95": [round(interval[0], 4), round(interval[1], 4)] if interval else None}


def metric_means(runs: list[EvalRun]) -> dict[str, dict[str, Any]]:
    """Mean of every numeric (or boolean, as a share) metric over the runs that have it."""
    names = []
    for run in runs:
        names += [k for k in run.metrics if k not in names]
    means = {}
    for name in names:
        values = [float(v) for run in runs if isinstance(v := run.metrics.get(name), (int, float))]
        means[name] = {"mean": round(statistics.fmean(values), 4) if values else None, "runs": len(values)}
    return means


def failure_families(runs: list[EvalRun]) -> dict[str, dict[str, int]]:
    """Failed runs grouped by each ``metrics.checks`` entry that is False; stopped runs by stop_reason."""
    by_check, by_stop = Counter(), Counter()
    for run in runs:
        if run.status != "completed":
            by_stop[run.stop_reason] += 1
        elif not run.task_success:
            by_check.update(name for name, ok in run.checks.items() if not ok)
    return {"by_check": dict(by_check.most_common()), "by_stop_reason": dict(by_stop.most_common())}


def accepted_but_wrong(runs: list[EvalRun]) -> dict[str, Any]:
    """Runs whose Final was accepted (the run completed) that the independent grader fails, out of
    the accepted runs it grades."""
    accepted = [r for r in runs if r.stop_reason == "completed" and r.independent_success is not None]
    wrong = [r for r in accepted if not r.independent_success]
    families: dict[str, dict[str, int]] = {}
    accepted_ids, wrong_ids = {id(r) for r in accepted}, {id(r) for r in wrong}
    for r in runs:
        if r.independent_success is None:
            continue
        row = families.setdefault(str(r.family), {"runs": 0, "accepted": 0, "accepted_but_wrong": 0, "unverified": 0})
        row["runs"] += 1
        row["accepted"] += id(r) in accepted_ids
        row["accepted_but_wrong"] += id(r) in wrong_ids
        row["unverified"] += r.stop_reason == "final_unverified"
    return {"runs": len(wrong), "of_accepted": len(accepted),
            "share": round(len(wrong) / len(accepted), 4) if accepted else None,
            "per_family": dict(sorted(families.items())),
            "list": [{"pack": r.pack, "run": r.run, "independent_failures": r.independent_failures} for r in wrong],
            # the same runs, with the Final each one was accepted with (what the user was handed as checked)
            "finals": [{"pack": r.pack, "run": r.run, "family": r.family, "answer": r.answer} for r in wrong]}


def build_report(runs: list[EvalRun], settings: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    packs: dict[str, list[EvalRun]] = {}
    for run in runs:
        packs.setdefault(run.pack, []).append(run)
    cases: dict[str | None, list[EvalRun]] = {}
    for run in runs:
        cases.setdefault(run.case, []).append(run)
    seconds = [run.seconds for run in runs]
    return {
        "report": "react-agent-local eval",
        "settings": settings,
        "model": model,
        "overall": {"task_success": rate(r.task_success for r in runs),
                    "independent": rate(r.independent_success for r in runs)},
        "accepted_but_wrong": accepted_but_wrong(runs),
        "per_pack": [{"pack": name, "case": group[0].case, "task_success": rate(r.task_success for r in group),
                      "independent": rate(r.independent_success for r in group)} for name, group in packs.items()],
        "per_case": {str(case): {"task_success": rate(r.task_success for r in group),
                                 "independent": rate(r.independent_success for r in group)}
                     for case, group in sorted(cases.items(), key=lambda kv: str(kv[0]))},
        "seconds_per_run": {"median": _round(quantile(seconds, 0.5)), "p90": _round(quantile(seconds, 0.9)),
                            "mean": _round(statistics.fmean(seconds)) if seconds else None,
                            "total": round(sum(seconds), 3)},
        "metrics_mean": metric_means(runs),
        "failures": failure_families(runs),
        "independent_failures": dict(Counter(f for r in runs for f in r.independent_failures or []).most_common()),
        "disagreements": [{"pack": r.pack, "run": r.run, "task_success": r.task_success,
                           "independent_failures": r.independent_failures}
                          for r in runs if r.independent_success is not None
                          and bool(r.task_success) != r.independent_success],
        "runs": [r.to_dict() for r in runs],
    }


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


# -- markdown ----------------------------------------------------------------------------------

def _share(r: dict[str, Any]) -> str:
    if not r["runs"]:
        return "N/A"
    return f"{r['passed']}/{r['runs']} ({r['rate'] * 100:.0f} %)"


def _ci(r: dict[str, Any]) -> str:
    return "N/A" if not r["ci95"] else f"{r['ci95'][0] * 100:.0f}–{r['ci95'][1] * 100:.0f} %"


def _num(value: Any) -> str:
    if value is None:
        return "N/A"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def to_markdown(report: dict[str, Any]) -> str:
    s, m, o = report["settings"], report["model"], report["overall"]
    lines = [
        "# Eval report", "",
        (f"Model **{m.get('name', '?')}** ({m.get('backend', '?')}, {m.get('device', '?')}) · packs `{s['packs']}` "
        f"(seed {s['seed']}) · {s['runs']} run(s) per pack · temperature {s['temperature']} "
        f"(top_p {s['top_p']}, top_k {s['top_k']}) · mode {s['mode'] or 'from each pack'}"), "",
    ]
    if s.get("interrupted"):
        lines += ["**Interrupted:** only the runs that finished are counted.", ""]
    lines += [
        "## Task Success", "",
        "| Pack | Case | Task Success | 95 % CI | Independent grade | 95 % CI |",
        "|---|---|---:|---|---:|---|",
    ]
    for p in report["per_pack"]:
        lines.append(f"| {p['pack']} | {CASE_TITLES.get(p['case'], p['case'])} | {_share(p['task_success'])} | "
                     f"{_ci(p['task_success'])} | {_share(p['independent'])} | {_ci(p['independent'])} |")
    lines.append(f"| **all** | | **{_share(o['task_success'])}** | {_ci(o['task_success'])} | "
                 f"**{_share(o['independent'])}** | {_ci(o['independent'])} |")
    wrong = report["accepted_but_wrong"]
    lines += ["", (f"**Accepted but wrong** (the gate accepted the Final, the independent grader fails it): "
                   f"{wrong['runs']} of {wrong['of_accepted']} accepted run(s) with an independent grade"
                   + (f" ({wrong['share'] * 100:.0f} %)" if wrong["share"] is not None else ""))]
    if wrong["per_family"]:
        lines += ["", "| Family | Graded runs | Accepted | Accepted but wrong | Ended unverified |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| {name} | {f['runs']} | {f['accepted']} | {f['accepted_but_wrong']} | {f['unverified']} |"
                  for name, f in wrong["per_family"].items()]
    lines += [f"- {w['pack']} run {w['run']}: {', '.join(w['independent_failures'] or []) or '—'}"
              + (f" — Final: “{' '.join(str(f['answer']).split())[:160]}”" if f.get("answer") else "")
              for w, f in zip(wrong["list"][:20], wrong.get("finals") or [{}] * 20)]
    lines += ["", "### By verdict case", "", "| Case | Task Success | 95 % CI | Independent grade |", "|---|---:|---|---:|"]
    for case, c in report["per_case"].items():
        title = CASE_TITLES.get(None if case == "None" else case, case)
        lines.append(f"| {title} | {_share(c['task_success'])} | {_ci(c['task_success'])} | {_share(c['independent'])} |")
    sec = report["seconds_per_run"]
    lines += ["", "## Seconds per run", "",
              (f"median {_num(sec['median'])} s · p90 {_num(sec['p90'])} s · mean {_num(sec['mean'])} s · "
               f"total {_num(sec['total'])} s"), "",
              "## Metric means", "", "| Metric | Mean | Runs |", "|---|---:|---:|"]
    for name, mean in report["metrics_mean"].items():
        lines.append(f"| {name} | {_num(mean['mean'])} | {mean['runs']} |")
    failures = report["failures"]
    lines += ["", "## Failures", "", "| Failed check (metrics.checks) or stop reason | Runs |", "|---|---:|"]
    rows = [(name, n) for name, n in failures["by_check"].items()]
    rows += [(f"stopped: {name}", n) for name, n in failures["by_stop_reason"].items()]
    lines += [f"| {name} | {n} |" for name, n in rows] or ["| (none) | 0 |"]
    lines += ["", "| Independent grader: failure family | Runs |", "|---|---:|"]
    lines += [f"| {name} | {n} |" for name, n in report["independent_failures"].items()] or ["| (none) | 0 |"]
    if report["disagreements"]:
        lines += ["", "## Graders disagree", "", "| Pack | Run | metrics.task_success | Independent failures |",
                  "|---|---:|---|---|"]
        lines += [f"| {d['pack']} | {d['run']} | {d['task_success']} | {', '.join(d['independent_failures']) or '—'} |"
                  for d in report["disagreements"]]
    return "\n".join(lines) + "\n"


# -- chart -------------------------------------------------------------------------------------

def write_chart(report: dict[str, Any], path: Path) -> Path:
    """Per-pack Task Success (with Wilson intervals) beside the failure families, as one PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    packs = report["per_pack"]
    failures = report["failures"]
    families = list(failures["by_check"].items()) + [(f"stop: {k}", v) for k, v in failures["by_stop_reason"].items()]
    fig = Figure(figsize=(12, 4.8), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, width_ratios=[max(len(packs), 4), 4])
    rates = [(p["task_success"]["rate"] or 0) * 100 for p in packs]
    errors = [[r - (p["task_success"]["ci95"] or [0, 0])[0] * 100 for r, p in zip(rates, packs)],
              [(p["task_success"]["ci95"] or [0, 0])[1] * 100 - r for r, p in zip(rates, packs)]]
    positions = list(range(len(packs)))
    left.bar(positions, rates, color="#4C78A8", yerr=errors, capsize=3, ecolor="#555555")
    rotate = len(packs) > 6
    left.set_xticks(positions, [p["pack"] for p in packs], rotation=60 if rotate else 0,
                    ha="right" if rotate else "center", fontsize=8)
    overall = report["overall"]["task_success"]
    if overall["rate"] is not None:
        left.axhline(overall["rate"] * 100, color="#E45756", linestyle="--", linewidth=1.5,
                     label=f"all packs {overall['rate'] * 100:.0f} % (95 % CI {_ci(overall)})")
        left.legend(loc="lower right", fontsize=8)
    left.set_ylim(0, 105)
    left.set_ylabel("Task Success (%)")
    left.set_title(f"Task Success per pack — {report['model'].get('name', '?')}", fontsize=10)
    if families:
        names, counts = zip(*families)
        right.barh(range(len(names)), counts, color="#F58518")
        right.set_yticks(range(len(names)), names, fontsize=8)
        right.invert_yaxis()
    else:
        right.text(0.5, 0.5, "no failures", ha="center", va="center")
    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.set_xlabel("failed runs")
    right.set_title("Failures by check / stop reason", fontsize=10)
    fig.savefig(path, format="png")
    return path
