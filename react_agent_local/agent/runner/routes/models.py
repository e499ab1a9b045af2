"""``POST /models/inspect`` and ``POST /models/unload``: whether a model can be used, before a run
asks for it, and freeing the models the runner holds."""

from __future__ import annotations

import logging

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from agent.runner.requests import InspectRequest
from agent.models.model_policy import ModelUnavailable
from agent.contracts.trace import redact
from agent.runner.routes.context import Runner
from agent.runner.routes.errors import ApiError

log = logging.getLogger(__name__)

router = APIRouter()


@router.post("/models/inspect")
def inspect_model(body: InspectRequest, runner: Runner) -> JSONResponse:
    """Check config, tokenizer, weights, dependencies, device and dtype.

    200 with the report when the model is usable; otherwise 400 ``model_unavailable`` whose
    error carries ``reason`` (the backend's code) and the same ``report``.
    """
    runner.check_model(body)
    try:
        from agent.models.backends import inspect_spec
    except ImportError as exc:
        raise ApiError(400, "model_unavailable", f"model backends cannot be imported ({type(exc).__name__})")
    try:
        # its provider's inspector: a local path's files, or a served model's host, SDK, key and
        # GET /models (5 s)
        report = inspect_spec(body.model, runner.access)
    except ModelUnavailable as exc:
        # One stable code for the page; the backend's finer reason (not_a_model, ...) rides along.
        raise ApiError(400, "model_unavailable", redact(exc.message), reason=exc.code) from None
    except Exception as exc:  # noqa: BLE001 -- a backend bug is still a refusal, never a 5xx
        log.exception("inspect_model failed")
        raise ApiError(400, "model_unavailable", f"the model cannot be inspected ({type(exc).__name__})",
                       reason="inspect_failed") from None
    report = redact(report)
    if not report.get("ok"):  # refused: 400 with the reasons, and the report for the page to show
        problems = [str(p) for p in report.get("problems") or []] or ["the model cannot be used"]
        raise ApiError(400, "model_unavailable", "; ".join(problems)[:1000],
                       reason=report.get("code") or "model_unavailable", report=report)
    return JSONResponse(report)


@router.post("/models/unload")
def unload_models(runner: Runner) -> JSONResponse:
    """Free every cached model; refused while a job is running (it is using the model)."""
    if runner.store.running_id is not None:
        raise ApiError(409, "runner_busy", "a job is running; cancel it or wait before unloading")
    try:
        from agent.models.backends import unload_all
    except ImportError:
        return JSONResponse({"unloaded": []})
    return JSONResponse(redact(unload_all()))
