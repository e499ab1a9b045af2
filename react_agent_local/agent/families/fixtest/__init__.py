"""Fix the failing test: a small repository with one bug and a test that catches it; the agent reads
the test and the source, edits the source, runs the tests and finishes only once they pass on the
current files, without touching the tests.

    bugs.py        the one-line bugs (off by one, wrong condition, missing case, wrong operator) as
                   templates; expected values computed by running the fixed function
    generator.py   ``generated:fixtest:N``: packs from the templates with seeded variation
    grading.py     the family's own grader (from the pack's template, hidden tests laid over)

The hand-written packs are ``packs/fixtest_*``. What makes a Final acceptable is not this family's
business but the runtime's (``workspace_evidence.py``): any pack with a ``workspace`` gets it.
"""
