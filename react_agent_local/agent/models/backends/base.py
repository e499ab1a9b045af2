"""What the local backends share with the package that dispatches to them (``agent/backends/__init__.py``).

``llama_cpp``, ``transformers_backend`` and ``guidance`` are imported by the package to load a model
and need these few names back: the install hints their dependency errors name, ``ContextOverflow``,
and where a generation's text is complete (``complete_json_end``, ``code_block_end``). They live
here, below all of them, so no backend imports the package that imports it; the package re-exports
them as its surface.
"""

from __future__ import annotations

import json

from agent.models.model_policy import CODE_FENCE, CODE_FENCE_END, ModelUnavailable

INSTALL_HINTS = {
    "llama_cpp": "pip install llama-cpp-python==0.3.36 llguidance==1.9.1 (llama.cpp builds from source, a few minutes)",
    "torch": "pip install torch (CPU wheel) and transformers",
    "transformers": "pip install transformers",
}


class ContextOverflow(ModelUnavailable):
    """The prompt plus the tokens to generate do not fit the model's context window."""

    def __init__(self, message: str):
        super().__init__(message, code="context_overflow")


_JSON_VALUE_STARTS = frozenset('{["-0123456789tfn')


def complete_json_end(text: str) -> int | None:
    """Index just past the first complete JSON value in ``text`` (after leading space), else None.

    A number/true/false/null only counts once something follows it (``12`` may become ``123``).
    """
    stripped = text.lstrip()
    if not stripped or stripped[0] not in _JSON_VALUE_STARTS:
        return None
    try:
        value, end = json.JSONDecoder().raw_decode(stripped)
    except (ValueError, RecursionError):  # deep nesting is parse_decision's to refuse, not a crash here
        return None
    if not isinstance(value, (dict, list, str)) and end >= len(stripped):
        return None
    return len(text) - len(stripped) + end


def code_block_end(text: str) -> int | None:
    """Index just past the fence that closes the code block of a code-argument generation
    (``model_policy.CODE_FENCE`` ... ``CODE_FENCE_END``), else None."""
    start = text.find(CODE_FENCE)
    if start < 0:
        return None
    end = text.find(CODE_FENCE_END, start + len(CODE_FENCE))
    return None if end < 0 else end + len(CODE_FENCE_END)
