"""The No.17 page asks the runner to explain a finished run (issue 17): headless Chromium, the real
site and the package's real runner with the scripted test policy (whose "explanation" is scripted and
labelled as such; the real model's is tested in react_agent_local/tests/test_explain.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from playwright import sync_api

from .conftest import GOOD_SCRIPT, Process, start_runner, write_tiny_gguf

pytestmark = pytest.mark.browser
expect = sync_api.expect


@pytest.fixture(scope="module")
def scripted_runner(browser_tmp: Path, site_port: int) -> Iterator[Process]:
    proc = start_runner(browser_tmp, site_port, GOOD_SCRIPT)
    yield proc
    proc.stop()


def test_a_finished_run_is_explained_in_the_models_words(browser: Any, site: Process, scripted_runner: Process,
                                                        browser_tmp: Path) -> None:
    model = write_tiny_gguf(browser_tmp / "tiny-header-only-explain.gguf")
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(site.base_url + "/react-agent")
    page.fill("#runner-url", scripted_runner.base_url)
    page.click("#runner-check")
    expect(page.locator("#runner-state")).to_contain_text("已连接", timeout=15_000)
    page.fill("#model-path", str(model))
    page.click("#model-inspect")
    expect(page.locator("#model-state")).to_contain_text("检查通过", timeout=60_000)
    expect(page.locator("#run-explain-btn")).to_be_disabled()  # nothing has run yet
    page.click("#budget-preset")
    page.click("#run-start")
    expect(page.locator("#run-final")).to_contain_text("completed", timeout=60_000)
    expect(page.locator("#run-explain-btn")).to_be_enabled()
    page.click("#run-explain-btn")
    box = page.locator("#run-explain")
    expect(box).to_contain_text("scripted test explanation", timeout=30_000)
    expect(box).to_contain_text("不是事实")  # labelled as the model's words
    context.close()
    assert not errors, errors
