"""Release-rule records: groups of one evaluation record with a mean and a release rule (the
average against ``average_gte``, every group against ``every_batch_gte``), the course's first
family and its default pack (the package root, ``packs/release_hold``).

    generator.py   ``generated:N`` and ``generated:release_rule:N``: 2-8 groups, four verdict cases,
                   rules in five formats, English and Chinese, ground truth in the first round's format
    grading.py     the family's own grader and the verdict case of a pack's ground truth
    record.py      the record itself: read from the knowledge files into the knowledge search's ``data``,
                   shown to the model, and seen by the check language as a record of any rule
    guide.py       the default answer guide over the record the knowledge search read (form, checks,
                   verdict phrases, expectations on the average and the chart) and the translator of
                   the first round's ``expected.json``

It is the registry's default family (``families.DEFAULT_FAMILY``): a pack whose ``task.json``
names no family is one of its packs, as learners' packs written before families existed are.
"""
