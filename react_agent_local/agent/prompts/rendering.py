"""One ``Prompt``, two renderings: the continuation an in-process model completes and the
conversation a served chat model answers with a tool call.

``render_continuation`` is append-only, so each call shares the whole previous prompt in the
model's KV cache and evaluates only what is new: a fixed system message (the rules and every tool
with its argument schema), then one user turn per model call -- the task in the first, after that
the Observations and feedback that are new since the previous call, the remaining budget and this
step's instruction -- each followed by the model's own Decision as the assistant turn. Where that
history grows past ``prompting.HISTORY_CHARS`` the prompt falls back to one compact user turn (the
task, the latest 10 Observations, the latest 4 feedback lines, the budget and the instruction); that
turn and the model's Decision then stand for the history, and later calls continue after them.
The runtime's JSON prefix (``Branch.prefix``) opens the assistant turn after it.

``render_conversation`` is rebuilt every step (a server keeps no state of ours): the task, each
visible Observation as the model's tool call and its result paired by id (a failed Observation is
an error result; the calls of one reply together, then their results in the same order), then one user turn with the feedback, the budget and what this step asks for;
the tools go as tool definitions (``backends/served.py`` owns the wire: tool definitions, call
ids, ``final_answer``, reading the reply).

Both say the same facts; the text both use for a fact is one helper here, and where the two lay a
fact out differently (the prompt-cache layout against a rebuilt conversation, the runtime's prefix
against a native tool call) ``SECTIONS`` says how, one row per field of ``Prompt``.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.prompts.prompting import (
    VISIBLE_FEEDBACK, VISIBLE_OBSERVATIONS, ActionAsk, FinalAsk, FreeAsk, Prompt, prompt_text, system_text
)

#: the tool a served model calls to answer (its wire name)
FINAL_TOOL = "final_answer"
#: a tool description sent to a served model is cut at this many characters
MAX_TOOL_DESCRIPTION = 1024


@dataclass
class ToolDef:
    name: str  # the wire name
    description: str
    schema: dict[str, Any]


@dataclass
class Turn:
    """One protocol-neutral turn: user text, the model's tool call, or that call's result. Calls
    next to each other are one reply's (its results follow them): one assistant message."""

    kind: Literal["user", "call", "result"]
    text: str = ""
    call_id: str = ""
    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    is_error: bool = False


@dataclass
class Conversation:
    system: str
    turns: list[Turn]
    tools: list[ToolDef]
    forced: str | None  # the wire name of the tool this step must call; None: the model chooses


def call_id(obs_id: str) -> str:
    return "call_" + re.sub(r"[^A-Za-z0-9_-]", "_", obs_id)


def final_tool(prompt: Prompt) -> ToolDef:
    """``final_answer``: in a guided final step its answer follows the step's value schema (the pack's
    answer form) and it may cite only the evidence the runtime chose; elsewhere the schema is the same
    every step (a stable tools block keeps the server's prompt cache)."""
    answer: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 2000}
    ids: dict[str, Any] = {"type": "string"}
    if prompt.ask.kind == "final":
        answer = prompt.value_schema
        if prompt.ask.evidence_ids:
            ids = {"type": "string", "enum": list(prompt.ask.evidence_ids)}
    schema = {"type": "object",
              "properties": {"answer": answer,
                             "evidence_ids": {"type": "array", "items": ids, "minItems": 1, "maxItems": 10}},
              "required": ["answer", "evidence_ids"], "additionalProperties": False}
    return ToolDef(FINAL_TOOL, "Give the final answer for the user, citing the ids of the Observations "
                               "it relies on. Call it only when every fact the task needs has a successful "
                               "Observation.", schema)


#: Prompt field -> (how the continuation shows it, how the conversation shows it)
SECTIONS: dict[str, tuple[str, str]] = {
    "goal": ("TASK line of the first user turn (and of a compact turn)", "TASK line of the first user turn"),
    "tools": ("the system message: each tool with its argument schema",
              "the tool definitions, plus final_answer; an action's turn repeats its tool's description"),
    "observations": ("the turn after each was made (NEW OBSERVATIONS; the first turn says none yet); "
                     "a compact turn lists the latest 10",
                     "the latest 10, each as the model's call and its result (a failure is an error result); "
                     "the calls of one reply together, then their results"),
    "shown_observations": ("which Observations the earlier turns showed", "unused: rebuilt every step"),
    "feedback": ("the turn after each was given (the latest 4 of those); a compact turn: the latest 4",
                 "the latest 4, in the step's turn"),
    "shown_feedback": ("which feedback lines the earlier turns showed", "unused: rebuilt every step"),
    "budget_left": ("BUDGET LEFT line", "BUDGET LEFT line"),
    "history": ("the earlier user turns and the model's Decisions, verbatim",
                "unused: the Observations' calls stand for the model's earlier Decisions"),
    "compact": ("one compact turn instead of the history", "unused: always rebuilt"),
    "ask": ("NEXT DECISION instruction; a final's evidence ids are written in the runtime's prefix",
            "NEXT instruction and the forced tool (none when free); a final's evidence ids are written out"),
    "value_schema": ("the grammar of the continuation after the prefix",
                     "an action's turn states it; a final's final_answer answer follows it"),
    "drafts": ("offered to the backend as drafts (speed only)", "unused: a server takes no drafts"),
    "repair": ("the error, and the complete Decision's schema to match",
               "the error; the schema is the called tool's definition"),
}


# --------------------------------------------------------------------------------------------
# The text both renderings share
# --------------------------------------------------------------------------------------------


def feedback_block(lines: tuple[str, ...]) -> list[str]:
    """The latest ``VISIBLE_FEEDBACK`` feedback lines under their heading (none: nothing)."""
    return ["RUNTIME FEEDBACK:", *(f"- {line}" for line in lines[-VISIBLE_FEEDBACK:]), ""] if lines else []


def budget_line(prompt: Prompt) -> str:
    return "BUDGET LEFT: " + ", ".join(f"{k} {v}" for k, v in prompt.budget_left)


def action_hint(ask: ActionAsk) -> str:
    return f"Still missing: {ask.target}. " + ask.hint if ask.target else ask.hint


def final_answer_form(answer_form: str | None) -> str:
    return (f'in exactly this form, filling every {{...}} slot from the observations:\n"{answer_form}"'
            if answer_form else "as plain sentences (not JSON inside the string), in the language of the task.")


def final_hints(ask: FinalAsk) -> str:
    return "\n".join([*ask.rules, "\n".join([*ask.check_lines, *ask.hints])])


def free_answer_form(answer_form: str | None) -> str:
    return f' in exactly this form: "{answer_form}"' if answer_form else ""


def free_lines(ask: FreeAsk) -> list[str]:
    """What a free step says after its instruction: the fact still missing, the checks and hints."""
    missing = f"Still missing: {ask.target} ({ask.tool})." if ask.target else ""
    hints = "\n".join([*ask.check_lines, *ask.hints])
    return [line for line in (missing, hints) if line]


# --------------------------------------------------------------------------------------------
# The continuation
# --------------------------------------------------------------------------------------------


def render_continuation(prompt: Prompt) -> list[dict[str, str]]:
    """The system message, the run's earlier turns with the model's Decisions, and this step's turn."""
    system = {"role": "system", "content": system_text(prompt.tools)}
    if prompt.compact:
        return [system, {"role": "user", "content": compact_turn(prompt)}]
    messages = [system]
    for user, model in prompt.history:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": model}]
    messages.append({"role": "user", "content": continuation_turn(prompt)})
    return messages


def continuation_turn(prompt: Prompt) -> str:
    """This call's user turn: only what the earlier turns did not show, then the budget and the instruction."""
    parts = [f"TASK: {prompt.goal}", ""] if not prompt.history else []
    new = prompt.observations[prompt.shown_observations:]
    if new:
        parts += ["NEW OBSERVATIONS (written by the runtime):", *(o.line for o in new), ""]
    elif not prompt.history:
        parts += ["OBSERVATIONS: (none yet)", ""]
    parts += feedback_block(prompt.feedback[prompt.shown_feedback:])
    return _closing(parts, prompt)


def compact_turn(prompt: Prompt) -> str:
    """Everything in one user turn, for a history too long to keep: the latest Observations and feedback."""
    parts = [f"TASK: {prompt.goal}", "", "OBSERVATIONS (oldest first, written by the runtime):"]
    parts += [o.line for o in prompt.observations[-VISIBLE_OBSERVATIONS:]] or ["(none yet)"]
    parts.append("")
    parts += feedback_block(prompt.feedback)
    return _closing(parts, prompt)


def _closing(parts: list[str], prompt: Prompt) -> str:
    parts += [budget_line(prompt), "", continuation_instruction(prompt)]
    if prompt.repair is not None:
        schema = json.dumps(prompt.repair.schema, separators=(",", ":"), ensure_ascii=False)
        parts += ["", prompt_text("repair").format(error=prompt.repair.error, schema=schema)]
    return "\n".join(parts)


def continuation_instruction(prompt: Prompt) -> str:
    ask = prompt.ask
    if isinstance(ask, ActionAsk):
        return prompt_text("action").format(tool=ask.tool.name, tool_hint=action_hint(ask))
    if isinstance(ask, FinalAsk):
        return prompt_text("final").format(answer_form=final_answer_form(ask.answer_form),
                                           hints=final_hints(ask)).strip()
    head = prompt_text("free").format(answer_form=free_answer_form(ask.answer_form))
    return "\n".join([head, *free_lines(ask)])


# --------------------------------------------------------------------------------------------
# The conversation
# --------------------------------------------------------------------------------------------


def render_conversation(prompt: Prompt, arguments: dict[str, dict[str, Any]], names: dict[str, str],
                        replies: dict[str, int] | None = None) -> Conversation:
    """The served conversation: ``arguments`` are the model's own arguments of each Observation's call
    (by Observation id; else the attempted ones), ``names`` maps wire names to tool names, ``replies``
    which reply of the model each Observation's call came in (by Observation id): the calls of one
    reply go back together, then their results in the same order (a reply's calls run as a batch,
    ``agent/core/tool_batch.py``); an Observation it does not name is a reply of its own."""
    wire = {name: w for w, name in names.items()}
    turns = [Turn("user", text=f"TASK: {prompt.goal}")]
    visible = prompt.observations[-VISIBLE_OBSERVATIONS:]
    for _, group in itertools.groupby(visible, key=lambda obs: (replies or {}).get(obs.id, obs.id)):
        batch = list(group)
        turns += [Turn("call", call_id=call_id(obs.id), name=wire.get(obs.tool, obs.tool),
                       arguments=arguments.get(obs.id, obs.attempted_arguments or {})) for obs in batch]
        turns += [Turn("result", call_id=call_id(obs.id), text=obs.line, is_error=not obs.ok) for obs in batch]
    now = [*feedback_block(prompt.feedback), budget_line(prompt)]
    ask = prompt.ask
    if isinstance(ask, ActionAsk):
        forced: str | None = wire[ask.tool.name]
        schema = json.dumps(prompt.value_schema, separators=(",", ":"), ensure_ascii=False)
        now.append(prompt_text("served_action").format(tool=forced, tool_description=ask.tool.description,
                                                       schema=schema, tool_hint=action_hint(ask)))
    elif isinstance(ask, FinalAsk):
        forced = FINAL_TOOL
        now.append(prompt_text("served_final").format(evidence_ids=", ".join(ask.evidence_ids),
                                                      answer_form=final_answer_form(ask.answer_form),
                                                      hints=final_hints(ask)).strip())
    else:
        forced = None
        now.append(prompt_text("served_free").format(answer_form=free_answer_form(ask.answer_form),
                                                     hints="\n".join(free_lines(ask))).strip())
    if prompt.repair is not None:
        now += ["", prompt_text("served_repair").format(error=prompt.repair.error)]
    turns.append(Turn("user", text="\n".join(now)))
    tools = [ToolDef(wire[t.name], t.description[:MAX_TOOL_DESCRIPTION], t.schema) for t in prompt.tools]
    tools.append(final_tool(prompt))
    return Conversation(prompt_text("served_system"), turns, tools, forced)
