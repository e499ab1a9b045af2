"""A real OpenAI-compatible server on a loopback port, in threads of this process, that misbehaves on
purpose: it echoes the key it receives, stalls before or after its headers, drips its body or sends
too much of it. Unlike ``served_support.FakeServer`` (httpx2's MockTransport) the client's sockets,
threads and timeouts are real, so what a cancelled call leaves behind can be counted.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body or b"{}")


@dataclass
class Respond:
    """A whole response: status, headers and body, then the connection closes."""

    body: bytes
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "text/event-stream"})


@dataclass
class Stall:
    """Read the request, optionally send the response headers, then send nothing until the client goes."""

    headers_first: bool = False


@dataclass
class Drip:
    """Headers at once, then one chunk every ``seconds`` (a chunked body that never ends on its own)."""

    chunks: Iterable[bytes]
    seconds: float


Answer = Callable[[Request], "Respond | Stall | Drip"]


class LoopbackModelServer:
    def __init__(self, answer: Answer):
        self.answer = answer
        self.requests: list[Request] = []
        self.open_connections = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.origin = f"127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, name="loopback-model-server", daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def wait_connections(self, count: int, timeout: float) -> int:
        """Waits until at most ``count`` connections are open (or ``timeout`` passes); returns how many are."""
        deadline = time.monotonic() + timeout
        while self.open_connections > count and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.open_connections

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with self._lock:
            self.open_connections += 1
        try:
            request = _read_request(conn)
            if request is None:
                return
            self.requests.append(request)
            reply = self.answer(request)
            if isinstance(reply, Respond):
                head = [f"HTTP/1.1 {reply.status} X", f"content-length: {len(reply.body)}", "connection: close",
                        *(f"{k}: {v}" for k, v in reply.headers.items())]
                conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + reply.body)
            elif isinstance(reply, Drip):
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
                for chunk in reply.chunks:
                    time.sleep(reply.seconds)
                    conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            else:
                if reply.headers_first:
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                                 b"transfer-encoding: chunked\r\n\r\n")
                while conn.recv(65536):  # until the client closes or shuts its socket down
                    pass
        except OSError:
            pass
        finally:
            conn.close()
            with self._lock:
                self.open_connections -= 1


def _read_request(conn: socket.socket) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        chunk = conn.recv(65536)
        if not chunk:
            return None
        body += chunk
    return Request(method, path, headers, body)
