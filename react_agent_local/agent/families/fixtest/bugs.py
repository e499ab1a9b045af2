"""The bugs of the fix-the-failing-test family: small, realistic one-line Python bugs.

Each ``Bug`` is a function template with exactly one wrong line (``buggy``) and its fix (``fixed``),
the names it may be given, the constants it may use and how to draw inputs. ``instantiate`` fills a
template with seeded choices and runs both versions on the drawn inputs: a test's expected value is
what the *fixed* function returns (never typed in), and an input is *discriminating* when the buggy
function returns something else or raises. Every case keeps at least one discriminating input in the
visible tests (so they fail before the fix) and, where there are more, in the hidden ones.

Kinds: ``off_by_one``, ``wrong_condition``, ``missing_case``, ``wrong_operator``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Callable

Inputs = Callable[[random.Random, dict[str, Any]], list[tuple[Any, ...]]]


@dataclass(frozen=True)
class Bug:
    key: str
    kind: str
    names: tuple[str, ...]  # function names to choose from
    params: dict[str, tuple[str, ...]]  # placeholder -> parameter names to choose from
    source: str  # the function with {f}, the parameters' placeholders and {BUG} for the line
    buggy: str
    fixed: str
    inputs: Inputs
    constants: dict[str, tuple[Any, ...]] | None = None  # placeholder -> values to choose from
    preamble: str = ""  # module-level lines before the function (e.g. a constant)


@dataclass(frozen=True)
class Case:
    """One filled template: the module's function text (buggy), its fix, and computed test cases."""

    bug: Bug
    name: str
    function: str  # the buggy function's source, preamble included
    buggy_line: str  # with its indentation, as the file has it
    fixed_line: str
    visible: list[tuple[tuple[Any, ...], Any]]  # (arguments, expected)
    hidden: list[tuple[tuple[Any, ...], Any]]


def _list(rng: random.Random, lo: int = 1, hi: int = 7) -> list[int]:
    return [rng.randint(-9, 30) for _ in range(rng.randint(lo, hi))]


WORDS = ("apple", "Orange", "banana", "Umbrella", "kiwi", "Echo", "sky", "Idea", "rhythm", "Ocean", "tree", "AI")

BUGS: tuple[Bug, ...] = (
    Bug("sum_to", "off_by_one", ("sum_to", "total_up_to", "triangular"), {"n": ("n", "count", "limit")},
        '''def {f}({n}):
    """Return the sum 1 + 2 + ... + {n}."""
{BUG}''',
        "    return sum(range(1, {n}))", "    return sum(range(1, {n} + 1))",
        lambda rng, c: [(k,) for k in rng.sample(range(1, 40), 6)]),
    Bug("last_items", "off_by_one", ("last_items", "tail", "most_recent"), {"items": ("items", "values", "entries"),
                                                                           "k": ("k", "count", "n")},
        '''def {f}({items}, {k}):
    """Return the last {k} elements of {items} (1 <= {k} <= len({items}))."""
{BUG}''',
        "    return {items}[len({items}) - {k} - 1:]", "    return {items}[len({items}) - {k}:]",
        lambda rng, c: [(xs, rng.randint(1, len(xs))) for xs in (_list(rng, 2, 8) for _ in range(6))]),
    Bug("page", "off_by_one", ("page", "get_page", "paginate"), {"items": ("items", "rows", "records"),
                                                              "number": ("number", "page_number", "index"),
                                                              "size": ("size", "per_page", "page_size")},
        '''def {f}({items}, {number}, {size}):
    """Page {number} of {items} (the first page is 1), {size} items per page."""
{BUG}
    return {items}[start:start + {size}]''',
        "    start = {number} * {size}", "    start = ({number} - 1) * {size}",
        lambda rng, c: [(list(range(rng.randint(5, 20))), rng.randint(1, 3), rng.randint(2, 4)) for _ in range(6)]),
    Bug("countdown", "off_by_one", ("countdown", "down_from", "count_down"), {"n": ("n", "start", "top")},
        '''def {f}({n}):
    """The whole numbers from {n} down to 1, e.g. [3, 2, 1] for 3."""
{BUG}''',
        "    return list(range({n}, 1, -1))", "    return list(range({n}, 0, -1))",
        lambda rng, c: [(k,) for k in rng.sample(range(1, 12), 6)]),
    Bug("at_least", "wrong_condition", ("is_allowed", "may_enter", "is_eligible"), {"age": ("age", "years", "value")},
        '''def {f}({age}):
    """True when {age} is at least {LIMIT}."""
{BUG}''',
        "    return {age} > {LIMIT}", "    return {age} >= {LIMIT}",
        lambda rng, c: [(c["LIMIT"],), (c["LIMIT"] - 1,), (c["LIMIT"] + 1,), (c["LIMIT"] + rng.randint(2, 30),),
                        (rng.randint(0, c["LIMIT"] - 2),), (c["LIMIT"],)],
        constants={"LIMIT": (16, 18, 21, 25, 65)},
        preamble=""),
    Bug("discount", "wrong_condition", ("discounted_total", "final_price", "apply_discount"),
        {"total": ("total", "amount", "price")},
        '''def {f}({total}):
    """Orders of {THRESHOLD} or more get 10 % off; return the amount to pay."""
{BUG}
        return round({total} * 0.9, 2)
    return {total}''',
        "    if {total} > {THRESHOLD}:", "    if {total} >= {THRESHOLD}:",
        lambda rng, c: [(c["THRESHOLD"],), (c["THRESHOLD"] + rng.randint(1, 50),), (c["THRESHOLD"] - rng.randint(1, 20),),
                        (c["THRESHOLD"],), (rng.randint(1, 20),), (c["THRESHOLD"] * 2,)],
        constants={"THRESHOLD": (50, 100, 200, 80)}),
    Bug("clamp", "wrong_condition", ("clamp", "limit", "bounded"), {"value": ("value", "x", "number"),
                                                                  "low": ("low", "lo", "minimum"),
                                                                  "high": ("high", "hi", "maximum")},
        '''def {f}({value}, {low}, {high}):
    """{value} limited to the range {low}..{high}."""
    if {value} < {low}:
        return {low}
{BUG}
        return {high}
    return {value}''',
        "    if {value} < {high}:", "    if {value} > {high}:",
        lambda rng, c: [(v, 0, 10) for v in rng.sample(range(-5, 16), 6)]),
    Bug("largest", "wrong_condition", ("largest", "maximum", "biggest"), {"values": ("values", "numbers", "items")},
        '''def {f}({values}):
    """The largest of {values} (a non-empty list)."""
    best = {values}[0]
    for value in {values}[1:]:
{BUG}
            best = value
    return best''',
        "        if value < best:", "        if value > best:",
        lambda rng, c: [(_list(rng, 2, 7),) for _ in range(6)]),
    Bug("average", "missing_case", ("average", "mean", "mean_of"), {"values": ("values", "numbers", "scores")},
        '''def {f}({values}):
    """The mean of {values}; 0.0 when there are none."""
{BUG}''',
        "    return sum({values}) / len({values})", "    return sum({values}) / len({values}) if {values} else 0.0",
        lambda rng, c: [([],), (_list(rng),), (_list(rng),), ([rng.randint(1, 9)],), ([],), (_list(rng),)]),
    Bug("vowels", "missing_case", ("count_vowels", "vowel_count", "vowels_in"), {"text": ("text", "word", "s")},
        '''def {f}({text}):
    """How many vowels (a, e, i, o, u, upper or lower case) {text} has."""
{BUG}''',
        '    return sum(1 for ch in {text} if ch in "aeiou")', '    return sum(1 for ch in {text} if ch.lower() in "aeiou")',
        lambda rng, c: [(w,) for w in rng.sample(WORDS, 6)]),
    Bug("leap_year", "missing_case", ("is_leap", "leap_year", "is_leap_year"), {"year": ("year", "y", "value")},
        '''def {f}({year}):
    """True for a leap year of the Gregorian calendar."""
{BUG}''',
        "    return {year} % 4 == 0 and {year} % 100 != 0",
        "    return {year} % 4 == 0 and ({year} % 100 != 0 or {year} % 400 == 0)",
        lambda rng, c: [(y,) for y in (2000, 1900, 2024, 2023, rng.choice((1600, 2400)), rng.choice((1996, 2012, 2016)))]),
    Bug("factorial", "missing_case", ("factorial", "fact", "product_up_to"), {"n": ("n", "k", "number")},
        '''def {f}({n}):
    """{n}! (the product 1 * 2 * ... * {n}); 0! is 1."""
{BUG}
        return 1
    return {n} * {f}({n} - 1)''',
        "    if {n} == 1:", "    if {n} <= 1:",
        lambda rng, c: [(0,), (rng.randint(2, 8),), (1,), (rng.randint(3, 10),), (0,), (5,)]),
    Bug("fahrenheit", "wrong_operator", ("to_fahrenheit", "celsius_to_fahrenheit", "fahrenheit"),
        {"celsius": ("celsius", "degrees", "c")},
        '''def {f}({celsius}):
    """Degrees Celsius converted to degrees Fahrenheit."""
{BUG}''',
        "    return {celsius} * 9 / 5 - 32", "    return {celsius} * 9 / 5 + 32",
        lambda rng, c: [(v,) for v in rng.sample(range(-20, 101, 5), 6)]),
    Bug("full_name", "wrong_operator", ("full_name", "display_name", "join_name"),
        {"first": ("first", "given", "first_name"), "last": ("last", "family", "last_name")},
        '''def {f}({first}, {last}):
    """The name as "First Last"."""
{BUG}''',
        '    return {first} + " " + {first}', '    return {first} + " " + {last}',
        lambda rng, c: [(a, b) for a, b in zip(rng.sample(("Ada", "Alan", "Grace", "Linus", "Guido", "Barbara"), 6),
                                                rng.sample(("Lovelace", "Turing", "Hopper", "Torvalds", "Rossum", "Liskov"), 6))]),
)


# Correct helpers that share the module with the bug: a real file has more than the broken function.
HELPERS: tuple[tuple[str, str, Callable[[random.Random], list[tuple[Any, ...]]]], ...] = (
    ("double", '''def double(x):
    """Twice x."""
    return 2 * x''', lambda rng: [(rng.randint(-9, 50),) for _ in range(2)]),
    ("is_even", '''def is_even(n):
    """True for an even whole number."""
    return n % 2 == 0''', lambda rng: [(rng.randint(0, 99),), (rng.randint(0, 99),)]),
    ("initials", '''def initials(name):
    """The upper-case first letters of each part of a name."""
    return "".join(part[0].upper() for part in name.split())''',
     lambda rng: [(rng.choice(("ada lovelace", "Grace Brewster Hopper", "alan turing")),)]),
    ("square", '''def square(x):
    """x times x."""
    return x * x''', lambda rng: [(rng.randint(-12, 12),) for _ in range(2)]),
    ("first_word", '''def first_word(text):
    """The first word of a text, or "" for a text without words."""
    words = text.split()
    return words[0] if words else ""''', lambda rng: [(rng.choice(("hello world", "  spaced  out", "")),)]),
    ("percent", '''def percent(part, whole):
    """part as a percentage of whole, rounded to one decimal."""
    return round(100 * part / whole, 1)''', lambda rng: [(rng.randint(1, 50), rng.randint(51, 200))]),
)


def _call(source: str, name: str, args: tuple[Any, ...]) -> tuple[bool, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<fixtest>", "exec"), namespace)  # noqa: S102 -- our own template, for expected values
    try:
        return True, namespace[name](*args)
    except Exception as exc:  # noqa: BLE001 -- a buggy function may raise; that is a failing test
        return False, type(exc).__name__


def fill(text: str, values: dict[str, Any]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", str(value))
    return text


def instantiate(bug: Bug, rng: random.Random) -> Case:
    """One case of ``bug``: names and constants drawn from ``rng``, expected values computed."""
    values: dict[str, Any] = {"f": rng.choice(bug.names)}
    used = {values["f"]}
    for key, options in bug.params.items():
        choice = rng.choice([o for o in options if o not in used] or list(options))
        values[key] = choice
        used.add(choice)
    constants = {key: rng.choice(options) for key, options in (bug.constants or {}).items()}
    values.update(constants)
    buggy, fixed = fill(bug.buggy, values), fill(bug.fixed, values)
    template = fill(bug.source, values)
    buggy_src = fill(bug.preamble, values) + template.replace("{BUG}", buggy)
    fixed_src = fill(bug.preamble, values) + template.replace("{BUG}", fixed)
    assert buggy_src.count(buggy) == 1, f"{bug.key}: the buggy line must be unique"
    rows = []
    for args in bug.inputs(rng, constants):
        ok, want = _call(fixed_src, values["f"], args)
        assert ok, f"{bug.key}: the fixed function raised on {args!r}"
        got = _call(buggy_src, values["f"], args)
        rows.append((args, want, got != (True, want)))
    # One discriminating input (and a passing one) visible; the rest hidden.
    telling = [r for r in rows if r[2]]
    assert telling, f"{bug.key}: no input tells the bug from the fix"
    plain = [r for r in rows if not r[2]]
    visible = [telling[0]] + plain[:1]
    if len(telling) > 2:
        visible.append(telling[1])
    rng.shuffle(visible)
    hidden = [r for r in rows if r not in visible] or telling[:1]
    return Case(bug=bug, name=values["f"], function=buggy_src, buggy_line=buggy, fixed_line=fixed,
                visible=[(a, w) for a, w, _ in visible], hidden=[(a, w) for a, w, _ in hidden])


def literal(value: Any) -> str:
    """``value`` as Python source; floats compared with pytest.approx (another correct fix may round
    differently in the last bit)."""
    if isinstance(value, float) and math.isfinite(value):
        return f"pytest.approx({value!r})"
    return repr(value)


def assertion(name: str, args: tuple[Any, ...], want: Any) -> str:
    call = f"{name}({', '.join(repr(a) for a in args)})"
    if isinstance(want, bool):
        return f"    assert {call}" if want else f"    assert not {call}"
    return f"    assert {call} == {literal(want)}" if want is not None else f"    assert {call} is None"


def render_test(name: str, rows: list[tuple[tuple[Any, ...], Any]], suffix: str = "") -> str:
    return f"def test_{name}{suffix}():\n" + "\n".join(assertion(name, a, w) for a, w in rows) + "\n"
