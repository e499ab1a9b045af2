"""A server whose result is far over the runtime's size limit."""

from _tiny import result, serve, tool

TOOLS = [tool("dump", "Return n rows.", {"n": {"type": "integer", "minimum": 1, "maximum": 100000}}, ("n",))]


async def call(name, arguments):
    rows = [{"row": i, "payload": "x" * 20} for i in range(arguments["n"])]
    return result(f"{len(rows)} rows", structured={"rows": rows})


serve("oversized", lambda: TOOLS, call)
