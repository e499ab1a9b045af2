"""The terminal entry point's refusals: each is one clear line, exit status 2, and nothing is run."""

from __future__ import annotations

import pytest

import agent.models.model_choice as model_choice
from agent.cli.main import main


def test_no_model_anywhere_runs_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(model_choice, "MODEL_CACHE", tmp_path)  # an empty model cache
    assert main(["run", "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "no local model found" in err and "download_model.py" in err and "Nothing was run" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("flags,named", [
    (["--top-p", "0"], "--top-p"),
    (["--top-p", "1.5"], "--top-p"),
    (["--top-k", "0"], "--top-k"),
    (["--temperature", "3"], "--temperature"),
    (["--max-steps", "0"], "--max-steps"),
])
def test_out_of_range_settings_name_the_flag(flags, named, tmp_path, capsys):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")  # never opened: the settings are refused first
    assert main(["run", "--model", str(model), "--runs-dir", str(tmp_path / "runs"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {named}: ") and "Nothing was run" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_unknown_pack_is_refused(tmp_path, capsys):
    assert main(["run", "--pack", "no_such_pack", "--model", str(tmp_path / "m.gguf")]) == 2
    assert capsys.readouterr().err.startswith("error: ")


@pytest.mark.parametrize("tools, message", [("calculator", "the pack needs: lookup_fact"),
                                            ("lookup_fact,calculator,plot", "not tools of the pack: plot")])
def test_tools_may_only_narrow_the_pack(tools, message, tmp_path, capsys):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")  # never opened: the tools are refused first
    assert main(["run", "--pack", "population_ratio", "--tools", tools, "--model", str(model),
                 "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --tools: ") and message in err and "Nothing was run" in err
    assert not (tmp_path / "runs").exists()
