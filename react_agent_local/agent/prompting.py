"""The model-visible state (R-RT-9) and the state-specific branch with its prefix (R-DEC-3).

The prompt is laid out append-only so consecutive steps share the longest possible prefix in the
model's KV cache: a fixed system message, then the task, then Observations in the order they were
made (the oldest drop out only after 10). Everything that changes every step --
the latest 4 feedback lines, the remaining budget and the instruction for this branch -- comes last.

Ground truth (``data/expected.json``) never reaches this module.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .contracts import TOOL_ARGUMENTS, Observation

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"
VISIBLE_OBSERVATIONS = 10
VISIBLE_FEEDBACK = 4
OBSERVATION_CHARS = 3000
# The answer is prose for a person: it starts with a letter (Latin or CJK), has no JSON inside the
# string (a coder model's habit), and no quote, backslash or control character, so a grammar built
# from this pattern always yields valid JSON.
ANSWER_SCHEMA = {"type": "string", "minLength": 1, "maxLength": 600,
                 "pattern": r'^[A-Za-z\u4e00-\u9fff][^{}\[\]"\\\x00-\x1f]*$'}


@lru_cache(maxsize=None)
def prompt_text(name: str) -> str:
    return (PROMPTS_DIR / f"{name}.md").read_text(encoding="utf-8").strip()


@lru_cache(maxsize=None)
def tool_hints() -> dict[str, str]:
    hints = {}
    for line in prompt_text("tool_hints").splitlines():
        if line.startswith("#") or ":" not in line:
            continue
        tool, hint = line.split(":", 1)
        hints[tool.strip()] = hint.strip()
    return hints


def tool_description(tool: str) -> str:
    return " ".join((TOOL_ARGUMENTS[tool].__doc__ or tool).split())


@lru_cache(maxsize=None)
def argument_schema(tool: str) -> dict[str, Any]:
    """The tool's argument schema as the model and the grammar see it (no titles, refs inlined)."""
    return _compact_schema(TOOL_ARGUMENTS[tool].model_json_schema())


def _compact_schema(schema: Any) -> Any:
    """Drop ``title``/``description`` annotations; property *names* (a field may be called title) stay."""
    if isinstance(schema, dict):
        return {
            k: ({name: _compact_schema(sub) for name, sub in v.items()} if k == "properties" else _compact_schema(v))
            for k, v in schema.items()
            if k not in ("title", "description")
        }
    if isinstance(schema, list):
        return [_compact_schema(v) for v in schema]
    return schema


_SLOT = re.compile(r"\{([^{}]*)\}")
_NUMBER = r"-?[0-9]+([.][0-9]+)?"
_NAME = r"[A-Za-z0-9][A-Za-z0-9 _-]{0,39}"


def answer_form_pattern(form: str) -> str:
    """Regex for a pack's answer form: literal text kept, ``{number}``, ``{name}`` and ``{a|b}`` slots.

    The model fills the slots (the numbers, the names, the verdict); nothing here knows their values.
    Literal dots and the like become character classes so every grammar converter handles them.
    """
    def literal(text: str) -> str:
        return "".join(c if c.isalnum() or c in " ,;:'" else f"[{c}]" if c not in "^]\\" else "\\" + c for c in text)

    out, last = [], 0
    for match in _SLOT.finditer(form):
        out.append(literal(form[last:match.start()]))
        slot = match.group(1).strip()
        if slot == "number":
            out.append(_NUMBER)
        elif slot == "name":
            out.append(_NAME)
        else:
            out.append("(" + "|".join(literal(option.strip()) for option in slot.split("|")) + ")")
        last = match.end()
    out.append(literal(form[last:]))
    return "^" + "".join(out) + "$"


@dataclass(frozen=True)
class Branch:
    """What the runtime asks for this step: an action for one tool, or a final (or a free choice)."""

    kind: str  # "action" | "final" | "free"
    tool: str | None = None
    evidence_ids: tuple[str, ...] = ()
    answer_form: str | None = None

    @property
    def prefix(self) -> str:
        if self.kind == "action":
            # No trailing space: a prompt ending in a lone space token derails unconstrained decoding.
            return f'{{"type": "action", "tool": "{self.tool}", "arguments":'
        if self.kind == "final":
            return f'{{"type": "final", "evidence_ids": {json.dumps(list(self.evidence_ids))}, "answer":'
        return ""

    @property
    def suffix(self) -> str:
        return "}" if self.kind in ("action", "final") else ""

    @property
    def value_schema(self) -> dict[str, Any]:
        if self.kind == "action":
            return argument_schema(self.tool)
        if self.kind == "final":
            return answer_schema(self.answer_form)
        return free_decision_schema(self.evidence_ids, self.answer_form)

    def summary(self) -> str:
        """The public Decision Summary: written by the runtime from the current gap, never by the model."""
        if self.kind == "action":
            return {
                "knowledge_search": "Facts or release rule missing: search the package knowledge.",
                "calculator": "Exact arithmetic missing: compute it with the calculator from observed values.",
                "plot": "Structured values ready: draw the chart with plot.",
            }.get(self.tool, f"Next required tool: {self.tool}.")
        if self.kind == "final":
            return "All required observations present: answer with evidence."
        return "Free mode: the model chooses the next tool or the final answer."


@lru_cache(maxsize=None)
def answer_schema(answer_form: str | None) -> dict[str, Any]:
    """The Final's answer: the pack's answer form when it declares one, else free prose."""
    if answer_form:
        return {"type": "string", "minLength": 1, "maxLength": 600, "pattern": answer_form_pattern(answer_form)}
    return ANSWER_SCHEMA


@lru_cache(maxsize=64)
def free_decision_schema(citable_ids: tuple[str, ...] = (), answer_form: str | None = None) -> dict[str, Any]:
    """Free mode's schema: one alternative per tool (with that tool's full argument schema) and a Final.

    The model still chooses the tool or the Final; the grammar only keeps each choice well typed, so
    a chosen calculator gets the calculator's character set as in guided mode. A Final may cite only
    ids of successful Observations that exist (``citable_ids``; none yet means no Final alternative);
    whether those are enough evidence is still the runtime's evidence gate to decide.
    """
    def const_object(properties: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "properties": properties, "required": list(properties),
                "additionalProperties": False}

    choices = [const_object({"type": {"const": "action"}, "tool": {"const": tool},
                             "arguments": argument_schema(tool)}) for tool in TOOL_ARGUMENTS]
    if citable_ids:
        choices.append(const_object({
            "type": {"const": "final"},
            "evidence_ids": {"type": "array", "items": {"enum": list(citable_ids)}, "minItems": 1,
                             "maxItems": len(citable_ids)},
            "answer": answer_schema(answer_form)}))
    return {"anyOf": choices}


def system_message() -> str:
    tool_list = "\n".join(f"- {name}: {tool_description(name)}" for name in TOOL_ARGUMENTS)
    return prompt_text("system").format(tool_list=tool_list)


def observation_line(obs: Observation) -> str:
    """One Observation as the model sees it: one compact line, at most ~3000 characters.

    Results of the known tools are restated as plain facts (names and numbers exactly as the tool
    returned them) so a small model can copy them; any other result is compact JSON.
    """
    if obs.ok:
        text = f"[{obs.id}] {obs.tool} ok: " + _result_text(obs.tool, obs.result or {})
    else:
        error = obs.error.model_dump() if obs.error else {}
        text = f"[{obs.id}] {obs.tool} FAILED: " + json.dumps(error, ensure_ascii=False)
        if obs.attempted_arguments is not None:
            text += " attempted_arguments=" + json.dumps(obs.attempted_arguments, ensure_ascii=False)[:400]
    return text[:OBSERVATION_CHARS]


def _result_text(tool: str, result: dict[str, Any]) -> str:
    # Chunk texts stay in the trace; the parsed data carries the facts, and every token of a long
    # excerpt costs prompt-processing time on a 2-core CPU.
    if tool == "knowledge_search":
        data = result.get("data") or {}
        batches = data.get("batches") or {}
        rule = data.get("release_rule") or {}
        cited = ", ".join(f"{c.get('id')} {c.get('chunk_id')}" for c in result.get("citations", []))
        return (f"{len(batches)} batches: " + ", ".join(f"{k} = {v}" for k, v in batches.items())
                + "; release rule: " + ", ".join(f"{k} {v}" for k, v in rule.items())
                + f"; citations: {cited}")
    if tool == "calculator":
        return f"{result.get('expression')} = {result.get('value')}"
    if tool == "plot":
        spec = result.get("spec") or {}
        return (f"bar chart {json.dumps(spec.get('title'), ensure_ascii=False)}, labels {json.dumps(spec.get('labels'), ensure_ascii=False)}, "
                f"values {spec.get('values')}, average line {spec.get('average')}, "
                f"artifact {(result.get('artifact') or {}).get('id')}")
    return json.dumps({k: v for k, v in result.items() if k != "tool_latency_ms"}, ensure_ascii=False)


def build_messages(
    goal: str,
    observations: list[Observation],
    feedback: list[str],
    budget_left: dict[str, Any],
    branch: Branch,
    repair_error: str | None = None,
) -> list[dict[str, str]]:
    visible = observations[-VISIBLE_OBSERVATIONS:]
    parts = [f"TASK: {goal}", "", "OBSERVATIONS (oldest first, written by the runtime):"]
    parts += [observation_line(o) for o in visible] or ["(none yet)"]
    parts.append("")
    if feedback:
        parts += ["RUNTIME FEEDBACK:", *(f"- {line}" for line in feedback[-VISIBLE_FEEDBACK:]), ""]
    parts.append("BUDGET LEFT: " + ", ".join(f"{k} {v}" for k, v in budget_left.items()))
    parts.append("")
    parts.append(branch_instruction(branch))
    if repair_error is not None:
        schema = json.dumps(full_decision_schema(branch), separators=(",", ":"))
        parts += ["", prompt_text("repair").format(error=repair_error, schema=schema)]
    return [
        {"role": "system", "content": system_message()},
        {"role": "user", "content": "\n".join(parts)},
    ]


def branch_instruction(branch: Branch) -> str:
    if branch.kind == "action":
        return prompt_text("action").format(
            tool=branch.tool,
            tool_description=tool_description(branch.tool),
            schema=json.dumps(argument_schema(branch.tool), separators=(",", ":")),
            tool_hint=tool_hints().get(branch.tool, ""),
        )
    if branch.kind == "final":
        form = (f'in exactly this form, filling every {{...}} slot from the observations:\n"{branch.answer_form}"'
                if branch.answer_form else "as plain sentences (not JSON inside the string).")
        return prompt_text("final").format(evidence_ids=", ".join(branch.evidence_ids), answer_form=form)
    form = f' in exactly this form: "{branch.answer_form}"' if branch.answer_form else ""
    return (
        "NEXT DECISION: choose. Either an action "
        '{"type": "action", "tool": NAME, "arguments": {...}} for the first fact still missing, or, when '
        "every fact the task needs has a successful Observation, a final "
        f'{{"type": "final", "evidence_ids": [IDS], "answer": TEXT}}{form}.'
    )


def full_decision_schema(branch: Branch) -> dict[str, Any]:
    if branch.kind == "action":
        return {
            "type": "object",
            "properties": {
                "type": {"const": "action"},
                "tool": {"const": branch.tool},
                "arguments": argument_schema(branch.tool),
            },
            "required": ["type", "tool", "arguments"],
            "additionalProperties": False,
        }
    if branch.kind == "final":
        return {
            "type": "object",
            "properties": {
                "type": {"const": "final"},
                "answer": answer_schema(branch.answer_form),
                "evidence_ids": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            },
            "required": ["type", "answer", "evidence_ids"],
            "additionalProperties": False,
        }
    return free_decision_schema(branch.evidence_ids, branch.answer_form)
