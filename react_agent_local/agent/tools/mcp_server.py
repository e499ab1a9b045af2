"""Our tools as an MCP server: ``react-agent mcp serve [--pack NAME|DIR] [--tools a,b]``.

Any MCP client (Claude Desktop, an IDE, the SDK's own ``mcp.Client``, this package's ``tools/mcp.py``)
can start it over stdio and use the package's tools -- knowledge_search over the pack's knowledge,
calculator, plot, lookup_fact over the pack's fact base -- exactly as a run does: the registry is the
one the runtime reads, so each tool's name, description, input schema (from its argument model),
validation and timeout are the same. Built on the SDK's low-level ``Server`` (``mcp`` 2.x), because
the schemas already exist and need no second copy.

A call answers ``structuredContent`` = the tool's result and one text block = how the runtime shows
that result to a model (``tool.render``). Invalid arguments, an unknown tool, a ToolError or a
timeout answer ``isError`` with ``structuredContent.error = {code, message, retryable}``, so a client
sees a failed result it can recover from, never a broken connection. Plot PNGs go to ``--artifacts``
(default: a new temporary folder).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from agent import __version__
from agent.task.packs import PackError, load_pack
from agent.tools import ArgumentError, ToolContext, ToolError, ToolRegistry, catalog

DEFAULT_TOOLS = ("knowledge_search", "calculator", "plot", "lookup_fact")


def build_server(registry: ToolRegistry, ctx: ToolContext) -> Any:
    """An SDK ``Server`` whose tools/list and tools/call are this registry's tools."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server

    def failed(code: str, message: str, retryable: bool = False) -> Any:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"{code}: {message}")],
            structured_content={"error": {"code": code, "message": message, "retryable": retryable}},
            is_error=True)

    async def list_tools(_ctx: Any, _params: Any) -> Any:
        return types.ListToolsResult(tools=[
            types.Tool(name=tool.name, description=tool.description, input_schema=tool.schema())
            for tool in registry])

    async def call_tool(_ctx: Any, params: Any) -> Any:
        if params.name not in registry:
            return failed("unknown_tool", f"unknown tool; known: {', '.join(registry.names)}")
        tool = registry.get(params.name)
        try:
            arguments = registry.validate(params.name, params.arguments or {})
        except ArgumentError as exc:
            return failed("invalid_arguments", exc.message)
        cancel = threading.Event()
        try:
            with anyio.fail_after(tool.timeout_seconds):
                result = await anyio.to_thread.run_sync(tool.execute, ctx, arguments, cancel, abandon_on_cancel=True)
        except TimeoutError:
            cancel.set()
            return failed("tool_timeout", f"{tool.name} did not finish within {tool.timeout_seconds:g} s", True)
        except ToolError as exc:
            return failed(exc.code, exc.message, exc.retryable)
        except Exception as exc:  # noqa: BLE001 -- a tool bug is a failed result, not a dead server
            return failed("tool_crashed", f"{tool.name} raised {type(exc).__name__}")
        structured = json.loads(json.dumps(result, ensure_ascii=False, default=str))
        return types.CallToolResult(content=[types.TextContent(type="text", text=tool.render(result))],
                                    structured_content=structured)

    return Server("react-agent-local", version=__version__,
                  instructions="The ReAct Agent Local tools over one task pack.",
                  on_list_tools=list_tools, on_call_tool=call_tool)


def serve(registry: ToolRegistry, ctx: ToolContext) -> None:
    """Serve over this process's stdin/stdout until the client closes stdin."""
    import anyio
    from mcp.server.stdio import stdio_server

    server = build_server(registry, ctx)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pack", default=None, help="task pack name or directory whose knowledge the tools read")
    parser.add_argument("--tools", default=",".join(DEFAULT_TOOLS),
                        help=f"comma-separated tools to serve (default: {','.join(DEFAULT_TOOLS)})")
    parser.add_argument("--artifacts", default=None, help="folder for plot PNGs (default: a new temporary folder)")


def main(args: argparse.Namespace) -> int:
    # stdout is the protocol channel: every message for a person goes to stderr.
    try:
        import mcp  # noqa: F401
    except ImportError:
        print("error: `mcp serve` needs the official MCP SDK: pip install 'react-agent-local[mcp]'", file=sys.stderr)
        return 2
    try:
        pack = load_pack(args.pack)
        names = [n.strip() for n in args.tools.split(",") if n.strip()]
        registry = catalog().subset(names)
    except PackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyError as exc:
        print(f"error: unknown tools: {exc.args[0]}; known: {', '.join(catalog().names)}", file=sys.stderr)
        return 2
    artifacts = Path(args.artifacts) if args.artifacts else Path(tempfile.mkdtemp(prefix="react-agent-mcp-"))
    serve(registry, ToolContext(knowledge_dir=pack.knowledge_dir, artifact_dir=artifacts, pack_dir=pack.root))
    return 0
