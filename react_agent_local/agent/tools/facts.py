"""lookup_fact: look a named fact up in the pack's fact base.

The fact base is data of the pack, ``knowledge/facts.json``::

    {"facts": {"台北人口": {"value": 2602000, "unit": "people", "aliases": ["Taipei population"]}}}

A query matches a fact by its name or an alias after NFKC normalisation, lowercasing and removing
spaces and punctuation; failing that, by containment either way (``台北市人口`` does not match, but
``台北人口 2024`` finds ``台北人口``) when exactly one fact matches. An unknown query is a structured,
non-retryable ``unknown_fact`` error that lists the known fact names, so the model can recover.

A result holds the fact found and ``looked_up``: every fact this run has looked up so far (name ->
value, kept in the run's folder), so a check can read them all from the latest lookup. For one
pack's fact base the tool can be bound to its names (``bound_tool``; a run's registry gets it from
``tools.with_fact_names``): ``query`` is then a choice among them in the schema and the decoding grammar.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import unicodedata
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, create_model

from agent.tools.base import StrictArgs, Tool, ToolContext, ToolError

FACTS_FILE = "facts.json"
MAX_FACTS_BYTES = 256 * 1024
LOOKED_UP_FILE = "lookup_fact.looked_up.json"
MAX_CHOICES = 64  # fact names offered as a grammar choice; a bigger fact base is asked by free text


class LookupFactArgs(StrictArgs):
    """Look up one named fact (e.g. a population) in the pack's fact base; returns its value."""

    query: str = Field(min_length=1, max_length=100, description="The fact's name, e.g. 台北人口.")


def _key(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in text if c.isalnum())


def load_facts(knowledge_dir: Path) -> dict[str, dict[str, Any]]:
    path = Path(knowledge_dir) / FACTS_FILE
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FACTS_BYTES:
                raise ToolError("facts_read_failed", f"{FACTS_FILE} is not a regular file of at most 256 KiB")
            with os.fdopen(fd, "rb", closefd=False) as handle:
                raw = handle.read(MAX_FACTS_BYTES + 1)
        finally:
            os.close(fd)
        facts = json.loads(raw.decode("utf-8"))["facts"]
    except ToolError:
        raise
    except FileNotFoundError:
        raise ToolError("facts_read_failed", f"the pack has no {FACTS_FILE}") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ToolError("facts_read_failed", f"{FACTS_FILE} could not be read ({type(exc).__name__})") from None
    if not isinstance(facts, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("value"), (int, float)) for v in facts.values()):
        raise ToolError("facts_read_failed", f"{FACTS_FILE}: every fact needs a numeric 'value'")
    return facts


def lookup(facts: dict[str, dict[str, Any]], query: str) -> str:
    """The name of the fact ``query`` asks for; ToolError ``unknown_fact`` when none or several match."""
    wanted = _key(query)
    names = {name: [_key(name)] + [_key(a) for a in facts[name].get("aliases", []) if isinstance(a, str)]
             for name in facts}
    exact = [name for name, keys in names.items() if wanted in keys]
    if len(exact) == 1:
        return exact[0]
    near = [name for name, keys in names.items() if wanted and any(k and (k in wanted or wanted in k) for k in keys)]
    if len(near) == 1:
        return near[0]
    known = ", ".join(list(facts)[:20])
    raise ToolError("unknown_fact", f"no fact matches the query; known facts: {known}", retryable=False)


def looked_up(artifact_dir: Path) -> dict[str, int | float]:
    """The facts this run has looked up so far (name -> value, in lookup order); empty when none yet
    (or the list is unreadable). The calculator resolves ``facts['name']`` from it."""
    try:
        fd = os.open(Path(artifact_dir) / LOOKED_UP_FILE, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as handle:
            loaded = json.loads(handle.read(MAX_FACTS_BYTES).decode("utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(loaded, dict):
        return {}
    return {k: v for k, v in loaded.items() if isinstance(k, str) and isinstance(v, (int, float))
            and not isinstance(v, bool)}


def _looked_up(artifact_dir: Path, name: str, value: int | float) -> dict[str, int | float]:
    """Every fact this run has looked up so far, this one included (kept in the run's folder), so a
    check can read all of them from the latest lookup: ``facts["Lisbon population"]``."""
    path = Path(artifact_dir) / LOOKED_UP_FILE
    seen = looked_up(artifact_dir)  # none yet (or unreadable): this lookup starts the list
    seen.pop(name, None)
    seen[name] = value  # latest last
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{LOOKED_UP_FILE}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(seen, ensure_ascii=False), encoding="utf-8")
        os.replace(temporary, path)
    except OSError:
        pass  # the result still holds what is known; only later lookups see less
    return seen


def _execute(ctx: ToolContext, args: Any, cancel: threading.Event) -> dict[str, Any]:
    facts = load_facts(ctx.knowledge_dir)
    name = lookup(facts, args.query)
    fact = facts[name]
    return {"query": args.query, "fact": name, "value": fact["value"], "unit": str(fact.get("unit", ""))[:40],
            "source_id": FACTS_FILE, "looked_up": _looked_up(ctx.artifact_dir, name, fact["value"])}


TOOL = Tool(
    name="lookup_fact",
    args_model=LookupFactArgs,
    execute=_execute,
    timeout_seconds=2.0,
    digest=lambda r: [r.get("fact"), r.get("value")],
    render=lambda r: f"{r.get('fact')} = {r.get('value')}" + (f" {r['unit']}" if r.get("unit") else ""),
    hint="Ask for exactly one fact by its name.",
    summary="A fact the task needs is missing: look it up.",
    covers=lambda r: r.get("fact"),
    import_path="agent.tools.facts:TOOL",
    # Not read-only: each lookup rewrites the run's list of facts looked up so far (``_looked_up``) and
    # returns it, and a check reads that list from the latest lookup. Two lookups at once would race
    # on the file, and the later Observation need not list the other's fact.
    read_only=False,
)


# -- the fact names as a grammar choice --------------------------------------------------------------


def bound_tool(knowledge_dir: Path) -> Tool:
    """``lookup_fact`` for one fact base: ``query`` is one of its fact names (an enum in the schema,
    so the decoding grammar offers exactly those and a small model cannot misspell one); a name
    outside it is an argument rejection naming the choices. Runs in a thread (it is no import path)."""
    facts = load_facts(knowledge_dir)
    names = tuple(facts)
    if not names or len(names) > MAX_CHOICES:
        return TOOL
    model = create_model("LookupFactArgs", __base__=StrictArgs, __doc__=LookupFactArgs.__doc__,
                         query=(Literal[names], Field(description="The fact's name, one of the fact base's.")))
    return replace(TOOL, args_model=model, import_path=None)
