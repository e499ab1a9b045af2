"""Which model a request may name, how the runner loads it, and how it is shown.

The rules are ``model_choice``'s (shared with the terminal); this module turns a refusal into the
runner's HTTP error. A local model's path is checked before anything reads it; a served model's
origin and key are the operator's configuration, never the request's. The
model is loaded inside the job, on the worker (``policy_factory_for``), so the HTTP side never waits
on it; what leaves the runner names it by name and path hash, never by path (``public_model``).
"""

from __future__ import annotations

import os
from typing import Any

from agent.models import model_choice
from agent.runner.requests import ExplainRequest, InspectRequest, RunRequest
from agent.runner.job_store import PolicyFactory
from agent.models.model_policy import ModelUnavailable
from agent.contracts.trace import path_hash, redact
from agent.runner.routes.errors import ApiError

#: The model a scripted test policy is shown as, so such a run can never pass for a real one.
TEST_POLICY_NAME = "scripted-test-policy"


def policy_factory_for(access: Any = None) -> PolicyFactory:
    """Load (or reuse) the real model inside the run, so the HTTP side never waits on it. A served
    model may live on loopback or on an origin ``access`` (a ``ServedAccess``, built from the
    operator's configuration; default: loopback only, no keys) allows."""
    return lambda request: model_choice.policy_loader(request.model, access)


default_policy_factory = policy_factory_for()


def load_explainer(body: ExplainRequest) -> Any:
    """The local model an explain request names (``RunnerSettings.explain_policy_factory``'s default)."""
    try:
        from agent.models.backends import load_policy
    except ImportError as exc:
        raise ModelUnavailable(f"model backends cannot be imported ({type(exc).__name__})") from None
    spec = body.model
    return load_policy(spec.path, spec.device, spec.dtype, spec.backend)


def check_model_path(raw: str, *, must_exist: bool = True) -> None:
    """A local model path as ``model_choice.check_local_path`` judges it, refused as an HTTP error."""
    try:
        model_choice.check_local_path(raw, must_exist=must_exist)
    except model_choice.ModelRefused as exc:
        raise ApiError(exc.status, exc.code, exc.message, **exc.extra) from None


def check_request_model(body: RunRequest | InspectRequest, access: Any, *, must_exist: bool = True) -> None:
    """A request's model (a local path, or a served model's origin and key) as
    ``model_choice.check_request_model`` judges it, refused as an HTTP error."""
    try:
        model_choice.check_request_model(body.model, access, must_exist=must_exist)
    except model_choice.ModelRefused as exc:
        raise ApiError(exc.status, exc.code, exc.message, **exc.extra) from None


def public_model(request: RunRequest, test_policy: bool) -> dict[str, Any]:
    """The model as a job shows it: name, path hash, whether it is the test policy (and a served kind)."""
    if request.model.kind != "local":  # served: its name, host and a hash (never a key)
        from agent.models.backends.served import public_hash

        return {"name": redact(request.model.model)[:120], "path_hash": public_hash(request.model),
                "test_policy": test_policy, "kind": request.model.kind}
    if test_policy:
        return {"name": TEST_POLICY_NAME, "path_hash": path_hash(request.model_path), "test_policy": True}
    try:  # the same name and hash that model.load.completed will show (the resolved model file)
        from agent.models.backends import locate_model

        loc = locate_model(request.model_path)
        return {"name": loc.name[:120], "path_hash": loc.path_hash, "test_policy": False}
    except (ImportError, ModelUnavailable):
        name = redact(os.path.basename(request.model_path.rstrip("/\\")) or "model")
        return {"name": name[:120], "path_hash": path_hash(request.model_path), "test_policy": False}
