"""Hugging Face transformers backend: a safetensors directory or a GGUF file, local files only.

The model and tokenizer load with ``local_files_only=True`` and ``trust_remote_code=False``; a GGUF
file is dequantized by transformers (``gguf_file=``), which is slow but needs no llama.cpp build.
The prompt is the tokenizer's chat template with an open assistant turn plus ``request.prefix``.
There is no grammar here: generation stops at end-of-turn, at ``max_new_tokens``, as soon as the
text after the prefix is one complete JSON value, or at the request's deadline/cancel (checked
after every token; the prompt's single forward pass cannot be interrupted).

Like the llama.cpp backend, the policy keeps the KV cache of its last call: the next prompt's
longest common token prefix with it is reused (``DynamicCache.crop``) and only the rest is run
through the model, reported as ``cached_tokens``.

torch and transformers are imported only in this module, and only when it is used.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from agent.models.model_policy import ContinuationPolicy, Generation, ModelDescription, ModelRequest, ModelUnavailable
from agent.models.backends.base import INSTALL_HINTS, ContextOverflow, complete_json_end
from agent.models.backends.locate import ModelLocation

_DTYPES = ("float32", "bfloat16", "float16")
_PIP_HINT = re.compile(r"pip install [A-Za-z0-9_.\-\[\]=<>]+")


def _import_torch():
    try:
        import torch
    except ImportError:
        raise ModelUnavailable(f"torch is not installed ({INSTALL_HINTS['torch']})",
                               code="dependency_missing") from None
    except Exception as exc:
        raise ModelUnavailable(f"torch fails to import ({type(exc).__name__}); reinstall it", code="dependency_missing") from None
    return torch


def _import_transformers():
    _import_torch()
    try:
        import transformers
    except ImportError:
        raise ModelUnavailable(f"transformers is not installed ({INSTALL_HINTS['transformers']})",
                               code="dependency_missing") from None
    except Exception as exc:
        raise ModelUnavailable(f"transformers fails to import ({type(exc).__name__}); reinstall it",
                               code="dependency_missing") from None
    return transformers


def resolve_device_dtype(device: str, dtype: str) -> tuple[str, str]:
    """"auto" -> cuda when available, else cpu; dtype "auto" -> float32 on cpu, bf16/fp16 on a GPU."""
    torch = _import_torch()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        raise ModelUnavailable("device cuda is not available (no CUDA GPU, or a CPU-only torch build)",
                               code="device_unavailable")
    elif device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ModelUnavailable("device mps is not available (needs Apple silicon and an MPS torch build)",
                               code="device_unavailable")
    elif device not in ("cpu", "cuda", "mps"):
        raise ModelUnavailable(f"unknown device {device!r}", code="device_unavailable")
    if dtype == "auto":
        if device == "cpu":
            dtype = "float32"
        elif device == "cuda" and torch.cuda.is_bf16_supported():
            dtype = "bfloat16"
        else:
            dtype = "float16"
    elif dtype not in _DTYPES:
        raise ModelUnavailable(f"unknown dtype {dtype!r}", code="dtype_unavailable")
    elif dtype == "bfloat16" and device == "cuda" and not torch.cuda.is_bf16_supported():
        raise ModelUnavailable("dtype bfloat16 is not supported by this GPU; use float16", code="dtype_unavailable")
    return device, dtype


def _cache_kwarg() -> str:
    """generate()'s name for a caller's KV cache: ``cache`` in transformers 5.x, ``past_key_values`` before."""
    from transformers.generation import utils

    return "cache" if "cache" in getattr(utils, "ALL_CACHE_NAMES", ()) else "past_key_values"


class _StopWhen:
    """StoppingCriteria: deadline/cancel, or the text after the prompt is a complete JSON value."""

    def __init__(self, request: ModelRequest, prompt_len: int, decode, started: float):
        self.request, self.prompt_len, self.decode = request, prompt_len, decode
        self.reason: str | None = None
        self.json_end: int | None = None
        self.first_token_at: float | None = None
        self.started = started

    def __call__(self, input_ids, scores=None, **kwargs):
        import torch

        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        stop = self.request.should_stop()
        if stop:
            self.reason = stop
        else:
            text = self.decode(input_ids[0, self.prompt_len:])
            end = complete_json_end(text)
            if end is not None:
                self.reason, self.json_end = "stop", end
        return torch.full((input_ids.shape[0],), self.reason is not None, dtype=torch.bool,
                          device=input_ids.device)


class TransformersPolicy(ContinuationPolicy):
    """A causal LM in transformers behind the one-method Policy seam."""

    def __init__(self, loc: ModelLocation, device: str = "auto", dtype: str = "auto", max_context: int | None = None):
        torch = _import_torch()
        transformers = _import_transformers()
        self._torch = torch
        self.device, self.dtype = resolve_device_dtype(device, dtype)
        self._lock = threading.Lock()
        self._cache: Any = None  # DynamicCache of the last call
        self._cache_ids: list[int] = []  # the tokens whose keys/values that cache holds
        self._cache_kwarg = _cache_kwarg()
        source = str(loc.folder)
        kwargs: dict[str, Any] = {"local_files_only": True, "trust_remote_code": False}
        if loc.kind == "gguf":
            kwargs["gguf_file"] = loc.path.name
        started = time.perf_counter()
        try:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(source, **kwargs)
            self.model = transformers.AutoModelForCausalLM.from_pretrained(
                source, dtype=getattr(torch, self.dtype), **kwargs)
            self.model.to(self.device)
            self.model.eval()
        except ModelUnavailable:
            raise
        except ImportError as exc:  # e.g. the gguf package for gguf_file=
            raise ModelUnavailable(f"{loc.name}: transformers needs a missing package to load it "
                                   f"({type(exc).__name__}; pip install gguf for GGUF files)",
                                   code="dependency_missing") from None
        except Exception as exc:
            needed = _PIP_HINT.search(str(exc))  # transformers names missing extras as "pip install X"
            if needed:
                raise ModelUnavailable(f"{loc.name}: transformers needs another package to load it "
                                       f"({needed.group(0)})", code="dependency_missing") from None
            raise ModelUnavailable(f"{loc.name}: transformers could not load the model ({type(exc).__name__}: "
                                   "corrupt weights, unsupported architecture or missing files)",
                                   code="weights_unreadable") from None
        self.load_ms = (time.perf_counter() - started) * 1000
        if not getattr(self.tokenizer, "chat_template", None):
            raise ModelUnavailable(f"{loc.name}: the tokenizer has no chat template", code="no_chat_template")
        config = self.model.config
        self.max_context = max_context or getattr(config, "max_position_embeddings", None) or 32768
        eos = {self.tokenizer.eos_token_id}
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in self.tokenizer.get_vocab() else None
        eos |= {im_end} if im_end is not None else set()
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        eos |= set(gen_eos) if isinstance(gen_eos, (list, tuple)) else ({gen_eos} if gen_eos is not None else set())
        self.eos_ids = sorted(i for i in eos if isinstance(i, int) and i >= 0)
        self.description = ModelDescription(
            name=loc.name, backend="transformers", path_hash=loc.path_hash, device=self.device, dtype=self.dtype,
            details={"kind": loc.kind, "architecture": getattr(config, "model_type", None),
                     "max_context": self.max_context, "load_ms": round(self.load_ms, 1), "grammar": False},
        )

    def render_prompt(self, request: ModelRequest) -> str:
        try:
            rendered = self.tokenizer.apply_chat_template(request.messages, add_generation_prompt=True, tokenize=False)
        except Exception as exc:
            raise ModelUnavailable(f"{self.description.name}: the chat template failed to render "
                                   f"({type(exc).__name__})", code="chat_template_failed") from None
        return rendered + request.prefix

    def _decode(self, ids) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def generate(self, request: ModelRequest) -> Generation:
        with self._lock:
            if self.model is None:
                raise ModelUnavailable(f"{self.description.name} was unloaded", code="model_unloaded")
            return self._generate(request)

    def _generate(self, request: ModelRequest) -> Generation:
        torch = self._torch
        from transformers import GenerationConfig, StoppingCriteriaList

        started = time.perf_counter()
        encoded = self.tokenizer(self.render_prompt(request), add_special_tokens=False, return_tensors="pt")
        input_ids = encoded["input_ids"].to(self.device)
        prompt_len = int(input_ids.shape[1])
        budget = min(request.max_new_tokens, self.max_context - prompt_len)
        if budget < 1:
            raise ContextOverflow(f"the prompt has {prompt_len} tokens; with {request.max_new_tokens} to "
                                  f"generate it exceeds the model context of {self.max_context} tokens")

        reused = 0

        def done(text: str, out: int, reason: str, prefill_ms: float | None) -> Generation:
            return Generation(text=text, input_tokens=prompt_len, output_tokens=out,
                              latency_ms=(time.perf_counter() - started) * 1000, finish_reason=reason,
                              cached_tokens=reused, prompt_eval_ms=prefill_ms)

        reason = request.should_stop()
        if reason:
            return done("", 0, reason, None)
        cache, reused = self._reusable_cache(input_ids[0].tolist())
        sampling = request.temperature > 0
        config = GenerationConfig(
            max_new_tokens=budget, do_sample=sampling, temperature=request.temperature if sampling else None,
            top_p=request.top_p if sampling else None, top_k=request.top_k if sampling else None,
            eos_token_id=self.eos_ids or None,
            pad_token_id=self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else (
                self.eos_ids[0] if self.eos_ids else None),
        )
        if sampling and request.seed is not None:
            torch.manual_seed(request.seed)
        stop = _StopWhen(request, prompt_len, self._decode, started)
        self._cache, self._cache_ids = None, []  # a failed call leaves no half-written cache behind
        with torch.inference_mode():
            output = self.model.generate(
                input_ids=input_ids, attention_mask=encoded["attention_mask"].to(self.device),
                generation_config=config, stopping_criteria=StoppingCriteriaList([stop]),
                **{self._cache_kwarg: cache},
            )
        self._cache, self._cache_ids = cache, output[0, :cache.get_seq_length()].tolist()
        new = output[0, prompt_len:].tolist()
        hit_eos = bool(new) and new[-1] in self.eos_ids
        if hit_eos:
            new = new[:-1]
        text = self._decode(new)
        if stop.reason == "stop" and stop.json_end is not None:
            text, finish = text[: stop.json_end], "stop"
        elif stop.reason:
            finish = stop.reason
        elif hit_eos:
            finish = "stop"
        else:
            finish = "length"
        prefill_ms = (stop.first_token_at - started) * 1000 if stop.first_token_at else None
        return done(text, len(new), finish, prefill_ms)

    def _reusable_cache(self, ids: list[int]) -> tuple[Any, int]:
        """The last call's cache cropped to its common prefix with ``ids`` (at least one token left to run)."""
        from transformers import DynamicCache

        common = 0
        limit = min(len(ids) - 1, len(self._cache_ids))
        while common < limit and ids[common] == self._cache_ids[common]:
            common += 1
        if self._cache is None or common == 0:
            try:
                return DynamicCache(config=self.model.config), 0
            except TypeError:  # transformers 4.x: no config argument
                return DynamicCache(), 0
        surplus = self._cache.get_seq_length() - common
        if surplus > 0:
            self._cache.crop(-surplus)  # a negative count removes that many tokens from the end
        return self._cache, common

    def close(self) -> None:
        with self._lock:
            self.model = None
            self.tokenizer = None
            self._cache, self._cache_ids = None, []


def load(loc: ModelLocation, device: str = "auto", dtype: str = "auto", **options: Any) -> TransformersPolicy:
    return TransformersPolicy(loc, device=device, dtype=dtype, **options)
