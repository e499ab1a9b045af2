"""The llama.cpp backend's sampler: the next token from the model's logits, with the grammar of the
request's value (``guidance``) applied lazily, only where the model's own choice breaks it.
"""

from __future__ import annotations

import ctypes
from typing import Any

from agent.models.model_policy import ModelRequest


class Sampler:
    """Greedy (temperature 0) or temperature/top-k/top-p sampling, with the grammar applied lazily.

    The stages run in transformers' order (temperature first, then top-k and top-p), so
    ``top_p``/``top_k`` mean what they mean in a model's ``generation_config.json``.

    The token is first sampled from the model's own distribution and only checked against the
    grammar; the grammar's mask is applied to all ~150k logits (and the token sampled again) only
    when that token is not allowed. Both ways draw from the same masked distribution. Every token
    accepted is one the grammar allows; an end-of-turn token ends the value only where the grammar
    could end it.
    """

    def __init__(self, lc: Any, llm: Any, matcher: Any, request: ModelRequest, is_eog: Any):
        import random

        from llama_cpp._internals import LlamaTokenDataArray

        self.lc, self.llm, self.n_vocab = lc, llm, llm.n_vocab()
        self.matcher, self.is_eog = matcher, is_eog
        self.chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
        if request.temperature > 0:
            seed = request.seed if request.seed is not None else random.getrandbits(32)
            for stage in (lc.llama_sampler_init_temp(request.temperature), lc.llama_sampler_init_top_k(request.top_k),
                          lc.llama_sampler_init_top_p(request.top_p, 1), lc.llama_sampler_init_dist(seed)):
                lc.llama_sampler_chain_add(self.chain, stage)
        else:
            lc.llama_sampler_chain_add(self.chain, lc.llama_sampler_init_greedy())
        self.full = LlamaTokenDataArray(n_vocab=self.n_vocab) if matcher is not None else None
        self.resampled = 0

    def sample(self, row: int = -1) -> int | None:
        """The next token from the logits of the last batch's ``row``, or None when the grammar
        allows nothing (a dead end)."""
        lc = self.lc
        ctx = self.llm._ctx.ctx  # the context now: a generation may grow it (``llama_cpp_context.grow``)
        token = int(lc.llama_sampler_sample(self.chain, ctx, row))
        if self.matcher is None:
            return token
        if self.is_eog(token) and self.matcher.accepting:
            return token
        if not self.matcher.allows(token):
            import numpy as np

            self.resampled += 1
            mask = self.matcher.allowed_mask(self.n_vocab)
            if not mask.any():
                return None
            logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, row), shape=(self.n_vocab,)).copy()
            logits[~mask] = -np.inf
            self.full.copy_logits(logits)
            self.full.candidates.selected = -1
            lc.llama_sampler_apply(self.chain, ctypes.byref(self.full.candidates))
            chosen = int(self.full.candidates.selected)
            if not 0 <= chosen < int(self.full.candidates.size):
                return None
            token = int(self.full.candidates_data.id[chosen])
            if not np.isfinite(self.full.candidates_data.logit[chosen]) or not self.matcher.allows(token):
                return None
        self.matcher.accept(token)
        return token

    def close(self) -> None:
        if self.chain:
            self.lc.llama_sampler_free(self.chain)
        self.chain = None
