"""The runner's HTTP bodies: what ``POST /models/inspect``, ``/agent/runs`` and ``/agent/runs/{id}/explain``
accept, as typed data (the OpenAPI schema and the page's forms follow from them)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent.contracts.budgets import SAMPLING_FIELDS, Budgets, Sampling
from agent.models.providers import LocalModelSpec, ModelSpec

_PACK_NAME = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
_LEGACY_MODEL_FIELDS = {"model_path": "path", "backend": "backend", "device": "device", "dtype": "dtype"}


def _legacy_model(data: Any) -> Any:
    """The first round's flat fields (model_path, device, dtype, backend) become ``model``; a
    ``model`` object without ``kind`` is a local one."""
    if isinstance(data, dict) and "model" not in data and "model_path" in data:
        data = dict(data)
        data["model"] = {new: data.pop(old) for old, new in _LEGACY_MODEL_FIELDS.items() if old in data}
    if isinstance(data, dict) and isinstance(data.get("model"), dict) and "kind" not in data["model"]:
        data = {**data, "model": {"kind": "local", **data["model"]}}
    return data


class _ModelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: ModelSpec

    @property
    def model_path(self) -> str:
        """The local model's path ("" for a served model, which has none)."""
        return self.model.path if isinstance(self.model, LocalModelSpec) else ""


class InspectRequest(_ModelRequest):
    """``POST /models/inspect``: ``{"model": {...}}`` or the flat ``model_path``/``device``/``dtype``/``backend``."""

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        return _legacy_model(data)


class ExplainRequest(_ModelRequest):
    """``POST /agent/runs/{id}/explain``: which local model explains the run, in which language."""

    language: Literal["en", "zh"] = "zh"

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        return _legacy_model(data)


class RunRequest(_ModelRequest):
    """``POST /agent/runs``. Sampling settings are accepted inside ``budgets`` as before
    (``temperature``, ``top_p``, ``top_k``, ``seed``) and top-level ``temperature``; they land in ``sampling``."""

    pack: str | None = Field(default=None, description="Name of a task pack known to the runner.")
    budgets: Budgets = Field(default_factory=Budgets)
    sampling: Sampling = Field(default_factory=Sampling)
    tools: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        default=None, max_length=32,
        description="Narrow the pack's tools to these (never widen): others are unknown to the model.")
    approval: Literal["never_ask", "ask_on_risk", "always_ask"] | None = Field(
        default=None,
        description="A stricter approval policy for this run's bash commands than the runner's (never a looser "
                    "one); default: the runner operator's.")
    goal: str | None = Field(
        default=None, min_length=1, max_length=1500,
        description="A goal in words on the runner operator's --workspace folder (instead of a pack): the runtime "
                    "finds the test command, the failing tests and the code they point at (agent/coding/).")

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        data = _legacy_model(data)
        if not isinstance(data, dict):
            return data
        data = dict(data)
        sampling = dict(data.get("sampling") or {}) if isinstance(data.get("sampling") or {}, dict) else data["sampling"]
        budgets = data.get("budgets")
        if isinstance(budgets, dict) and isinstance(sampling, dict):
            budgets = dict(budgets)
            for key in SAMPLING_FIELDS:
                if key in budgets:
                    sampling.setdefault(key, budgets.pop(key))
            data["budgets"] = budgets
        if "temperature" in data and isinstance(sampling, dict):
            value = data.pop("temperature")
            if value is not None:
                sampling["temperature"] = value
        if sampling:
            data["sampling"] = sampling
        return data

    @field_validator("pack")
    @classmethod
    def _pack_name(cls, value: str | None) -> str | None:
        if value is not None and not _PACK_NAME.match(value):
            raise ValueError("pack must be a pack name (letters, digits, _ and -)")
        return value
