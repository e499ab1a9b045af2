"""The seam between the runtime and a model: one request type, one result type, one method.

The runtime builds a ``ModelRequest`` each step: chat messages, the JSON ``prefix`` it has already
written into the assistant turn (type, tool or evidence_ids; R-DEC-3), the JSON schema of the
single value the model must write next (``value_schema``) and the text that closes the object
(``suffix``). A backend returns what the model wrote after the prefix, with token usage.
Backends that support constrained decoding build a grammar from ``value_schema``.

Backends (one module each, heavy imports inside): ``backends/llama_cpp.py``,
``backends/transformers_backend.py``; ``backends/scripted.py`` is the test policy and is
never offered as a real run.

Exceptions::

    ModelUnavailable    operator fault: model dir/file, dependency, device/dtype, weights
                        -> the run ends failed/model_unavailable (message has no absolute paths)
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

FinishReason = Literal["stop", "length", "deadline", "cancelled"]


class ModelUnavailable(Exception):
    """The model cannot be used: missing files, dependency, device or dtype; message is public."""

    def __init__(self, message: str, code: str = "model_unavailable"):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class ModelRequest:
    messages: list[dict[str, str]]
    prefix: str
    value_schema: dict[str, Any] | None
    suffix: str
    max_new_tokens: int
    temperature: float = 0.0
    seed: int | None = None
    top_p: float = 0.8
    top_k: int = 20
    deadline: float | None = None  # time.monotonic() value; generation stops when reached
    cancel: threading.Event = field(default_factory=threading.Event)
    purpose: Literal["decision", "repair"] = "decision"

    def should_stop(self) -> FinishReason | None:
        if self.cancel.is_set():
            return "cancelled"
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "deadline"
        return None


@dataclass
class Generation:
    text: str  # what the model wrote after the prefix (never stored; only its SHA-256)
    input_tokens: int
    output_tokens: int
    latency_ms: float
    finish_reason: FinishReason = "stop"
    cached_tokens: int = 0  # prompt tokens reused from the KV cache (0 where unknown)
    prompt_eval_ms: float | None = None


@dataclass(frozen=True)
class ModelDescription:
    """Public description of a loaded model: no paths, only a hash of the path."""

    name: str
    backend: str
    path_hash: str
    device: str = "cpu"
    dtype: str = "auto"
    is_test_policy: bool = False
    details: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def public(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "backend": self.backend,
            "path_hash": self.path_hash,
            "device": self.device,
            "dtype": self.dtype,
            "is_test_policy": self.is_test_policy,
            **self.details,
        }


class Policy(Protocol):
    description: ModelDescription

    def generate(self, request: ModelRequest) -> Generation:
        """Continue the assistant turn after ``request.prefix``; honour deadline and cancel."""
        ...
