"""Percentage and interest word problems the calculator answers from the numbers of the goal.

    generator.py   ``generated:interest:N``: compound and simple interest, a percentage of an amount,
                   a percentage change, a discount then a tax; the expectation recomputes the value
    grading.py     the family's own grader: the value recomputed from the problem's numbers
"""
