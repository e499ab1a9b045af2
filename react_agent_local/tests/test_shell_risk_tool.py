"""The grader's verdicts through the real bash tool and sandbox (both backends): git that would run a
program on the host later is refused even when the operator would approve it, wiping the workspace
is not run without asking, and the question the operator sees names the part of the script it means.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from agent.coding.approvals import ApprovalRequest
from agent.shell_risk import ApprovalPolicy
from agent.tools import ToolContext, ToolError, catalog
from agent.coding.workspace import Workspace, sandbox_for

BACKENDS = ["bwrap", "landlock"]
FILES = {"src/app.py": "def add(a, b):\n    return a + b\n", "tests/test_app.py": "def test(): pass\n",
         "README.md": "# demo\n"}


@pytest.fixture(params=BACKENDS)
def root(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REACT_AGENT_SANDBOX", request.param)
    folder = tmp_path / "project"  # no .git: the case where git init would make a new repository
    for rel, text in FILES.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder.resolve()


def _context(root: Path, mode: str, asked: list[ApprovalRequest], *, approve: bool = True) -> ToolContext:
    workspace = Workspace(root=root, protected=(), test_command="python -m pytest -q")
    workspace = replace(workspace, baseline=workspace.protected_hashes())
    return ToolContext(knowledge_dir=root.parent, artifact_dir=root.parent / "artifacts", workspace=workspace,
                       sandbox=sandbox_for(workspace), approval=ApprovalPolicy(mode=mode),  # type: ignore[arg-type]
                       approver=lambda request: asked.append(request) or approve, approval_seconds=5.0,
                       emit=lambda kind, **data: None)


def _bash(ctx: ToolContext, command: str) -> dict:
    spec = catalog().get("bash")
    return spec.execute(ctx, spec.validate({"command": command}), threading.Event())


def _intact(root: Path) -> bool:
    return all((root / rel).is_file() and (root / rel).read_text() == text for rel, text in FILES.items())


HOST_LATER = ["git init -q . && git config core.fsmonitor 'touch pwned'",
              "mkdir -p vendor/lib/.git && printf '[core]\\n\\tfsmonitor = touch pwned\\n' > vendor/lib/.git/config",
              "mkdir .githooks && printf '#!/bin/sh\\ntouch pwned\\n' > .githooks/pre-commit && chmod +x "
              ".githooks/pre-commit"]


@pytest.mark.parametrize("command", HOST_LATER)
@pytest.mark.parametrize("mode", ["ask_on_risk", "always_ask"])
def test_what_git_would_run_on_the_host_is_refused_even_when_the_operator_approves(
        root: Path, mode: str, command: str) -> None:
    asked: list[ApprovalRequest] = []
    with pytest.raises(ToolError) as info:
        _bash(_context(root, mode, asked), command)
    assert info.value.code == "command_refused" and asked == []
    assert not [p for p in root.rglob("*") if p.name in (".git", ".githooks", "pwned")]


WIPES = ["rm -rf {root}", "rm -rf [a-z]*", "find . -delete", "git rm -rf . 2>/dev/null; rm -rf src tests",
         "python3 -c \"import shutil; shutil.rmtree('.')\"", "cd /tmp/.. && rm -rf {relative}"]


@pytest.mark.parametrize("command", WIPES)
def test_wiping_the_workspace_does_not_run_when_nobody_is_asked(root: Path, command: str) -> None:
    with pytest.raises(ToolError) as info:
        _bash(_context(root, "never_ask", []), command.format(root=root, relative=str(root).lstrip("/")))
    assert info.value.code == "command_refused" and "destructive" in str(info.value)
    assert _intact(root)


def test_the_question_names_the_part_of_the_script_it_is_about(root: Path) -> None:
    asked: list[ApprovalRequest] = []
    command = "\n".join(["echo step"] * 16 + ["rm -rf ./*"])
    with pytest.raises(ToolError):
        _bash(_context(root, "ask_on_risk", asked, approve=False), command)
    assert [r.level for r in asked] == ["destructive"]
    assert asked[0].reason.endswith("`rm -rf ./*`") and _intact(root)
