"""An MCP server whose tools carry annotations: which of them says it is read-only.

``read`` (readOnlyHint) answers only once two calls of it are in flight at the same time (or after
5 s, with an error): two calls that come one after the other fail, two that run together succeed.
``wipe`` says readOnlyHint and destructiveHint (contradictory: not read-only), ``write`` says
readOnlyHint false, ``plain`` says nothing.
"""

import asyncio

import mcp_types as types
from _tiny import result, serve

TEXT = {"type": "object", "properties": {"text": {"type": "string", "minLength": 1, "maxLength": 50}},
        "required": ["text"]}


def tool(name, annotations=None):
    return types.Tool(name=name, description=f"The {name} tool.", input_schema=TEXT, annotations=annotations)


TOOLS = [
    tool("read", types.ToolAnnotations(read_only_hint=True)),
    tool("wipe", types.ToolAnnotations(read_only_hint=True, destructive_hint=True)),
    tool("write", types.ToolAnnotations(read_only_hint=False)),
    tool("plain"),
]
in_flight = {"read": 0}
together = asyncio.Event()


async def call(name, arguments):
    if name != "read":
        return result(f"{name} {arguments['text']}", structured={name: arguments["text"]})
    in_flight["read"] += 1
    if in_flight["read"] >= 2:
        together.set()
    try:
        await asyncio.wait_for(together.wait(), 5.0)
    except asyncio.TimeoutError:
        return result("no other read ran at the same time", error=True)
    return result(f"read {arguments['text']}", structured={"read": arguments["text"]})


serve("annotated", lambda: TOOLS, call)
