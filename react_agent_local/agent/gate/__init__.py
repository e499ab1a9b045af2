"""The Final gate: the claims a Final makes (numbers, comparisons, attributions, bindings, lists), read
from its text and checked against the evidence before the runtime accepts it."""
