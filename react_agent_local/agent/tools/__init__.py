"""The package's tools and the registry of a run.

``base`` holds the contract (``Tool``, ``ToolRegistry``, the errors); each other module is one tool
and ends with its ``TOOL`` -- or, for the workspace tools, one concept with its ``TOOLS``: ``files``
(read_file, write_file, edit_file, replace_function, glob, grep) and ``shell`` (bash), which work in a run's workspace
and sandbox (``WORKSPACE_TOOLS``; see ``agent/coding/workspace.py``). ``catalog()`` is every local tool; a
run gets ``registry_for(names)``, the tools its pack uses. Adding a tool is one entry in ``_LOCAL_TOOLS``, or, for a tool that is not
part of the package, one ``register`` call on the registry passed to ``run_agent``. ``skill``
(load_skill) is no entry of the catalog: it is built for each run that has skills, over those skills
(``with_skills``, ``pack_registry``; see ``agent/task/skills.py``), and ``lookup_fact`` is bound to a pack's
fact names (``with_fact_names``). ``table_query`` (one read-only SQL SELECT over the pack's tables)
is in the catalog like any other tool: a pack offers it by naming it in ``required_tools``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Sequence

from agent.tools.base import (
    ArgumentError, StrictArgs, Tool, ToolContext, ToolError, ToolRegistry, ToolTransportError, compact_schema
)

if TYPE_CHECKING:
    from agent.contracts.task import TaskSpec

__all__ = ["ArgumentError", "StrictArgs", "Tool", "ToolContext", "ToolError", "ToolRegistry", "ToolTransportError",
           "WORKSPACE_TOOLS", "catalog", "compact_schema", "default_registry", "local_tool_names", "pack_registry",
           "registry_for", "with_fact_names", "with_skills"]

#: tools that need a run's workspace and sandbox (``workspace.bind``)
WORKSPACE_TOOLS = frozenset({"read_file", "write_file", "edit_file", "replace_function", "glob", "grep", "bash"})


def catalog() -> ToolRegistry:
    """Every tool of the package, in a fixed order."""
    from agent.tools import calculator, facts, knowledge, plotting, table_query
    from agent.coding.tools import files, shell

    registry = ToolRegistry()
    for module in (knowledge, calculator, plotting, facts, table_query):
        registry.register(module.TOOL)
    for tool in (*files.TOOLS, shell.BASH_TOOL):
        registry.register(tool)
    return registry


def registry_for(names: Iterable[str]) -> ToolRegistry:
    """The package's tools named by a pack; an unknown name raises KeyError."""
    return catalog().subset(names)


def local_tool_names(task: TaskSpec) -> list[str]:
    """The names ``task`` lists that are the package's to bind: all but ``SERVER.tool``
    of one of its MCP servers, which joins when the servers have started (``mcp_binding.bind_tools``)."""
    servers = {s.name for s in task.mcp_servers}
    return [n for n in task.tool_names if "." not in n or n.partition(".")[0] not in servers]


def default_registry() -> ToolRegistry:
    """The default pack's tools: knowledge_search, calculator, plot."""
    return registry_for(("knowledge_search", "calculator", "plot"))


def with_skills(registry: ToolRegistry, skills: Sequence[Any]) -> ToolRegistry:
    """``registry`` and, when there are skills, ``load_skill`` over them; the tools the skills name
    are not added (a skill is text, never a permission)."""
    if not skills:
        return registry
    from agent.tools.skill import skill_tool

    return ToolRegistry(dict(registry.tools)).register(skill_tool(skills))


def pack_registry(pack: Any) -> ToolRegistry | None:
    """The registry to pass to ``run_agent`` for a run of ``pack`` (``packs.TaskPack``): None when the
    pack has no skills and no fact base to bind, so the runtime builds the registry from the pack's
    names as always; else the package's tools the pack names, with ``load_skill`` over its skills and
    ``lookup_fact`` bound to the pack's fact names (``with_fact_names``). None, too, when the pack names a
    tool the package lacks: the runtime then fails the run as ``pack_invalid``, naming it."""
    if not pack.skills:
        return with_fact_names(None, pack)
    from agent.tools.skill import TOOL_NAME

    names = [n for n in local_tool_names(pack.task) if n != TOOL_NAME]
    try:
        return with_fact_names(with_skills(registry_for(names), pack.skills), pack)
    except KeyError:
        return None


def with_fact_names(registry: ToolRegistry | None, pack: Any) -> ToolRegistry | None:
    """The registry for a run of ``pack`` (``packs.TaskPack``) with ``lookup_fact`` bound to the
    pack's fact names (``facts.bound_tool``): ``registry`` as given (None: the package's tools the pack
    names) with that one tool replaced. ``registry`` unchanged where the pack has no local
    ``lookup_fact`` (or MCP servers, whose tools join later) or no readable fact base."""
    if "lookup_fact" not in pack.task.tool_names or pack.task.mcp_servers:
        return registry
    from agent.tools.facts import bound_tool

    try:
        bound = bound_tool(pack.knowledge_dir)
    except ToolError:
        return registry  # the run's lookups fail with the fact base's own error
    if registry is None:
        try:
            registry = registry_for(pack.task.tool_names)
        except KeyError:
            return None  # the runtime names the unknown tool
    if "lookup_fact" not in registry:
        return registry
    return ToolRegistry({name: bound if name == "lookup_fact" else tool for name, tool in registry.tools.items()})
