"""The seam between the runtime and a model: one request type, one result type, one method.

Each step the runtime asks its policy to ``propose`` one Decision candidate for a
``DecisionRequest``: the branch (action for a named tool, final, or a free choice), the
model-visible state, the run's tool registry, the token limit, sampling, deadline and cancel. A
policy answers with a ``Candidate`` and its usage; the runtime parses and validates it, whatever
the model said. ``close()`` releases what the policy holds.

How a policy gets its candidate is its own business. In-process models (``ContinuationPolicy``)
render the state as chat messages, write the runtime's JSON prefix into the assistant turn
(type, tool or evidence_ids; R-DEC-3) and continue it under a grammar built from the value
schema -- a ``ModelRequest`` to their ``generate``. A served model with native tool calling may
instead return the Decision as structured data (``Candidate.decision``).

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
from typing import Any, Callable, Literal, Protocol

FinishReason = Literal["stop", "length", "deadline", "cancelled"]


class ModelUnavailable(Exception):
    """The model cannot be used: missing files, dependency, device or dtype; message is public.

    ``stop_reason`` is how the run ends (a served model's protocol error is a ``runtime_error``)."""

    def __init__(self, message: str, code: str = "model_unavailable", stop_reason: str = "model_unavailable"):
        super().__init__(message)
        self.code = code
        self.message = message
        self.stop_reason = stop_reason


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
    #: Called with the text so far as it grows (backends that decode token by token); for streaming.
    on_text: Callable[[str], None] | None = None
    #: Text the model will likely copy (e.g. the observed values a chart plots): a backend may propose
    #: it as a draft and verify it in one batch. It never changes what is sampled, only how fast.
    drafts: tuple[str, ...] = ()

    def should_stop(self) -> FinishReason | None:
        if self.cancel.is_set():
            return "cancelled"
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "deadline"
        return None


@dataclass
class DecisionRequest:
    """What the runtime asks a policy for: one Decision candidate for this branch."""

    branch: Any  # prompting.Branch
    state: Any  # prompting.PromptState
    tools: Any  # tools.ToolRegistry
    max_new_tokens: int
    sampling: Any  # contracts.Sampling
    repair_error: str | None = None
    deadline: float | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    #: Called as output arrives with (kind, characters so far): kind "text" (a continuation, or a
    #: served model's text) or "arguments" (a served tool call's). Counts only: the raw text never
    #: leaves the policy, so a live view cannot leak it into a trace.
    on_progress: Callable[[str, int], None] | None = None
    _turn: str | None = field(default=None, init=False, repr=False)

    @property
    def purpose(self) -> Literal["decision", "repair"]:
        return "decision" if self.repair_error is None else "repair"

    def messages(self) -> list[dict[str, str]]:
        from .prompting import build_messages

        return build_messages(self.state, self.branch, self.tools, self.repair_error, turn=self.turn())

    def turn(self) -> str:
        """This call's own user turn (what ``messages()`` adds after the run's earlier turns), built
        once: the runtime keeps it in the conversation after the policy has sent it."""
        if self._turn is None:
            from .prompting import turn_text

            self._turn = turn_text(self.state, self.branch, self.tools, self.repair_error)
        return self._turn

    def continuation(self) -> "ModelRequest":
        """The request as a prefix continuation: messages, the branch's prefix, its value schema."""
        greedy = self.purpose == "repair"  # a repair should be the model's likeliest fix
        return ModelRequest(
            messages=self.messages(), prefix=self.branch.prefix, value_schema=self.branch.value_schema(self.tools),
            suffix=self.branch.suffix, max_new_tokens=self.max_new_tokens,
            temperature=0.0 if greedy else self.sampling.temperature, seed=self.sampling.seed,
            top_p=self.sampling.top_p, top_k=self.sampling.top_k, deadline=self.deadline, cancel=self.cancel,
            purpose=self.purpose, drafts=self.branch.drafts,
            on_text=(lambda text: self.on_progress("text", len(text))) if self.on_progress else None)


@dataclass
class Generation:
    text: str  # what the model wrote after the prefix (never stored; only its SHA-256)
    input_tokens: int
    output_tokens: int
    latency_ms: float
    finish_reason: FinishReason = "stop"
    cached_tokens: int = 0  # prompt tokens reused from the KV cache (0 where unknown)
    prompt_eval_ms: float | None = None
    #: of ``output_tokens``, those the grammar forced (appended in a batch at prompt speed, not sampled)
    forced_tokens: int = 0
    #: of the sampled tokens, those a draft had proposed (verified in a batch, not decoded one by one)
    drafted_tokens: int = 0
    #: of ``cached_tokens``, those restored from a state saved by an earlier process (the prefix cache)
    restored_tokens: int = 0


@dataclass
class Candidate(Generation):
    """A policy's answer: the continuation ``text`` after the branch's prefix, or a structured
    ``decision`` (native tool calling); plus usage. Neither is trusted: the runtime validates it."""

    decision: dict[str, Any] | None = None
    protocol_repairs: int = 0  # malformed-but-recoverable replies the policy fixed up (counted)
    #: (code, message) of a protocol fault the policy saw and could not recover (no tool call,
    #: arguments that are not JSON): the runtime treats it as an invalid Decision and repairs.
    fault: tuple[str, str] | None = None


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

    def propose(self, request: DecisionRequest) -> Candidate:
        """One Decision candidate for the request's branch; honour its deadline and cancel."""
        ...

    def close(self) -> None:
        """Release the model (weights, connections); later calls fail with ModelUnavailable."""
        ...


class ContinuationPolicy:
    """Base of in-process models: a candidate is the continuation of the runtime's JSON prefix,
    constrained by the branch's value schema where the backend can (``generate``)."""

    description: ModelDescription

    def generate(self, request: ModelRequest) -> Generation:
        raise NotImplementedError

    def propose(self, request: DecisionRequest) -> Candidate:
        gen = self.generate(request.continuation())
        return Candidate(text=gen.text, input_tokens=gen.input_tokens, output_tokens=gen.output_tokens,
                         latency_ms=gen.latency_ms, finish_reason=gen.finish_reason, cached_tokens=gen.cached_tokens,
                         prompt_eval_ms=gen.prompt_eval_ms, forced_tokens=gen.forced_tokens,
                         drafted_tokens=gen.drafted_tokens, restored_tokens=gen.restored_tokens)

    def close(self) -> None:
        pass
