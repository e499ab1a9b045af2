"""The workspace goal box in headless Chromium: a real runner process (scripted test policy, real
sandbox) started with the operator's ``--workspace`` on a small repository made here and
``--approval always_ask``; the page queues a goal in words, shows each approval question (批准 lets
the command run), the timeline, the changed files and their diff, and 撤销更改 puts the file back."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from playwright import sync_api

from goal_support import make_repo, static_script

from .conftest import SCREENSHOTS, Process, operator_link, start_runner, write_tiny_gguf

pytestmark = pytest.mark.browser
expect = sync_api.expect

XSS = '<img src=x onerror="window.__xss=1">'


@pytest.fixture(scope="module")
def repo(browser_tmp: Path) -> Any:
    return make_repo(browser_tmp / "goal-repos", 61)


@pytest.fixture(scope="module")
def runner(browser_tmp: Path, site_port: int, repo: Any) -> Iterator[Process]:
    proc = start_runner(browser_tmp, site_port, static_script(repo),
                        extra_args=("--workspace", str(repo.root), "--approval", "always_ask",
                                    "--approval-seconds", "90"))
    yield proc
    proc.stop()


@pytest.fixture
def page(browser: Any, site: Process, runner: Process) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.goto(operator_link(site, runner))  # the operator's link: only it can answer approvals
    yield pg
    context.close()
    assert not errors, errors


def test_a_goal_an_approval_the_diff_and_a_revert(page: Any, runner: Process, repo: Any, browser_tmp: Path) -> None:
    before = (repo.root / repo.source).read_text()
    # what the runner sends is text on the page, never markup
    assert page.evaluate("e => window.ReactAgentGoal.describe(e)", {"type": "approval.requested", "command": XSS}) \
        == "? " + XSS
    page.fill("#runner-url", runner.base_url)
    page.fill("#model-path", str(write_tiny_gguf(browser_tmp / "tiny-goal.gguf")))
    page.fill("#goal-text", f"{repo.function} forgets its factor, so its test fails; fix it without touching the tests")
    page.click("#goal-start")
    for _ in range(2):  # the test run before the change and the one after it
        expect(page.locator("#goal-approval")).to_be_visible(timeout=60_000)
        expect(page.locator("#goal-approval-command")).to_have_text("python -m pytest")
        page.click("#goal-approve")
    expect(page.locator("#goal-status")).to_contain_text("completed / completed", timeout=90_000)
    expect(page.locator("#goal-files")).to_contain_text(f"{repo.source}（modified）")
    expect(page.locator("#goal-diff")).to_contain_text(f"+    {repo.right}")
    expect(page.locator("#goal-events")).to_contain_text(f"read_file {repo.source}")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "goal-diff.png"), full_page=True)
    assert repo.right in (repo.root / repo.source).read_text()
    page.click("#goal-revert")
    expect(page.locator("#goal-revert-result")).to_contain_text(f"已撤销：{repo.source}", timeout=15_000)
    assert (repo.root / repo.source).read_text() == before


def test_a_refused_goal_says_why(page: Any, browser_tmp: Path, site_port: int) -> None:
    bare = start_runner(browser_tmp, site_port, [])  # no --workspace: a goal is refused
    try:
        page.fill("#runner-url", bare.base_url)
        page.fill("#model-path", str(write_tiny_gguf(browser_tmp / "tiny-goal-2.gguf")))
        page.fill("#goal-text", "fix the failing test")
        page.click("#goal-start")
        expect(page.locator("#goal-status")).to_contain_text("workspace_not_configured", timeout=15_000)
    finally:
        bare.stop()
