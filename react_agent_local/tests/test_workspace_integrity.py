"""Nothing the agent leaves in the workspace runs on the host later, and nothing it leaves there can make
a failing test pass: the file tools refuse ``.git`` at any depth, hooks folders, ``.gitmodules`` and
the test machinery (conftest.py, pytest's configuration, start-up files); whatever a command plants of
that kind is removed after it, and the operator's own ``git status`` / ``git commit`` afterwards runs
nothing; the test command runs the interpreter's own pytest; graders refuse a changed conftest; what a
command prints reaches the model and its artifact redacted. All against the real sandbox, both backends."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from agent.util import secrets as agent_secrets
from agent.shell_risk import ApprovalPolicy
from agent.tools import ToolContext, ToolError, catalog
from agent.coding.tools.shell import HEAD_CHARS, TAIL_CHARS
from agent.coding.workspace import Workspace, sandbox_for
from agent.coding.workspace_grading import grade_workspace

REGISTRY = catalog()
APP = "def add(a, b):\n    return a - b\n"
TEST = "from app import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
# A conftest that turns every failed report into a pass (hole 8 of the boundary probe).
PASS_ALL = ("import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
            "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n")


@pytest.fixture(params=["bwrap", "landlock"])
def backend(request, monkeypatch):
    monkeypatch.setenv("REACT_AGENT_SANDBOX", request.param)
    return request.param


@pytest.fixture
def repo(tmp_path: Path, backend: str) -> Path:
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "app.py").write_text(APP)
    (root / "tests" / "test_app.py").write_text(TEST)
    (root / "scripts").mkdir()  # the fallback creates no new entry at a root with protected ones
    return root


def context(root: Path, tmp_path: Path, protected: tuple[str, ...] = ("tests",),
            **workspace_fields) -> tuple[ToolContext, list[dict]]:
    workspace = Workspace(root=root.resolve(), protected=protected, test_command="python -m pytest -q",
                          **workspace_fields)
    workspace = replace(workspace, baseline=workspace.protected_hashes())
    events: list[dict] = []
    ctx = ToolContext(knowledge_dir=tmp_path, artifact_dir=tmp_path / "artifacts", workspace=workspace,
                      sandbox=sandbox_for(workspace), approval=ApprovalPolicy(mode="ask_on_risk"),
                      approver=lambda request: True, approval_seconds=5.0,
                      emit=lambda kind, **data: events.append({"type": kind, **data}))
    return ctx, events


def call(ctx: ToolContext, tool: str, **arguments):
    spec = REGISTRY.get(tool)
    return spec.execute(ctx, spec.validate(arguments), threading.Event())


def host_git(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """The operator's own git in that folder, as it would run after the agent stopped."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "op", "GIT_AUTHOR_EMAIL": "op@example.invalid",
           "GIT_COMMITTER_NAME": "op", "GIT_COMMITTER_EMAIL": "op@example.invalid"}
    return subprocess.run(["git", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("path", ["vendor/lib/.git/config", "a/.git", "sub/.GIT/hooks/pre-commit",
                                  ".githooks/pre-commit", ".husky/pre-commit", ".gitmodules", "lib/.gitmodules"])
def test_the_file_tools_refuse_what_git_would_run(repo, tmp_path, path):
    ctx, _ = context(repo, tmp_path)
    with pytest.raises(ToolError) as info:
        call(ctx, "write_file", path=path, content="[core]\n\tfsmonitor = touch /tmp/owned\n")
    assert info.value.code == "read_only"
    assert not (repo / path).exists() and not (repo / path.split("/")[0]).exists()


@pytest.mark.parametrize("path", ["conftest.py", "src/conftest.py", "pytest.ini", "pyproject.toml", "setup.cfg",
                                  "tox.ini", "pytest.py", "_pytest/__init__.py", "sitecustomize.py", "evil.pth"])
def test_the_file_tools_refuse_the_test_machinery_unless_the_task_is_about_it(repo, tmp_path, backend, path):
    ctx, _ = context(repo, tmp_path)
    with pytest.raises(ToolError) as info:
        call(ctx, "write_file", path=path, content="# changed\n")
    assert info.value.code == "protected_path" and "how the tests run" in info.value.message
    assert not (repo / path).exists()
    if backend == "landlock":
        return  # the fallback cannot create entries at a root holding protected ones (sandbox/landlock.py)
    allowed, _ = context(repo, tmp_path, allow_test_config=True)
    call(allowed, "write_file", path=path, content="# changed\n")
    assert (repo / path).read_text() == "# changed\n"


def test_a_nested_repository_a_command_plants_is_removed_and_the_operators_git_runs_nothing(repo, tmp_path):
    # The grader cannot see what a script does, so the planting goes through one; the marker is what
    # core.fsmonitor and a pre-commit hook would create on the host at the operator's next git command.
    marker = tmp_path / "ran-on-the-host"
    plant = (f"import os, subprocess\n"
             f"os.makedirs('scripts/vendor/lib', exist_ok=True)\n"
             f"subprocess.run(['git', 'init', '-q', 'scripts/vendor/lib'], check=True)\n"
             f"subprocess.run(['git', '-C', 'scripts/vendor/lib', 'config', 'core.fsmonitor', 'touch {marker}'], check=True)\n"
             f"hook = 'scripts/vendor/lib/.git/hooks/pre-commit'\n"
             f"open(hook, 'w').write('#!/bin/sh\\ntouch {marker}\\n')\n"
             f"os.chmod(hook, 0o755)\n"
             f"open('scripts/vendor/lib/x.txt', 'w').write('x')\n")
    ctx, events = context(repo, tmp_path)
    call(ctx, "write_file", path="scripts/make_vendor.py", content=plant)
    result = call(ctx, "bash", command="python3 scripts/make_vendor.py; ls -a scripts/vendor/lib")
    assert result["exit_code"] == 0, result
    assert ".git" in result["stdout"]  # the command did plant it inside the sandbox
    assert result["git_removed"] == ["scripts/vendor/lib/.git"]
    assert "removed scripts/vendor/lib/.git" in result["stderr"]
    assert any(e["type"] == "workspace.git_removed" and e["paths"] == ["scripts/vendor/lib/.git"] for e in events)
    assert not os.path.lexists(repo / "scripts" / "vendor" / "lib" / ".git") and (repo / "scripts" / "vendor" / "lib" / "x.txt").exists()
    # The operator, on the host, afterwards: git finds no repository there and runs nothing.
    host_git(repo / "scripts" / "vendor" / "lib", "status")
    host_git(repo / "scripts" / "vendor" / "lib", "add", "-A")
    host_git(repo / "scripts" / "vendor" / "lib", "commit", "-qm", "x")
    assert not marker.exists()


def test_a_nested_repository_the_user_already_had_is_kept(repo, tmp_path):
    (repo / "third_party" / "dep").mkdir(parents=True)
    assert host_git(repo / "third_party" / "dep", "init", "-q").returncode == 0
    ctx, _ = context(repo, tmp_path)
    result = call(ctx, "bash", command="ls third_party/dep")
    assert result["git_removed"] == [] and (repo / "third_party" / "dep" / ".git" / "HEAD").is_file()


def test_the_root_git_a_workspace_lacked_cannot_be_left_behind(repo, tmp_path):
    marker = tmp_path / "ran-on-the-host"
    ctx, _ = context(repo, tmp_path)
    script = ("import subprocess\n"
              "subprocess.run(['git', 'init', '-q', '.'])\n"
              f"subprocess.run(['git', 'config', 'core.fsmonitor', 'touch {marker}'])\n")
    call(ctx, "write_file", path="scripts/init_repo.py", content=script)
    call(ctx, "bash", command="python3 scripts/init_repo.py")
    config = repo / ".git" / "config"
    assert not config.exists()
    host_git(repo, "status")
    assert not marker.exists()


def test_the_test_command_runs_the_interpreters_own_pytest(repo, tmp_path):
    # A pytest.py in the workspace (however it got there) that exits 0 cannot stand in for pytest.
    (repo / "pytest.py").write_text("import sys\nsys.exit(0)\n")
    ctx, _ = context(repo, tmp_path)
    result = call(ctx, "bash", command="python -m pytest -q")
    assert result["test_run"] and result["exit_code"] == 1, result
    assert "1 failed" in result["stdout"]
    # The task's own modules still import as under ``python -m pytest`` once the bug is fixed.
    (repo / "pytest.py").unlink()
    (repo / "app.py").write_text("def add(a, b):\n    return a + b\n")
    fixed, _ = context(repo, tmp_path)
    assert call(fixed, "bash", command="python -m pytest -q")["exit_code"] == 0


def test_a_conftest_the_run_made_fails_the_gate_and_the_grader(repo, tmp_path):
    # Even where the task protects no test file, a conftest.py the run made is a change to the tests.
    ctx, _ = context(repo, tmp_path, protected=())
    call(ctx, "write_file", path="scripts/make_conftest.py", content=f"open('tests/conftest.py', 'w').write({PASS_ALL!r})\n")
    call(ctx, "bash", command="python3 scripts/make_conftest.py")
    passing = call(ctx, "bash", command="python -m pytest -q")
    assert passing["exit_code"] == 0  # the planted conftest does make the bug's test "pass"...
    assert ctx.workspace.protected_changes() == ["tests/conftest.py"]  # ...which the Final gate refuses
    grade = grade_workspace({"type": "workspace_tests", "command": "python -m pytest -q"}, ctx.workspace)
    assert not grade.passed and "tests_modified" in grade.failures


def test_what_a_command_prints_reaches_the_model_and_the_artifact_redacted(repo, tmp_path):
    key = "sk-test-" + os.urandom(12).hex()
    agent_secrets.register([key])
    ctx, _ = context(repo, tmp_path)
    filler = HEAD_CHARS + TAIL_CHARS + 200
    result = call(ctx, "bash", command=f"echo {key}; pwd; python3 -c \"print('x' * {filler})\"; echo {key}; "
                                       f"cat {repo}/app.py; echo /home/someone/secret")
    assert result["artifact"] is not None
    [artifact] = list((tmp_path / "artifacts").iterdir())
    body = artifact.read_text()
    for text in (body, result["stdout"]):
        assert key not in text and str(repo) not in text and str(tmp_path) not in text
    assert "[redacted]" in body and "def add" in body and "<path>" in body
