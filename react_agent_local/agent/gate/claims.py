"""The Final's claims, checked against the evidence before the Final is accepted.

Three kinds of claim are read from the answer text (``numbers.py`` reads numbers and comparisons in
any script) and checked, using only the cited successful Observations (and the goal the user wrote)
-- never the ground truth:

* **numbers** -- every number the answer states is grounded (``numbers.grounded``) by a number a cited
  Observation holds or computed, a value of a declared check, or a number the goal states: exactly,
  rounded to the decimals it is written with (``78.13`` for 78.125, ``818.9万`` for 8189137), or
  rounded to a whole number of its unit only where the goal or the guide asks for rounding
  (``81695`` for 81695.19 "to the nearest whole dollar"); a percentage may be its fraction
  (``31.22%`` for 0.3122). Plain integers up to 10 are exempt, since prose counts things, and so is
  a step or Observation written by its number ("from step 11", ``attribution.is_reference``). The
  digits of a fact's name the answer writes (``Turku hospital beds 2015``) state no number and no
  comparison (``attribution.without_name_digits``);
* **comparisons** -- every ``X >= Y`` (also ``≥ > <= ≤ < == !=``, arithmetic on either side) it
  states is arithmetically true, and where it claims a truth (``is True``, ``为False``, ``成立``) that
  claim is right;
* **checks and verdict** -- where the pack (or its family, ``packs.TaskPack.guide``) declares the
  checks a verdict needs (``CheckSpec``: ``left op right`` over the evidence), a stated comparison
  against a check's threshold (``x op threshold``, or written the other way round, ``70 <= 72``, or
  as its complement, ``62 < 65``) must state that check's value -- and not a rounding of it that
  crosses the threshold (``77 >= 77`` for 76.67) -- and the stated verdict must be the positive one
  exactly when every check holds;
* **bound slots** -- a slot of the answer form bound to an expression (``{number:calculator.value}``,
  ``{name:argmin(record.values)}``) must hold what the expression gives on the cited evidence: the
  number exactly or rounded to the decimals it is written with (never to a whole number), or, where
  the binding rounds itself (``{number:round(calculator.value, 2)}``), exactly that rounding; the
  name as written up to case, spaces and punctuation. The bound values count as evidence for the
  number rule above;
* **attribution** -- a number a cited Observation holds as a named fact's (``attribution.py``) is not
  stated next to the name of another fact the run has seen ("Graz population is 2301910" where
  2301910 is the Leeds lookup's). A number a site labels with a scale (``(thousands)``) may be stated
  with it ("1167.4 thousand"). Where the goal quotes a fact's name ('Porto population'), or writes a
  looked-up fact's name word for word, an answer stating only other facts' values answers another
  question (``attribution.off_question``): a near-namesake ('Porto metro population') is another fact.

* **the computation a number rests on** -- a stated number that is the value (either sign) of a
  cited calculator computation, and of no sound one, is refused unless that computation is sound
  (``evidence_tables.py`` reads the expression): none of its sums mixes the cells of several columns
  or tables, or takes a cell twice (``(69.5 + 80 + 71.5) / 3`` over two months' tables); every
  literal is a number the run's Observations hold (a calculator's by its value, never its
  expression's text), the goal or the final hints state, a plain derivation of one (``v / 100``,
  ``1 ± v / 100``, ``v * 100``), a count (a cited table's rows, another tool's results) or
  ``0 1 2 100``; and a factor a product repeats three times or more is repeated such a number of
  times (``1.035`` six times where the task says 7 years). Else the answer rests on a computation of
  something the question does not ask;

* **the question and what each number is** -- for any pack, declared checks or not: a Final that
  states no answer of the kind the goal asks for (a number, a name, a verdict, the members of a
  list; ``question_kind.py``), or only a bare comparison, or the task's own text, is refused; a
  number stated beside a table's row label, a threshold's word or a statistic's word must be that
  row's value, a threshold of the record or a computation of that statistic; one stated under an
  extremum's word (``highest``, ``最低``) or a spread's (``spread``, ``极差``) with no row must be
  that extremum or spread (highest minus lowest) of a cited table's column; a change's sign is
  read from its word; a list must agree with the condition it states and a count with its list
  (``bound_claims.py`` over the evidence as ``evidence_tables.py`` reads it).

An operand of a check is a number or an expression of the check language (``check_language.py``)
over the evidence: ``TOOL.path`` names a field of the latest successful Observation of TOOL
(``calculator.value``, ``lookup_fact.value``, ``TOOL.data.field``), ``record.rules.floor`` a threshold
of the record the knowledge search read, with arithmetic and ``abs``/``round``/``min``/``max``/
``mean``/``sum``/``count`` around them.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, replace
from typing import Iterable, Literal, Mapping

from agent.gate.bound_claims import bound_problems, sign_free
from agent.gate.evidence_tables import Computation, Evidence, read_evidence
from agent.gate.question_kind import question_kinds, unanswered
from agent.gate.attribution import (
    is_reference, misattributed, off_question, scaled_readings, sites, without_name_digits
)
from agent.gate.check_language import evaluate, outer_function
from agent.contracts.task import AnswerGuide, CheckSpec
from agent.contracts.decision import Observation, latest_ok
from agent.util.number_text import number_text
from agent.gate.numbers import (
    Comparison, Number, asks_rounding, close, compare, grounded, numbers_in, read_comparisons, read_numbers
)

SMALL_INTEGER = 10
CONSTANTS = (0.0, 1.0, 2.0, 100.0)


# -- the evidence --------------------------------------------------------------------------------


def evidence_numbers(observations: Iterable[Observation]) -> list[float]:
    """Every number in the results of these Observations (values, and numbers written in text)."""
    return [n.value for obs in observations if obs.ok for n in numbers_in(obs.result)]


def evidence_readings(observations: Iterable[Observation]) -> list[float]:
    """What the numbers of these Observations may stand for: as written, a percentage as its
    fraction, ``8.19万`` as 81900 and as 8.19 (``numbers.Number.readings``)."""
    return [r for obs in observations if obs.ok for n in numbers_in(obs.result) for r in n.readings()]


def number_forms(values: Iterable[float]) -> tuple[str, ...]:
    """How these numbers may be written: exactly, and rounded to 1..4 decimals."""
    forms: list[str] = []
    for v in values:
        candidates = [str(int(v))] if float(v).is_integer() else [repr(float(v))] + [
            f"{v:.{d}f}".rstrip("0").rstrip(".") for d in (4, 3, 2, 1)]
        forms += [c for c in candidates if c not in forms]
    return tuple(forms)


def resolve(operand: float | str, latest_ok: Mapping[str, Observation]) -> float | None:
    """The number an operand stands for, or None when the evidence does not (yet) give one. A text
    operand is an expression of the check language (``check_language.py``); text outside it raises
    ``CheckLanguageError``, the pack's mistake."""
    if isinstance(operand, (int, float)) and not isinstance(operand, bool):
        return float(operand)
    value = evaluate(str(operand), latest_ok)
    return float(value) if isinstance(value, (int, float)) else None


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


def with_other_sign(number: Number) -> Number:
    """The number with the other sign (a change word carries the sign: ``fell by 1.33`` is -1.33)."""
    return replace(number, exact=-number.exact)


def fmt(value: float | None) -> str:
    return "?" if value is None else number_text(value)


# -- the answer ----------------------------------------------------------------------------------

def stated_comparisons(answer: str) -> list[Comparison]:
    return read_comparisons(answer)


def _phrase_in(answer: str, phrases: list[str], patterns: bool) -> bool:
    if patterns:
        return any(re.search(p, answer, re.IGNORECASE) for p in phrases)
    lowered = answer.casefold()
    return any(p.casefold() in lowered for p in phrases)


def stated_verdict(answer: str, positive: list[str], negative: list[str], *, patterns: bool = False) -> bool | None:
    """True/False for the positive/negative phrase (negative first: it often contains the positive);
    None when the answer states neither. ``patterns``: the phrases are regular expressions."""
    if _phrase_in(answer, negative, patterns):
        return False
    if _phrase_in(answer, positive, patterns):
        return True
    return None


ProblemKind = Literal["number", "attribution", "comparison", "check_missing", "check_value", "verdict", "no_verdict",
                      "slot", "unanswered", "binding", "statistic", "sign", "list", "count", "computation"]


@dataclass(frozen=True)
class Problem:
    """One false claim: what kind, and the feedback that names it."""

    kind: ProblemKind
    text: str


# -- the computation a number rests on ---------------------------------------------------------------


def _given_numbers(observations: list[Observation], task_texts: list[str], evidence: Evidence) -> list[float]:
    """The numbers a sound computation may compute with: what the Observations hold (a calculator's
    value and references, never its expression's text), what the task's texts state, their plain
    derivations, counts and the constants."""
    held: list[float] = []
    for o in (o for o in observations if o.ok):
        if o.tool != "calculator":
            held += [r for n in numbers_in(o.result) for r in n.readings()]
        elif isinstance(o.result, dict):
            refs = [r.get("value") for r in o.result.get("references") or [] if isinstance(r, dict)]
            held += [float(v) for v in [o.result.get("value"), *refs] if isinstance(v, (int, float))]
    held += [r for text in task_texts for n in read_numbers(text) for r in n.readings()]
    held += [-v for v in held if v < 0]  # a sign is an operator: 17.6 in "13.6 - (-17.6)" is -17.6's
    # counts: a table's rows, how many results another tool returned (the facts looked up) -- never how
    # often the calculator ran, which counts no item of the question
    tools = {o.tool for o in observations if o.ok} - {"calculator"}
    counts = [float(len(t.rows)) for t in evidence.tables] + [float(sum(o.ok and o.tool == t for o in observations))
                                                              for t in tools]
    return held + [d for v in held for d in (v / 100, 1 + v / 100, 1 - v / 100, v * 100)] + counts + list(CONSTANTS)


def _unsound(computation: Computation, given: list[float]) -> str:
    """Why a computation is no sound one (empty when it is)."""
    if computation.mixed:
        return f"{computation.obs_id}, whose sum {computation.mixed}"
    invented = list(dict.fromkeys(o for o in computation.operands
                                  if not any(grounded(n, given) for n in read_numbers(o)[:1])))
    repeated = next(((f, n) for f, n in computation.repeats if not any(close(n, g) for g in given)), None)
    if invented:
        why = f"computes with {', '.join(invented[:4])}: numbers"
    elif repeated:
        why = f"multiplies by {fmt(repeated[0])} {repeated[1]} times: a count"
    else:
        return ""
    return (f"{computation.obs_id}, which {why} neither the task nor any observation gives; compute what the question "
            "asks with the task's and the evidence's numbers only")


def _computation_problems(founded: list[Number], evidence: Evidence, given: list[float], whole: bool) -> list[Problem]:
    """Each stated number that rests on an unsound calculator computation and on no sound one."""
    verdicts = [(c, _unsound(c, given)) for c in evidence.computations if c.operands or c.mixed]
    sound = [c.value for c, why in verdicts if not why] + [v for t in evidence.tables for _, row in t.rows
                                                         for v in row.values()]
    problems: list[Problem] = []
    for number in founded:
        def rests(values: list[float]) -> bool:
            return grounded(number, values, whole=whole) or grounded(with_other_sign(number), values, whole=whole)
        why = next((why for c, why in verdicts if why and rests([c.value])), "")
        if why and not rests(sound) and all(why not in p.text for p in problems):
            problems.append(Problem("computation", f"the answer's {number.text} rests on {why}"))
    return problems


# -- bound slots -----------------------------------------------------------------------------------

_SLOT = re.compile(r"\{([^{}]*)\}")
_BOUND = re.compile(r"^\s*(number|name)\s*:\s*(\S.*?)\s*$", re.DOTALL)
_SLOT_NUMBER = r"([-+−]?[0-9０-９][0-9０-９,，]*(?:[.．][0-9０-９]+)?\s*%?)"


@dataclass(frozen=True)
class BoundSlot:
    """A slot of the answer form bound to an expression: ``{number:max(record.values)}``."""

    kind: str  # "number" | "name"
    expression: str

    def text(self) -> str:
        return f"{{{self.kind}:{self.expression}}}"


def bound_slots(form: str | None) -> list[BoundSlot]:
    """The bound slots of an answer form, in order."""
    return [BoundSlot(m.group(1), m.group(2)) for slot in _SLOT.findall(form or "") if (m := _BOUND.match(slot))]


def _form_reader(form: str) -> re.Pattern[str]:
    """A pattern that reads every slot of an answer back out of the answer (one group per slot)."""
    out, last = [], 0
    for match in _SLOT.finditer(form):
        literal = form[last:match.start()]
        out.append(r"\s*".join(re.escape(part) for part in re.split(r"\s+", literal)))
        slot = match.group(1).strip()
        kind = bound.group(1) if (bound := _BOUND.match(slot)) else slot
        if kind == "number":
            out.append(_SLOT_NUMBER)
        elif kind == "name":
            out.append(r"(.+?)")
        else:
            out.append("(" + "|".join(re.escape(o.strip()) for o in slot.split("|")) + ")")
        last = match.end()
    out.append(r"\s*".join(re.escape(part) for part in re.split(r"\s+", form[last:])))
    return re.compile(r"\s*" + "".join(out) + r"\s*", re.DOTALL | re.IGNORECASE)


def _name_key(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKC", text).casefold() if c.isalnum())


def bound_forms(form: str | None, evidence: list[Observation]) -> tuple[tuple[str, ...] | None, ...]:
    """Per bound slot of ``form``, the ways its value on ``evidence`` may be written (exactly, rounded
    to 0-4 decimals; a name as the evidence spells it), or None where the evidence gives none."""
    latest = latest_ok(evidence)
    forms: list[tuple[str, ...] | None] = []
    for slot in bound_slots(form):
        try:
            value = evaluate(slot.expression, latest)
        except Exception:  # the pack's mistake is reported by the gate, not here
            value = None
        if slot.kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool) \
                and outer_function(slot.expression) == "round":
            # the binding rounds itself: the gate admits that one number (slot_values), so does the
            # grammar (it admitted the value's other roundings: the 1.5B wrote 4.3 for 4.29 three times)
            digits = re.search(r",\s*(\d+)\s*\)\s*$", slot.expression)
            padded = f"{float(value):.{int(digits.group(1)) if digits else 0}f}"
            forms.append(tuple(dict.fromkeys([fmt(float(value)), padded])))
        elif slot.kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
            written = number_forms([float(value)])
            whole = f"{float(value):.0f}"
            forms.append(written + ((whole,) if whole not in written and whole != "-0" else ()))
        elif slot.kind == "name" and isinstance(value, str) and value:
            forms.append((value,))
        else:
            forms.append(None)
    return tuple(forms)


def slot_values(answer: str, form: str | None, evidence: list[Observation]) -> tuple[list[float], list[Problem]]:
    """The numbers the bound slots stand for (they count as evidence: the runtime worked them out),
    and the problems of an answer whose bound slot holds something else."""
    slots = bound_slots(form)
    if not slots:
        return [], []
    latest = latest_ok(evidence)
    expected = [evaluate(slot.expression, latest) for slot in slots]
    numbers = [float(v) for v in expected if isinstance(v, (int, float))]
    match = _form_reader(form).fullmatch(answer)
    if match is None:
        return numbers, [Problem("slot", "the answer does not follow the answer form, so its bound slots "
                                 f"cannot be read; write it in exactly this form: {form}"[:300])]
    problems: list[Problem] = []
    held_by_slot = [held for slot_text, held in zip(_SLOT.findall(form), match.groups()) if _BOUND.match(slot_text)]
    for slot, want, held in zip(slots, expected, held_by_slot):
        if want is None or (slot.kind == "number") != isinstance(want, (int, float)):
            problems.append(Problem("slot", f"the cited evidence does not give {slot.expression} "
                                    f"for the {slot.text()} slot; cite the observations it is worked out from"))
        elif slot.kind == "name":
            if _name_key(held) != _name_key(str(want)):
                problems.append(Problem("slot", f"the {slot.text()} slot holds '{held.strip()[:40]}', "
                                        f"but {slot.expression} is {want}"))
        else:
            stated = read_numbers(held)
            # Exact, or rounded to the decimals written -- unless the binding rounds itself
            # (round(calculator.value, 2)): then it names the one number the slot must hold.
            rounds = outer_function(slot.expression) == "round"
            if not stated or not (close(stated[0].value, float(want)) if rounds
                                  else grounded(stated[0], [float(want)], whole=False)):
                problems.append(Problem("slot", f"the {slot.text()} slot holds {held.strip()[:30]}, "
                                        f"but {slot.expression} is {fmt(float(want))}"))
    return numbers, problems


def claim_problems(answer: str, evidence: list[Observation], goal: str, guide: AnswerGuide | None,
                   checks: list[ResolvedCheck], context: list[Observation] | None = None) -> list[Problem]:
    """Every false claim of the answer, in the order of the module docstring. ``context`` is every
    Observation the run can see (default: the cited ones), for the names a number may be stated under."""
    bound, problems = slot_values(answer, guide.answer_form if guide else None, evidence)
    cited_sites = sites(evidence)
    seen_sites = cited_sites if context is None else sites(context)
    answer = without_name_digits(answer, seen_sites, goal)  # from here on: a fact's name states no number
    declared = [c.left for c in checks if c.left is not None] + [c.right for c in checks if c.right is not None] + bound
    observed = evidence_readings(evidence) + scaled_readings(cited_sites) + declared
    goal_numbers = [r for n in read_numbers(goal) for r in n.readings()]
    # A binding's own text (``round(calculator.value, 2)``) is no request to round what the answer states.
    form = _SLOT.sub(" ", guide.answer_form or "") if guide else ""
    whole = asks_rounding(" ".join([goal, *(guide.hints if guide else []), form]))
    ungrounded: set[float] = set()
    founded: list[Number] = []
    for number in read_numbers(answer):
        if number.plain_integer and abs(number.value) <= SMALL_INTEGER or number.value in ungrounded \
                or is_reference(answer, number):
            continue
        if not grounded(number, observed + goal_numbers, whole=whole) and not (
                sign_free(answer, number) and grounded(with_other_sign(number), observed, whole=whole)):
            ungrounded.add(number.value)
            problems.append(Problem("number", f"the number {number.text} appears in no cited observation"))
        else:
            founded.append(number)
    problems += [Problem("attribution", m.text()) for m in
                 misattributed(answer, founded, cited_sites, seen_sites, declared + goal_numbers, goal)]
    asked = off_question(founded, cited_sites, seen_sites, goal, declared, goal_numbers)
    if asked:
        problems.append(Problem("attribution", f"the question asks for {', '.join(repr(a) for a in asked[:3])}; "
                                "the answer states the value of another fact"))
    # What the answer says each number is, and whether it answers the question (bound_claims.py,
    # question_kind.py): for any pack, declared checks or not.
    tables = read_evidence(evidence)
    given = _given_numbers(evidence if context is None else context, [goal, *(guide.hints if guide else [])], tables)
    problems += _computation_problems(founded, tables, given, whole)
    problems += [Problem("unanswered", text) for text in
                 unanswered(answer, goal, guide.hints if guide else [], tables.labels(),
                            verdict_declared=bool(guide and guide.verdict),
                            form_declared=bool(guide and guide.answer_form))]
    problems += [Problem(f.kind, f.text) for f in
                 bound_problems(answer, tables, whole=whole, goal_numbers=goal_numbers,
                                asks_list="list" in question_kinds(goal), goal=goal, skip=ungrounded)]
    comparisons = stated_comparisons(answer)
    for c in comparisons:
        if c.false:
            problems.append(Problem("comparison", f"'{c.text}' is false" if c.claimed is None else
                                    f"'{c.text}' is wrong: {fmt(c.left)} {c.op} {fmt(c.right)} is {c.truth}"))
    for check in checks:
        if not check.known:
            continue
        name = f" ({check.right_label})" if check.right_label else ""
        against = [(c, read) for c in comparisons if (read := c.against(check.op, check.right)) is not None]
        if not against and comparisons:
            # The answer states checks but not this one: a verdict over one check only (or the same
            # comparison twice, "lowest 79 >= 79" copied from the average's) is not the reasoning.
            problems.append(Problem("check_missing", f"the answer does not state the {check.label} check: "
                                    f"{fmt(check.left)} {check.op} {fmt(check.right)}{name}"))
            continue
        stating = [(c, negated) for c, (side, negated) in against if side.states(check.left, whole)]
        if against and not stating:
            problems.append(Problem("check_value", f"'{against[0][0].text}' compares the wrong value with "
                                    f"{fmt(check.right)}{name}: the {check.label} is {fmt(check.left)}"))
        for c, negated in stating:
            # A rounding that crosses the threshold states another outcome than the check's.
            if (c.truth != negated) != check.holds:
                problems.append(Problem("check_value", f"'{c.text}' rounds the {check.label} {fmt(check.left)} "
                                        f"across {fmt(check.right)}: {check.text()} is {check.holds}"))
                break
    verdict = guide.verdict if guide else None
    if verdict is not None and checks and all(c.known for c in checks):
        said = stated_verdict(answer, verdict.positive, verdict.negative)
        should = all(c.holds for c in checks)
        if said is None:
            problems.append(Problem("no_verdict", f"the answer states no verdict; write '{verdict.positive[0]}' "
                                    f"or '{verdict.negative[0]}'"))
        elif said != should:
            failing = [c.text() for c in checks if not c.holds]
            why = ("; ".join(f"{t} is False" for t in failing) if failing
                   else "every check holds: " + "; ".join(f"{c.text()} is True" for c in checks))
            problems.append(Problem("verdict", f"the verdict contradicts the checks ({why})"))
    return problems

