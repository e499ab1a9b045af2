"""Which named fact a stated number belongs to: the claim gate's attribution rule.

``claims.py`` checks that every number an answer states is held by a cited Observation. That alone
accepts "Graz population is 2301910" citing a lookup of *Leeds* population that holds 2301910: the
number is in the evidence, under another name. This module reads the names around the numbers of
the evidence and of the answer, and finds the number stated next to another fact's name.

**A site** is a number at its place in an Observation's JSON result, with the labels around it:

* the short strings beside it in the same object (``{"fact": "Leeds population", "value": 2301910,
  "unit": "people"}`` labels 2301910 with ``Leeds population`` and ``people``) -- a *named* site;
* the key it stands under in an object of numbers only (``{"Leeds population": 2301910, ...}``, a list
  of facts looked up so far; ``{"East": 52, "West": 48}``, a record's values).

Numbers written inside text, and objects of other shapes, give no site: what a sentence's number
belongs to is not read here, so it is never refused here.

**The rule.** Take a stated number that the evidence grounds, whose holders (the sites whose value
grounds it) are all labelled and one of them named, and that no check, bound slot or number of the
goal grounds. The phrase next to it must not name a label word that only *other* named sites have.
The phrase runs back to the nearest comma, conjunction or other number (further back, within its
sentence, while a phrase names no label), or is the phrase right after the number when nothing
before it names a label. Label words are Latin words (two letters or more, a few function words
aside) and pairs of adjacent CJK characters (``台北人口`` gives 台北 北人 人口), so the rule reads
Chinese as it reads English.

**Scales.** A named site whose labels carry a scale (``Split population (thousands)``, unit ``万人``)
also stands for its value times that scale, so "1167.4 thousand" is grounded by 1167.4 thousands.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterable, Iterator

from agent.contracts.decision import Observation
from agent.gate.numbers import Number, grounded, read_numbers

MAX_LABEL_CHARS = 60
MAX_LABEL_WORDS = 8
MAX_SITES = 2_000

_FUNCTION_WORDS = frozenset(
    "a an the of in on at to for from by with as is are was were be been its it this that these those "
    "and or but per than then into over under about".split())
_WORD = re.compile(r"[^\W\d_]+")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
# Where a sentence ends, and where a phrase inside it ends (a comma, a conjunction).
_SENTENCE = re.compile(r"[.;!?。；！？\n]")
_PHRASE = re.compile(r"[,，、]|\b(?:and|or|but|while|whereas|whilst|versus|vs)\b|和|与|而", re.IGNORECASE)
_SCALES = ((re.compile(r"\bthousands?\b", re.IGNORECASE), 10 ** 3),
           (re.compile(r"\bmillions?\b", re.IGNORECASE), 10 ** 6),
           (re.compile(r"\bbillions?\b", re.IGNORECASE), 10 ** 9),
           (re.compile(r"万"), 10 ** 4), (re.compile(r"亿"), 10 ** 8))


def label_words(text: str) -> frozenset[str]:
    """The label words of a text: Latin words casefolded, CJK runs as adjacent pairs."""
    words: set[str] = set()
    for match in _WORD.finditer(text):
        token = match.group(0)
        rest = _CJK.sub(" ", token)
        words.update(w for w in rest.casefold().split() if len(w) >= 2 and w not in _FUNCTION_WORDS)
        for run in _CJK.findall(token):
            words.update([run] if len(run) == 1 else [run[i:i + 2] for i in range(len(run) - 1)])
    return frozenset(words)


@dataclass(frozen=True)
class Site:
    """One number of the evidence with its labels."""

    obs_id: str
    value: float
    labels: tuple[str, ...]
    named: bool  # labelled by strings beside it (a fact), not only by its key in a map of numbers

    @cached_property
    def words(self) -> frozenset[str]:
        return frozenset().union(*(label_words(label) for label in self.labels)) if self.labels else frozenset()

    def name(self) -> str:
        return self.labels[0] if self.labels else ""

    def readings(self) -> list[float]:
        """Its value, and for a named site with a scale in its labels the value times that scale."""
        text = " ".join(self.labels) if self.named else ""
        return [self.value] + [self.value * scale for pattern, scale in _SCALES if pattern.search(text)]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _label(value: Any) -> bool:
    return (isinstance(value, str) and 0 < len(value) <= MAX_LABEL_CHARS
            and len(value.split()) <= MAX_LABEL_WORDS and bool(_WORD.search(value)))


def _sites(value: Any, obs_id: str) -> Iterator[Site]:
    if isinstance(value, dict):
        items = list(value.items())
        if items and all(_number(v) for _, v in items):
            for key, v in items:  # a map of numbers: each key labels its value
                yield Site(obs_id, float(v), (str(key),) if _label(str(key)) else (), named=False)
            return
        labels = tuple(v for _, v in items if _label(v))
        # A label holding another of the same object and three words more wraps it (a query the model
        # wrote around the fact's name: "The value of the fact 'Turku population' is"): the name is the label.
        # (A name of two words or more: a fact's own name holds its unit, "Turku hospital beds 2015" holds "beds".)
        labels = tuple(v for v in labels if not any(len(o.split()) >= 2 and o.casefold() in v.casefold()
                                                    and len(v.split()) >= len(o.split()) + 3 for o in labels))
        for _, v in items:
            if _number(v):
                yield Site(obs_id, float(v), labels, named=bool(labels))
            elif isinstance(v, (dict, list)):
                yield from _sites(v, obs_id)
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, (dict, list)):
                yield from _sites(v, obs_id)


def sites(observations: Iterable[Observation]) -> list[Site]:
    """The labelled numbers of these successful Observations (at most ``MAX_SITES``)."""
    out: list[Site] = []
    for obs in observations:
        if obs.ok and obs.result is not None:
            for site in _sites(obs.result, obs.id):
                out.append(site)
                if len(out) >= MAX_SITES:
                    return out
    return out


# A name the goal writes with a year-like integer in it ("Graz hospital beds 2015"): one to three
# words that are no function or comparison words, then the integer.
_GOAL_NAME = re.compile(r"\b((?:[^\W\d_]{2,}\s+){1,3})(\d{2,4})\b(?![.,]\d)")
_NOT_NAME_WORDS = _FUNCTION_WORDS | frozenset(
    "above below least most more less fewer greater smaller exceed exceeds exceeded reach reaches reached "
    "top within after before since until between around nearly almost roughly only just under over "
    "multiply divide plus minus times add subtract sum total round rounded".split())


def goal_name_labels(goal: str) -> set[str]:
    """The names with digits that ``goal`` writes (``hospital beds 2015``), see ``_GOAL_NAME``."""
    out = set()
    for match in _GOAL_NAME.finditer(goal):
        words = match.group(1).split()
        while words and words[0].casefold() in _NOT_NAME_WORDS:
            words.pop(0)
        if words and all(w.casefold() not in _NOT_NAME_WORDS for w in words):
            out.add(" ".join(words + [match.group(2)]))
    return out


def without_name_digits(answer: str, found: Iterable[Site], goal: str = "") -> str:
    """``answer`` with the digits of every label that holds letters and digits (``Turku hospital
    beds 2015``) blanked where the answer writes that label, one space for one digit: those digits
    name a fact, they state no number (the 1.5B wrote "Turku hospital beds 2015 = 4535 beds", which
    read as the false comparison 2015 = 4535). The names with digits the ``goal`` writes count too:
    a fact not looked up yet ("Graz hospital beds 2015 is 4535" before any Graz lookup) is named by
    the same words, and its digits must not hide them from the attribution rule."""
    labels = {label for site in found for label in site.labels
              if len(label) >= 4 and any(c.isdigit() for c in label) and _WORD.search(label)}
    labels |= goal_name_labels(goal)
    spans = [m.span() for label in labels for m in re.finditer(re.escape(label), answer, re.IGNORECASE)]
    if not spans:
        return answer
    chars = list(answer)
    for start, end in spans:
        for i in range(start, end):
            if chars[i].isdigit():
                chars[i] = " "
    return "".join(chars)


_REFERENCE = re.compile(r"(?:\b(?:steps?|observations?|obs|turns?|calls?|attempts?)|#|第)\s*$", re.IGNORECASE)


def is_reference(answer: str, number: Number) -> bool:
    """Is ``number`` a plain integer written right after a word that points at a step or an
    Observation ("citing the observation from step 11")? It numbers a step; it claims nothing."""
    return (number.plain_integer and number.value > 0
            and _REFERENCE.search(answer[max(0, number.start - 20):number.start]) is not None)


def scaled_readings(found: Iterable[Site]) -> list[float]:
    """What named sites with a scale in their labels also stand for: the value times that scale."""
    return [value for site in found for value in site.readings()[1:]]


def _label_phrase(piece: str, vocabulary: frozenset[str], backwards: bool) -> tuple[frozenset[str], str]:
    """Backwards: the label words of the phrase of ``piece`` nearest its end that names any, within
    its last sentence, and the phrase. Forwards: those of its first phrase."""
    if not backwards:
        phrase = _PHRASE.split(_SENTENCE.split(piece)[0])[0]
        return label_words(phrase) & vocabulary, phrase
    for phrase in reversed(_PHRASE.split(_SENTENCE.split(piece)[-1])):
        words = label_words(phrase) & vocabulary
        if words:
            return words, phrase
    return frozenset(), ""


@dataclass(frozen=True)
class Misattribution:
    number: Number
    holder: Site
    phrase: str  # the answer's words next to it, naming another fact
    rival: str  # a label of that other fact

    def text(self) -> str:
        # the answer's own words are not quoted back: the 1.5B copied them into its next lookup
        return (f"the number {self.number.text} is the value of '{self.holder.name()}' in {self.holder.obs_id}, "
                f"but the answer states it for another fact ({self.rival}); state each value only for its own "
                f"fact, and find the evidence for the fact the question asks about")


_PROPER = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]{2,}\b")


def goal_names(goal: str) -> frozenset[str]:
    """The names a goal writes with a capital inside a sentence (``Porto`` in "What is the Porto
    metro population?"): a fact the answer may name before the run has seen it."""
    return frozenset(w.casefold() for w in _PROPER.findall(goal.strip()) if w.casefold() not in _FUNCTION_WORDS)


def misattributed(answer: str, checked: Iterable[Number], cited: list[Site], context: list[Site],
                  exempt: list[float], goal: str = "") -> list[Misattribution]:
    """The stated numbers of ``checked`` (read from ``answer``) held by a named site of the cited
    Observations (``cited``: their ``sites``) but stated next to a label only other named sites (of
    ``context``, the sites of every successful Observation the run can see) have, or a name the ``goal`` writes with a capital that their own
    labels lack. A number ``exempt`` grounds (a check's value, a bound slot, a number of the goal) is
    not a fact's and is never refused here."""
    holders_of = cited
    known = [s for s in context if s.named]
    if not known:
        return []
    asked = goal_names(goal)
    label_vocabulary = frozenset().union(*(s.words for s in known)) | asked
    numbers = read_numbers(answer)
    out: list[Misattribution] = []
    for number in checked:
        if grounded(number, exempt):
            continue
        holders = [s for s in holders_of if grounded(number, s.readings())]
        if not holders or not any(s.named for s in holders) or not all(s.labels for s in holders):
            continue
        own = frozenset().union(*(s.words for s in holders))
        before = [n for n in numbers if n.end <= number.start]
        after = [n for n in numbers if n.start >= number.end]
        words, phrase = _label_phrase(answer[before[-1].end if before else 0:number.start], label_vocabulary, True)
        if not words:
            words, phrase = _label_phrase(answer[number.end:after[0].start if after else len(answer)],
                                          label_vocabulary, False)
        foreign = words - own
        if not foreign:
            continue
        rival = next((s for s in known if s.words & foreign), None)
        named = (repr(next(label for label in rival.labels if label_words(label) & foreign)) if rival is not None
                 else "one the question names")
        out.append(Misattribution(number, next(s for s in holders if s.named), " ".join(phrase.split())[:MAX_LABEL_CHARS], named))
    return out


# A name the goal sets in quotes: 'Leeds population', "Leeds population", ‘…’, “…”, 「…」 (an apostrophe
# inside a word, "What's", opens none).
_QUOTED = re.compile(r"(?<!\w)(?:'([^'\n]{2,60})'|\"([^\"\n]{2,60})\"|‘([^’\n]{2,60})’|“([^”\n]{2,60})”|「([^」\n]{2,60})」)(?!\w)")


def _fold(text: str) -> str:
    return " ".join(text.casefold().split())


def quoted_names(goal: str, labels: Iterable[str]) -> list[str]:
    """The names the goal quotes that are shaped like the evidence's fact names (``labels``): two label
    words or more, at least half of them in one label ('Porto population' beside 'Porto metro
    population'). A quote of a form or a word ('N people', 'yes') names no fact."""
    vocabularies = [label_words(label) for label in labels]
    names: dict[str, str] = {}
    for match in _QUOTED.finditer(goal):
        quote = " ".join(next(g for g in match.groups() if g).split())
        words = label_words(quote)
        if len(words) >= 2 and any(2 * len(words & v) >= len(words) for v in vocabularies):
            names.setdefault(_fold(quote), quote)
    return list(names.values())


def off_question(checked: Iterable[Number], cited: list[Site], context: list[Site], goal: str,
                 declared: list[float], goal_numbers: list[float]) -> list[str]:
    """The names of the facts the goal asks for when the answer states only the values of other named
    facts: it answers another question (a session's turn that answered the turn before's question, a
    near-namesake, 'Turku population' for 'Turku population (thousands)').

    A goal that quotes fact names asks for exactly those: the answer must state a value whose site has
    one of them as a label, unless it states a number no named fact holds (a computed value, a check's
    or a bound slot's: ``declared``), which is the answer's own. A goal that quotes none asks for the
    looked-up facts whose labels it writes word for word (``'Leeds population'`` in "What is the Leeds
    population?"). A number only the goal grounds (``goal_numbers``: a year, a floor) states no fact."""
    named = [s for s in context if s.named]
    quoted = quoted_names(goal, {label for s in named for label in s.labels})
    stated = [n for n in checked if not grounded(n, goal_numbers)]
    holders = [[s for s in cited if s.labels and grounded(n, s.readings())] for n in stated]
    if not stated or not any(s.named for h in holders for s in h):
        return []
    if quoted:
        if any(grounded(n, declared) or not h for n, h in zip(stated, holders)):
            return []  # a number the answer computed or a check declared: its own, whatever it names
        if any(_fold(label) in {_fold(q) for q in quoted} for h in holders for s in h for label in s.labels):
            return []
        return quoted
    folded = goal.casefold()
    asked = [s for s in named if any(len(l) >= 4 and l.casefold() in folded for l in s.labels)]
    stated = [n for n in stated if not grounded(n, declared)]
    if not asked or any(grounded(n, s.readings()) for n in stated for s in asked) \
            or not any(s.named and grounded(n, s.readings()) for n in stated for s in cited):
        return []
    return list(dict.fromkeys(next(l for l in s.labels if len(l) >= 4 and l.casefold() in folded) for s in asked))
