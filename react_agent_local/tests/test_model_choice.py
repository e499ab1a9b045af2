"""``agent/models/model_choice.py``: the runner's checks of a request's model before a job, its loader, and
the terminal's commands sharing the model flags without importing one another."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from agent.models.backends.served_access import ServedAccess
from agent.runner.requests import RunRequest
from agent.models.model_choice import ModelRefused, check_local_path, check_request_model, policy_loader
from agent.models.model_policy import ModelUnavailable

AGENT = Path(__file__).resolve().parent.parent / "agent"


def served(**fields):
    return RunRequest.model_validate({"model": {"kind": "openai_compatible", "model": "qwen", **fields}}).model


def test_a_local_path_is_checked_without_reading_it(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"")
    check_request_model(RunRequest(model={"path": str(model)}).model, ServedAccess())
    with pytest.raises(ModelRefused) as missing:
        check_request_model(RunRequest(model={"path": str(tmp_path / "none")}).model, ServedAccess())
    assert (missing.value.status, missing.value.code, missing.value.extra) == (
        400, "model_unavailable", {"reason": "invalid_model_path"})
    check_local_path(str(tmp_path / "none"), must_exist=False)  # the test policy opens nothing
    with pytest.raises(ModelRefused, match="control character"):
        check_local_path("m\x00.gguf", must_exist=False)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_is_not_a_model(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ModelRefused) as refused:
        check_local_path(str(tmp_path / "fifo"))
    assert refused.value.extra == {"reason": "not_a_model"}


def test_a_served_model_must_be_on_an_allowed_host_and_cannot_choose_a_key():
    check_request_model(served(base_url="http://127.0.0.1:8080/v1"), ServedAccess())
    with pytest.raises(ModelRefused) as far:
        check_request_model(served(base_url="https://gpu-box:8443/v1"), ServedAccess())
    assert (far.value.status, far.value.extra["reason"]) == (400, "host_not_allowed")
    check_request_model(served(base_url="https://gpu-box:8443/v1"), ServedAccess.of(["gpu-box:8443"]))
    with pytest.raises(ModelRefused) as key:
        check_request_model(served(base_url="http://127.0.0.1:8080/v1", api_key_env="OTHER_API_KEY"), ServedAccess())
    assert (key.value.status, key.value.code) == (422, "validation_error")
    assert key.value.extra["fields"][0]["type"] == "key_not_requestable"


def test_the_loader_checks_the_host_again_inside_the_job():
    load = policy_loader(served(base_url="https://gpu-box:8443/v1"), ServedAccess())
    with pytest.raises(ModelUnavailable) as refused:
        load()
    assert refused.value.code == "host_not_allowed"


def _imports(path: Path) -> set[str]:
    """The modules a file imports (relative ones resolved inside ``agent``)."""
    package = ".".join(path.relative_to(AGENT.parent).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            found.add(".".join(p for p in (base, node.module or "") if p))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_eval_and_the_terminal_share_the_model_flags_without_a_circle():
    imported = _imports(AGENT / "cli" / "eval.py")
    assert "agent.models.model_choice" in imported and "agent.cli.main" not in imported
    assert "agent.cli.main" not in _imports(AGENT / "models" / "model_choice.py")
