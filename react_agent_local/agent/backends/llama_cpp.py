"""llama.cpp backend (GGUF): one resident ``Llama``, the GGUF's own chat template, grammar decoding.

Each step the runtime writes the JSON prefix into the assistant turn (R-DEC-3). We render the chat
template with ``add_generation_prompt=True``, append ``request.prefix`` and continue with raw
completion; ``create_chat_completion`` cannot continue after an assistant prefix. When the request
carries ``value_schema``, sampling is constrained by a GBNF grammar for exactly that value (the
arguments object, or the answer string); the runtime appends ``request.suffix`` itself. Generation
stops at end-of-turn, at ``max_new_tokens``, as soon as the text is one complete JSON value, or at
the request's deadline/cancel (checked between prompt chunks and between tokens).

KV reuse (R-RT-9): llama-cpp-python keeps the tokens it evaluated last; the prompt prefix shared
with them is not evaluated again and is reported as ``cached_tokens``.

Grammar limits of llama-cpp-python 0.3.36's json-schema converter, and what ``grammar_schema``
does about them (pydantic's schema in, a schema the converter enforces faithfully out):

* integer ``minimum``/``maximum`` are ignored -> a small range becomes an ``enum`` of its values;
* ``pattern`` wins over ``minLength``/``maxLength`` -> a ``^[class]+$`` pattern gets the lengths as
  a ``{min,max}`` quantifier (the calculator's character class keeps working);
* ``maxLength`` becomes a chain of nested optional rules; beyond ``MAX_GRAMMAR_LENGTH`` characters
  the bound is left to max_new_tokens and the runtime's validator (``minLength`` is kept);
* number ``minimum``/``maximum``, ``default``, ``title``, ``description`` are dropped (the
  runtime validates the value anyway); local ``$ref``s are inlined;
* its string rule admits raw control characters, which are not valid JSON; the generated GBNF is
  patched so strings exclude U+0000..U+001F and U+007F (escapes such as ``\\n`` stay possible).

A grammar that still fails to compile is never handed to llama.cpp (a NULL sampler would crash the
process): that request runs unconstrained and ``grammar_failures`` counts it. The grammar is
applied lazily (see ``_Sampler``), which halves the cost of constrained decoding on a CPU.
"""

from __future__ import annotations

import copy
import ctypes
import json
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..model_policy import ContinuationPolicy, Generation, ModelDescription, ModelRequest, ModelUnavailable
from . import INSTALL_HINTS, ContextOverflow, ModelLocation, complete_json_end

DEFAULT_N_CTX = 8192
PREFILL_CHUNK = 128  # prompt tokens per decode call; deadline/cancel is checked between chunks
MAX_ENUM_RANGE = 64
MAX_GRAMMAR_LENGTH = 400

_STRING_CHAR_RULE = re.compile(r'^char ::= \[\^"\\\\\] ', re.M)


def _import_llama_cpp():
    try:
        import llama_cpp
    except ImportError:
        raise ModelUnavailable(f"llama-cpp-python is not installed ({INSTALL_HINTS['llama_cpp']})",
                               code="dependency_missing") from None
    except Exception as exc:  # a broken native build
        raise ModelUnavailable(f"llama-cpp-python fails to import ({type(exc).__name__}); reinstall it "
                               f"({INSTALL_HINTS['llama_cpp']})", code="dependency_missing") from None
    return llama_cpp


def physical_cores() -> int:
    """Physical cores this process may use: hyper-thread siblings count once (no psutil)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return max(1, (os.cpu_count() or 2) // 2)
    cores = set()
    for cpu in cpus:
        try:
            siblings = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip()
        except OSError:
            siblings = str(cpu)
        cores.add(siblings)
    return max(1, len(cores))


def resolve_device_dtype(device: str, dtype: str) -> tuple[str, str]:
    """GGUF weights keep their quantization: dtype must be "auto"; a GPU needs an offload build."""
    if dtype != "auto":
        raise ModelUnavailable(f"dtype {dtype} does not apply to GGUF weights (llama.cpp keeps the file's "
                               "quantization); use dtype auto", code="dtype_unavailable")
    if device not in ("auto", "cpu", "cuda", "mps"):
        raise ModelUnavailable(f"unknown device {device!r}", code="device_unavailable")
    llama_cpp = _import_llama_cpp()
    gpu = bool(llama_cpp.llama_supports_gpu_offload())
    gpu_name = "mps" if sys.platform == "darwin" else "cuda"
    if device == "auto":
        return (gpu_name if gpu else "cpu"), "auto"
    if device in ("cuda", "mps") and (not gpu or device != gpu_name):
        raise ModelUnavailable(f"device {device} is not available: this llama-cpp-python build has no "
                               f"{device} offload (use device cpu or auto)", code="device_unavailable")
    return device, "auto"


# --------------------------------------------------------------------------------------------
# Grammar
# --------------------------------------------------------------------------------------------

_DROP = {"title", "description", "default", "examples", "$schema", "$id", "$comment", "readOnly", "writeOnly"}
_SIMPLE_CLASS_PATTERN = re.compile(r"^\^(\[(?:[^\]\\]|\\.)+\])([+*])\$$")


def grammar_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Rewrite a pydantic JSON schema into one that the llama.cpp converter enforces (see module doc)."""
    defs = {**schema.get("$defs", {}), **schema.get("definitions", {})}

    def inline(node: Any, depth: int = 0) -> Any:
        if depth > 32:
            raise ValueError("schema nests too deeply")
        if isinstance(node, list):
            return [inline(v, depth + 1) for v in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(("#/$defs/", "#/definitions/")):
            target = defs.get(ref.rsplit("/", 1)[-1])
            if target is None:
                raise ValueError(f"unresolved $ref {ref}")
            merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
            return inline(merged, depth + 1)
        out = {
            # Under "properties" the keys are field names (a field may be called "title"), not keywords.
            k: ({name: inline(sub, depth + 1) for name, sub in v.items()} if k == "properties" else inline(v, depth + 1))
            for k, v in node.items()
            if k not in _DROP and k not in ("$defs", "definitions")
        }
        return _tighten(out)

    return inline(schema)


def _tighten(node: dict[str, Any]) -> dict[str, Any]:
    kind = node.get("type")
    if kind == "integer" and "enum" not in node:
        low = node.pop("minimum", None)
        high = node.pop("maximum", None)
        if "exclusiveMinimum" in node:
            low = node.pop("exclusiveMinimum") + 1
        if "exclusiveMaximum" in node:
            high = node.pop("exclusiveMaximum") - 1
        if isinstance(low, int) and isinstance(high, int) and 0 <= high - low < MAX_ENUM_RANGE:
            return {"enum": list(range(low, high + 1))}
    elif kind == "number":
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
            node.pop(key, None)
    elif kind == "string":
        low, high = node.get("minLength", 0), node.get("maxLength")
        if high is not None and high > MAX_GRAMMAR_LENGTH:
            node.pop("maxLength")
            high = None
        if "pattern" in node:
            match = _SIMPLE_CLASS_PATTERN.match(node["pattern"])
            if match:
                char_class, quant = match.groups()
                low = max(low, 1 if quant == "+" else 0)
                bound = f"{{{low},{high}}}" if high is not None else f"{{{low},}}"
                node["pattern"] = f"^{char_class}{bound}$"
            node.pop("minLength", None)
            node.pop("maxLength", None)
        elif high is None and low <= 1:
            node.pop("maxLength", None)
            if low == 0:
                node.pop("minLength", None)
    return node


def schema_to_gbnf(schema: dict[str, Any]) -> str:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    gbnf = json_schema_to_gbnf(json.dumps(grammar_schema(schema)))
    # The converter's string char admits raw control characters (invalid JSON); exclude them.
    gbnf = _STRING_CHAR_RULE.sub(r'char ::= [^"\\\\\\x7F\\x00-\\x1F] ', gbnf)
    # The runtime's prefix ends at a colon; let the value start with the space the model would
    # naturally write there (forcing "{" straight after ":" pushes it off its likeliest tokens).
    return 'root ::= " "? root-value\n' + gbnf.replace("root ::=", "root-value ::=", 1)


def compile_check(vocab: Any, gbnf: str) -> bool:
    """Parse the grammar with llama.cpp itself; a NULL sampler means it does not compile."""
    llama_cpp = _import_llama_cpp()
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
    if not sampler:
        return False
    llama_cpp.llama_sampler_free(sampler)
    return True


# --------------------------------------------------------------------------------------------
# The policy
# --------------------------------------------------------------------------------------------


class LlamaCppPolicy(ContinuationPolicy):
    """A GGUF model in llama.cpp behind the one-method Policy seam."""

    def __init__(self, loc: ModelLocation, device: str = "auto", dtype: str = "auto",
                 n_ctx: int = DEFAULT_N_CTX, n_threads: int | None = None):
        llama_cpp = _import_llama_cpp()
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        device, dtype = resolve_device_dtype(device, dtype)
        self._lock = threading.Lock()
        self._grammars: dict[str, Any] = {}
        self.grammar_failures = 0
        self.n_threads = n_threads or physical_cores()
        started = time.perf_counter()
        try:
            self._llm = llama_cpp.Llama(
                model_path=str(loc.path), n_ctx=n_ctx, n_threads=self.n_threads,
                n_threads_batch=self.n_threads, n_gpu_layers=0 if device == "cpu" else -1,
                n_batch=512, verbose=False,
            )
        except Exception as exc:  # llama.cpp reports every load failure as ValueError/RuntimeError
            raise ModelUnavailable(f"{loc.name}: llama.cpp could not load the weights "
                                   f"({type(exc).__name__}: corrupt, truncated or unsupported GGUF)",
                                   code="weights_unreadable") from None
        self.load_ms = (time.perf_counter() - started) * 1000
        self.n_ctx = self._llm.n_ctx()
        meta = self._llm.metadata
        template = meta.get("tokenizer.chat_template")
        if not template:
            self.close()
            raise ModelUnavailable(f"{loc.name}: the GGUF has no chat template", code="no_chat_template")
        model = self._llm._model
        self._formatter = Jinja2ChatFormatter(
            template=template, eos_token=model.token_get_text(model.token_eos()),
            bos_token=model.token_get_text(model.token_bos()) if model.token_bos() >= 0 else "",
            add_generation_prompt=True,
        )
        self._llama_cpp = llama_cpp
        self._is_eog = lambda tok: bool(llama_cpp.llama_vocab_is_eog(model.vocab, tok))
        self.description = ModelDescription(
            name=loc.name, backend="llama_cpp", path_hash=loc.path_hash, device=device, dtype="auto",
            details={"kind": "gguf", "n_ctx": self.n_ctx, "n_threads": self.n_threads,
                     "architecture": meta.get("general.architecture"),
                     "quantization": _file_type_name(meta.get("general.file_type")),
                     "load_ms": round(self.load_ms, 1), "grammar": True},
        )

    # -- prompt ------------------------------------------------------------------------------

    def render_prompt(self, request: ModelRequest) -> str:
        """The chat template with an open assistant turn, then the runtime's prefix."""
        try:
            rendered = self._formatter(messages=request.messages).prompt
        except Exception as exc:  # the template is model data: a bad one is a model fault
            raise ModelUnavailable(f"{self.description.name}: the chat template failed to render "
                                   f"({type(exc).__name__})", code="chat_template_failed") from None
        return rendered + request.prefix

    def tokenize(self, text: str) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)

    def grammar_for(self, schema: dict[str, Any] | None) -> str | None:
        """Checked GBNF for ``schema`` (cached); None when absent or when it does not compile."""
        if schema is None:
            return None
        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            gbnf = None
            try:
                gbnf = schema_to_gbnf(schema)
                if not compile_check(self._llm._model.vocab, gbnf):
                    gbnf = None
            except Exception:  # converter assertion on an unsupported construct
                gbnf = None
            if gbnf is None:
                self.grammar_failures += 1
            self._grammars[key] = gbnf
        return self._grammars[key]

    # -- generation --------------------------------------------------------------------------

    def generate(self, request: ModelRequest) -> Generation:
        with self._lock:
            if self._llm is None:
                raise ModelUnavailable(f"{self.description.name} was unloaded", code="model_unloaded")
            return self._generate(request)

    def _generate(self, request: ModelRequest) -> Generation:
        started = time.perf_counter()
        llm = self._llm
        tokens = self.tokenize(self.render_prompt(request))
        budget = min(request.max_new_tokens, self.n_ctx - len(tokens))
        if budget < 1:
            raise ContextOverflow(f"the prompt has {len(tokens)} tokens; with {request.max_new_tokens} to "
                                  f"generate it exceeds the model context of {self.n_ctx} tokens")
        gbnf = self.grammar_for(request.value_schema)

        def done(text: str, out: int, reason: str, cached: int, prefill_ms: float | None) -> Generation:
            return Generation(text=text, input_tokens=len(tokens), output_tokens=out,
                              latency_ms=(time.perf_counter() - started) * 1000, finish_reason=reason,
                              cached_tokens=cached, prompt_eval_ms=prefill_ms)

        # Prefill all but the last prompt token in chunks, so a deadline or cancel can interrupt a
        # long prompt; the KV cache keeps whatever prefix this prompt shares with the previous one.
        cached = _common_prefix(llm.input_ids[: llm.n_tokens], tokens, limit=len(tokens) - 1)
        if cached < llm.n_tokens and not llm._ctx.kv_cache_seq_rm(-1, cached, -1):
            llm.reset()
            cached = 0
        llm.n_tokens = cached
        prefill_started = time.perf_counter()
        for begin in range(cached, len(tokens) - 1, PREFILL_CHUNK):
            reason = request.should_stop()
            if reason:
                return done("", 0, reason, cached, (time.perf_counter() - prefill_started) * 1000)
            llm.eval(tokens[begin: min(begin + PREFILL_CHUNK, len(tokens) - 1)])
        prefill_ms = (time.perf_counter() - prefill_started) * 1000

        reason = request.should_stop()
        if reason:
            return done("", 0, reason, cached, prefill_ms)
        out: list[int] = []
        text, finish = "", "length"
        sampler = _Sampler(self._llama_cpp, llm, gbnf, request)
        try:
            llm.eval(tokens[-1:])  # the last prompt token gives the logits of the first new one
            while True:
                token = sampler.sample()
                if token is None or self._is_eog(token):
                    finish = "stop"
                    break
                out.append(token)
                text = llm.detokenize(out, prev_tokens=tokens).decode("utf-8", errors="ignore")
                if request.on_text is not None:
                    request.on_text(text)
                end = complete_json_end(text)
                if end is not None:
                    text, finish = text[:end], "stop"
                    break
                if len(out) >= budget:
                    break
                reason = request.should_stop()
                if reason:
                    finish = reason
                    break
                llm.eval([token])
        finally:
            sampler.close()
        return done(text, len(out), finish, cached, prefill_ms)

    def close(self) -> None:
        with self._lock:
            llm = getattr(self, "_llm", None)
            if llm is not None:
                llm.close()
                self._llm = None


class _Sampler:
    """Greedy (temperature 0) or temperature/top-k/top-p sampling, with the grammar applied lazily.

    The stages run in transformers' order (temperature first, then top-k and top-p), so
    ``top_p``/``top_k`` mean what they mean in a model's ``generation_config.json``.

    Applying a grammar to all ~150k candidates costs about as much as a decode step on a 2-core
    CPU, so (like llama.cpp's own common sampler) the token is first sampled without the grammar
    and only checked against it; the grammar filters the whole vocabulary only when that token is
    not allowed. Every token accepted into the grammar is one it allows: an invalid one would
    abort llama.cpp.
    """

    def __init__(self, lc: Any, llm: Any, gbnf: str | None, request: ModelRequest):
        import random

        from llama_cpp._internals import LlamaTokenDataArray

        self.lc, self.ctx, self.n_vocab = lc, llm._ctx.ctx, llm.n_vocab()
        self.chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
        if request.temperature > 0:
            seed = request.seed if request.seed is not None else random.getrandbits(32)
            for stage in (lc.llama_sampler_init_temp(request.temperature), lc.llama_sampler_init_top_k(request.top_k),
                          lc.llama_sampler_init_top_p(request.top_p, 1), lc.llama_sampler_init_dist(seed)):
                lc.llama_sampler_chain_add(self.chain, stage)
        else:
            lc.llama_sampler_chain_add(self.chain, lc.llama_sampler_init_greedy())
        self.grammar = None
        if gbnf is not None:
            self.grammar = lc.llama_sampler_init_grammar(llm._model.vocab, gbnf.encode("utf-8"), b"root")
            if not self.grammar:  # checked before; never hand llama.cpp a NULL sampler
                self.close()
                raise ModelUnavailable("the grammar failed to compile", code="grammar_failed")
            self.one = LlamaTokenDataArray(n_vocab=1)
            self.full = LlamaTokenDataArray(n_vocab=self.n_vocab)
        self.resampled = 0

    def _allowed(self, token: int) -> bool:
        import math

        one = self.one
        one.candidates_data.id[0], one.candidates_data.logit[0], one.candidates_data.p[0] = token, 0.0, 0.0
        one.candidates.size, one.candidates.selected, one.candidates.sorted = 1, -1, False
        self.lc.llama_sampler_apply(self.grammar, ctypes.byref(one.candidates))
        return math.isfinite(float(one.candidates_data.logit[0]))

    def sample(self) -> int | None:
        """The next token, or None when the grammar allows nothing (a dead end)."""
        lc = self.lc
        token = int(lc.llama_sampler_sample(self.chain, self.ctx, -1))
        if self.grammar is None:
            return token
        if not self._allowed(token):
            import numpy as np

            self.resampled += 1
            logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(self.ctx, -1), shape=(self.n_vocab,))
            self.full.copy_logits(logits)
            self.full.candidates.selected = -1
            lc.llama_sampler_apply(self.grammar, ctypes.byref(self.full.candidates))
            lc.llama_sampler_apply(self.chain, ctypes.byref(self.full.candidates))
            chosen = int(self.full.candidates.selected)
            if not 0 <= chosen < int(self.full.candidates.size):
                return None
            token = int(self.full.candidates_data.id[chosen])
            if not np.isfinite(self.full.candidates_data.logit[chosen]) or not self._allowed(token):
                return None
        lc.llama_sampler_accept(self.grammar, token)
        return token

    def close(self) -> None:
        for name in ("chain", "grammar"):
            sampler = getattr(self, name, None)
            if sampler:
                self.lc.llama_sampler_free(sampler)
            setattr(self, name, None)


def _common_prefix(a: Any, b: list[int], limit: int) -> int:
    n = 0
    for x, y in zip(a, b):
        if n >= limit or x != y:
            break
        n += 1
    return n


_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
               11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
               17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}


def _file_type_name(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return _FILE_TYPES.get(int(value), str(value))
    except (TypeError, ValueError):
        return None


def load(loc: ModelLocation, device: str = "auto", dtype: str = "auto", **options: Any) -> LlamaCppPolicy:
    return LlamaCppPolicy(loc, device=device, dtype=dtype, **options)
