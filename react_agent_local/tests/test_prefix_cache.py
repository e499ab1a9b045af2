"""The prefix cache: a system message's KV state saved by one process and restored by the next.

The file-level tests need no model. The real-model tests run the 0.5B in fresh processes (the cache
is only ever read by a process that has evaluated nothing yet) and compare the next-token logits of
a restored prefix with a fresh evaluation of the same prompt.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agent.models.backends.prefix_cache import FORMAT, PrefixCache, default_directory
from server_support import MODEL_DIR, PACKAGE_ROOT

SMALL_MODEL = MODEL_DIR / "qwen2.5-coder-0.5b-gguf" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
TOKENS = [151644, 8948, 198, 2610, 525, 264, 16585, 8315, 13, 151645, 198, 151644]
STATE = bytes(range(256)) * 40


def only_file(directory: Path) -> Path:
    (path,) = directory.glob("*.kv")
    return path


def test_a_saved_prefix_is_found_for_a_prompt_that_starts_with_it(tmp_path):
    cache = PrefixCache(tmp_path, "model-a")
    cache.store(TOKENS[:8], STATE)
    found = cache.lookup(TOKENS + [5, 6, 7], limit=20)
    assert found is not None and list(found.tokens) == TOKENS[:8] and found.state == STATE


def test_the_longest_saved_prefix_within_the_limit_wins(tmp_path):
    cache = PrefixCache(tmp_path, "model-a")
    cache.store(TOKENS[:4], b"short")
    cache.store(TOKENS[:10], b"long")
    assert cache.lookup(TOKENS, limit=len(TOKENS)).state == b"long"
    assert cache.lookup(TOKENS, limit=9).state == b"short"


def test_other_tokens_another_model_key_or_a_longer_prefix_never_restore(tmp_path):
    PrefixCache(tmp_path, "model-a").store(TOKENS[:8], STATE)
    changed = list(TOKENS)
    changed[5] += 1  # a different tool set changes the system message's tokens
    assert PrefixCache(tmp_path, "model-a").lookup(changed, limit=20) is None
    assert PrefixCache(tmp_path, "model-b").lookup(TOKENS, limit=20) is None
    assert PrefixCache(tmp_path, "model-a").lookup(TOKENS[:6], limit=20) is None


@pytest.mark.parametrize("damage", ["flip_state_byte", "truncate", "garbage_header", "wrong_format", "empty"])
def test_a_damaged_file_is_ignored(tmp_path, damage):
    cache = PrefixCache(tmp_path, "model-a")
    cache.store(TOKENS[:8], STATE)
    path = only_file(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "flip_state_byte":
        data[-7] ^= 0xFF
    elif damage == "truncate":
        data = data[:-100]
    elif damage == "garbage_header":
        data = b"\x00\xff not json\n" + data
    elif damage == "wrong_format":
        header, rest = bytes(data).split(b"\n", 1)
        data = json.dumps({**json.loads(header), "format": FORMAT + "x"}).encode() + b"\n" + rest
    else:
        data = b""
    path.write_bytes(bytes(data))
    assert cache.lookup(TOKENS, limit=20) is None


def test_a_symlink_in_the_cache_folder_is_not_followed(tmp_path):
    real, folder = tmp_path / "real", tmp_path / "cache"
    real.mkdir()
    folder.mkdir()
    PrefixCache(real, "model-a").store(TOKENS[:8], STATE)
    (folder / only_file(real).name).symlink_to(only_file(real))
    assert PrefixCache(folder, "model-a").lookup(TOKENS, limit=20) is None


def test_the_folder_stays_under_its_byte_cap(tmp_path):
    cache = PrefixCache(tmp_path, "model-a", cap_bytes=3 * len(STATE))
    for n in range(2, 12):
        cache.store(TOKENS[:n], STATE)
    total = sum(p.stat().st_size for p in tmp_path.glob("*.kv"))
    assert total <= 3 * len(STATE)
    assert cache.lookup(TOKENS, limit=len(TOKENS)) is not None  # the newest survive
    assert not list(tmp_path.glob(".tmp-*"))


def test_the_environment_can_move_or_disable_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("REACT_AGENT_PREFIX_CACHE", str(tmp_path))
    assert default_directory() == tmp_path
    monkeypatch.setenv("REACT_AGENT_PREFIX_CACHE", "0")
    assert default_directory() is None


# -- the real 0.5B ----------------------------------------------------------------------------

PROBE = r"""
import json, sys
import numpy as np
from agent.models.backends import load_policy
from agent.models.model_policy import ModelRequest
from agent.prompts.prompting import system_message
from agent.tools import registry_for

tools = sys.argv[2].split(",")
system = system_message(registry_for(tools))
policy = load_policy(sys.argv[1])
request = ModelRequest(messages=[{"role": "system", "content": system},
                                 {"role": "user", "content": "Goal: add 2 and 3. Answer with the next Decision."}],
                       prefix='{"type": "', value_schema=None, suffix="", max_new_tokens=1)
gen = policy.generate(request)
llm = policy._llm
tokens = policy.tokenize(policy.render_prompt(request))
# the distribution of the first new token: the last prompt token evaluated on top of the KV cache
llm._ctx.kv_cache_seq_rm(-1, len(tokens) - 1, -1)
llm.n_tokens = len(tokens) - 1
llm.eval(tokens[-1:])
logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),)).copy()
np.save(sys.argv[3], logits)
print(json.dumps({"input": gen.input_tokens, "cached": gen.cached_tokens, "restored": gen.restored_tokens,
                  "static": policy.static_prefix(request, tokens)}))
"""


def probe(tmp_path: Path, cache: str, tools: str, name: str) -> tuple[dict, np.ndarray]:
    assert SMALL_MODEL.is_file(), f"{SMALL_MODEL.name} is missing: scripts/setup.sh --model qwen2.5-coder-0.5b-gguf"
    out = tmp_path / f"{name}.npy"
    env = {**os.environ, "REACT_AGENT_PREFIX_CACHE": cache}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(SMALL_MODEL), tools, str(out)], cwd=PACKAGE_ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), np.load(out)


@pytest.mark.slow
def test_a_restored_prefix_gives_the_distribution_of_a_fresh_evaluation(tmp_path):
    cache = str(tmp_path / "cache")
    fresh, fresh_logits = probe(tmp_path, "0", "knowledge_search,calculator,plot", "fresh")
    first, first_logits = probe(tmp_path, cache, "knowledge_search,calculator,plot", "first")
    second, second_logits = probe(tmp_path, cache, "knowledge_search,calculator,plot", "second")
    assert fresh["restored"] == 0 and first["restored"] == 0
    assert second["restored"] == first["static"] > 0
    assert second["restored"] < second["input"]
    np.testing.assert_allclose(second_logits, fresh_logits, atol=1e-3)
    np.testing.assert_allclose(first_logits, fresh_logits, atol=1e-3)
    assert int(second_logits.argmax()) == int(fresh_logits.argmax())

    # another tool set: another system message, so nothing is restored
    other, _ = probe(tmp_path, cache, "lookup_fact,calculator", "other")
    assert other["restored"] == 0

    # every saved file damaged: evaluated again, same distribution
    for path in Path(cache).glob("*.kv"):
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    damaged, damaged_logits = probe(tmp_path, cache, "knowledge_search,calculator,plot", "damaged")
    assert damaged["restored"] == 0
    np.testing.assert_allclose(damaged_logits, fresh_logits, atol=1e-3)


def test_the_model_identity_is_the_file_not_its_name(tmp_path):
    from agent.models.backends.prefix_cache import model_identity

    a, b, copy = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "copy.gguf"
    a.write_bytes(b"GGUF" + bytes(5000))
    b.write_bytes(b"GGUF" + bytes(4999) + b"\x01")
    copy.write_bytes(a.read_bytes())
    assert model_identity(a) == model_identity(copy)
    assert model_identity(a) != model_identity(b)
