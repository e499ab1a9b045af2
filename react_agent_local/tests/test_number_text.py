"""Numbers as text (agent/util/number_text.py): the three rules, where they agree and where they part."""

from __future__ import annotations

import random

from agent.util.number_text import exact_text, number_text, short_text


def test_a_record_writes_every_digit_and_a_whole_number_without_its_point():
    assert [number_text(v) for v in (79, 79.0, 78.5, -3, -3.0, 1234567.5, 0.1 + 0.2, 0)] == \
        ["79", "79", "78.5", "-3", "-3", "1234567.5", "0.30000000000000004", "0"]


def test_the_exact_text_keeps_a_float_as_it_is_held():
    assert [exact_text(v) for v in (72, 78.0, 78.5, 1234567.5, 1e20)] == ["72", "78.0", "78.5", "1234567.5", "1e+20"]


def test_the_short_text_keeps_six_significant_digits():
    assert [short_text(v) for v in (72, 79.0, 78.5, 77.25, 1234567.5)] == ["72", "79", "78.5", "77.25", "1.23457e+06"]


def test_the_rules_agree_on_ints_and_on_short_fractions():
    rng = random.Random(0)
    for _ in range(2000):
        whole = rng.randint(-10**6, 10**6)
        short = round(rng.uniform(-999, 999), rng.randint(1, 2))
        assert number_text(whole) == exact_text(whole) == short_text(whole) == str(whole)
        if not short.is_integer():
            assert number_text(short) == exact_text(short) == short_text(short) == repr(short)


def test_number_text_is_the_rule_the_claim_gate_and_the_prompts_write():
    # claims.fmt and prompting._number_text: str(int(v)) if float(v).is_integer() else repr(float(v))
    rng = random.Random(1)
    values = [rng.randint(-10**9, 10**9) for _ in range(500)] + [rng.uniform(-1e6, 1e6) for _ in range(500)]
    values += [float(rng.randint(-10**6, 10**6)) for _ in range(200)] + [0, 0.0, -0.0, 1e15, 2.5e-7]
    for v in values:
        assert number_text(v) == (str(int(v)) if float(v).is_integer() else repr(float(v))), v
