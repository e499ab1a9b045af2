"""Generate ``schemas/decision.schema.json`` (contracts.py) and ``schemas/tool_registry.json`` (the
package's tool registry).

The committed files are derived, never hand-edited: ``python -m agent schemas --write`` rewrites
them and a test fails if they drift from the code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.contracts.decision import DECISION_ADAPTER
from agent.util.paths import PACKAGE_ROOT

SCHEMAS_DIR = PACKAGE_ROOT / "schemas"


def decision_schema() -> dict[str, Any]:
    schema = DECISION_ADAPTER.json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "Decision", **schema}


def tool_registry() -> dict[str, Any]:
    from agent.tools import catalog

    return {"tools": catalog().describe()}


def rendered() -> dict[str, str]:
    return {
        "decision.schema.json": json.dumps(decision_schema(), indent=2, ensure_ascii=False) + "\n",
        "tool_registry.json": json.dumps(tool_registry(), indent=2, ensure_ascii=False) + "\n",
    }


def write_schemas() -> list[Path]:
    SCHEMAS_DIR.mkdir(exist_ok=True)
    paths = []
    for name, text in rendered().items():
        path = SCHEMAS_DIR / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def check_schemas() -> list[str]:
    """Names of committed schema files that differ from what the code generates."""
    drift = []
    for name, text in rendered().items():
        path = SCHEMAS_DIR / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            drift.append(name)
    return drift
