"""A goal in words on a small repository with the real 1.5B (greedy): ``react-agent run --workspace DIR
"the report"``, the model process started by the CLI like a user's.

What must hold: the runtime finds the test command, the failing test and the source it points at by
itself; the test file is never changed; the run is graded by a hidden test the agent never saw, laid
over a copy of its files; the report lists the changed file and the diff; the revert puts it back.
The repository (random names, a dropped factor) is one the 1.5B fixes greedily; a wrong fix fails CI.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from goal_support import make_repo
from server_support import PACKAGE_ROOT, require_e2e_model

RUN_SECONDS = 600
# Opted out of CI until it is seen to pass: its one run here (beside a CI run on 2 cores) did not
# finish within 900 s. Run it with -m "slow and unproven".
pytestmark = [pytest.mark.slow, pytest.mark.unproven, pytest.mark.timeout(RUN_SECONDS + 600)]


def test_the_real_model_fixes_a_repository_from_a_goal_in_words(tmp_path):
    repo = make_repo(tmp_path / "repos", 71)
    test_before = (repo.root / repo.test).read_text()
    source_before = (repo.root / repo.source).read_text()
    goal = (f"{repo.function} ignores how much it should scale the value, so {repo.test} fails. "
            "Fix the code without touching the tests.")
    proc = subprocess.run([sys.executable, "-m", "agent", "run", "--workspace", str(repo.root), "--model",
                           str(require_e2e_model()), "--temperature", "0", "--json", "--approval", "never_ask",
                           "--runs-dir", str(tmp_path / "runs"), goal],
                          cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=RUN_SECONDS + 300)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["discovery"]["failing"] == [f"{repo.test}::test_{repo.function}"], report["discovery"]
    assert repo.source in report["discovery"]["reads"]
    assert (repo.root / repo.test).read_text() == test_before
    assert report["status"] == "completed", (report["stop_reason"], report["error"])
    assert [f["path"] for f in report["changes"]["files"]] == [repo.source]
    # graded by a test the agent never saw, on a copy of its files
    graded = tmp_path / "graded"
    shutil.copytree(repo.root, graded, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    factor = int(repo.right.split("* ")[1].split()[0])
    (graded / "tests" / "test_hidden.py").write_text(
        f"from {repo.package}.{repo.module} import {repo.function}\n\n\ndef test_hidden():\n"
        f"    assert {repo.function}(7, 3) == {7 * factor + 3}\n    assert {repo.function}(-2) == {-2 * factor}\n")
    hidden = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=graded,
                            capture_output=True, text=True, timeout=300)
    assert hidden.returncode == 0, hidden.stdout[-2000:]
    reverted = subprocess.run([sys.executable, "-m", "agent", "revert", report["run_id"], "--runs-dir",
                               str(tmp_path / "runs")], cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=60)
    assert reverted.returncode == 0, reverted.stderr
    assert (repo.root / repo.source).read_text() == source_before
