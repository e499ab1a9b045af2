"""The test policies: canned model outputs (``ScriptedPolicy``) or a function (``FunctionPolicy``)
drive the real runtime.

They exist for tests only. Their descriptions say ``is_test_policy: True`` and their names are
``scripted-test-policy`` and ``function-test-policy``, so a run they drive can never be presented
as a real model run. ``ScriptedPolicy`` is a ``ContinuationPolicy``: each canned output is the text
a model writes after the runtime's JSON prefix; an extra call beyond the script raises
``ScriptExhausted`` and ``assert_complete`` checks that every canned output was used.
``FunctionPolicy`` answers ``propose`` itself: its function sees the whole ``DecisionRequest`` (the
branch, the state, the tools) and returns a continuation text, or a Decision as a served model's
native tool call would (a dict, or an ``ActionDecision``/``FinalDecision``).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Union

from pydantic import BaseModel

from agent.models.model_policy import (
    Candidate, ContinuationPolicy, DecisionRequest, Generation, ModelDescription, ModelRequest
)

_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)


class ScriptExhausted(AssertionError):
    """The runtime asked the scripted policy for more outputs than the test scripted."""


@dataclass
class Slow:
    """A canned output that takes ``seconds`` (checking deadline and cancel like a real backend)."""

    text: str
    seconds: float


Step = Union[str, Slow, Callable[[ModelRequest], str]]


def count_tokens(text: str) -> int:
    """A stand-in tokenizer for tests (words and punctuation); real backends use the model's."""
    return len(_TOKEN.findall(text))


class ScriptedPolicy(ContinuationPolicy):
    def __init__(self, outputs: list[Step], *, proposes_arguments: bool = False):
        # off unless a test scripts the runtime's fix trials (their calls would take scripted outputs)
        self.proposes_arguments = proposes_arguments
        self.outputs = list(outputs)
        self.requests: list[ModelRequest] = []
        self.description = ModelDescription(
            name="scripted-test-policy", backend="scripted", path_hash="-", is_test_policy=True)

    def generate(self, request: ModelRequest) -> Generation:
        self.requests.append(request)
        if not self.outputs:
            raise ScriptExhausted(f"unexpected model call #{len(self.requests)}: the script is empty")
        step = self.outputs.pop(0)
        started = time.perf_counter()
        finish = "stop"
        if isinstance(step, Slow):
            text = step.text
            end = time.monotonic() + step.seconds
            begin = time.monotonic()
            while time.monotonic() < end:
                stop = request.should_stop()
                if stop:
                    finish, text = stop, ""
                    break
                if request.on_text is not None:  # the text "streams" over the step's seconds
                    request.on_text(text[: int(len(text) * (time.monotonic() - begin) / step.seconds)])
                time.sleep(0.005)
        elif callable(step):
            text = step(request)
        else:
            text = step
        if request.on_text is not None and text:
            request.on_text(text)
        prompt = "".join(m["content"] for m in request.messages) + request.prefix
        output_tokens = min(count_tokens(text), request.max_new_tokens)
        if count_tokens(text) > request.max_new_tokens:
            finish = "length"
        return Generation(text=text, input_tokens=count_tokens(prompt), output_tokens=output_tokens,
                          latency_ms=(time.perf_counter() - started) * 1000, finish_reason=finish)

    def assert_complete(self) -> None:
        assert not self.outputs, f"{len(self.outputs)} scripted output(s) were never requested"


Answer = Union[str, dict[str, Any], BaseModel]


class FunctionPolicy:
    """A ``Policy`` whose candidate is ``fn(request)``: a str is the continuation after the branch's
    prefix (as ``ScriptedPolicy``'s outputs), a dict or a Decision model the structured Decision."""

    proposes_arguments = False

    def __init__(self, fn: Callable[[DecisionRequest], Answer]):
        self.fn = fn
        self.requests: list[DecisionRequest] = []
        self.description = ModelDescription(
            name="function-test-policy", backend="function", path_hash="-", is_test_policy=True)

    def propose(self, request: DecisionRequest) -> Candidate:
        self.requests.append(request)
        started = time.perf_counter()
        answer = self.fn(request)
        if isinstance(answer, BaseModel):
            answer = answer.model_dump()
        text = answer if isinstance(answer, str) else ""
        decision = None if isinstance(answer, str) else answer
        input_tokens = count_tokens("".join(m["content"] for m in request.messages()))
        return Candidate(text=text, decision=decision, input_tokens=input_tokens,
                         output_tokens=count_tokens(text if decision is None else json.dumps(decision)),
                         latency_ms=(time.perf_counter() - started) * 1000)

    def close(self) -> None:
        pass
