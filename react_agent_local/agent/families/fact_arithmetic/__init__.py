"""Arithmetic over looked-up facts: a sum, a per-1,000 ratio, a density, with near-miss fact names
and units in the fact base.

    generator.py   ``generated:fact_arithmetic:N``: the fact base, the named facts (subgoals), the
                   expectation over ``facts[...]`` and the bound answer slot
    grading.py     the family's own grader: the result recomputed from the generated fact base
"""
