"""``generated:interest:N``: percentage and interest word problems for the calculator alone.

Every number the calculation needs is in the goal; the calculator's operand rule accepts them, and
a rate's fraction or growth factor (0.04, 1.04, 0.75) as derived from them. The problems:

    compound        a deposit at r % a year, compounded yearly, after n years (to the cent)
    percent_of      r % of an amount (to the cent)
    percent_change  the percentage change of a price from one value to another (one decimal)
    discount_tax    a price discounted by d %, then taxed at t % (to the cent)
    simple_interest the total simple interest on a loan at r % a year for n years (to the cent)

The pack's ``expect`` recomputes the exact value from the goal's numbers in the check language
(``2500 * (1 + 4 / 100) ** 3``), so a calculator expression that computes something else is asked
again; the answer's number is bound to ``round(calculator.value, 2)``.
"""

from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path
from typing import Any

from agent.families.packkit import (
    PROTECTED_STOP_REASONS, decks, expression_argument, generate, literal_pattern, number, rounded, text_of
)

OPTIONS: dict[str, tuple[Any, ...]] = {
    "problem": ("compound", "percent_of", "percent_change", "discount_tax", "simple_interest"),
    "half_rate": (False, False, True),
}


def _rate(rng: random.Random, half: bool) -> Fraction:
    whole = rng.randint(2, 9)
    return Fraction(whole) + (Fraction(1, 2) if half else 0)


def _pct(value: Fraction) -> str:
    return str(int(value)) if value.denominator == 1 else f"{float(value):g}"


def problem(rng: random.Random, d: dict[str, Any]) -> dict[str, Any]:
    """The problem's numbers, its exact value and how it is written."""
    kind = d["problem"]
    if kind == "compound":
        principal, rate, years = rng.randrange(1000, 20000, 50), _rate(rng, d["half_rate"]), rng.randint(2, 5)
        exact = principal * (1 + rate / 100) ** years
        return {"kind": kind, "numbers": {"principal": principal, "rate": _pct(rate), "years": years},
                "exact": exact, "digits": 2,
                "goal": (f"A deposit of {principal} dollars earns {_pct(rate)}% interest a year, compounded yearly. "
                         f"What is it worth after {years} years? Use the calculator and round to the nearest cent."),
                "form": f"After {years} years the deposit is worth {{number:round(calculator.value, 2)}} dollars.",
                "expect": f"{principal} * (1 + {_pct(rate)} / 100) ** {years}",
                "hint": (f"Multiply the deposit by the growth factor (1 + rate / 100) once for each of the {years} "
                         "years: deposit * (1 + rate / 100) * (1 + rate / 100) * ...")}
    if kind == "percent_of":
        amount, rate = rng.randrange(40, 5000), _rate(rng, d["half_rate"]) + rng.choice((0, 10, 20))
        exact = Fraction(amount) * rate / 100
        return {"kind": kind, "numbers": {"amount": amount, "rate": _pct(rate)}, "exact": exact, "digits": 2,
                "goal": f"What is {_pct(rate)}% of {amount}? Use the calculator and round to two decimals.",
                "form": f"{_pct(rate)}% of {amount} is {{number:round(calculator.value, 2)}}.",
                "expect": f"{amount} * {_pct(rate)} / 100",
                "hint": "Multiply the amount by the rate and divide by 100: amount * rate / 100."}
    if kind == "percent_change":
        before = rng.randrange(20, 400)
        after = before + rng.choice((-1, 1)) * rng.randrange(1, max(2, before // 3))
        exact = Fraction(after - before, before) * 100
        return {"kind": kind, "numbers": {"before": before, "after": after}, "exact": exact, "digits": 1,
                "goal": (f"A price changed from {before} dollars to {after} dollars. By what percentage did it change? "
                         "Use the calculator and round to one decimal (a fall is negative)."),
                "form": "The price changed by {number:round(calculator.value, 1)} percent.",
                "expect": f"({after} - {before}) / {before} * 100",
                "hint": "Percentage change: (new - old) / old * 100, with parentheses around the difference."}
    if kind == "discount_tax":
        price, discount, tax = rng.randrange(20, 900), rng.choice((10, 15, 20, 25, 30, 40)), _rate(rng, d["half_rate"])
        exact = Fraction(price) * (1 - Fraction(discount, 100)) * (1 + tax / 100)
        return {"kind": kind, "numbers": {"price": price, "discount": discount, "tax": _pct(tax)}, "exact": exact,
                "digits": 2,
                "goal": (f"An item costs {price} dollars. It is discounted by {discount}%, then a sales tax of "
                         f"{_pct(tax)}% is added to the discounted price. What is the final price? Use the calculator "
                         "and round to the nearest cent."),
                "form": "The final price is {number:round(calculator.value, 2)} dollars.",
                "expect": f"{price} * (1 - {discount} / 100) * (1 + {_pct(tax)} / 100)",
                "hint": "Multiply the price by (1 - discount / 100) and then by (1 + tax / 100)."}
    principal, rate, years = rng.randrange(500, 30000, 100), _rate(rng, d["half_rate"]), rng.randint(2, 8)
    exact = principal * rate / 100 * years
    return {"kind": kind, "numbers": {"principal": principal, "rate": _pct(rate), "years": years}, "exact": exact,
            "digits": 2,
            "goal": (f"A loan of {principal} dollars is charged {_pct(rate)}% simple interest a year for {years} years. "
                     "How much interest is charged in total? Use the calculator and round to the nearest cent."),
            "form": "The total interest is {number:round(calculator.value, 2)} dollars.",
            "expect": f"{principal} * {_pct(rate)} / 100 * {years}",
            "hint": "Simple interest: principal * rate / 100 * years."}


def _layout(p: dict[str, Any]) -> str:
    """The calculator expression of the problem in the one layout a re-ask forces: the goal's
    numbers, a rate as its growth factor (``1.04``) or fraction (``0.2``) written out, which the
    operand rule accepts as derived from the rate."""
    n, kind = p["numbers"], p["kind"]
    if kind == "compound":
        factor = float(1 + Fraction(str(n["rate"])) / 100)
        return str(n["principal"]) + f" * {factor:g}" * int(n["years"])
    if kind == "percent_of":
        return f"{n['amount']} * {n['rate']} / 100"
    if kind == "percent_change":
        return f"({n['after']} - {n['before']}) / {n['before']} * 100"
    if kind == "discount_tax":
        return f"{n['price']} * (1 - {n['discount']} / 100) * (1 + {n['tax']} / 100)"
    return f"{n['principal']} * {n['rate']} / 100 * {n['years']}"


def pack_files(pack_id: str, rng: random.Random, state: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    if "decks" not in state:
        state["decks"] = decks(rng, OPTIONS)
    d = {name: deck.draw() for name, deck in state["decks"].items()}
    p = problem(rng, d)
    task = {"id": pack_id, "goal": p["goal"], "required_tools": ["calculator"], "mode": "guided",
            "answer_form": p["form"],
            "expect": [{"label": "the value the problem asks for", "left": "calculator.value", "op": "==",
                        "right": p["expect"], "hint": p["hint"][0].lower() + p["hint"][1:].rstrip("."),
                        "arguments": expression_argument(literal_pattern(_layout(p)))}],
            "hints": {"calculator": p["hint"]},
            "summaries": {"calculator": "Compute the answer with the calculator from the numbers of the task.",
                          "final": "The calculator's value observed: answer with it, rounded as asked."}}
    stated = rounded(p["exact"], p["digits"])
    expected = {
        "family": "interest", "task_id": pack_id, "case": p["kind"],
        "data": {"kind": p["kind"], "numbers": p["numbers"], "digits": p["digits"]},
        "checks": [{"type": "final_accepted"},
                   {"type": "tool_result", "name": "calculator_correct", "tool": "calculator", "path": "value",
                    "equals": number(p["exact"]), "tolerance": 1e-9},
                   {"type": "answer_numbers", "name": "answer_states_the_result",
                    "numbers": [text_of(stated, p["digits"])]}],
        "protected_stop_reasons": list(PROTECTED_STOP_REASONS),
    }
    return {"task.json": task, "data/expected.json": expected}, ["knowledge"]


def generate_packs(out_dir: Path, n: int, seed: int) -> list[Path]:
    """Write ``n`` packs ``interest-<seed>-<i>`` under ``out_dir``; the same (n, seed) gives the same bytes."""
    return generate(out_dir, n, seed, "interest", pack_files)
