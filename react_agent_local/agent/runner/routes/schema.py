"""``GET /schema`` and ``POST /schema/validate``: the contracts the page builds its forms and its
Experiment 2 from, generated from the same classes the runtime uses (``agent/tools/schemas.py``, the tool
registry), and a dry run of a tool's argument validation (no tool runs)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from agent.contracts.budgets import RECOMMENDED_BUDGETS, Budgets, Sampling
from agent.task.packs import PackError, available_packs, load_pack
from agent.tools.schemas import decision_schema
from agent.tools import ArgumentError
from agent.contracts.trace import redact
from agent.runner.routes.context import Runner

router = APIRouter()


class ValidateArgumentsRequest(BaseModel):
    """Body of POST /schema/validate (Experiment 2): one tool name and its candidate arguments."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(min_length=1, max_length=64)
    arguments: dict[str, Any]


@router.get("/schema")
def schema(runner: Runner) -> JSONResponse:
    """Decision schema, tool argument schemas with timeouts, budget ranges, presets and packs."""
    return JSONResponse({
        # The same generator as the committed schemas/*.json (agent/tools/schemas.py).
        "decision": decision_schema(),
        "tools": runner.tools.describe(),
        # The page's budget form holds the limits and the sampling settings (RunRequest accepts
        # both inside "budgets"); "sampling" is the Sampling object on its own.
        "budgets": _budget_form_schema(),
        "sampling": Sampling.model_json_schema(),
        "recommended_budgets": {k: getattr(RECOMMENDED_BUDGETS, k) for k in (
            "max_steps", "max_tool_calls", "max_seconds", "max_input_tokens", "max_output_tokens")},
        "packs": pack_list(),
    })


@router.post("/schema/validate")
def validate_arguments(body: ValidateArgumentsRequest, runner: Runner) -> JSONResponse:
    """Validate candidate tool arguments exactly as the runtime would (no tool runs)."""
    registry = runner.tools
    if body.tool not in registry:
        return JSONResponse({"ok": False, "tool": body.tool, "error": {
            "code": "unknown_tool", "message": f"unknown tool; known: {', '.join(registry.tools)}"}})
    try:
        normalized = registry.validate(body.tool, body.arguments)
    except ArgumentError as exc:
        return JSONResponse({"ok": False, "tool": body.tool, "error": {
            "code": "invalid_arguments", "message": exc.message, "bad_fields": exc.bad_fields,
            "missing": exc.missing, "unexpected": exc.unexpected}})
    return JSONResponse({"ok": True, "tool": body.tool, "arguments": normalized.model_dump(mode="json")})


def pack_list() -> list[dict[str, Any]]:
    packs = []
    for name in available_packs():
        try:
            task = load_pack(name).task
        except PackError as exc:
            packs.append({"name": name, "ok": False, "error": redact(str(exc))})
            continue
        packs.append({"name": name, "ok": True, "task_id": task.id, "goal": task.goal,
                      "required_tools": list(task.required_tools), "tools": task.tool_names, "mode": task.mode})
    return packs


def _budget_form_schema() -> dict[str, Any]:
    schema = Budgets.model_json_schema()
    sampling = Sampling.model_json_schema()
    return {**schema, "properties": {**schema["properties"], **sampling["properties"]}}
