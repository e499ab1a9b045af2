"""Canonical JSON: one text for one value (keys sorted, no spaces, Unicode kept), so that equal
values compare, hash and sign alike wherever the package writes them."""

from __future__ import annotations

import json
from typing import Any


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON text; a value JSON has no type for is written as its ``str``."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
