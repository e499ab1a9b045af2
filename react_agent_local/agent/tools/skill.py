"""load_skill: the skills of one run (``agent/task/skills.py``), disclosed when the model asks.

The tool is built for each run that has skills (``tools.with_skills``): its description is the
catalog -- every skill's name and description -- and its ``name`` argument an enum of those names,
so the prompt, the grammar and the schema (all read from the registry) offer exactly the skills that
exist. Asked for a name, it returns the skill's instructions and the paths of the files beside
them; asked again with ``file``, one of those files. Everything was read when the skills were found:
a request is a lookup among the listed paths and opens nothing.
"""

from __future__ import annotations

import threading
from typing import Annotated, Any, Literal, Optional, Sequence

from pydantic import Field, WithJsonSchema, create_model

from agent.tools.base import StrictArgs, Tool, ToolContext, ToolError

TOOL_NAME = "load_skill"


def _enum(values: Sequence[str]) -> Any:
    # Literal validates; the schema says enum even for one value (pydantic would write a const).
    return Annotated[Literal[tuple(values)], WithJsonSchema({"type": "string", "enum": list(values)})]


def catalog_text(skills: Sequence[Any]) -> str:
    """The tool's description: what it does, then every skill as ``name: description``, on one line."""
    entries = "; ".join(f"{s.name}: {s.description.rstrip('.')}" for s in skills)
    return ("Load a skill's instructions by name before the work it describes; call it again with file "
            f"to read one of the files its instructions list. Skills: {entries}.")


def _render(r: dict[str, Any]) -> str:
    if r.get("file"):
        return f"skill {r.get('skill')}, file {r.get('file')}:\n{r.get('text', '')}"
    files = r.get("files") or []
    more = f"\n(files of this skill, readable with file: {', '.join(files)})" if files else ""
    return f"skill {r.get('skill')} instructions:\n{r.get('text', '')}{more}"


def skill_tool(skills: Sequence[Any]) -> Tool:
    """The ``load_skill`` tool over these skills (``skills.Skill``; at least one)."""
    if not skills:
        raise ValueError("load_skill needs at least one skill")
    by_name = {s.name: s for s in skills}
    files = sorted({path for s in skills for path in s.file_names})
    fields: dict[str, Any] = {"name": (_enum(list(by_name)), Field(description="The skill, as the catalog names it."))}
    if files:
        fields["file"] = (Optional[_enum(files)], Field(
            default=None, description="One of the files its instructions list, relative to the skill's folder; "
                                      "leave it out for the instructions."))
    args_model = create_model("LoadSkillArgs", __base__=StrictArgs,
                              __doc__="Load a skill's instructions, or one file of the skill.", **fields)

    def execute(ctx: ToolContext, args: Any, cancel: threading.Event) -> dict[str, Any]:
        skill = by_name[args.name]
        path = getattr(args, "file", None)
        if path is None:
            return {"skill": skill.name, "text": skill.body, "files": list(skill.file_names)}
        text = skill.file(path)
        if text is None:
            listed = ", ".join(skill.file_names) or "none"
            raise ToolError("skill_file_not_found", f"skill '{skill.name}' has no file '{path[:200]}'; "
                                                    f"its files: {listed}", False)
        return {"skill": skill.name, "file": path, "text": text}

    return Tool(
        name=TOOL_NAME,
        args_model=args_model,
        execute=execute,
        timeout_seconds=5.0,
        description=catalog_text(skills),
        render=_render,
        hint="Name the skill the task needs; ask for one of its files only after its instructions list it.",
        summary="A skill the task needs is not loaded yet: load it.",
        # A pack may list skill names as load_skill's subgoals: guided mode then asks for each one.
        covers=lambda r: None if r.get("file") else r.get("skill"),
        read_only=True,  # a lookup among what was read when the skills were found
    )
