"""The tool contract and the registry: the single source of every tool's name, schema and behaviour.

A ``Tool`` carries everything the rest of the package needs to know about one tool: its name and
description, its argument model (from which the JSON schema, the argument validation and the
decoding grammar are derived), its timeout, ``execute(ctx, args, cancel)``, how its result is shown
to the model (``render``), the stable digest of a result for the no-progress guard, its
hint and the runtime's Decision Summary when guided mode asks for it, and whether it is read-only
(``read_only``: calls of such tools in one served reply may run together). The parser, the prompts, the
grammar, ``/schema`` and ``schemas/tool_registry.json`` all read the registry of the run, so adding a
tool is one ``register`` call.

Exceptions::

    ToolError          a tool ran and failed: code, message, retryable  -> failed Observation
    ArgumentError      arguments broke the contract (before any tool ran) -> rejected Observation
    ToolTransportError the tool's runtime broke (server died/hung/bad protocol) -> run ends failed
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable

from pydantic import BaseModel, ConfigDict, ValidationError

from agent.coding.approvals import ApprovalRequest
from agent.coding.workspace import Workspace
from agent.sandbox import Sandbox
from agent.shell_risk import ApprovalPolicy


class StrictArgs(BaseModel):
    """Base of every argument model: unknown fields are rejected, never silently dropped."""

    model_config = ConfigDict(extra="forbid", strict=False)


class ToolError(Exception):
    """A tool attempt failed. ``retryable`` says whether replaying the same action may succeed."""

    def __init__(self, code: str, message: str, retryable: bool = False):
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


class ToolTransportError(Exception):
    """The tool's runtime itself broke (an MCP server died, hung or broke the protocol): not a result
    the model can recover from, so the run ends failed with a ``tool_runtime`` error."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class ArgumentError(Exception):
    """Arguments violate the tool's contract; carries public field names, never values."""

    def __init__(self, tool: str, message: str, bad_fields: list[str], missing: list[str], unexpected: list[str]):
        super().__init__(message)
        self.tool = tool
        self.message = message
        self.bad_fields = bad_fields
        self.missing = missing
        self.unexpected = unexpected


@dataclass
class ToolContext:
    """What a tool may touch: the pack's folder (knowledge, facts) and this run's artifact folder;
    for the workspace tools also the run's workspace, its sandbox and who approves a risky command
    (the coding strategy fills them, ``agent/coding/strategy.py``; a run without workspace tools
    leaves them None)."""

    knowledge_dir: Path
    artifact_dir: Path
    pack_dir: Path | None = None
    #: the one folder the workspace tools may touch
    workspace: Workspace | None = None
    #: the sandbox opened for the workspace; every command and file operation runs in it
    sandbox: Sandbox | None = None
    #: the run's approval policy for commands
    approval: ApprovalPolicy | None = None
    #: the operator's answer to an approval request; None: every ask is refused
    approver: Callable[[ApprovalRequest], bool] | None = None
    approval_seconds: float = 60.0
    #: the run's deadline (time.monotonic()): a command never outlives it
    deadline: float | None = None
    #: ``emit(type, **payload)`` adds an event to the run's trace (e.g. an approval decision)
    emit: Callable[..., None] | None = None


def _default_render(result: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in result.items() if k != "tool_latency_ms"}, ensure_ascii=False)


@dataclass
class Tool:
    """One tool, as every part of the runtime sees it."""

    name: str
    args_model: type[BaseModel]
    execute: Callable[[ToolContext, Any, threading.Event], dict[str, Any]]
    timeout_seconds: float
    description: str = ""
    digest: Callable[[dict[str, Any]], Any] = lambda result: result
    render: Callable[[dict[str, Any]], str] = _default_render
    hint: str = ""
    summary: str = ""
    #: What a successful result covers among a pack's declared subgoals for this tool (e.g. which
    #: fact a lookup found); None when the tool has no such notion.
    covers: Callable[[dict[str, Any]], str | None] | None = None
    #: ``module:attribute`` where this Tool object lives; set, an attempt runs in a worker process
    #: that a timeout or cancel kills (``isolation.py``), else in a thread.
    import_path: str | None = None
    #: The tool changes nothing -- no file, no state of the run or of a server -- and its result does
    #: not depend on another call of the same step: several calls of read-only tools in one served
    #: reply run at once (``agent/core/tool_batch.py``). Off unless a tool says so.
    read_only: bool = False
    #: The tool acts on a run's workspace and needs its sandbox (``agent/coding/``).
    workspace: bool = False
    #: The tool changes the workspace's files (a change a test run must follow).
    changes_files: bool = False

    def __post_init__(self) -> None:
        if not self.description:
            self.description = " ".join((self.args_model.__doc__ or self.name).split())
        if not self.summary:
            self.summary = f"Next required tool: {self.name}."

    def schema(self) -> dict[str, Any]:
        """The full JSON schema of the arguments (with titles and descriptions)."""
        return _schemas(self.args_model)[0]

    def compact_schema(self) -> dict[str, Any]:
        """The schema as the model and the grammar see it: no titles or descriptions."""
        return _schemas(self.args_model)[1]

    def validate(self, arguments: dict[str, Any]) -> BaseModel:
        """The arguments as this tool's typed model; ArgumentError names the bad, missing and unexpected
        fields. A tool whose JSON schema comes from elsewhere (an MCP server, ``mcp.McpTool``) overrides
        ``schema``, ``compact_schema`` and ``validate`` together."""
        try:
            return self.args_model.model_validate(arguments)
        except ValidationError as exc:
            raise argument_error(self.name, exc) from None


@lru_cache(maxsize=256)
def _schemas(model: type[BaseModel]) -> tuple[dict[str, Any], dict[str, Any]]:
    # Generating a JSON schema costs milliseconds and the prompt and grammar need it every step.
    full = model.model_json_schema()
    return full, compact_schema(full)


def compact_schema(schema: Any) -> Any:
    """Drop ``title``/``description`` annotations; property *names* (a field may be called title) stay."""
    if isinstance(schema, dict):
        return {
            k: ({name: compact_schema(sub) for name, sub in v.items()} if k == "properties" else compact_schema(v))
            for k, v in schema.items()
            if k not in ("title", "description")
        }
    if isinstance(schema, list):
        return [compact_schema(v) for v in schema]
    return schema


@dataclass
class ToolRegistry:
    """The tools of one run, in registration order."""

    tools: dict[str, Tool] = field(default_factory=dict)

    def register(self, tool: Tool) -> "ToolRegistry":
        if tool.name in self.tools:
            raise ValueError(f"tool '{tool.name}' is registered twice")
        self.tools[tool.name] = tool
        return self

    def __contains__(self, name: object) -> bool:
        return name in self.tools

    def __iter__(self):
        return iter(self.tools.values())

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.tools)

    def get(self, name: str) -> Tool:
        return self.tools[name]

    def subset(self, names: Iterable[str]) -> "ToolRegistry":
        """A registry with only these tools (in this registry's order); unknown names raise KeyError."""
        wanted = set(names)
        missing = wanted - set(self.tools)
        if missing:
            raise KeyError(", ".join(sorted(missing)))
        return ToolRegistry({n: t for n, t in self.tools.items() if n in wanted})

    def validate(self, name: str, arguments: dict[str, Any]) -> BaseModel:
        """Validate arguments; raise ArgumentError naming the bad, missing and unexpected fields."""
        return self.tools[name].validate(arguments)

    def describe(self) -> list[dict[str, Any]]:
        """Public description of every tool (``/schema``, ``schemas/tool_registry.json``, the page)."""
        return [{"name": t.name, "description": t.description, "timeout_seconds": t.timeout_seconds,
                 "arguments_schema": t.schema()} for t in self]


def argument_error(tool: str, exc: ValidationError) -> ArgumentError:
    missing, unexpected, bad = [], [], []
    parts = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = ".".join(str(p) for p in err["loc"]) or "arguments"
        if err["type"] == "missing":
            missing.append(loc)
            parts.append(f"missing required field '{loc}'")
        elif err["type"] == "extra_forbidden":
            unexpected.append(loc)
            parts.append(f"unexpected field '{loc}'")
        else:
            bad.append(loc)
            parts.append(f"'{loc}': {err['msg']}")
    message = f"invalid arguments for {tool}: " + "; ".join(parts)
    return ArgumentError(tool, message[:600], bad, missing, unexpected)
