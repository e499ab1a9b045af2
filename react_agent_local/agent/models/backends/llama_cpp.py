"""llama.cpp backend (GGUF): one resident ``Llama``, the GGUF's own chat template, constrained decoding.

Each step the runtime writes the JSON prefix into the assistant turn. We render the chat
template with ``add_generation_prompt=True``, append ``request.prefix`` and continue with raw
completion; ``create_chat_completion`` cannot continue after an assistant prefix. When the request
carries ``value_schema``, decoding is constrained to exactly that value by llguidance (``guidance``):
tokens the grammar forbids are never chosen, and tokens it forces are appended in one batch at prompt
speed instead of being sampled (``forced_tokens``). The runtime appends ``request.suffix`` itself.
Generation stops at end-of-turn, at ``max_new_tokens``, as soon as the text is one complete JSON
value, or at the request's deadline/cancel (checked between prompt chunks and between tokens).

The context starts at ``INITIAL_N_CTX`` tokens and grows (``llama_cpp_context.grow``) up to ``n_ctx``
as the tokens evaluated need: before a prompt's prefill and before each batch of a generation, never
for the tokens a generation only may write.

KV reuse: llama-cpp-python keeps the tokens it evaluated last; the prompt prefix shared with them is
not evaluated again and is reported as ``cached_tokens``. A fresh process restores the state of the
system message (the same for every run with the same tools) from ``prefix_cache`` instead of
evaluating it; those tokens are reported as ``restored_tokens`` (and counted in ``cached_tokens``).

Drafts (``request.drafts``, the evidence the model is expected to copy) are verified several tokens
a batch (``llama_cpp_draft``); the context's state, kept across an aside, moved when the context grows
and saved to the prefix cache, is ``llama_cpp_context``.

A grammar that fails to compile is never applied: that request runs unconstrained and
``grammar_failures`` counts it (the runtime validates every value anyway). The grammar is applied
lazily (``llama_cpp_sampler.Sampler``): a token is sampled from the model's own distribution first
and only checked; the mask over the whole vocabulary is applied only when that token is not allowed.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from agent.models.model_policy import (
    CODE_FENCE_END, ContinuationPolicy, Generation, ModelDescription, ModelRequest, ModelUnavailable
)
from agent.models.backends.base import INSTALL_HINTS, ContextOverflow, code_block_end, complete_json_end
from agent.models.backends.llama_cpp_context import Kept, grow, reinstate, restore_prefix, save_prefix, snapshot
from agent.models.backends.llama_cpp_draft import Drafter, decode_batch, truncate
from agent.models.backends.llama_cpp_sampler import Sampler
from agent.models.backends.locate import ModelLocation
from agent.models.backends.prefix_cache import PrefixCache, default_directory, model_identity

DEFAULT_N_CTX = 8192
#: The context a model starts with. llama.cpp allocates and clears the KV cache for the whole context
#: when the context is made, so all of it is resident from the start; a context that starts small and
#: grows when a prompt needs more (``LlamaCppPolicy._fit``) holds for a short run a quarter of the
#: 8192 tokens' cache (the 0.5B's 72 MiB, the 1.5B's 171 MiB).
INITIAL_N_CTX = 2048
PREFILL_CHUNK = 128  # prompt tokens per decode call; deadline/cancel is checked between chunks
#: The largest batch a decode call takes: a prefill chunk, or a sampled token with the tokens the
#: grammar forces after it and a draft (kept under half of it). llama.cpp sizes its compute buffers by it.
N_BATCH = 128
#: The key half of the KV cache in 8 bits (ggml's Q8_0) and the value half in f16: for an 8192-token
#: context this keeps 56 MiB (1.5B) or 24 MiB (0.5B) fewer resident at the same prompt speed
#: (110 vs 109 tok/s, 1.5B, 2 cores). A quantized value half needs flash attention, which with it
#: evaluated prompts ~17 % slower here; so the values stay f16.
KV_TYPE_K = 8  # GGML_TYPE_Q8_0


def _import_llama_cpp():
    # ggml's OpenMP threads spin while they wait for work by default: on a machine whose cores other
    # processes share, a 2-thread generation of 64 tokens took 120 s spinning and 9.4 s passive. The
    # OpenMP runtime reads this once, when the library loads; an operator's own setting wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
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
# The policy
# --------------------------------------------------------------------------------------------


class LlamaCppPolicy(ContinuationPolicy):
    """A GGUF model in llama.cpp behind the one-method Policy seam."""

    code_blocks = True  # the grammar holds a code argument as a fenced block (guidance.value_grammar)
    code_turns = True  # ... written in a code turn of its own, beside the conversation's cached prompt

    def __init__(self, loc: ModelLocation, device: str = "auto", dtype: str = "auto",
                 n_ctx: int = DEFAULT_N_CTX, n_threads: int | None = None,
                 initial_n_ctx: int = INITIAL_N_CTX):
        llama_cpp = _import_llama_cpp()
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        device, dtype = resolve_device_dtype(device, dtype)
        self._lock = threading.Lock()
        #: the last aside's evaluated prompt (``snapshot``): the next aside may share it (``generate``)
        self._aside: Kept | None = None
        self.n_threads = n_threads or physical_cores()
        self.restored_tokens = 0  # prompt tokens restored from the prefix cache in this process
        started = time.perf_counter()
        # On the CPU, llama.cpp repacks most quantized weights into its own layout; from a memory map the
        # file's pages stay resident beside that copy (peak RSS about twice the file), read() does not.
        try:
            self._llm = llama_cpp.Llama(
                model_path=str(loc.path), n_ctx=max(1, min(n_ctx, initial_n_ctx)), n_threads=self.n_threads,
                n_threads_batch=self.n_threads, n_gpu_layers=0 if device == "cpu" else -1,
                n_batch=N_BATCH, type_k=KV_TYPE_K, use_mmap=device != "cpu", verbose=False,
            )
        except Exception as exc:  # llama.cpp reports every load failure as ValueError/RuntimeError
            raise ModelUnavailable(f"{loc.name}: llama.cpp could not load the weights "
                                   f"({type(exc).__name__}: corrupt, truncated or unsupported GGUF)",
                                   code="weights_unreadable") from None
        self.load_ms = (time.perf_counter() - started) * 1000
        self.n_ctx = n_ctx  # the most the context grows to; ``self._llm.n_ctx()`` is its size now
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
        try:
            from agent.models.backends.guidance import Guidance

            self._guidance = Guidance(model.vocab, eos_token=model.token_eos())
        except ModelUnavailable:
            self.close()
            raise
        self._prefix_cache = _open_prefix_cache(llama_cpp, self._llm, loc.path, n_ctx)
        _return_freed_memory()  # the loader's and the tokenizer bridge's garbage (~12 MiB on the 0.5B)
        self.description = ModelDescription(
            name=loc.name, backend="llama_cpp", path_hash=loc.path_hash, device=device, dtype="auto",
            details={"kind": "gguf", "n_ctx": self.n_ctx, "n_threads": self.n_threads,
                     "architecture": meta.get("general.architecture"),
                     "quantization": _file_type_name(meta.get("general.file_type")),
                     "load_ms": round(self.load_ms, 1), "grammar": True, "grammar_engine": "llguidance",
                     "prefix_cache": self._prefix_cache is not None},
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

    def static_prefix(self, request: ModelRequest, tokens: list[int]) -> int:
        """How many of ``tokens`` belong to the system message: the part of the prompt that does not
        depend on the task. The template is rendered with the system message alone, and the text that
        rendering shares with the whole prompt is the static part (whatever the template's markup)."""
        messages = request.messages
        if len(messages) < 2 or messages[0].get("role") != "system":
            return 0
        try:
            alone = self._formatter(messages=messages[:1]).prompt
            whole = self._formatter(messages=messages).prompt
        except Exception:
            return 0
        shared = os.path.commonprefix([alone, whole])
        return _common_prefix(self.tokenize(shared), tokens, limit=len(tokens) - 1)

    def tokenize(self, text: str) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)

    def _tokenize_text(self, text: str) -> list[int]:
        """Plain text (a draft) as the model writes it: no BOS, special tokens not parsed."""
        return self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    @property
    def grammar_failures(self) -> int:
        """Requests whose value schema did not compile (they ran unconstrained)."""
        return self._guidance.failures

    # -- generation --------------------------------------------------------------------------

    def generate(self, request: ModelRequest) -> Generation:
        with self._lock:
            if self._llm is None:
                raise ModelUnavailable(f"{self.description.name} was unloaded", code="model_unloaded")
            if not request.aside or self._llm.n_tokens == 0:
                generation = self._generate(request)
                if generation.input_tokens:
                    self._aside = None  # the conversation went on: a later aside starts afresh
                return generation
            kept = snapshot(self._llm, self._llama_cpp)
            try:
                # Asides in a row share their prompt (a step's code turn drawn again, the next step's
                # with its own failure: ``version_trials.py``): the last one's state goes back in first,
                # so only what differs is evaluated.
                if self._aside is not None:
                    reinstate(self._llm, self._llama_cpp, self._aside)
                return self._generate(request)
            finally:
                self._aside = snapshot(self._llm, self._llama_cpp)
                reinstate(self._llm, self._llama_cpp, kept)

    def _generate(self, request: ModelRequest) -> Generation:
        started = time.perf_counter()
        llm = self._llm
        tokens = self.tokenize(self.render_prompt(request))
        budget = min(request.max_new_tokens, self.n_ctx - len(tokens))
        if budget < 1:
            raise ContextOverflow(f"the prompt has {len(tokens)} tokens; with {request.max_new_tokens} to "
                                  f"generate it exceeds the model context of {self.n_ctx} tokens")
        # A value after a prefix that ends at a colon starts with the space the model would write there.
        grammar, level = self._guidance.constrained(request.value_schema, lead=" " if request.prefix.endswith(":") else "",
                                                    code_field=request.code_field, code_only=request.code_only)
        matcher = self._guidance.matcher(grammar) if grammar is not None else None
        out: list[int] = []
        forced = drafted = restored = 0
        # the tokens the grammar forces first: taken without sampling, so they need no logits
        first = matcher.forced(budget) if matcher is not None else []
        forced += len(first)

        def done(text: str, reason: str, cached: int, prefill_ms: float | None, read: bool = True) -> Generation:
            return Generation(text=text, input_tokens=len(tokens) if read else 0, output_tokens=len(out),
                              latency_ms=(time.perf_counter() - started) * 1000, finish_reason=reason,
                              cached_tokens=cached, prompt_eval_ms=prefill_ms, forced_tokens=forced,
                              drafted_tokens=drafted, restored_tokens=restored, grammar=level)

        whole = llm.detokenize(first, prev_tokens=tokens).decode("utf-8", errors="ignore") if first else ""
        if first and (end := self._value_end(whole, request, matcher)) is not None:
            # A value the grammar fixes whole (every argument a const: a guided step's test run) is
            # written without reading the prompt: input_tokens 0, the KV cache as the last call left
            # it. The next call reads this one's turn with its own (the 0.5B read 1-4k tokens, 10-38 s,
            # to write a test command it could not choose, after each rewrite of HumanEval/125).
            out.extend(first)
            if request.on_text is not None:
                request.on_text(whole)
            return done(whole[:end], "stop", 0, 0.0, read=False)
        self._fit(len(tokens))

        # Prefill all but the last prompt token in chunks, so a deadline or cancel can interrupt a
        # long prompt; the KV cache keeps whatever prefix this prompt shares with the previous one.
        cached = _common_prefix(llm.input_ids[: llm.n_tokens], tokens, limit=len(tokens) - 1)
        if cached < llm.n_tokens and not llm._ctx.kv_cache_seq_rm(-1, cached, -1):
            llm.reset()
            cached = 0
        llm.n_tokens = cached
        prefill_started = time.perf_counter()
        # Less reused than the system message (a new process, or a conversation after another one:
        # a code turn's, or a forced call's that read nothing): its state may be on disk, or is saved
        # once evaluated.
        static = self.static_prefix(request, tokens) if self._prefix_cache is not None else 0
        static = static if static > cached else 0
        if static:
            restored = restore_prefix(llm, self._llama_cpp, self._prefix_cache, tokens, static, cached)
            self.restored_tokens += restored
            cached = restored or cached
            static = 0 if restored else static
        stops = sorted({static, len(tokens) - 1} - {0})
        begin = cached
        for stop in stops:
            for begin in range(begin, stop, PREFILL_CHUNK):
                reason = request.should_stop()
                if reason:
                    return done("", reason, cached, (time.perf_counter() - prefill_started) * 1000)
                llm.eval(tokens[begin: min(begin + PREFILL_CHUNK, stop)])
            begin = max(begin, stop)
            if stop == static:
                save_prefix(llm, self._llama_cpp, self._prefix_cache, tokens[:static])
        prefill_ms = (time.perf_counter() - prefill_started) * 1000

        reason = request.should_stop()
        if reason:
            return done("", reason, cached, prefill_ms)
        sampler = Sampler(self._llama_cpp, llm, matcher, request, self._is_eog)
        drafter = Drafter([self._tokenize_text(d) for d in request.drafts])
        text, finish = "", None

        def take(new: list[int]) -> str | None:
            """Append accepted tokens; the finish reason once the generation must end."""
            nonlocal text
            out.extend(new)
            drafter.written += new
            text = llm.detokenize(out, prev_tokens=tokens).decode("utf-8", errors="ignore")
            if request.on_text is not None:
                request.on_text(text)
            end = self._value_end(text, request, matcher)
            if end is not None:
                text = text[:end]
                return "stop"
            if len(out) >= budget:
                return "length"
            return request.should_stop()

        # ``pending`` is evaluated in one batch before the next sample: the last prompt token (its
        # logits give the first new token), then each sampled token with the tokens it forces, then a
        # draft of what may follow. A draft never changes what is sampled: each position is sampled
        # from the model's own logits as usual, and the draft is kept only as far as it agrees.
        pending = tokens[-1:]
        if first:
            pending += first
            finish = take(first)
        try:
            while finish is None:
                if len(pending) > llm.n_batch // 2:  # a long forced text: evaluated on its own, in chunks
                    self._fit(llm.n_tokens + len(pending))
                    llm.eval(pending[:-1])
                    pending = pending[-1:]
                draft = drafter.propose(matcher, budget - len(out) - 1)
                self._fit(llm.n_tokens + len(pending) + len(draft))
                base = llm.n_tokens
                decode_batch(llm, pending + draft, logits_from=len(pending) - 1)
                # ``j``: the draft tokens kept so far, each sampled or forced where the draft has it
                j, kept, after = 0, 0, []
                while j <= len(draft):
                    token = sampler.sample(len(pending) - 1 + j)
                    if token is None or self._is_eog(token):
                        finish = "stop"
                        break
                    more = matcher.forced(budget - len(out) - 1) if matcher is not None else []
                    forced += len(more)
                    hit = j < len(draft) and token == draft[j]  # already evaluated with the draft
                    drafted += hit
                    kept = j + hit
                    finish = take([token] + more)
                    after = more if hit else [token] + more
                    # forced text the draft holds too was evaluated with it: the draft goes on after it
                    # (a number slot, the answer form's words, the next slot in one batch)
                    through = hit and more and draft[j + 1:j + 1 + len(more)] == more
                    if through:
                        kept, after = j + 1 + len(more), []
                    if finish is not None or not hit or (more and not through):
                        break
                    j = kept
                # the KV cache keeps the prompt, what was pending and the draft as far as it was kept
                truncate(llm, base + len(pending) + kept)
                pending = after
        finally:
            sampler.close()
        return done(text, finish or "length", cached, prefill_ms)

    @staticmethod
    def _value_end(text: str, request: ModelRequest, matcher: Any) -> int | None:
        """Where the value ends in ``text`` (the generation's so far), or None while it goes on: a
        code turn at its closing fence, a code block after its JSON at the block's end, else at the
        end of one complete JSON value, or wherever the grammar allows nothing more."""
        if request.code_only:
            end = text.find(CODE_FENCE_END)
            end = None if end < 0 else end + len(CODE_FENCE_END)
        else:
            end = code_block_end(text) if request.code_field is not None and matcher is not None \
                else complete_json_end(text)
        if end is None and matcher is not None and matcher.stopped:
            return len(text)
        return end

    def _fit(self, need: int) -> None:
        """Make the context hold ``need`` tokens, grown up to ``n_ctx`` (``llama_cpp_context.grow``)."""
        grow(self._llm, self._llama_cpp, need, self.n_ctx)

    def close(self) -> None:
        with self._lock:
            llm = getattr(self, "_llm", None)
            if llm is not None:
                llm.close()
                self._llm = None
            self._aside = None


def _open_prefix_cache(lc: Any, llm: Any, path: Path, n_ctx: int) -> PrefixCache | None:
    """The prefix cache of this model file under this build and context, or None when disabled."""
    directory = default_directory()
    if directory is None:
        return None
    try:
        identity = model_identity(path)
    except OSError:
        return None
    build = lc.llama_print_system_info().decode("utf-8", "replace")
    key = json_key(model=identity, llama_cpp=getattr(lc, "__version__", "?"), build=build,
                   n_ctx=n_ctx, n_batch=llm.n_batch, type_k=KV_TYPE_K)
    return PrefixCache(directory, key)


def _return_freed_memory() -> None:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):
        pass


def json_key(**parts: Any) -> str:
    import json

    return json.dumps(parts, sort_keys=True)


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
