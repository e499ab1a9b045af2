"""The tool registry: argument validation, dispatch contracts and result digests.

The three tools live in their own modules (``knowledge.py``, ``calculator.py``, ``plotting.py``);
this module binds each to its argument model from ``contracts.py``, its timeout and its stable
result digest (for the no-progress guard, R-RT-6). Tests may build a registry with their own
(faulty, slow) tools to exercise retry and timeout paths through the real runtime.

Exceptions::

    ToolError          a tool ran and failed: code, message, retryable  -> failed Observation
    ArgumentError      arguments broke the contract (before any tool ran) -> rejected Observation
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from .contracts import TOOL_ARGUMENTS, TOOL_TIMEOUT_SECONDS, CalculatorArgs, KnowledgeSearchArgs, PlotArgs


class ToolError(Exception):
    """A tool attempt failed. ``retryable`` says whether replaying the same action may succeed."""

    def __init__(self, code: str, message: str, retryable: bool = False):
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


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
    """What a tool may touch: the pack's knowledge folder and this run's artifact folder."""

    knowledge_dir: Path
    artifact_dir: Path


@dataclass
class Tool:
    name: str
    args_model: type[BaseModel]
    run: Callable[[Any, ToolContext], dict[str, Any]]
    digest: Callable[[dict[str, Any]], Any]
    timeout_seconds: float


@dataclass
class ToolRegistry:
    tools: dict[str, Tool] = field(default_factory=dict)

    def register(self, tool: Tool) -> None:
        self.tools[tool.name] = tool

    def __contains__(self, name: str) -> bool:
        return name in self.tools

    def get(self, name: str) -> Tool:
        return self.tools[name]

    def validate(self, name: str, arguments: dict[str, Any]) -> BaseModel:
        """Validate arguments; raise ArgumentError naming the bad, missing and unexpected fields."""
        tool = self.tools[name]
        try:
            return tool.args_model.model_validate(arguments)
        except ValidationError as exc:
            raise argument_error(name, exc) from None


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


# --------------------------------------------------------------------------------------------
# The default three tools
# --------------------------------------------------------------------------------------------


def _run_knowledge(args: KnowledgeSearchArgs, ctx: ToolContext) -> dict[str, Any]:
    from .knowledge import search_knowledge

    return search_knowledge(ctx.knowledge_dir, args.query, args.top_k)


def _run_calculator(args: CalculatorArgs, ctx: ToolContext) -> dict[str, Any]:
    from .calculator import evaluate

    started = time.perf_counter()
    value = evaluate(args.expression)
    return {
        "expression": args.expression,
        "value": value,
        "tool_latency_ms": round((time.perf_counter() - started) * 1000, 3),
    }


def _run_plot(args: PlotArgs, ctx: ToolContext) -> dict[str, Any]:
    from .plotting import render_bar_chart

    return render_bar_chart(args, ctx.artifact_dir)


def default_registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(
        Tool("knowledge_search", KnowledgeSearchArgs, _run_knowledge,
             digest=lambda r: r.get("data"), timeout_seconds=TOOL_TIMEOUT_SECONDS["knowledge_search"])
    )
    registry.register(
        Tool("calculator", CalculatorArgs, _run_calculator,
             digest=lambda r: [r.get("expression"), r.get("value")], timeout_seconds=TOOL_TIMEOUT_SECONDS["calculator"])
    )
    registry.register(
        Tool("plot", PlotArgs, _run_plot,
             digest=lambda r: r.get("spec"), timeout_seconds=TOOL_TIMEOUT_SECONDS["plot"])
    )
    assert set(registry.tools) == set(TOOL_ARGUMENTS)
    return registry
