"""The Final's claims, checked against the evidence before the Final is accepted (SPEC R-CLAIM).

Three kinds of claim are read from the answer text and checked, using only the cited successful
Observations (and the goal the user wrote) -- never the ground truth:

* **numbers** -- every number the answer states appears in, or was computed by, a cited Observation
  (a number written with decimals may be a rounding of an observed one; integers up to 10 and
  numbers the goal itself states are exempt, since prose counts things);
* **comparisons** -- every ``X >= Y`` (also ``≥ > <= ≤ < ==``) it states is arithmetically true, and
  where it says ``is True``/``is False`` that word is right;
* **checks and verdict** -- where the pack (or the tool whose result the answer is about) declares the
  checks a verdict needs (``CheckSpec``: ``left op right`` over the evidence), a stated comparison
  against a check's threshold must use that check's value, and the stated verdict must be the
  positive one exactly when every check holds.

An operand of a check is a number or a reference to the evidence: ``TOOL.path`` names a field of the
latest successful Observation of TOOL (``calculator.value``, ``lookup_fact.value``, ``TOOL.data.field``),
optionally wrapped in ``min``/``max``/``mean``/``sum``/``count`` over a list or an object's values.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable

from .contracts import AnswerGuide, CheckSpec, Observation

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_NUMBER = r"-?\d+(?:\.\d+)?"
_NUMBER_IN_TEXT = re.compile(rf"(?<![\w.\-]){_NUMBER}(?![\d])")
_OPS = {">=": ">=", "≥": ">=", "=>": ">=", ">": ">", "<=": "<=", "≤": "<=", "=<": "<=", "<": "<", "==": "==", "=": "=="}
_COMPARISON = re.compile(
    rf"(?<![\w.\-])({_NUMBER})\s*(>=|≥|=>|<=|≤|=<|==|>|<|=)\s*({_NUMBER})(?![\d.])"
    r"(?:\s*(?:is|为|是|:|：|->|→)?\s*(True|False|true|false|TRUE|FALSE|成立|不成立))?")
_TRUE_WORDS = {"true", "成立"}
_FUNCTION = re.compile(r"^(min|max|mean|sum|count)\((.+)\)$")
_MATCHES = re.compile(r"^matches\(([^,()]+),([^,()]+)\)$")
SMALL_INTEGER = 10


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def compare(left: float, op: str, right: float) -> bool:
    if op == "==":
        return _close(left, right)
    if op == ">=":
        return left > right or _close(left, right)
    if op == "<=":
        return left < right or _close(left, right)
    if op == ">":
        return left > right and not _close(left, right)
    return left < right and not _close(left, right)


# -- the evidence --------------------------------------------------------------------------------


def _walk_numbers(value: Any, out: list[float]) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        if math.isfinite(value):
            out.append(float(value))
    elif isinstance(value, str):
        out.extend(float(m) for m in _NUMBER_IN_TEXT.findall(_THOUSANDS.sub("", value[:20_000])))
    elif isinstance(value, dict):
        for k, v in value.items():
            _walk_numbers(k, out)
            _walk_numbers(v, out)
    elif isinstance(value, list):
        for v in value:
            _walk_numbers(v, out)


def evidence_numbers(observations: Iterable[Observation]) -> list[float]:
    """Every number in the results of these Observations (values, and numbers written in text)."""
    out: list[float] = []
    for obs in observations:
        if obs.ok:
            _walk_numbers(obs.result, out)
    return out


def number_forms(values: Iterable[float]) -> tuple[str, ...]:
    """How these numbers may be written: exactly, and rounded to 1..4 decimals."""
    forms: list[str] = []
    for v in values:
        candidates = [str(int(v))] if float(v).is_integer() else [repr(float(v))] + [
            f"{v:.{d}f}".rstrip("0").rstrip(".") for d in (4, 3, 2, 1)]
        forms += [c for c in candidates if c not in forms]
    return tuple(forms)


def _lookup(path: str, latest_ok: dict[str, Observation]) -> Any:
    tool, _, rest = path.partition(".")
    if tool not in latest_ok:
        # Tool names may themselves hold a dot (``server.tool``): try the longest known name.
        for name in sorted(latest_ok, key=len, reverse=True):
            if path.startswith(name + "."):
                tool, rest = name, path[len(name) + 1:]
                break
        else:
            return None
    value: Any = latest_ok[tool].result
    for part in [p for p in rest.split(".") if p]:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def resolve(operand: float | str, latest_ok: dict[str, Observation]) -> float | None:
    """The number an operand stands for, or None when the evidence does not (yet) give one."""
    if isinstance(operand, (int, float)) and not isinstance(operand, bool):
        return float(operand)
    text = str(operand).strip()
    pair = _MATCHES.match(text)
    if pair:  # positions where two lists agree; a record's groups (a dict) stand for their names
        a, b = (_lookup(part.strip(), latest_ok) for part in pair.groups())
        a, b = (list(x) if isinstance(x, dict) else x for x in (a, b))
        if not isinstance(a, list) or not isinstance(b, list):
            return None
        return float(sum(1 for x, y in zip(a, b) if x == y))
    match = _FUNCTION.match(text)
    value = _lookup(match.group(2).strip() if match else text, latest_ok)
    if match:
        items = list(value.values()) if isinstance(value, dict) else value
        if not isinstance(items, list) or not items or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in items):
            return None
        name = match.group(1)
        return float({"min": min, "max": max, "sum": sum, "count": len,
                      "mean": lambda xs: sum(xs) / len(xs)}[name](items))
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


@dataclass(frozen=True)
class ResolvedCheck:
    label: str
    left: float | None
    op: str
    right: float | None
    right_label: str | None = None

    @property
    def known(self) -> bool:
        return self.left is not None and self.right is not None

    @property
    def holds(self) -> bool | None:
        return compare(self.left, self.op, self.right) if self.known else None

    def text(self) -> str:
        return f"{self.label} {fmt(self.left)} {self.op} {fmt(self.right)}"


def resolve_checks(checks: Iterable[CheckSpec], latest_ok: dict[str, Observation]) -> list[ResolvedCheck]:
    return [ResolvedCheck(c.label, resolve(c.left, latest_ok), c.op, resolve(c.right, latest_ok), c.right_label)
            for c in checks]


def fmt(value: float | None) -> str:
    if value is None:
        return "?"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


# -- the answer ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StatedComparison:
    left: float
    op: str
    right: float
    claimed: bool | None  # the "is True/False" the answer wrote, if any
    text: str
    left_decimals: int = 0

    def states(self, value: float) -> bool:
        """Is the left side ``value`` as written (``105.33`` for 105.3333…)?"""
        return _grounded(self.left, self.left_decimals, [value])


def stated_numbers(answer: str) -> list[tuple[float, int]]:
    """(value, decimals written) of each number in the answer."""
    out = []
    for m in _NUMBER_IN_TEXT.finditer(_THOUSANDS.sub("", answer)):
        token = m.group(0)
        out.append((float(token), len(token.partition(".")[2])))
    return out


def stated_comparisons(answer: str) -> list[StatedComparison]:
    out = []
    for m in _COMPARISON.finditer(_THOUSANDS.sub("", answer)):
        word = m.group(4)
        claimed = None if word is None else word.lower() in _TRUE_WORDS
        out.append(StatedComparison(float(m.group(1)), _OPS[m.group(2)], float(m.group(3)), claimed, m.group(0),
                                    len(m.group(1).partition(".")[2])))
    return out


def _grounded(value: float, decimals: int, observed: list[float]) -> bool:
    tolerance = 0.5 * 10 ** -decimals + 1e-9 if decimals else 1e-9
    return any(abs(v - value) <= tolerance for v in observed)


def _phrase_in(answer: str, phrases: list[str]) -> bool:
    lowered = answer.casefold()
    return any(p.casefold() in lowered for p in phrases)


def stated_verdict(answer: str, positive: list[str], negative: list[str]) -> bool | None:
    """True/False for the positive/negative phrase (negative first: it often contains the positive)."""
    if _phrase_in(answer, negative):
        return False
    if _phrase_in(answer, positive):
        return True
    return None


def check_claims(answer: str, evidence: list[Observation], goal: str, guide: AnswerGuide | None,
                 checks: list[ResolvedCheck]) -> list[str]:
    """Problems with the answer's claims, each naming the false claim; empty when every claim holds."""
    problems: list[str] = []
    observed = evidence_numbers(evidence) + [c.left for c in checks if c.left is not None] \
        + [c.right for c in checks if c.right is not None]
    goal_numbers = [v for v, _ in stated_numbers(goal)]
    for value, decimals in stated_numbers(answer):
        if decimals == 0 and value.is_integer() and abs(value) <= SMALL_INTEGER:
            continue
        if not _grounded(value, decimals, observed) and not _grounded(value, decimals, goal_numbers):
            problems.append(f"the number {fmt(value)} appears in no cited observation")
    comparisons = stated_comparisons(answer)
    for c in comparisons:
        truth = compare(c.left, c.op, c.right)
        if c.claimed is None and not truth:
            problems.append(f"'{c.text}' is false")
        elif c.claimed is not None and c.claimed != truth:
            problems.append(f"'{c.text}' is wrong: {fmt(c.left)} {c.op} {fmt(c.right)} is {truth}")
    for check in checks:
        if not check.known:
            continue
        against = [c for c in comparisons if _close(c.right, check.right) and c.op == check.op]
        if not against and comparisons:
            # The answer states checks but not this one: a verdict over one check only (or the same
            # comparison twice, "lowest 79 >= 79" copied from the average's) is not the reasoning.
            name = f" ({check.right_label})" if check.right_label else ""
            problems.append(f"the answer does not state the {check.label} check: {fmt(check.left)} "
                            f"{check.op} {fmt(check.right)}{name}")
        elif against and not any(c.states(check.left) for c in against):
            name = f" ({check.right_label})" if check.right_label else ""
            problems.append(f"'{against[0].text}' compares the wrong value with {fmt(check.right)}{name}: "
                            f"the {check.label} is {fmt(check.left)}")
    verdict = guide.verdict if guide else None
    if verdict is not None and checks and all(c.known for c in checks):
        said = stated_verdict(answer, verdict.positive, verdict.negative)
        should = all(c.holds for c in checks)
        if said is None:
            problems.append(f"the answer states no verdict; write '{verdict.positive[0]}' or '{verdict.negative[0]}'")
        elif said != should:
            failing = [c.text() for c in checks if not c.holds]
            why = ("; ".join(f"{t} is False" for t in failing) if failing
                   else "every check holds: " + "; ".join(f"{c.text()} is True" for c in checks))
            problems.append(f"the verdict contradicts the checks ({why})")
    return problems[:5]
