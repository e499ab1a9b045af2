"""What the generated families share: drawing options evenly, exact numbers as JSON keeps them,
writing a pack folder, and reading an answer back for an independent grader. A number as a record
writes it is ``agent/util/number_text.py``'s ``number_text``.

Nothing here knows a family's task: a family's ``generator.py`` draws its data and writes its files
with these, and its ``grading.py`` recomputes the right answer from the data its pack's
``data/expected.json`` keeps and reads the Final with ``answer_numbers``/``states``/``false_claims``,
never with the runtime's ``claims.py`` or ``metrics.py``.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

PROTECTED_STOP_REASONS = ["cancelled", "max_steps", "tool_budget", "token_budget", "timeout", "loop_detected",
                          "invalid_decision"]


class Deck:
    """Options in shuffled rounds: over any run of draws each appears equally often (±1)."""

    def __init__(self, rng: random.Random, options: Sequence[Any]):
        self.rng, self.options, self.pending = rng, tuple(options), []

    def draw(self) -> Any:
        if not self.pending:
            self.pending = list(self.options)
            self.rng.shuffle(self.pending)
        return self.pending.pop()


def decks(rng: random.Random, options: dict[str, Sequence[Any]]) -> dict[str, Deck]:
    return {name: Deck(rng, values) for name, values in options.items()}


def number(value: Fraction | int | float) -> int | float:
    """An exact value as JSON keeps it: int when whole, else the nearest float."""
    value = Fraction(value) if not isinstance(value, float) else Fraction(repr(value))
    return int(value) if value.denominator == 1 else float(value)


def rounded(value: Fraction | float, digits: int) -> Fraction:
    """Half away from zero, as people round money (``round`` in the check language does the same)."""
    value = Fraction(value) if not isinstance(value, float) else Fraction(repr(value))
    scale = Fraction(10) ** digits
    whole = math.floor(abs(value) * scale + Fraction(1, 2))
    return (whole if value >= 0 else -whole) / scale


def text_of(rounded_value: Fraction, digits: int) -> str:
    """A rounded value written with exactly ``digits`` decimals (``2812.10``)."""
    return f"{float(rounded_value):.{digits}f}" if digits else str(int(rounded_value))


def write_pack(root: Path, files: dict[str, Any], folders: Sequence[str] = ()) -> Path:
    """Write a pack folder: text as is, anything else as indented JSON; ``folders`` made even if empty."""
    if root.exists():
        raise FileExistsError(f"pack folder {root.name} already exists; choose an empty output folder")
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, indent=2) + "\n"
        path.write_text(text, encoding="utf-8")
    for folder in folders:
        (root / folder).mkdir(parents=True, exist_ok=True)
    return root


def generate(out_dir: str | Path, n: int, seed: int, prefix: str, draw_files) -> list[Path]:
    """``n`` packs ``<prefix>-<seed>-<i>`` under ``out_dir``: ``draw_files(pack_id, rng, decks_state)``
    returns (files, folders) of one pack. The same (n, seed) gives the same bytes."""
    if not 1 <= n <= 1000:
        raise ValueError("the number of generated packs must be between 1 and 1000")
    rng = random.Random(f"{prefix}:{seed}")
    state: dict[str, Any] = {}
    roots = []
    for i in range(n):
        pack_id = f"{prefix}-{seed}-{i:03d}"
        files, folders = draw_files(pack_id, rng, state)
        roots.append(write_pack(Path(out_dir) / pack_id, files, folders))
    return roots


#: one number as a re-asked calculator expression writes it (the decoding grammar's regex dialect)
NUMBER_PATTERN = "-?[0-9]+([.][0-9]+)?"


def literal_pattern(text: str) -> str:
    """``text`` as a regex of itself, escaping only what is special (a grammar converter may refuse
    an escaped space or dash)."""
    return "".join("\\" + c if c in ".^$*+?()[]{}|\\" else c for c in text)


def expression_argument(*parts: str) -> dict[str, dict[str, Any]]:
    """An expectation's ``arguments``: asked again, the calculator's expression is ``parts`` joined
    (regex pieces: ``NUMBER_PATTERN`` where the model picks an observed number, escaped text for the
    operators), so a small model cannot run on or change the arithmetic the question asks for."""
    return {"expression": {"type": "string", "pattern": "^" + "".join(parts) + "$"}}


def verdict_check(name: str, expected: bool, positive: Sequence[str], negative: Sequence[str]) -> dict[str, Any]:
    """An ``answer_verdict`` grading check whose patterns are the literal phrases."""
    return {"type": "answer_verdict", "name": name, "expected": "positive" if expected else "negative",
            "positive": [re.escape(p) for p in positive], "negative": [re.escape(p) for p in negative]}


# -- reading an answer, for the independent graders --------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])[-−]?\d+(?:\.\d+)?")
_CLAIM = re.compile(r"([-−]?\d+(?:\.\d+)?)\s*%?\s*(>=|≥|<=|≤|==|>|<)\s*([-−]?\d+(?:\.\d+)?)\s*%?\s*"
                    r"(?:is\s*|为\s*|是\s*|:\s*)?(True|False)\b")
_HOLDS = {">=": lambda a, b: a >= b - 1e-9, "≥": lambda a, b: a >= b - 1e-9, "<=": lambda a, b: a <= b + 1e-9,
          "≤": lambda a, b: a <= b + 1e-9, "==": lambda a, b: abs(a - b) <= 1e-9,
          ">": lambda a, b: a > b + 1e-9, "<": lambda a, b: a < b - 1e-9}


def _plain(answer: str) -> str:
    return re.sub(r"(?<=\d),(?=\d{3}\b)", "", answer)  # 1,234,567 -> 1234567


def answer_numbers(answer: str) -> list[float]:
    """Every number written in the answer (thousands commas dropped, the Unicode minus read)."""
    return [float(x.replace("−", "-")) for x in _NUMBER.findall(_plain(answer))]


def states(answer: str, value: float, tolerance: float = 1e-9) -> bool:
    """Does the answer write ``value`` (within ``tolerance``)?"""
    return any(abs(x - float(value)) <= tolerance + 1e-9 * max(1.0, abs(float(value))) for x in answer_numbers(answer))


def states_as(answer: str, phrase: str, value: float, tolerance: float = 1e-9) -> bool:
    """Does the answer write ``value`` where it says what it is (the number right after ``phrase``:
    "the gap is -6")? Where the answer has no such phrase, anywhere in it."""
    match = re.search(re.escape(phrase) + r"\s*([-−]?\d+(?:\.\d+)?)", _plain(answer), re.IGNORECASE)
    if match is None:
        return states(answer, value, tolerance)
    x = float(match.group(1).replace("−", "-"))
    return abs(x - float(value)) <= tolerance + 1e-9 * max(1.0, abs(float(value)))


def false_claims(answer: str) -> list[str]:
    """Every "X op Y is True/False" of the answer whose truth is stated wrongly."""
    wrong = []
    for a, op, b, claimed in _CLAIM.findall(_plain(answer)):
        if _HOLDS[op](float(a.replace("−", "-")), float(b.replace("−", "-"))) != (claimed == "True"):
            wrong.append(f"{a} {op} {b} is {claimed}")
    return wrong


def said(answer: str, positive: Sequence[str], negative: Sequence[str]) -> bool | None:
    """True for a positive phrase, False for a negative one (looked for first: it often holds the
    positive one), None for neither."""
    lowered = answer.casefold()
    if any(p.casefold() in lowered for p in negative):
        return False
    if any(p.casefold() in lowered for p in positive):
        return True
    return None


def last_ok(result: Any, tool: str) -> dict[str, Any] | None:
    found = [o.result for o in result.observations if o.ok and o.tool == tool]
    return found[-1] if found else None
