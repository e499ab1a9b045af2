"""Shared paths, a small throw-away package tree, and real site/runner processes for the page tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO_ROOT / "react_agent_local"
RUNNER_SCRIPT = PACKAGE_DIR / "algolab_local_runner.py"
SCREENSHOTS = REPO_ROOT / "test-output" / "screenshots"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TEST_POLICY_ENV = "REACT_AGENT_TEST_POLICY"

# The scripted outputs, free_port and stop_process are shared with the runner's own tests (one copy).
for _path in (PACKAGE_DIR, PACKAGE_DIR / "tests"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
from server_support import GOOD_SCRIPT, free_port, stop_process  # noqa: E402,F401 -- GOOD_SCRIPT is re-exported to the page tests

# The first scripted output takes a few seconds so a run can be cancelled while the "model" is generating.
FIRST_CALL_SECONDS = 4.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives the page in headless Chromium (Playwright)")
    config.addinivalue_line("markers", "slow: takes minutes (the real local model)")


# --------------------------------------------------------------------------------------------
# A small package tree with everything the enumeration must leave out
# --------------------------------------------------------------------------------------------


@pytest.fixture
def outside_dir(tmp_path: Path) -> Path:
    """Files outside the package that symlinks inside it point to."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET outside the package\n", encoding="utf-8")
    (outside / "nested").mkdir()
    (outside / "nested" / "also_secret.py").write_text("SECRET = 1\n", encoding="utf-8")
    return outside


@pytest.fixture
def small_package(tmp_path: Path, outside_dir: Path) -> Path:
    """A copy-sized package: a few real files plus every kind of entry that must be excluded."""
    root = tmp_path / "react_agent_local"
    files = {
        "README.md": "# ReAct Agent Local\n\nSmall test package.\n",
        "manifest.json": json.dumps({"name": "react_agent_local", "version": "9.8.7", "module": "No.17"}),
        "requirements.txt": "pydantic>=2\n",
        "run.sh": "#!/bin/sh\nexec python algolab_local_runner.py \"$@\"\n",
        "agent/__init__.py": "",
        "agent/core/runtime.py": "def run():\n    return '<script>alert(1)</script>'\n",
        "agent/models/backends/scripted.py": "# test policy\n",
        "prompts/system.md": "You are an agent.\n",
        "schemas/decision.schema.json": "{}\n",
        "knowledge/说明.md": "# 知识\n中文内容。\n",
        "data/expected.json": "{\"average\": 79}\n",
        "tests/test_x.py": "def test_x():\n    assert True\n",
        "extras/notes.txt": "a folder with no known role\n",
        # excluded ones
        ".git/config": "[core]\n",
        ".runs/run-1/trace.json": "{}",
        ".venv/bin/python": "x",
        "agent/__pycache__/runtime.cpython-311.pyc": "x",
        "models/weights.gguf": "GGUF",
        ".pytest_cache/v/cache": "x",
        "stale.pyc": "x",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / "run.sh").chmod(0o755)
    (root / "data" / "logo.bin").write_bytes(bytes(range(256)) * 4)
    (root / "big.bin").write_bytes(b"\0" * (2 * 1024 * 1024 + 1))  # over the per-file limit
    os.symlink(outside_dir / "secret.txt", root / "agent" / "outside.py")  # a file link pointing out
    os.symlink(outside_dir / "nested", root / "linked_dir")  # a folder link pointing out
    os.symlink(root / "README.md", root / "readme_link.md")  # even a link pointing inside is skipped
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "data" / "pipe")
    return root


# --------------------------------------------------------------------------------------------
# Real processes: the course site and the runner with the scripted test policy
# --------------------------------------------------------------------------------------------


class Process:
    def __init__(self, args: list[str], base_url: str, log_path: Path, env: dict[str, str] | None = None,
                 ready_path: str = "/"):
        self.args, self.base_url, self.log_path, self.env, self.ready_path = args, base_url, log_path, env, ready_path
        self.proc: subprocess.Popen | None = None
        self.token: str | None = None  # a runner's operator token (start_runner reads it)

    def start(self, timeout: float = 40.0) -> "Process":
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, cwd=REPO_ROOT, env=self.env or dict(os.environ),
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.args[1:3]} exited with {self.proc.returncode}; see {self.log_path}")
            try:
                if httpx.get(self.base_url + self.ready_path, timeout=2.0).status_code < 500:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.args[1:3]} did not start in {timeout} s; see {self.log_path}")

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None
        if getattr(self, "log", None):
            self.log.close()


def start_site(tmp: Path, package_dir: Path | None = None) -> Process:
    port = free_port()
    args = [sys.executable, "-m", "algolab", "--port", str(port)]
    if package_dir is not None:
        args += ["--package-dir", str(package_dir)]
    return Process(args, f"http://127.0.0.1:{port}", tmp / f"site-{port}.log",
                   ready_path="/api/react-agent/example/manifest").start()


def start_runner(tmp: Path, site_port: int, script: list[Any] | None, extra_args: tuple[str, ...] = ()) -> Process:
    """The package's own runner; ``script`` set means the scripted test policy (labelled as such);
    ``extra_args``: more of the operator's flags (``--approval always_ask``, ...)."""
    port = free_port()
    env = dict(os.environ)
    env.pop(TEST_POLICY_ENV, None)
    if script is not None:
        script_file = tmp / f"script-{port}.json"
        script_file.write_text(json.dumps(script), encoding="utf-8")
        env[TEST_POLICY_ENV] = str(script_file)
    runs = tmp / f"runs-{port}"
    token_file = tmp / f"token-{port}"  # the operator token: here, not in the user's cache
    args = [sys.executable, str(RUNNER_SCRIPT), "--port", str(port), "--runs-dir", str(runs),
            "--allow-origin", f"http://127.0.0.1:{site_port}", "--log-level", "warning",
            "--token-file", str(token_file), *extra_args]
    proc = Process(args, f"http://127.0.0.1:{port}", tmp / f"runner-{port}.log", env=env,
                   ready_path="/status").start(timeout=60)
    proc.token = token_file.read_text(encoding="ascii").strip()
    return proc


def operator_link(site: Process, runner: Process) -> str:
    """The lab page as the runner's start banner links it: the runner and its token in the fragment."""
    from agent.runner.operator_token import page_link

    return page_link(site.base_url, runner.base_url, runner.token)


def write_tiny_gguf(path: Path) -> Path:
    """A header-only GGUF (tokenizer + chat template, no tensors): enough for /models/inspect.

    Used with the scripted test policy only, which never loads weights.
    """
    import gguf

    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name("tiny-header-only-test-model")
    writer.add_context_length(32)
    writer.add_block_count(1)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["a", "b", "c"])
    writer.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium through Playwright, one per test module."""
    from playwright import sync_api

    assert CHROMIUM.exists(), f"Debian Chromium is not at {CHROMIUM}: run scripts/setup.sh --browser"
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="session")
def browser_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("browser")


@pytest.fixture(scope="session")
def site(browser_tmp: Path) -> Iterator[Process]:
    proc = start_site(browser_tmp)
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def site_port(site: Process) -> int:
    return int(site.base_url.rsplit(":", 1)[1])
