"""OpenTelemetry traces of runs, built from the trace events the runtime already emits.

Off by default. ``from_environment`` turns it on when the operator sets the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``): spans go to that OTLP
collector over HTTP/protobuf; or with the runner's ``--otel-file PATH``: one JSON span per line.
``OTEL_SDK_DISABLED=true`` turns both off. The opentelemetry packages are imported only then.

``RunSpans`` is a trace-event sink (the job store feeds it every event a running job records; a
direct ``run_agent(..., sink=RunSpans(...))`` works too) and turns one run into this tree::

    invoke_agent react-agent-local          one per run: status, stop_reason, usage totals
    ├── chat <model>                        one per model call (a repair call too)
    ├── execute_tool <tool>                 one per tool attempt (a retry is another span)
    └── ...

Attribute names follow the OpenTelemetry GenAI semantic conventions (status: development), as
listed by opentelemetry-semantic-conventions 0.66b2 (schema 1.44.0) in
``opentelemetry.semconv._incubating.attributes.gen_ai_attributes``, where they are marked as moved
to the semantic-conventions-genai repository. They are spelled here rather than imported from that
incubating module (tests compare the two). Our own facts use the ``react_agent.`` prefix.

Privacy: a span holds identifiers, numbers and booleans only, taken from an
allowlist of event fields: no model text, prompt, tool arguments or results, error messages or
paths. Every string attribute must look like an identifier (no ``/`` or ``\\``, at most 128
characters) or it is replaced by ``other``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any, Sequence

from agent import __version__

log = logging.getLogger(__name__)

AGENT_NAME = "react-agent-local"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
SEMCONV_VERSION = "opentelemetry-semantic-conventions 0.66b2 (GenAI conventions, development status)"

# GenAI semantic-convention attribute names and values.
OPERATION_NAME = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
AGENT_NAME_ATTR = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_TOP_P = "gen_ai.request.top_p"
REQUEST_TOP_K = "gen_ai.request.top_k"
REQUEST_SEED = "gen_ai.request.seed"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
ERROR_TYPE = "error.type"
OP_INVOKE_AGENT, OP_CHAT, OP_EXECUTE_TOOL = "invoke_agent", "chat", "execute_tool"

_IDENT = re.compile(r"[\w.:@+\- ]{1,128}")
_SAMPLING = {"temperature": REQUEST_TEMPERATURE, "top_p": REQUEST_TOP_P, "top_k": REQUEST_TOP_K,
             "seed": REQUEST_SEED}
#: Events that become span events on invoke_agent, with the fields (identifiers only) they keep.
_MARKS = {
    "model.load.failed": ("code",),
    "decision.invalid": ("code",),
    "decision.repaired": (),
    "tool.rejected": (),
    "final.validated": ("accepted",),
}


def ident(value: Any) -> str:
    """``value`` if it is a short identifier (no path separator), else ``other``."""
    text = str(value)
    return text if _IDENT.fullmatch(text) else "other"


def _number(value: Any) -> int | float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class RunSpans:
    """One run's spans, opened and closed as its trace events arrive (one writer thread).

    Model calls and tool attempts are sequential in a run, so at most one ``chat`` and one
    ``execute_tool`` span is open at a time; ``run.finished`` closes whatever is still open (a
    cancel in the middle of a tool) and then the ``invoke_agent`` span.
    """

    def __init__(self, tracer: Any, run_id: str | None = None, request: dict[str, Any] | None = None):
        self.tracer = tracer
        self.run_id = run_id
        self.pack = (request or {}).get("pack")
        self.agent: Any = None
        self.chat: Any = None
        self.tool: Any = None
        self.model: str | None = None
        self.provider: str | None = None
        self.sampling: dict[str, Any] = {}
        self.input_tokens = self.output_tokens = 0

    def __call__(self, event: dict[str, Any]) -> None:
        kind = str(event.get("type", ""))
        if self.agent is None and kind != "run.started":
            self._start_agent({})  # a run that failed before run.started still gets its span
        handler = getattr(self, "_on_" + kind.replace(".", "_"), None)
        if handler is not None:
            handler(event)
        elif kind in _MARKS or kind.startswith("guard."):
            keep = _MARKS.get(kind, ("code",))
            self.agent.add_event(kind, {k: self._value(event.get(k)) for k in keep if event.get(k) is not None})

    # -- the run ------------------------------------------------------------------------------

    def _on_run_started(self, event: dict[str, Any]) -> None:
        for source in (event.get("budgets"), event.get("sampling")):  # sampling moved out of budgets
            if isinstance(source, dict):
                for key, attr in _SAMPLING.items():
                    if _number(source.get(key)) is not None:
                        self.sampling[attr] = source[key]
        self._start_agent(event)

    def _start_agent(self, event: dict[str, Any]) -> None:
        from opentelemetry.trace import SpanKind

        attributes = {OPERATION_NAME: OP_INVOKE_AGENT, AGENT_NAME_ATTR: AGENT_NAME}
        if self.run_id:
            attributes[CONVERSATION_ID] = ident(self.run_id)
        if self.pack:
            attributes["react_agent.pack"] = ident(self.pack)
        if event.get("task_id"):
            attributes["react_agent.task.id"] = ident(event["task_id"])
        if event.get("mode"):
            attributes["react_agent.mode"] = ident(event["mode"])
        self.agent = self.tracer.start_span(f"{OP_INVOKE_AGENT} {AGENT_NAME}", kind=SpanKind.INTERNAL,
                                            attributes=attributes)

    def _on_model_load_completed(self, event: dict[str, Any]) -> None:
        model = event.get("model") if isinstance(event.get("model"), dict) else {}
        self._learn_model(model)
        if _number(event.get("load_ms")) is not None:
            self.agent.set_attribute("react_agent.model.load_ms", event["load_ms"])

    def _on_run_finished(self, event: dict[str, Any]) -> None:
        from opentelemetry.trace import Status, StatusCode

        status, stop_reason = ident(event.get("status")), ident(event.get("stop_reason"))
        for span in (self.chat, self.tool):  # interrupted (cancel, deadline, a broken tool runtime)
            if span is not None:
                span.set_attribute(ERROR_TYPE, stop_reason)
                span.set_status(Status(StatusCode.ERROR, "interrupted"))
                span.end()
        self.chat = self.tool = None
        self.agent.set_attributes({
            "react_agent.run.status": status, "react_agent.run.stop_reason": stop_reason,
            USAGE_INPUT_TOKENS: self.input_tokens, USAGE_OUTPUT_TOKENS: self.output_tokens,
        })
        if status == "failed":
            error = event.get("error") if isinstance(event.get("error"), dict) else {}
            self.agent.set_attribute(ERROR_TYPE, ident(error.get("code") or stop_reason))
            self.agent.set_status(Status(StatusCode.ERROR, stop_reason))
        self.agent.end()

    # -- model calls --------------------------------------------------------------------------

    def _learn_model(self, model: dict[str, Any]) -> None:
        if model.get("name"):
            self.model = ident(model["name"])
            self.agent.set_attribute(REQUEST_MODEL, self.model)
        if model.get("backend"):
            self.provider = ident(model["backend"])
            self.agent.set_attribute(PROVIDER_NAME, self.provider)

    def _on_model_started(self, event: dict[str, Any], purpose: str = "decision") -> None:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind

        attributes: dict[str, Any] = {OPERATION_NAME: OP_CHAT, **self.sampling, "react_agent.purpose": purpose,
                                      **self._position(event)}
        if self.provider:
            attributes[PROVIDER_NAME] = self.provider
        if self.model:
            attributes[REQUEST_MODEL] = self.model
        if _number(event.get("max_new_tokens")) is not None:
            attributes[REQUEST_MAX_TOKENS] = event["max_new_tokens"]
        if event.get("branch"):
            attributes["react_agent.branch"] = ident(event["branch"])
        # Local backends run in this process: INTERNAL, as the conventions allow for in-process models.
        self.chat = self.tracer.start_span(f"{OP_CHAT} {self.model or 'model'}", kind=SpanKind.INTERNAL,
                                           attributes=attributes, context=trace.set_span_in_context(self.agent))

    def _on_model_repair_started(self, event: dict[str, Any]) -> None:
        self._on_model_started(event, purpose="repair")

    def _on_model_completed(self, event: dict[str, Any]) -> None:
        model = event.get("model") if isinstance(event.get("model"), dict) else {}
        if self.chat is None:
            return
        if self.model is None:  # an already-loaded policy: no model.load events came before
            self._learn_model(model)
            if self.model:
                self.chat.update_name(f"{OP_CHAT} {self.model}")
                self.chat.set_attribute(REQUEST_MODEL, self.model)
            if self.provider:
                self.chat.set_attribute(PROVIDER_NAME, self.provider)
        usage = event.get("usage") if isinstance(event.get("usage"), dict) else {}
        input_tokens, output_tokens = _number(usage.get("input_tokens")) or 0, _number(usage.get("output_tokens")) or 0
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.chat.set_attributes({USAGE_INPUT_TOKENS: input_tokens, USAGE_OUTPUT_TOKENS: output_tokens})
        if model.get("name"):
            self.chat.set_attribute(RESPONSE_MODEL, ident(model["name"]))
        if event.get("finish_reason"):
            self.chat.set_attribute(RESPONSE_FINISH_REASONS, [ident(event["finish_reason"])])
        if _number(usage.get("cached_tokens")):
            self.chat.set_attribute("react_agent.usage.cached_tokens", usage["cached_tokens"])
        self.chat.end()
        self.chat = None

    _on_model_repair_completed = _on_model_completed

    def _on_model_failed(self, event: dict[str, Any]) -> None:
        self._fail(self.chat, event.get("code"))
        self.chat = None

    # -- tool attempts ------------------------------------------------------------------------

    def _on_tool_started(self, event: dict[str, Any]) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind

        tool = ident(event.get("tool"))
        position = self._position(event)
        call_id = f"call-{position.get('react_agent.step', 0)}-{position.get('react_agent.attempt', 0)}"
        self.tool = self.tracer.start_span(
            f"{OP_EXECUTE_TOOL} {tool}", kind=SpanKind.INTERNAL, context=trace.set_span_in_context(self.agent),
            attributes={OPERATION_NAME: OP_EXECUTE_TOOL, TOOL_NAME: tool, TOOL_TYPE: "function",
                        TOOL_CALL_ID: call_id, **position})

    def _on_tool_retry(self, event: dict[str, Any]) -> None:
        error = event.get("error") if isinstance(event.get("error"), dict) else {}
        self._fail(self.tool, error.get("code"), retried=True)
        self.tool = None

    def _on_tool_failed(self, event: dict[str, Any]) -> None:
        error = event.get("error") if isinstance(event.get("error"), dict) else {}
        self._fail(self.tool, error.get("code"))
        self.tool = None

    def _on_tool_observation(self, event: dict[str, Any]) -> None:
        if self.tool is None:  # the attempt already ended (tool.failed); the Observation follows it
            return
        obs = event.get("observation") if isinstance(event.get("observation"), dict) else {}
        if obs.get("id"):
            self.tool.set_attribute("react_agent.observation.id", ident(obs["id"]))
        self.tool.end()
        self.tool = None

    # -- helpers ------------------------------------------------------------------------------

    @staticmethod
    def _position(event: dict[str, Any]) -> dict[str, int]:
        return {f"react_agent.{k}": event[k] for k in ("step", "attempt") if _number(event.get(k)) is not None}

    @staticmethod
    def _value(value: Any) -> Any:
        return value if isinstance(value, (bool, int, float)) else ident(value)

    @staticmethod
    def _fail(span: Any, code: Any, retried: bool = False) -> None:
        from opentelemetry.trace import Status, StatusCode

        if span is None:
            return
        span.set_attribute(ERROR_TYPE, ident(code or "error"))
        if retried:
            span.set_attribute("react_agent.retried", True)
        span.set_status(Status(StatusCode.ERROR, ident(code or "error")))
        span.end()


class Telemetry:
    """A tracer provider of our own (the global one is left alone) and the per-run sinks it makes."""

    def __init__(self, exporters: Sequence[Any], *, batch: bool = True, description: str = ""):
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        attributes = {"service.version": __version__}
        if not os.environ.get("OTEL_SERVICE_NAME"):
            attributes["service.name"] = AGENT_NAME
        self.provider = TracerProvider(resource=Resource.create(attributes))
        for exporter in exporters:
            self.provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("agent.runner.telemetry", __version__, schema_url=SCHEMA_URL)
        self.description = description

    def observer(self, run_id: str, request: dict[str, Any]) -> RunSpans:
        """The job store's observer factory: one RunSpans per job that starts."""
        return RunSpans(self.tracer, run_id, request)

    def shutdown(self) -> None:
        self.provider.shutdown()  # flushes what the batch processor still holds


def _json_lines_exporter(path: Path) -> Any:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class JsonLinesSpanExporter(SpanExporter):
        """Appends each finished span as one JSON line (the SDK's own span JSON, compacted)."""

        def __init__(self) -> None:
            self._lock = threading.Lock()
            self._file = open(path, "a", encoding="utf-8")

        def export(self, spans: Sequence[Any]) -> Any:
            lines = "".join(json.dumps(json.loads(span.to_json(indent=None)), ensure_ascii=False) + "\n"
                            for span in spans)
            try:
                with self._lock:
                    self._file.write(lines)
                    self._file.flush()
            except (OSError, ValueError):
                return SpanExportResult.FAILURE
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            with self._lock:
                self._file.close()

    return JsonLinesSpanExporter()


def from_environment(otel_file: Path | None = None, environ: dict[str, str] | None = None) -> Telemetry | None:
    """The runner's telemetry, or None (the default) when neither an OTLP endpoint nor a file is set.

    Raises ImportError with an install hint when it is asked for and the packages are missing.
    """
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    otlp = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not otlp and otel_file is None:
        return None
    try:
        exporters, names = [], []
        if otlp:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())  # endpoint, headers, timeout: the standard OTEL_* settings
            names.append("OTLP/HTTP exporter (OTEL_EXPORTER_OTLP_*)")
        if otel_file is not None:
            exporters.append(_json_lines_exporter(Path(otel_file)))
            names.append("JSON lines file (--otel-file)")
        return Telemetry(exporters, description=" + ".join(names))
    except ImportError as exc:
        raise ImportError(f"OpenTelemetry export needs the runner extra ({exc.name} is missing): "
                          "pip install -r requirements.txt") from None
