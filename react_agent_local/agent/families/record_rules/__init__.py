"""One evaluation record under rules other than the release rule: the gap to a floor, a spread
limit, which group is lowest or highest, an average against a target of another name.

    generator.py   ``generated:record_rules:N``: the record, its rules in five shapes, near-miss
                   rule names, a pack-declared answer form with bound slots, checks and expectations
    grading.py     the family's own grader: the right answer recomputed from the generated data
"""
