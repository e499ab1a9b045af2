"""A server that dies in the middle of a call (crash), or breaks the protocol mid-call (garble)."""

import os
import sys

from _tiny import serve, tool

TOOLS = [tool("crash", "Exit without answering.", {}), tool("garble", "Write a line that is not JSON-RPC.", {})]


async def call(name, arguments):
    if name == "crash":
        os._exit(3)  # the request arrived; no answer will ever come
    sys.stdout.write("this is not a JSON-RPC message\n")
    sys.stdout.flush()
    import anyio

    await anyio.sleep_forever()


serve("crashes", lambda: TOOLS, call, raw_stdout=True)
