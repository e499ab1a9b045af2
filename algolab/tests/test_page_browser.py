"""The No.17 page in headless Chromium (Playwright, sync API) against a real site process and the
package's real runner process driven by the scripted test policy (and, marked slow, the real 1.5B
GGUF model, which must get the task right). Screenshots of every stage go to test-output/screenshots/.

Chromium, Playwright and the gguf package are installed by ``scripts/setup.sh --browser``; when one
is missing the tests fail with that hint instead of skipping."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from playwright import sync_api

from server_support import assert_answer_is_right, require_e2e_model

from .conftest import (
    FIRST_CALL_SECONDS,
    GOOD_SCRIPT,
    SCREENSHOTS,
    Process,
    free_port,
    start_runner,
    write_tiny_gguf,
)

pytestmark = pytest.mark.browser

expect = sync_api.expect
TEST_POLICY_LABEL = "测试策略 (scripted test policy) — 不是真实模型"


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runner(browser_tmp: Path, site_port: int) -> Iterator[Process]:
    script = [{"text": GOOD_SCRIPT[0], "seconds": FIRST_CALL_SECONDS}, *GOOD_SCRIPT[1:]]
    proc = start_runner(browser_tmp, site_port, script)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def tiny_model(browser_tmp: Path, runner: Process) -> Path:
    """A header-only GGUF the runner's /models/inspect accepts (the test policy never loads it)."""
    path = write_tiny_gguf(browser_tmp / "tiny-header-only.gguf")
    report = httpx.post(runner.base_url + "/models/inspect", json={"model_path": str(path)}, timeout=60).json()
    assert report.get("ok") is True, f"the runner refuses the header-only test model: {report}"
    return path


@pytest.fixture
def page(browser: Any, site: Process) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1440, "height": 1000}, accept_downloads=True)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" and "Failed to load resource" not in msg.text else None)
    pg.goto(site.base_url + "/react-agent")
    expect(pg.locator("#manifest-version")).not_to_have_text("", timeout=15_000)
    yield pg
    context.close()
    assert not errors, errors


def shot(page: Any, name: str, selector: str | None = None, full_page: bool = False) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    if selector:
        page.locator(selector).scroll_into_view_if_needed()
        page.locator(selector).screenshot(path=str(path))
    else:
        page.screenshot(path=str(path), full_page=full_page)
    assert path.stat().st_size > 1000
    return path


def dead_runner_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


def connect_runner(page: Any, runner: Process) -> None:
    page.fill("#runner-url", runner.base_url)
    page.click("#runner-check")
    expect(page.locator("#runner-state")).to_contain_text("已连接", timeout=15_000)


def inspect_model(page: Any, model_path: Path | str, expect_ok: bool = True, timeout: float = 60_000) -> None:
    page.fill("#model-path", str(model_path))
    page.click("#model-inspect")
    expect(page.locator("#model-state")).to_contain_text("检查通过" if expect_ok else "检查未通过", timeout=timeout)


# --------------------------------------------------------------------------------------------
# Concept sections, experiments 1 and 2
# --------------------------------------------------------------------------------------------


def test_page_sections_and_experiment_1_stepper(page: Any) -> None:
    assert page.title().startswith("No.17 ReAct Agent")
    expect(page.locator("h1")).to_contain_text("ReAct Agent：从一次调用到可控行动循环")
    for section in ("s1", "s2", "s3", "exp1", "s5", "exp2", "s7", "s8", "s9", "s10", "s11", "s12", "s13", "exp3",
                    "source", "s15", "s16", "s17", "s18", "s19", "s20", "s21"):
        expect(page.locator(f"#{section}")).to_be_visible()
    shot(page, "01-page-top")

    steps = page.locator("#exp1-steps button")
    expect(steps).to_have_count(5)
    expect(page.locator("#exp1-prev")).to_be_disabled()
    expected = [("State₀", '"branch"'), ("Decision₀", '"tool": "knowledge_search"'), ("Action₀", '"tool.started"'),
                ("Observation₀", '"obs-knowledge_search-1"'), ("State₁", '"observation_count": 1')]
    for i, (label, fragment) in enumerate(expected):
        if i:
            page.click("#exp1-next")
        expect(steps.nth(i)).to_have_class("step current")
        expect(steps.nth(i)).to_contain_text(label)
        expect(page.locator("#exp1-json")).to_contain_text(fragment)
        json.loads(page.locator("#exp1-json").inner_text())  # the card shows real JSON
    expect(page.locator("#exp1-json")).to_contain_text('"tool": "calculator"')  # the next branch
    expect(page.locator("#exp1-next")).to_be_disabled()
    shot(page, "02-experiment1-state1", "#exp1")
    steps.nth(1).click()
    expect(page.locator("#exp1-card")).to_contain_text("模型只补全参数值")


def test_experiment_2_routing_and_real_validation(page: Any, runner: Process) -> None:
    tabs = page.locator("#exp2-tabs button")
    expect(tabs).to_have_count(4)
    for i, tool in enumerate(["search", "knowledge_search", "calculator", "plot"]):
        tabs.nth(i).click()
        decision = json.loads(page.locator("#exp2-json").inner_text())
        assert decision["type"] == "action" and decision["tool"] == tool
        assert decision["decision_summary"]
    assert set(decision["arguments"]) == {"kind", "labels", "values"}  # the deliberately invalid shape

    # No runner: the page says so and shows no canned verdict.
    page.fill("#runner-url", dead_runner_url())
    page.click("#exp2-validate")
    expect(page.locator("#exp2-result")).to_contain_text("runner not reachable", timeout=15_000)
    expect(page.locator("#exp2-result")).to_contain_text("未运行")
    expect(page.locator("#exp2-result")).not_to_contain_text("invalid_arguments")
    shot(page, "03-experiment2-no-runner", "#exp2")

    # The real runtime rejects {kind, labels, values}: kind is not allowed and title is missing.
    page.fill("#runner-url", runner.base_url)
    page.click("#exp2-validate")
    result = page.locator("#exp2-result")
    expect(result).to_contain_text("invalid_arguments", timeout=15_000)
    real = httpx.post(runner.base_url + "/schema/validate", json={"tool": "plot", "arguments": decision["arguments"]}).json()
    assert real["error"]["code"] == "invalid_arguments"
    expect(result.locator(".message")).to_have_text(real["error"]["message"])  # the runner's own words
    expect(result).to_contain_text("kind")
    expect(result).to_contain_text("title")
    shot(page, "04-experiment2-invalid-arguments", "#exp2")
    page.click("#exp2-validate-fixed")
    expect(result).to_contain_text("✓ 参数有效", timeout=15_000)

    tabs.nth(0).click()  # search is not a tool of the No.17 package
    page.click("#exp2-validate")
    expect(result).to_contain_text("unknown_tool", timeout=15_000)


NON_LOOPBACK_RUNNER_URLS = ["http://evil.example:4890", "https://127.0.0.1:4890", "http://127.0.0.2:4890",
                            "http://localhost.evil.com:4890", "http://127.0.0.1:4890/agent", "ftp://localhost",
                            "http://user:pw@127.0.0.1:4890", "javascript:alert(1)", ""]


def test_non_loopback_runner_urls_are_refused(page: Any) -> None:
    """Every URL through the page's own form, in one page (each one a different attack on the check)."""
    for url in NON_LOOPBACK_RUNNER_URLS:
        page.fill("#runner-url", "http://127.0.0.1:4890")
        expect(page.locator("#runner-url-error")).to_be_hidden()
        page.fill("#runner-url", url)
        expect(page.locator("#runner-url-error")).to_be_visible()
        expect(page.locator("#runner-check")).to_be_disabled()
        expect(page.locator("#run-start")).to_be_disabled()
        assert page.evaluate("u => window.ReactAgentPage.normalizeRunnerUrl(u)", url)["ok"] is False, url
    page.click("#exp2-validate")  # a refused URL is never called: Experiment 2 says it did not run
    expect(page.locator("#exp2-result")).to_contain_text("未运行")


def test_loopback_runner_urls_are_accepted(page: Any) -> None:
    for url in ("http://127.0.0.1:4890", "http://localhost:4890", "http://[::1]:4890", "http://LOCALHOST:9", "http://127.0.0.1:4890/"):
        result = page.evaluate("u => window.ReactAgentPage.normalizeRunnerUrl(u)", url)
        assert result["ok"], (url, result)


# --------------------------------------------------------------------------------------------
# Experiment 3 with the scripted test policy
# --------------------------------------------------------------------------------------------


def test_experiment_3_without_a_runner_says_not_run(page: Any) -> None:
    page.fill("#runner-url", dead_runner_url())
    page.click("#runner-check")
    expect(page.locator("#runner-state")).to_contain_text("未运行", timeout=15_000)
    expect(page.locator("#runner-state")).to_contain_text("runner not reachable")
    expect(page.locator("#run-start")).to_be_disabled()
    expect(page.locator("#model-inspect")).to_be_disabled()
    expect(page.locator("#run-status")).to_have_text("尚未运行")
    for card in page.locator("#metrics .metric").all():
        assert card.locator(".metric-value").inner_text() in ("未运行", "—")
    expect(page.locator("#chart")).to_contain_text("未运行")
    expect(page.locator("#chart-png")).to_contain_text("未运行")
    expect(page.locator("#test-policy-banner")).to_be_hidden()
    shot(page, "05-experiment3-no-runner", "#exp3")


def test_experiment_3_full_run_with_the_test_policy(page: Any, runner: Process, tiny_model: Path) -> None:
    connect_runner(page, runner)
    banner = page.locator("#test-policy-banner")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text(TEST_POLICY_LABEL)
    for label in ("#run-tp-label", "#metrics-tp-label", "#chart-tp-label"):
        expect(page.locator(label)).to_be_visible()
        expect(page.locator(label)).to_have_text(TEST_POLICY_LABEL)
    info = page.locator("#runner-info")
    expect(info).to_contain_text("agent")
    expect(info).to_contain_text("Python")
    status = httpx.get(runner.base_url + "/status").json()
    expect(info).to_contain_text(status["version"])
    expect(info).to_contain_text(status["python"]["version"])
    options = page.locator("#pack-select option")
    assert "default" in [o.get_attribute("value") for o in options.all()]
    shot(page, "06-experiment3-runner-checked", "#exp3")

    # Start stays disabled until the model inspection passes; a refusal shows its reason.
    expect(page.locator("#run-start")).to_be_disabled()
    inspect_model(page, "/etc/passwd", expect_ok=False)
    expect(page.locator("#model-state")).to_contain_text("model_unavailable")
    expect(page.locator("#run-start")).to_be_disabled()
    expect(page.locator("#start-reason")).to_contain_text("不能启动")
    inspect_model(page, tiny_model)
    expect(page.locator("#run-start")).to_be_enabled()
    page.fill("#model-path", str(tiny_model) + "x")  # editing the path invalidates the inspection
    expect(page.locator("#run-start")).to_be_disabled()
    inspect_model(page, tiny_model)

    # Budgets: the preset, and ranges from /schema.
    page.click("#budget-preset")
    assert [page.input_value(f"#b-{k}") for k in ("max_steps", "max_tool_calls", "max_seconds", "max_input_tokens",
                                                 "max_output_tokens")] == ["12", "10", "300", "32000", "4000"]
    page.fill("#b-max_steps", "999")
    expect(page.locator("#budget-error")).to_be_visible()
    expect(page.locator("#run-start")).to_be_disabled()
    page.click("#budget-preset")
    expect(page.locator("#run-start")).to_be_enabled()
    # Sampling settings: Qwen's published defaults, with the contract's ranges (0 < top_p <= 1).
    assert [page.input_value(f"#b-{k}") for k in ("temperature", "top_p", "top_k")] == ["0", "0.8", "20"]
    page.click("details.advanced summary")
    page.fill("#b-top_p", "0")
    expect(page.locator("#budget-error")).to_contain_text("top_p")
    expect(page.locator("#run-start")).to_be_disabled()
    page.click("#budget-preset")
    expect(page.locator("#run-start")).to_be_enabled()
    shot(page, "07-experiment3-model-inspected", "#exp3 .run-grid")

    page.click("#run-start")
    expect(page.locator("#run-status")).to_contain_text("running", timeout=15_000)
    expect(page.locator('#stages li[data-stage="decision"]')).to_have_class("stage-active", timeout=15_000)
    # the first scripted call "writes" for a few seconds: its progress (a count, never the text) is live
    expect(page.locator("#stage-now")).to_contain_text("模型正在输出（文本", timeout=15_000)
    shot(page, "08-experiment3-running", "#exp3 .status-panel")
    expect(page.locator("#run-status")).to_have_text("已完成 completed", timeout=60_000)
    expect(page.locator("#run-stop-reason")).to_contain_text("stop_reason = completed")

    for stage in ("load", "decision", "validate", "tool", "observation", "final"):
        li = page.locator(f'#stages li[data-stage="{stage}"]')
        expect(li).to_have_class("stage-done")
        expect(li.locator(".mark")).to_have_text("✓")
    expect(page.locator("#run-final")).to_contain_text("79")
    expect(page.locator("#run-final")).to_contain_text(TEST_POLICY_LABEL)

    timeline = page.locator("#timeline")
    expect(timeline.locator(".tl-card[data-step]")).to_have_count(4)
    for text in ("Decision Summary", "knowledge_search", "obs-knowledge_search-1", "obs-calculator-2", "obs-plot-3",
                 "observation_count = 3", "final accepted", "(72 + 78 + 81 + 85) / 4"):
        expect(timeline).to_contain_text(text)
    shot(page, "09-experiment3-completed-status-timeline", "#exp3 .status-panel")
    shot(page, "10-experiment3-timeline", "#timeline")

    metrics = {card.get_attribute("data-metric"): card.locator(".metric-value").inner_text()
               for card in page.locator("#metrics .metric").all()}
    assert metrics["task_success"] == "PASS" and metrics["termination_correctness"] == "PASS"
    assert metrics["valid_action_rate"] == "100%" and metrics["tool_argument_accuracy"] == "100%"
    assert metrics["recovery_rate"] == "N/A" and metrics["loop_rate"] == "0%"
    assert metrics["steps"] == "4"
    assert metrics["total_latency_ms"].endswith(" s") and " / " in metrics["input_tokens"]
    assert float(metrics["cost_units"]) > 0
    shot(page, "11-experiment3-metrics", "#metrics")

    chart = page.locator("#chart svg")
    expect(chart.locator("rect.c-bar")).to_have_count(4)
    expect(chart.locator("line.c-avg")).to_have_count(1)
    expect(chart).to_contain_text("average 79")
    img = page.locator("#chart-png-img")
    expect(img).to_be_visible(timeout=15_000)
    assert page.evaluate("() => document.getElementById('chart-png-img').naturalWidth") > 100
    expect(page.locator("#chart-png-meta")).to_contain_text("✓ SHA-256", timeout=10_000)
    shot(page, "12-experiment3-chart-and-png", "#exp3 .chart-grid")

    # Export: merged events, in seq order, without hidden-reasoning keys.
    with page.expect_download() as info_dl:
        page.click("#run-export")
    download = info_dl.value
    assert download.suggested_filename.startswith("react-agent-trace-") and download.suggested_filename.endswith(".json")
    exported = json.loads(Path(download.path()).read_text(encoding="utf-8"))
    seqs = [e["seq"] for e in exported["events"]]
    assert seqs == sorted(seqs) and seqs == list(range(1, len(seqs) + 1))
    assert exported["events"][-1]["type"] == "run.finished" and exported["test_policy"] is True
    run_id = exported["run_id"]
    server_events = httpx.get(f"{runner.base_url}/agent/runs/{run_id}?after_seq=0").json()["events"]
    assert [e["seq"] for e in server_events] == seqs

    def keys(value: Any) -> set[str]:
        if isinstance(value, dict):
            return set(value) | {k for v in value.values() for k in keys(v)}
        if isinstance(value, list):
            return {k for v in value for k in keys(v)}
        return set()

    assert not keys(exported) & {"thought", "reasoning", "analysis"}
    stripped = page.evaluate("""() => window.ReactAgentPage.stripHidden(
        {a: 1, reasoning: 'x', nested: [{Thought: 'y', keep: {analysis: 'z', ok: true}}]})""")
    assert stripped == {"a": 1, "nested": [{"keep": {"ok": True}}]}


def test_experiment_3_cancel_a_run(page: Any, runner: Process, tiny_model: Path) -> None:
    connect_runner(page, runner)
    inspect_model(page, tiny_model)
    page.click("#run-start")
    # The scripted first model call takes a few seconds: cancel while the Decision is generating.
    expect(page.locator('#stages li[data-stage="decision"]')).to_have_class("stage-active", timeout=15_000)
    expect(page.locator("#run-cancel")).to_be_enabled()
    page.click("#run-cancel")
    expect(page.locator("#run-status")).to_have_text("已取消 cancelled", timeout=20_000)
    expect(page.locator("#run-stop-reason")).to_contain_text("stop_reason = cancelled")
    expect(page.locator("#run-cancel")).to_be_disabled()
    expect(page.locator('#stages li[data-stage="decision"]')).to_have_class("stage-failed")
    expect(page.locator('#stages li[data-stage="final"]')).to_have_class("stage-idle")
    expect(page.locator("#timeline")).to_contain_text("run.finished")
    expect(page.locator("#chart")).to_contain_text("没有成功的 plot Observation")
    shot(page, "13-experiment3-cancelled", "#exp3 .status-panel")
    # The run can be started again afterwards.
    expect(page.locator("#run-start")).to_be_enabled()


# --------------------------------------------------------------------------------------------
# Source browser and downloads
# --------------------------------------------------------------------------------------------


def test_source_browser_per_file_download_and_zip(page: Any, site: Process) -> None:
    manifest = httpx.get(site.base_url + "/api/react-agent/example/manifest").json()
    expect(page.locator("#manifest-version")).to_have_text(manifest["version"])
    expect(page.locator("#manifest-sha")).to_have_text(manifest["zip_sha256"])
    groups = [g.get_attribute("data-role") for g in page.locator("#src-tree .src-group").all()]
    assert groups[:5] == ["root", "agent", "contracts", "knowledge", "tests"], groups
    paths = [f["path"] for f in manifest["files"]]
    opened = "README.md" if "README.md" in paths else next(f["path"] for f in manifest["files"] if f["role"] == "root")
    expect(page.locator("#src-path")).to_have_text(opened)  # opened by default

    page.click('#src-tree button.file[data-path="agent/core/runtime.py"]')
    expect(page.locator("#src-path")).to_have_text("agent/core/runtime.py")
    expect(page.locator("#src-explain")).to_contain_text("行动循环中枢")
    expect(page.locator("#src-explain")).to_contain_text("在行动链中的位置")
    served = httpx.get(site.base_url + "/api/react-agent/example/file", params={"path": "agent/core/runtime.py"}).text
    expect(page.locator("#src-content")).to_have_text(served, timeout=10_000)
    shot(page, "14-source-browser-runtime", "#source .source-browser")

    for path, fragment in (("agent/contracts/decision.py", "类型化契约"), ("data/expected.json", "ground truth"),
                           ("manifest.json", "静态版本声明")):
        page.click(f'#src-tree button.file[data-path="{path}"]')
        expect(page.locator("#src-explain")).to_contain_text(fragment)
    generic = page.evaluate("p => window.ReactAgentPage.explainFor(p)", "newfolder/new_file.py")
    assert "newfolder/" in generic[0]
    for path in ("prompts/system.md", "schemas/tool_registry.json", "knowledge/x.md", "tests/test_y.py",
                 "agent/models/backends/llama_cpp.py", "agent/backends/other.py"):
        assert all(page.evaluate("p => window.ReactAgentPage.explainFor(p)", path))

    # Per-file download: the bytes match the manifest.
    page.click('#src-tree button.file[data-path="agent/core/runtime.py"]')
    entry = next(f for f in httpx.get(site.base_url + "/api/react-agent/example/manifest").json()["files"]
                 if f["path"] == "agent/core/runtime.py")
    with page.expect_download() as dl_info:
        page.click("#src-download")
    data = Path(dl_info.value.path()).read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["sha256"]

    # ZIP download: its SHA-256 is the one the page shows.
    with page.expect_download() as zip_info:
        page.click("#zip-download")
    zip_path = Path(zip_info.value.path())
    shown = page.locator("#manifest-sha").inner_text()
    assert hashlib.sha256(zip_path.read_bytes()).hexdigest() == shown
    with zipfile.ZipFile(zip_path) as zf:
        assert all(n.startswith("react_agent_local/") for n in zf.namelist())
        assert "react_agent_local/agent/core/runtime.py" in zf.namelist()
    shot(page, "15-source-browser-manifest", "#source .manifest-bar")


def test_full_page_screenshot(page: Any) -> None:
    page.wait_for_timeout(300)
    shot(page, "00-full-page", full_page=True)
    page.set_viewport_size({"width": 900, "height": 1000})
    shot(page, "16-narrow-experiment3", "#exp3")


# --------------------------------------------------------------------------------------------
# A real local model (slow)
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_experiment_3_with_the_real_model(page: Any, browser_tmp: Path, site_port: int) -> None:
    """The 1.5B GGUF through the page: the run must complete with the right answer, and the page must
    show that answer, PASS and the plotted chart. Checked against the runner's own record of the run,
    and the answer against the task recomputed from the run's observations."""
    model = require_e2e_model()
    real_runner = start_runner(browser_tmp, site_port, script=None)
    try:
        connect_runner(page, real_runner)
        expect(page.locator("#test-policy-banner")).to_be_hidden()
        inspect_model(page, model, expect_ok=True, timeout=120_000)
        expect(page.locator("#model-info")).to_contain_text("qwen2")
        page.click("#budget-preset")
        # Correctness, not speed, is under test: a 2-core machine shared with other jobs can take
        # minutes per step, so the wall-clock budget is the largest the contract allows.
        page.fill("#b-max_seconds", "1800")
        expect(page.locator("#run-start")).to_be_enabled()
        page.click("#run-start")
        expect(page.locator("#run-status")).to_contain_text("running", timeout=30_000)
        shot(page, "17-real-model-running", "#exp3 .status-panel")
        expect(page.locator("#run-status")).to_have_text(
            "已完成 completed", timeout=1_900_000)  # anything else (stopped, failed) fails here
        expect(page.locator("#run-tp-label")).to_be_hidden()

        runs = httpx.get(real_runner.base_url + "/agent/runs").json()["runs"]
        view = httpx.get(f"{real_runner.base_url}/agent/runs/{runs[0]['id']}").json()
        assert (view["status"], view["stop_reason"]) == ("completed", "completed")
        assert view["metrics"]["task_success"] is True and all(view["metrics"]["checks"].values()), view["metrics"]
        observations = [e["observation"] for e in view["events"] if e["type"] == "tool.observation"]
        truth = assert_answer_is_right(view["final"], observations)

        expect(page.locator("#run-final .final-answer")).to_have_text(view["final"]["answer"])
        metrics = {card.get_attribute("data-metric"): card.locator(".metric-value").inner_text()
                   for card in page.locator("#metrics .metric").all()}
        assert metrics["task_success"] == "PASS" and metrics["termination_correctness"] == "PASS", metrics
        assert metrics["steps"] == str(view["metrics"]["steps"])
        chart = page.locator("#chart svg")
        expect(chart.locator("rect.c-bar")).to_have_count(truth["bars"])
        expect(chart.locator("line.c-avg")).to_have_count(1)
        average = truth["average"]
        expect(chart).to_contain_text(f"average {int(average) if average == int(average) else average}")
        expect(page.locator("#chart-png-img")).to_be_visible(timeout=15_000)
        expect(page.locator("#chart-png-meta")).to_contain_text("✓ SHA-256", timeout=10_000)
        shot(page, "18-real-model-finished", "#exp3 .status-panel")
        shot(page, "19-real-model-timeline", "#timeline")
        shot(page, "20-real-model-metrics-chart", "#exp3")
    finally:
        real_runner.stop()
