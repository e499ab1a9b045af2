"""What the goal asks for, and whether a Final states it: a number, a name, a verdict or a list.

``question_kinds`` reads the goal's own words, English or Chinese, by general cues of a question
(``how many``/``多少``/``几个``, ``which``/``哪个``/``哪些``, ``whether``/``是否``, ``by how much``/
``变化了多少``, ``compute``/``计算``); ``unanswered`` says what a Final leaves out: a Final whose
only claims are bare comparisons (``70 >= 66 is True``), a comparison written in words with one
side only (``大于等于 2765932 是 True``, ``at least 70 is true``) or comparisons of letters standing
for values (``X >= Y is False``), that repeats the task's own text (its goal,
a hint, the answer form with its slots unfilled), or that states no number where a number is asked,
no name from the evidence where a name is, no verdict where a verdict is, answers nothing.

Nothing here knows a pack: the cues are words of questions, the names are the evidence's.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Iterable, Literal

from agent.gate.numbers import read_comparisons, read_numbers

Kind = Literal["number", "name", "verdict", "list"]

_CUES: dict[Kind, re.Pattern[str]] = {
    "verdict": re.compile(r"\bwhether\b|\byes or no\b|^\s*(?:is|are|does|do|did|can|could|will|should|has|have)\b"
                          r"|是否|能否|可否|是不是|能不能|有没有|会不会", re.IGNORECASE | re.MULTILINE),
    "list": re.compile(r"\bwhich\s+(?:of\s+the\s+)?\w+s\b(?!\s+(?:value|name))|\blist\b|\ball\s+(?:the\s+)?\w+s\s+"
                       r"(?:that|which|with|whose|below|above|under|over)\b|哪些|列出", re.IGNORECASE),
    "name": re.compile(r"\bwhich\b|\bwho\b|\bname\b|\bnamed\b|\bfind\s+the\s+\w+\s+(?:with|that\s+has)\s+the\s+"
                       r"(?:lowest|highest|largest|smallest|best|worst|most|least)\b|哪个|哪一|哪家|哪位|名称|名字",
                       re.IGNORECASE),
    "number": re.compile(r"\bhow\s+(?:many|much)\b|\bby\s+how\b|\bwhat\s+(?:is|was|are|were|will)\s+the\b|\bcompute\b"
                         r"|\bcalculate\b|\bwork\s+out\b|\bdivide\b|\bsubtract\b|\bsum\b|\btotal\b|\baverage\b"
                         r"|\bper\s+capita\b|\bspread\b|\bshortfall\b|\bfalls?\s+short\b|\bstate\s+the\b"
                         r"|\banswer\s+with\s+the\b"
                         r"|多少|几个|几年|几|计算|算出|求出|求和|合计|总和|平均|变化|差值|人均|给出",
                         re.IGNORECASE),
}

# Words that state a verdict (outside a comparison's own "is True"): general words of judgement.
_VERDICT = re.compile(
    r"\b(?:yes|no|not?|meets?|met|fails?|failed|passes|passed|satisf(?:y|ies|ied)|eligible|ineligible|qualif(?:y|ies)"
    r"|can(?:not)?|can't|may|must|should|does|doesn't|holds?|held|violat\w*|releas\w*|ship\w*|approved?|reject\w*)\b"
    r"|满足|不满足|符合|不符合|达到|未达到|没有达到|达标|未达标|可以|不可以|不能|能够|通过|未通过|不通过|成立|不成立|允许|不允许|是|否",
    re.IGNORECASE)
_NONE = re.compile(r"\bnone\b|\bno\s+\w+|\bnot\s+any\b|没有|无|均未|都不", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"\{(?:number|name|[^{}]*\|[^{}]*)(?::[^{}]*)?\}")
# A comparison of letters standing for values ("X >= Y is False"): the form of a check, not a check.
_LETTER_COMPARISON = re.compile(r"(?<![\w.])[A-Za-z](?:\s*[+\-*/]\s*[A-Za-z])*\s*(?:>=|<=|==|!=|>|<|≥|≤|=)\s*[A-Za-z](?![\w.])")
# A truth value compared with a number ("true >= 334914895"): a claimed truth in a value's place.
_TRUTH = r"(?:true|false|yes|no|成立|不成立|真|假|是|否)"
_OP = r"(?:>=|<=|==|!=|>|<|≥|≤|=)"
# ("66.5 < 70 = True" claims a comparison's truth, and stays)
_TRUTH_COMPARISON = re.compile(rf"(?<![\w.]){_TRUTH}\s*{_OP}\s*[-+−]?\d|\d\s*(?:>=|<=|>|<|≥|≤)\s*{_TRUTH}(?![\w.])",
                               re.IGNORECASE)
# A comparison in words with its left side left out, and the truth it claims: the whole answer.
_ONE_SIDED = re.compile(r"\W*(?:大于等于|小于等于|大于|小于|等于|不低于|不高于|不超过|at least|at most|(?:greater|less|more|fewer)"
                        r"\s+than(?:\s+or\s+equal\s+to)?|equal\s+to)\s*[-+−]?\d[\d,.]*\s*%?\s*(?:是|为|is)?\s*"
                        r"(?:true|false|成立|不成立|为真|为假|真|假)\W*", re.IGNORECASE)
_WORDS = re.compile(r"[^\W\d_]+|\d+(?:\.\d+)?")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")

KIND_WORDS = {"number": "a number", "name": "a name", "verdict": "a verdict", "list": "the members"}


def question_kinds(goal: str) -> frozenset[Kind]:
    """The kinds of answer the goal asks for (several where it asks for several things)."""
    text = unicodedata.normalize("NFKC", goal)
    found = {kind for kind, cue in _CUES.items() if cue.search(text)}
    if "list" in found:
        found.discard("name")
    return frozenset(found)


def _tokens(text: str) -> list[str]:
    norm = unicodedata.normalize("NFKC", text).casefold()
    return _WORDS.findall(_CJK.sub(lambda m: f" {m.group(0)} ", norm))


def without_comparisons(answer: str) -> str:
    """The answer with every stated comparison (and its claimed truth) cut out."""
    out = answer
    for comparison in read_comparisons(answer):
        out = out.replace(comparison.text, " ", 1)
    return out


def is_echo(answer: str, task_texts: Iterable[str]) -> bool:
    """The answer repeats one of the task's own texts: nearly all its words are that text's, and it
    states no number the text does not."""
    words = _tokens(answer)
    if not words:
        return True
    for text in task_texts:
        theirs = set(_tokens(text))
        if not theirs:
            continue
        numbers = {n.value for n in read_numbers(text)}
        if all(n.value in numbers for n in read_numbers(answer)) and \
                sum(w in theirs for w in words) >= 0.85 * len(words):
            return True
    return False


def unanswered(answer: str, goal: str, task_texts: Iterable[str], names: Iterable[str], *,
               verdict_declared: bool = False, form_declared: bool = False) -> list[str]:
    """What the answer leaves out of what the goal asks (empty when it states an answer of each kind
    asked). ``task_texts`` are the task's own texts an echo would repeat (its final hints);
    ``names`` the names the evidence gives (row labels) a name may be; ``verdict_declared``: the
    pack's own verdict phrases are checked elsewhere (``claims.py``); ``form_declared``: so is its
    answer form, which then says what the answer must state."""
    texts = [goal, *task_texts]
    if _PLACEHOLDER.search(answer):
        return ["the answer leaves a slot of the answer form unfilled; write the value in its place"]
    if letters := _LETTER_COMPARISON.search(answer):
        return [f"the answer compares letters that stand for values ('{letters.group(0)}'), which checks nothing; "
                "compare the values themselves"]
    if _TRUTH_COMPARISON.search(answer):
        return ["the answer compares a truth value with a number, which checks nothing; state the value the "
                "question asks for"]
    rest = without_comparisons(answer)
    # An equation states its result ("a + b = c"); an inequality or a claimed truth alone answers nothing.
    bare = [c for c in read_comparisons(answer) if c.op not in ("==",) or c.claimed is not None]
    if bare and not re.search(r"[^\W\d_]{2,}|[\u3400-\u9fff]", rest) or _ONE_SIDED.fullmatch(answer):
        return ["the answer states only a comparison, which answers nothing; state the answer to the question "
                "in words, with its value"]
    if is_echo(answer, texts):
        return ["the answer repeats the task's own text instead of answering it; state the values the evidence "
                "gives and the answer they lead to"]
    if form_declared:
        return []  # the pack's answer form says what the answer states; its slots are checked (claims.py)
    kinds = question_kinds(goal)
    missing: list[str] = []
    goal_values = {n.value for n in read_numbers(goal)}
    stated = [n for n in read_numbers(answer) if n.value not in goal_values]
    if "number" in kinds and not stated:
        missing.append("the question asks for a number, but the answer states none (outside a bare comparison) "
                       "that the task does not already give; state the value the evidence or the computation gives")
    folded = unicodedata.normalize("NFKC", rest).casefold()
    known = [n for n in names if n and len(n.strip()) >= 2]
    if known and ("name" in kinds or "list" in kinds) and not any(" ".join(n.casefold().split()) in
                                                                  " ".join(folded.split()) for n in known):
        if not ("list" in kinds and _NONE.search(rest)):
            missing.append(f"the question asks for {KIND_WORDS['list' if 'list' in kinds else 'name']}, but the "
                           f"answer names none of the evidence's ({', '.join(known[:6])})")
    if "verdict" in kinds and not verdict_declared and not _VERDICT.search(rest):
        missing.append("the question asks whether, but the answer states no verdict in words; say whether it holds")
    return missing
