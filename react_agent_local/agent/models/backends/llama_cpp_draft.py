"""Speculative decoding for the llama.cpp backend: drafts of what the model may write next, taken from
the request's evidence (``ModelRequest.drafts``), evaluated in one batch with the token before them and
kept as far as the tokens sampled agree (``LlamaCppPolicy._generate``). A draft never changes what
is sampled; it only saves the decode calls of the tokens it guessed right.
"""

from __future__ import annotations

from typing import Any

#: Tokens proposed per draft: a batch of 1 + 8 costs the 1.5B ~2.3 single-token decodes on 2 cores
#: and a draft of the evidence the model copies mostly holds. (Drafts looked up in the prompt itself,
#: prompt-lookup decoding, held too rarely here to pay for their batches: measured and left out.)
DRAFT_TOKENS = 8


class Drafter:
    """Proposes the tokens that may come next: where the last few tokens written occur in one of the
    request's drafts (the evidence the model is expected to copy), the tokens after them there."""

    def __init__(self, drafts: list[list[int]]):
        self.drafts = [d for d in drafts if d]
        self._next: dict[tuple[int, ...], tuple[int, int]] = {}
        for k, seq in enumerate(self.drafts):
            for n in (1, 2, 3):
                for i in range(len(seq) - n):
                    self._next.setdefault(tuple(seq[i:i + n]), (k, i + n))
        self.written: list[int] = []

    def propose(self, matcher: Any, limit: int) -> list[int]:
        """A draft of at most ``limit`` tokens that the grammar (if any) admits; may be empty."""
        if not self._next:
            return []
        draft: list[int] = []
        for n in (3, 2, 1):
            hit = self._next.get(tuple(self.written[-n:])) if len(self.written) >= n else None
            if hit is not None:
                k, at = hit
                draft = self.drafts[k][at:at + min(DRAFT_TOKENS, limit)]
                break
        if draft and matcher is not None:
            draft = draft[:matcher.valid_prefix(draft)]
        return draft


def decode_batch(llm: Any, batch: list[int], logits_from: int) -> None:
    """Evaluate ``batch`` after the tokens in the KV cache, with logits for every position from
    ``logits_from`` on (``Llama.eval`` keeps only the last one)."""
    n_past = llm.n_tokens
    llm._ctx.kv_cache_seq_rm(-1, n_past, -1)
    llm._batch.set_batch(batch=batch, n_past=n_past, logits_all=False)
    for i in range(max(0, logits_from), len(batch)):
        llm._batch.batch.logits[i] = True
    llm._ctx.decode(llm._batch)
    llm.input_ids[n_past:n_past + len(batch)] = batch
    llm.n_tokens = n_past + len(batch)


def truncate(llm: Any, keep: int) -> None:
    """Forget the KV cache after its first ``keep`` tokens (a draft that was not kept)."""
    if keep < llm.n_tokens:
        llm._ctx.kv_cache_seq_rm(-1, keep, -1)
        llm.n_tokens = keep
