"""ReAct Agent Local: a local, auditable agent runtime (see README.md).

``import agent`` needs only pydantic; model backends import their heavy libraries lazily.
"""

__version__ = "0.1.0"
