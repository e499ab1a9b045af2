"""Constrained decoding with llguidance: the one JSON value a step asks for, forced text in batches.

Each step the runtime asks a local model for one JSON value that matches a schema -- a tool's
arguments, the Final's answer (an answer form is a ``pattern``), or free mode's whole Decision.
llguidance compiles that schema into a grammar over the model's own tokens and, token by token, says
which tokens may come next (a bitmask, computed in microseconds) and which tokens are *forced*: the
only continuation the grammar admits, such as an answer form's literal text, a key name or a closing
bracket. Forced tokens are not sampled one by one at generation speed; the backend evaluates them in
one batch at prompt speed (jump-forward decoding) and counts them as ``forced_tokens``.

Token boundaries are llguidance's business: ``compute_ff_tokens`` forwards only tokens that no longer
token could replace (a forced segment that ends inside a longer token is left to sampling), so the
text is tokenized as the model itself would have.

JSON is laid out the way the runtime writes its prefixes (``", "`` between items, ``": "`` after keys,
no other whitespace), so the layout is forced too. A value that follows a prefix ending in ``:``
starts with the space the model would naturally write there.
"""

from __future__ import annotations

import json
from typing import Any

from agent.models.model_policy import ModelUnavailable
from agent.models.backends.base import INSTALL_HINTS

JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _import_llguidance():
    try:
        import llguidance
        import llguidance.llamacpp
    except ImportError:
        raise ModelUnavailable(f"llguidance is not installed ({INSTALL_HINTS['llama_cpp']})",
                               code="dependency_missing") from None
    return llguidance


def value_grammar(schema: dict[str, Any], lead: str = "", code_field: str | None = None,
                  code_only: bool = False) -> str:
    """A Lark grammar (llguidance's dialect) for ``lead`` then one JSON value matching ``schema``.

    With ``code_field`` (a string property of an object ``schema``) the JSON object holds the other
    properties and the code follows it in a fenced block, ended by the closing fence (a ``stop``: the
    code itself is free text). With ``code_only`` the whole text is a block's body (the prompt
    opened the block) matching ``schema``, a string schema, and the closing fence ends it."""
    from agent.models.model_policy import CODE_FENCE, CODE_FENCE_END

    if code_only:
        return "start: body\n" + _body_rule(schema, CODE_FENCE_END)
    if code_field is not None:
        field_schema = (schema.get("properties") or {}).get(code_field) or {}
        properties = {k: v for k, v in (schema.get("properties") or {}).items() if k != code_field}
        required = [k for k in schema.get("required", []) if k != code_field]
        schema = {**schema, "properties": properties, "required": required}
    body = {**schema, "x-guidance": JSON_LAYOUT}
    code = " code" if code_field is not None else ""
    start = f"start: {json.dumps(lead)} value{code}\n" if lead else f"start: value{code}\n"
    grammar = start + "value: %json " + json.dumps(body, ensure_ascii=False)
    if code_field is not None:
        grammar += f"\ncode: {json.dumps(CODE_FENCE)} body\n" + _body_rule(field_schema, CODE_FENCE_END)
    return grammar


def _body_rule(field_schema: dict[str, Any], end: str) -> str:
    """A code block's body: the field's own pattern where it has one (anchors dropped: the fences
    anchor it), ended by the closing fence."""
    pattern = str(field_schema.get("pattern") or "^(.|\\n)*$")
    pattern = pattern[1:] if pattern.startswith("^") else pattern
    pattern = pattern[:-1] if pattern.endswith("$") and not pattern.endswith("\\$") else pattern
    return f"body[stop={json.dumps(end)}]: /{pattern.replace('/', chr(92) + '/')}/"


def without_lengths_beside_patterns(node: Any) -> Any:
    """``node`` with ``minLength``/``maxLength`` dropped from every string schema that has a ``pattern``."""
    if isinstance(node, list):
        return [without_lengths_beside_patterns(v) for v in node]
    if not isinstance(node, dict):
        return node
    drop = ("minLength", "maxLength") if "pattern" in node else ()
    return {k: without_lengths_beside_patterns(v) for k, v in node.items() if k not in drop}


def without_patterns(node: Any) -> Any:
    """``node`` with every string schema's ``pattern`` dropped (a property named ``pattern`` stays)."""
    if isinstance(node, list):
        return [without_patterns(v) for v in node]
    if not isinstance(node, dict):
        return node
    return {k: without_patterns(v) for k, v in node.items() if not (k == "pattern" and isinstance(v, str))}


class Guidance:
    """One model's tokenizer as llguidance sees it (built once, ~1 s) and its compiled grammars."""

    def __init__(self, vocab: Any, eos_token: int | None = None):
        import warnings

        llguidance = _import_llguidance()
        self._lib = llguidance
        with warnings.catch_warnings():  # its bridge calls a llama.cpp function deprecated in 0.3.36, once per token
            warnings.simplefilter("ignore", DeprecationWarning)
            # No slicer: its per-slice token tries cost tens of MiB resident for a large vocabulary and
            # speed up only full masks inside free strings, which the lazy sampler computes only when a
            # sampled token is refused; building is also faster without them.
            self.tokenizer = llguidance.llamacpp.lltokenizer_from_vocab(vocab, eos_token=eos_token, slices=[])
        self._grammars: dict[str, str | None] = {}
        self._levels: dict[str, str] = {}
        self.failures = 0  # schemas with no grammar at all: those requests ran unconstrained
        self.relaxed = 0  # schemas constrained without their lengths or patterns

    def grammar(self, schema: dict[str, Any] | None, lead: str = "", code_field: str | None = None,
                code_only: bool = False) -> str | None:
        """The checked grammar for ``schema`` (cached); None when absent or when it does not compile."""
        return self.constrained(schema, lead, code_field, code_only)[0]

    def constrained(self, schema: dict[str, Any] | None, lead: str = "", code_field: str | None = None,
                    code_only: bool = False) -> tuple[str | None, str | None]:
        """``grammar``'s result and how it constrains the value: ``full``, ``relaxed`` (without the
        schema's lengths or patterns), ``none`` (nothing compiled: unconstrained); None without a schema."""
        if schema is None:
            return None, None
        key = lead + json.dumps(schema, sort_keys=True) + f"|code={code_field}|only={code_only}"
        if key not in self._grammars:
            # A long pattern intersected with a length bound can exceed what llguidance decides
            # ("unable to determine if regex is empty"): then the pattern alone constrains the
            # value, and the runtime's validator (and max_new_tokens) still enforce the lengths.
            # A pattern past what it compiles at all is dropped: the value is still one JSON value
            # of the schema's shape, and the validator still holds it to the pattern (unconstrained,
            # a small model may write no JSON at all).
            candidates = (schema, without_lengths_beside_patterns(schema), without_patterns(schema))
            for number, candidate in enumerate(candidates):
                grammar = value_grammar(candidate, lead, code_field, code_only)
                if self._compiles(grammar):
                    break
            else:
                number, grammar = len(candidates), None
            self.failures += number == len(candidates)
            self.relaxed += 0 < number < len(candidates)
            self._grammars[key] = grammar
            self._levels[key] = "full" if number == 0 else "none" if grammar is None else "relaxed"
        return self._grammars[key], self._levels[key]

    def _compiles(self, grammar: str) -> bool:
        try:
            is_error, _messages = self._lib.LLMatcher.validate_grammar_with_warnings(grammar, self.tokenizer)
        except Exception:  # a construct the compiler rejects outright
            return False
        return not is_error

    def matcher(self, grammar: str) -> "Matcher":
        # silent: the one warning a generation can raise is a sampled token that runs past a code
        # block's closing fence ("can't backtrack"), which the fence cut handles; errors stay in
        # the matcher's state, where ``accept`` reads them
        return Matcher(self._lib.LLMatcher(self.tokenizer, grammar, log_level=0), self.tokenizer.vocab_size)


class Matcher:
    """Where one generation stands in its grammar."""

    def __init__(self, matcher: Any, vocab_size: int):
        self._m = matcher
        self.vocab_size = vocab_size
        if matcher.is_error():
            raise ModelUnavailable("the grammar failed to compile", code="grammar_failed")

    def allows(self, token: int) -> bool:
        return 0 <= token < self.vocab_size and self.valid_prefix([token]) == 1

    def allowed_mask(self, n_vocab: int) -> Any:
        """Boolean array over the model's ``n_vocab`` logits: True where the grammar allows the token."""
        import numpy as np

        bits = np.unpackbits(np.frombuffer(self._m.compute_bitmask(), dtype=np.uint8), bitorder="little")
        mask = np.zeros(n_vocab, dtype=bool)
        n = min(n_vocab, self.vocab_size)
        mask[:n] = bits[:n].astype(bool)
        return mask

    def valid_prefix(self, tokens: list[int]) -> int:
        """How many of ``tokens``, from the start, the grammar admits here (nothing is consumed)."""
        return int(self._m.validate_tokens(tokens)) if tokens else 0

    def accept(self, token: int) -> None:
        if not self._m.consume_token(token):
            raise ModelUnavailable("the grammar refused a token it had allowed", code="grammar_failed")

    def forced(self, limit: int) -> list[int]:
        """The tokens the grammar forces next (at most ``limit``), already accepted."""
        if limit < 1 or self._m.is_stopped():
            return []
        tokens = list(self._m.compute_ff_tokens())[:limit]
        if tokens and not self._m.consume_tokens(tokens):
            raise ModelUnavailable("the grammar refused its own forced tokens", code="grammar_failed")
        return tokens

    @property
    def accepting(self) -> bool:
        """The value may end here."""
        return bool(self._m.is_accepting())

    @property
    def stopped(self) -> bool:
        """Nothing more may follow (the value is complete)."""
        return bool(self._m.is_stopped())
