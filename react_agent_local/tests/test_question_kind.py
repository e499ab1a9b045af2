"""What a goal asks for, read from its own words in English and Chinese (``agent/gate/question_kind.py``),
and what a Final that answers nothing looks like."""

from __future__ import annotations

import pytest

from agent.gate.question_kind import question_kinds, unanswered


@pytest.mark.parametrize("goal,kinds", [
    ("How many tickets did the Oslo office close in April?", {"number"}),
    ("By how much did the average change from week one to week two?", {"number"}),
    ("Which office has the lowest resolution rate?", {"name"}),
    ("Which offices are below the floor?", {"list"}),
    ("Say whether the release rule is met.", {"verdict"}),
    ("Is the spread within the limit? Compute it with the calculator.", {"verdict", "number"}),
    ("三个区域的平均值从 3 月到 4 月变化了多少？", {"number"}),
    ("哪个区域的解决率最低？", {"name"}),
    ("哪些区域低于下限？", {"list"}),
    ("请判断是否满足发布规则。", {"verdict"}),
    ("有几个区域低于下限？", {"number"}),
])
def test_the_goals_words_say_what_it_asks(goal, kinds):
    assert question_kinds(goal) == frozenset(kinds)


GOAL = "Which office has the lowest resolution rate, and by how much is it below the floor?"
NAMES = ["Oslo", "Quito", "Lima"]


@pytest.mark.parametrize("answer,missing", [
    ("70 >= 66.5 is True", "only a comparison"),
    ("66.5 < 70 成立", "only a comparison"),
    ("The lowest office is {name} with {number}.", "unfilled"),
    ("The lowest rate is 66.5, 3.5 below the floor.", "asks for a name"),
    ("Quito is the lowest office.", "asks for a number"),
    ("Which office has the lowest resolution rate, and by how much is it below the floor?", "repeats"),
    # letters standing for values, with words and a grounded number around them (a 0.5B follow-up)
    ("X >= Y is False, because Quito gives 66.5; the floor is not met.", "compares letters"),
    ("Quito is lowest at 66.5: a < b holds, 3.5 short.", "compares letters"),
    ("true >= 334914895", "truth value"),  # a 0.5B Final on a per-capita question, accepted before
    ("3.5 < true", "truth value"),
    # a comparison in words with one side only, and the truth it claims
    ("大于等于 2765932 是 True", "only a comparison"),
    ("At least 70 is true.", "only a comparison"),
])
def test_a_final_that_answers_nothing_is_named(answer, missing):
    found = unanswered(answer, GOAL, [], NAMES)
    assert found and missing in found[0], found


@pytest.mark.parametrize("answer", [
    "Quito is the lowest office at 66.5, 3.5 points below the floor of 70.",
    "Quito: 66.5 < 70, so it is 3.5 points short.",
    "Quito is lowest at 66.5, 3.5 below the floor: 66.5 < 70 = True",  # a comparison's truth, claimed
    "2602418 + 2820787 = 5423205",  # an equation states its result
    "Quito is at least 3.5 points below the floor: 66.5 < 70 is True.",  # words around the comparison
])
def test_a_final_that_answers_is_not(answer):
    goal = GOAL if not answer[0].isdigit() else "Add the two populations with the calculator."
    assert unanswered(answer, goal, [], NAMES if not answer[0].isdigit() else []) == []


def test_an_answer_form_the_pack_declares_says_what_is_stated():
    assert unanswered("The gap is 6 points.", "Which group is lowest and by how much?", [], ["North"],
                      form_declared=True) == []
