"""OpenTelemetry spans of runs (R-OTEL), checked with the SDK's in-memory exporter: the span tree of
a scripted run, of a failed and of a cancelled run, the GenAI attributes, and what must never be in
a span (model text, prompts, arguments, messages, paths)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the runner extra installs opentelemetry-sdk")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

from agent.runner import telemetry  # noqa: E402
from agent.models.model_policy import ModelUnavailable  # noqa: E402
from agent.task.packs import load_pack  # noqa: E402
from agent.runner.telemetry import RunSpans, Telemetry  # noqa: E402
from server_support import GOOD_SCRIPT, make_client, slow_script, wait_for, wait_terminal  # noqa: E402

RUN = {"model_path": "scripted"}
SECRET_PATH = "/home/alice/Private Models/secret-model.gguf"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def run_with_spans(tmp_path: Path, exporter: InMemorySpanExporter, script: list[Any] | None = GOOD_SCRIPT,
                   cancel_after: str | None = None, **overrides: Any) -> tuple[dict[str, Any], list[Any]]:
    tel = Telemetry([exporter], batch=False)
    with make_client(tmp_path / "runs", script, telemetry=tel, **overrides) as client:
        run_id = client.post("/agent/runs", json=RUN).json()["id"]
        if cancel_after:
            wait_for(client, run_id, lambda v: any(e["type"] == cancel_after for e in v["events"]))
            client.post(f"/agent/runs/{run_id}/cancel", json={})
        view = wait_terminal(client, run_id)
    tel.shutdown()
    return view, list(exporter.get_finished_spans())


def tree(spans: list[Any]) -> list[str]:
    """The span names, indented under their parents, in start order."""
    children: dict[Any, list[Any]] = defaultdict(list)
    for span in sorted(spans, key=lambda s: s.start_time):
        children[span.parent.span_id if span.parent else None].append(span)
    lines: list[str] = []

    def walk(parent: Any, depth: int) -> None:
        for span in children[parent]:
            lines.append("  " * depth + span.name)
            walk(span.context.span_id, depth + 1)

    walk(None, 0)
    assert len(lines) == len(spans), "every span hangs off the run's span"
    return lines


def all_span_text(spans: list[Any]) -> str:
    return "\n".join(span.to_json(indent=None) for span in spans)


def assert_private(spans: list[Any], view: dict[str, Any], tmp_path: Path) -> None:
    text = all_span_text(spans)
    assert str(tmp_path) not in text and "/home/" not in text and "secret-model" not in text
    assert load_pack(None).task.goal[:40] not in text  # no prompt
    for output in GOOD_SCRIPT:  # no model text
        assert output[:30] not in text
    for event in view["events"]:
        for key in ("message", "arguments", "observation"):
            value = event.get(key)
            if isinstance(value, str) and len(value) > 12:
                assert value not in text
    for span in spans:  # attribute values are identifiers and numbers only
        for value in span.attributes.values():
            for item in value if isinstance(value, tuple) else (value,):
                assert not isinstance(item, str) or ("/" not in item and "\\" not in item and len(item) <= 128)


def test_span_tree_of_a_scripted_run(tmp_path, exporter):
    view, spans = run_with_spans(tmp_path, exporter)
    assert view["status"] == "completed"
    assert tree(spans) == [
        "invoke_agent react-agent-local",
        "  chat scripted-test-policy",
        "  execute_tool knowledge_search",
        "  chat scripted-test-policy",
        "  execute_tool calculator",
        "  chat scripted-test-policy",
        "  execute_tool plot",
        "  chat scripted-test-policy",
    ]
    root = next(s for s in spans if s.parent is None)
    assert root.attributes[telemetry.OPERATION_NAME] == "invoke_agent"
    assert root.attributes[telemetry.AGENT_NAME_ATTR] == "react-agent-local"
    assert root.attributes[telemetry.CONVERSATION_ID] == view["id"]
    assert root.attributes[telemetry.PROVIDER_NAME] == "scripted"
    assert root.attributes[telemetry.REQUEST_MODEL] == "scripted-test-policy"
    assert root.attributes["react_agent.run.status"] == "completed"
    assert root.attributes["react_agent.run.stop_reason"] == "completed"
    assert root.status.status_code == StatusCode.UNSET
    assert root.instrumentation_scope.schema_url == telemetry.SCHEMA_URL
    assert root.resource.attributes["service.name"] == "react-agent-local"

    chats = [s for s in spans if s.name.startswith("chat ")]
    usage = [e["usage"] for e in view["events"] if e["type"] == "model.completed"]
    assert [(c.attributes[telemetry.USAGE_INPUT_TOKENS], c.attributes[telemetry.USAGE_OUTPUT_TOKENS]) for c in chats] \
        == [(u["input_tokens"], u["output_tokens"]) for u in usage]
    assert root.attributes[telemetry.USAGE_INPUT_TOKENS] == sum(u["input_tokens"] for u in usage)
    assert root.attributes[telemetry.USAGE_OUTPUT_TOKENS] == sum(u["output_tokens"] for u in usage)
    for chat in chats:
        assert chat.attributes[telemetry.OPERATION_NAME] == "chat"
        assert chat.attributes[telemetry.PROVIDER_NAME] == "scripted"
        assert chat.attributes[telemetry.REQUEST_MODEL] == "scripted-test-policy"
        assert chat.attributes[telemetry.RESPONSE_FINISH_REASONS] == ("stop",)
        assert chat.attributes[telemetry.REQUEST_MAX_TOKENS] > 0
        assert chat.attributes[telemetry.REQUEST_TEMPERATURE] == 0.0
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    assert [t.attributes[telemetry.TOOL_NAME] for t in tools] == ["knowledge_search", "calculator", "plot"]
    assert len({t.attributes[telemetry.TOOL_CALL_ID] for t in tools}) == 3
    assert all(t.attributes[telemetry.OPERATION_NAME] == "execute_tool" and t.status.status_code == StatusCode.UNSET
               for t in tools)
    assert [t.attributes["react_agent.observation.id"] for t in tools] == \
        ["obs-knowledge_search-1", "obs-calculator-2", "obs-plot-3"]
    for child in chats + tools:  # children lie inside the run's span
        assert root.start_time <= child.start_time <= child.end_time <= root.end_time
    assert_private(spans, view, tmp_path)


def test_span_tree_of_a_failed_run(tmp_path, exporter):
    def unavailable(request):
        def load():
            raise ModelUnavailable(f"cannot open {SECRET_PATH}", code="model_not_found")
        return load

    view, spans = run_with_spans(tmp_path, exporter, script=None, policy_factory=unavailable, test_policy=True)
    assert (view["status"], view["stop_reason"]) == ("failed", "model_unavailable")
    assert tree(spans) == ["invoke_agent react-agent-local"]
    root = spans[0]
    assert root.status.status_code == StatusCode.ERROR
    assert root.attributes[telemetry.ERROR_TYPE] == "model_not_found"
    assert root.attributes["react_agent.run.status"] == "failed"
    assert root.attributes["react_agent.run.stop_reason"] == "model_unavailable"
    assert [e.name for e in root.events] == ["model.load.failed"]
    assert dict(root.events[0].attributes) == {"code": "model_not_found"}  # the code, never the message
    assert_private(spans, view, tmp_path)


def test_span_tree_of_a_cancelled_run(tmp_path, exporter):
    view, spans = run_with_spans(tmp_path, exporter, script=slow_script(30), cancel_after="model.started")
    assert (view["status"], view["stop_reason"]) == ("cancelled", "cancelled")
    assert tree(spans) == ["invoke_agent react-agent-local", "  chat scripted-test-policy"]
    root = next(s for s in spans if s.parent is None)
    chat = next(s for s in spans if s.parent is not None)
    assert root.attributes["react_agent.run.stop_reason"] == "cancelled"
    assert root.status.status_code == StatusCode.UNSET  # cancelled is not an error of the runner
    assert chat.attributes[telemetry.RESPONSE_FINISH_REASONS] == ("cancelled",)
    assert_private(spans, view, tmp_path)


def test_a_queued_run_that_is_cancelled_has_no_span(tmp_path, exporter):
    tel = Telemetry([exporter], batch=False)
    with make_client(tmp_path / "runs", slow_script(30), telemetry=tel) as client:
        running = client.post("/agent/runs", json=RUN).json()["id"]
        queued = client.post("/agent/runs", json=RUN).json()["id"]
        client.post(f"/agent/runs/{queued}/cancel", json={})
        client.post(f"/agent/runs/{running}/cancel", json={})
        wait_terminal(client, running)
    assert [s.attributes[telemetry.CONVERSATION_ID] for s in exporter.get_finished_spans() if s.parent is None] \
        == [running]


def event(seq: int, kind: str, step: int = 1, attempt: int = 0, **payload: Any) -> dict[str, Any]:
    return {"seq": seq, "type": kind, "step": step, "attempt": attempt, "phase": "x", "elapsed_ms": 0.0, **payload}


def test_retries_failures_repairs_and_guards_from_events(exporter):
    tel = Telemetry([exporter], batch=False)
    spans = RunSpans(tel.tracer, "run-0123456789ab", {"pack": "default"})
    model = {"name": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "backend": "llama_cpp", "path_hash": "abc"}
    for e in [
        event(1, "run.started", 0, task_id="t1", mode="free", sampling={"temperature": 0.7, "seed": 3}),
        event(2, "model.load.started", 0),
        event(3, "model.load.completed", 0, model=model, load_ms=12.5),
        event(4, "model.started", 1, 0, branch="free", max_new_tokens=64),
        event(5, "model.completed", 1, 0, model=model, finish_reason="stop",
              usage={"input_tokens": 10, "output_tokens": 5, "cached_tokens": 4}),
        event(6, "decision.invalid", 1, 0, code="invalid_json", message="Unexpected text: I think /etc/passwd"),
        event(7, "model.repair.started", 1, 1, branch="free", max_new_tokens=64),
        event(8, "model.repair.completed", 1, 1, model=model, finish_reason="length",
              usage={"input_tokens": 20, "output_tokens": 64}),
        event(9, "decision.repaired", 1, 1, decision={"kind": "action", "tool": "calculator"}),
        event(10, "tool.started", 1, 1, tool="calculator", arguments={"expression": "1+1"}),
        event(11, "tool.retry", 1, 1, tool="calculator", error={"code": "tool_timeout", "message": "slow"}),
        event(12, "tool.started", 1, 2, tool="calculator", arguments={"expression": "1+1"}),
        event(13, "tool.failed", 1, 2, tool="calculator", error={"code": "tool_timeout", "message": "slow"}),
        event(14, "tool.observation", 1, 0, observation={"id": "obs-calculator-1", "ok": False}),
        event(15, "model.started", 2, 0, branch="free", max_new_tokens=64),
        event(16, "model.failed", 2, 0, code="backend_crashed", message="segfault in /usr/lib/x.so"),
        event(17, "guard.no_progress", 2, code="repeated_result", tool="calculator"),
        event(18, "run.finished", 2, status="failed", stop_reason="model_unavailable",
              error={"code": "backend_crashed", "message": "segfault"}),
    ]:
        spans(e)
    finished = list(exporter.get_finished_spans())
    assert tree(finished) == [
        "invoke_agent react-agent-local",
        "  chat qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "  chat qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "  execute_tool calculator",
        "  execute_tool calculator",
        "  chat qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    ]
    root = next(s for s in finished if s.parent is None)
    first, repair, failed_chat = [s for s in finished if s.name.startswith("chat")]
    retried, failed_tool = [s for s in finished if s.name.startswith("execute_tool")]
    assert root.attributes[telemetry.PROVIDER_NAME] == "llama_cpp"
    assert root.attributes["react_agent.model.load_ms"] == 12.5
    assert (root.attributes[telemetry.USAGE_INPUT_TOKENS], root.attributes[telemetry.USAGE_OUTPUT_TOKENS]) == (30, 69)
    assert root.attributes[telemetry.ERROR_TYPE] == "backend_crashed" and root.status.status_code == StatusCode.ERROR
    assert [e.name for e in root.events] == ["decision.invalid", "decision.repaired", "guard.no_progress"]
    assert dict(root.events[0].attributes) == {"code": "invalid_json"}
    assert first.attributes[telemetry.REQUEST_TEMPERATURE] == 0.7 and first.attributes[telemetry.REQUEST_SEED] == 3
    assert first.attributes["react_agent.usage.cached_tokens"] == 4
    assert repair.attributes["react_agent.purpose"] == "repair"
    assert repair.attributes[telemetry.RESPONSE_FINISH_REASONS] == ("length",)
    assert failed_chat.status.status_code == StatusCode.ERROR
    assert failed_chat.attributes[telemetry.ERROR_TYPE] == "backend_crashed"
    assert retried.attributes["react_agent.retried"] is True and retried.attributes[telemetry.ERROR_TYPE] == "tool_timeout"
    assert failed_tool.status.status_code == StatusCode.ERROR and "react_agent.retried" not in failed_tool.attributes
    assert retried.attributes[telemetry.TOOL_CALL_ID] != failed_tool.attributes[telemetry.TOOL_CALL_ID]
    text = all_span_text(finished)
    for secret in ("/etc/passwd", "segfault", "1+1", "/usr/lib", "Unexpected text"):
        assert secret not in text


def test_identifiers_only():
    assert telemetry.ident("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf") == "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    for bad in ("/home/alice/m.gguf", "C:\\Users\\a\\m.gguf", "a" * 129, "", "x\ny", "<path>"):
        assert telemetry.ident(bad) == "other"


def test_attribute_names_match_the_semantic_conventions_package():
    gen_ai = pytest.importorskip("opentelemetry.semconv._incubating.attributes.gen_ai_attributes")
    error = pytest.importorskip("opentelemetry.semconv.attributes.error_attributes")
    pairs = {
        "OPERATION_NAME": "GEN_AI_OPERATION_NAME", "PROVIDER_NAME": "GEN_AI_PROVIDER_NAME",
        "AGENT_NAME_ATTR": "GEN_AI_AGENT_NAME", "CONVERSATION_ID": "GEN_AI_CONVERSATION_ID",
        "REQUEST_MODEL": "GEN_AI_REQUEST_MODEL", "REQUEST_MAX_TOKENS": "GEN_AI_REQUEST_MAX_TOKENS",
        "REQUEST_TEMPERATURE": "GEN_AI_REQUEST_TEMPERATURE", "REQUEST_TOP_P": "GEN_AI_REQUEST_TOP_P",
        "REQUEST_TOP_K": "GEN_AI_REQUEST_TOP_K", "REQUEST_SEED": "GEN_AI_REQUEST_SEED",
        "RESPONSE_MODEL": "GEN_AI_RESPONSE_MODEL", "RESPONSE_FINISH_REASONS": "GEN_AI_RESPONSE_FINISH_REASONS",
        "USAGE_INPUT_TOKENS": "GEN_AI_USAGE_INPUT_TOKENS", "USAGE_OUTPUT_TOKENS": "GEN_AI_USAGE_OUTPUT_TOKENS",
        "TOOL_NAME": "GEN_AI_TOOL_NAME", "TOOL_CALL_ID": "GEN_AI_TOOL_CALL_ID", "TOOL_TYPE": "GEN_AI_TOOL_TYPE",
    }
    for ours, theirs in pairs.items():
        assert getattr(telemetry, ours) == getattr(gen_ai, theirs)
    assert telemetry.ERROR_TYPE == error.ERROR_TYPE
    values = gen_ai.GenAiOperationNameValues
    assert (telemetry.OP_INVOKE_AGENT, telemetry.OP_CHAT, telemetry.OP_EXECUTE_TOOL) == \
        (values.INVOKE_AGENT.value, values.CHAT.value, values.EXECUTE_TOOL.value)


def test_off_by_default_and_on_by_the_standard_settings(tmp_path):
    assert telemetry.from_environment(None, {}) is None
    assert telemetry.from_environment(tmp_path / "x.jsonl", {"OTEL_SDK_DISABLED": "true"}) is None
    otlp = telemetry.from_environment(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert otlp is not None and "OTLP" in otlp.description
    otlp.shutdown()  # nothing was recorded, so nothing is sent


def test_json_lines_file(tmp_path):
    path = tmp_path / "spans.jsonl"
    tel = telemetry.from_environment(path, {})
    assert tel is not None and "JSON lines" in tel.description
    with make_client(tmp_path / "runs", GOOD_SCRIPT, telemetry=tel) as client:
        run_id = client.post("/agent/runs", json=RUN).json()["id"]
        wait_terminal(client, run_id)
    # the app's shutdown flushed the batch processor
    spans = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert sorted(s["name"] for s in spans) == sorted(
        ["invoke_agent react-agent-local"] + ["chat scripted-test-policy"] * 4
        + ["execute_tool knowledge_search", "execute_tool calculator", "execute_tool plot"])
    root = next(s for s in spans if s["parent_id"] is None)
    assert root["attributes"]["gen_ai.conversation.id"] == run_id
    assert all(s["context"]["trace_id"] == root["context"]["trace_id"] for s in spans)
    assert str(tmp_path) not in path.read_text(encoding="utf-8")


def test_the_runner_command_line_takes_otel_file(tmp_path):
    from agent.runner.server import _parse_args

    assert _parse_args(["--otel-file", str(tmp_path / "s.jsonl")]).otel_file == tmp_path / "s.jsonl"
    assert _parse_args([]).otel_file is None
