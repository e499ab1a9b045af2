"""A well-behaved MCP server: echo, and env_names (which variables reached it: the allowlist test)."""

import os

from _tiny import result, serve, tool

TOOLS = [
    tool("echo", "Echo the text back.", {"text": {"type": "string", "minLength": 1, "maxLength": 200}}, ("text",)),
    tool("env_names", "Names of the environment variables this server sees.", {}),
]


async def call(name, arguments):
    if name == "echo":
        return result(arguments["text"], structured={"echo": arguments["text"]})
    return result("env", structured={"names": sorted(os.environ)})


serve("well-behaved", lambda: TOOLS, call)
