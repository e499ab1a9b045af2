"""The few lines every test MCP server shares: serve tools over stdio with the SDK's low-level Server.

Each server in this folder is a real MCP server process (started by tests/test_mcp.py through the
runtime or the SDK's client); this module only saves each of them the boilerplate.
"""

from __future__ import annotations

import sys
from typing import Any, Awaitable, Callable

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


def tool(name: str, description: str, properties: dict[str, Any], required: tuple[str, ...] = ()) -> types.Tool:
    return types.Tool(name=name, description=description,
                      input_schema={"type": "object", "properties": properties, "required": list(required)})


def result(text: str, *, structured: dict[str, Any] | None = None, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=structured, is_error=error)


def serve(name: str, tools: Callable[[], list[types.Tool]],
          call: Callable[[str, dict[str, Any]], Awaitable[types.CallToolResult]], *, raw_stdout: bool = False) -> None:
    """Serve until stdin closes. ``raw_stdout`` keeps fd 1 as the wire (the SDK normally diverts it
    so stray prints cannot corrupt the protocol), for a server that means to corrupt it."""

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools())

    async def call_tool(_ctx: Any, params: Any) -> types.CallToolResult:
        return await call(params.name, params.arguments or {})

    server = Server(name, on_list_tools=list_tools, on_call_tool=call_tool)

    async def main() -> None:
        streams = {"stdout": anyio.wrap_file(sys.stdout)} if raw_stdout else {}
        async with stdio_server(**streams) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
