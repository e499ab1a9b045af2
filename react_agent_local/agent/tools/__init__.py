"""The package's tools and the registry of a run.

``base`` holds the contract (``Tool``, ``ToolRegistry``, the errors); each other module is one tool
and ends with its ``TOOL`` -- or, for the workspace tools, one concept with its ``TOOLS``: ``files``
(read_file, write_file, edit_file, replace_function, glob, grep) and ``shell`` (bash), which work in a run's workspace
and sandbox (``WORKSPACE_TOOLS``; see ``agent/workspace.py``). ``catalog()`` is every local tool; a
run gets ``registry_for(names)``, the tools its pack uses. Adding a tool is one entry in ``_LOCAL_TOOLS``, or, for a tool that is not
part of the package, one ``register`` call on the registry passed to ``run_agent``.
"""

from __future__ import annotations

from typing import Iterable

from .base import (ArgumentError, StrictArgs, Tool, ToolContext, ToolError, ToolRegistry, ToolTransportError,
                   compact_schema)

__all__ = ["ArgumentError", "StrictArgs", "Tool", "ToolContext", "ToolError", "ToolRegistry", "ToolTransportError",
           "WORKSPACE_TOOLS", "catalog", "compact_schema", "default_registry", "registry_for"]

#: tools that need a run's workspace and sandbox (``workspace.bind``)
WORKSPACE_TOOLS = frozenset({"read_file", "write_file", "edit_file", "replace_function", "glob", "grep", "bash"})


def catalog() -> ToolRegistry:
    """Every tool of the package, in a fixed order."""
    from . import calculator, facts, files, knowledge, plotting, shell

    registry = ToolRegistry()
    for module in (knowledge, calculator, plotting, facts):
        registry.register(module.TOOL)
    for tool in (*files.TOOLS, shell.BASH_TOOL):
        registry.register(tool)
    return registry


def registry_for(names: Iterable[str]) -> ToolRegistry:
    """The package's tools named by a pack; an unknown name raises KeyError."""
    return catalog().subset(names)


def default_registry() -> ToolRegistry:
    """The default pack's tools: knowledge_search, calculator, plot."""
    return registry_for(("knowledge_search", "calculator", "plot"))
