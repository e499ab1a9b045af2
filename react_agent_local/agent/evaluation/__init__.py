"""The evaluation suite (R-EVAL): a pack generator, the eval loop and its report.

    generator.py  task packs of the AgentEval kind, deterministic from a seed (four verdict cases)
    suite.py      packs × seeds through ``runtime.run_agent`` with one policy
    grading.py    an independent second grader of each run (guards against a grader bug)
    report.py     Wilson intervals, metric means, failure families -> JSON, markdown, PNG
    command.py    ``python -m agent eval``

Heavy imports (matplotlib, tqdm, the backends) happen inside the functions that need them, so
importing the CLI stays cheap.
"""

from .generator import generate_packs

__all__ = ["generate_packs"]
