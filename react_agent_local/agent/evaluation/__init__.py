"""The evaluation suite: the eval loop over packs (given or generated) and its report.

    suite.py      packs × seeds through ``runtime.run_agent`` with one policy
    report.py     Wilson intervals, metric means, failure families -> JSON, markdown, PNG
    command.py    ``python -m agent eval``

Generated packs and their independent second grader belong to a task family (``agent/families/``);
the suite finds them through the family registry.

Heavy imports (matplotlib, tqdm, the backends) happen inside the functions that need them, so
importing the CLI stays cheap.
"""
