"""A server that hangs: in one tool only (slow: it still answers pings), or whole (freeze: its event
loop blocks, so nothing is answered any more)."""

import time

import anyio
from _tiny import serve, tool

TOOLS = [tool("slow", "Never finishes.", {}), tool("freeze", "Blocks the whole server.", {})]


async def call(name, arguments):
    if name == "slow":
        await anyio.sleep_forever()
    time.sleep(3600)


serve("hangs", lambda: TOOLS, call)
