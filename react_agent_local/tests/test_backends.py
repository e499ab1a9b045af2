"""Model location safety (SECURITY 9-10), header checks, grammar schemas, and the llama.cpp backend.

Fast tests use synthetic GGUF files and hostile paths. Tests marked ``slow`` load the real
Qwen2.5-Coder-0.5B GGUF from the default download location and fail when it is not there
(``scripts/setup.sh --model qwen2.5-coder-0.5b-gguf``; deselect them with ``-m "not slow"``).
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import llama_cpp
import pytest

from agent.models.backends import (
    ContextOverflow, check_weights, complete_json_end, inspect_model, load_policy, locate_model, unload_all
)
from agent.models.model_policy import ModelRequest, ModelUnavailable
from agent.task.packs import load_pack
from agent.tools import catalog
from agent.tools.calculator import CALCULATOR_PATTERN
from runtime_helpers import chain_outputs, run_scripted

import download_model  # noqa: E402

TOOL_ARGUMENTS = {tool.name: tool.args_model for tool in catalog()}
REAL_05B = download_model.default_dest("qwen2.5-coder-0.5b-gguf") / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def real_05b() -> Path:
    """The real 0.5B GGUF, or a failure that says how to get it (never a skip)."""
    if not REAL_05B.is_file():
        raise AssertionError(f"{REAL_05B.name} is not at {REAL_05B.parent}: run scripts/setup.sh --model "
                             "qwen2.5-coder-0.5b-gguf, or deselect the real-model tests with -m 'not slow'")
    return REAL_05B


def _gguf_string(s: str) -> bytes:
    data = s.encode()
    return struct.pack("<Q", len(data)) + data


def synthetic_gguf(path: Path, truncate_data: bool = False, chat_template: bool = True) -> Path:
    """A minimal valid GGUF v3: three key/values, one F32 tensor of 8 elements."""
    kvs = [("general.architecture", "qwen2"), ("general.name", "tiny")]
    if chat_template:
        kvs.append(("tokenizer.chat_template", "{{ messages }}"))
    out = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kvs) + 1)
    for key, value in kvs:
        out += _gguf_string(key) + struct.pack("<I", 8) + _gguf_string(value)
    out += _gguf_string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + _gguf_string("a") + _gguf_string("b")
    out += _gguf_string("w") + struct.pack("<I", 1) + struct.pack("<Q", 8) + struct.pack("<IQ", 0, 0)
    out += b"\0" * (-len(out) % 32)
    out += b"\0" * (16 if truncate_data else 32)
    path.write_bytes(out)
    return path


def _assert_no_paths(obj, *paths: Path | str):
    text = json.dumps(obj, default=str)
    for p in paths:
        assert str(p) not in text
    assert not re.search(r"(?<![\w.])/(?:[^\s/'\"]+/)+", text), text


# --------------------------------------------------------------------------------------------
# Hostile and broken paths
# --------------------------------------------------------------------------------------------


def _refusal(path: str) -> tuple[dict, ModelUnavailable]:
    report = inspect_model(path)
    assert report["ok"] is False and report["problems"]
    with pytest.raises(ModelUnavailable) as err:
        load_policy(path)
    return report, err.value


def test_etc_passwd_is_not_a_model():
    report, err = _refusal("/etc/passwd")
    assert "not a model" in err.message and err.code == "not_a_model"
    text = json.dumps(report) + err.message
    assert "root:" not in text and "/etc" not in text
    _assert_no_paths(report)


def test_private_key_content_never_echoed(tmp_path):
    key = tmp_path / ".ssh" / "id_rsa"
    key.parent.mkdir()
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecretsecret\n")
    report, err = _refusal(str(key))
    assert "secretsecret" not in json.dumps(report) + err.message and "BEGIN" not in err.message
    _assert_no_paths(report, tmp_path)
    missing, err = _refusal("~/.ssh/definitely-not-here")
    assert "not found" in err.message and "~" not in err.message


def test_dev_zero_is_refused_without_reading():
    report, err = _refusal("/dev/zero")
    assert "not a regular file" in err.message
    _assert_no_paths(report, "/dev/zero")


@pytest.mark.timeout(10)
def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    report, err = _refusal(str(fifo))
    assert "FIFO" in err.message
    _assert_no_paths(report, tmp_path)


def test_nul_in_path():
    report, err = _refusal("/tmp/model\x00.gguf")
    assert "NUL" in err.message and err.code == "invalid_model_path"


def test_symlink_loop(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    report, err = _refusal(str(a))
    assert "symlink loop" in err.message
    _assert_no_paths(report, tmp_path)


def test_junk_directory(tmp_path):
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("hello")
    (junk / "weights.bin").write_bytes(os.urandom(100))
    report, err = _refusal(str(junk))
    assert "not a model" in err.message
    assert "hello" not in json.dumps(report)
    _assert_no_paths(report, tmp_path)


def test_config_without_weights_and_two_ggufs(tmp_path):
    half = tmp_path / "half"
    half.mkdir()
    (half / "config.json").write_text("{}")
    assert "no *.safetensors" in _refusal(str(half))[1].message
    two = tmp_path / "two"
    two.mkdir()
    synthetic_gguf(two / "a.gguf")
    synthetic_gguf(two / "b.gguf")
    assert "2 GGUF files" in _refusal(str(two))[1].message


def test_symlink_inside_model_dir_to_device_is_refused(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.gguf").symlink_to("/dev/zero")
    report, err = _refusal(str(folder))
    assert "not a regular file" in err.message


def test_synthetic_gguf_header_is_read(tmp_path):
    loc = locate_model(str(synthetic_gguf(tmp_path / "tiny.gguf")))
    assert loc.kind == "gguf" and loc.name == "tiny.gguf" and len(loc.path_hash) == 16
    header = check_weights(loc)
    assert header["version"] == 3 and header["tensor_count"] == 1
    assert header["metadata"]["general.architecture"] == "qwen2"
    report = inspect_model(str(tmp_path / "tiny.gguf"))
    assert report["weights"]["readable"] and report["config"]["architecture"] == "qwen2"
    assert report["config"]["vocab_size"] == 2
    assert report["tokenizer"] == {"present": True, "chat_template": True}
    assert report["backend"] == "llama_cpp" and report["kind"] == "gguf"
    _assert_no_paths(report, tmp_path)


def test_directory_with_one_gguf_goes_to_llama_cpp(tmp_path):
    synthetic_gguf(tmp_path / "only.gguf")
    (tmp_path / "provenance.json").write_text(json.dumps({"preset": "p", "resolved_revision": "abc"}))
    report = inspect_model(str(tmp_path))
    assert report["backend"] == "llama_cpp" and report["name"] == "only.gguf"
    assert report["provenance"]["resolved_revision"] == "abc"


@pytest.mark.timeout(20)
def test_truncated_gguf_is_model_unavailable(tmp_path):
    bad = synthetic_gguf(tmp_path / "cut.gguf", truncate_data=True)
    report, err = _refusal(str(bad))
    assert err.code == "weights_unreadable" and "truncated" in err.message
    assert not report["weights"]["readable"]
    _assert_no_paths(report, tmp_path)
    (tmp_path / "garbage.gguf").write_bytes(b"GGUF" + struct.pack("<I", 3) + os.urandom(2000))
    _, err = _refusal(str(tmp_path / "garbage.gguf"))
    assert err.code == "weights_unreadable"


@pytest.mark.timeout(60)
def test_tensor_extents_are_checked_with_the_type_table_of_the_ggml_that_reads_the_file(tmp_path):
    """The block sizes come from llama-cpp-python's own ggml (a type it added is known, one it changed
    has its new size), not from the ``gguf`` package, which a header check no longer imports."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as Q

    bad = synthetic_gguf(tmp_path / "cut.gguf", truncate_data=True)
    probe = ("import json, sys\nfrom pathlib import Path\nfrom agent.models.backends.headers import _Corrupt, _ggml_type_sizes, "
             "read_gguf_header\ntry:\n    read_gguf_header(Path(sys.argv[1]))\nexcept _Corrupt as exc:\n"
             "    print('refused:', exc)\nprint(json.dumps(_ggml_type_sizes()))\nprint('gguf' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe, str(bad)], capture_output=True, text=True, timeout=50,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.returncode == 0, out.stderr
    refused, table, imported = out.stdout.splitlines()
    assert refused == "refused: truncated (tensor data ends past the end of the file)" and imported == "False"
    table = {int(t): tuple(sizes) for t, sizes in json.loads(table).items()}
    # the types of the Qwen GGUFs, as the gguf package (another reader of the same format) sizes them
    for kind in (Q.F32, Q.F16, Q.Q8_0, Q.Q4_K, Q.Q5_K, Q.Q6_K):
        assert table[int(kind)] == tuple(GGML_QUANT_SIZES[kind]), kind.name


@pytest.mark.slow
@pytest.mark.timeout(20)
def test_first_kilobyte_of_real_gguf(tmp_path):
    with open(real_05b(), "rb") as f:
        (tmp_path / "head.gguf").write_bytes(f.read(1024))
    with open(REAL_05B, "rb") as f:  # and one cut inside the tensor data
        (tmp_path / "cut.gguf").write_bytes(f.read(50_000_000))
    for name in ("head.gguf", "cut.gguf"):
        report, err = _refusal(str(tmp_path / name))
        assert err.code == "weights_unreadable" and "truncated" in err.message
        _assert_no_paths(report, tmp_path)


def test_backend_mismatch_and_unknown(tmp_path):
    folder = tmp_path / "st"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 2) + b"{}")
    report = inspect_model(str(folder), backend="llama_cpp")
    assert not report["ok"] and any("needs a GGUF" in p for p in report["problems"])


def test_llama_cpp_dtype_refused(tmp_path):
    report = inspect_model(str(synthetic_gguf(tmp_path / "tiny.gguf")), dtype="bfloat16")
    assert not report["ok"] and any("does not apply to GGUF" in p for p in report["problems"])


def test_inspect_dependencies_shape(tmp_path):
    report = inspect_model(str(synthetic_gguf(tmp_path / "tiny.gguf")))
    for name in ("llama_cpp", "torch", "transformers"):
        dep = report["dependencies"][name]
        assert set(dep) >= {"version", "error"} and dep["error"] in (None, "missing", "import_failed")
    assert re.fullmatch(r"\d+\.\d+\.\d+", report["python"])


# --------------------------------------------------------------------------------------------
# JSON-complete stopping and grammar schemas
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,end", [
    (' {"expression": "1 + 2"}', 24),
    ('{"a": [1, 2]} trailing', 13),
    ('"an answer" ', 11),
    ("12", None),
    ("12,", 2),
    ('{"a": ', None),
    ("", None),
    ("  nope", None),
])
def test_complete_json_end(text, end):
    assert complete_json_end(text) == end


@pytest.fixture(scope="module")
def value_schemas(tmp_path_factory) -> dict[str, dict]:
    """The tools' argument schemas, and every value schema the runtime really sends a model, captured
    from scripted guided runs of both packs and a free-mode run (no copy of prompting internals)."""
    schemas = {name: cls.model_json_schema() for name, cls in TOOL_ARGUMENTS.items()}
    for pack_name in ("default", "release_hold"):
        pack = load_pack(None if pack_name == "default" else pack_name)
        outputs = chain_outputs(pack)
        actions = [json.dumps({"type": "action", "tool": tool, "arguments": json.loads(arguments)})
                   for tool, arguments in zip(("knowledge_search", "calculator", "plot"), outputs[:3])]
        final = json.dumps({"type": "final", "answer": json.loads(outputs[3]),
                            "evidence_ids": ["obs-knowledge_search-1", "obs-calculator-2", "obs-plot-3"]})
        for mode, script in (("guided", outputs), ("free", [*actions, final])):
            outcome, policy = run_scripted(script, tmp_path_factory.mktemp(f"{pack_name}-{mode}"), pack=pack,
                                           mode=mode)
            assert outcome.result.status == "completed", (pack_name, mode, outcome.result.stop_reason)
            for i, request in enumerate(policy.requests, 1):
                assert request.value_schema, (pack_name, mode, i)  # every runtime request is constrained
                schemas[f"runtime_{pack_name}_{mode}_{i}"] = request.value_schema
    return schemas


def test_every_value_schema_compiles_to_a_grammar(value_schemas):
    """Every schema the runtime sends a local model compiles in llguidance, with and without the
    leading space a value after a colon gets; broken schemas are reported as errors, not crashes."""
    import llguidance

    from agent.models.backends.guidance import value_grammar, without_lengths_beside_patterns

    def compiles(schema, lead):
        return not llguidance.LLMatcher.validate_grammar_with_warnings(value_grammar(schema, lead))[0]

    for name, schema in value_schemas.items():
        for lead in ("", " "):
            # as the backend does: the schema, else the same with the pattern alone bounding strings
            assert compiles(schema, lead) or compiles(without_lengths_beside_patterns(schema), lead), name
    for broken in ({"type": "string", "pattern": "[a-"}, {"type": "strin"}):
        assert llguidance.LLMatcher.validate_grammar_with_warnings(value_grammar(broken))[0]


@pytest.mark.slow
def test_guidance_on_the_real_vocab_forces_literal_text_and_masks_the_rest(value_schemas):
    from agent.models.backends.guidance import Guidance
    from agent.prompts.prompting import answer_schema

    vocab_only = llama_cpp.Llama(str(real_05b()), vocab_only=True, verbose=False)
    try:
        guidance = Guidance(vocab_only._model.vocab, eos_token=vocab_only._model.token_eos())
        for name, schema in value_schemas.items():
            assert guidance.grammar(schema, " ") is not None, name
        assert guidance.failures == 0
        # a pattern llguidance cannot compile is dropped (still a string, held to it by the validator);
        # a schema that does not compile without it has no grammar
        relaxed = guidance.relaxed  # the schemas above whose patterns compile only without their lengths
        assert guidance.grammar({"type": "string", "pattern": "[a-"}) is not None
        assert (guidance.relaxed, guidance.failures) == (relaxed + 1, 0)
        assert guidance.grammar({"type": "strin"}) is None and guidance.failures == 1
        assert [guidance.constrained(s)[1] for s in ({"type": "string"}, {"type": "string", "pattern": "[a-"},
                                                       {"type": "strin"}, None)] == ["full", "relaxed", "none", None]

        tokenize = lambda text: vocab_only.tokenize(text.encode(), add_bos=False, special=False)  # noqa: E731
        form = answer_schema("Average {number}; verdict {ship|hold}.", ("78", "61.5"))
        matcher = guidance.matcher(guidance.grammar(form, " "))
        head = matcher.forced(100)  # the literal text up to the first slot, as the model's own tokens
        assert vocab_only.detokenize(head).decode().startswith(' "Average')
        assert not matcher.allows(tokenize("99")[0])  # a number no observation holds
        mask = matcher.allowed_mask(vocab_only.n_vocab())
        assert mask.shape == (vocab_only.n_vocab(),) and 0 < mask.sum() < 1000
        wanted, produced = ' "Average 78; verdict hold."', list(head)
        while not matcher.stopped:  # the model's part: a token at a time, the grammar's part forced
            written = vocab_only.detokenize(produced).decode()
            assert wanted.startswith(written), written
            token = tokenize(wanted[len(written):])[0]
            assert matcher.allows(token), (written, token)
            matcher.accept(token)
            produced += [token] + matcher.forced(100)
        assert vocab_only.detokenize(produced).decode() == wanted
        assert matcher.stopped
        calc = guidance.matcher(guidance.grammar(TOOL_ARGUMENTS["calculator"].model_json_schema(), " "))
        assert vocab_only.detokenize(calc.forced(100)).decode().startswith(' {"expression')
    finally:
        vocab_only.close()


# --------------------------------------------------------------------------------------------
# The real 0.5B model through the llama.cpp backend
# --------------------------------------------------------------------------------------------

MESSAGES = [
    {"role": "system", "content": "You are a careful agent. You answer with one JSON decision."},
    {"role": "user", "content": "Task: compute the average of 70, 80 and 91 with the calculator tool."},
]
CALC_PREFIX = '{"type": "action", "tool": "calculator", "arguments": '
ANSWER_PREFIX = '{"type": "final", "evidence_ids": ["obs-calculator-1"], "answer": '
LONG_STRING = {"type": "string", "minLength": 2000}  # a value the grammar cannot close for 2000 characters


@pytest.fixture(scope="module")
def real_policy():
    policy = load_policy(str(real_05b()))
    yield policy
    unload_all()


def _calc_request(**kw) -> ModelRequest:
    base = dict(messages=MESSAGES, prefix=CALC_PREFIX, value_schema=TOOL_ARGUMENTS["calculator"].model_json_schema(),
                suffix="}", max_new_tokens=48)
    base.update(kw)
    return ModelRequest(**base)


@pytest.mark.slow
def test_real_grammar_generation_and_kv_reuse(real_policy):
    first = real_policy.generate(_calc_request())
    args = json.loads(first.text)
    assert set(args) == {"expression"} and re.match(CALCULATOR_PATTERN, args["expression"])
    TOOL_ARGUMENTS["calculator"].model_validate(args)
    assert first.finish_reason == "stop" and first.input_tokens > 20 and first.output_tokens > 0
    second = real_policy.generate(_calc_request())
    assert second.cached_tokens >= second.input_tokens - 1 and second.cached_tokens > 0
    assert second.text == first.text  # greedy
    # the full object (prefix + value + suffix) is one valid Decision
    decision = json.loads(CALC_PREFIX + second.text + "}")
    assert decision["tool"] == "calculator"


@pytest.mark.slow
def test_real_other_value_schemas(real_policy):
    ks = real_policy.generate(ModelRequest(
        messages=MESSAGES, prefix='{"type": "action", "tool": "knowledge_search", "arguments": ',
        value_schema=TOOL_ARGUMENTS["knowledge_search"].model_json_schema(), suffix="}", max_new_tokens=60))
    TOOL_ARGUMENTS["knowledge_search"].model_validate(json.loads(ks.text))
    # The grammar closes a short string within max_new_tokens: the value ends at its closing quote.
    answer = real_policy.generate(ModelRequest(
        messages=MESSAGES, prefix=ANSWER_PREFIX, value_schema={"type": "string", "minLength": 1, "maxLength": 40},
        suffix="}", max_new_tokens=80))
    assert answer.finish_reason == "stop", answer
    assert isinstance(json.loads(answer.text), str) and 1 <= len(json.loads(answer.text)) <= 40
    # A string that cannot close within max_new_tokens ends on the token budget.
    cut = real_policy.generate(ModelRequest(messages=MESSAGES, prefix=ANSWER_PREFIX, value_schema=LONG_STRING,
                                            suffix="}", max_new_tokens=5))
    assert cut.finish_reason == "length" and cut.output_tokens == 5 and cut.text.lstrip().startswith('"')


@pytest.mark.slow
def test_real_unconstrained_stops_at_complete_json(real_policy):
    """No grammar: the value ends as one complete JSON value (whatever its type), long before the
    token budget -- by the JSON-complete rule or the end of the turn (greedy, so always the same)."""
    gen = real_policy.generate(_calc_request(value_schema=None, max_new_tokens=60))
    assert gen.finish_reason == "stop" and 0 < gen.output_tokens < 60, gen
    json.loads(gen.text)


@pytest.mark.slow
def test_real_deadline_and_cancel(real_policy):
    gen = real_policy.generate(_calc_request(deadline=time.monotonic() - 1))
    assert gen.finish_reason == "deadline" and gen.output_tokens == 0
    # By the clock: the grammar cannot close the value before the deadline, so only the deadline ends it.
    req = _calc_request(value_schema=LONG_STRING, max_new_tokens=1000, prefix=ANSWER_PREFIX)
    req.deadline = time.monotonic() + 1.5
    started = time.monotonic()
    gen = real_policy.generate(req)
    assert gen.finish_reason == "deadline" and gen.output_tokens < 1000, gen
    assert time.monotonic() - started < 15
    # Mid-generation, deterministically: the request says stop on its sixth check.
    for reason in ("deadline", "cancelled"):
        req = _calc_request(value_schema=LONG_STRING, max_new_tokens=1000, prefix=ANSWER_PREFIX)
        checks = iter(range(1000))
        req.should_stop = lambda: reason if next(checks) >= 5 else None  # type: ignore[method-assign]
        gen = real_policy.generate(req)
        assert gen.finish_reason == reason and 1 <= gen.output_tokens <= 5, gen
    req = _calc_request()
    req.cancel.set()
    assert real_policy.generate(req).finish_reason == "cancelled"


@pytest.mark.slow
def test_real_context_overflow(real_policy):
    huge = [{"role": "user", "content": "word " * 9000}]
    with pytest.raises(ContextOverflow) as err:
        real_policy.generate(_calc_request(messages=huge))
    assert err.value.code == "context_overflow" and "/" not in err.value.message


@pytest.mark.slow
def test_real_inspect_and_description(real_policy):
    report = inspect_model(str(REAL_05B))
    assert report["ok"], report["problems"]
    assert report["config"]["architecture"] == "qwen2" and report["tokenizer"]["chat_template"]
    assert report["weights"]["tensor_count"] > 100
    public = real_policy.description.public()
    assert public["backend"] == "llama_cpp" and public["quantization"] == "Q4_K_M"
    _assert_no_paths(report, REAL_05B)
    _assert_no_paths(public, REAL_05B)


@pytest.mark.slow
def test_real_grammar_overrides_the_model(real_policy):
    """Values the model would never pick unconstrained: every token goes through the grammar."""
    odd = real_policy.generate(_calc_request(value_schema={"type": "string", "pattern": "^[xyz]{3,5}$"}))
    assert re.fullmatch(r'"[xyz]{3,5}"', odd.text.strip()) and odd.finish_reason == "stop"
    fixed = real_policy.generate(_calc_request(value_schema={"enum": ["zebra-42", 7]}))
    assert json.loads(fixed.text) in ("zebra-42", 7)
    obj = real_policy.generate(_calc_request(value_schema={
        "type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 6}},
        "required": ["n"], "additionalProperties": False}))
    assert json.loads(obj.text)["n"] in (5, 6)


@pytest.mark.slow
def test_real_sampling_with_seed_is_reproducible(real_policy):
    a = real_policy.generate(_calc_request(temperature=0.9, seed=123))
    b = real_policy.generate(_calc_request(temperature=0.9, seed=123))
    assert a.text == b.text
    TOOL_ARGUMENTS["calculator"].model_validate(json.loads(a.text))


@pytest.mark.slow
def test_real_top_k_one_is_greedy_even_when_hot(real_policy):
    """top_k reaches llama.cpp's sampler: keeping one candidate makes a hot sample the greedy text."""
    greedy = real_policy.generate(_calc_request(value_schema={"type": "string", "maxLength": 80}))
    for seed in (1, 2, 3):
        hot = real_policy.generate(_calc_request(value_schema={"type": "string", "maxLength": 80},
                                                 temperature=2.0, top_k=1, seed=seed))
        assert hot.text == greedy.text


@pytest.mark.slow
def test_real_drafts_speed_decoding_up_and_never_change_the_text(real_policy):
    """A draft is verified in one batch: where the model writes what it proposes, those tokens come
    from the draft; the text is the model's own either way (greedy: identical)."""
    plain = real_policy.generate(_calc_request())
    expression = json.loads(plain.text)["expression"]
    right = real_policy.generate(_calc_request(drafts=(f'"expression": "{expression}"',)))
    assert right.text == plain.text and plain.drafted_tokens == 0
    assert right.drafted_tokens >= 3, right  # the expression's tokens, verified several at a time
    wrong = real_policy.generate(_calc_request(drafts=('"expression": "1 * 2 * 3 * 4 * 5 * 6"',)))
    assert wrong.text == plain.text and wrong.drafted_tokens < right.drafted_tokens


@pytest.mark.slow
def test_real_draft_goes_on_through_the_text_the_grammar_forces(real_policy, monkeypatch):
    """An answer form's words between its slots are forced by the grammar. A draft that holds them
    too ("81 >= 78 is True") is verified across them in the same batch, not one batch a slot; the text
    is the model's own either way (greedy: identical)."""
    from agent.models.backends import llama_cpp as backend

    batches = []
    decode = backend.decode_batch
    monkeypatch.setattr(backend, "decode_batch", lambda llm, batch, logits_from: (batches.append(len(batch)),
                                                                                  decode(llm, batch, logits_from)))
    form = {"type": "string", "pattern": r"^Check: average [0-9]+ >= [0-9]+ is (True|False); "
                                         r"lowest [0-9]+ >= [0-9]+ is (True|False)\.$"}
    messages = [MESSAGES[0], {"role": "user", "content": "The average is 81 and the rule needs an average of at "
                                                         "least 78; the lowest value is 64 and the rule needs 70. "
                                                         "Write the check."}]
    request = dict(messages=messages, prefix=ANSWER_PREFIX, value_schema=form, suffix="}", max_new_tokens=64)
    plain = real_policy.generate(ModelRequest(**request))
    plain_batches, batches[:] = len(batches), []
    statements = re.findall(r"[0-9]+ >= [0-9]+ is (?:True|False)", plain.text)
    assert len(statements) == 2, plain.text
    drafted = real_policy.generate(ModelRequest(**request, drafts=tuple(statements)))
    assert drafted.text == plain.text and plain.drafted_tokens == 0
    assert drafted.drafted_tokens >= 6, drafted
    # a batch for each statement, one to begin and one to end (a batch a slot was 6 here, plain 14)
    assert len(batches) <= len(statements) + 2 < plain_batches, (batches, plain_batches)


@pytest.mark.slow
def test_real_aside_keeps_the_conversation_state_once_and_restores_it(real_policy):
    """An aside (a code turn) keeps the conversation's KV state while it runs and puts it back. The
    state is held once, in the buffer llama.cpp wrote (a long conversation's state is ~100 MB on the
    1.5B; sliced into Python ints it was 8 bytes a byte: peak RSS 3.3 GB on three fix-the-test packs)."""
    import tracemalloc

    long_messages = [MESSAGES[0], {"role": "user", "content": MESSAGES[1]["content"] + "\n" + "Note: fine. " * 300}]
    conversation = _calc_request(messages=long_messages)
    first = real_policy.generate(conversation)
    llm, lc = real_policy._llm, real_policy._llama_cpp
    state_size = lc.llama_state_get_size(llm._ctx.ctx)
    assert llm.n_tokens > 600 and state_size > 1_000_000
    tracemalloc.start()
    try:
        aside = real_policy.generate(_calc_request(aside=True))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert aside.output_tokens > 0
    assert peak < 1.5 * state_size, (peak, state_size)
    again = real_policy.generate(conversation)
    assert again.cached_tokens >= again.input_tokens - 1  # the conversation came back whole
    assert again.text == first.text


@pytest.mark.slow
def test_real_a_value_the_grammar_fixes_whole_is_written_without_reading_the_prompt(real_policy):
    """A call whose every argument is a const (a guided step's test run) needs no logits: its text is
    the grammar's, nothing of its prompt is evaluated, and the KV cache keeps the last conversation."""
    first = real_policy.generate(_calc_request())
    held = list(real_policy._llm.input_ids[:real_policy._llm.n_tokens])
    fixed = {"type": "object", "properties": {"expression": {"const": "(70 + 80 + 91) / 3"}},
             "required": ["expression"], "additionalProperties": False}
    other = [MESSAGES[0], {"role": "user", "content": "A conversation the cache has never seen. " * 40}]
    forced = real_policy.generate(_calc_request(messages=other, value_schema=fixed))
    assert json.loads(forced.text) == {"expression": "(70 + 80 + 91) / 3"}
    assert forced.finish_reason == "stop" and forced.input_tokens == 0 and forced.cached_tokens == 0
    assert forced.output_tokens == forced.forced_tokens > 0
    assert list(real_policy._llm.input_ids[:real_policy._llm.n_tokens]) == held
    # a free value on that prompt is read as usual and ends in the same value
    free = real_policy.generate(_calc_request(messages=other, value_schema=fixed | {"properties": {
        "expression": {"type": "string", "enum": ["(70 + 80 + 91) / 3", "(70 + 80) / 2"]}}}))
    assert free.input_tokens > 100 and free.forced_tokens < free.output_tokens
    again = real_policy.generate(_calc_request())
    assert again.text == first.text


def _next_token_logits(policy, request: ModelRequest):
    """The distribution of the first token after ``request``'s prompt: its last token evaluated again
    on top of the KV cache the request left."""
    import numpy as np

    llm = policy._llm
    tokens = policy.tokenize(policy.render_prompt(request))
    llm._ctx.kv_cache_seq_rm(-1, len(tokens) - 1, -1)
    llm.n_tokens = len(tokens) - 1
    llm.eval(tokens[-1:])
    return np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),)).copy()


def _padded_request(policy, tokens_at_most: int) -> ModelRequest:
    """The calculator request with a note that brings its prompt to at most ``tokens_at_most`` tokens
    (the longest such note)."""
    best = _calc_request()
    for n in range(1, 400):
        messages = [MESSAGES[0], {"role": "user", "content": MESSAGES[1]["content"] + "\n" + "Note: fine. " * n}]
        request = _calc_request(messages=messages)
        if len(policy.tokenize(policy.render_prompt(request))) > tokens_at_most:
            return best
        best = request
    return best


@pytest.mark.slow
@pytest.mark.parametrize("parked", ["in a file", "in memory"])
def test_real_context_grows_with_the_conversation_and_keeps_its_state(parked, tmp_path, monkeypatch):
    """A context made small grows when what is evaluated needs more -- a prompt, or a generation that
    runs past the context's end -- and only to what it needs: the conversation evaluated before stays
    in the KV cache (reused, not evaluated again), and what the model writes, and the distribution it
    writes from, are those of a context made at full size that saw the same prompts. The state waits
    in a scratch file while the context is made anew, removed afterwards; where no file can be made,
    in memory."""
    import numpy as np

    from agent.models.backends import llama_cpp as backend
    from agent.models.backends import llama_cpp_context as context

    scratch = tmp_path / "scratch"
    monkeypatch.setattr(context, "scratch_folder", lambda: scratch)
    if parked == "in memory":
        scratch.parent.mkdir(parents=True, exist_ok=True)
        scratch.write_text("a file where the folder should be")  # mkdir and mkstemp both fail
    saved = []
    real_save = context.park_state
    monkeypatch.setattr(context, "park_state", lambda llm, lc, path: saved.append(path) or real_save(llm, lc, path))

    short = _calc_request()
    long_messages = [MESSAGES[0], {"role": "user", "content": MESSAGES[1]["content"] + "\n" + "Note: fine. " * 300}]
    long = _calc_request(messages=long_messages)
    crossing = None  # a prompt that ends 6 tokens before the small context does: the answer crosses it
    seen = {}
    for name, initial in (("grown", 512), ("full", backend.DEFAULT_N_CTX)):
        policy = backend.load(locate_model(real_05b()), initial_n_ctx=initial)
        try:
            crossing = crossing or _padded_request(policy, policy._llm.n_ctx() - 6)
            first = policy.generate(short)
            size_before = policy._llm.n_ctx()
            across = policy.generate(crossing)
            size_across = policy._llm.n_ctx()
            second = policy.generate(long)
            seen[name] = (first, second, size_before, policy._llm.n_ctx(), across, size_across,
                          _next_token_logits(policy, long))
            assert policy.description.details["n_ctx"] == backend.DEFAULT_N_CTX  # what the runtime may fill
        finally:
            policy.close()
    first, second, before, after, across, size_across, logits = seen["grown"]
    assert across.input_tokens <= before == 512 < across.input_tokens + across.output_tokens - 1  # evaluated
    assert 512 < size_across <= 512 + context.GROW_AHEAD + context.GROW_STEP  # grown mid-answer, by a step
    assert before < second.input_tokens <= after
    # as large as the prompt and the answer needed, not the request's whole max_new_tokens on top
    assert after - (second.input_tokens + second.output_tokens) < context.GROW_AHEAD + context.GROW_STEP
    assert second.cached_tokens > 20  # the shorter conversation's shared start survived the moves
    assert seen["full"][2] == seen["full"][3] >= backend.DEFAULT_N_CTX
    assert (first.text, across.text, second.text) == tuple(seen["full"][i].text for i in (0, 4, 1))
    assert second.cached_tokens == seen["full"][1].cached_tokens
    np.testing.assert_allclose(logits, seen["full"][6], atol=1e-3)
    assert int(logits.argmax()) == int(seen["full"][6].argmax())
    if parked == "in a file":
        assert len(saved) >= 2 and list(scratch.iterdir()) == []  # used for each move, then removed
    else:
        assert saved == [] and scratch.is_file()


@pytest.mark.slow
def test_real_state_that_does_not_read_back_after_a_growth_is_evaluated_again(tmp_path, monkeypatch):
    """A parked state that does not load (a full disk, a changed file) empties the cache: the next
    prompt is evaluated in full, never continued from a wrong state; the file is removed all the same."""
    from agent.models.backends import llama_cpp as backend
    from agent.models.backends import llama_cpp_context as context

    scratch = tmp_path / "scratch"
    monkeypatch.setattr(context, "scratch_folder", lambda: scratch)
    monkeypatch.setattr(context, "unpark_state", lambda llm, lc, path, expected: False)
    monkeypatch.setenv("REACT_AGENT_PREFIX_CACHE", "0")  # no saved system message to restore either
    long = _calc_request(messages=[MESSAGES[0], {"role": "user", "content": MESSAGES[1]["content"] + "\n" + "Note: fine. " * 300}])
    policy = backend.load(locate_model(real_05b()), initial_n_ctx=512)
    try:
        policy.generate(_calc_request())
        grown = policy.generate(long)
        again = policy.generate(long)
        assert policy._llm.n_ctx() > 512 and list(scratch.iterdir()) == []
    finally:
        policy.close()
    assert grown.cached_tokens == 0 and grown.input_tokens > 512  # nothing kept from before the growth
    assert again.cached_tokens > 512 and again.text == grown.text  # the fresh evaluation is the cache now
