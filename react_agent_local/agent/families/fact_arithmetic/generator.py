"""``generated:fact_arithmetic:N``: arithmetic over facts looked up by name in the pack's fact base.

Each pack's ``knowledge/facts.json`` holds the facts the question needs and near misses of them: a
name one word away (``Porto metro population``, ``Porto hospital beds 2015``) and the same quantity
in another unit (``Porto population (thousands)``, ``Porto area (square miles)``). The question:

    sum          the total population of two to four cities
    per_1000     hospital beds per 1,000 residents of a city, rounded to two decimals
    density      people per square kilometre of a city, rounded to one decimal

The pack names the facts (``subgoals``), states with ``expect`` what the calculator's value must
equal (``facts['Porto population'] + ...``, an independent recomputation from the looked-up facts)
and binds the answer's number to it (``{number:calculator.value}``, ``{number:round(calculator.value, 2)}``).
"""

from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path
from typing import Any

from agent.families.packkit import NUMBER_PATTERN as NUM
from agent.families.packkit import (
    PROTECTED_STOP_REASONS, decks, expression_argument, generate, number, rounded, text_of
)
from agent.util.number_text import number_text

CITIES = ("Porto", "Lyon", "Leeds", "Graz", "Turku", "Utrecht", "Malmo", "Bilbao", "Gdansk", "Brno", "Aarhus",
          "Split")
OPTIONS: dict[str, tuple[Any, ...]] = {
    "question": ("sum", "per_1000", "density"),
    "cities": (2, 3, 4),
    "near_name": (True, False),
    "near_unit": (True, False),
    "aliases": (True, False),
}
DIGITS = {"sum": 0, "per_1000": 2, "density": 1}


def _facts(rng: random.Random, d: dict[str, Any], cities: list[str]) -> tuple[dict[str, Any], list[str]]:
    """(the fact base, the names the question needs, in order)."""
    facts: dict[str, dict[str, Any]] = {}

    def add(name: str, value: int | float, unit: str) -> None:
        facts[name] = {"value": value, "unit": unit}
        if d["aliases"]:
            facts[name]["aliases"] = [name.lower().replace(" ", "_")]

    q = d["question"]
    populations = {city: rng.randrange(80_000, 2_500_000, 10) for city in cities}
    if q == "sum":
        needed = [f"{city} population" for city in cities]
        for city in cities:
            add(f"{city} population", populations[city], "people")
    else:
        city = cities[0]
        add(f"{city} population", populations[city], "people")
        if q == "per_1000":
            add(f"{city} hospital beds", rng.randrange(300, 12_000), "beds")
            needed = [f"{city} hospital beds", f"{city} population"]
        else:
            add(f"{city} area", number(Fraction(rng.randrange(500, 15000), 10)), "km²")
            needed = [f"{city} population", f"{city} area"]
    first = cities[0]
    if d["near_name"]:  # one word away from a needed name
        if q == "per_1000":
            add(f"{first} hospital beds 2015", int(facts[f"{first} hospital beds"]["value"] * 0.9), "beds")
        elif q == "density":
            add(f"{first} metro area", number(Fraction(repr(facts[f"{first} area"]["value"])) * 3), "km²")
        else:
            add(f"{first} metro population", int(populations[first] * 1.8), "people")
    if d["near_unit"]:  # the same quantity in another unit
        if q == "density":
            add(f"{first} area (square miles)", number(rounded(Fraction(repr(facts[f"{first} area"]["value"]))
                                                               / Fraction("2.59"), 1)), "sq mi")
        else:
            add(f"{first} population (thousands)", number(rounded(Fraction(populations[first], 1000), 1)),
                "thousand people")
    names = list(facts)
    rng.shuffle(names)
    return {name: facts[name] for name in names}, needed


def _right(question: str, values: list[Fraction]) -> Fraction:
    if question == "sum":
        return sum(values)
    if question == "per_1000":
        return values[0] / values[1] * 1000
    return values[0] / values[1]


def pack_files(pack_id: str, rng: random.Random, state: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    if "decks" not in state:
        state["decks"] = decks(rng, OPTIONS)
    d = {name: deck.draw() for name, deck in state["decks"].items()}
    q = d["question"]
    cities = rng.sample(CITIES, d["cities"] if q == "sum" else 1)
    facts, needed = _facts(rng, d, cities)
    refs = [f"facts['{name}']" for name in needed]
    named = ", ".join(f"'{n}'" for n in needed)
    city = cities[0]
    if q == "sum":
        listed = ", ".join(cities[:-1]) + " and " + cities[-1]
        goal = (f"Look up the populations of {listed} (the facts {named}) and use the calculator for their total. "
                "Answer with the total population, citing the evidence.")
        right_side, slot = " + ".join(refs), "{number:calculator.value}"
        form = f"The total population of {listed} is {slot} people."
        calc = "Add the looked-up populations: a + b + ..., copying each number exactly from the observations."
        shape = (" \\+ ".join([NUM] * len(needed)),)
    elif q == "per_1000":
        goal = (f"How many hospital beds does {city} have per 1,000 residents? Look up the facts {named}, use the "
                "calculator (beds / population * 1000) and give the result rounded to two decimals, citing the evidence.")
        right_side, slot = f"{refs[0]} / {refs[1]} * 1000", "{number:round(calculator.value, 2)}"
        form = f"{city} has {slot} hospital beds per 1,000 residents."
        calc = "Divide the beds by the population and multiply by 1000: beds / population * 1000, numbers as observed."
        shape = (NUM, " / ", NUM, " \\* 1000")
    else:
        goal = (f"How many people live per square kilometre in {city}? Look up the facts {named}, use the calculator "
                "(population / area in km²) and give the result rounded to one decimal, citing the evidence.")
        right_side, slot = f"{refs[0]} / {refs[1]}", "{number:round(calculator.value, 1)}"
        form = f"{city} has {slot} people per square kilometre."
        calc = "Divide the population by the area in km²: population / area, both exactly as observed."
        shape = (NUM, " / ", NUM)
    task = {"id": pack_id, "goal": goal, "required_tools": ["lookup_fact", "calculator"], "mode": "guided",
            "subgoals": {"lookup_fact": needed}, "answer_form": form,
            "expect": [{"label": {"sum": "the total of the looked-up populations",
                                  "per_1000": "beds per 1,000 residents",
                                  "density": "people per km²"}[q],
                        "left": "calculator.value", "op": "==", "right": right_side,
                        "hint": calc[0].lower() + calc[1:].rstrip("."), "arguments": expression_argument(*shape)}],
            "hints": {"lookup_fact": "Ask for exactly the fact named above.", "calculator": calc},
            "summaries": {"lookup_fact": "A fact the task needs is missing: look it up.",
                          "calculator": "The facts are known: compute with the calculator.",
                          "final": "The facts and the calculator's value observed: answer with evidence."}}
    values = [Fraction(repr(facts[n]["value"])) if isinstance(facts[n]["value"], float) else Fraction(facts[n]["value"])
              for n in needed]
    exact = _right(q, values)
    stated = rounded(exact, DIGITS[q])
    expected = {
        "family": "fact_arithmetic", "task_id": pack_id,
        "case": q + (":near_name" if d["near_name"] else "") + (":near_unit" if d["near_unit"] else ""),
        "data": {"question": q, "needed": needed, "facts": facts, "digits": DIGITS[q]},
        "checks": [{"type": "final_accepted"}]
        + [{"type": "tool_result", "name": f"looked_up_{i + 1}", "tool": "lookup_fact", "path": "fact", "equals": name}
           for i, name in enumerate(needed)]
        + [{"type": "tool_result", "name": "calculator_correct", "tool": "calculator", "path": "value",
            "equals": number(exact)},
           {"type": "answer_numbers", "name": "answer_states_the_result",
            "numbers": [text_of(stated, DIGITS[q]) if DIGITS[q] else number_text(number(stated))]}],
        "protected_stop_reasons": list(PROTECTED_STOP_REASONS),
    }
    return {"task.json": task, "knowledge/facts.json": {"facts": facts}, "data/expected.json": expected}, []


def generate_packs(out_dir: Path, n: int, seed: int) -> list[Path]:
    """Write ``n`` packs ``fact_arithmetic-<seed>-<i>`` under ``out_dir``; the same (n, seed) gives the same bytes."""
    return generate(out_dir, n, seed, "fact_arithmetic", pack_files)
