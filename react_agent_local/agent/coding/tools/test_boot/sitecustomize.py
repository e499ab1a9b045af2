"""Imported at start-up by the interpreter that runs a task's test command (``PYTHONPATH`` names only
this folder, and ``PYTHONSAFEPATH`` keeps the working folder off the front of ``sys.path``): the
working folder goes to the *end* of the path, so the task's own modules import as under
``python -m pytest`` while a ``pytest.py``, ``_pytest/`` or plugin module left in the workspace can
never stand in for the installed ones."""

import os
import sys

if os.getcwd() not in sys.path:
    sys.path.append(os.getcwd())
