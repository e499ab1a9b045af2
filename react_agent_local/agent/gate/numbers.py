"""Numbers and comparisons read out of text in any script, and when a stated number is grounded.

The claim gate (``claims.py``), the grader (``metrics.py``) and the calculator's operand rule
(``operands.py``) read text through this module only, so a number means the same to all three.

**A number** is read wherever its digits stand, glued to Chinese text or not (``合计为9999999人``):

* digits of any script (``１２３``, ``١٢٣``) and the full-width point ``．`` between digits;
* thousands separators: ``,`` (``8,189,137``), a no-break or thin space (always), a plain space only
  with at least two groups (``8 189 137``; ``12 345`` stays two numbers), and the full-width ``，``
  only between full-width digits (``72，78`` is a list);
* a sign: ``-``, the Unicode minus ``−``, the full-width ``－`` or the word ``负`` right before the
  digits (``负4.00`` is -4.00), unless a digit, ``)`` or ``%`` comes before it (then it subtracts:
  ``80-68``);
* a multiplier: ``万`` (10⁴), ``亿`` (10⁸), ``万亿`` (10¹²), ``thousand``, ``million``, ``billion``;
* a percent: ``%``, ``％`` or ``percent`` -- the value stays as written (12.5 for ``12.5%``) and
  ``percent`` says it stands for 0.125 too.

Digits inside a name are not numbers: ``obs-calculator-2``, ``Qwen2.5``, ``v1``, a hash
``674b309ac3``. Chinese numeral words (``三市``) are not read.

**A comparison** is ``A op B`` with op one of ``>= ≥ ⩾ => > <= ≤ ⩽ =< < == = != ≠`` (full-width
too), with or without spaces, where A and B are numbers or arithmetic over numbers
(``(72 + 78 + 81 + 85) / 4 = 79`` compares 79 with 79, not 4 with 79), optionally followed by the
truth it claims: ``is True``, ``为True``, ``为 False``, ``(True)``, ``成立``, ``不成立``, ``为真``,
``为假``. A side written as a single percentage compared with a plain number stands for its fraction
(``0.87 >= 85%`` is 0.87 >= 0.85).

**Grounded** (``grounded``): a stated number equals an evidence number exactly; or, written with
d >= 1 decimals (of its multiplier's unit: ``818.9万`` has one), equals one rounded to those
decimals; or, written with none, rounds one to a whole number of its unit -- only where the task
asks for rounding (``asks_rounding``), since an integer stated for 78.6 is another claim than the
record's value. A percentage is also grounded by its fraction (``12.5%`` by 0.125).
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Iterable, Iterator, Sequence

# -- normalising ----------------------------------------------------------------------------------

_MINUS = {"\u2212", "\uff0d", "\ufe63"}
_OPERATORS = {"\u00d7": "*", "\u00f7": "/"}
_FULL_WIDTH_DIGITS = frozenset(chr(c) for c in range(0xFF10, 0xFF1A))


def _ascii_digit(ch: str) -> str | None:
    if "0" <= ch <= "9":
        return ch
    value = unicodedata.decimal(ch, None) if not ch.isascii() else None
    return None if value is None else str(value)


def normalize(text: str) -> str:
    """``text`` with digits, points, signs, operators and full-width forms in ASCII, one character
    for one, so a position in the result is the same position in ``text``."""
    out = []
    for i, ch in enumerate(text):
        digit = _ascii_digit(ch)
        if digit is not None:
            out.append(digit)
        elif ch in _MINUS or ch == "负" and i + 1 < len(text) and _ascii_digit(text[i + 1]) is not None:
            out.append("-")
        elif ch in _OPERATORS:
            out.append(_OPERATORS[ch])
        elif ch == "\u3000":
            out.append(" ")
        elif ch in "，．":
            before, after = text[i - 1:i], text[i + 1:i + 2]
            if ch == "．" and before and after and _ascii_digit(before) and _ascii_digit(after):
                out.append(".")
            elif ch == "，" and before in _FULL_WIDTH_DIGITS and after in _FULL_WIDTH_DIGITS:
                out.append(",")  # a list of numbers uses "，" too; only full-width digits group with it
            else:
                out.append(ch)
        elif "\uff01" <= ch <= "\uff5e":
            out.append(chr(ord(ch) - 0xFEE0))  # full-width ASCII: ＞＝ （ ％ ：
        else:
            out.append(ch)
    return "".join(out)


# -- numbers --------------------------------------------------------------------------------------

_SCALES = {"万亿": 10 ** 12, "亿": 10 ** 8, "万": 10 ** 4, "thousand": 10 ** 3, "million": 10 ** 6,
           "billion": 10 ** 9}
_INTEGER = (r"\d{1,3}(?:,\d{3})+(?!\d|,\d)"              # 8,189,137
            r"|\d{1,3}(?:[\u00a0\u202f\u2009]\d{3})+(?!\d)"  # 8 189 137 with no-break or thin spaces
            r"|\d{1,3}(?: \d{3}){2,}(?!\d| \d)"          # 8 189 137 with plain spaces: two groups at least
            r"|\d+")
_TOKEN = re.compile(
    # A name: digits inside it are no number (obs-plot-3, Qwen2.5, v1, a hash 674b309ac3).
    r"(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:[-.][A-Za-z0-9_]+)*|\d+[A-Za-z_]+(?:\d+[A-Za-z_]*)+)"
    rf"|(?P<sign>-)?(?P<int>{_INTEGER})(?:\.(?P<frac>\d+))?"
    r"(?P<scale>\s?(?:万亿|亿|万)|\s?(?i:thousand|million|billion)(?![A-Za-z]))?"
    r"(?P<percent>\s?%|\s(?i:percent|per cent)(?![A-Za-z]))?")


MAX_DIGITS = 300


def _float(value: Fraction) -> float:
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


@dataclass(frozen=True)
class Number:
    """One number as written: its exact value (multiplier applied, a percentage as written)."""

    exact: Fraction
    decimals: int  # digits after the point, in the multiplier's unit
    scale: int = 1
    percent: bool = False
    text: str = ""
    start: int = 0
    end: int = 0

    @property
    def value(self) -> float:
        return _float(self.exact)

    @property
    def half_unit(self) -> Fraction:
        """Half of the last written digit's unit: how far a rounding to it may lie."""
        return Fraction(self.scale, 2 * 10 ** self.decimals)

    @property
    def plain_integer(self) -> bool:
        """A bare integer (no decimals, multiplier or percent), as prose counts things."""
        return self.decimals == 0 and self.scale == 1 and not self.percent

    def fraction(self) -> Fraction:
        """The value it stands for: a percentage as its fraction."""
        return self.exact / 100 if self.percent else self.exact

    def values(self) -> list[float]:
        """What it states: its value, and a percentage's fraction too."""
        return [self.value, _float(self.exact / 100)] if self.percent else [self.value]

    def readings(self) -> list[float]:
        """What it may stand for as evidence: its values, and the number as written before its
        multiplier (``8.19`` of ``8.19万``)."""
        out = self.values()
        if self.scale != 1:
            out.append(_float(self.exact / self.scale))
        return out


def _scan(text: str) -> tuple[str, list[Number], list[tuple[int, int]]]:
    """The normalised text, its numbers, and the spans of the names whose digits are no number."""
    norm = normalize(text)
    numbers: list[Number] = []
    names: list[tuple[int, int]] = []
    for m in _TOKEN.finditer(norm):
        if m.group("name") is not None:
            names.append(m.span())
            continue
        start = m.start()
        negative = m.group("sign") is not None
        if negative:
            before = norm[:start].rstrip()[-1:]
            if before and (before.isdigit() or before in ")%"):
                negative, start = False, start + 1  # "80-68", "80 -68": the minus subtracts
        digits = re.sub(r"[^\d]", "", m.group("int"))
        frac = m.group("frac") or ""
        if len(digits) + len(frac) > MAX_DIGITS:
            continue  # a run of digits no one states as a value (and past int()'s own limit)
        scale = _SCALES.get((m.group("scale") or "").strip().lower(), 1)
        exact = Fraction(f"{digits}.{frac}" if frac else digits) * scale
        numbers.append(Number(exact=-exact if negative else exact, decimals=len(frac), scale=scale,
                              percent=m.group("percent") is not None, text=text[start:m.end()].strip(),
                              start=start, end=m.end()))
    return norm, numbers, names


def read_numbers(text: str) -> list[Number]:
    """Every number written in ``text``, in order."""
    return _scan(text)[1]


def numbers_in(value: Any, *, text: bool = True, limit: int = 20_000) -> Iterator[Number]:
    """Every number a JSON value holds: its numbers, and (``text``) the numbers written in its
    strings (the first ``limit`` characters of each) and keys."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int) or isinstance(value, float) and math.isfinite(value):
        yield Number(exact=Fraction(value), decimals=0)  # a value, not written text
    elif isinstance(value, str):
        if text:
            yield from read_numbers(value[:limit])
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from numbers_in(k, text=text, limit=limit)
            yield from numbers_in(v, text=text, limit=limit)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from numbers_in(v, text=text, limit=limit)


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


_ROUNDING = re.compile(r"\bround(?:ed|ing|s)?\b|\bnearest\b|\bwhole\b|\bintegers?\b|四舍五入|取整|整数|保留|舍入",
                       re.IGNORECASE)


def asks_rounding(text: str) -> bool:
    """Does this task text ask for a rounded answer (``to the nearest whole dollar``, ``保留``)?"""
    return _ROUNDING.search(text) is not None


def grounded(number: Number, observed: Sequence[float], *, whole: bool = False) -> bool:
    """Is ``number`` one of ``observed`` as written: exactly, rounded to the decimals it is written
    with, or -- with ``whole``, where the task asks for rounding -- rounded to a whole number of its
    unit? A percentage may be its fraction."""
    half = number.half_unit if number.decimals or whole else Fraction(0)
    targets = [(number.value, float(half))]
    if number.percent:
        targets.append((float(number.exact / 100), float(half / 100)))
    return any(abs(v - target) <= tolerance + 1e-9 * max(1.0, abs(target))
               for target, tolerance in targets for v in observed)


# -- comparisons ----------------------------------------------------------------------------------

_CANONICAL_OP = {">=": ">=", "=>": ">=", "≥": ">=", "≧": ">=", "⩾": ">=", ">": ">",
                 "<=": "<=", "=<": "<=", "≤": "<=", "≦": "<=", "⩽": "<=", "<": "<",
                 "==": "==", "=": "==", "!=": "!=", "≠": "!="}
_OP_TEXT = sorted(_CANONICAL_OP, key=len, reverse=True)
MIRROR = {">=": "<=", "<=": ">=", ">": "<", "<": ">", "==": "==", "!=": "!="}
COMPLEMENT = {">=": "<", "<": ">=", "<=": ">", ">": "<=", "==": "!=", "!=": "=="}
_CLAIM = re.compile(r"\s*(?:\(\s*)?(?:(?:is|为|是|:|->|→|,|，)\s*)?(不成立|成立|为真|为假|true|false)(?![A-Za-z])(?:\s*\))?",
                    re.IGNORECASE)
_TRUE_WORDS = {"true", "成立", "为真"}
_MAX_SIDE = 40  # tokens on one side of a comparison; prose is never longer


def compare(left: float, op: str, right: float) -> bool:
    if op == "==":
        return close(left, right)
    if op == "!=":
        return not close(left, right)
    if op == ">=":
        return left > right or close(left, right)
    if op == "<=":
        return left < right or close(left, right)
    if op == ">":
        return left > right and not close(left, right)
    return left < right and not close(left, right)


@dataclass(frozen=True)
class Side:
    """One side of a comparison: its value, and the number itself when it is a single one."""

    value: float
    number: Number | None = None

    def is_(self, value: float) -> bool:
        """Is this side exactly ``value`` (a percentage by its fraction too)?"""
        return any(close(v, value) for v in (self.number.values() if self.number else [self.value]))

    def states(self, value: float, whole: bool = False) -> bool:
        """Is this side ``value`` as written (``105.33`` for 105.3333…; see ``grounded``)?"""
        if self.number is None:
            return close(self.value, value)
        return grounded(self.number, [value], whole=whole)


@dataclass(frozen=True)
class Comparison:
    """``left op right`` as the text states it, with the truth it claims (None: none claimed)."""

    left_side: Side
    op: str
    right_side: Side
    claimed: bool | None
    text: str

    @property
    def left(self) -> float:
        return self.left_side.value

    @property
    def right(self) -> float:
        return self.right_side.value

    @property
    def left_decimals(self) -> int:
        return self.left_side.number.decimals if self.left_side.number else 0

    @property
    def truth(self) -> bool:
        return compare(self.left, self.op, self.right)

    @property
    def false(self) -> bool:
        """Arithmetically false as stated: it claims no truth and does not hold, or claims the wrong one."""
        return (not self.truth) if self.claimed is None else self.claimed != self.truth

    def states(self, value: float, whole: bool = False) -> bool:
        """Is the left side ``value`` as written?"""
        return self.left_side.states(value, whole)

    def against(self, op: str, threshold: float) -> tuple[Side, bool] | None:
        """Read as ``x op threshold``: (the side that is x, whether this comparison states the
        opposite of ``op``), or None when it compares nothing with ``threshold`` that way. ``70 <= 72``
        and ``72 < 70`` are both about ``72 >= 70``."""
        if self.op in (op, COMPLEMENT[op]) and self.right_side.is_(threshold):
            return self.left_side, self.op != op
        if self.op in (MIRROR[op], MIRROR[COMPLEMENT[op]]) and self.left_side.is_(threshold):
            return self.right_side, self.op != MIRROR[op]
        return None


def _tokens(norm: str, numbers: list[Number], names: list[tuple[int, int]]) -> list[tuple[str, Any, int, int]]:
    """(kind, payload, start, end): num, op (+ - * /), ( ), cmp, and break for anything else."""
    at: dict[int, tuple[str, Any, int, int]] = {n.start: ("num", n, n.start, n.end) for n in numbers}
    at.update({start: ("break", None, start, end) for start, end in names})
    out: list[tuple[str, Any, int, int]] = []
    i = 0
    while i < len(norm):
        ch = norm[i]
        if i in at:
            out.append(at[i])
            i = at[i][3]
        elif ch.isspace():
            i += 1
        elif norm.startswith("->", i):  # an arrow, not a minus and a comparison
            out.append(("break", None, i, i + 2))
            i += 2
        elif ch in "+-*/":
            out.append(("op", ch, i, i + 1))
            i += 1
        elif ch in "()":
            out.append((ch, ch, i, i + 1))
            i += 1
        elif (op := next((o for o in _OP_TEXT if norm.startswith(o, i)), None)) is not None:
            out.append(("cmp", _CANONICAL_OP[op], i, i + len(op)))
            i += len(op)
        else:
            j = i + 1
            while j < len(norm) and j not in at and not norm[j].isspace() and norm[j] not in "+-*/()" \
                    and not any(norm.startswith(o, j) for o in _OP_TEXT):
                j += 1
            out.append(("break", None, i, j))
            i = j
    return out


def _evaluate(tokens: list[tuple[str, Any, int, int]]) -> Fraction | None:
    """The exact value of an arithmetic token run, or None when it is not one whole expression."""
    pos = 0

    def peek() -> tuple[str, Any]:
        return (tokens[pos][0], tokens[pos][1]) if pos < len(tokens) else ("end", None)

    def expression(depth: int) -> Fraction:
        nonlocal pos
        value = term(depth)
        while peek() in (("op", "+"), ("op", "-")):
            sign = tokens[pos][1]
            pos += 1
            value = value + term(depth) if sign == "+" else value - term(depth)
        return value

    def term(depth: int) -> Fraction:
        nonlocal pos
        value = factor(depth)
        while peek() in (("op", "*"), ("op", "/")):
            op = tokens[pos][1]
            pos += 1
            right = factor(depth)
            if op == "/" and right == 0:
                raise ValueError("division by zero")
            value = value * right if op == "*" else value / right
        return value

    def factor(depth: int) -> Fraction:
        nonlocal pos
        kind, payload = peek()
        if depth > 20:
            raise ValueError("too deep")
        if kind == "op" and payload in "+-":
            pos += 1
            inner = factor(depth + 1)
            return -inner if payload == "-" else inner
        if kind == "num":
            pos += 1
            return payload.fraction()
        if kind == "(":
            pos += 1
            inner = expression(depth + 1)
            if peek()[0] != ")":
                raise ValueError("unbalanced")
            pos += 1
            return inner
        raise ValueError("not a number")

    try:
        value = expression(0)
    except (ValueError, ZeroDivisionError):
        return None
    return value if pos == len(tokens) else None


def _side(run: list[tuple[str, Any, int, int]]) -> tuple[Side, int, int] | None:
    if len(run) == 1 and run[0][0] == "num":
        n = run[0][1]
        return Side(n.value, n), n.start, n.end
    value = _evaluate(run)
    return None if value is None else (Side(float(value)), run[0][2], run[-1][3])


def read_comparisons(text: str) -> list[Comparison]:
    """Every comparison ``text`` states between two numbers (or arithmetic over numbers)."""
    norm, numbers, names = _scan(text)
    tokens = _tokens(norm, numbers, names)
    arithmetic = {"num", "op", "(", ")"}
    out: list[Comparison] = []
    for i, (kind, op, _, _) in enumerate(tokens):
        if kind != "cmp":
            continue
        lo = i
        while lo > 0 and tokens[lo - 1][0] in arithmetic and i - lo < _MAX_SIDE:
            lo -= 1
        hi = i + 1
        while hi < len(tokens) and tokens[hi][0] in arithmetic and hi - i <= _MAX_SIDE:
            hi += 1
        # The longest run next to the operator that is one whole expression: "is (72 + 78) / 2 = 75"
        # reads (72 + 78) / 2, and "= 79 (obs-calculator-2)" reads 79.
        left = next((s for s in (_side(tokens[k:i]) for k in range(lo, i)) if s is not None), None)
        right = next((s for s in (_side(tokens[i + 1:k]) for k in range(hi, i + 1, -1)) if s is not None), None)
        if left is None or right is None:
            continue
        (lside, start, _), (rside, _, end) = left, right
        # A single percentage against a plain number stands for its fraction.
        lp, rp = (s.number is not None and s.number.percent for s in (lside, rside))
        if lp != rp:
            lside = Side(float(lside.number.fraction()), lside.number) if lp else lside
            rside = Side(float(rside.number.fraction()), rside.number) if rp else rside
        claim = _CLAIM.match(norm, end)
        claimed = None if claim is None else claim.group(1).lower() in _TRUE_WORDS
        if claim is not None:
            end = claim.end()
        out.append(Comparison(lside, op, rside, claimed, text[start:end].strip()))
    return out
