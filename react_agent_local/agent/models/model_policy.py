"""The seam between the runtime and a model: one request type, one result type, one method.

Each step the runtime asks its policy to ``propose`` one Decision candidate for a
``DecisionRequest``: the branch (action for a named tool, final, or a free choice), the
model-visible state, the run's tool registry, the token limit, sampling, deadline and cancel. A
policy answers with a ``Candidate`` and its usage; the runtime parses and validates it, whatever
the model said. ``close()`` releases what the policy holds.

How a policy gets its candidate is its own business; what the model is asked is the request's one
``Prompt`` (``prompting.build_prompt``), rendered for it by ``rendering.py``. In-process models
(``ContinuationPolicy``) take it as chat messages (``messages()``), write the runtime's JSON prefix
into the assistant turn (type, tool or evidence_ids) and continue it under a grammar built from
the value schema -- a ``ModelRequest`` to their ``generate``. A served model with native tool
calling takes it as a conversation (``conversation()``) and returns the Decision as structured
data (``Candidate.decision``), and any other calls of the same reply as ``Candidate.further_calls``
(the runtime runs them with the first when all are read-only: ``tool_batch.py``).

Backends (one module each, heavy imports inside): ``backends/llama_cpp.py``,
``backends/transformers_backend.py``; ``backends/scripted.py`` is the test policy and is
never offered as a real run.

Exceptions::

    ModelUnavailable    operator fault: model dir/file, dependency, device/dtype, weights
                        -> the run ends failed/model_unavailable (message has no absolute paths)
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Literal, Protocol

from agent.contracts.budgets import Sampling
from agent.contracts.decision import CallRepair
from agent.prompts.prompting import Branch, Prompt, PromptState, build_prompt, code_messages
from agent.prompts.rendering import (
    Conversation, compact_turn, continuation_turn, render_continuation, render_conversation
)
from agent.tools import ToolRegistry

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
    #: the property of ``value_schema`` (an object) written as a fenced code block after the JSON of
    #: the others (``code_value`` reads the two back into one object); a backend without grammars
    #: ignores it (the runtime validates whatever it gets)
    code_field: str | None = None
    #: the whole reply is a code block's body (after a ``prefix`` that opens the block), held by
    #: ``value_schema`` (a string schema) and ended by ``CODE_FENCE_END``: a code turn
    code_only: bool = False
    #: a generation beside the run's own conversation (a code turn): a backend that keeps the
    #: conversation's evaluated prompt in a cache keeps it across this request
    aside: bool = False

    def should_stop(self) -> FinishReason | None:
        if self.cancel.is_set():
            return "cancelled"
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "deadline"
        return None


@dataclass
class DecisionRequest:
    """What the runtime asks a policy for: one Decision candidate for this branch."""

    branch: Branch
    state: PromptState
    tools: ToolRegistry
    max_new_tokens: int
    sampling: Sampling
    repair_error: str | None = None
    deadline: float | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    #: Called as output arrives with (kind, characters so far): kind "text" (a continuation, or a
    #: served model's text) or "arguments" (a served tool call's). Counts only: the raw text never
    #: leaves the policy, so a live view cannot leak it into a trace.
    on_progress: Callable[[str, int], None] | None = None
    #: only the arguments but the branch's code argument (a policy with ``proposes_arguments``): the
    #: runtime tries a diagnosis before any code is written (``agent/coding/fix_trials.py``)
    arguments_only: bool = False
    _prompt: Prompt | None = field(default=None, init=False, repr=False)

    @property
    def purpose(self) -> Literal["decision", "repair"]:
        return "decision" if self.repair_error is None else "repair"

    def prompt(self) -> Prompt:
        """What the model is asked this step, built once: the runtime keeps this call's turn in the
        conversation after the policy has sent it, so both must read the same state."""
        if self._prompt is None:
            self._prompt = build_prompt(self.state, self.branch, self.tools, self.repair_error)
        return self._prompt

    def messages(self) -> list[dict[str, str]]:
        """The prompt as an in-process model's chat messages (``rendering.render_continuation``)."""
        return render_continuation(self.prompt())

    def turn(self) -> str:
        """This call's own user turn: what ``messages()`` adds after the run's earlier turns (a
        compact prompt's one turn, which then stands for all of them: ``compacts``)."""
        prompt = self.prompt()
        return compact_turn(prompt) if prompt.compact else continuation_turn(prompt)

    def compacts(self) -> bool:
        """This call's prompt is one compact turn in place of the run's earlier turns."""
        return self.prompt().compact

    def conversation(self, arguments: dict[str, dict[str, Any]], names: dict[str, str],
                     replies: dict[str, int] | None = None) -> Conversation:
        """The prompt as a served model's conversation (``rendering.render_conversation``)."""
        return render_conversation(self.prompt(), arguments, names, replies)

    def code_turn_field(self, code_turns: bool) -> str | None:
        """The branch's code argument when a policy with ``code_turns`` asks for it in a turn of its own."""
        field = self.branch.code_field
        return field if code_turns and _has_property(self.prompt().value_schema, field) else None

    def continuation(self, code_blocks: bool = False, code_turns: bool = False) -> "ModelRequest":
        """The request as a prefix continuation: messages, the branch's prefix, its value schema.

        With ``code_blocks`` (a backend that can constrain a code block) a branch's code argument is
        asked for as a fenced block after the other arguments, and the turn says so. With
        ``code_turns`` it is left out of this request and asked for by ``code_turn``."""
        greedy = self.purpose == "repair"  # a repair should be the model's likeliest fix
        drawn = self.sampling.wider() if self.branch.explore and not greedy else self.sampling
        temperature, top_p, top_k = (0.0 if greedy else drawn.temperature), drawn.top_p, drawn.top_k
        schema = self.prompt().value_schema
        code = self.branch.code_field if code_blocks and _has_property(schema, self.branch.code_field) else None
        messages = self.messages()
        drafts = self.prompt().drafts
        if code is not None and code_turns:
            messages[-1] = {**messages[-1], "content": messages[-1]["content"] + "\n" + CODE_TURN_INSTRUCTION.format(
                field=code)}
            schema = _without_property(schema, code)
            code, drafts = None, ()
        elif code is not None:
            messages[-1] = {**messages[-1], "content": messages[-1]["content"] + "\n" + CODE_BLOCK_INSTRUCTION.format(
                field=code)}
            drafts = tuple(_unescaped(d) for d in drafts)  # the block holds the text itself, not its JSON
        return ModelRequest(
            messages=messages, prefix=self.branch.prefix, value_schema=schema,
            suffix=self.branch.suffix, max_new_tokens=self.max_new_tokens,
            temperature=temperature, seed=self.sampling.seed,
            top_p=top_p, top_k=top_k, deadline=self.deadline, cancel=self.cancel,
            purpose=self.purpose, drafts=drafts, code_field=code,
            on_text=(lambda text: self.on_progress("text", len(text))) if self.on_progress else None)


    def code_turn(self, arguments: "ModelRequest", arguments_text: str) -> "ModelRequest":
        """The branch's code argument asked for in a conversation of its own, after ``arguments`` (the
        request for the others) gave ``arguments_text``: the model as a programmer in its own chat
        format -- the task and what this step is for -- no tools, no JSON. The reply is the body of a ```python block the prefix opens, held by the argument's
        own schema (e.g. its def line and docstring)."""

        field = self.branch.code_field
        schema = (self.prompt().value_schema.get("properties") or {}).get(field) or {"type": "string"}
        return replace(arguments, messages=code_messages(self.state, self.branch, self.tools, arguments_text),
                       prefix=CODE_FENCE.lstrip("\n"), value_schema=schema, suffix="", code_field=field,
                       code_only=True, aside=True, drafts=tuple(_unescaped(d) for d in self.prompt().drafts),
                       purpose="decision")


CODE_BLOCK_INSTRUCTION = ("Write the other arguments as JSON, then `{field}` in full as a ```python code block "
                          "(plain code, no escaping).")
CODE_TURN_INSTRUCTION = "Write the other arguments as JSON: `{field}` is asked for next, on its own."
#: what separates the other arguments' JSON from the code block (``CODE_FENCE_END`` closes it)
CODE_FENCE = "\n```python\n"
CODE_FENCE_END = "```"


def _joined(gens: list[Generation], text: str) -> Candidate:
    """One Candidate of the generations one Decision took (its arguments, then its code)."""
    last = gens[-1]
    return Candidate(text=text, input_tokens=sum(g.input_tokens for g in gens),
                     output_tokens=sum(g.output_tokens for g in gens),
                     latency_ms=sum(g.latency_ms for g in gens), finish_reason=last.finish_reason,
                     cached_tokens=sum(g.cached_tokens for g in gens),
                     prompt_eval_ms=sum(g.prompt_eval_ms or 0.0 for g in gens) if gens[0].prompt_eval_ms is not None else None,
                     forced_tokens=sum(g.forced_tokens for g in gens),
                     drafted_tokens=sum(g.drafted_tokens for g in gens),
                     restored_tokens=sum(g.restored_tokens for g in gens),
                     grammar=_weakest(g.grammar for g in gens))


def _const(schema: dict[str, Any] | None, name: str | None) -> str | None:
    """The string ``name`` must be under an object ``schema`` (a ``const``), else None."""
    sub = (schema or {}).get("properties", {}).get(name) if isinstance(schema, dict) else None
    value = sub.get("const") if isinstance(sub, dict) else None
    return value if isinstance(value, str) else None


def _has_property(schema: dict[str, Any] | None, name: str | None) -> bool:
    return bool(name) and isinstance(schema, dict) and schema.get("type") == "object" \
        and name in (schema.get("properties") or {})


def _without_property(schema: dict[str, Any], name: str) -> dict[str, Any]:
    properties = {k: v for k, v in (schema.get("properties") or {}).items() if k != name}
    return {**schema, "properties": properties, "required": [k for k in schema.get("required", []) if k != name]}


def with_code(arguments_text: str, field: str, code: str) -> str | None:
    """The arguments' JSON text with ``field`` set to the code a code turn wrote (its text up to the
    closing fence); None when the arguments are not a JSON object without that field."""
    try:
        arguments = json.loads(arguments_text)
    except ValueError:
        return None
    if not isinstance(arguments, dict) or field in arguments:
        return None
    code = code.partition(CODE_FENCE_END)[0]
    lead = arguments_text[:len(arguments_text) - len(arguments_text.lstrip())]
    return lead + json.dumps({**arguments, field: code.rstrip() + "\n"}, ensure_ascii=False)


def _unescaped(draft: str) -> str:
    try:
        return json.loads(f'"{draft}"')
    except ValueError:
        return draft


def _weakest(levels: Any) -> str | None:
    """The weakest constraint of several generations (``Generation.grammar``)."""
    seen = [level for level in levels if level is not None]
    return next((level for level in ("none", "relaxed", "full") if level in seen), None)


def code_value(text: str, field: str) -> str | None:
    """The arguments' JSON text for a generation written as ``{...other arguments}`` + a code block
    (``CODE_FENCE`` ... ``CODE_FENCE_END``): the block's text becomes ``field``. None when the text
    is not of that shape (then it is parsed as it is, and refused or repaired like any other)."""
    head, fence, rest = text.partition(CODE_FENCE)
    if not fence or CODE_FENCE_END not in rest:
        return None
    return with_code(head, field, rest)


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
    #: how the value schema constrained the text: ``full``, ``relaxed`` (without its lengths or
    #: patterns, which did not compile), ``none`` (no grammar compiled); None without a schema or
    #: where the backend constrains nothing itself
    grammar: str | None = None


@dataclass(frozen=True)
class FurtherCall:
    """One more tool call of a served reply, after the one its Decision holds."""

    tool: str  # the tool's name in the run's registry (``final_answer`` for an answer)
    arguments: dict[str, Any]  # repaired like the first call's (``backends/call_repair.py``)
    call_id: str = ""  # the server's id of the call ("" where it gave none)
    #: why the call cannot run as it came (its arguments are not a JSON object, even repaired); None: it can
    fault: str | None = None


@dataclass
class Candidate(Generation):
    """A policy's answer: the continuation ``text`` after the branch's prefix, or a structured
    ``decision`` (native tool calling); plus usage. Neither is trusted: the runtime validates it."""

    decision: dict[str, Any] | None = None
    #: the server's id of the tool call in ``decision`` ("" where it gave none, or the call was in the text)
    call_id: str = ""
    #: the reply's other tool calls, in its order (a served model asked for parallel calls): the
    #: runtime runs them with the first only when every call is read-only (``tool_batch.py``)
    further_calls: tuple[FurtherCall, ...] = ()
    protocol_repairs: int = 0  # malformed-but-recoverable replies the policy fixed up (counted)
    #: what each of those fixes was (kind, SHA-256 of the text it started from, fields changed);
    #: the runtime traces them as ``model.call.repaired``
    call_repairs: tuple[CallRepair, ...] = ()
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
    #: the policy answers ``DecisionRequest.arguments_only`` (the arguments of a settled action, for
    #: a trial's probe); a policy that cannot leaves the runtime to skip those trials
    proposes_arguments: bool

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
    #: the backend constrains a code argument written as a fenced block (``ModelRequest.code_field``)
    code_blocks: bool = False
    #: a code argument is written in a code turn of its own (``DecisionRequest.code_turn``): the model
    #: writes code as it does for a person asking in chat, not inside the agent's protocol
    code_turns: bool = False
    #: answers ``DecisionRequest.arguments_only``
    proposes_arguments: bool = True

    def generate(self, request: ModelRequest) -> Generation:
        raise NotImplementedError

    def propose(self, request: DecisionRequest) -> Candidate:
        # the arguments alone (a fix trial's probe), or the code is settled already (a tried fix): the
        # other arguments are asked as a code turn's are, so the prompt is the same, and no code is sampled
        fixed = _const(request.prompt().value_schema, request.branch.code_field)
        if request.arguments_only or fixed is not None:
            gen = self.generate(request.continuation(code_blocks=True, code_turns=True))
            settled = fixed is not None and not request.arguments_only and gen.finish_reason == "stop"
            return _joined([gen], (with_code(gen.text, request.branch.code_field, fixed) if settled else None) or gen.text)
        field = request.code_turn_field(self.code_blocks and self.code_turns)
        continuation = request.continuation(code_blocks=self.code_blocks, code_turns=field is not None)
        gens = [self.generate(continuation)]
        text = gens[0].text
        if field is not None and gens[0].finish_reason == "stop":
            gens.append(self.generate(request.code_turn(continuation, text)))
            if gens[1].finish_reason == "stop":
                text = with_code(text, field, gens[1].text) or text
        elif continuation.code_field is not None and gens[0].finish_reason == "stop":
            text = code_value(text, continuation.code_field) or text
        return _joined(gens, text)

    def close(self) -> None:
        pass
