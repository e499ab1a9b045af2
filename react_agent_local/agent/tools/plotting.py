"""plot: render one bar chart to a PNG artifact with matplotlib.

Labels, title and axis label come from the model, so they are treated as untrusted text:

* Math text and TeX are off (``text.parse_math`` / ``text.usetex`` False for the whole render, and
  ``parse_math=False`` on every Text we create), so ``$$``, ``Ba$$in``, ``$x^2'$`` or
  ``"$" + "{" * 500 + "$"`` are drawn literally instead of reaching the mathtext parser.
* Figure size and DPI are fixed here (6.4 x 4 in at 100 dpi), never taken from the arguments.
* Labels are cut to 40 characters for display (title 120, y label 60). The contract already bounds
  them; the cut keeps a caller that bypasses ``PlotArgs`` validation bounded too. The returned
  ``spec`` keeps the caller's labels unchanged, since metrics compare them to ground truth.
* We use the object API (``matplotlib.figure.Figure`` + the Agg canvas) rather than pyplot, whose
  global figure registry is not thread-safe; a module lock serialises renders because matplotlib's
  font cache and rcParams are process-global. The figure is released in ``finally``.

The PNG goes to ``artifact_dir/<artifact id>.png`` with id ``art-`` + 16 random hex characters. The
result carries only metadata (id, media type, byte count, SHA-256), never the image bytes or a path.
Any failure while rendering or writing becomes ``ToolError("plot_render_failed", retryable=False)``.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import math
import os
import secrets
import sys
import textwrap
import threading
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from agent.tools.base import StrictArgs, Tool, ToolError

FIGURE_SIZE_IN = (6.4, 4.0)
FIGURE_DPI = 100
MAX_BARS = 20
LABEL_CHARS = 40
TITLE_CHARS = 120
Y_LABEL_CHARS = 60

_render_lock = threading.Lock()


class PlotArgs(StrictArgs):
    """Draw a bar chart of labelled values, optionally with an average line; returns a PNG artifact."""

    labels: list[Annotated[str, Field(min_length=1, max_length=LABEL_CHARS)]] = Field(
        min_length=1, max_length=MAX_BARS, description="Bar labels, 1..20."
    )
    values: list[float] = Field(
        min_length=1, max_length=MAX_BARS, description="One finite number per label."
    )
    title: str = Field(min_length=1, max_length=TITLE_CHARS, description="Chart title.")
    average: float | None = Field(default=None, description="Draw a horizontal average line here.")
    y_label: str = Field(default="value", min_length=1, max_length=Y_LABEL_CHARS, description="Y axis label.")

    @field_validator("values")
    @classmethod
    def _finite(cls, values: list[float]) -> list[float]:
        if not all(math.isfinite(v) for v in values):
            raise ValueError("values must be finite numbers")
        return values

    @field_validator("average")
    @classmethod
    def _finite_average(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("average must be a finite number")
        return value

    @model_validator(mode="after")
    def _same_length(self) -> "PlotArgs":
        if len(self.labels) != len(self.values):
            raise ValueError(
                f"labels and values must have the same length ({len(self.labels)} != {len(self.values)})"
            )
        return self


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _number(value: float) -> int | float:
    """72.0 -> 72 for the spec; non-integral values stay floats."""
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def _fmt(value: int | float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.4g}"


def normalized_spec(args: PlotArgs) -> dict[str, Any]:
    """The chart as data: what the page redraws and what metrics and the no-progress guard compare."""
    labels, values = list(args.labels), list(args.values)
    if not 1 <= len(labels) <= MAX_BARS or len(labels) != len(values):
        raise ToolError("plot_render_failed", f"need 1..{MAX_BARS} labels with one value each", retryable=False)
    numbers = values + ([args.average] if args.average is not None else [])
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in numbers):
        raise ToolError("plot_render_failed", "values and average must be finite numbers", retryable=False)
    return {
        "kind": "bar",
        "labels": [str(label) for label in labels],
        "values": [_number(v) for v in values],
        "average": _number(args.average) if args.average is not None else None,
        "title": str(args.title),
        "y_label": str(args.y_label),
    }


def _render_png(spec: dict[str, Any]) -> bytes:
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        # Only matters if someone later imports pyplot in this process; never switch a live backend.
        matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    safe_text = {"parse_math": False, "usetex": False}
    with matplotlib.rc_context({"text.usetex": False, "text.parse_math": False, "font.family": _font_families()}):
        fig = Figure(figsize=FIGURE_SIZE_IN, dpi=FIGURE_DPI, layout="constrained")
        try:
            FigureCanvasAgg(fig)
            ax = fig.add_subplot()
            positions = list(range(len(spec["values"])))
            bars = ax.bar(positions, spec["values"], color="#4C78A8")
            display = [_cut(label, LABEL_CHARS) for label in spec["labels"]]
            crowded = len(display) > 6 or any(len(label) > 12 for label in display)
            ax.set_xticks(positions)
            ax.set_xticklabels(
                display, rotation=40 if crowded else 0, ha="right" if crowded else "center",
                rotation_mode="anchor", fontsize=7 if len(display) > 8 else 9, **safe_text,
            )
            ax.margins(y=0.12)  # headroom for the value labels above the tallest bar
            for bar, value in zip(bars, spec["values"]):
                ax.annotate(
                    _fmt(value), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    xytext=(0, 2), textcoords="offset points", ha="center",
                    va="bottom" if value >= 0 else "top", fontsize=8, **safe_text,
                )
            if spec["average"] is not None:
                ax.axhline(spec["average"], color="#E45756", linestyle="--", linewidth=1.5,
                           label=f"average {_fmt(spec['average'])}")
                ax.legend(loc="lower right", fontsize=8)
            title = textwrap.fill(_cut(spec["title"], TITLE_CHARS), width=70, max_lines=2, placeholder="…")
            ax.set_title(title, fontsize=11, **safe_text)
            ax.set_ylabel(_cut(spec["y_label"], Y_LABEL_CHARS), **safe_text)
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png", dpi=FIGURE_DPI)
            return buffer.getvalue()
        finally:
            fig.clear()


@functools.lru_cache(maxsize=1)
def _font_families() -> list[str]:
    """DejaVu Sans, then an installed CJK font as fallback, so Chinese labels are drawn, not boxes."""
    from matplotlib import font_manager

    installed = {f.name for f in font_manager.fontManager.ttflist}
    cjk = [name for name in ("Noto Sans CJK SC", "Noto Serif CJK SC", "Noto Sans CJK JP", "WenQuanYi Zen Hei",
                             "Source Han Sans SC", "Microsoft YaHei", "PingFang SC") if name in installed]
    return ["DejaVu Sans", *cjk[:1]]


def _write_new_file(folder: Path, name: str, data: bytes) -> None:
    """Create ``folder/name`` without following a link at ``folder`` or ``name`` (a run's artifacts/
    swapped for a symlink mid-run must not send the PNG elsewhere)."""
    folder.mkdir(parents=True, exist_ok=True)
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    if os.open not in os.supports_dir_fd or not nofollow:  # Windows: check the folder, then write
        if folder.is_symlink():
            raise OSError("the artifact folder is a link")
        with open(folder / name, "xb") as handle:
            handle.write(data)
        return
    parent = os.open(folder.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        here = os.open(folder.name, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | nofollow, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | nofollow, 0o644, dir_fd=here)
    finally:
        os.close(here)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def render_bar_chart(args: PlotArgs, artifact_dir: Path) -> dict[str, Any]:
    """Draw the bar chart, store the PNG in ``artifact_dir`` and return spec + artifact metadata."""
    spec = normalized_spec(args)
    try:
        with _render_lock:
            png = _render_png(spec)
        artifact_id = "art-" + secrets.token_hex(8)
        _write_new_file(Path(artifact_dir), f"{artifact_id}.png", png)
    except ToolError:
        raise
    except Exception as exc:  # noqa: BLE001 - any renderer or disk failure is a tool failure
        raise ToolError("plot_render_failed", f"could not render the chart ({type(exc).__name__})", retryable=False) from None
    average = f" with an average line at {_fmt(spec['average'])}" if spec["average"] is not None else ""
    bars = ", ".join(f"{label}={_fmt(value)}" for label, value in zip(spec["labels"][:10], spec["values"][:10]))
    more = ", ..." if len(spec["labels"]) > 10 else ""
    return {
        "spec": spec,
        "artifact": {
            "id": artifact_id,
            "media_type": "image/png",
            "bytes": len(png),
            "sha256": hashlib.sha256(png).hexdigest(),
        },
        "summary": f"bar chart '{_cut(spec['title'], 60)}' of {len(spec['labels'])} bars ({bars}{more}){average}",
    }


def _render_result(result: dict[str, Any]) -> str:
    spec = result.get("spec") or {}
    return (f"bar chart {json.dumps(spec.get('title'), ensure_ascii=False)}, "
            f"labels {json.dumps(spec.get('labels'), ensure_ascii=False)}, values {spec.get('values')}, "
            f"average line {spec.get('average')}, artifact {(result.get('artifact') or {}).get('id')}")


TOOL = Tool(
    name="plot",
    args_model=PlotArgs,
    execute=lambda ctx, args, cancel: render_bar_chart(args, ctx.artifact_dir),
    timeout_seconds=15.0,
    digest=lambda r: r.get("spec"),
    render=_render_result,
    hint="Use every label and its value from the observations, in the same order; "
         "put the calculator's value into \"average\" when the chart needs an average line; give a short title.",
    summary="Structured values ready: draw the chart with plot.",
    import_path="agent.tools.plotting:TOOL",
    # Not read-only: it writes the chart, an artifact of the run (the one the task asks for).
    read_only=False,
)
