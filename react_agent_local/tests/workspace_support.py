"""Canned outputs of a guided fix-the-failing-test run, for the runner and page tests of approvals."""

from __future__ import annotations

import json
from typing import Any

from agent.task.packs import load_pack

FIXTEST_PACK = "fixtest_shipping"


def fixtest_script(name: str = FIXTEST_PACK) -> list[Any]:
    """What the model writes after the runtime's prefix at each guided step of the pack: read the
    declared files, run the tests (they fail), the pack's reference fix, run the tests, the Final.
    Computed from the pack itself, so the run is a real solve."""
    pack = load_pack(name)
    expected = pack.load_expected()
    fix = expected["reference_fix"]
    test_run = json.dumps({"command": pack.task.workspace.test_command})
    outputs = [json.dumps({"path": p}) for p in pack.task.subgoals["read_file"]] + [test_run]
    outputs += [json.dumps({"path": fix["path"], "old": fix["old"].strip(), "new": fix["new"].strip()}), test_run]
    return outputs + [json.dumps(f"I fixed {expected['function']} and the tests pass.")]


#: the two bash steps of ``fixtest_script``: each asks the operator under always_ask
BASH_STEPS = 2
