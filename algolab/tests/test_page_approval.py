"""The approval card in headless Chromium: a real runner (scripted test policy, real sandbox, the
operator's ``--approval always_ask``) asks before each bash command of a guided fixtest run; the page
opened from the runner's operator link shows the command, its grade, the reason and a countdown, and
the operator's 批准 lets the run go on. The card tells the truth about a command built to hide what
it does (16 harmless lines, then ``rm -rf ./*`` behind ANSI and bidi characters), and a page without
the runner's token can see the question but not answer it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest
from playwright import sync_api

from workspace_support import BASH_STEPS, FIXTEST_PACK, fixtest_script

from .conftest import SCREENSHOTS, Process, operator_link, start_runner, write_tiny_gguf

pytestmark = pytest.mark.browser
expect = sync_api.expect

XSS = '<img src=x onerror="window.__xss=1">'


@pytest.fixture(scope="module")
def runner(browser_tmp: Path, site_port: int) -> Iterator[Process]:
    proc = start_runner(browser_tmp, site_port, fixtest_script(),
                        extra_args=("--approval", "always_ask", "--approval-seconds", "90"))
    yield proc
    proc.stop()


HARMLESS = "\n".join(f"echo step {n} of the dry run: nothing is changed" for n in range(16))  # over 500 characters
WIPE = "rm -rf ./*"
#: cursor up, erase the line, carriage return, then a lie; a right-to-left override; zero-width joiners
DISGUISE = "\x1b[1A\x1b[2K\r" + "ls -la src" + "\u202e" + "txt.hsab" + "\u200b\u2066\u200f"
ATTACK = f"{HARMLESS}\ncat /etc/shadow\n{WIPE}{DISGUISE}"
HIDDEN = "[\\u0000-\\u0009\\u000b-\\u001f\\u007f-\\u009f\\u200b-\\u200f\\u202a-\\u202e\\u2066-\\u2069\\ufeff]"


def attack_script() -> list[Any]:
    """The guided fixtest run whose first bash command is ATTACK."""
    script = fixtest_script()
    first_bash = next(i for i, out in enumerate(script) if isinstance(out, str) and '"command"' in out)
    script[first_bash] = json.dumps({"command": ATTACK})
    return script


@pytest.fixture(scope="module")
def attack_runner(browser_tmp: Path, site_port: int) -> Iterator[Process]:
    proc = start_runner(browser_tmp, site_port, attack_script(),
                        extra_args=("--approval", "always_ask", "--approval-seconds", "90"))
    yield proc
    proc.stop()


def open_page(browser: Any, url: str) -> tuple[Any, Any, list[str]]:
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.goto(url)
    return context, pg, errors


@pytest.fixture
def page(browser: Any, site: Process, runner: Process) -> Iterator[Any]:
    """The lab page opened from the operator link the runner printed."""
    context, pg, errors = open_page(browser, operator_link(site, runner))
    yield pg
    context.close()
    assert not errors, errors


def start_fixtest_run(page: Any, runner: Process, browser_tmp: Path, name: str) -> None:
    page.fill("#runner-url", runner.base_url)
    page.click("#runner-check")
    expect(page.locator("#runner-state")).to_contain_text("已连接", timeout=15_000)
    page.fill("#model-path", str(write_tiny_gguf(browser_tmp / f"tiny-{name}.gguf")))
    page.click("#model-inspect")
    expect(page.locator("#model-state")).to_contain_text("检查通过", timeout=60_000)
    page.select_option("#pack-select", FIXTEST_PACK)
    page.click("#run-start")


def test_the_approval_card_shows_the_question_and_approve_lets_the_run_finish(page: Any, runner: Process,
                                                                           browser_tmp: Path) -> None:
    card = page.locator("#approval-card")
    # Run data on the card is text, never markup.
    page.evaluate("""cmd => window.ReactAgentPage.showApproval({approval_id: 'apr-0000000000000000', command: cmd,
        level: 'unknown', reason: cmd, seconds: 30, expires_at: new Date(Date.now() + 30000).toISOString()}, null)""", XSS)
    expect(page.locator("#approval-command")).to_have_text(XSS)
    expect(page.locator("#approval-reason")).to_have_text(XSS)
    assert card.locator("img").count() == 0 and page.evaluate("window.__xss") is None

    # The link's fragment named the runner and its token: kept for this tab, gone from the address bar.
    assert page.evaluate("location.hash") == "" and page.input_value("#runner-url") == runner.base_url
    assert page.evaluate("u => window.ReactAgentPage.operatorToken(u)", runner.base_url) == runner.token
    start_fixtest_run(page, runner, browser_tmp, "approval")

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
    expect(decided.first).to_contain_text("→ 运行（你批准了，经本页（operator 令牌））")


def test_the_card_shows_the_whole_disguised_command_with_visible_escapes_and_real_paths(
        browser: Any, site: Process, attack_runner: Process, browser_tmp: Path) -> None:
    context, page, errors = open_page(browser, operator_link(site, attack_runner))
    start_fixtest_run(page, attack_runner, browser_tmp, "attack")
    card, command = page.locator("#approval-card"), page.locator("#approval-command")
    expect(card).to_be_visible(timeout=60_000)
    expect(page.locator("#approval-note")).to_contain_text("Job 正在等待你的回答", timeout=15_000)  # the operator's copy
    text = command.text_content()
    assert WIPE in text and "cat /etc/shadow" in text and all(line in text for line in HARMLESS.splitlines())
    assert "\\x1b[1A\\x1b[2K\\x0dls -la src\\u202etxt.hsab\\u200b\\u2066\\u200f" in text
    assert page.evaluate(f"t => new RegExp('{HIDDEN}').test(t)", text) is False  # no raw control or bidi character
    assert command.locator(".ctl").count() == 7
    assert page.evaluate("e => e.scrollHeight > e.clientHeight", command.element_handle())  # long: it scrolls
    expect(page.locator("#approval-size")).to_contain_text("18 行")
    expect(page.locator("#approval-reason")).not_to_be_empty()
    expect(page.locator("#approval-level")).to_contain_text("(")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    card.screenshot(path=str(SCREENSHOTS / "21-approval-card-disguised-command.png"))
    page.get_by_role("button", name="拒绝").click()
    decided = page.locator("#timeline .tl-row", has_text="bash 风险评级")
    expect(decided.first).to_contain_text("→ 拒绝（你拒绝了，经本页（operator 令牌））", timeout=60_000)
    assert page.evaluate(f"t => new RegExp('{HIDDEN}').test(t)", page.locator("#timeline").text_content()) is False
    page.click("#run-cancel")
    expect(page.locator("#run-status")).to_contain_text("cancelled", timeout=60_000)
    context.close()
    assert not errors, errors


def test_a_page_without_the_runners_token_sees_the_question_but_cannot_answer(
        browser: Any, site: Process, runner: Process, browser_tmp: Path) -> None:
    context, page, errors = open_page(browser, site.base_url + "/react-agent")  # not from the operator link
    start_fixtest_run(page, runner, browser_tmp, "tokenless")
    expect(page.locator("#approval-card")).to_be_visible(timeout=60_000)
    expect(page.locator("#approval-command")).to_have_text("python -m pytest")
    expect(page.locator("#approval-note")).to_contain_text("operator link")
    expect(page.get_by_role("button", name="批准")).to_be_disabled()
    expect(page.get_by_role("button", name="拒绝")).to_be_disabled()
    run_id = page.locator("#run-id").text_content().split()[1]
    # What this page (the right origin, no token) could send by hand is refused too.
    statuses = page.evaluate("""async ([base, run]) => {
        const listed = await fetch(base + '/agent/runs/' + run + '/approvals');
        const answered = await fetch(base + '/agent/runs/' + run + '/approvals/apr-0123456789abcdef',
            {method: 'POST', headers: {'Content-Type': 'application/json'}, body: '{"decision":"approve"}'});
        const wrong = await fetch(base + '/agent/runs/' + run + '/approvals',
            {headers: {Authorization: 'Bearer ' + 'x'.repeat(43)}});
        return [listed.status, answered.status, wrong.status];
    }""", [runner.base_url, run_id])
    assert statuses == [401, 401, 403]
    expect(page.locator("#run-status")).to_contain_text("running")
    page.click("#run-cancel")
    expect(page.locator("#run-status")).to_contain_text("cancelled", timeout=60_000)
    context.close()
    assert not errors, errors
