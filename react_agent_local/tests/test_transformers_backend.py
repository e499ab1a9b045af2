"""The transformers backend against a tiny, randomly initialised Qwen2 built in a temp dir.

The model writes garbage; these tests check the plumbing: loading with local files only, the chat
template + prefix, token usage, finish reasons, the JSON-complete stopping rule, deadline/cancel,
device/dtype refusal, the resident-model cache and inspect_model.
"""

from __future__ import annotations

import json
import time

import pytest
import torch
import transformers

from agent.models.backends import inspect_model, load_policy, loaded_models, unload_all
from agent.models.backends.transformers_backend import TransformersPolicy, _StopWhen, resolve_device_dtype
from agent.models.model_policy import ModelRequest, ModelUnavailable

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder = tmp_path_factory.mktemp("tiny-qwen2")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ['{"expression": "(70 + 80) / 2"}', "The average is 75.", "system user assistant"] * 20
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, tie_word_embeddings=False)
    model = transformers.Qwen2ForCausalLM(config)
    model.save_pretrained(folder)
    yield folder
    unload_all()


def _request(**kw) -> ModelRequest:
    base = dict(messages=[{"role": "user", "content": "compute (70 + 80) / 2"}],
                prefix='{"type": "action", "tool": "calculator", "arguments": ',
                value_schema=None, suffix="}", max_new_tokens=6)
    base.update(kw)
    return ModelRequest(**base)


def test_inspect_tiny_model(tiny_model):
    report = inspect_model(str(tiny_model))
    assert report["ok"], report["problems"]
    assert report["backend"] == "transformers" and report["kind"] == "safetensors"
    assert report["tokenizer"] == {"present": True, "chat_template": True}
    assert report["weights"]["readable"] and report["weights"]["tensor_count"] > 0
    assert report["config"]["model_type"] == "qwen2"
    assert report["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert report["dtype"] in ("float32", "bfloat16")
    assert report["dependencies"]["torch"]["version"] and report["dependencies"]["transformers"]["imported"]
    assert str(tiny_model) not in json.dumps(report)


def test_generate_usage_and_length(tiny_model):
    policy = load_policy(str(tiny_model), device="cpu", dtype="float32")
    assert isinstance(policy, TransformersPolicy)
    gen = policy.generate(_request(max_new_tokens=5))
    assert gen.input_tokens > 10
    # The seeded random model never ends its turn within five tokens: the token budget ends it.
    assert gen.finish_reason == "length" and gen.output_tokens == 5
    assert gen.latency_ms > 0 and gen.cached_tokens == 0
    # The prompt is the chat template with an open assistant turn plus the runtime's prefix.
    prompt = policy.render_prompt(_request())
    assert prompt.endswith('<|im_start|>assistant\n{"type": "action", "tool": "calculator", "arguments": ')
    assert policy.description.public()["backend"] == "transformers"
    assert str(tiny_model) not in json.dumps(policy.description.public())


def test_cache_reuses_and_unloads(tiny_model):
    first = load_policy(str(tiny_model), device="cpu", dtype="float32")
    assert load_policy(str(tiny_model) + "/", device="cpu", dtype="float32") is first
    assert [m["name"] for m in loaded_models()] == [tiny_model.name]
    other = load_policy(str(tiny_model), device="cpu", dtype="bfloat16")
    assert other is not first and len(loaded_models()) == 1
    freed = unload_all()
    assert freed["count"] == 1 and freed["unloaded"][0]["dtype"] == "bfloat16"
    with pytest.raises(ModelUnavailable, match="unloaded"):
        other.generate(_request())
    assert loaded_models() == [] and unload_all()["count"] == 0


def test_prompt_prefix_is_reused_from_the_kv_cache(tiny_model):
    unload_all()
    policy = load_policy(str(tiny_model), device="cpu", dtype="float32")
    first = _request(max_new_tokens=8)
    grown = _request(max_new_tokens=8, messages=[{"role": "user", "content": "compute (70 + 80) / 2\n"
                                                   "[obs-1] calculator ok: (70 + 80) / 2 = 75"}])
    assert policy.generate(first).cached_tokens == 0
    step2 = policy.generate(grown)
    assert 10 < step2.cached_tokens < step2.input_tokens  # the shared start of the prompt only
    again = policy.generate(grown)
    assert again.cached_tokens == again.input_tokens - 1 and again.text == step2.text
    unload_all()  # a fresh policy has no cache: the same tokens from a full forward pass
    fresh = load_policy(str(tiny_model), device="cpu", dtype="float32").generate(grown)
    assert fresh.cached_tokens == 0 and fresh.text == step2.text and fresh.output_tokens == step2.output_tokens
    unload_all()


def test_deadline_and_cancel(tiny_model):
    policy = load_policy(str(tiny_model), device="cpu", dtype="float32")
    gen = policy.generate(_request(deadline=time.monotonic() - 1, max_new_tokens=50))
    assert gen.finish_reason == "deadline" and gen.output_tokens == 0
    req = _request(max_new_tokens=50)
    req.cancel.set()
    assert policy.generate(req).finish_reason == "cancelled"


def test_deadline_during_generation(tiny_model):
    policy = load_policy(str(tiny_model), device="cpu", dtype="float32")
    calls = {"n": 0}
    req = _request(max_new_tokens=200)
    original = req.should_stop

    def stop_after_three():  # deterministic stand-in for a clock running out mid-generation
        calls["n"] += 1
        return "deadline" if calls["n"] > 3 else original()

    req.should_stop = stop_after_three  # type: ignore[method-assign]
    gen = policy.generate(req)
    assert gen.finish_reason == "deadline" and 1 <= gen.output_tokens <= 4, gen


def test_json_complete_stopping_rule(tiny_model):
    tok = transformers.AutoTokenizer.from_pretrained(str(tiny_model), local_files_only=True)
    prompt = tok("<|im_start|>assistant\n", add_special_tokens=False, return_tensors="pt")["input_ids"]
    crit = _StopWhen(_request(), prompt.shape[1], lambda ids: tok.decode(ids, skip_special_tokens=True), time.perf_counter())
    value = tok(' {"expression": "1 + 2"}', add_special_tokens=False)["input_ids"]
    fired_at = None
    for i in range(1, len(value) + 1):
        ids = torch.cat([prompt, torch.tensor([value[:i]])], dim=1)
        if bool(crit(ids)[0]):
            fired_at = i
            break
    assert fired_at == len(value) and crit.reason == "stop"
    text = tok.decode(value, skip_special_tokens=True)
    assert json.loads(text[: crit.json_end]) == {"expression": "1 + 2"}


def test_device_and_dtype_refusals():
    if not torch.cuda.is_available():
        with pytest.raises(ModelUnavailable) as err:
            resolve_device_dtype("cuda", "auto")
        assert err.value.code == "device_unavailable" and "cuda" in err.value.message
    with pytest.raises(ModelUnavailable):
        resolve_device_dtype("tpu", "auto")
    with pytest.raises(ModelUnavailable):
        resolve_device_dtype("cpu", "float8")
    assert resolve_device_dtype("cpu", "auto") == ("cpu", "float32")


def test_inspect_reports_unavailable_device(tiny_model):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    report = inspect_model(str(tiny_model), device="cuda")
    assert not report["ok"] and any("cuda" in p for p in report["problems"])


def test_corrupt_safetensors_is_refused(tiny_model, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny_model, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:2000])
    report = inspect_model(str(broken))
    assert not report["ok"] and not report["weights"]["readable"]
    assert any("truncated" in p or "corrupt" in p for p in report["problems"])
    with pytest.raises(ModelUnavailable) as err:
        load_policy(str(broken))
    assert str(tmp_path) not in err.value.message


@pytest.mark.gpu  # deselected by default (pytest.ini); run with -m gpu on a machine with CUDA
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_generate_on_cuda(tiny_model):
    policy = load_policy(str(tiny_model))  # auto: cuda, and bfloat16 where the GPU has it
    assert policy.description.device == "cuda"
    assert policy.description.dtype == ("bfloat16" if torch.cuda.is_bf16_supported() else "float16")
    assert next(policy.model.parameters()).device.type == "cuda"
    gen = policy.generate(_request(max_new_tokens=5))
    assert 0 <= gen.output_tokens <= 5 and gen.finish_reason in ("length", "stop")
    half = load_policy(str(tiny_model), device="cuda", dtype="float16")
    assert next(half.model.parameters()).dtype == torch.float16 and len(loaded_models()) == 1
    assert half.generate(_request(deadline=time.monotonic() - 1)).finish_reason == "deadline"
    report = inspect_model(str(tiny_model), device="cuda", dtype="float16")
    assert report["ok"] and report["device"] == "cuda" and report["dtype"] == "float16"
    import gc
    import weakref

    model_ref = weakref.ref(half.model)
    del policy, half
    assert unload_all()["count"] == 1
    gc.collect()
    assert model_ref() is None  # nothing keeps the weights alive once unloaded


@pytest.mark.slow
def test_real_gguf_through_transformers():
    """transformers dequantizes the 0.5B GGUF (gguf_file=); about a minute on 2 cores."""
    import download_model

    gguf_path = download_model.default_dest("qwen2.5-coder-0.5b-gguf") / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    assert gguf_path.is_file(), f"{gguf_path.name} is not downloaded: run scripts/setup.sh --model qwen2.5-coder-0.5b-gguf"
    policy = load_policy(str(gguf_path), backend="transformers", device="cpu")
    try:
        assert policy.description.backend == "transformers" and policy.description.details["kind"] == "gguf"
        gen = policy.generate(_request(max_new_tokens=24))
        assert gen.input_tokens > 10 and 0 < gen.output_tokens < 24
        assert gen.finish_reason == "stop", gen  # greedy: the same complete value every time
        json.loads(gen.text)  # no grammar here: a complete JSON value, whatever its type
    finally:
        unload_all()
