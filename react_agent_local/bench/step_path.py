"""The modules of the package one step passes through: the functions that run between one step's
``budget`` event and the next, counted by the module that defines them.

With no ``--model`` the default pack runs with the scripted test policy (the model's own modules,
llama.cpp's, are then not on the path); with ``--model PATH`` a GGUF model answers, the path's
model modules included. ``--step N`` picks the step (2: the default pack's calculator step).

    ../.venv/bin/python bench/step_path.py [--step 2] [--model PATH]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import agent  # noqa: E402
from agent.contracts.budgets import Budgets, Sampling  # noqa: E402
from agent.core.run import run_agent  # noqa: E402
from agent.models.backends.scripted import ScriptedPolicy  # noqa: E402
from agent.task.packs import load_pack  # noqa: E402
from runtime_helpers import chain_outputs  # noqa: E402

AGENT = Path(agent.__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--step", type=int, default=2)
    parser.add_argument("--pack", default=None)
    parser.add_argument("--model", default=None, help="a GGUF file (default: the scripted test policy)")
    args = parser.parse_args()
    pack = load_pack(args.pack)
    if args.model:
        from agent.models.model_choice import policy_loader
        from agent.models.providers import LocalModelSpec

        policy = policy_loader(LocalModelSpec(kind="local", path=args.model))
    else:
        policy = ScriptedPolicy(list(chain_outputs(pack)))
    seen: dict[str, int] = {}
    recording = {"on": False}

    def profile(frame, event, arg):  # noqa: ANN001 -- sys.setprofile's signature
        if recording["on"] and event == "call":
            path = Path(frame.f_code.co_filename)
            if path.is_relative_to(AGENT):
                module = ".".join(path.relative_to(AGENT.parent).with_suffix("").parts)
                seen[module] = seen.get(module, 0) + 1

    def sink(event: dict) -> None:
        if event["type"] == "budget":
            recording["on"] = event["step"] == args.step
        if event["type"] == "run.finished":
            recording["on"] = False

    sys.setprofile(profile)
    threading.setprofile(profile)
    with tempfile.TemporaryDirectory() as tmp:
        outcome = run_agent(pack, policy, Budgets(), artifact_dir=Path(tmp), sink=sink,
                            sampling=Sampling(temperature=0.0))
    sys.setprofile(None)
    threading.setprofile(None)
    modules = sorted(m.removesuffix(".__init__") for m in seen)
    print(f"step {args.step} of {pack.task.id} ({outcome.result.stop_reason}): {len(modules)} modules of the package")
    for module in modules:
        print(f"  {module}")


if __name__ == "__main__":
    main()
