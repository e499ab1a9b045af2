"""Fuzzing what a model can emit (issue 11): parse -> runtime -> trace -> HTTP view -> restart -> view.

Whatever the model writes -- arbitrary bytes, JSON with odd numbers and Unicode, deep nesting, huge
strings, paths in any script -- the run ends with exactly one ``run.finished``, every view answers
200 with strict JSON, ``events.jsonl`` re-reads as strict UTF-8 JSON, and no absolute path reaches an
event.

CI runs a bounded part (a few seconds). ``REACT_AGENT_FUZZ_EXAMPLES=N`` runs N examples per property
instead (e.g. ``REACT_AGENT_FUZZ_EXAMPLES=2000 pytest tests/test_fuzz.py``). With atheris installed,
``python tests/test_fuzz.py [libFuzzer options]`` fuzzes parse_decision and the redaction
coverage-guided.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for ``python tests/test_fuzz.py``
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.contracts.result import RunResult  # noqa: E402
from agent.models.decisions import DecisionError, parse_decision  # noqa: E402
from agent.runner.job_store import JobStore  # noqa: E402
from agent.contracts.trace import Trace, redact, redact_text  # noqa: E402
from server_support import GOOD_SCRIPT, PACKAGE_ROOT, make_client, wait_terminal  # noqa: E402

EXAMPLES = int(os.environ.get("REACT_AGENT_FUZZ_EXAMPLES", "0"))
SECRET = "zqsecret"  # planted in every generated path; it must never reach an event


def fuzz_settings(ci_examples: int) -> settings:
    return settings(max_examples=EXAMPLES or ci_examples, deadline=None, derandomize=not EXAMPLES,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


# ---------------------------------------------------------------- what a model may write

# Every code point, surrogates included: a backend decoding bytes with surrogateescape produces them.
ANY_CHAR = st.characters(codec=None, exclude_categories=())
ODD_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e999", "1e-999", "-0", "-0.0", "0.1e+308",
               "9" * 400, "-" + "9" * 5000, "1." + "0" * 3000, "12e", "01", "+1", ".5", "0x10", "1_000"]
SCRIPT_LETTERS = ["a", "Ä", "é", "用户", "模型", "папка", "données", "ß", "Ω", "ㄱ", "ا", "ह", "2024", "_x", "~x", "."]


@st.composite
def component(draw: Any) -> str:
    parts = draw(st.lists(st.sampled_from(SCRIPT_LETTERS), min_size=1, max_size=3))
    return "".join(parts)


@st.composite
def planted_path(draw: Any) -> str:
    """An absolute path in some script and style with ``SECRET`` in one of its components."""
    comps = draw(st.lists(component(), min_size=1, max_size=4))
    comps.insert(draw(st.integers(0, len(comps))), SECRET + draw(st.sampled_from(["", ".gguf", "-1", " dir"])))
    leaf = draw(st.sampled_from(["q.gguf", "model.safetensors", "x"]))
    style = draw(st.sampled_from(["posix", "spaces", "home", "tilde", "windows", "unc", "file", "quoted"]))
    if style == "windows":
        return "C:\\" + "\\".join(c.replace(" ", "_") for c in comps) + "\\" + leaf
    if style == "unc":
        return "\\\\server\\" + "\\".join(c.replace(" ", "_") for c in comps) + "\\" + leaf
    if style == "tilde":
        return "~/" + "/".join(c.replace(" ", "_") for c in comps) + "/" + leaf
    if style == "file":
        return "file:///" + "/".join(c.replace(" ", "_") for c in comps) + "/" + leaf
    if style == "home":
        return "/home/alice/My Models/" + "/".join(c.replace(" ", "_") for c in comps) + "/" + leaf
    path = "/" + "/".join(comps) + "/" + leaf
    if style == "quoted":
        return f"'{path}'"
    return path if style == "spaces" else path.replace(" ", "_")


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
        st.text(ANY_CHAR, max_size=40), planted_path(),
    )
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(ANY_CHAR, max_size=8) | planted_path(), inner,
                                                      max_size=4)), max_leaves=max_leaves)


def dumps_loosely(value: Any, ascii_only: bool) -> str:
    """json.dumps as a careless producer would: NaN/Infinity literals, surrogates escaped or raw."""
    return json.dumps(value, ensure_ascii=ascii_only, allow_nan=True)


@st.composite
def model_output(draw: Any) -> str:
    """One continuation of the runtime's JSON prefix, hostile in one of many ways."""
    kind = draw(st.sampled_from(["text", "bytes", "json", "arguments", "odd_number", "deep", "huge", "path",
                                 "decision", "mutated", "good"]))
    if kind == "text":
        return draw(st.text(ANY_CHAR, max_size=200))
    if kind == "bytes":
        raw = draw(st.binary(max_size=200))
        return raw.decode(draw(st.sampled_from(["utf-8", "latin-1"])), "surrogateescape")
    if kind == "json":
        return dumps_loosely(draw(json_values()), draw(st.booleans()))
    if kind == "arguments":
        args = draw(st.dictionaries(st.sampled_from(["query", "top_k", "expression", "labels", "values", "x"]),
                                    json_values(6), max_size=4))
        return dumps_loosely(args, draw(st.booleans()))
    if kind == "odd_number":
        number = draw(st.sampled_from(ODD_NUMBERS))
        return draw(st.sampled_from(['{"query": "batches", "top_k": %s}', '{"expression": %s}', "%s",
                                     '{"labels": ["a"], "values": [%s]}'])) % number
    if kind == "deep":
        opened = draw(st.integers(1, 6000))
        closed = draw(st.integers(0, opened))
        bracket = draw(st.sampled_from(["[", '{"a": ']))
        end = "]" if bracket == "[" else "}"
        return '{"query": ' + bracket * opened + "1" + end * closed + "}"
    if kind == "huge":
        size = draw(st.integers(1_000, 200_000))
        return '{"query": "' + draw(st.sampled_from(["a", "用", "\\ud800", "\\\"", " "])) * size + '"}'
    if kind == "path":
        path = draw(planted_path())
        return json.dumps({"query": path[:500]}, ensure_ascii=draw(st.booleans()))
    if kind == "decision":  # a whole Decision where a continuation was expected, or a Final
        value = {"type": draw(st.sampled_from(["action", "final", "thought"])),
                 "tool": draw(st.sampled_from(["knowledge_search", "calculator", "plot", "shell", "\ud800"])),
                 "arguments": draw(json_values(4)), "answer": draw(planted_path()),
                 "evidence_ids": draw(st.lists(st.text(ANY_CHAR, max_size=10), max_size=3))}
        return dumps_loosely(value, draw(st.booleans()))
    if kind == "mutated":
        good = draw(st.sampled_from(GOOD_SCRIPT))
        at = draw(st.integers(0, len(good)))
        return good[:at] + draw(st.text(ANY_CHAR, max_size=5)) + good[at + draw(st.integers(0, 3)):]
    return draw(st.sampled_from(GOOD_SCRIPT))


PREFIXES = [
    ("", ""),
    ('{"type": "action", "tool": "knowledge_search", "arguments": ', "}"),
    ('{"type": "final", "evidence_ids": ["obs-knowledge_search-1"], "answer": ', "}"),
]


# ---------------------------------------------------------------- oracles


def _no_constant(name: str) -> Any:
    raise AssertionError(f"{name} in stored or served JSON")


def strict_loads(data: bytes | str) -> Any:
    text = data.decode("utf-8") if isinstance(data, bytes) else data  # strict UTF-8
    return json.loads(text, parse_constant=_no_constant)


def assert_public(text: str, *private: str) -> None:
    assert SECRET not in text, text[:2000]
    for fragment in private:
        assert fragment not in text, fragment


def assert_one_finish(events: list[dict[str, Any]]) -> None:
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(events) + 1)), seqs
    assert [e["type"] for e in events].count("run.finished") == 1 and events[-1]["type"] == "run.finished"


def check_every_view(client: Any, run_id: str, *private: str) -> list[dict[str, Any]]:
    first = client.get(f"/agent/runs/{run_id}")
    assert first.status_code == 200, first.text
    view = strict_loads(first.content)
    seqs = [0] + [e["seq"] for e in view["events"]]
    for seq in seqs:  # every after_seq a poller can send
        r = client.get(f"/agent/runs/{run_id}", params={"after_seq": seq})
        assert r.status_code == 200, (seq, r.text)
        strict_loads(r.content)
    assert_public(first.content.decode("utf-8"), *private)
    return view["events"]


# ---------------------------------------------------------------- properties


@fuzz_settings(100)
@given(output=model_output(), where=st.sampled_from(PREFIXES))
def test_parse_decision_raises_only_decision_errors(output, where):
    prefix, suffix = where
    try:
        decision = parse_decision(prefix, output, suffix)
    except DecisionError as error:
        assert error.code and isinstance(error.public()["error"], str)
        json.dumps(error.public(), allow_nan=False).encode("utf-8")
        return
    # What parses is data every later stage can write: strict JSON, valid UTF-8.
    json.dumps(decision.model_dump(), allow_nan=False, ensure_ascii=False).encode("utf-8")


@fuzz_settings(100)
@given(path=planted_path(), before=st.text(ANY_CHAR, max_size=30), after=st.text(ANY_CHAR, max_size=30),
       glue=st.sampled_from([" ", "\n", " at ", ": ", "=", "(", '"', " '"]))
def test_redaction_removes_every_planted_path(path, before, after, glue):
    redacted = redact_text(before + glue + path + " " + after)
    assert SECRET not in redacted, (path, redacted)


@fuzz_settings(50)
@given(expression=st.from_regex(r"\A[0-9 +\-*/().]{1,80}\Z"))
def test_redaction_never_touches_arithmetic(expression):
    assert redact_text(expression) == expression


@fuzz_settings(10)
@given(payloads=st.lists(json_values(20), min_size=1, max_size=4))
def test_the_store_reads_back_whatever_events_carry(tmp_path_factory, payloads):
    """Events carrying anything (NaN, surrogates, huge ints, paths, odd keys) are stored strictly."""
    runs = tmp_path_factory.mktemp("runs")

    def run(pack, policy, budgets, *, sink, **kw):
        trace = Trace(sink)
        for payload in payloads:
            trace.emit("tool.observation", "observation", 1, observation=payload, extra=[payload, (payload,)])
        trace.emit("run.finished", "run", 1, status="completed", stop_reason="completed", final=None,
                   metrics=payloads[0] if isinstance(payloads[0], dict) else None, error=None)
        return SimpleNamespace(result=RunResult(status="completed", stop_reason="completed"), events=trace.events)

    with make_client(runs, GOOD_SCRIPT, run_fn=run) as c:
        run_id = c.post("/agent/runs", json={"model_path": "scripted"}).json()["id"]
        wait_terminal(c, run_id)
        events = check_every_view(c, run_id, str(runs))
    assert_one_finish(events)
    stored = [strict_loads(line) for line in (runs / run_id / "events.jsonl").read_bytes().splitlines()]
    assert stored == events
    store = JobStore(runs, run, lambda r: None)  # restart
    try:
        again = store.view(run_id)
        json.dumps(again, allow_nan=False, ensure_ascii=False).encode("utf-8")
        assert again["events"] == events
    finally:
        store.close()


@fuzz_settings(3)
@given(outputs=st.lists(model_output(), min_size=1, max_size=3))
def test_hostile_model_output_end_to_end(tmp_path_factory, outputs):
    """parse -> real runtime -> trace -> HTTP view -> restart -> view, for hostile outputs then good ones."""
    runs = tmp_path_factory.mktemp("runs")
    script = [*outputs, *GOOD_SCRIPT, *GOOD_SCRIPT]  # enough outputs whichever steps the hostile ones took
    private = (str(runs), str(PACKAGE_ROOT))
    with make_client(runs, script) as c:
        run_id = c.post("/agent/runs", json={"model_path": "scripted"}).json()["id"]
        view = wait_terminal(c, run_id, timeout=60)
        events = check_every_view(c, run_id, *private)
    assert_one_finish(events)
    if view["stop_reason"] == "runtime_error":  # only allowed when the scripted model ran out of outputs
        assert "ScriptExhausted" in json.dumps(view["error"]), view["error"]
    stored = [strict_loads(line) for line in (runs / run_id / "events.jsonl").read_bytes().splitlines()]
    assert stored == events
    with make_client(runs, GOOD_SCRIPT) as c:  # restart: a new runner over the same runs folder
        assert check_every_view(c, run_id, *private) == events


# ---------------------------------------------------------------- atheris (optional, coverage-guided)


def _atheris_one_input(data: bytes) -> None:
    import atheris

    fdp = atheris.FuzzedDataProvider(data)
    prefix, suffix = PREFIXES[fdp.ConsumeIntInRange(0, len(PREFIXES) - 1)]
    text = fdp.ConsumeUnicode(fdp.remaining_bytes())
    try:
        decision = parse_decision(prefix, text, suffix)
        json.dumps(redact(decision.model_dump()), allow_nan=False, ensure_ascii=False).encode("utf-8")
    except DecisionError:
        pass
    json.dumps(redact({"text": text}), allow_nan=False, ensure_ascii=False).encode("utf-8")


def main() -> None:  # pragma: no cover - run by hand
    import atheris

    atheris.instrument_all()  # coverage of the already imported agent modules guides the mutations
    atheris.Setup(sys.argv, _atheris_one_input)
    atheris.Fuzz()


if __name__ == "__main__":  # pragma: no cover
    main()
