"""The approval card in headless Chromium: a real runner (scripted test policy, real sandbox, the
operator's ``--approval always_ask``) asks before each bash command of a guided fixtest run; the page
shows the command, its grade, the reason and a countdown, and the learner's 批准 lets the run go on."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from playwright import sync_api

from workspace_support import BASH_STEPS, FIXTEST_PACK, fixtest_script

from .conftest import SCREENSHOTS, Process, start_runner, write_tiny_gguf

pytestmark = pytest.mark.browser
expect = sync_api.expect

XSS = '<img src=x onerror="window.__xss=1">'


@pytest.fixture(scope="module")
def runner(browser_tmp: Path, site_port: int) -> Iterator[Process]:
    proc = start_runner(browser_tmp, site_port, fixtest_script(),
                        extra_args=("--approval", "always_ask", "--approval-seconds", "90"))
    yield proc
    proc.stop()


@pytest.fixture
def page(browser: Any, site: Process) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.goto(site.base_url + "/react-agent")
    yield pg
    context.close()
    assert not errors, errors


def test_the_approval_card_shows_the_question_and_approve_lets_the_run_finish(page: Any, runner: Process,
                                                                           browser_tmp: Path) -> None:
    card = page.locator("#approval-card")
    # Run data on the card is text, never markup.
    page.evaluate("""cmd => window.ReactAgentPage.showApproval({approval_id: 'apr-0000000000000000', command: cmd,
        level: 'unknown', reason: cmd, seconds: 30, expires_at: new Date(Date.now() + 30000).toISOString()}, null)""", XSS)
    expect(page.locator("#approval-command")).to_have_text(XSS)
    expect(page.locator("#approval-reason")).to_have_text(XSS)
    assert card.locator("img").count() == 0 and page.evaluate("window.__xss") is None

    page.fill("#runner-url", runner.base_url)
    page.click("#runner-check")
    expect(page.locator("#runner-state")).to_contain_text("已连接", timeout=15_000)
    page.fill("#model-path", str(write_tiny_gguf(browser_tmp / "tiny-approval.gguf")))
    page.click("#model-inspect")
    expect(page.locator("#model-state")).to_contain_text("检查通过", timeout=60_000)
    page.select_option("#pack-select", FIXTEST_PACK)
    page.click("#run-start")

    decided = page.locator("#timeline .tl-row", has_text="bash 风险评级")
    for n in range(BASH_STEPS):
        expect(card).to_be_visible(timeout=60_000)
        expect(page.locator("#approval-command")).to_have_text("python -m pytest")
        expect(page.locator("#approval-level")).to_have_text("写工作区 (workspace_write)")
        expect(page.locator("#approval-reason")).not_to_be_empty()
        expect(page.locator("#approval-countdown")).to_contain_text("剩余")
        expect(page.locator("#timeline")).to_contain_text("等待批准")
        if n == 0:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            card.screenshot(path=str(SCREENSHOTS / "20-approval-card.png"))
        page.get_by_role("button", name="批准").click()
        expect(decided).to_have_count(n + 1, timeout=60_000)
    expect(page.locator("#run-status")).to_have_text("已完成 completed", timeout=60_000)
    expect(card).to_be_hidden()
    expect(decided.first).to_contain_text("写工作区 (workspace_write)")
    expect(decided.first).to_contain_text("→ 运行（你批准了）")
