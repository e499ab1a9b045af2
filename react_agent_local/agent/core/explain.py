"""Explain a finished run: the model reads a bounded digest of the trace and says, in a few
sentences, why each action was chosen, how the run recovered and why it stopped (the lab page's
"ask the model" box).

The digest is built from the trace events only -- Decisions, Observations (ok or the error code),
guards, the evidence gate's verdicts, the stop_reason and the metrics -- never raw model text,
prompts or paths (the events are already redacted, and each line is bounded again here). What
comes back is the model's words, labelled as such, not facts: the trace is the record.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from agent.models.model_policy import ModelRequest
from agent.contracts.trace import redact_text

DIGEST_CHARS = 3500
LINE_CHARS = 240
EXPLAIN_TOKENS = 220
EXPLAIN_SECONDS = 90.0
LABEL = {"en": "The model's explanation of this run (its words, not facts; the trace is the record)",
         "zh": "模型对这次运行的解释（这是模型的话，不是事实；以 trace 为准）"}


_SENTENCE = r'(?:[^.!?。！？"\\\x00-\x1f]|[.][0-9]){1,240}[.!?。！？] ?'
EXPLANATION_SCHEMA = {"type": "string", "pattern": f"^(?:{_SENTENCE}){{1,6}}$"}


class ExplainRefused(Exception):
    """The run cannot be explained (still going, no events); ``code`` is stable."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = redact_text(" ".join(text.split()))
    return text if len(text) <= LINE_CHARS else text[: LINE_CHARS - 1] + "…"


def _event_line(e: dict[str, Any]) -> str | None:
    t, step = e.get("type"), e.get("step", 0)
    if t == "run.started":
        return f"run started: task {e.get('task_id')}, {e.get('mode')} mode, required tools {e.get('required_tools')}"
    if t in ("decision.valid", "decision.repaired"):
        d = e.get("decision") or {}
        what = (f"action {d.get('tool')} {_short(d.get('arguments'))}" if d.get("type") == "action"
                else f"final citing {d.get('evidence_ids')}")
        repaired = " (after a repair)" if t == "decision.repaired" else ""
        return f"step {step}: decision{repaired}: {what}; why the runtime asked for it: {_short(e.get('decision_summary', ''))}"
    if t == "decision.invalid":
        return f"step {step}: invalid model output ({e.get('code')}), the runtime asked again"
    if t == "tool.rejected":
        return f"step {step}: arguments rejected: {_short((e.get('observation') or {}).get('error', {}).get('message', ''))}"
    if t in ("tool.retry", "tool.failed"):
        return f"step {step}: {t} ({(e.get('error') or {}).get('code')})"
    if t == "tool.observation":
        o = e.get("observation") or {}
        if o.get("ok"):
            result = o.get("result") or {}
            body = result.get("summary") or {k: v for k, v in result.items() if k not in ("citations", "tool_latency_ms")}
            return f"step {step}: observation {o.get('id')} ok: {_short(body)}"
        return f"step {step}: observation {o.get('id')} FAILED: {(o.get('error') or {}).get('code')}"
    if t == "final.validated":
        verdict = "accepted" if e.get("accepted") else "refused"
        return f"step {step}: final {verdict}: {_short(e.get('message', ''))}"
    if t in ("guard.no_progress", "guard.loop_detected"):
        return f"step {step}: {t} ({e.get('code', 'repeated action')})"
    if t == "run.finished":
        m = e.get("metrics") or {}
        failed = [k for k, v in (m.get("checks") or {}).items() if v is False]
        return (f"run finished: {e.get('status')}/{e.get('stop_reason')}; task success {m.get('task_success')}; "
                f"steps {m.get('steps')}, tool calls {m.get('tool_calls')}"
                + (f"; failed checks {failed}" if failed else "")
                + (f"; error {(e.get('error') or {}).get('code')}" if e.get("error") else ""))
    return None


FAULT_EVENTS = ("decision.invalid", "decision.repaired", "tool.rejected", "tool.retry", "tool.failed",
                "guard.no_progress", "guard.loop_detected")


def _faults_line(events: list[dict[str, Any]]) -> str:
    """What went wrong during the run, counted by the runtime (so a model need not guess "none")."""
    counts: dict[str, int] = {}
    for e in events:
        t = e.get("type")
        if t in FAULT_EVENTS or (t == "final.validated" and not e.get("accepted")) or (
                t == "tool.observation" and not (e.get("observation") or {}).get("ok")):
            name = "refused final" if t == "final.validated" else "failed observation" if t == "tool.observation" else t
            counts[name] = counts.get(name, 0) + 1
    if not counts:
        return "faults: none (no invalid output, no rejected or failed tool call, no refused final, no guard)"
    return "faults: " + ", ".join(f"{n} x {name}" for name, n in counts.items())


def trace_digest(events: Iterable[dict[str, Any]], limit: int = DIGEST_CHARS) -> str:
    """A bounded, redacted account of the run, one line per meaningful event."""
    events = list(events)
    lines = [line for line in (_event_line(e) for e in events) if line]
    if not lines or not lines[-1].startswith("run finished"):
        raise ExplainRefused("run_not_finished", "the run has not finished yet; explain it when it has")
    lines.insert(len(lines) - 1, _faults_line(events))
    digest = "\n".join(lines)
    if len(digest) > limit:  # keep the start and the end: how it began and why it stopped
        head, tail = lines[:4], []
        budget = limit - sum(len(x) + 1 for x in head) - 40
        for line in reversed(lines[4:]):
            if budget - len(line) - 1 < 0:
                break
            tail.insert(0, line)
            budget -= len(line) + 1
        digest = "\n".join(head + [f"... ({len(lines) - len(head) - len(tail)} events left out) ..."] + tail)
    return digest


def explain_messages(digest: str, language: str) -> list[dict[str, str]]:
    """The record first, the question last (where a small model follows it best)."""
    if language == "zh":
        ask = ("请用中文、3 到 6 句话向学习者解释这次运行：每一步为什么选择这个动作（记录里写了运行时的理由），"
               "有没有出错、运行如何恢复（看 faults 一行），以及运行为什么停止。只根据记录，不要编造。")
    else:
        ask = ("Explain this run to a learner in 3 to 6 sentences: why each action was chosen (the record gives "
               "the runtime's reason for each step), whether anything went wrong and how the run recovered (see "
               "the faults line), and why it stopped. Use only the record; do not invent anything.")
    return [{"role": "system", "content": "You explain agent runs to a learner, briefly and only from the record."},
            {"role": "user", "content": f"RECORD of one agent run, written by the runtime:\n{digest}\n\n{ask}"}]


@dataclass
class Explanation:
    text: str
    label: str
    language: str
    input_tokens: int
    output_tokens: int
    latency_ms: float
    finish_reason: str

    def public(self) -> dict[str, Any]:
        return {"explanation": self.text, "label": self.label, "language": self.language,
                "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens},
                "latency_ms": round(self.latency_ms, 1), "finish_reason": self.finish_reason}


def explain(events: list[dict[str, Any]], policy: Any, *, language: str | None = None,
            on_text: Callable[[str], None] | None = None, max_tokens: int = EXPLAIN_TOKENS,
            seconds: float = EXPLAIN_SECONDS) -> Explanation:
    """Ask ``policy`` (a ContinuationPolicy) for the explanation; ``on_text`` gets the text so far."""
    digest = trace_digest(events)
    language = language if language in LABEL else "en"
    # The answer is one JSON string: a grammar-constrained backend holds it to at most six sentences
    # (a decimal point does not end one) and stops cleanly at its end.
    request = ModelRequest(messages=explain_messages(digest, language), prefix="",
                           value_schema=EXPLANATION_SCHEMA, suffix="",
                           max_new_tokens=max_tokens, temperature=0.0, deadline=time.monotonic() + seconds,
                           on_text=(lambda text: on_text(_partial_string(text))) if on_text else None)
    generation = policy.generate(request)
    return Explanation(text=redact_text(_partial_string(generation.text)), label=LABEL[language], language=language,
                       input_tokens=generation.input_tokens, output_tokens=generation.output_tokens,
                       latency_ms=generation.latency_ms, finish_reason=generation.finish_reason)


def _partial_string(text: str) -> str:
    """The content of the JSON string the model is writing (closed or not yet)."""
    text = text.lstrip()
    text = text[1:] if text.startswith('"') else text
    body = text[:-1] if text.endswith('"') and not text.endswith('\\"') else text
    try:
        return json.loads('"' + body + '"')
    except ValueError:
        return body.replace('\\"', '"').replace("\\n", "\n")
