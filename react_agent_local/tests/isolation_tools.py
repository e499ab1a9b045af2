"""Tools that misbehave, for the isolation tests: importable by the tool worker process."""

from __future__ import annotations

import os
import time

from pydantic import Field

from agent.tools import StrictArgs, Tool


class SpinArgs(StrictArgs):
    """Spin or sleep for a while, then write a file."""

    seconds: float = Field(ge=0, le=60)
    spin: bool = False


def _spin(ctx, args: SpinArgs, cancel) -> dict:
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        if not args.spin:
            time.sleep(0.01)
    ctx.artifact_dir.mkdir(parents=True, exist_ok=True)
    (ctx.artifact_dir / "late.txt").write_text(str(os.getpid()), encoding="utf-8")
    return {"pid": os.getpid(), "slept": args.seconds}


SPIN = Tool(name="spin", args_model=SpinArgs, execute=_spin, timeout_seconds=0.5,
            import_path="isolation_tools:SPIN")
