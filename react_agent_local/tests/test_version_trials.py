"""Version trials (``agent/coding/version_trials.py``) through the real runtime, the real sandbox and a
generated HumanEval pack: once a function's likeliest versions failed its examples, sampled versions
are drawn from one prompt and tried on a scratch copy before one is written; the first the tests pass
on is written, a version that failed already is not run again, the run's workspace never holds a
draw that failed, and with no passing draw the last one the tests ran on is written and tested for real."""

from __future__ import annotations

import json
from pathlib import Path


from agent.models.backends.scripted import ScriptedPolicy
from agent.contracts.budgets import Budgets, Sampling
from agent.cli.event_lines import format_event
from agent.families.humaneval.generator import TEST_COMMAND, generate_packs
from agent.families.humaneval.problems import all_problems
from agent.task.packs import TaskPack
from agent.core.run import run_agent
from agent.coding.version_trials import MAX_VERSIONS, version_key, written_versions
from agent.coding.source_lines import spec_of


def _pack(tmp_path: Path):
    root = generate_packs(tmp_path / "packs", 1, 0)[0]
    pack = TaskPack.load(root)
    problem = next(p for p in all_problems() if p.task_id == pack.load_expected()["task_id"])
    name = problem.entry_point
    held = f"def {name}(" + spec_of((root / "workspace" / "solution.py").read_text(), name).split(f"def {name}(", 1)[1]
    right = problem.prompt + problem.canonical_solution
    return pack, name, held, right[right.index(f"def {name}("):]


def _run(pack: TaskPack, outputs: list[str], tmp_path: Path, **budgets) -> tuple:
    policy = ScriptedPolicy(outputs, proposes_arguments=True)
    policy.code_blocks = policy.code_turns = True
    outcome = run_agent(pack, policy, Budgets(**budgets), artifact_dir=tmp_path / "run", sampling=Sampling(seed=7))
    return outcome, policy


def _written(outcome) -> list[str]:
    return [e["decision"]["arguments"]["source"] for e in outcome.events
            if e["type"] in ("decision.valid", "decision.repaired") and e["decision"].get("tool") == "replace_function"]


def test_the_first_sampled_version_the_examples_pass_on_is_written_and_a_failed_one_is_not_run_again(tmp_path, scratch_parent):
    pack, name, held, right = _pack(tmp_path)
    head = '{"path": "solution.py", "name": "%s"}' % name
    run = '{"command": "%s"}' % TEST_COMMAND
    first, second, third = (held + f"\n    return {value}\n" for value in ("None", "0", "'wrong'"))
    outputs = ['{"path": "solution.py"}', head, first, run,  # the benchmark's words, greedy: fails
               head, second, run,                             # the runtime's words, greedy: fails
               head, third, head, first, head, right,         # three draws: fails, failed already, passes
               head, run, json.dumps(f"I implemented {name} and the examples pass.")]
    outcome, policy = _run(pack, outputs, tmp_path)
    policy.assert_complete()
    assert outcome.result.status == "completed" and outcome.result.metrics.task_success
    trials = [e for e in outcome.events if e["type"] == "version.trial"]
    assert [(t["trial"], t["passed"], t["refused"]) for t in trials] == [(1, False, False), (2, False, True), (3, True, False)]
    assert trials[0]["exit_code"] not in (0, None) and trials[0]["summary"] and trials[2]["summary"] == ""
    assert "failed on this code already" in trials[1]["summary"] and trials[1]["duration_ms"] == 0.0
    # the draws are one prompt, sampled; the workspace got the greedy two and the passing draw only
    draws = [r for r in policy.requests if r.code_only][2:]
    assert len(draws) == 3 and all(r.temperature >= 1.0 for r in draws)
    assert all(r.messages == draws[0].messages for r in draws) and len({r.seed for r in draws}) == 3
    assert [version_key(s) for s in _written(outcome)] == [version_key(v) for v in (first, second, right)]
    assert "version 1 of" in format_event(trials[0]) and "not tried" in format_event(trials[1])
    assert list(scratch_parent.iterdir()) == []  # every scratch copy removed


def test_with_no_passing_draw_the_last_that_ran_is_written_and_its_failure_is_the_next_observation(tmp_path, scratch_parent):
    pack, name, held, _ = _pack(tmp_path)
    head = '{"path": "solution.py", "name": "%s"}' % name
    run = '{"command": "%s"}' % TEST_COMMAND
    wrong = [held + f"\n    return {value}\n" for value in range(MAX_VERSIONS + 1)]
    wrong.append(held + "\n    return (1,\n")  # the last draw does not parse: the one before it is written
    outputs = ['{"path": "solution.py"}', head, wrong[0], run, head, wrong[1], run]
    outputs += [x for version in wrong[2:] for x in (head, version)] + [head, run]
    outcome, policy = _run(pack, outputs, tmp_path, max_steps=7)
    policy.assert_complete()
    assert outcome.result.status != "completed" and not outcome.result.metrics.task_success
    trials = [e for e in outcome.events if e["type"] == "version.trial"]
    assert [t["passed"] for t in trials] == [False] * MAX_VERSIONS and not any(t["refused"] for t in trials)
    assert trials[-1]["exit_code"] is None and "nothing was written" in trials[-1]["summary"]
    assert version_key(_written(outcome)[-1]) == version_key(wrong[-2])
    runs = [o for o in outcome.result.observations if o.tool == "bash"]
    assert len(runs) == 3 and runs[-1].result["exit_code"] != 0


def test_a_policy_that_cannot_answer_arguments_alone_draws_no_versions(tmp_path, scratch_parent):
    pack, name, held, right = _pack(tmp_path)
    head = '{"path": "solution.py", "name": "%s"}' % name
    run = '{"command": "%s"}' % TEST_COMMAND
    outputs = ['{"path": "solution.py"}', head, held + "\n    return None\n", run, head, held + "\n    return 0\n", run,
               head, right, run, json.dumps(f"I implemented {name} and the examples pass.")]
    policy = ScriptedPolicy(outputs)
    policy.code_blocks = policy.code_turns = True
    outcome = run_agent(pack, policy, Budgets(), artifact_dir=tmp_path / "run")
    policy.assert_complete()
    assert outcome.result.metrics.task_success
    assert not [e for e in outcome.events if e["type"] == "version.trial"]


def test_the_versions_written_are_every_replaced_one_and_the_current(tmp_path):
    from agent.contracts.decision import Observation
    from agent.coding.workspace import Workspace

    root = tmp_path / "ws"
    root.mkdir()
    (root / "m.py").write_text("import os\n\n\ndef f(x):\n    # now\n    return x + 2\n")
    workspace = Workspace(root=root)
    replaced = [Observation(id=f"obs-replace_function-{i}", tool="replace_function", ok=True,
                            result={"path": "m.py", "name": "f", "before": f"def f(x):\n    return x + {i}"})
                for i in range(2)]
    other = Observation(id="obs-replace_function-9", tool="replace_function", ok=True,
                        result={"path": "m.py", "name": "g", "before": "def g():\n    return 5"})
    keys = written_versions([*replaced, other], workspace, "m.py", "f")
    assert keys == {version_key(f"def f(x):\n    return x + {i}") for i in range(3)}
    assert version_key("def f(x):\n    return x+2  # layout and comments aside") in keys
