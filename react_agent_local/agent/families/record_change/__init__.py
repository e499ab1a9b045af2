"""The change of one group across two evaluation records kept in two files, keyed by date or title.

    generator.py   ``generated:record_change:N``: the two records, the allowed drop in the later one
                   or in a policy file, a difference or a percentage change, checks over ``records[...]``
    grading.py     the family's own grader: the change recomputed from the generated data
"""
