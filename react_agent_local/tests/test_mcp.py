"""MCP tool sources (R-MCP, SECURITY.md 26-27) with real MCP server processes over stdio.

The servers in ``tests/mcp_servers/`` each misbehave in one way (is_error results, a crash mid-call,
a broken protocol, a hang, an oversized result, a definition that changes); ``population_ratio_mcp``
is the shipped pack whose fact lookup is served by ``python -m agent mcp serve``. Every run here is
the real runtime driven by the scripted test policy, and after every run no server process is left.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("mcp")

from agent.models.backends.scripted import ScriptedPolicy
from agent.contracts.budgets import Budgets
from agent.contracts.task import McpServerSpec
from agent.task.packs import PACKAGE_ROOT, TaskPack, load_pack
from agent.core.run import run_agent
from agent.tools import ArgumentError, Tool, ToolRegistry, catalog, registry_for
from agent.tools.facts import load_facts
from agent.tools.mcp import (
    MAX_DESCRIPTION_CHARS, MAX_RESULT_CHARS, PREVIEW_CHARS, McpArguments, McpTool, ToolCollision,
    bounded_description, bounded_result, compose, definition_sha256, parse_server_option, with_servers
)
from runtime_helpers import events_of, run_scripted, types

SERVERS = Path(__file__).resolve().parent / "mcp_servers"
RATIO_MCP = load_pack("population_ratio_mcp")


def server(name: str, script: str, **extra) -> dict:
    return {"name": name, "command": "python", "args": [str(SERVERS / script)], **extra}


def make_pack(tmp_path: Path, servers: list[dict], required: list[str], tools: list[str] | None = None,
              mode: str = "free") -> TaskPack:
    root = tmp_path / "pack"
    (root / "knowledge").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "knowledge" / "README.md").write_text("# A pack for MCP tests\n", encoding="utf-8")
    (root / "data" / "expected.json").write_text(json.dumps({"checks": [{"type": "final_accepted"}]}))
    task = {"id": "mcp_test", "goal": "Use the MCP tools.", "required_tools": required, "mode": mode,
            "mcp_servers": servers}
    if tools:
        task["tools"] = tools
    (root / "task.json").write_text(json.dumps(task), encoding="utf-8")
    return TaskPack.load(root)


def action(tool: str, arguments: dict) -> str:
    return json.dumps({"type": "action", "tool": tool, "arguments": arguments})


def server_processes() -> set[int]:
    """Live (not zombie) MCP server processes of this test process: the SDK starts each server as
    the leader of a new session, unlike the runtime's own tool worker."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            state, ppid, _group, session = stat.rsplit(")", 1)[1].split()[:4]
            if int(ppid) == os.getpid() and state != "Z" and int(session) == int(entry):
                found.add(int(entry))
    return found


@pytest.fixture
def no_leftover_servers():
    """After the test, every server process it started is gone (they never outlive their run)."""
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc to see child processes")
    before = server_processes()
    yield
    assert server_processes() - before == set()


def error_of(outcome) -> tuple[str, str, str]:
    result = outcome.result
    return result.stop_reason, result.error.code, result.error.message


# -- the pack: seed 002's exercise with the fact lookup served over MCP ------------------------------

def ratio_mcp_outputs() -> list[str]:
    facts = load_facts(RATIO_MCP.knowledge_dir)
    first, second = (facts[name]["value"] for name in RATIO_MCP.task.subgoals["facts.lookup_fact"])
    return [json.dumps({"query": "台北人口"}), json.dumps({"query": "纽约人口"}),
            json.dumps({"expression": f"{first} / {second}"}),
            json.dumps(f"台北人口除以纽约人口约为 {round(first / second, 4)}")]


def test_the_mcp_pack_runs_end_to_end_and_is_graded_like_any_pack(tmp_path, no_leftover_servers):
    # The model first gets the arguments wrong twice: the server's input schema catches both before any call.
    outputs = [json.dumps({"query": ""}), json.dumps({"query": "台北人口", "year": 2024})] + ratio_mcp_outputs()
    outcome, policy = run_scripted(outputs, tmp_path, pack=RATIO_MCP)
    result = outcome.result
    assert (result.status, result.stop_reason) == ("completed", "completed"), result.error
    assert result.metrics.task_success is True and all(result.metrics.checks.values()), result.metrics.checks
    rejected = events_of(outcome, "tool.rejected")
    assert [(r["bad_fields"], r["unexpected_fields"]) for r in rejected] == [(["query"], []), ([], ["year"])]
    assert "'query': must satisfy minLength 1" in rejected[0]["observation"]["error"]["message"]
    assert types(outcome).count("tool.started") == 3  # only the three valid actions reached a tool
    assert [o.tool for o in result.observations if o.ok] == ["facts.lookup_fact", "facts.lookup_fact", "calculator"]
    assert result.observations[2].result["value"] == 2602418  # the server's structured result, as is
    assert result.final.evidence_ids == ["obs-facts.lookup_fact-3", "obs-facts.lookup_fact-4", "obs-calculator-5"]
    # Definitions pinned at start and shown in the trace; servers stopped before run.finished.
    pinned = events_of(outcome, "mcp.tools.pinned")[0]
    tool = pinned["servers"][0]["tools"][0]
    assert tool["name"] == "facts.lookup_fact" and len(tool["sha256"]) == 64
    assert types(outcome)[-2:] == ["mcp.servers.stopped", "run.finished"]
    # The server's input schema drives the prompt and the grammar like a local tool's.
    system = policy.requests[0].messages[0]["content"]
    assert "- facts.lookup_fact: Look up one named fact" in system and "knowledge_search" not in system
    schema = policy.requests[0].value_schema
    assert schema["required"] == ["query"] and schema["additionalProperties"] is False
    assert "Still missing: 台北人口" in policy.requests[0].messages[-1]["content"]


# -- one composite registry: local tools and several servers -----------------------------------------

def test_local_and_several_servers_in_one_registry_is_error_and_oversized(tmp_path, monkeypatch, no_leftover_servers):
    monkeypatch.setenv("REACT_AGENT_TEST_SECRET", "sk-never-shown")
    pack = make_pack(tmp_path, [server("good", "well_behaved.py", env={"GREETING": "hello"}),
                                server("errors", "is_error.py"), server("big", "oversized.py")],
                     required=["good.echo"], tools=["calculator", "errors.divide", "big.dump", "good.env_names"])
    outputs = [action("errors.divide", {"a": 1, "b": 0}),       # is_error: a failed Observation
               action("errors.divide", {"a": 6, "b": 3}),       # the model recovers
               action("big.dump", {"n": 3000}),                 # oversized: artifact + preview
               action("good.env_names", {}),
               action("calculator", {"expression": "6 / 3"}),   # a local tool, same registry
               action("good.echo", {"text": "hi"}),
               json.dumps({"type": "final", "answer": "The echo says hi.", "evidence_ids": ["obs-good.echo-6"]})]
    outcome, policy = run_scripted(outputs, tmp_path, pack=pack)
    obs = outcome.result.observations
    assert outcome.result.stop_reason == "completed", outcome.result.error
    assert [o.ok for o in obs] == [False, True, True, True, True, True]
    assert obs[0].error.code == "mcp_tool_error" and "division by zero" in obs[0].error.message
    assert obs[1].result == {"value": 2.0}
    assert "division by zero" in policy.requests[1].messages[-1]["content"]  # feedback the model sees
    # Oversized: the Observation carries a bounded preview and the artifact id; the file has it all.
    big = obs[2].result
    assert big["truncated"] is True and big["chars"] > MAX_RESULT_CHARS and len(big["preview"]) == PREVIEW_CHARS
    stored = json.loads((tmp_path / "artifacts" / f"{big['artifact']['id']}.json").read_text(encoding="utf-8"))
    assert len(stored["rows"]) == 3000 and big["artifact"]["complete"] is True
    assert all(len(json.dumps(e, ensure_ascii=False)) < 20_000 for e in outcome.events)  # nor the trace
    # The environment is an allowlist plus the spec's env: the runner's secrets never reach a server.
    names = obs[3].result["names"]
    assert "GREETING" in names and "PATH" in names and "REACT_AGENT_TEST_SECRET" not in names
    assert obs[4].tool == "calculator" and obs[5].result == {"echo": "hi"}
    tools = {alt["properties"]["tool"]["const"] for alt in policy.requests[0].value_schema["anyOf"]}
    assert tools == {"calculator", "errors.divide", "big.dump", "good.env_names", "good.echo"}
    pinned = events_of(outcome, "mcp.tools.pinned")[0]["servers"]
    assert [s["server"] for s in pinned] == ["good", "errors", "big"]


# -- transport failures end the run failed/tool_runtime -----------------------------------------------

def test_a_server_that_crashes_mid_call_ends_the_run_with_tool_runtime(tmp_path, no_leftover_servers):
    pack = make_pack(tmp_path, [server("crashy", "crashes.py")], required=["crashy.crash"])
    outcome, _ = run_scripted([action("crashy.crash", {})], tmp_path, pack=pack)
    stop_reason, code, message = error_of(outcome)
    assert (outcome.result.status, stop_reason, code) == ("failed", "runtime_error", "tool_runtime")
    assert "MCP server 'crashy' closed the connection" in message
    assert events_of(outcome, "tool.failed")[0]["error"]["code"] == "tool_runtime"


def test_a_server_that_breaks_the_protocol_ends_the_run_with_tool_runtime(tmp_path, no_leftover_servers):
    pack = make_pack(tmp_path, [server("crashy", "crashes.py")], required=["crashy.garble"])
    started = time.monotonic()
    outcome, _ = run_scripted([action("crashy.garble", {})], tmp_path, pack=pack)
    stop_reason, code, message = error_of(outcome)
    assert (stop_reason, code) == ("runtime_error", "tool_runtime") and "broke the protocol" in message
    assert time.monotonic() - started < 10  # noticed at once, not after the 10 s tool timeout


def test_a_hung_tool_times_out_and_a_frozen_server_ends_the_run(tmp_path, no_leftover_servers):
    pack = make_pack(tmp_path, [server("hang", "hangs.py", timeout_seconds=2)], required=["hang.freeze"],
                     tools=["hang.slow"])
    outputs = [action("hang.slow", {}), action("hang.freeze", {})]
    outcome, _ = run_scripted(outputs, tmp_path, pack=pack, budgets=Budgets(max_retries=0))
    slow = outcome.result.observations[0]
    # The tool hung but the server still answers: a failed Observation, the run goes on.
    assert slow.ok is False and slow.error.code == "tool_timeout" and slow.error.retryable is True
    # The whole server froze (no answer to the call nor to a probe): the tool runtime is broken.
    stop_reason, code, message = error_of(outcome)
    assert (stop_reason, code) == ("runtime_error", "tool_runtime") and "stopped answering" in message


def test_cancelling_a_run_during_an_mcp_call_stops_it_and_its_server(tmp_path, no_leftover_servers):
    pack = make_pack(tmp_path, [server("hang", "hangs.py", timeout_seconds=60)], required=["hang.slow"])
    cancel = threading.Event()

    def sink(event: dict) -> None:
        if event["type"] == "tool.started":
            threading.Timer(0.3, cancel.set).start()

    started = time.monotonic()
    outcome = run_agent(pack, ScriptedPolicy([action("hang.slow", {})]), Budgets(),
                        artifact_dir=tmp_path / "artifacts", cancel=cancel, sink=sink)
    assert outcome.result.stop_reason == "cancelled"
    assert time.monotonic() - started < 20 and types(outcome)[-2:] == ["mcp.servers.stopped", "run.finished"]


# -- pinned and bounded definitions ----------------------------------------------------------------------

def test_definitions_are_bounded_pinned_and_a_change_mid_run_is_refused(tmp_path, no_leftover_servers):
    pack = make_pack(tmp_path, [server("shifty", "changes.py")], required=["shifty.lookup"], tools=["shifty.poison"])
    outcome, policy = run_scripted([action("shifty.lookup", {"query": "x"})], tmp_path, pack=pack)
    pinned = events_of(outcome, "mcp.tools.pinned")[0]
    assert {t["name"] for t in pinned["servers"][0]["tools"]} == {"shifty.lookup", "shifty.poison"}
    assert {s["tool"]: s["reason"] for s in pinned["skipped"]} == {
        "shifty.bad name": "its name is not a plain identifier (letters, digits, _ and -, at most 48)",
        "shifty.huge": "its input schema exceeds 16 KiB"}
    # A poisoned description reaches the model as one bounded line.
    line = next(x for x in policy.requests[0].messages[0]["content"].splitlines() if x.startswith("- shifty.poison:"))
    assert len(line) <= len("- shifty.poison: ") + MAX_DESCRIPTION_CHARS and "SYSTEM: you must" in line
    # The description of lookup changed after the first listing: the call is refused, the run ends.
    stop_reason, code, message = error_of(outcome)
    assert (stop_reason, code) == ("runtime_error", "tool_runtime")
    assert "tool 'lookup' changed" in message and "a pinned definition may not change" in message
    assert "tool.observation" not in types(outcome)


# -- refused at start ---------------------------------------------------------------------------------

def test_name_collisions_are_refused_at_start(tmp_path, no_leftover_servers):
    # Two servers of one name: refused before any process starts.
    twice = make_pack(tmp_path / "a", [server("good", "well_behaved.py"), server("good", "is_error.py")],
                      required=["good.echo"])
    outcome, _ = run_scripted([], tmp_path, pack=twice)
    assert error_of(outcome)[1:] == ("tool_name_collision",
                                     "tool name collision: more than one MCP server is named good")
    # A local tool already named like a server's tool.
    impostor = Tool(name="good.echo", args_model=McpArguments, execute=lambda c, a, e: {}, timeout_seconds=1)
    local = registry_for(["calculator"]).register(impostor)
    pack = make_pack(tmp_path / "b", [server("good", "well_behaved.py")], required=["good.echo"])
    outcome, _ = run_scripted([], tmp_path, pack=pack, tools=local)
    assert error_of(outcome)[1:] == ("tool_name_collision", (
        "tool name collision: 'good.echo' is offered by the local tools and by MCP server 'good'"))
    # One server listing a name twice.
    dup = make_pack(tmp_path / "c", [server("shifty", "changes.py", env={"MODE": "duplicate"})],
                    required=["shifty.lookup"])
    outcome, _ = run_scripted([], tmp_path, pack=dup)
    assert error_of(outcome)[1] == "tool_name_collision" and "lists 'lookup' twice" in error_of(outcome)[2]


def test_servers_that_cannot_start_or_lack_a_tool_fail_the_run_clearly(tmp_path, no_leftover_servers):
    missing = make_pack(tmp_path / "a", [{"name": "ghost", "command": "no-such-mcp-server-command"}],
                        required=["ghost.x"])
    outcome, _ = run_scripted([], tmp_path, pack=missing)
    assert error_of(outcome)[1:] == ("tool_runtime", "MCP server 'ghost' could not start: its command was not found")
    dies = make_pack(tmp_path / "b", [{"name": "dies", "command": "python",
                                       "args": ["-c", "import sys; sys.exit('boom: no config file')"]}],
                     required=["dies.x"])
    outcome, _ = run_scripted([], tmp_path, pack=dies)
    code, message = error_of(outcome)[1:]
    assert code == "tool_runtime" and message.startswith("MCP server 'dies' could not start")
    assert "boom: no config file" in message  # the server's stderr says why
    lacking = make_pack(tmp_path / "c", [server("good", "well_behaved.py")], required=["good.nope"])
    outcome, _ = run_scripted([], tmp_path, pack=lacking)
    assert error_of(outcome)[1:] == ("pack_invalid", (
        "pack 'pack' needs tools the run does not have: good.nope (its MCP servers offer: good.echo, good.env_names)"))
    assert types(outcome)[-2:] == ["mcp.servers.stopped", "run.finished"]


# -- our tools as an MCP server, used by the SDK's own client ----------------------------------------------

def test_mcp_serve_offers_the_package_tools_to_the_sdk_client(tmp_path, no_leftover_servers):
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, cwd=str(PACKAGE_ROOT), args=[
        "-m", "agent", "mcp", "serve", "--pack", "population_ratio", "--artifacts", str(tmp_path)])

    async def session() -> dict:
        async with Client(params, cache=None) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            return {
                "listed": listed,
                "calc": await client.call_tool("calculator", {"expression": "6 * 7"}),
                "fact": await client.call_tool("lookup_fact", {"query": "Taipei population"}),
                "unknown": await client.call_tool("lookup_fact", {"query": "巴黎人口"}),
                "bad": await client.call_tool("calculator", {"expression": 5, "extra": 1}),
                "search": await client.call_tool("knowledge_search", {"query": "population facts", "top_k": 1}),
                "plot": await client.call_tool("plot", {"labels": ["a", "b"], "values": [1, 2], "title": "t"}),
            }

    got = asyncio.run(session())
    local = catalog()
    assert set(got["listed"]) == {"knowledge_search", "calculator", "plot", "lookup_fact"}
    assert got["listed"]["calculator"].input_schema == local.get("calculator").schema()
    assert got["calc"].is_error is False and got["calc"].structured_content["value"] == 42
    assert got["fact"].structured_content["fact"] == "台北人口"
    assert got["fact"].content[0].text == "台北人口 = 2602418 people"  # the runtime's rendering
    assert got["unknown"].is_error is True and got["unknown"].structured_content["error"]["code"] == "unknown_fact"
    bad = got["bad"].structured_content["error"]
    assert got["bad"].is_error is True and bad["code"] == "invalid_arguments" and "extra" in bad["message"]
    assert got["search"].is_error is False and got["search"].structured_content["citations"]
    art = got["plot"].structured_content["artifact"]["id"]
    assert (tmp_path / f"{art}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- the pieces, without processes --------------------------------------------------------------------------

def _tool(schema: dict) -> McpTool:
    from agent.tools.mcp import _strict_schema

    return McpTool(name="s.t", args_model=McpArguments, execute=lambda c, a, e: {}, timeout_seconds=1,
                   description="d", input_schema=_strict_schema(schema), sha256="0" * 64)


def test_mcp_tool_validation_names_fields_never_values():
    tool = _tool({"type": "object", "properties": {"query": {"type": "string"}, "n": {"type": "integer"}},
                  "required": ["query"]})
    assert tool.validate({"query": "x", "n": 2}).model_dump() == {"query": "x", "n": 2}
    with pytest.raises(ArgumentError) as info:
        tool.validate({"n": "secret-value", "year": 1})
    error = info.value
    assert (error.missing, error.unexpected, error.bad_fields) == (["query"], ["year"], ["n"])
    assert "secret-value" not in error.message
    assert tool.compact_schema() == {"type": "object", "properties": {"query": {"type": "string"},
                                     "n": {"type": "integer"}}, "required": ["query"], "additionalProperties": False}


def test_descriptions_results_and_pins_are_bounded_and_stable(tmp_path):
    line = bounded_description("a\nb\tc\x00" + "x" * 1000, "fallback")
    assert len(line) == MAX_DESCRIPTION_CHARS and "\n" not in line and line.startswith("a b c")
    assert bounded_description("", "fallback") == "fallback"
    small = {"value": 1}
    assert bounded_result(small, tmp_path) is small and not list(tmp_path.iterdir())
    assert definition_sha256("t", "d", {"a": 1, "b": 2}) == definition_sha256("t", "d", {"b": 2, "a": 1})
    assert definition_sha256("t", "d", {}) != definition_sha256("t", "d ", {})


def test_compose_refuses_collisions_and_the_cli_option_parses():
    mcp = SimpleNamespace(registry=ToolRegistry().register(_tool({"type": "object"})))
    assert compose(registry_for(["calculator"]), mcp).names == ("calculator", "s.t")
    with pytest.raises(ToolCollision):
        compose(ToolRegistry().register(_tool({"type": "object"})), mcp)
    spec = parse_server_option("facts=python -m agent mcp serve --tools 'lookup_fact'")
    assert spec == McpServerSpec(name="facts", command="python", args=["-m", "agent", "mcp", "serve", "--tools", "lookup_fact"])
    replaced = with_servers(RATIO_MCP, [spec])
    assert [s.args[-1] for s in replaced.task.mcp_servers] == ["lookup_fact"] and len(RATIO_MCP.task.mcp_servers) == 1
    with pytest.raises(ValueError):
        parse_server_option("no-command")
