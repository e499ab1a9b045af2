"""The conversation a session carries into its next turn, and how it is compacted.

The carried conversation (``Context``) is a list of (user turn, model turn) pairs, one per earlier
turn: the user's message with the Observations that turn made, then the turn's accepted Final as
the model wrote it (or a line saying the turn ended without one). ``turns.Conversation`` hands it
to the runtime (``runtime.PriorTurns.history``) with every Observation of the session, so earlier
evidence stays citable by its id and the Final gate checks claims against all of it, whatever the
carried text still shows.

Compaction starts when the carried conversation passes ``CompactionSettings.threshold`` of the
model's context in tokens, or half the history the prompt keeps before it falls back to one
compact turn (``prompting.HISTORY_CHARS``), or when the session file passes its compaction size.
It tries, in order:

1. ``summary``: the older turns (all but ``keep_recent_turns``) are folded into a handoff summary the
   model writes under a grammar (``Handoff``: goal, found with evidence ids, decided, left) through
   the policy seam (``ModelRequest`` with ``value_schema``, ``ContinuationPolicy.generate``); the
   summary goes before the first kept turn;
2. ``digests``: if there is no summariser, or it raises, times out, writes something invalid, or its
   summary would not shrink the conversation, the oldest Observations' lines are replaced by short
   digests (id, tool, size, a preview) until the conversation is under ``fold_target`` of the
   threshold (also applied after a summary that still leaves it over the threshold);
3. ``turns``: if the conversation is still over ``fold_target`` of the threshold, the oldest turns
   (never the latest ``keep_recent_turns``) are folded whole, oldest first, into a ledger the runtime
   writes: one line per turn with its question, its answer as the model wrote it and the ids it
   cited (a turn without an answer lists its Observations' digests). The ledger goes before the first
   turn kept; a later fold adds to it. Lookups are shorter than their digests, so a session of many
   small turns is shortened only this way. When the ledger itself keeps the conversation over the
   target (every turn but the latest folded), its oldest lines are made shorter, oldest first
   (``tight_line``: the question's first sentence, the answer's start, every cited id kept);
4. ``unchanged``: nothing left to fold; the next turn runs with the conversation as it is.

The stages that ran are joined by ``+`` in ``method`` (``summary+turns``, ``digests+turns``). A
session whose summary once timed out does not ask for one again (``summary_skipped``): on a slow
machine it costs its deadline every turn and never arrives.

``compact`` never raises: compaction never brings a turn down. Its ``Compaction`` says which way it
went, why a summary was not used, and the messages and tokens before and after (``event()``).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.contracts.decision import Observation
from agent.models.model_policy import ModelRequest
from agent.prompts.prompting import HISTORY_CHARS, observation_line, system_message
from agent.tools import ToolRegistry
from agent.tools.base import compact_schema
from agent.sessions.records import SessionLog, TurnView

DEFAULT_CONTEXT_TOKENS = 8192
SUMMARY_MAX_INPUT_SHARE = 0.75  # the summary prompt may fill this share of the context at most
SUMMARY_SYSTEM = (
    "You write the handoff summary of an earlier conversation for the agent that continues it. "
    "Write only the JSON asked for. goal: what the user is after. found: each fact the observations "
    "established, with the ids of the observations that show it (copy ids exactly). decided: what "
    "was answered or concluded. left: what the user still wants. Copy names and numbers exactly.")
SUMMARY_HEADING = ("HANDOFF SUMMARY of the earlier turns (written by the model; the runtime keeps "
                   "their observations, which stay citable by id):")
PREVIEW_CHARS = 60
FOLD_HEADING = ("EARLIER TURNS, folded by the runtime (each turn's question and answer; their observations "
                "stay in the session and are citable by id):")
FOLD_QUESTION_CHARS = 100
FOLD_ANSWER_CHARS = 300
FOLD_OBSERVATIONS = 3  # digests listed for a folded turn that ended without an answer
#: a ledger line made shorter when the ledger itself keeps the conversation over its target
TIGHT_QUESTION_CHARS = 70
TIGHT_ANSWER_CHARS = 90
#: a summary that ended this way will end so again: the session asks for none after it
SUMMARY_GIVEN_UP = frozenset({"summary_timeout", "summary_deadline", "summary_skipped"})


class Found(BaseModel):
    """One fact the earlier turns established, with the Observations that show it."""

    model_config = ConfigDict(extra="forbid")

    fact: str = Field(min_length=1, max_length=300)
    evidence_ids: list[str] = Field(default_factory=list, max_length=8)


class Handoff(BaseModel):
    """The handoff summary the model writes when older turns are folded."""

    model_config = ConfigDict(extra="forbid")

    goal: str = Field(min_length=1, max_length=400)
    found: list[Found] = Field(default_factory=list, max_length=12)
    decided: list[str] = Field(default_factory=list, max_length=8)
    left: list[str] = Field(default_factory=list, max_length=8)


def _inline(schema: Any, defs: dict[str, Any]) -> Any:
    """``schema`` with its ``$ref``s to ``$defs`` replaced by the definitions (grammar converters
    differ in what they resolve)."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            return _inline(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
        return {k: _inline(v, defs) for k, v in schema.items() if k != "$defs"}
    if isinstance(schema, list):
        return [_inline(v, defs) for v in schema]
    return schema


def _handoff_schema() -> dict[str, Any]:
    full = Handoff.model_json_schema()
    schema = compact_schema(_inline(full, full.get("$defs", {})))
    schema["required"] = list(schema["properties"])  # the grammar writes every key, in order
    schema["properties"]["found"]["items"]["required"] = ["fact", "evidence_ids"]
    return schema


HANDOFF_SCHEMA = _handoff_schema()


def handoff_schema(evidence_ids: list[str]) -> dict[str, Any]:
    """``HANDOFF_SCHEMA`` whose evidence ids can only be ids the session has."""
    schema = json.loads(json.dumps(HANDOFF_SCHEMA))
    ids = schema["properties"]["found"]["items"]["properties"]["evidence_ids"]
    if evidence_ids:
        ids["items"] = {"enum": list(dict.fromkeys(evidence_ids))}
    else:
        ids.pop("items", None)
        ids["maxItems"] = 0
    return schema


@dataclass(frozen=True)
class CompactionSettings:
    """When and how a session's carried conversation is compacted."""

    #: the model's context in tokens; None: the policy's own (``n_ctx``), else ``DEFAULT_CONTEXT_TOKENS``
    context_tokens: int | None = None
    #: compact when the carried conversation (with the system message) passes this share of the context
    threshold: float = 0.5
    #: the latest turns kept whole when older ones are summarised
    keep_recent_turns: int = 1
    #: the summary's wall-clock limit; past it the summary is given up and the fold is used
    summary_seconds: float = 60.0
    #: the tokens the summary may take
    summary_max_tokens: int = 400
    #: the digest fold replaces Observations until the conversation is this share of the threshold
    fold_target: float = 0.6


@dataclass
class Size:
    messages: int
    tokens: int
    chars: int

    def public(self) -> dict[str, int]:
        return {"messages": self.messages, "tokens": self.tokens, "chars": self.chars}


@dataclass
class Context:
    """The conversation carried into the next turn: (user turn, model turn) pairs, oldest first.

    ``through_turn`` is the latest turn the last compaction covered: its pairs are the compacted ones
    and the pairs of later turns follow them as rendered from the store."""

    pairs: list[tuple[str, str]] = field(default_factory=list)
    through_turn: int = 0

    def chars(self) -> int:
        return sum(len(user) + len(model) for user, model in self.pairs)


@dataclass
class Compaction:
    """What one compaction did. ``method``: the stages that ran joined by ``+`` (``summary``,
    ``digests``, ``turns``; ``summary+digests+turns`` at most) or ``unchanged``; ``fallback_reason``: why a summary was not used (None when it was, or when none
    was asked for)."""

    context: Context
    method: str
    before: Size
    after: Size
    fallback_reason: str | None = None
    summary: dict[str, Any] | None = None
    digested: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def event(self) -> dict[str, Any]:
        """The ``session.compacted`` event: messages and tokens before and after, and how."""
        return {"type": "session.compacted", "phase": "session", "method": self.method,
                "fallback_reason": self.fallback_reason, "through_turn": self.context.through_turn,
                "messages_before": self.before.messages, "messages_after": self.after.messages,
                "tokens_before": self.before.tokens, "tokens_after": self.after.tokens,
                "chars_before": self.before.chars, "chars_after": self.after.chars,
                "digested": list(self.digested), "seconds": round(self.seconds, 3)}


class _NoSummary(Exception):
    """The summary cannot be used; ``reason`` is a stable word for the event."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# -- the conversation from the store ---------------------------------------------------------------


def render_turn(turn: TurnView, registry: ToolRegistry) -> tuple[str, str]:
    """One earlier turn as the next turn's prompt shows it."""
    user = f"TASK: {turn.message}"
    if turn.observations:
        user += "\n\nOBSERVATIONS (written by the runtime):\n" + "\n".join(
            observation_line(o, registry) for o in turn.observations)
    final = turn.final
    if final and final.get("answer"):
        model = json.dumps({"type": "final", "evidence_ids": list(final.get("evidence_ids") or []),
                            "answer": final["answer"]}, ensure_ascii=False)
    elif turn.state == "interrupted":
        model = "(this turn was interrupted before it finished)"
    else:
        model = f"(this turn ended without an answer: {turn.stop_reason or 'unknown'})"
    return user, model


def build_context(log: SessionLog, registry: ToolRegistry) -> Context:
    """The carried conversation: the latest compaction's pairs, then every later turn that ended."""
    compacted = log.compaction()
    pairs: list[tuple[str, str]] = []
    through = 0
    if compacted is not None:
        through = int(compacted.get("through_turn") or 0)
        pairs = [(str(p[0]), str(p[1])) for p in compacted.get("messages") or []
                 if isinstance(p, list) and len(p) == 2]
    for turn in log.turns():
        if turn.number > through and turn.state != "open":
            pairs.append(render_turn(turn, registry))
    return Context(pairs=pairs, through_turn=through)


# -- measuring -------------------------------------------------------------------------------------


def approx_tokens(text: str) -> int:
    """About four characters a token: for policies without a tokenizer of their own."""
    return (len(text) + 3) // 4


def token_counter(policy: Any) -> Callable[[str], int]:
    """The policy's own tokenizer where it has one (llama.cpp), else ``approx_tokens``."""
    tokenize = getattr(policy, "tokenize", None)
    if callable(tokenize):
        def count(text: str) -> int:
            try:
                return len(tokenize(text))
            except Exception:  # noqa: BLE001 -- a tokenizer that fails is measured another way
                return approx_tokens(text)
        return count
    return approx_tokens


def context_tokens(policy: Any, settings: CompactionSettings) -> int:
    if settings.context_tokens:
        return settings.context_tokens
    description = getattr(policy, "description", None)
    n_ctx = (getattr(description, "details", None) or {}).get("n_ctx")
    return int(n_ctx) if isinstance(n_ctx, int) and n_ctx > 0 else DEFAULT_CONTEXT_TOKENS


@dataclass(frozen=True)
class Budget:
    """When a carried conversation is too long: its tokens (system message included) and characters."""

    tokens: int
    chars: int
    count: Callable[[str], int]
    system: int = 0  # the system message's tokens, counted once

    @classmethod
    def of(cls, policy: Any, settings: CompactionSettings, registry: ToolRegistry) -> "Budget":
        count = token_counter(policy)
        try:
            system = count(system_message(registry))
        except Exception:  # noqa: BLE001 -- a prompt that cannot be rendered counts as empty
            system = 0
        return cls(tokens=int(context_tokens(policy, settings) * settings.threshold), chars=HISTORY_CHARS // 2,
                   count=count, system=system)

    def size(self, pairs: list[tuple[str, str]]) -> Size:
        return Size(messages=2 * len(pairs), tokens=self.system + sum(self.count(u) + self.count(m) for u, m in pairs),
                    chars=sum(len(u) + len(m) for u, m in pairs))

    def over(self, size: Size, share: float = 1.0) -> bool:
        return size.tokens > self.tokens * share or size.chars > self.chars * share


# -- compacting ------------------------------------------------------------------------------------


def compact(context: Context, observations: list[Observation], *, policy: Any, settings: CompactionSettings,
            budget: Budget, registry: ToolRegistry, through_turn: int, shrink: bool = True,
            cancel: threading.Event | None = None, summarise: bool = True) -> Compaction:
    """Compact ``context`` (see the module docstring); never raises. ``shrink`` False only records
    the conversation as it is (a session past its compaction size whose conversation is short);
    ``summarise`` False goes straight to the folds (``summary_skipped``)."""
    started = time.monotonic()
    before = budget.size(context.pairs)
    pairs, stages, reason, summary, digested = list(context.pairs), [], None, None, []
    if shrink:
        try:
            if not summarise:
                raise _NoSummary("summary_skipped")
            summary, summarised = _summarise(context.pairs, observations, policy=policy, settings=settings,
                                             budget=budget, cancel=cancel)
            if budget.size(summarised).tokens >= before.tokens:
                raise _NoSummary("would_not_shrink")
            pairs, stages = summarised, ["summary"]
        except _NoSummary as exc:
            reason = exc.reason
        except Exception as exc:  # noqa: BLE001 -- a summariser's failure is never the turn's
            reason = f"summariser_error: {type(exc).__name__}"
            summary = None
        if not stages or budget.over(budget.size(pairs)):
            try:
                folded, digested = fold_observations(pairs, observations, registry, budget, settings.fold_target)
            except Exception:  # noqa: BLE001 -- a fold that breaks leaves the conversation as it is
                folded, digested = pairs, []
            if digested:
                pairs = folded
                stages.append("digests")
        if budget.over(budget.size(pairs), settings.fold_target):
            try:
                folded = fold_turns(pairs, budget, settings.fold_target, max(1, settings.keep_recent_turns))
            except Exception:  # noqa: BLE001 -- as above
                folded = pairs
            if len(folded) < len(pairs):
                pairs = folded
                stages.append("turns")
    return Compaction(context=Context(pairs=pairs, through_turn=through_turn), method="+".join(stages) or "unchanged",
                      before=before, after=budget.size(pairs), fallback_reason=reason, summary=summary,
                      digested=digested, seconds=time.monotonic() - started)


def _summarise(pairs: list[tuple[str, str]], observations: list[Observation], *, policy: Any,
               settings: CompactionSettings, budget: Budget,
               cancel: threading.Event | None) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    keep_n = max(1, settings.keep_recent_turns)
    folded, kept = pairs[:-keep_n], pairs[-keep_n:]
    if not folded:
        raise _NoSummary("nothing_to_summarise")
    generate = getattr(policy, "generate", None)
    if not callable(generate):
        raise _NoSummary("no_summariser")
    text = "\n\n".join(f"USER AND RUNTIME:\n{user}\n\nAGENT:\n{model}" for user, model in folded)
    room = context_tokens(policy, settings) * SUMMARY_MAX_INPUT_SHARE - settings.summary_max_tokens
    if budget.count(text) > room:
        raise _NoSummary("too_long_to_summarise")
    ids = [o.id for o in observations]
    request = ModelRequest(
        messages=[{"role": "system", "content": SUMMARY_SYSTEM},
                  {"role": "user", "content": "EARLIER CONVERSATION:\n\n" + text
                   + "\n\nWrite the handoff summary of this conversation as JSON."}],
        prefix="", value_schema=handoff_schema(ids), suffix="", max_new_tokens=settings.summary_max_tokens,
        temperature=0.0, deadline=time.monotonic() + settings.summary_seconds, cancel=threading.Event())
    generation = _within(lambda: generate(request), settings.summary_seconds + 5.0, request.cancel, cancel)
    if generation.finish_reason != "stop":
        raise _NoSummary(f"summary_{generation.finish_reason}")  # deadline, length, cancelled
    try:
        handoff = Handoff.model_validate_json(generation.text.strip())
    except ValidationError:
        raise _NoSummary("summary_invalid") from None
    known = set(ids)
    for found in handoff.found:  # a grammar-less backend may cite what does not exist
        found.evidence_ids = [i for i in found.evidence_ids if i in known]
    preamble = render_handoff(handoff)
    first_user, first_model = kept[0]
    return handoff.model_dump(), [(preamble + "\n\n" + first_user, first_model), *kept[1:]]


def _within(call: Callable[[], Any], seconds: float, stop: threading.Event, cancel: threading.Event | None) -> Any:
    """``call()`` in a thread, waited on for ``seconds`` at most (and while ``cancel`` is clear). A
    call still running then is told to stop and abandoned: a backend that honours its deadline has
    stopped already; one that does not must not hold the turn."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 -- handed back to the caller below
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name="session-summary", daemon=True).start()
    end = time.monotonic() + seconds
    while not done.wait(timeout=0.05):
        if time.monotonic() >= end or (cancel is not None and cancel.is_set()):
            stop.set()
            raise _NoSummary("summary_cancelled" if cancel is not None and cancel.is_set() else "summary_timeout")
    if "error" in box:
        raise box["error"]
    return box["value"]


def render_handoff(handoff: Handoff) -> str:
    lines = [SUMMARY_HEADING, f"goal: {handoff.goal}"]
    if handoff.found:
        lines.append("found:")
        lines += [f"- {f.fact}" + (f" [{', '.join(f.evidence_ids)}]" if f.evidence_ids else "") for f in handoff.found]
    for name in ("decided", "left"):
        items = getattr(handoff, name)
        if items:
            lines.append(f"{name}:")
            lines += [f"- {item}" for item in items]
    return "\n".join(lines)


def digest_line(obs: Observation, line: str) -> str:
    """An Observation's line folded: its id (still citable), tool, outcome, size and a preview."""
    body = " ".join(line.split(": ", 1)[-1].split())
    preview = body if len(body) <= PREVIEW_CHARS else body[:PREVIEW_CHARS - 1] + "…"
    return (f"[{obs.id}] {obs.tool} {'ok' if obs.ok else 'FAILED'} (folded by the runtime: {len(line)} "
            f"characters, kept in the session and still citable): {preview}")


def fold_observations(pairs: list[tuple[str, str]], observations: list[Observation], registry: ToolRegistry,
                      budget: Budget, share: float) -> tuple[list[tuple[str, str]], list[str]]:
    """Replace the lines of the oldest Observations by their digests until the conversation is
    under ``share`` of the budget; returns the pairs and the ids folded."""
    pairs, folded = list(pairs), []
    for obs in observations:  # oldest first
        if not budget.over(budget.size(pairs), share):
            break
        line = observation_line(obs, registry)
        digest = digest_line(obs, line)
        if len(digest) >= len(line):
            continue
        changed = False
        for i, (user, model) in enumerate(pairs):
            if line in user:
                pairs[i] = (user.replace(line, digest), model)
                changed = True
        if changed:
            folded.append(obs.id)
    return pairs, folded


# -- the turn fold ---------------------------------------------------------------------------------


def _parts(user: str) -> tuple[list[str], list[str], str]:
    """A carried user turn's parts: the blocks before its task (a handoff summary), the ledger lines
    of earlier folds, and the rest (``TASK: ...`` with its Observations)."""
    start = 0 if user.startswith("TASK: ") else user.find("\n\nTASK: ") + 2
    if start == 1:  # no task line: all of it is the turn
        return [], [], user
    blocks, ledger = [], []
    for block in user[:start].strip("\n").split("\n\n") if start else []:
        if block.startswith(FOLD_HEADING):
            ledger += [line for line in block.splitlines()[1:] if line.strip()]
        elif block.strip():
            blocks.append(block)
    return blocks, ledger, user[start:]


def _carried(blocks: list[str], ledger: list[str], turn: str) -> str:
    """A kept turn's user text carrying what went before it: the blocks (a handoff summary), then the
    ledger under its heading, then the turn itself (``TASK: ...``); the inverse of ``_parts``."""
    return "\n\n".join([*blocks, "\n".join([FOLD_HEADING, *ledger]), turn])


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def ledger_line(turn: str, model: str) -> str:
    """One folded turn: the question it asked, the answer the model gave and the ids it cited (or
    how it ended, with the digests of its first Observations)."""
    task, _, shown = turn.removeprefix("TASK: ").partition("\n\nOBSERVATIONS (written by the runtime):\n")
    line = f"- asked: {_short(task, FOLD_QUESTION_CHARS)}"
    try:
        final = json.loads(model)
    except ValueError:
        final = None
    if isinstance(final, dict) and isinstance(final.get("answer"), str):
        ids = [str(i) for i in final.get("evidence_ids") or [] if isinstance(i, str)]
        return line + f" | answered: {_short(final['answer'], FOLD_ANSWER_CHARS)}" + (
            f" [cited {', '.join(ids)}]" if ids else "")
    line += f" | {_short(model.strip('()'), 120)}"
    for obs in [o for o in shown.splitlines() if o.startswith("[")][:FOLD_OBSERVATIONS]:
        line += f" | {_short(obs, PREVIEW_CHARS + 40)}"
    return line


def fold_turns(pairs: list[tuple[str, str]], budget: Budget, share: float, keep: int) -> list[tuple[str, str]]:
    """Fold the oldest turns whole into the ledger (``ledger_line``), oldest first, never the latest
    ``keep``, until the conversation is under ``share`` of the budget; the ledger, and whatever went
    before the first folded turn (a handoff summary), go before the first turn kept."""
    pairs = list(pairs)
    blocks: list[str] = []
    ledger: list[str] = []
    while len(pairs) > keep and budget.over(budget.size(pairs), share):
        user, model = pairs.pop(0)
        more_blocks, more_lines, turn = _parts(user)
        blocks += more_blocks
        ledger += more_lines + [ledger_line(turn, model)]
        first_blocks, first_lines, first_turn = _parts(pairs[0][0])
        pairs[0] = (_carried(blocks + first_blocks, ledger + first_lines, first_turn), pairs[0][1])
        blocks, ledger = [], []
    if pairs and budget.over(budget.size(pairs), share):
        pairs = _tighten_ledger(pairs, budget, share)
    return pairs


def _tighten_ledger(pairs: list[tuple[str, str]], budget: Budget, share: float) -> list[tuple[str, str]]:
    """Shorten the first kept turn's ledger lines (``tight_line``), oldest first, until the
    conversation is under ``share`` of the budget or every line is short."""
    blocks, lines, turn = _parts(pairs[0][0])
    pairs = list(pairs)
    for i, line in enumerate(lines):
        tight = tight_line(line)
        if tight == line:
            continue
        lines[i] = tight
        pairs[0] = (_carried(blocks, lines, turn), pairs[0][1])
        if not budget.over(budget.size(pairs), share):
            break
    return pairs


def _first_sentence(text: str, limit: int) -> str:
    """The text up to its first sentence end (``?``, ``!`` or ``.`` before a space), at most ``limit``."""
    text = text.removesuffix("…")
    for i, char in enumerate(text[:limit]):
        if char in "?!." and text[i + 1:i + 2] in (" ", ""):
            return text[:i + 1]
    return _short(text, limit)


def tight_line(line: str) -> str:
    """A ledger line (``ledger_line``) made short: the question's first sentence, the start of the
    answer (or how the turn ended), and every id it cited or listed; a short line stays as it is."""
    if not line.startswith("- asked: "):
        return line
    question, _, rest = line.removeprefix("- asked: ").partition(" | ")
    short = f"- asked: {_first_sentence(question, TIGHT_QUESTION_CHARS)}"
    if rest.startswith("answered: "):
        answer, mark, cited = rest.removeprefix("answered: ").rpartition(" [cited ")
        if not mark:
            answer, cited = rest.removeprefix("answered: "), ""
        short += f" | answered: {_short(answer, TIGHT_ANSWER_CHARS)}" + (f" [cited {cited}" if cited else "")
    elif rest:
        how, *shown = rest.split(" | ")
        ids = [part[1:part.index("]")] for part in shown if part.startswith("[") and "]" in part]
        short += f" | {_short(how, TIGHT_ANSWER_CHARS)}" + (f" [observations {', '.join(ids)}]" if ids else "")
    return short if len(short) < len(line) else line
