"""The evaluation suite (R-EVAL): a pack generator, the eval loop and its report.

    suite.py      packs × seeds through ``runtime.run_agent`` with one policy
    report.py     Wilson intervals, metric means, failure families -> JSON, markdown, PNG
    command.py    ``python -m agent eval``

The generated packs and their independent second grader belong to the record task family, so they
live with the knowledge tool: ``tools/record_packs.py`` and ``tools/record_grading.py``.

Heavy imports (matplotlib, tqdm, the backends) happen inside the functions that need them, so
importing the CLI stays cheap.
"""

from ..tools.record_packs import generate_packs

__all__ = ["generate_packs"]
