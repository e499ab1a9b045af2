"""plot: PNG artifact, literal text for untrusted labels, normalised spec (R-TOOL-3, SECURITY.md 16-17)."""

from __future__ import annotations

import threading
import base64
import hashlib
import json
import re
import struct
from pathlib import Path

import pytest

from agent.tools import plotting
from agent.tools.plotting import PlotArgs
from agent.tools.plotting import render_bar_chart
from agent.tools import ToolContext, ToolError, default_registry

BATCHES = {"labels": ["Batch A", "Batch B", "Batch C", "Batch D"], "values": [72, 78, 81, 85]}


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def _render(tmp_path: Path, **kwargs) -> dict:
    return render_bar_chart(PlotArgs(**kwargs), tmp_path / "artifacts")


def test_png_written_and_metadata_matches(tmp_path):
    result = _render(tmp_path, **BATCHES, average=79, title="AgentEval Mini Task Success", y_label="Task Success (%)")
    artifact = result["artifact"]
    assert re.fullmatch(r"art-[0-9a-f]{16}", artifact["id"])
    path = tmp_path / "artifacts" / f"{artifact['id']}.png"
    data = path.read_bytes()
    assert artifact == {
        "id": artifact["id"],
        "media_type": "image/png",
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    assert _png_size(data) == (640, 400)  # fixed by the tool: 6.4 x 4 in at 100 dpi
    assert list((tmp_path / "artifacts").iterdir()) == [path]


def test_spec_is_normalised(tmp_path):
    result = _render(tmp_path, **BATCHES, average=79.0, title="T")
    assert result["spec"] == {
        "kind": "bar",
        "labels": ["Batch A", "Batch B", "Batch C", "Batch D"],
        "values": [72, 78, 81, 85],
        "average": 79,
        "title": "T",
        "y_label": "value",
    }
    assert all(type(v) is int for v in result["spec"]["values"])
    assert type(result["spec"]["average"]) is int
    fractional = _render(tmp_path, labels=["a", "b"], values=[1.5, -2], average=-0.25, title="T")["spec"]
    assert fractional["values"] == [1.5, -2] and type(fractional["values"][0]) is float
    assert fractional["average"] == -0.25


def test_result_has_no_path_or_image_bytes(tmp_path):
    result = _render(tmp_path, **BATCHES, average=79, title="T")
    dumped = json.dumps(result)
    assert str(tmp_path) not in dumped
    png = (tmp_path / "artifacts" / f"{result['artifact']['id']}.png").read_bytes()
    assert base64.b64encode(png)[:40].decode() not in dumped
    assert set(result) == {"spec", "artifact", "summary"}
    assert "average line at 79" in result["summary"] and "Batch A=72" in result["summary"]


def test_average_is_optional(tmp_path):
    result = _render(tmp_path, **BATCHES, title="Batches")
    assert result["spec"]["average"] is None
    assert "average" not in result["summary"]
    assert result["artifact"]["bytes"] > 0


@pytest.mark.parametrize(
    "text",
    ["$$", "Ba$$in", "$x^2'$", "$" + "{" * 38 + "$", r"$\frac{1}{0}$", "\\usepackage{x}", "%&_#^~"],
)
def test_math_text_is_drawn_literally(tmp_path, text):
    # With math text on, "Ba$$in" raises ValueError and "${{{...$" a RecursionError in matplotlib.
    result = _render(tmp_path, labels=[text, "ok"], values=[1, 2], title=text, y_label=text[:60])
    assert result["spec"]["labels"][0] == text
    assert result["artifact"]["bytes"] > 0


def test_oversized_text_from_an_unvalidated_caller_is_bounded(tmp_path):
    args = PlotArgs.model_construct(
        labels=["L" * 10_000, "$" + "{" * 500 + "$"], values=[1.0, 2.0],
        title="$" + "{" * 500 + "$", average=None, y_label="y" * 10_000,
    )
    result = render_bar_chart(args, tmp_path)
    data = (tmp_path / f"{result['artifact']['id']}.png").read_bytes()
    assert _png_size(data) == (640, 400)


def test_twenty_bars(tmp_path):
    labels = [f"label number {i:02d} is quite long" for i in range(20)]
    result = _render(tmp_path, labels=labels, values=list(range(20)), average=9.5, title="Twenty")
    assert result["spec"]["labels"] == labels
    assert result["summary"].endswith("with an average line at 9.5")


def test_contract_rejects_more_than_twenty_bars():
    with pytest.raises(ValueError):
        PlotArgs(labels=[str(i) for i in range(21)], values=list(range(21)), title="T")


@pytest.mark.parametrize(
    "labels, values",
    [(["a", "b"], [1.0]), ([], []), ([str(i) for i in range(21)], [1.0] * 21), (["a"], [float("nan")])],
)
def test_unvalidated_bad_shapes_fail_cleanly(tmp_path, labels, values):
    args = PlotArgs.model_construct(labels=labels, values=values, title="T", average=None, y_label="v")
    with pytest.raises(ToolError) as info:
        render_bar_chart(args, tmp_path)
    assert (info.value.code, info.value.retryable) == ("plot_render_failed", False)
    assert not list(tmp_path.iterdir())


def test_renderer_failure_becomes_a_tool_error(tmp_path, monkeypatch):
    def broken(spec):
        raise RuntimeError(f"boom in {tmp_path}")

    monkeypatch.setattr(plotting, "_render_png", broken)
    with pytest.raises(ToolError) as info:
        _render(tmp_path, **BATCHES, title="T")
    assert (info.value.code, info.value.retryable) == ("plot_render_failed", False)
    assert str(tmp_path) not in info.value.message


def test_unwritable_artifact_dir_is_a_tool_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ToolError) as info:
        render_bar_chart(PlotArgs(**BATCHES, title="T"), blocker / "artifacts")
    assert info.value.code == "plot_render_failed"
    assert str(tmp_path) not in info.value.message


def test_each_render_gets_a_new_artifact(tmp_path):
    a = _render(tmp_path, **BATCHES, title="T")
    b = _render(tmp_path, **BATCHES, title="T")
    assert a["artifact"]["id"] != b["artifact"]["id"]
    assert a["spec"] == b["spec"]
    assert len(list((tmp_path / "artifacts").iterdir())) == 2


def test_through_the_registry(tmp_path):
    registry = default_registry()
    tool = registry.get("plot")
    args = registry.validate("plot", {**BATCHES, "average": 79, "title": "AgentEval Mini"})
    result = tool.execute(ToolContext(knowledge_dir=tmp_path, artifact_dir=tmp_path / "run-1"), args, threading.Event())
    assert (tmp_path / "run-1" / f"{result['artifact']['id']}.png").is_file()
    assert tool.digest(result) == result["spec"]


def test_a_swapped_artifact_folder_is_not_followed(tmp_path):
    """The run's artifacts/ replaced by a link to another folder: the PNG is not written there."""
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "artifacts").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ToolError) as info:
        render_bar_chart(PlotArgs(**BATCHES, title="T"), run / "artifacts")
    assert info.value.code == "plot_render_failed" and list(outside.iterdir()) == []
