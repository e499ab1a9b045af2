"""Served models with native tool calling: what the OpenAI-compatible and Anthropic clients share
(one model client: retries, error buckets and cancel points over both protocols).

A served policy answers ``propose`` by one streamed chat call with *tools*: the run's registry
plus a ``final_answer`` tool (``answer``, ``evidence_ids``). A guided branch forces its tool (the
action's tool, or ``final_answer``) and gets one call; free mode lets the model choose (``auto``)
and, where a tool of the run is read-only, asks for parallel calls (``parallel_calls``). The
model's first tool call becomes the Candidate's structured ``decision``, which the runtime
validates like any other; the reply's other calls, each repaired the same way, its
``further_calls``, which the runtime runs with the first when all are read-only
(``agent/core/tool_batch.py``). The conversation is rebuilt from the runtime's state every step, from
the same ``Prompt`` an in-process model's continuation is (``rendering.render_conversation``): the
task, then each visible Observation as a tool call and its result paired by id (``tool_call_id`` /
``tool_use_id``; a failed Observation is an error result; the calls of one reply together, then
their results), then what this step asks for.

What a weak model sends instead of one clean call is repaired against the called tool's schema
in one place, ``call_repair.py`` (for every served provider): arguments wrapped in a call envelope,
encoded twice or slightly malformed, a call written in the text instead of a native one (a
Qwen-Coder habit on several servers), extra calls dropped where one was asked for. Each repair is counted
(``Candidate.protocol_repairs``) and described, without the text (``Candidate.call_repairs``, which
the runtime traces). What cannot be repaired (no tool call at all, arguments that are not JSON or
were cut inside a value) is a ``Candidate.fault``: an invalid Decision that the runtime repairs. A
reply cut at ``max_tokens`` is ``finish_reason="length"``, never a Decision.

Retries: setting up a call is retried up to ``CONNECT_RETRIES`` times with backoff
(Retry-After honoured); a stream that stalls (no byte for ``stall_seconds``) or drops is reopened up
to ``STREAM_RETRIES`` times, but only while no output has arrived -- after that a failure ends the
run. Cancel is checked before each call and at every chunk; each call runs in a worker thread, and
the run's thread leaves it (closing its stream) the moment the run is cancelled or its deadline
passes, even while it waits for headers or for a byte that does not come; the left call's sockets
are shut down, so its thread ends at once too.

Where a served model may live and which key it gets is the operator's configuration
(``served_access.py``): loopback, plus the origins the operator allows, each pinning scheme and
port; a key goes only to the provider and origin it is pinned to, over https (or to loopback). No
redirect is followed and no proxy variable is read. What a server sends back is scrubbed of the
operator's keys (``agent/util/secrets.py``) before the runtime, a tool or a message sees it.

Exceptions: ``ServedModelError`` (a ``ModelUnavailable``) with its bucket as ``code``; the buckets
and what is retried are in ``served_errors.py``.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from agent.contracts.decision import CallRepair
from agent.models.model_policy import Candidate, DecisionRequest, FurtherCall, ModelDescription, ModelUnavailable
from agent.models.providers import provider
from agent.util.secrets import scrub, scrub_value
from agent.contracts.trace import path_hash, redact_text
from agent.models.backends.call_repair import CallFault, Repairs, recover_call, repair_arguments, repair_final
from agent.models.backends.served_access import Endpoint, ServedAccess  # noqa: F401 -- part of this module's surface
from agent.models.backends.served_http import (  # noqa: F401 -- re-exported with the rest of this module's surface
    CONNECT_SECONDS, MAX_MODELS_BYTES, MODELS_SECONDS, STALL_SECONDS, Sockets, http_client, list_models
)
from agent.models.backends.served_errors import (  # noqa: F401 -- re-exported: the buckets are part of this module's surface
    BUCKETS, RETRYABLE, ErrorEvent, ServedModelError, StreamCut, classify, retry_after_seconds
)

# the protocol-neutral conversation (rendering.py lays it out); the names stay importable from here
from agent.prompts.rendering import (  # noqa: F401
    FINAL_TOOL, MAX_TOOL_DESCRIPTION, Conversation, ToolDef, Turn, call_id, final_tool
)

log = logging.getLogger(__name__)

CONNECT_RETRIES = 3
STREAM_RETRIES = 6
NO_KEY = "no-key"  # what the SDKs get when no key is sent (they refuse an empty one)


def base_url_of(spec: Any) -> str:
    """The served spec's base URL, or its provider's default (Anthropic's API)."""
    return (getattr(spec, "base_url", None) or provider(spec.kind).served.default_base_url).rstrip("/")


def public_hash(spec: Any) -> str:
    """The served model's public id (as ``path_hash`` is a local one's): base URL and model, hashed."""
    return path_hash(f"{base_url_of(spec)}#{spec.model}")


# --------------------------------------------------------------------------------------------
# The conversation rebuilt from the runtime's state (laid out by ``rendering.render_conversation``)
# --------------------------------------------------------------------------------------------


def wire_names(names: Iterable[str]) -> dict[str, str]:
    """Wire name -> tool name: both protocols allow [A-Za-z0-9_-]{1,64} (an MCP tool is ``server.tool``)."""
    out: dict[str, str] = {}
    for name in names:
        wire = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:60] or "tool"
        base, n = wire, 2
        while wire in out or wire == FINAL_TOOL:
            wire, n = f"{base[:56]}_{n}", n + 1
        out[wire] = name
    return out


# --------------------------------------------------------------------------------------------
# From a reply to a Decision candidate
# --------------------------------------------------------------------------------------------


@dataclass
class ToolCall:
    name: str
    arguments: Any  # a JSON string as streamed, or an object (Anthropic, recovered calls)
    id: str = ""


@dataclass
class Reply:
    """What one streamed response said, accumulated chunk by chunk."""

    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    finish: str | None = None  # stop | length | cancelled | deadline; None until the stream ends
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int = 0
    had_output: bool = False  # any text or tool-call byte arrived: no reconnect after that
    chars: int = 0  # characters of output so far (text and tool-call arguments), for progress
    on_progress: Callable[[str, int], None] | None = None


def scrubbed(reply: Reply) -> Reply:
    """The reply without the operator's keys: a server may echo the key it was sent into its text,
    a tool's name or arguments, and nothing downstream (the runtime, a tool, a chart's title, the
    answer, a message cut for display) may carry it."""
    reply.text = scrub(reply.text)
    for call in reply.calls:
        call.name = scrub(call.name)
        call.arguments = scrub(call.arguments) if isinstance(call.arguments, str) else scrub_value(call.arguments)
    return reply


Tidy = Callable[[dict[str, Any]], dict[str, Any]]


def parallel_calls(request: DecisionRequest, conversation: Conversation) -> bool:
    """Whether this call asks for several tool calls in one reply: only when the model chooses its
    tool (free mode, ``auto``) and a tool of the run is read-only, the only calls that run together
    (``agent/core/tool_batch.py``); a step that forces one function gets one call."""
    return conversation.forced is None and any(tool.read_only for tool in request.tools)


def interpret(reply: Reply, names: dict[str, str], tools: Iterable[ToolDef] = (), forced: str | None = None,
              tidy: Tidy | None = None, parallel: bool = False,
              ) -> tuple[dict[str, Any] | None, list[CallRepair], tuple[str, str] | None]:
    """(decision, the repairs it needed, fault) of a complete reply's first call; ``names`` maps wire
    names to tool names, ``tools`` are the ones the call went out with (their schemas judge a
    repair), and ``tidy`` is the provider's last word on the arguments (strict mode's nulls). The
    reply's other calls are dropped (a repair) unless ``parallel`` calls were asked for and the
    first is an action: then ``further_calls`` reads them."""
    repairs = Repairs()
    schemas = _schemas(names, tools)
    calls = reply.calls
    if not calls:
        recovered = recover_call(reply.text, [*schemas, *names, FINAL_TOOL], forced, schemas.get(forced or ""), repairs)
        if recovered is None:
            return None, [], ("no_tool_call", "the reply called no tool; call exactly one tool")
        calls = [ToolCall(recovered.name, recovered.arguments)]
    if len(calls) > 1 and not (parallel and calls[0].name != FINAL_TOOL):
        repairs.add("parallel_dropped", [{"name": c.name, "arguments": c.arguments} for c in calls[1:]], None, None)
    decision, fault = _read_call(calls[0], names, schemas, tidy, repairs)
    if fault is not None:
        return None, [], fault  # nothing repaired was used
    return decision, repairs.made, None


def further_calls(reply: Reply, names: dict[str, str], tools: Iterable[ToolDef] = (),
                  tidy: Tidy | None = None) -> tuple[tuple[FurtherCall, ...], list[CallRepair]]:
    """The reply's calls after its first, in order, each repaired as the first is (``interpret``),
    and the repairs they needed; a call that cannot be repaired keeps its fault (and no repairs)."""
    schemas = _schemas(names, tools)
    out: list[FurtherCall] = []
    made: list[CallRepair] = []
    for call in reply.calls[1:]:
        repairs = Repairs()
        decision, fault = _read_call(call, names, schemas, tidy, repairs)
        if decision is None:
            out.append(FurtherCall(names.get(call.name, call.name), {}, call.id, fault=fault[1]))
            continue
        made += repairs.made
        arguments = {k: v for k, v in decision.items() if k != "type"} if decision["type"] == "final" \
            else decision["arguments"]
        out.append(FurtherCall(decision.get("tool", FINAL_TOOL), scrub_value(arguments), call.id))
    return tuple(out), made


def _schemas(names: dict[str, str], tools: Iterable[ToolDef]) -> dict[str, dict[str, Any]]:
    """Each tool's schema by wire name and by tool name."""
    schemas = {t.name: t.schema for t in tools}
    schemas.update({names[w]: schema for w, schema in list(schemas.items()) if w in names})
    return schemas


def _read_call(call: ToolCall, names: dict[str, str], schemas: dict[str, dict[str, Any]], tidy: Tidy | None,
               repairs: Repairs) -> tuple[dict[str, Any] | None, tuple[str, str] | None]:
    """(decision, None) of one call, its arguments repaired into ``repairs``; (None, fault) when they
    cannot be."""
    name = names.get(call.name, call.name)
    try:
        arguments = repair_arguments(call.arguments, {call.name, name}, schemas.get(call.name), repairs)
    except CallFault as fault:
        what = ("are not valid JSON; write one JSON object" if fault.code == "invalid_json"
                else "must be a JSON object")
        return None, (fault.code, f"the arguments of {name[:64]} {what}")
    if tidy is not None:
        arguments = tidy(arguments)
    if call.name == FINAL_TOOL:
        return {**repair_final(arguments, repairs), "type": "final"}, None
    return {"type": "action", "tool": name, "arguments": arguments}, None


# --------------------------------------------------------------------------------------------
# The policy
# --------------------------------------------------------------------------------------------


def _stop_reason(request: DecisionRequest) -> str | None:
    if request.cancel.is_set():
        return "cancelled"
    if request.deadline is not None and time.monotonic() >= request.deadline:
        return "deadline"
    return None


class _Call:
    """One streamed call in a worker thread, so that the run's thread can leave it the moment the
    run is cancelled or its deadline passes. Closing a socket does not wake a read blocked on it in
    another thread, so a left call's sockets are shut down (``Sockets``): its thread sees the end
    of the stream and returns at once instead of at the server's next byte or the stall timeout."""

    def __init__(self, policy: "ServedPolicy", request: DecisionRequest, conversation: Conversation):
        self.policy, self.request, self.conversation = policy, request, conversation
        # Taken here, on the run's thread: a call left before its thread got going must not open its
        # connection on the fresh client that replaced this one.
        self.client, self.sockets = policy._client(), policy._sockets
        self.reply = Reply(on_progress=request.on_progress)
        self.stream: Any = None
        self.opened = False
        self.error: BaseException | None = None
        self.abandoned = False
        self.done = threading.Event()
        threading.Thread(target=self._run, name="served-call", daemon=True).start()

    def _stop(self) -> str | None:
        return "cancelled" if self.abandoned else _stop_reason(self.request)

    def _run(self) -> None:
        try:
            self.stream = self.policy._open(self.client, self.request, self.conversation,
                                            self.policy._timeout(self.request))
            self.opened = True
            self.policy._consume(self.stream, self.reply, self._stop)
            if self.reply.finish is None:
                raise StreamCut()
        except BaseException as exc:  # noqa: BLE001 -- handed to the run's thread
            self.error = exc
        finally:
            self.close()
            self.done.set()

    def close(self) -> None:
        try:
            if self.stream is not None:
                self.stream.close()
        except Exception:  # noqa: BLE001 -- closing a stream mid-read may raise anything
            pass

    def wait(self) -> str | None:
        """None when the call ended; else the stop reason that made the run's thread leave it."""
        while not self.done.wait(0.05):
            stop = _stop_reason(self.request)
            if stop:
                self.abandoned = True
                self.policy._abandon(self)
                self.close()
                return stop
        return None


def estimate_tokens(chars: int) -> int:
    """Where a server reports no usage: about four characters a token (Qwen's English average)."""
    return max(1, chars // 4)


class ServedPolicy:
    """Base of the served clients: the conversation, the retry loop and the Candidate.

    A subclass names its ``protocol`` and implements ``_client`` (its SDK's client over ``_http``),
    ``_open`` (start one streamed call on that client, raising
    the SDK's errors) and ``_consume`` (feed the stream's events into a ``Reply``, checking the
    stop callback at every chunk). ``on_delta(kind, text)`` (kind "text" or "arguments") sees each
    piece of output as it arrives, for a live view; nothing else keeps raw model text.
    """

    proposes_arguments = False  # a served model writes whole tool calls

    protocol = "served"

    def __init__(self, spec: Any, access: ServedAccess | None = None, *, transport: Any = None,
                 stall_seconds: float = STALL_SECONDS, backoff_seconds: float = 0.5,
                 wait: Callable[[float, threading.Event], bool] | None = None,
                 on_delta: Callable[[str, str], None] | None = None):
        self.spec = spec
        self.access = access or ServedAccess()
        self.endpoint = self.access.endpoint(self._base_url())
        self._secret = self.access.key_for(spec.kind, self.endpoint)
        self.stall_seconds = stall_seconds
        self.backoff_seconds = backoff_seconds
        self._wait = wait or (lambda seconds, cancel: cancel.wait(seconds))
        self.on_delta = on_delta
        self._transport = transport
        self._http, self._sockets = http_client(transport)
        self._sdk: Any = None
        self._closed = False
        # actions proposed (the number of their reply, tool, arguments), awaiting their Observations
        self._pending: list[tuple[int, str, dict[str, Any]]] = []
        self._arguments: dict[str, dict[str, Any]] = {}  # Observation id -> the arguments of its call
        self._replies: dict[str, int] = {}  # Observation id -> the number of the reply its call came in
        self._replies_seen = 0
        self.attempts = 0  # calls opened (tests and the bench read it)
        self.description = ModelDescription(
            name=redact_text(spec.model)[:120], backend=self.protocol, path_hash=public_hash(spec),
            device="served", dtype="n/a", details={"kind": spec.kind, "host": self.endpoint.netloc})

    # -- for subclasses ----------------------------------------------------------------------

    def _base_url(self) -> str:
        return base_url_of(self.spec)

    def _client(self) -> Any:
        raise NotImplementedError

    def _open(self, client: Any, request: DecisionRequest, conversation: Conversation, timeout: Any) -> Any:
        raise NotImplementedError

    def _consume(self, stream: Any, reply: Reply, stop: Callable[[], str | None]) -> None:
        raise NotImplementedError

    def _tidy(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The provider's last word on a call's arguments, once they are repaired (as they are here)."""
        return arguments

    # -- Policy ------------------------------------------------------------------------------

    def propose(self, request: DecisionRequest) -> Candidate:
        if self._closed:
            raise ModelUnavailable("the served model client was closed", code="model_unloaded")
        started = time.perf_counter()
        names = wire_names(request.tools.names)
        self._remember(request.state.observations)
        stop = _stop_reason(request)
        if stop:
            return Candidate(text="", input_tokens=0, output_tokens=0, latency_ms=0.0, finish_reason=stop)
        conversation = request.conversation(self._arguments, names, self._replies)
        reply = self._exchange(request, conversation)
        latency = (time.perf_counter() - started) * 1000
        prompt_chars = len(conversation.system) + sum(len(t.text) + len(json.dumps(t.arguments)) for t in conversation.turns)
        output_chars = len(reply.text) + sum(len(json.dumps(c.arguments)) for c in reply.calls)
        usage = dict(input_tokens=reply.input_tokens if reply.input_tokens is not None else estimate_tokens(
                         prompt_chars + len(json.dumps([t.schema for t in conversation.tools]))),
                     output_tokens=reply.output_tokens if reply.output_tokens is not None else (
                         estimate_tokens(output_chars) if output_chars else 0),
                     cached_tokens=reply.cached_tokens, latency_ms=latency)
        if reply.finish in ("cancelled", "deadline", "length"):
            return Candidate(text=reply.text, finish_reason=reply.finish, **usage)
        parallel = parallel_calls(request, conversation)
        decision, repairs, fault = interpret(scrubbed(reply), names, conversation.tools, conversation.forced,
                                             self._tidy, parallel)
        decision = scrub_value(decision)  # a key written with JSON escapes shows only once decoded
        further: tuple[FurtherCall, ...] = ()
        if decision is not None and decision["type"] == "action":
            if parallel:
                further, more = further_calls(reply, names, conversation.tools, self._tidy)
                repairs = [*repairs, *more]
            self._replies_seen += 1
            self._pending += [(self._replies_seen, decision["tool"], decision["arguments"]),
                              *((self._replies_seen, c.tool, c.arguments) for c in further if c.fault is None)]
        return Candidate(text=reply.text, decision=decision, call_id=reply.calls[0].id if reply.calls else "",
                         further_calls=further, protocol_repairs=len(repairs), call_repairs=tuple(repairs),
                         fault=fault, finish_reason="stop", **usage)

    def close(self) -> None:
        self._closed = True
        try:
            self._http.close()
        except Exception:  # noqa: BLE001
            pass

    # -- internals ---------------------------------------------------------------------------

    def _remember(self, observations: list[Any]) -> None:
        """Pair new Observations with the calls this policy proposed, in order (their arguments go
        back to the model with the call, the calls of one reply together); a run that starts over
        clears the memory."""
        if not observations:
            self._pending.clear()
            self._arguments.clear()
            self._replies.clear()
            return
        for obs in observations:
            if obs.id in self._arguments:
                continue
            # a rejected call's Observation holds its arguments: the call that had them (a reply's
            # calls that did not run leave no Observation to pair)
            match = next((i for i, (_, tool, arguments) in enumerate(self._pending) if tool == obs.tool
                          and (obs.attempted_arguments is None or obs.attempted_arguments == arguments)), None)
            if match is not None:
                self._replies[obs.id], _, self._arguments[obs.id] = self._pending.pop(match)
            elif obs.attempted_arguments is not None:
                self._arguments[obs.id] = obs.attempted_arguments
        self._pending.clear()

    def _public(self, error: ServedModelError) -> ServedModelError:
        """The error as it may leave the process: no key (nor a run of one), no path; cut after."""
        error.message = redact_text(error.message)[:400]
        error.args = (error.message,)
        return error

    def _timeout(self, request: DecisionRequest) -> Any:
        import httpx2

        left = None if request.deadline is None else max(0.1, request.deadline - time.monotonic())
        read = self.stall_seconds if left is None else min(self.stall_seconds, left + 1.0)
        return httpx2.Timeout(read, connect=min(CONNECT_SECONDS, left or CONNECT_SECONDS))

    def _backoff(self, error: ServedModelError, failures: int, request: DecisionRequest) -> None:
        delay = error.retry_after if error.retry_after is not None else self.backoff_seconds * 2 ** (failures - 1)
        if request.deadline is not None and time.monotonic() + delay >= request.deadline:
            raise self._public(ServedModelError(
                error.code, error.message + f" (no time left to retry after {delay:g} s)", status=error.status))
        log.info("served model %s: %s; retry %d in %.1f s", self.protocol, error.code, failures, delay)
        self._wait(delay, request.cancel)

    def _exchange(self, request: DecisionRequest, conversation: Conversation) -> Reply:
        connect_failures = stream_failures = 0
        while True:
            stop = _stop_reason(request)
            if stop:
                return Reply(finish=stop)
            self.attempts += 1
            call = _Call(self, request, conversation)
            stop = call.wait()
            if stop:
                return Reply(finish=stop)
            if call.error is None:
                return call.reply
            error = classify(call.error)  # a bug is raised again here
            if not call.opened:  # setting up the call failed: connect retries
                if not error.retryable or connect_failures >= CONNECT_RETRIES:
                    raise self._public(error) from None
                connect_failures += 1
            else:  # the stream broke: reopened only while nothing has arrived
                if call.reply.had_output or not error.retryable or stream_failures >= STREAM_RETRIES:
                    if call.reply.had_output:
                        error.message += (" (after output had arrived, so not retried; a server that cuts a running "
                                          "request when another arrives does this: let it queue requests)")
                    raise self._public(error) from None
                stream_failures += 1
            self._backoff(error, stream_failures if call.opened else connect_failures, request)

    def _abandon(self, call: _Call) -> None:
        """A left call's sockets are shut down (its thread returns now) and its client closed;
        later calls get a fresh one."""
        http = self._http
        (self._http, self._sockets), self._sdk = http_client(self._transport), None
        if call.sockets is not None:
            call.sockets.shutdown()
        try:
            http.close()
        except Exception:  # noqa: BLE001 -- the left thread may be using it
            pass

    def _delta(self, reply: Reply, kind: str, text: str) -> None:
        if not text:
            return
        reply.had_output = True
        reply.chars += len(text)
        if self.on_delta is not None:
            self.on_delta(kind, text)
        if reply.on_progress is not None:
            reply.on_progress(kind, reply.chars)


def sampling_options(request: DecisionRequest) -> dict[str, Any]:
    """Temperature/top_p/top_k/seed of this call; a repair is greedy (as in-process)."""
    sampling = request.sampling
    temperature = 0.0 if request.purpose == "repair" else sampling.temperature
    options: dict[str, Any] = {"temperature": temperature}
    if temperature > 0:
        options.update(top_p=sampling.top_p, top_k=sampling.top_k)
    if sampling.seed is not None:
        options["seed"] = sampling.seed
    return options
