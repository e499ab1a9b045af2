"""``react-agent chat --workspace DIR``: each message a goal on the same folder, a follow-up seeing the
earlier turns, each turn's diff printed; ``--resume ID`` alone continues with the session's folder
and model (remembered). Real runtime, real sandbox, scripted model."""

from __future__ import annotations

import io
import json

import agent.cli.chat as command
from agent.models.backends.scripted import ScriptedPolicy
from agent.cli.main import main
from goal_support import GoalModel, make_repo


def chat(monkeypatch, capsys, argv, lines, model):
    monkeypatch.setattr(command, "load_spec", lambda spec: ScriptedPolicy([model] * 30))
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(line + "\n" for line in lines)))
    status = main(["chat", *argv])
    return status, capsys.readouterr()


def test_a_workspace_chat_fixes_then_follows_up_on_the_same_folder_and_resumes_with_it(tmp_path, monkeypatch, capsys):
    repo = make_repo(tmp_path, 41)
    helper_fix = ("return sorted(items)", "return sorted(items, reverse=True)")
    model = GoalModel(repo.wrong, repo.right, more=(helper_fix,))
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    sessions = ["--sessions-dir", str(tmp_path / "sessions")]
    status, out = chat(monkeypatch, capsys, ["--workspace", str(repo.root), "--model", str(fake), *sessions],
                       [f"{repo.function} drops its factor; fix it"], model)
    assert status == 0, out.out + out.err
    assert repo.right in (repo.root / repo.source).read_text()
    assert f"changed files: {repo.source} (modified)" in out.out
    session_id = out.out.split("session ")[1].split()[0]
    # the user's next wish comes with its test (the tests are the user's, so the goal's run may not write them)
    with (repo.root / repo.test).open("a") as test:
        test.write(f"\n\ndef test_{repo.helper}():\n    from {repo.package}.{repo.module} import {repo.helper}\n"
                   f"    assert {repo.helper}([1, 3, 2]) == [3, 2, 1]\n")
    status, out = chat(monkeypatch, capsys, ["--resume", session_id, *sessions],
                       [f"now make {repo.helper} sort from the largest"], model)
    assert status == 0, out.out + out.err
    assert f"to read: {repo.test}, {repo.source}" in out.out  # the remembered folder, its new failure localised
    assert f"1 failing: {repo.test}::test_{repo.helper}" in out.out
    text = (repo.root / repo.source).read_text()
    assert helper_fix[1] in text and repo.right in text
    log = [json.loads(line) for line in next((tmp_path / "sessions").rglob("session-*.jsonl")).read_text().splitlines()]
    started = [r for r in log if r["type"] == "turn.started"]
    # each turn asks its own goal's question; the second carries the first's evidence
    assert len(started) == 2 and started[0]["prior_observations"] == 0 and started[1]["prior_observations"] > 0
