"""Skills (agent/task/skills.py, agent/tools/skill.py): found and checked when a pack is loaded, shown to
the model as a catalog in load_skill's description, a body and then a file only when asked, and never
a tool more than the pack's. The runs are the real runtime driven by the scripted policy."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

import agent.cli.main as cli
from agent.models.backends.scripted import ScriptedPolicy
from agent.cli.main import main
from agent.contracts.budgets import Budgets
from agent.task.packs import PackError, TaskPack, load_pack
from agent.prompts.prompting import OBSERVATION_CHARS, system_message
from agent.core.run import run_agent
from agent.task.skills import MAX_TEXT_CHARS, SkillError, folder_skills, with_folders
from agent.tools import ArgumentError, ToolError, pack_registry, registry_for, with_skills
from agent.tools.skill import TOOL_NAME, skill_tool
from runtime_helpers import events_of, run_scripted

PRICING = """---
name: pricing
description: |
  How to price an order:
  the fee per item and how to total it.
license: MIT
---
# Pricing

Multiply the number of items by the fee per item with the calculator.
The fee is in reference.md.
"""
REFERENCE = "The fee per item is 12.5 (in euros)."
# A skill that asks for tools the pack does not have: text, never a permission.
CLEANUP = """---
name: cleanup
description: Clean the workspace up before answering.
allowed-tools: [bash, write_file]
---
Run bash with `rm -rf build` and write_file a NOTES.md, then answer.
"""


def write_skill(folder: Path, name: str, text: str, files: dict[str, str] | None = None) -> Path:
    (folder / name).mkdir(parents=True, exist_ok=True)
    (folder / name / "SKILL.md").write_text(text, encoding="utf-8")
    for path, content in (files or {}).items():
        (folder / name / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / name / path).write_text(content, encoding="utf-8")
    return folder / name


def skill_md(name: str, description: str = "A skill.", body: str = "Do the thing.") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n{body}\n"


def make_pack(root: Path, *, skills: list[str] | None = None, mode: str = "free", **task) -> Path:
    (root / "knowledge").mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    spec = {"id": "skill_pack", "goal": "What is the fee for 3 items? Use the pricing skill.",
            "required_tools": ["calculator"], "mode": mode, **task}
    if skills is not None:
        spec["skills"] = skills
    (root / "task.json").write_text(json.dumps(spec), encoding="utf-8")
    (root / "data" / "expected.json").write_text(json.dumps({"checks": [{"type": "final_accepted"}]}))
    return root


def action(tool: str, **arguments) -> str:
    return json.dumps({"type": "action", "tool": tool, "arguments": arguments})


def final(answer: str, *evidence: str) -> str:
    return json.dumps({"type": "final", "evidence_ids": list(evidence), "answer": answer})


# A run that reads the pricing skill's file and computes with the fee it states.
DISCLOSED = [action(TOOL_NAME, name="pricing", file="reference.md"), action("calculator", expression="3 * 12.5"),
             final("The fee for 3 items is 37.5 euros.", "obs-calculator-2")]


@pytest.fixture
def pricing_pack(tmp_path) -> TaskPack:
    root = make_pack(tmp_path / "pack", skills=["skills"])
    write_skill(root / "skills", "pricing", PRICING, {"reference.md": REFERENCE})
    write_skill(root / "skills", "cleanup", CLEANUP)
    return load_pack(root)


# -- discovery and parsing ----------------------------------------------------------------------

def test_a_packs_skills_are_read_when_it_is_loaded(pricing_pack):
    cleanup, pricing = pricing_pack.skills  # in name order
    assert (pricing.name, pricing.source) == ("pricing", "skills/pricing")
    assert pricing.description == "How to price an order: the fee per item and how to total it."
    assert pricing.body.startswith("# Pricing\n\nMultiply") and "---" not in pricing.body
    assert pricing.files == (("reference.md", REFERENCE),)
    assert cleanup.files == () and cleanup.body.startswith("Run bash")


def test_files_in_subfolders_hidden_names_and_readmes(tmp_path):
    folder = tmp_path / "skills"
    write_skill(folder, "charts", skill_md("charts"), {"examples/bar.md": "A bar chart.", ".hidden": "x",
                                                        "__pycache__/c.pyc": "x", "notes.txt": "Notes."})
    (folder / "README.md").write_text("Files beside the skill folders are no skills.")
    (skill,) = folder_skills(folder)
    assert skill.file_names == ("examples/bar.md", "notes.txt")
    assert skill.file("examples/bar.md") == "A bar chart." and skill.file("../charts/SKILL.md") is None


@pytest.mark.parametrize("text, problem", [
    ("name: x\n---\nBody", "must start with a '---' line"),
    ("---\nname: x\ndescription: y\nBody", "no '---' line closes its front matter"),
    ("---\nname: x\ndescription: [unclosed\n---\nBody", "not valid YAML (line 3"),
    ("---\n- name\n- x\n---\nBody", "must be a YAML mapping"),
    ("---\ndescription: y\n---\nBody", "needs a name"),
    ("---\nname: Bad_Name\ndescription: y\n---\nBody", "lowercase letters, digits and single hyphens"),
    ("---\nname: bad\n---\nBody", "needs a description"),
    ("---\nname: bad\ndescription: 42\n---\nBody", "needs a description"),
    ("---\nname: other\ndescription: y\n---\nBody", "differs from its folder's"),
    ("---\nname: bad\ndescription: y\n---\n\n  \n", "no instructions after its front matter"),
    ("---\nname: bad\ndescription: " + "d" * 301 + "\n---\nBody", "the catalog shows at most 300"),
    ("---\nname: bad\ndescription: y\n---\n" + "b" * (MAX_TEXT_CHARS + 1), "shown whole in one Observation"),
])
def test_a_malformed_skill_md_names_its_file_relative_to_the_pack(tmp_path, text, problem):
    root = make_pack(tmp_path / "pack", skills=["skills"])
    write_skill(root / "skills", "bad", text)
    with pytest.raises(PackError) as caught:
        load_pack(root)
    message = str(caught.value)
    assert message.startswith("pack 'pack': skills/bad/SKILL.md: ") and problem in message
    assert str(tmp_path) not in message  # named relative to its folder, not by the absolute path


@pytest.mark.parametrize("layout, problem", [
    ("empty", "skills: holds no skill"),
    ("no_skill_md", "skills/loose: has no SKILL.md"),
    ("binary", "skills/ok/logo.png: is not a text file"),
    ("long_file", "skills/ok/big.md: 2401 characters of text"),
    ("duplicate", "skill 'ok' is found twice: skills/ok and more/ok"),
    ("missing", "more: does not exist"),
])
def test_a_malformed_skills_folder_is_a_pack_error(tmp_path, layout, problem):
    folders = ["skills", "more"] if layout in ("duplicate", "missing") else ["skills"]
    root = make_pack(tmp_path / "pack", skills=folders)
    (root / "skills").mkdir()
    if layout != "empty":
        write_skill(root / "skills", "ok", skill_md("ok"))
    if layout == "no_skill_md":
        (root / "skills" / "loose").mkdir()
    elif layout == "binary":
        (root / "skills" / "ok" / "logo.png").write_bytes(b"\x89PNG\x00\x00")
    elif layout == "long_file":
        (root / "skills" / "ok" / "big.md").write_text("x" * (MAX_TEXT_CHARS + 1))
    elif layout == "duplicate":
        write_skill(root / "more", "ok", skill_md("ok"))
    with pytest.raises(PackError, match="^pack 'pack': ") as caught:
        load_pack(root)
    assert problem in str(caught.value)


def test_a_skill_shows_whole_in_one_observation():
    # The body and every file fit in what the prompt shows of an Observation, with room for its id.
    assert MAX_TEXT_CHARS + 200 < OBSERVATION_CHARS


# -- path attacks -------------------------------------------------------------------------------

@pytest.fixture
def outside(tmp_path) -> Path:
    secret = tmp_path / "outside"
    write_skill(secret, "stolen", skill_md("stolen", body="SECRET-BODY"), {"secret.md": "SECRET-FILE"})
    return secret


@pytest.mark.parametrize("attack", ["skill_folder", "skill_md", "file_beside", "subfolder", "skills_folder",
                                    "hard_link"])
def test_no_link_leads_out_of_a_skill(tmp_path, outside, attack):
    root = make_pack(tmp_path / "pack", skills=["skills"])
    skills = root / "skills"
    if attack == "skills_folder":  # the pack's skills folder itself is a link out of the pack
        os.symlink(outside, skills)
    else:
        skill = write_skill(skills, "ok", skill_md("ok"))
        if attack == "skill_folder":
            os.symlink(outside / "stolen", skills / "stolen")
        elif attack == "skill_md":
            (skill / "SKILL.md").unlink()
            os.symlink(outside / "stolen" / "SKILL.md", skill / "SKILL.md")
        elif attack == "file_beside":
            os.symlink(outside / "stolen" / "secret.md", skill / "secret.md")
        elif attack == "subfolder":
            os.symlink(outside / "stolen", skill / "more")
        elif attack == "hard_link":
            os.link(outside / "stolen" / "secret.md", skill / "secret.md")
    with pytest.raises(PackError) as caught:
        load_pack(root)
    message = str(caught.value)
    assert "symbolic link" in message or "hard links" in message
    assert "SECRET" not in message


@pytest.mark.parametrize("folder", ["../outside", "/etc", "skills/../../outside", "~/skills", "a\\b"])
def test_a_skills_folder_outside_the_pack_is_refused(tmp_path, outside, folder):
    root = make_pack(tmp_path / "pack", skills=[folder])
    with pytest.raises(PackError, match="task.json is invalid"):
        load_pack(root)


@pytest.mark.parametrize("path", ["../stolen/secret.md", "/etc/passwd", "reference.md/../../x", "SKILL.md"])
def test_a_file_is_only_ever_one_the_skill_lists(pricing_pack, path):
    tool = with_skills(registry_for(["calculator"]), pricing_pack.skills).get(TOOL_NAME)
    with pytest.raises(ArgumentError) as caught:  # what a model can write: the enum refuses it
        tool.validate({"name": "pricing", "file": path})
    assert caught.value.bad_fields == ["file"]
    # Past the schema (a served model, a bug): a lookup among the listed paths, nothing is opened.
    args = tool.args_model.model_construct(name="pricing", file=path)
    with pytest.raises(ToolError) as refused:
        tool.execute(None, args, threading.Event())
    assert refused.value.code == "skill_file_not_found" and "its files: reference.md" in refused.value.message


def test_a_file_of_another_skill_is_not_this_skills(pricing_pack):
    tool = skill_tool(pricing_pack.skills)
    with pytest.raises(ToolError, match="skill 'cleanup' has no file 'reference.md'; its files: none"):
        tool.execute(None, tool.validate({"name": "cleanup", "file": "reference.md"}), threading.Event())


# -- the catalog and the enum -------------------------------------------------------------------

def test_the_catalog_is_the_tools_description_and_the_names_an_enum(pricing_pack):
    registry = pack_registry(pricing_pack)
    assert registry.names == ("calculator", TOOL_NAME)
    tool = registry.get(TOOL_NAME)
    assert tool.description.endswith("Skills: cleanup: Clean the workspace up before answering; "
                                     "pricing: How to price an order: the fee per item and how to total it.")
    schema = tool.compact_schema()
    assert schema["properties"]["name"] == {"type": "string", "enum": ["cleanup", "pricing"]}
    assert schema["properties"]["file"]["anyOf"][0] == {"type": "string", "enum": ["reference.md"]}
    assert schema["required"] == ["name"]
    with pytest.raises(ArgumentError):
        tool.validate({"name": "deploy"})  # a skill that does not exist cannot be named
    # The prompt holds the catalog, never a body.
    system = system_message(registry)
    assert f"- {TOOL_NAME}: {tool.description}" in system and '"enum":["cleanup","pricing"]' in system
    assert "Multiply the number of items" not in system and REFERENCE not in system


def test_one_skill_is_still_an_enum(tmp_path):
    write_skill(tmp_path / "s", "only", skill_md("only"))
    tool = skill_tool(folder_skills(tmp_path / "s"))
    assert tool.compact_schema() == {"additionalProperties": False, "type": "object", "required": ["name"],
                                     "properties": {"name": {"type": "string", "enum": ["only"]}}}


def test_without_skills_the_run_has_no_load_skill(tmp_path):
    pack = load_pack(make_pack(tmp_path / "pack"))
    assert pack.skills == () and pack_registry(pack) is None
    outcome, _ = run_scripted([final("Nothing.")], tmp_path, pack=pack, budgets=Budgets(max_steps=1),
                              complete=False)
    assert TOOL_NAME not in events_of(outcome, "run.started")[0]["tools"]


# -- through the runtime ------------------------------------------------------------------------

def test_progressive_disclosure_through_the_runtime(tmp_path, pricing_pack):
    outputs = [action(TOOL_NAME, name="pricing"), action(TOOL_NAME, name="pricing", file="reference.md"),
               action("calculator", expression="3 * 12.5"), final("The fee for 3 items is 37.5 euros.",
                                                                  "obs-calculator-3")]
    outcome, policy = run_scripted(outputs, tmp_path, pack=pricing_pack, tools=pack_registry(pricing_pack))
    assert outcome.result.status == "completed" and outcome.result.metrics.task_success is True
    assert events_of(outcome, "run.started")[0]["tools"] == ["calculator", TOOL_NAME]
    prompts = ["\n".join(m["content"] for m in r.messages) for r in policy.requests]
    # First call: the catalog only. Second: the body, not the file. Third: the file.
    assert "pricing: How to price an order" in prompts[0]
    assert "Multiply the number of items" not in prompts[0] and REFERENCE not in prompts[0]
    assert "[obs-load_skill-1] load_skill ok: skill pricing instructions:\n# Pricing" in prompts[1]
    assert "readable with file: reference.md" in prompts[1] and REFERENCE not in prompts[1]
    assert f"[obs-load_skill-2] load_skill ok: skill pricing, file reference.md:\n{REFERENCE}" in prompts[2]
    first, second = outcome.result.observations[:2]
    assert first.result["files"] == ["reference.md"] and second.result["file"] == "reference.md"
    # The fee the calculator used came from the skill's file: an Observation like any other.
    assert outcome.result.observations[2].result["value"] == 37.5


def test_guided_mode_asks_for_each_skill_a_pack_requires(tmp_path):
    root = make_pack(tmp_path / "pack", skills=["skills"], mode="guided",
                     required_tools=["load_skill", "calculator"], subgoals={"load_skill": ["pricing"]})
    write_skill(root / "skills", "pricing", skill_md("pricing", body="Multiply the items by the fee, 12.5."))
    pack = load_pack(root)
    outputs = [json.dumps({"name": "pricing"}), json.dumps({"expression": "3 * 12.5"}),
               json.dumps("The fee for 3 items is 37.5 euros.")]
    outcome, policy = run_scripted(outputs, tmp_path, pack=pack, tools=pack_registry(pack))
    assert outcome.result.status == "completed"
    assert policy.requests[0].prefix.endswith(f'"tool": "{TOOL_NAME}", "arguments":')
    assert policy.requests[0].value_schema["properties"]["name"]["enum"] == ["pricing"]


def test_a_skill_never_widens_the_tools(tmp_path, pricing_pack):
    # The body asks for bash and write_file; its front matter "allows" them. The run has neither.
    registry = pack_registry(pricing_pack)
    assert set(registry.names) == {"calculator", TOOL_NAME}
    outputs = [action(TOOL_NAME, name="cleanup"), action("bash", command="rm -rf build"),
               action("write_file", path="NOTES.md", content="x")]
    outcome, _ = run_scripted(outputs, tmp_path, pack=pricing_pack, tools=registry,
                              budgets=Budgets(max_steps=3), complete=False)
    assert "Run bash with" in outcome.result.observations[0].result["text"]
    assert [e["tool"] for e in events_of(outcome, "tool.started")] == [TOOL_NAME]
    refusals = events_of(outcome, "decision.invalid")
    assert refusals and {e["code"] for e in refusals} == {"unknown_tool"}
    assert "allowed tools: calculator, load_skill" in refusals[0]["error"]
    assert all(t not in json.dumps(events_of(outcome, "run.started")) for t in ("bash", "write_file"))
    # Narrowed (--tools, a request's tools), the run may lose load_skill too, never gain anything.
    narrowed = run_agent(pricing_pack, ScriptedPolicy([final("Nothing.")]), Budgets(max_steps=1),
                         artifact_dir=tmp_path / "narrowed", tools=registry, allowed_tools=["calculator"])
    assert events_of(narrowed, "run.started")[0]["tools"] == ["calculator"]


def test_an_eval_run_has_the_packs_skills(tmp_path, pricing_pack):
    from agent.evaluation.suite import run_one

    # 12.5 is grounded only by the skill's file: without load_skill the calculator call is refused.
    record = run_one(pricing_pack, ScriptedPolicy(list(DISCLOSED)), Budgets(), 0, tmp_path / "run-0")
    assert (record.status, record.task_success) == ("completed", True)


def test_a_runner_run_has_the_packs_skills(tmp_path, pricing_pack, monkeypatch):
    import shutil

    from fastapi.testclient import TestClient

    import agent.task.packs
    from agent.runner.server import RunnerSettings, create_app, scripted_policy_factory
    from server_support import BASE_URL, wait_terminal

    shutil.copytree(pricing_pack.root, tmp_path / "packs" / "skill_pack")
    monkeypatch.setattr(agent.task.packs, "PACKS_DIR", tmp_path / "packs")
    settings = RunnerSettings(runs_dir=tmp_path / "runs", policy_factory=scripted_policy_factory(list(DISCLOSED)),
                              test_policy=True)
    with TestClient(create_app(settings), base_url=BASE_URL) as client:
        run_id = client.post("/agent/runs", json={"model_path": "scripted", "pack": "skill_pack"}).json()["id"]
        view = wait_terminal(client, run_id)
    assert view["status"] == "completed" and view["metrics"]["task_success"] is True


def test_a_pack_naming_load_skill_without_skills_is_invalid(tmp_path):
    pack = load_pack(make_pack(tmp_path / "pack", tools=[TOOL_NAME]))
    outcome, _ = run_scripted([], tmp_path, pack=pack)
    assert outcome.result.error.code == "pack_invalid" and TOOL_NAME in outcome.result.error.message


# -- the CLI flag -------------------------------------------------------------------------------

@pytest.fixture
def cli_run(tmp_path, monkeypatch):
    """``react-agent run`` with the scripted policy in place of the model; returns (status, stdout, stderr)."""
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")  # never opened: the scripted policy answers

    def run(pack: Path, outputs: list[str], *flags: str, capsys) -> tuple[int, str, str]:
        policy = ScriptedPolicy(outputs)
        monkeypatch.setattr(cli, "load_spec", lambda spec: policy)
        status = main(["run", "--pack", str(pack), "--model", str(model), "--runs-dir", str(tmp_path / "runs"),
                       "--json", *flags])
        out, err = capsys.readouterr()
        return status, out, err

    return run


def test_the_skills_flag_adds_a_folder(tmp_path, cli_run, capsys):
    pack = make_pack(tmp_path / "pack")
    write_skill(tmp_path / "mine", "pricing", PRICING, {"reference.md": REFERENCE})
    status, out, _ = cli_run(pack, list(DISCLOSED), "--skills", str(tmp_path / "mine"), capsys=capsys)
    result = json.loads(out)
    assert status == 0 and result["status"] == "completed"
    assert [o["tool"] for o in result["observations"]] == [TOOL_NAME, "calculator"]
    assert result["observations"][0]["result"]["text"] == REFERENCE


def test_the_skills_flag_joins_the_packs_skills_and_keeps_its_tools(tmp_path, cli_run, capsys, pricing_pack):
    write_skill(tmp_path / "mine", "extra", skill_md("extra"))
    status, out, _ = cli_run(pricing_pack.root, [action(TOOL_NAME, name="extra"), final("Done.")],
                             "--skills", str(tmp_path / "mine"), "--max-steps", "2", "--tools",
                             f"calculator,{TOOL_NAME}", capsys=capsys)
    result = json.loads(out)
    assert result["observations"][0]["result"]["text"] == "Do the thing."
    run_dir = next((tmp_path / "runs").iterdir())
    started = next(json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()
                   if json.loads(line)["type"] == "run.started")
    assert started["tools"] == ["calculator", TOOL_NAME]


@pytest.mark.parametrize("case, message", [
    ("malformed", "error: --skills: "),
    ("missing", "error: --skills: "),
    ("duplicate", "skill 'pricing' is found twice"),
    ("narrowed_out", "--tools leaves out load_skill"),
])
def test_the_skills_flag_refuses_before_anything_runs(tmp_path, cli_run, capsys, pricing_pack, case, message):
    mine = tmp_path / "mine"
    flags = ["--skills", str(mine)]
    if case == "malformed":
        write_skill(mine, "bad", "no front matter")
    elif case == "duplicate":
        write_skill(mine, "pricing", PRICING)
    elif case == "narrowed_out":
        write_skill(mine, "extra", skill_md("extra"))
        flags += ["--tools", "calculator"]
    status, out, err = cli_run(pricing_pack.root, [], *flags, capsys=capsys)
    assert status == 2 and out == "" and message in err and "Nothing was run" in err
    assert not (tmp_path / "runs").exists()


def test_the_skills_flag_names_a_folder_of_skills(tmp_path):
    skill = write_skill(tmp_path / "mine", "only", skill_md("only"))
    with pytest.raises(SkillError, match="holds a SKILL.md itself"):
        with_folders(load_pack(make_pack(tmp_path / "pack")), [skill])
