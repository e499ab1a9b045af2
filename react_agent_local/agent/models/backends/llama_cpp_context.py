"""The llama.cpp context's state, apart from the policy that generates with it: kept across an aside
and put back (``snapshot``, ``reinstate``), moved into a larger context when the conversation outgrows
it (``grow``), and the system message's state read from and written to the prefix cache
(``restore_prefix``, ``save_prefix``).

Every function takes the ``Llama`` (``llm``) and the ``llama_cpp`` module (``lc``) it works on. A
state that cannot be put back is never half used: the KV cache is emptied and the next prompt is
evaluated in full (slower, never a wrong state).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from agent.models.backends.prefix_cache import PrefixCache
from agent.util.paths import user_cache

#: A context that must grow is made large enough for the tokens about to be evaluated and
#: ``GROW_AHEAD`` more, rounded up to ``GROW_STEP``. Grown for a generation's whole ``max_new_tokens``
#: and doubled, the 0.5B's default run read a 2048-token prompt into a 4096-token context to write 48
#: tokens (the KV cache and the attention buffers of the unused half: 21 MiB of its 678 MiB peak).
GROW_AHEAD = 256
GROW_STEP = 512

#: What ``snapshot`` keeps: the evaluated tokens, the state's buffer and its size in bytes
Kept = tuple[list[int], Any, int]


def snapshot(llm: Any, lc: Any) -> Kept | None:
    """The evaluated conversation (its tokens and the context's state), to keep across an aside.
    The state stays in the one buffer llama.cpp wrote it to (a long conversation's state is
    ~100 MB on the 1.5B: converting it would hold it twice, or, sliced, as a list of ints)."""
    size = lc.llama_state_get_size(llm._ctx.ctx)
    buffer = (ctypes.c_uint8 * size)()
    written = lc.llama_state_get_data(llm._ctx.ctx, buffer, size)
    if not 0 < written <= size:
        return None
    return list(llm.input_ids[: llm.n_tokens]), buffer, written


def reinstate(llm: Any, lc: Any, kept: Kept | None) -> None:
    """Put back what ``snapshot`` kept; when it cannot, the cache is emptied."""
    if kept is not None:
        tokens, buffer, size = kept
        if lc.llama_state_set_data(llm._ctx.ctx, buffer, size) == size:
            llm.input_ids[:len(tokens)] = tokens
            llm.n_tokens = len(tokens)
            return
    llm.reset()
    llm._ctx.kv_cache_seq_rm(-1, 0, -1)


def grow(llm: Any, lc: Any, need: int, most: int) -> None:
    """Make the context hold ``need`` tokens: when it is smaller, a context of ``need`` and
    ``GROW_AHEAD`` tokens (rounded up to ``GROW_STEP``, at most ``most``) takes its place, with the
    evaluated conversation's state moved into it (llama.cpp's state holds the cells in use, whatever
    the context's size). The generation's sampler reads the context anew at each token."""
    size = llm.n_ctx()
    if need <= size:
        return
    import numpy as np
    from llama_cpp import _internals

    grown = min(most, -(-(need + GROW_AHEAD) // GROW_STEP) * GROW_STEP)
    with _parking() as parked:
        # The state waits in a file, not in memory: held in memory beside the old context it was the
        # 0.5B's default run's peak (+15 MiB, the state of 2048 tokens).
        moved = parked is not None and llm.n_tokens > 0 and park_state(llm, lc, parked)
        kept = snapshot(llm, lc) if llm.n_tokens and not moved else None
        llm._ctx.close()  # before the larger one is made: the two caches are never resident together
        llm.context_params.n_ctx = grown
        llm._ctx = llm._stack.enter_context(contextlib.closing(
            _internals.LlamaContext(model=llm._model, params=llm.context_params, verbose=False)))
        llm._n_ctx = llm._ctx.n_ctx()
        input_ids = np.zeros(llm._n_ctx, dtype=np.intc)
        n = llm.n_tokens
        input_ids[:n] = llm.input_ids[:n]
        llm.input_ids = input_ids
        if not moved:
            reinstate(llm, lc, kept)
        elif not unpark_state(llm, lc, parked, input_ids[:n]):
            reinstate(llm, lc, None)  # the file did not read back: the next prompt is evaluated in full


def park_state(llm: Any, lc: Any, path: Path) -> bool:
    """Write the context's state and its tokens to ``path`` (llama.cpp streams it tensor by tensor)."""
    n = llm.n_tokens
    tokens = (lc.llama_token * n)(*llm.input_ids[:n])
    return bool(lc.llama_state_save_file(llm._ctx.ctx, os.fsencode(path), tokens, n))


def unpark_state(llm: Any, lc: Any, path: Path, expected: Any) -> bool:
    """Read back what ``park_state`` wrote; False unless it holds exactly the ``expected`` tokens."""
    n = len(expected)
    tokens = (lc.llama_token * max(1, n))()
    count = ctypes.c_size_t(0)
    if not lc.llama_state_load_file(llm._ctx.ctx, os.fsencode(path), tokens, n, ctypes.byref(count)):
        return False
    if count.value != n or list(tokens[:n]) != [int(t) for t in expected]:
        return False
    llm.n_tokens = n
    return True


def scratch_folder() -> Path:
    """Where a context's state waits while the context is made anew (``_parking``)."""
    return user_cache("scratch")


@contextlib.contextmanager
def _parking() -> Iterator[Path | None]:
    """A private file for a context's state while the context is made anew (None where no folder of the
    user's cache can hold it: the state then waits in memory). Removed afterwards, whatever happened."""
    folder = scratch_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        handle, name = tempfile.mkstemp(prefix="kv-", suffix=".state", dir=folder)
    except OSError:
        yield None
        return
    os.close(handle)
    try:
        yield Path(name)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


def restore_prefix(llm: Any, lc: Any, cache: PrefixCache, tokens: list[int], static: int, cached: int = 0) -> int:
    """Load the saved state of the longest saved prefix (at most the static part) when it is longer
    than the ``cached`` tokens the KV cache holds of ``tokens``; its length (0: nothing loaded)."""
    saved = cache.lookup(tokens, limit=static)
    if saved is None or len(saved.tokens) <= cached:
        return 0
    # llama.cpp reads the state where the file's bytes already are (a copy would be a second state)
    source = ctypes.cast(ctypes.c_char_p(saved.state), ctypes.POINTER(ctypes.c_uint8))
    if lc.llama_state_set_data(llm._ctx.ctx, source, len(saved.state)) != len(saved.state):
        llm.reset()  # refused: whatever it left in the cache is cleared and the prompt evaluated
        llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        return 0
    n = len(saved.tokens)
    llm.input_ids[:n] = saved.tokens
    llm.n_tokens = n
    return n


def save_prefix(llm: Any, lc: Any, cache: PrefixCache, prefix: list[int]) -> None:
    """Store the context's state, which holds exactly ``prefix``, in the prefix cache."""
    size = lc.llama_state_get_size(llm._ctx.ctx)
    buffer = (ctypes.c_uint8 * size)()
    written = lc.llama_state_get_data(llm._ctx.ctx, buffer, size)
    if 0 < written <= size:
        # string_at copies the bytes once; slicing a ctypes array builds a list of Python ints
        # (8 bytes a byte: a 45 MiB peak for the 0.5B's 6 MB state)
        cache.store(prefix, ctypes.string_at(buffer, written))
