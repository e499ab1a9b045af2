"""The recipe for a model provider (docs/ARCHITECTURE.md, "A model provider"): one backend module and
one registry entry, and the terminal, ``load_model`` and a run all know it.

This file is the toy provider's backend module: ``load`` below is its loader, a ``FunctionPolicy``
that plays the population pack's guided run (its arguments as continuations, its Final as a
structured Decision). ``TOY`` is its one entry; nothing else in the package is told about it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from agent.models import providers
from agent.models.backends import load_model
from agent.models.backends.scripted import FunctionPolicy
from agent.cli.main import main
from agent.contracts.decision import FinalDecision
from agent.models.model_choice import ModelChoiceError, add_model_arguments, load_spec, model_spec
from agent.models.model_policy import ModelUnavailable
from agent.models.providers import Provider, register
from test_general_core import ratio_outputs

# -- the toy provider: its spec, its loader, its entry ---------------------------------------------


class ToySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["toy"]
    model: str = Field(min_length=1)


def load(spec: ToySpec, access: Any = None, **options: Any) -> FunctionPolicy:
    *actions, final = ratio_outputs()
    arguments = iter(actions)

    def answer(request: Any) -> Any:
        if request.branch.kind == "final":
            return FinalDecision(type="final", answer=json.loads(final),
                                 evidence_ids=[o.id for o in request.state.observations])
        return next(arguments)

    return FunctionPolicy(answer)


TOY = Provider(kind="toy", spec=ToySpec, loader=f"{__name__}:load", prefix="toy:", label="toy")


@pytest.fixture
def toy():
    register(TOY)
    yield TOY
    del providers.PROVIDERS[TOY.kind]


def flags(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    return parser.parse_args(list(argv))


# -- the recipe --------------------------------------------------------------------------------------


def test_the_prefix_names_the_toy_spec(toy):
    spec = model_spec(flags("--model", "toy:echo"))
    assert isinstance(spec, ToySpec) and (spec.kind, spec.model) == ("toy", "echo")
    with pytest.raises(ModelChoiceError, match="needs its name"):
        model_spec(flags("--model", "toy:"))


def test_load_model_loads_it_through_its_entry(toy):
    spec = ToySpec(kind="toy", model="echo")
    assert isinstance(load_model(spec), FunctionPolicy)
    policy = load_spec(spec)  # the terminal's way: a provider that is not served gets no host allowlist
    assert policy.description.is_test_policy and policy.description.backend == "function"


def test_a_run_on_the_toy_provider_completes(toy, tmp_path, capsys):
    status = main(["run", "--model", "toy:ratio", "--pack", "population_ratio", "--json",
                   "--runs-dir", str(tmp_path / "runs")])
    result = json.loads(capsys.readouterr().out)
    assert status == 0 and (result["status"], result["stop_reason"]) == ("completed", "completed")
    assert [o["tool"] for o in result["observations"]] == ["lookup_fact", "lookup_fact", "calculator"]
    assert result["final"]["evidence_ids"] == ["obs-lookup_fact-1", "obs-lookup_fact-2", "obs-calculator-3"]
    assert result["metrics"]["task_success"] is True


def test_without_its_entry_the_prefix_is_a_path_and_the_kind_unknown():
    assert model_spec(flags("--model", "toy:echo")).kind == "local"
    with pytest.raises(ModelUnavailable) as refused:
        load_model(ToySpec(kind="toy", model="echo"))
    assert refused.value.code == "backend_mismatch"


def test_an_entry_must_be_new_and_match_its_spec(toy):
    with pytest.raises(ValueError, match="registered already"):
        register(TOY)
    with pytest.raises(ValueError, match="another provider"):
        register(Provider(kind="toy2", spec=ToySpec, loader=TOY.loader, prefix="toy:"))
    with pytest.raises(ValueError, match="Literal"):
        register(Provider(kind="toy2", spec=ToySpec, loader=TOY.loader))


# -- what the shipped entries derive ----------------------------------------------------------------


def test_the_shipped_entries_resolve_and_derive_the_lists():
    from typing import get_args

    from agent.models.backends.served_access import ServedAccess, default_keys

    shipped = list(providers.PROVIDERS.values())
    assert [p.kind for p in shipped] == ["local", "openai_compatible", "anthropic"]
    assert get_args(get_args(providers.ModelSpec)[0]) == tuple(p.spec for p in shipped)
    for entry in shipped:  # importing a backend module imports no SDK: each imports its own when it calls
        assert callable(providers._resolve(entry.loader)) and callable(providers._resolve(entry.inspector))
    assert providers.served_kinds() == ["openai_compatible", "anthropic"]
    assert default_keys() == ["openai_compatible@https://api.openai.com=OPENAI_API_KEY",
                              "anthropic@https://api.anthropic.com=ANTHROPIC_API_KEY"]
    with pytest.raises(ValueError, match="openai_compatible, anthropic"):
        ServedAccess.of(keys=["local@https://example.com=SOME_API_KEY"])


def test_the_registry_and_the_contracts_import_no_model_library():
    code = ("import sys, agent.contracts, agent.models.model_choice, agent.models.providers\n"
            "heavy = {'llama_cpp', 'llguidance', 'torch', 'transformers', 'openai', 'anthropic', 'httpx2'}\n"
            "print(sorted(heavy & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=providers.__file__.rsplit("/agent/", 1)[0])
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]
