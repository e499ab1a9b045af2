"""A server whose tool fails as a result (is_error), as MCP tools report their own failures."""

from _tiny import result, serve, tool

TOOLS = [tool("divide", "Divide a by b.", {"a": {"type": "number"}, "b": {"type": "number"}}, ("a", "b"))]


async def call(name, arguments):
    if arguments["b"] == 0:
        return result("division by zero: b must not be 0", error=True)
    return result(str(arguments["a"] / arguments["b"]), structured={"value": arguments["a"] / arguments["b"]})


serve("is-error", lambda: TOOLS, call)
