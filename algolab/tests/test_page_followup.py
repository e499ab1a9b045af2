"""继续提问 in headless Chromium: after a run ends, the learner's follow-up makes that run turn 1 of a
session on the runner, and the follow-up's own run streams into the timeline; its Final cites the
first turn's evidence. A real site and a real runner process with the scripted test policy.

The runner here is the package's ``agent.runner.server.main`` with one change, made in the child process: its
scripted policy answers whatever the runtime asks next (the tool of a guided step, or the answer), as
``tests/test_server_sessions.py`` does in-process. A script file gives every job the same outputs from
its first, and a follow-up's first request is for the answer, not for a search."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from playwright import sync_api

from .conftest import PACKAGE_DIR, SCREENSHOTS, TEST_POLICY_ENV, Process, free_port, write_tiny_gguf

pytestmark = pytest.mark.browser
expect = sync_api.expect

RUNNER = r"""
import sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from agent.runner import server
from agent.models.backends.scripted import ScriptedPolicy
from agent.task.packs import load_pack
from runtime_helpers import chain_outputs

CHAIN = chain_outputs(load_pack(None))


def step(request):
    for tool, output in zip(("knowledge_search", "calculator", "plot"), CHAIN):
        if f'"tool": "{tool}"' in request.prefix:
            return output
    return CHAIN[3]


server.scripted_policy_factory = lambda script: (lambda request: ScriptedPolicy([step] * 12))
server.main(sys.argv[3:])
"""
EVIDENCE = "obs-knowledge_search-1, obs-calculator-2, obs-plot-3"
XSS = '<img src=x onerror="window.__xss=1">'
# The canned Final states the average and the verdict, so the follow-up asks for those: a question it
# does not answer ("which batch is lowest?") is refused by the claim gate, as it should be.
FOLLOW_UP = XSS + " 平均成功率是多少？发布规则还满足吗？"


@pytest.fixture(scope="module")
def runner(browser_tmp: Path, site_port: int) -> Iterator[Process]:
    port = free_port()
    script = browser_tmp / f"script-{port}.json"
    script.write_text("[]", encoding="utf-8")  # turns the test policy on; RUNNER gives its outputs
    env = {**os.environ, TEST_POLICY_ENV: str(script)}
    args = [sys.executable, "-c", RUNNER, str(PACKAGE_DIR), str(PACKAGE_DIR / "tests"), "--port", str(port),
            "--runs-dir", str(browser_tmp / f"runs-{port}"), "--allow-origin", f"http://127.0.0.1:{site_port}",
            "--log-level", "warning"]
    proc = Process(args, f"http://127.0.0.1:{port}", browser_tmp / f"runner-{port}.log", env=env,
                   ready_path="/status").start(timeout=60)
    yield proc
    proc.stop()


@pytest.fixture
def page(browser: Any, site: Process) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" and "Failed to load resource" not in msg.text else None)
    pg.goto(site.base_url + "/react-agent")
    yield pg
    context.close()
    assert not errors, errors


def run_id_of(page: Any) -> str:
    return re.match(r"run (run-[0-9a-f]{12})", page.locator("#run-id").inner_text()).group(1)


def test_a_follow_up_continues_the_session_and_its_turn_streams_in(page: Any, runner: Process,
                                                                    browser_tmp: Path) -> None:
    page.fill("#runner-url", runner.base_url)
    page.click("#runner-check")
    expect(page.locator("#runner-state")).to_contain_text("已连接", timeout=15_000)
    page.fill("#model-path", str(write_tiny_gguf(browser_tmp / "tiny-followup.gguf")))
    page.click("#model-inspect")
    expect(page.locator("#model-state")).to_contain_text("检查通过", timeout=60_000)
    box, send, turns = page.locator("#followup"), page.locator("#followup-send"), page.locator("#followup-turns li")
    expect(box).to_be_hidden()
    page.select_option("#pack-select", "default")
    page.click("#run-start")
    expect(page.locator("#run-status")).to_have_text("已完成 completed", timeout=60_000)
    first = run_id_of(page)

    # The box appears once the run has ended; empty, it sends nothing.
    expect(box).to_be_visible()
    expect(send).to_be_disabled()
    expect(page.locator("#followup-state")).to_contain_text("第 1 轮")
    page.fill("#followup-input", FOLLOW_UP)
    page.get_by_role("button", name="继续提问").click()

    expect(turns).to_have_count(2, timeout=15_000)
    expect(page.locator("#run-status")).to_have_text("已完成 completed", timeout=60_000)
    second = run_id_of(page)
    assert second != first
    expect(page.locator("#run-id")).to_have_attribute("data-transport", "stream")
    # The follow-up's steps are the timeline now: its question, then one step whose Final cites turn 1.
    timeline = page.locator("#timeline")
    expect(timeline.locator(".tl-turn")).to_contain_text("第 2 轮")
    expect(timeline.locator(".tl-turn .tl-v")).to_have_text(FOLLOW_UP)
    expect(timeline.locator(".tl-card[data-step]")).to_have_count(1)
    expect(timeline).to_contain_text('final · evidence_ids ["obs-knowledge_search-1","obs-calculator-2","obs-plot-3"]')
    expect(timeline).to_contain_text("final.validated")
    expect(timeline).not_to_contain_text("Action（已校验）")
    final = page.locator("#run-final")
    expect(final).to_contain_text("So it meets the release rule.")
    expect(final).to_contain_text("evidence_ids: " + EVIDENCE)
    expect(turns.nth(0)).to_contain_text("run " + first)
    expect(turns.nth(1)).to_contain_text("run " + second)
    expect(turns.nth(1).locator(".ft-message")).to_have_text("问：" + FOLLOW_UP)
    expect(turns.nth(1).locator(".ft-answer")).to_contain_text("答：The average is 79")
    # Model and tool text on the page is text, never markup.
    assert box.locator("img").count() == 0 and timeline.locator("img").count() == 0
    assert page.evaluate("window.__xss") is None

    # The runner's session holds both turns, each with its run; turn 2 cites turn 1's evidence.
    [entry] = httpx.get(runner.base_url + "/agent/sessions", timeout=10).json()["sessions"]
    expect(page.locator("#followup-state")).to_contain_text(entry["id"])
    session = httpx.get(f"{runner.base_url}/agent/sessions/{entry['id']}", timeout=10).json()
    assert [(t["turn"], t["run_id"]) for t in session["turns"]] == [(1, first), (2, second)]
    assert session["turns"][1]["final"]["evidence_ids"] == EVIDENCE.split(", ")
    assert session["turns"][1]["observation_ids"] == []

    # Enter sends the next one in the same session.
    page.fill("#followup-input", "再确认一次平均值。")
    page.press("#followup-input", "Enter")
    expect(turns).to_have_count(3, timeout=15_000)
    expect(page.locator("#run-status")).to_have_text("已完成 completed", timeout=60_000)
    expect(turns.nth(2).locator(".ft-answer")).to_contain_text("答：The average is 79")
    assert len(httpx.get(runner.base_url + "/agent/sessions", timeout=10).json()["sessions"]) == 1
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    box.screenshot(path=str(SCREENSHOTS / "21-followup.png"))
