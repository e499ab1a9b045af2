"""The release-rule family as a folder (agent/families/release_rule/): a pack names it in task.json
(or names no family and is one of its packs), its guide completes what the pack leaves out, and what
the pack declares -- even empty -- wins (contracts.TaskSpec.family)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agent.contracts.decision import Observation
from agent.evaluation.suite import parse_generated, resolve_packs
from agent.families import DEFAULT_FAMILY, FAMILIES
from agent.task.packs import PACKAGE_ROOT, PackError, TaskPack, goal_language, load_pack
from agent.tools.knowledge import search_knowledge


def _latest(pack: TaskPack) -> dict[str, Observation]:
    result = search_knowledge(pack.knowledge_dir, "Task Success and the release rule", 3)
    return {"knowledge_search": Observation(id="obs-knowledge_search-1", tool="knowledge_search", ok=True,
                                            result=result)}


def _pack(tmp_path: Path, **task: object) -> TaskPack:
    """A copy of the default pack (knowledge and first-round expected.json) with this task.json."""
    root = tmp_path / "pack"
    shutil.copytree(PACKAGE_ROOT / "knowledge", root / "knowledge")
    shutil.copytree(PACKAGE_ROOT / "data", root / "data")
    spec = {"id": "old_pack", "goal": "Find the batches and say whether the release rule is met.",
            "required_tools": ["knowledge_search", "calculator", "plot"], **task}
    (root / "task.json").write_text(json.dumps(spec), encoding="utf-8")
    return TaskPack.load(root)


def test_the_shipped_release_rule_packs_name_their_family():
    assert DEFAULT_FAMILY == "release_rule" and "release_rule" in FAMILIES
    for name in ("default", "release_hold"):
        pack = load_pack(name)
        assert pack.task.family == "release_rule" == pack.family, name


def test_a_pack_without_family_is_a_release_rule_pack(tmp_path):
    """A learner's pack written before families existed: its guide and its grading checks are the
    family's, exactly as they were the knowledge tool's."""
    pack = _pack(tmp_path)
    assert pack.task.family is None and pack.family == "release_rule"
    guide = pack.guide(_latest(pack), goal_language(pack.task.goal))
    assert guide is not None and guide.answer_form.startswith("The average is {number}")
    assert [c.label for c in guide.checks] == ["average", "lowest"] and len(guide.expect) == 5
    assert guide.verdict is not None and guide.verdict.positive[0] == "meets the release rule"
    checks = pack.load_expected()["checks"]
    assert checks[0] == {"type": "final_accepted"} and checks[-1]["type"] == "answer_comparisons"
    assert pack.guide({}, "en") is None  # nothing read yet: no default to offer


def test_what_the_pack_declares_wins_even_empty(tmp_path):
    pack = _pack(tmp_path, family="release_rule", checks=[], final_hints=["Say it plainly."])
    guide = pack.guide(_latest(pack), "en")
    assert guide.checks == [] and guide.hints == ["Say it plainly."]
    assert guide.answer_form.startswith("The average is {number}") and len(guide.expect) == 5


def test_family_null_switches_the_defaults_off(tmp_path):
    pack = _pack(tmp_path / "a", family=None)
    assert pack.family is None and pack.guide(_latest(pack), "en") is None
    declared = _pack(tmp_path / "b", family=None, answer_form="The average is {number}.")
    guide = declared.guide(_latest(declared), "en")
    assert guide.answer_form == "The average is {number}." and guide.checks == [] and guide.expect == []


def test_an_unknown_family_is_the_pack_authors_mistake(tmp_path):
    with pytest.raises(PackError, match="unknown family 'release_rules'"):
        _pack(tmp_path, family="release_rules")


def test_generated_n_is_the_release_rule_family(tmp_path):
    assert parse_generated("generated:3") == parse_generated("generated:release_rule:3") == 3
    plain = resolve_packs("generated:3", tmp_path / "a", 4)
    named = resolve_packs("generated:release_rule:3", tmp_path / "b", 4)
    assert [p.name for p in plain] == [p.name for p in named]
    for a, b in zip(plain, named):
        assert a.task == b.task and a.family == "release_rule"
        assert a.load_expected() == b.load_expected()
