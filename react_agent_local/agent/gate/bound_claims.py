"""A stated number checked against what the answer says it is, and a list against its condition.

Grounding (``claims.py``) asks whether a number is somewhere in the evidence; this module asks
whether it is the number of what the words beside it name (``evidence_tables.py`` reads the
evidence). Each number is read with its *phrase*: the words before it back to the previous number or
the start of its clause, an aside in brackets left out (``the change (June's mean minus May's) is
-1.33``). By what that phrase names:

* **binding** -- a row label of a cited table (``Middle East``), with a column's name or not: the
  number is that row's value (in that column), exactly or rounded as written; with an extremum word
  (``lowest``, ``最高``) the row must also hold that extremum of the column. An extremum word with
  no row (``the highest site value is 83``, ``最低值为69.5``): the number is that extremum of a
  column of a cited complete table (or a computed max/min). A threshold word
  (``floor``, ``threshold``, ``门槛``) with no row: the number is one of the record's thresholds
  (its rules, a ``name: number`` line of its prose), a number of a sentence that uses the word, or
  a number of the goal;
* **statistic** -- a statistic's word (``median``, ``average``, ``total``, ``share``, ``change``,
  ``中位数``, ``平均``, ``合计``, ``占比``, ``变化``...): the number is a computation of that kind cited
  (a calculator expression's outermost operation, a query's aggregate) or that statistic of a
  cited table's column, which the runtime works out itself; the value of another statistic stated
  under the word, or a number no reading gives, is refused. A spread's word (``spread``, ``range``,
  ``极差``, or a difference of the highest and the lowest: ``最高与最低的差距``) is the highest minus
  the lowest of a column of a cited complete table -- not any difference computed (``100 - 72``) --
  unless a condition or a limit governs it (``a spread of at most 12``);
* **sign** -- a change verb carries the sign (``fell by 1.33``, ``下降了1.33`` state -1.33; ``rose``,
  ``上升`` +1.33); a gap word (``falls short by``, ``差距``) states a size, either sign. A change stated
  against the sign of its computation is refused;
* **named comparison** -- a row label compared with a number (``Batch A >= 78 is True``, ``North <
  70``): the comparison, with the truth it claims (true where it claims none), holds for that row's
  value where the row has one;
* **list** -- a clause with a condition (``below 72``, ``>= 72``, ``below the floor``, ``低于72``) and
  row labels: each listed row meets it, and where the clause lists several rows (or the goal asks
  which ones) and the table is complete, no row that meets it is left out; a count stated with the
  condition (``two regions``, ``2个区域``) is the number of rows that meet it.

A phrase that names nothing the evidence has is not checked here. Every word list is a list of
general words of English or Chinese, never a pack's.
"""

from __future__ import annotations

import re
import statistics
import unicodedata
from dataclasses import dataclass
from typing import Iterable, Literal

from agent.gate.evidence_tables import Evidence, Table, core_name, key
from agent.gate.numbers import Number, close, compare, grounded, read_numbers

FailureKind = Literal["binding", "statistic", "sign", "list", "count"]


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    text: str


def fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


# -- words -----------------------------------------------------------------------------------------


def _words(*items: str) -> re.Pattern[str]:
    latin = [w for w in items if w[0].isascii() and w[0].isalnum() and w[-1].isalnum()]
    other = [re.escape(w) if not w.isalnum() and w.isascii() else w for w in items if w not in latin]
    parts = ([r"\b(?:" + "|".join(sorted(latin, key=len, reverse=True)) + r")\b"] if latin else []) + other
    return re.compile("|".join(parts), re.IGNORECASE)


Statistic = Literal["mean", "median", "sum", "ratio", "spread", "difference", "increase", "decrease", "gap"]

_GAP = _words("short", "shortfall", "falls short", "gap", "margin", "behind", "below by", "above by",
              "exceeds? by", "差距", "缺口", "不足", "相差", "差", "高出", "超出")
_STATISTICS: tuple[tuple[Statistic, re.Pattern[str]], ...] = (
    ("gap", _GAP),
    ("increase", _words("rose", "risen", "rises", "rise", "increased", "increases", "increase", "grew", "grown",
                        "gained", "up by", "higher by", "climbed", "improved", "上升", "增加", "提高", "增长",
                        "升高", "多了", "涨")),
    ("decrease", _words("fell", "fallen", "falls", "fall", "dropped", "drops", "drop", "decreased", "decreases",
                        "decrease", "declined", "declines", "decline", "down by", "lower by", "shrank", "worsened",
                        "下降", "减少", "降低", "下跌", "少了", "降了", "跌")),
    ("spread", _words("spread", "range", "极差", "全距")),
    ("difference", _words("change", "changed", "changes", "difference", "differs", "delta", "变化", "差值", "差额",
                          "之差", "变动")),
    ("median", _words("median", "中位数", "中位值")),
    ("mean", _words("average", "averages", "mean", "avg", "平均", "均值")),
    ("sum", _words("total", "sum", "combined", "altogether", "in all", "合计", "总和", "总计", "一共", "共计",
                   "总共", "加起来", "总数", "之和")),
    ("ratio", _words("share", "proportion", "fraction", "ratio", "per capita", "per", "percentage of", "rate of",
                     "占比", "比例", "比重", "份额", "人均", "每")),
)
#: statistic -> the kinds of computation (``evidence_tables.Quantity``) that give it
_GIVES = {"mean": {"mean"}, "median": {"median"}, "sum": {"sum", "product", "count", "value"}, "ratio": {"ratio"},
          "spread": set(), "difference": {"difference"}, "increase": {"difference"}, "decrease": {"difference"},
          "gap": {"difference"}}
_STAT_NAMES = {"mean": "average", "median": "median", "sum": "total", "ratio": "ratio/share", "spread": "spread",
               "difference": "difference/change", "increase": "increase", "decrease": "decrease", "gap": "gap"}
_BASE = re.compile(r"(?:\bper|每)\s*$", re.IGNORECASE)
_LEVEL = re.compile(r"(?:\bto|\bat|到|至|为|是)\s*$", re.IGNORECASE)  # "fell to 69.5" states a level, not a change
_EXTREMUM = {"min": _words("lowest", "smallest", "least", "minimum", "worst", "最低", "最小", "最少", "最差"),
             "max": _words("highest", "largest", "greatest", "most", "maximum", "best", "top", "最高", "最大",
                           "最多", "最好")}
#: the extremum words a row-less number is checked under (not "most", "least", "best": prose uses them freely)
_EXTREME = {"min": _words("lowest", "smallest", "minimum", "min", "最低", "最小"),
            "max": _words("highest", "largest", "greatest", "maximum", "max", "最高", "最大")}
_MINUS_WORD, _ABBREVIATED = _words("minus", "减去", "减(?!少)"), _words("max", "min")
_FROM = re.compile(r"(?:\bfrom|\bbetween|从|介于)\s*$", re.IGNORECASE)  # "range from 72 to 84": levels
_ASIDE = re.compile(r"[(（][^()（）]*[)）]")  # words in brackets, left out of a number's phrase
_ORDINAL = _words("second", "third", "fourth", "2nd", "3rd", "next", "第二", "第三", "次")
_THRESHOLD = _words("floor", "threshold", "cutoff", "cut-off", "target", "bar", "requirement", "required level",
                    "limit", "门槛", "下限", "上限", "阈值", "标准线", "目标值", "最低要求", "底线", "及格线", "要求")
_NEGATION = _words("not", "no", "none", "neither", "nor", "never", "没有", "不是", "并非", "无", "均未")

# A condition: the words, then the threshold (a number, or a threshold word).
_CONDITIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # words only: a symbol between two numbers is a comparison (numbers.py), not a list's condition
    ("<=", _words("at most", "no more than", "not more than", "not above", "no higher than", "does not exceed",
                  "不超过", "不高于", "不多于")),
    (">=", _words("at least", "no less than", "not less than", "not below", "no lower than", "reach", "reaches",
                  "reached", "meet", "meets", "不低于", "不少于", "达到")),
    ("<", _words("below", "under", "less than", "lower than", "fewer than", "short of", "beneath", "低于", "小于",
                 "不足", "不到", "未达到", "没有达到", "未达")),
    (">", _words("above", "over", "more than", "greater than", "higher than", "exceeds", "exceed", "exceeding",
                 "高于", "大于", "超过", "多于")),
)
_COUNT_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
                "ten": 10, "eleven": 11, "twelve": 12, "一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6,
                "七": 7, "八": 8, "九": 9, "十": 10}
_COUNT = re.compile(r"(?:\b(\d{1,2}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\s+(?:of\s+the\s+)?"
                    r"(?!percent|points?|percentage|pp\b)([^\W\d_]{3,}s)\b)|(?:(\d{1,2}|[一两二三四五六七八九十])\s*个)",
                    re.IGNORECASE)
_SENTENCE = re.compile(r"[;!?。；！？\n]|\.(?!\d)")
_CLAUSE = re.compile(r"[;!?。；！？\n]|\.(?!\d)|\b(?:while|whereas|but|however|although)\b|而|但是|但|不过", re.IGNORECASE)
_PIECE = re.compile(r"[,，、]|\b(?:and|or|while|whereas|but)\b|和|与|而|及", re.IGNORECASE)
_OPERAND_BEFORE = re.compile(r"(?:[(（=<>≥≤+*/×÷]|(?<![A-Za-z])-)\s*$")
_OPERAND_AFTER = re.compile(r"\s*[)）%]*\s*(?:[=<>≥≤+*/×÷]|-(?!\w))")
_TAIL = re.compile(r"^\s*(?:[%％]|percent\b)?\s*", re.IGNORECASE)  # a tail starts after the number's percent
_GAP_AFTER = re.compile(r"(?:(?:percentage\s+)?points?\s+|pp\s+)?(?:short|behind)\b", re.IGNORECASE)
_OPERATOR = re.compile(r"[=<>≥≤+*/×÷]|(?<![A-Za-z])-(?!\w)")


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def _find_name(text: str, name: str) -> list[int]:
    """Positions of ``name`` in ``text`` (casefolded; a Latin name only as whole words)."""
    folded, target = _fold(text), " ".join(_fold(name).split())
    if not target:
        return []
    edge = r"(?<![^\W_])" if target[0].isascii() and target[0].isalnum() else ""
    tail = r"(?![^\W_])" if target[-1].isascii() and target[-1].isalnum() else ""
    pattern = edge + r"\s+".join(re.escape(part) for part in target.split()) + tail
    return [m.start() for m in re.finditer(pattern, folded)]


def _last_stat_at(phrase: str) -> tuple[int, Statistic] | None:
    """Where the statistic whose word stands last in ``phrase`` stands, and which (a gap word wins over
    a change verb it holds: 'falls short by'; a spread's word over the gap word inside it: '极差')."""
    best: tuple[int, int, Statistic] | None = None
    for stat, pattern in _STATISTICS:
        for match in pattern.finditer(phrase):
            if best is None or match.start() > best[0] or (stat == "gap" and match.start() >= best[0] - 6) or (
                    stat == "spread" and match.start() <= best[0] and best[1] <= match.end()):
                best = (match.start(), match.end(), stat)
    return (best[0], best[2]) if best else None


def _last_stat(phrase: str) -> Statistic | None:
    found = _last_stat_at(phrase)
    return found[1] if found else None


def _spread_pair(phrase: str) -> bool:
    """The highest and the lowest with a difference's word: 'highest minus lowest', '最高与最低的差距'."""
    return all(p.search(phrase) for p in _EXTREME.values()) and bool(
        _last_stat(phrase) in ("difference", "gap") or _MINUS_WORD.search(phrase))


def _last_at(pattern: re.Pattern[str], text: str) -> int:
    """Where the last match of ``pattern`` in ``text`` starts, or -1."""
    return max((m.start() for m in pattern.finditer(text)), default=-1)


def sign_free(answer: str, number: Number) -> bool:
    """Does a change or gap word govern ``number`` (``fell by 1.33``, ``下降了1.33``, ``short by 2.5``)?
    Then it may be grounded by either sign: the word carries the sign, and the statistic rule checks
    that it is the computation's."""
    stated = next((s for s in _stated(answer) if s.number.start == number.start), None)
    if stated is None or stated.arithmetic:
        return False
    if stated.gap_after():
        return True
    found = _last_stat_at(stated.piece)
    return found is not None and found[1] in ("increase", "decrease", "gap") and not _LEVEL.search(stated.piece) \
        and _last_at(_THRESHOLD, stated.piece) < found[0]


# -- phrases ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stated:
    number: Number
    phrase: str  # the words before it, back to the previous number or its clause's start
    piece: str  # the phrase's last piece (after its last comma or conjunction)
    #: it is an operand or the result of arithmetic or a comparison the answer writes out
    arithmetic: bool = False
    #: the few words right after it ("2.5 points short", "the 72 floor"), which may name what it is
    tail: str = ""

    def gap_after(self) -> bool:
        """An English gap word right after it: "2.5 points short" (Chinese writes it before: "差2.5")."""
        return _GAP_AFTER.match(self.tail) is not None

    def threshold_after(self) -> re.Match[str] | None:
        """A threshold word right after it: "the 72 floor", "72 下限"."""
        match = _THRESHOLD.match(self.tail)
        return match if match and match.start() == 0 else None


def _words_before(answer: str, numbers: list[Number], i: int) -> str:
    """The words back to the previous number outside the asides before the ``i``th, asides left out."""
    ends, depth, at = {n.end for n in numbers[:i]}, 0, numbers[i].start
    while at > 0 and not (depth == 0 and at in ends):
        at -= 1
        depth = depth + 1 if answer[at] in ")）" else max(depth - 1, 0) if answer[at] in "(（" else depth
    text = answer[at:numbers[i].start]
    while _ASIDE.search(text):
        text = _ASIDE.sub(" ", text)
    return text


def _stated(answer: str) -> list[Stated]:
    numbers = read_numbers(answer)
    out = []
    for i, number in enumerate(numbers):
        text = answer[numbers[i - 1].end if i else 0:number.start]
        words = _words_before(answer, numbers, i)
        cut = [m.end() for m in _CLAUSE.finditer(words)]
        phrase = words[cut[-1]:] if cut else words
        pieces = _PIECE.split(phrase)
        following = answer[number.end:numbers[i + 1].start if i + 1 < len(numbers) else len(answer)]
        arithmetic = bool(_OPERAND_BEFORE.search(text) or _OPERAND_AFTER.match(following))
        out.append(Stated(number, phrase, pieces[-1] if pieces else phrase, arithmetic,
                          _TAIL.sub("", following, count=1)[:30]))
    return out


def _named_row(phrase: str, labels: list[str]) -> str | None:
    """The row label standing last in ``phrase`` (the longest where two end alike)."""
    best: tuple[int, str] | None = None
    for label in labels:
        for at in _find_name(phrase, label):
            if best is None or at > best[0]:
                best = (at, label)
    return best[1] if best else None


def _named_column(phrase: str, columns: list[str]) -> str | None:
    best: tuple[int, str] | None = None
    for column in columns:
        for name in dict.fromkeys([column, core_name(column)]):
            for at in _find_name(phrase, name):
                if best is None or at > best[0]:
                    best = (at, column)
    return best[1] if best else None


def _named_columns(texts: list[str], columns: list[str]) -> set[str]:  # every column the texts name, as keys
    return {key(c) for c in columns for text in texts for name in {c, core_name(c)} if _find_name(text, name)}


def _without_columns(phrase: str, columns: list[str]) -> str:
    """``phrase`` with every column name it writes blanked (a column's own 'Median reply time' is no
    statistic's word)."""
    out = _fold(phrase)
    for column in columns:
        for name in {column, core_name(column)}:
            out = re.sub(re.escape(" ".join(_fold(name).split())), " ", out)
    return out


# -- binding ---------------------------------------------------------------------------------------


def _row_values(evidence: Evidence, label: str, column: str | None) -> list[tuple[Table, str, float]]:
    found = []
    for table in evidence.tables:
        for name, cells in table.rows:
            if key(name) != key(label):
                continue
            for col, value in cells.items():
                if column is None or key(col) == key(column) or key(core_name(col)) == key(core_name(column)):
                    found.append((table, col, value))
    return found


def _binding(stated: Stated, evidence: Evidence, labels: list[str], columns: list[str], whole: bool,
             goal_numbers: list[float], goal: str) -> Failure | None:
    number, phrase = stated.number, stated.phrase
    if stated.arithmetic or _OPERATOR.search(stated.piece):
        return None  # arithmetic or a comparison's side: not a value stated for a name
    row = _named_row(stated.piece, labels) or _named_row(phrase, labels)
    plain = _without_columns(phrase, columns)
    if row is not None:
        after = phrase[max(_find_name(phrase, row)[-1:] or [0]):]
        if _last_stat(_without_columns(after, columns)) is not None or _THRESHOLD.search(after) \
                or any(pattern.search(after) for _, pattern in _CONDITIONS):
            return None  # a change, a statistic or a threshold after the row: not the row's value
        column = _named_column(after, columns) or _named_column(phrase, columns)
        cells = _row_values(evidence, row, column)
        if not cells:
            return None
        if not any(grounded(number, [value], whole=whole) for _, _, value in cells):
            shown = "; ".join(f"{col or 'value'} {fmt(v)}" for _, col, v in cells[:4])
            return Failure("binding", f"the answer states {number.text} for {row}"
                           + (f"'s {core_name(column)}" if column else "")
                           + f", but the evidence gives {row}: {shown} ({cells[0][0].obs_id})")
        return _extremum(number, row, plain, cells, whole)
    stat = _last_stat_at(_without_columns(stated.piece, columns))
    which = [w for w, pattern in _EXTREME.items() if pattern.search(stated.piece)]
    if len(which) == 1 and stat is None and not _THRESHOLD.search(stated.piece) and not _ORDINAL.search(phrase) \
            and not _spread_pair(plain):
        asked = _named_columns([stated.piece, goal], columns)
        return _extreme_value(number, which[0], evidence, asked, whole, stated.piece)
    named = stated.threshold_after() or (
        _THRESHOLD.search(stated.piece) if not stated.gap_after() and (
            stat is None or _last_at(_THRESHOLD, stated.piece) > stat[0]) else None)
    if named:
        word = named.group(0)
        near = [n.value for text in evidence.prose for sentence in _SENTENCE.split(text)
                if re.search(re.escape(word), sentence, re.IGNORECASE) for n in read_numbers(sentence)]
        known = list(evidence.thresholds.values()) + near
        if not known or grounded(number, known + goal_numbers, whole=whole):
            return None
        rules = "; ".join(f"{name}: {fmt(v)}" for name, v in list(evidence.thresholds.items())[:4])
        return Failure("binding", f"the answer states {number.text} as the {word}, but no {word} of "
                       f"{number.text} is in the evidence" + (f"; its thresholds are {rules}" if rules else ""))
    return None


def _extreme_value(number: Number, which: str, evidence: Evidence, named: set[str], whole: bool,
                   piece: str) -> Failure | None:
    """A number stated under an extremum word and no row: that extremum of a complete table's column
    (of a column named, where any is), a computed one, or under 'max'/'min' a rule's ('a max of 12')."""
    pick = min if which == "min" else max
    found = [(pick(v for _, v in values), t, col, values) for t in evidence.complete_tables() for col in t.columns
             if (not named or key(col) in named)
             and len(values := [(label, cells[col]) for label, cells in t.rows if col in cells]) >= 2]
    rules = list(evidence.thresholds.values()) if _ABBREVIATED.search(piece) else []
    known = [c.value for c in evidence.computations if c.kind == which] + rules
    if not found or grounded(number, [v for v, *_ in found] + known, whole=whole):
        return None
    value, table, col, values = max(found, key=lambda f: len({v for _, v in f[3]}) > 1)
    word, label = "lowest" if which == "min" else "highest", next(label for label, v in values if v == value)
    return Failure("binding", f"the answer states {number.text} as the {word} value, but the {word} "
                   f"{core_name(col) or 'value'} is {fmt(value)} ({label}, {table.obs_id})")


def _extremum(number: Number, row: str, phrase: str, cells: list[tuple[Table, str, float]],
              whole: bool) -> Failure | None:
    if _ORDINAL.search(phrase):
        return None
    for which, pattern in _EXTREMUM.items():
        if not pattern.search(phrase):
            continue
        held = [(t, col, v) for t, col, v in cells if grounded(number, [v], whole=whole)]
        for table, col, _ in held:
            values = table.column_values(col)
            target = min(values) if which == "min" else max(values)
            if any(close(v, target) for _, c, v in held if c == col and v is not None):
                return None
        if held and held[0][0].complete:
            table, col, _ = held[0]
            values = {label: cells.get(col) for label, cells in table.rows if cells.get(col) is not None}
            pick = (min if which == "min" else max)(values, key=lambda k: values[k])
            word = "lowest" if which == "min" else "highest"
            return Failure("binding", f"{row} ({fmt(held[0][2])}) is not the {word} {core_name(col) or 'value'}: "
                           f"the {word} is {pick} ({fmt(values[pick])}, {table.obs_id})")
        return None
    return None


# -- statistics and signs --------------------------------------------------------------------------


def _column_statistics(evidence: Evidence, stat: Statistic, named: set[str] = frozenset()) -> list[tuple[float, str]]:
    """``stat`` of each column of the complete tables, the ``named`` columns first (a spread: those only,
    where any is named, since another column's spread is the number of nothing asked)."""
    out = []
    for table in evidence.complete_tables():
        for column in sorted(table.columns, key=lambda c: key(c) not in named):
            if stat == "spread" and named and key(column) not in named:
                continue
            values = table.column_values(column)
            if len(values) < 2:
                continue
            name = core_name(column) or "value"
            if stat == "mean":
                out.append((statistics.fmean(values), f"the average {name} of {table.title or table.obs_id}"))
            elif stat == "median":
                out.append((statistics.median(values), f"the median {name} of {table.title or table.obs_id}"))
            elif stat == "sum":
                out.append((float(sum(values)), f"the total {name} of {table.title or table.obs_id}"))
            elif stat in ("spread", "difference", "gap"):
                out.append((max(values) - min(values), f"the spread of {name} in {table.title or table.obs_id} "
                            f"({fmt(max(values))} - {fmt(min(values))} = {fmt(max(values) - min(values))})"))
    return out


def _readings(number: Number, stat: Statistic) -> list[Number]:
    """What the number states under ``stat``: a change verb gives it its sign, a gap word either sign."""
    flipped = Number(exact=-number.exact, decimals=number.decimals, scale=number.scale, percent=number.percent,
                     text=number.text, start=number.start, end=number.end)
    if stat == "increase":
        return [number] if number.exact >= 0 else [flipped]
    if stat == "decrease":
        return [flipped] if number.exact > 0 else [number]
    if stat == "gap":
        return [number, flipped]
    return [number]


def _statistic(stated: Stated, evidence: Evidence, columns: list[str], whole: bool,
               goal_numbers: list[float], goal: str = "") -> Failure | None:
    number = stated.number
    phrase = _without_columns(stated.piece, columns)
    found = (len(phrase), "gap") if stated.gap_after() else _last_stat_at(phrase)
    if stated.threshold_after() or found is not None and _last_at(_THRESHOLD, phrase) > found[0]:
        return None  # "short of the floor of 70", "the 72 floor": the threshold's word governs
    stat = found[1] if found else None
    minus = _MINUS_WORD.search(phrase)
    if _spread_pair(_without_columns(stated.phrase, columns)):
        stat, found = "spread", (0, "spread")  # "the highest minus the lowest", "最高与最低的差距"
    elif found is not None and minus and minus.start() < found[0] and _last_stat_at(phrase[:minus.start()]):
        stat = "difference"  # "June's average minus May's average is": a difference of two statistics
    if stat == "spread" and (_FROM.search(phrase) or _EXTREME["max"].search(phrase[:found[0]])
                             or any(p.search(phrase[found[0]:]) for _, p in _CONDITIONS)):
        return None  # "range from 72 to 84", "a spread of at most 12", "the maximum spread": a bound
    if stat is None or stated.arithmetic or _OPERATOR.search(stated.piece) or _BASE.search(phrase) \
            or grounded(number, goal_numbers):
        return None  # "per 1,000", "每1000人": a ratio's base; a number the goal gives is no result
    if stat in ("increase", "decrease") and _LEVEL.search(phrase):
        return None  # "fell to 69.5": a level
    kinds = _GIVES[stat] | ({"ratio"} if number.percent and stat not in ("mean", "spread") else set())  # "增长6.0%"
    columns_stat = _column_statistics(evidence, stat, _named_columns([stated.phrase, goal], columns))
    kinds = kinds if kinds or columns_stat else _GIVES["difference"]  # a spread of no table's column: computed
    computed = [c for c in evidence.computations if c.kind in kinds]
    candidates = [(c.value, f"{c.text} = {fmt(c.value)} ({c.obs_id})") for c in computed] + columns_stat
    readings = _readings(number, stat)
    if any(grounded(r, [v], whole=whole) for r in readings for v, _ in candidates):
        return None
    name = _STAT_NAMES[stat]
    if stat in ("increase", "decrease"):
        other = _readings(number, "decrease" if stat == "increase" else "increase")
        hit = next((why for r in other for v, why in candidates if grounded(r, [v], whole=whole)), None)
        if hit:
            direction = "a fall" if stat == "increase" else "a rise"
            return Failure("sign", f"the answer says {number.text} is {'an increase' if stat == 'increase' else 'a decrease'}"
                           f", but the computation gives {hit}: {direction}; state the change with its sign")
    wrong = next((c for c in evidence.computations if c.kind not in kinds
                  and any(grounded(r, [c.value], whole=whole) for r in readings)), None)
    if wrong is not None:
        return Failure("statistic", f"the answer states {number.text} as the {name}, but {fmt(wrong.value)} is "
                       f"a {wrong.kind} ({wrong.text}, {wrong.obs_id}), not the {name}"
                       + (f"; the evidence gives the {name} as {candidates[0][1]}" if candidates else ""))
    if candidates:
        shown = "; ".join(why for _, why in candidates[:3])
        return Failure("statistic", f"the answer states {number.text} as the {name}, but no reading of the "
                       f"evidence gives it: {shown}")
    return None


# -- lists and counts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Condition:
    op: str
    threshold: float
    text: str
    end: int


def _condition(clause: str, thresholds: dict[str, float], answer_thresholds: dict[str, float]) -> Condition | None:
    """The first condition ``clause`` states: its words and a threshold written after them as a number
    ("below 72", "below the floor of 72") or as a threshold word whose number the answer or the
    record gives ("below the floor")."""
    # the earliest, longest condition words: "未达到" (<) holds "达到" (>=)
    found = sorted(((m.start(), -m.end(), op, m) for op, pattern in _CONDITIONS for m in pattern.finditer(clause)),
                   key=lambda item: item[:2])
    covered = -1
    for _, _, op, match in found:
        if match.start() < covered:
            continue  # inside a longer condition's words
        covered = match.end()
        rest = clause[match.end():match.end() + 40]
        after = read_numbers(rest)
        word = _THRESHOLD.search(rest)
        if after and (after[0].start <= 3 or (word is not None and word.start() <= 12
                                                and word.end() <= after[0].start <= word.end() + 6)):
            return Condition(op, after[0].value, clause[match.start():match.end() + after[0].end].strip(),
                             match.end() + after[0].end)
        if word is not None and word.start() <= 12:
            known = answer_thresholds.get(word.group(0).casefold())
            values = set(thresholds.values())
            if known is None and len(values) == 1:
                known = values.pop()
            if known is not None:
                return Condition(op, known, clause[match.start():match.end() + word.end()].strip(),
                                 match.end() + word.end())
    return None


def _answer_thresholds(stated: list[Stated]) -> dict[str, float]:
    """Threshold words the answer itself gives a number ('The floor is 72')."""
    found = {}
    for s in stated:
        word = _THRESHOLD.search(s.piece)
        if word and not _OPERATOR.search(s.piece):
            found[word.group(0).casefold()] = s.number.value
    return found


def _stated_count(clause: str, condition: Condition) -> int | None:
    for match in _COUNT.finditer(clause):
        token = (match.group(1) or match.group(3) or "").casefold()
        value = int(token) if token.isdigit() else _COUNT_WORDS.get(token)
        if value is not None and not close(value, condition.threshold):
            return value
    return None


def _lists(answer: str, evidence: Evidence, asks_list: bool, stated: list[Stated], goal: str) -> list[Failure]:
    labels = evidence.labels()
    if not labels or not evidence.tables:
        return []
    own = _answer_thresholds(stated)
    failures: list[Failure] = []
    for clause in _CLAUSE.split(answer):
        if not clause.strip():
            continue
        condition = _condition(clause, evidence.thresholds, own)
        if condition is None:
            continue
        start = clause.find(condition.text)
        if _NEGATION.search(clause[:start]) or _NEGATION.search(condition.text.split()[0] if condition.text else ""):
            continue
        members = []
        for label in labels:
            if _find_name(clause, label) and not any(key(label) in key(m) for m in members):
                members.append(label)
        count = _stated_count(clause, condition)
        if not members and count is None:
            continue
        column = _named_column(clause, evidence.columns())
        verdicts = []
        for table in evidence.tables:
            cols = [c for c in table.columns if column is None or key(core_name(c)) == key(core_name(column))]
            for col in cols:
                values = {label: cells[col] for label, cells in table.rows if col in cells}
                if not values or not all(any(key(m) == key(l) for l in values) for m in members):
                    continue
                meets = {l for l, v in values.items() if compare(v, condition.op, condition.threshold)}
                listed = {l for l in values if any(key(m) == key(l) for m in members)}
                wrong = sorted(listed - meets)
                left_out = sorted(meets - listed) if table.complete and (asks_list or len(members) >= 2
                                                                         or count is not None) else []
                verdicts.append((table, col, values, wrong, left_out, meets))
        if not verdicts:
            continue
        # The column the clause means, where it names none: one whose values lie on both sides of the
        # threshold (a floor of 70 is no bound on 120 tickets), then one the goal names.
        named = [c for c in evidence.columns() if _find_name(goal, core_name(c))]
        spans = [v for v in verdicts if min(v[2].values()) <= condition.threshold <= max(v[2].values())]
        verdicts = spans or verdicts
        fine = [v for v in verdicts if not v[3] and not v[4]]
        counted = [v for v in verdicts if count is None or count == (len(members) if members else len(v[5]))]
        if fine and counted:
            continue
        verdicts.sort(key=lambda v: (v[1] not in named, len(v[3]), len(v[4])))
        table, col, values, wrong, left_out, meets = (fine or verdicts)[0]
        where = f"{core_name(col) or 'value'} ({table.obs_id})"
        if not fine:
            if wrong:
                failures.append(Failure("list", "the answer lists " + ", ".join(f"{w} ({fmt(values[w])})" for w in wrong)
                                        + f" as {condition.text}, but that does not hold for its {where}"))
            if left_out:
                failures.append(Failure("list", "the answer leaves out " + ", ".join(
                    f"{w} ({fmt(values[w])})" for w in left_out) + f", which is also {condition.text} by its {where}"))
        elif count is not None:
            should = len(members) if members else len(meets)
            failures.append(Failure("count", f"the answer counts {count} for {condition.text}, but "
                                    + (f"it lists {should}" if members else f"{should} rows of {where} meet it")))
    return failures


# -- all of it -------------------------------------------------------------------------------------


_OP = r"(>=|<=|==|!=|≥|≤|>|<|=)"
_CLAIMED = re.compile(r"\s*(?:is|为|是|:)?\s*(true|false)\b", re.IGNORECASE)
_OPS = {"≥": ">=", "≤": "<=", "=": "=="}


def _named_comparisons(answer: str, evidence: Evidence, labels: list[str]) -> list[Failure]:
    """Each ``<row label> op <number>`` the answer states that is false for the row's one value."""
    failures: list[Failure] = []
    for label in labels:
        pattern = re.compile(rf"(?<![\w]){re.escape(label)}\s*{_OP}\s*", re.IGNORECASE)
        for match in pattern.finditer(answer):
            numbers = read_numbers(answer[match.end():match.end() + 40])
            if not numbers or numbers[0].start != 0:
                continue
            values = {value for _, _, value in _row_values(evidence, label, None)}
            if len(values) != 1:
                continue  # no value, or several columns: which one it compares is not said
            [value] = values
            claimed = _CLAIMED.match(answer, match.end() + numbers[0].end)
            says = claimed is None or claimed.group(1).lower() == "true"
            op = _OPS.get(match.group(1), match.group(1))
            if compare(value, op, numbers[0].value) != says:
                text = answer[match.start():(claimed.end() if claimed else match.end() + numbers[0].end)]
                failures.append(Failure("binding", f"'{text.strip()}' is wrong: {label} is {fmt(value)}"))
    return failures


def bound_problems(answer: str, evidence: Evidence, *, whole: bool, goal_numbers: Iterable[float],
                   asks_list: bool, goal: str = "", skip: Iterable[float] = ()) -> list[Failure]:
    """Every number of ``answer`` that is not what its words say it is, and every list or count that
    contradicts its condition, on the cited ``evidence``. Numbers of ``skip`` (already refused as
    grounded nowhere) are not read again."""
    goal_numbers, skip = list(goal_numbers), set(skip)
    labels, columns = evidence.labels(), evidence.columns()
    stated = _stated(answer)
    failures: list[Failure] = []
    for s in stated:
        if s.number.value in skip:
            continue
        found = (labels or evidence.thresholds) and _binding(s, evidence, labels, columns, whole, goal_numbers, goal)
        found = found or _statistic(s, evidence, columns, whole, goal_numbers, goal)
        if found is not None and found not in failures:
            failures.append(found)
    return failures + _named_comparisons(answer, evidence, labels) + _lists(answer, evidence, asks_list, stated, goal)
