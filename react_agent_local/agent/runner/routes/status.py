"""``GET /status``: what the lab page checks first -- the runner's version and capabilities, this
interpreter's dependency versions (read from package metadata, nothing imported), the models loaded,
the queue, served-model access, the workspace rules and the limits."""

from __future__ import annotations

import importlib.metadata
import logging
import platform
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from agent import __version__
from agent.models.providers import served_kinds
from agent.contracts.trace import redact
from agent.runner.routes.context import Runner

log = logging.getLogger(__name__)

DEPENDENCIES = {  # import name -> distribution name; read from metadata, never imported here
    "fastapi": "fastapi",
    "pydantic": "pydantic",
    "matplotlib": "matplotlib",
    "llama_cpp": "llama-cpp-python",
    "torch": "torch",
    "transformers": "transformers",
}

router = APIRouter()


@router.get("/status")
def status(runner: Runner) -> JSONResponse:
    """Runner version, capabilities, this interpreter's dependency versions, loaded models, queue."""
    settings, store = runner.settings, runner.store
    return JSONResponse({
        "runner": "react-agent-local",
        "version": __version__,
        "capabilities": ["agent"],
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation()},
        "dependencies": dependency_versions(),
        "models": _loaded_models(),
        "queue_length": store.queue_length,
        "running_job": store.running_id,
        "running_jobs": store.running_ids,
        "test_policy": settings.test_policy,
        "served_models": {"kinds": served_kinds(), **runner.access.public()},
        "workspace": runner.workspace.public(),
        "limits": {"max_body_bytes": settings.max_body_bytes, "max_queued": settings.max_queued,
                   "max_streams": settings.max_streams},
        "streams_open": runner.streams.open,
    })


def dependency_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name, dist in DEPENDENCIES.items():
        try:
            versions[name] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _loaded_models() -> list[dict[str, Any]]:
    try:
        from agent.models.backends import loaded_models
    except ImportError:
        return []
    try:
        return redact(loaded_models())
    except Exception:  # noqa: BLE001 -- a status page must not fail because a backend misbehaves
        log.exception("loaded_models failed")
        return []
