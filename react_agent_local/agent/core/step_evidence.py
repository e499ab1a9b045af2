"""The evidence of one step: what the Observations so far say, worked out once, by pure functions.

``step_evidence`` reads a run's Observations (a session's earlier turns included) and gives a
frozen ``StepEvidence``: the latest successful Observation of each tool, which declared subgoal
items they cover, what a Final must cite and which Observation would do, the answer guide of
this evidence (the pack's declarations over its family's default, ``TaskPack.guide``), the
guide's checks and expectations resolved against it, and the argument schemas the expectations
narrow to, with their evidence references resolved. The runtime builds one whenever an
Observation is added and hands the same object to what it asks next (``next_ask.py``), to the
prompt and to the Final gate (``premature``), so they cannot disagree about the evidence.

Nothing here runs a tool, reads a file or emits an event; what a kind of task asks of a Final
beyond this evidence is its strategy's (``strategy.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from agent.gate.check_language import path_values, worked_out
from agent.gate.claims import ResolvedCheck, fmt, resolve, resolve_checks
from agent.contracts.task import AnswerGuide, CheckSpec, TaskSpec
from agent.contracts.decision import Observation, latest_ok
from agent.task.packs import item_key
from agent.tools import ToolRegistry

#: ``TaskPack.guide``: the answer guide for the latest successful Observations of the run's tools
GuideSource = Callable[[Mapping[str, Observation], str], AnswerGuide | None]


@dataclass(frozen=True)
class Expectation:
    """One of the guide's expectations on a tool's latest result, resolved against the evidence."""

    tool: str
    spec: CheckSpec
    check: ResolvedCheck
    failing: bool
    #: the argument schemas it narrows the tool to when the tool is asked (references resolved;
    #: an argument whose reference resolves to nothing yet is left out)
    arguments: tuple[tuple[str, Any], ...]
    #: the evidence numbers the expected value is computed from (path text, value), shown when the
    #: tool is asked again (left to find them, a model takes a neighbouring row's number)
    sources: tuple[tuple[str, float], ...] = ()
    #: the expected value's expression with those numbers put in (``check_language.worked_out``), shown
    #: when a result failed it: shown the two numbers alone, a model swaps a change's later and
    #: earlier value
    worked: str | None = None

    def where_from(self) -> str:
        """The ``sources`` as one phrase, or ''."""
        return "; ".join(f"{path} = {fmt(value)}" for path, value in self.sources)

    def falls_short(self) -> str:
        """How the result fails the expectation: a wrong value, or none at all."""
        if self.check.left is None:
            return f"has no value for {self.check.label}"
        return f"{fmt(self.check.left)} is not {self.check.label}"


@dataclass(frozen=True)
class StepEvidence:
    """What the Observations of a run establish at the start of a step."""

    observations: tuple[Observation, ...]
    #: tool -> its latest successful Observation (every tool, a session's earlier ones included)
    latest_ok: Mapping[str, Observation]
    #: tool with declared subgoals -> subgoal item key -> id of the latest Observation covering it
    covered: Mapping[str, Mapping[str, str]]
    #: (what, latest successful Observation id or None) for everything a Final must cite
    required: tuple[tuple[str, str | None], ...]
    guide: AnswerGuide | None
    #: the guide's checks, resolved against ``latest_ok``
    checks: tuple[ResolvedCheck, ...]
    expectations: tuple[Expectation, ...]
    #: how many of ``observations`` (the first ones) a session's earlier turns made
    prior: int = 0

    @property
    def ready(self) -> bool:
        """Every Observation a Final must cite exists."""
        return all(obs_id for _, obs_id in self.required)

    def failing(self, tool: str | None = None) -> list[Expectation]:
        """The expectations the latest result of ``tool`` (default: of any tool) fails, in guide order."""
        return [e for e in self.expectations if e.failing and (tool is None or e.tool == tool)]

    def narrowing(self, tool: str, expectations: Iterable[Expectation] | None = None) -> tuple[tuple[str, Any], ...]:
        """The argument schemas that ``expectations`` (default: every one on ``tool``'s result) declare."""
        chosen = [e for e in self.expectations if e.tool == tool] if expectations is None else expectations
        narrowed: dict[str, Any] = {}
        for expectation in chosen:
            narrowed.update(expectation.arguments)
        return tuple(narrowed.items())

    def last_failed(self, tool: str) -> bool:
        """``tool``'s latest Observation is a failed attempt (the tool ran and failed, or timed out)."""
        last = next((o for o in reversed(self.observations) if o.tool == tool), None)
        return last is not None and not last.ok and not self.last_rejected(tool)

    def last_rejected(self, tool: str) -> bool:
        """``tool``'s latest Observation is an argument rejection."""
        last = next((o for o in reversed(self.observations) if o.tool == tool), None)
        return last is not None and not last.ok and last.error is not None and last.error.code == "invalid_arguments"


def step_evidence(task: TaskSpec, observations: Iterable[Observation], tools: ToolRegistry, guide: GuideSource,
                  language: str, prior: int = 0) -> StepEvidence:
    """The evidence of the Observations so far (the first ``prior`` of them from a session's earlier
    turns), for a run of ``task`` with ``tools``."""
    observations = tuple(observations)
    latest = latest_ok(observations)
    covered = {tool: coverage(observations, tool, tools) for tool in task.subgoals if tool in tools}
    required: list[tuple[str, str | None]] = []
    for tool in task.required_tools:
        items = task.subgoals.get(tool)
        if items:
            found = covered.get(tool, {})
            required += [(f"{tool} ({item})", found.get(item_key(item))) for item in items]
        else:
            required.append((tool, latest[tool].id if tool in latest else None))
    # The guide sees the run's own tools only; checks and expectations read every latest result.
    answer_guide = guide({name: obs for name, obs in latest.items() if name in tools}, language)
    checks = tuple(resolve_checks(answer_guide.checks, latest)) if answer_guide else ()
    return StepEvidence(observations=observations, latest_ok=latest, covered=covered, required=tuple(required),
                        guide=answer_guide, checks=checks,
                        expectations=_expectations(answer_guide, latest, tools.names), prior=prior)


def coverage(observations: Iterable[Observation], tool: str, tools: ToolRegistry) -> dict[str, str]:
    """Subgoal item key -> id of the latest successful Observation of ``tool`` that covers it."""
    covers = tools.get(tool).covers
    found: dict[str, str] = {}
    for obs in observations:
        if obs.ok and obs.tool == tool and covers is not None:
            item = covers(obs.result or {})
            if item:
                found[item_key(item)] = obs.id
    return found


def _expectations(guide: AnswerGuide | None, latest: Mapping[str, Observation],
                  names: Iterable[str]) -> tuple[Expectation, ...]:
    if guide is None or not guide.expect:
        return ()
    names = sorted(names, key=len, reverse=True)
    found = []
    for spec, check in zip(guide.expect, resolve_checks(guide.expect, latest)):
        owner = ref_tool(spec.left, names)
        if owner is None:
            continue
        # A result that lacks the value (a chart without its average line) fails too, once the
        # other side is known.
        missing = check.left is None and check.right is not None and owner in latest
        arguments = {}
        for name, sub in (spec.arguments or {}).items():
            resolved = resolve_refs(sub, latest, names)
            if resolved:
                arguments[name] = resolved
        found.append(Expectation(tool=owner, spec=spec, check=check,
                                 failing=missing or (check.known and not check.holds),
                                 arguments=tuple(arguments.items()),
                                 sources=path_values(spec.right, latest, skip_roots=(owner,)),
                                 worked=worked_out(spec.right, latest)))
    return tuple(found)


def resolve_refs(schema: Any, latest: Mapping[str, Observation], names: list[str]) -> Any:
    """A narrowing schema with evidence references (``{"const": "calculator.value"}``) resolved
    against the latest Observations; a reference that resolves to nothing leaves its key out."""
    if isinstance(schema, list):
        return [resolve_refs(v, latest, names) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "const" and isinstance(value, str) and ref_tool(value, names) is not None:
            value = resolve(value, latest)
            if value is None:
                continue
        out[key] = resolve_refs(value, latest, names)
    return out


def ref_tool(operand: float | str, names: list[str]) -> str | None:
    """The tool a reference like ``calculator.value`` or ``min(server.tool.x)`` reads from
    (``names`` longest first, so ``server.tool`` wins over ``server``)."""
    if not isinstance(operand, str):
        return None
    ref = operand.split("(", 1)[-1]
    return next((name for name in names if ref.startswith(name + ".")), None)


def premature(evidence: StepEvidence, evidence_ids: list[str]) -> list[str]:
    """Why a Final citing ``evidence_ids`` comes too early; empty when the evidence gate lets it through."""
    known = {o.id for o in evidence.observations}
    problems = []
    unknown = [i for i in evidence_ids if i not in known]
    if unknown:
        problems.append(f"evidence_ids cite observations that do not exist: {', '.join(unknown[:5])}"[:300])
    index = {o.id: i for i, o in enumerate(evidence.observations)}
    cited_ok = {o.tool for o in evidence.observations if o.id in evidence_ids and o.ok}
    for what, obs_id in evidence.required:
        if obs_id is None:
            problems.append(f"no successful {what} observation yet")
        elif obs_id not in evidence_ids and not (index[obs_id] < evidence.prior
                                                 and evidence.observations[index[obs_id]].tool in cited_ok):
            # An earlier turn's latest Observation need not be cited by a turn that made none of that
            # tool: it answers its own question, maybe from an older one (a recall made to cite a later
            # turn's lookup answers that later turn's question instead).
            problems.append(f"evidence_ids must cite the latest successful {what} observation {obs_id}")
    problems += [f"the latest {e.tool} result {e.falls_short()}" for e in evidence.failing()]
    return problems
