"""Tools from MCP servers: started per run, pinned, bounded, composed with the local tools.

Servers are declared by the operator, in a pack's ``task.json`` (``mcp_servers``) or on the CLI
(``run --mcp NAME=COMMAND``), never by an HTTP request. ``McpTools.start`` starts
each over stdio with the official SDK (``mcp`` 2.x: ``mcp.Client`` over ``stdio_client``), lists its
tools once, pins every definition (name, description, input schema) by SHA-256 and wraps each tool as
a ``Tool`` named ``server.tool`` whose argument validation, prompt schema and decoding grammar come
from the server's input schema; it is read-only (``Tool.read_only``) only where the server's
annotations say ``readOnlyHint`` and not ``destructiveHint``. ``compose`` joins them with the local
tools into the run's registry, refusing a name offered twice. ``close`` stops every server; the runtime calls it when the run ends.

The SDK is async; the runtime calls tools from a worker thread. One private event loop in a daemon
thread owns every server of the run: ``execute`` submits the call to it and waits with the tool's
timeout and the run's cancel event.

Failures, by who is at fault::

    a result with is_error, a JSON-RPC error answer  -> ToolError: failed Observation, the model recovers
    the call timed out but the server still answers  -> ToolError tool_timeout (retryable)
    the server died, stopped answering, broke the     -> ToolTransportError: the run ends failed with
      protocol, or changed a pinned definition           error code tool_runtime
    a server could not start or list its tools        -> McpStartError (the run ends failed, tool_runtime)

Bounds (tool poisoning, prompt size): a description reaches the model as one line of
at most 300 characters; a tool whose input schema exceeds 16 KiB, is not valid JSON Schema or whose
name is not a plain identifier is not offered (the trace says why); a result whose JSON exceeds
4,000 characters is stored as an artifact (``artifact_dir/art-<16 hex>.json``) and the Observation
carries a 1,000-character preview and the artifact id. The server's environment is an allowlist
(``ENV_ALLOWLIST`` plus the SDK's own HOME/LOGNAME/PATH/SHELL/TERM/USER) and the spec's ``env``;
the runner's other variables (keys, tokens) never reach it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import hashlib
import json
import os
import re
import secrets
import shlex
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict

from agent.tools.base import (
    ArgumentError, Tool, ToolContext, ToolError, ToolRegistry, ToolTransportError, compact_schema
)
from agent.util.canonical import canonical_json

MAX_DESCRIPTION_CHARS = 300
MAX_SCHEMA_BYTES = 16 * 1024
MAX_RESULT_CHARS = 4_000
PREVIEW_CHARS = 1_000
MAX_ARTIFACT_BYTES = 8 * 1024 * 1024
MAX_TOOLS_PER_SERVER = 128
START_TIMEOUT_SECONDS = 30.0
CLOSE_TIMEOUT_SECONDS = 10.0
#: The runner's variables a server may see besides the SDK's defaults; anything else (API keys,
#: tokens, the runner's own settings) only if the spec's ``env`` names it with a value.
ENV_ALLOWLIST = ("PATH", "HOME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TEMP", "TMP",
                 "SYSTEMROOT")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_\-]{1,48}$")
_SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the ``agent`` package

_INSTALL_HINT = "MCP tools need the official SDK: pip install 'react-agent-local[mcp]' (or pip install 'mcp>=2.3,<3')"


class McpStartError(Exception):
    """A server could not be started, initialised or listed (an operator fault: its command or spec)."""


class ToolCollision(ValueError):
    """Two tool sources offer the same name; the run's registry refuses to choose between them."""


def _sdk():
    try:
        import mcp  # noqa: F401
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client
        from mcp.shared.exceptions import MCPError
    except ImportError:
        raise McpStartError(_INSTALL_HINT) from None
    return Client, StdioServerParameters, stdio_client, MCPError


# -- one tool ---------------------------------------------------------------------------------------

class McpArguments(BaseModel):
    """Arguments of an MCP tool, already checked against the server's input schema."""

    model_config = ConfigDict(extra="allow")


def definition_sha256(name: str, description: str | None, input_schema: Any) -> str:
    """The pin of a tool definition: SHA-256 of its canonical JSON (name, description, input schema)."""
    text = canonical_json({"name": name, "description": description or "", "input_schema": input_schema})
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def bounded_description(text: str | None, fallback: str) -> str:
    """One line of at most MAX_DESCRIPTION_CHARS: no newlines or control characters reach a prompt."""
    line = " ".join("".join(c if c.isprintable() else " " for c in (text or "")).split()) or fallback
    return line if len(line) <= MAX_DESCRIPTION_CHARS else line[: MAX_DESCRIPTION_CHARS - 1] + "…"


def annotated_read_only(listed: Any) -> bool:
    """Whether the server marks a listed tool read-only: ``readOnlyHint`` true and not destructive.
    A hint the server gives, which only lets calls of the tool run together (``agent/core/tool_batch.py``)."""
    annotations = getattr(listed, "annotations", None)
    return (getattr(annotations, "read_only_hint", None) is True
            and getattr(annotations, "destructive_hint", None) is not True)


def _strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    # Like the local tools' StrictArgs: a field the schema does not name is rejected, never passed on.
    schema = {k: v for k, v in schema.items() if k not in ("$schema", "$id")}
    if "additionalProperties" not in schema and "patternProperties" not in schema:
        schema["additionalProperties"] = False
    return schema


@dataclass
class McpTool(Tool):
    """A tool of an MCP server: its JSON schema is the server's, not a pydantic model of ours."""

    server: str = ""
    remote_name: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)
    sha256: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        from jsonschema.validators import validator_for

        self._compact = compact_schema(self.input_schema)
        self._validator = validator_for(self.input_schema)(self.input_schema)

    def schema(self) -> dict[str, Any]:
        return self.input_schema

    def compact_schema(self) -> dict[str, Any]:
        return self._compact

    def validate(self, arguments: dict[str, Any]) -> BaseModel:
        missing, unexpected, bad, parts = [], [], [], []
        for error in sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.absolute_path)):
            where = ".".join(str(p) for p in error.absolute_path)
            instance = error.instance if isinstance(error.instance, dict) else {}
            if error.validator == "required":
                for name in error.validator_value:
                    if name not in instance:
                        loc = f"{where}.{name}" if where else name
                        missing.append(loc)
                        parts.append(f"missing required field '{loc}'")
            elif error.validator == "additionalProperties":
                known = set((error.schema or {}).get("properties", {}))
                for name in instance:
                    if name not in known:
                        loc = f"{where}.{name}" if where else name
                        unexpected.append(loc)
                        parts.append(f"unexpected field '{loc}'")
            else:
                # The constraint, never the value (ArgumentError carries field names, not values).
                loc = where or "arguments"
                bad.append(loc)
                constraint = json.dumps(error.validator_value, ensure_ascii=False, default=str)
                parts.append(f"'{loc}': must satisfy {error.validator} {constraint[:80]}")
        if parts:
            message = f"invalid arguments for {self.name}: " + "; ".join(parts)
            raise ArgumentError(self.name, message[:600], bad, missing, unexpected)
        return McpArguments.model_validate(arguments)


# -- results --------------------------------------------------------------------------------------

def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def result_dict(result: Any) -> dict[str, Any]:
    """A CallToolResult as an Observation's result: its structured content when it is an object,
    else its text (a JSON object in the text is taken as the result), other content blocks named."""
    if isinstance(result.structured_content, dict):
        return _json_safe(result.structured_content)
    texts, others = [], []
    for block in result.content or []:
        if getattr(block, "type", None) == "text":
            texts.append(block.text)
        else:
            others.append(str(getattr(block, "type", "content")))
    text = "\n".join(texts)
    try:
        parsed = json.loads(text) if text.lstrip().startswith("{") else None
    except ValueError:
        parsed = None
    data = parsed if isinstance(parsed, dict) else {"text": text}
    if others:
        data["omitted_content"] = others[:20]
    return data


def error_text(result: Any) -> tuple[str, str, bool]:
    """(code, message, retryable) of an is_error result; a structured ``error`` object may name them."""
    structured = result.structured_content if isinstance(result.structured_content, dict) else {}
    error = structured.get("error") if isinstance(structured.get("error"), dict) else {}
    texts = [b.text for b in result.content or [] if getattr(b, "type", None) == "text"]
    message = str(error.get("message") or " ".join(texts) or "the tool reported an error")
    code = str(error.get("code") or "mcp_tool_error")
    code = code if re.fullmatch(r"[a-z][a-z0-9_]{0,40}", code) else "mcp_tool_error"
    return code, " ".join(message.split())[:500], error.get("retryable") is True


def bounded_result(data: dict[str, Any], artifact_dir: Path) -> dict[str, Any]:
    """``data`` itself when its JSON is small; else a preview and the artifact holding all of it."""
    text = json.dumps(data, ensure_ascii=False, sort_keys=True)
    if len(text) <= MAX_RESULT_CHARS:
        return data
    raw = text.encode("utf-8")
    stored = raw[:MAX_ARTIFACT_BYTES]
    artifact_id = "art-" + secrets.token_hex(8)
    try:
        artifact_dir = Path(artifact_dir)
        artifact_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(artifact_dir / f"{artifact_id}.json",
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(stored)
    except OSError as exc:
        raise ToolError("artifact_write_failed", f"could not store the oversized result ({type(exc).__name__})") from None
    return {
        "truncated": True,
        "chars": len(text),
        "preview": text[:PREVIEW_CHARS],
        "artifact": {"id": artifact_id, "media_type": "application/json", "bytes": len(stored),
                     "sha256": hashlib.sha256(stored).hexdigest(), "complete": len(stored) == len(raw)},
    }


# -- one server -----------------------------------------------------------------------------------

def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside anyio's exception groups (the builtin ones or, before Python
    3.11, the backport's)."""
    while isinstance(getattr(exc, "exceptions", None), (list, tuple)) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def server_environment(spec_env: dict[str, str], python: bool) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ and not os.environ[k].startswith("()")}
    if python:  # the runner's own interpreter finds this package even when it is not installed
        env["PYTHONPATH"] = str(_SOURCE_ROOT)
    env.update(spec_env)
    return env


class _Server:
    """One MCP server: its owner task holds the SDK client open until ``stop`` is set."""

    def __init__(self, spec: Any, cwd: Path, loop: asyncio.AbstractEventLoop):
        self.spec = spec
        self.cwd = cwd
        self.loop = loop
        self.client: Any = None
        self.stop: asyncio.Event | None = None
        self.owner: asyncio.Task | None = None
        self.broken: str | None = None
        self.pending: set[asyncio.Task] = set()
        self.errlog = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        self.listing: list[Any] = []
        self.pinned: dict[str, str] = {}
        self.protocol_version: str | None = None

    def stderr_tail(self) -> str:
        try:
            self.errlog.flush()
            self.errlog.seek(0, os.SEEK_END)
            size = self.errlog.tell()
            self.errlog.seek(max(0, size - 4000))
            lines = [line for line in self.errlog.read().splitlines() if line.strip()]
        except (OSError, ValueError):
            return ""
        return " ".join(" | ".join(lines[-3:]).split())[-300:]

    # runs on the loop
    async def open(self) -> None:
        Client, StdioServerParameters, stdio_client, _ = _sdk()
        python = self.spec.command in ("python", "python3")
        params = StdioServerParameters(
            command=sys.executable if python else self.spec.command, args=list(self.spec.args),
            env=server_environment(self.spec.env, python), cwd=str(self.cwd))
        self.stop = asyncio.Event()
        ready: asyncio.Future = self.loop.create_future()

        async def own() -> None:
            try:
                async with Client(stdio_client(params, errlog=self.errlog), cache=None,
                                  message_handler=self._on_message) as client:
                    self.client = client
                    self.protocol_version = client.protocol_version
                    self.listing = await self.list_tools()
                    ready.set_result(None)
                    await self.stop.wait()
                    for task in list(self.pending):
                        task.cancel()
            except BaseException as exc:  # noqa: BLE001 -- reported through ``ready`` or ``broken``
                if not ready.done():
                    ready.set_exception(_leaf(exc) if isinstance(_leaf(exc), Exception) else McpStartError("cancelled"))
                elif not isinstance(exc, asyncio.CancelledError):
                    self.broken = self.broken or f"the connection failed ({type(_leaf(exc)).__name__})"
            finally:
                self.client = None

        self.owner = asyncio.ensure_future(own())
        await ready

    async def list_tools(self) -> list[Any]:
        tools, cursor = [], None
        for _ in range(20):
            page = await self.client.list_tools(cursor=cursor)
            tools += page.tools
            cursor = page.next_cursor
            if cursor is None or len(tools) > MAX_TOOLS_PER_SERVER:
                break
        return tools[:MAX_TOOLS_PER_SERVER]

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            # A line on stdout that is not JSON-RPC: the server broke the protocol.
            self.broken = self.broken or "it wrote something that is not a JSON-RPC message to stdout"
            for task in list(self.pending):
                task.cancel()

    async def close(self) -> None:
        if self.stop is not None:
            self.stop.set()
        if self.owner is not None and self.client is None:
            self.owner.cancel()  # still starting (or gone): nothing to wind down politely
        if self.owner is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self.owner), CLOSE_TIMEOUT_SECONDS)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001 -- cancel the owner; the SDK kills the process
                self.owner.cancel()
                await asyncio.gather(self.owner, return_exceptions=True)
        self.errlog.close()

    # -- a call ---------------------------------------------------------------------------------

    def _transport(self, what: str) -> ToolTransportError:
        tail = self.stderr_tail()
        return ToolTransportError(f"MCP server '{self.spec.name}' {what}" + (f" (stderr: {tail})" if tail else ""))

    async def call(self, tool: McpTool, arguments: dict[str, Any], timeout: float) -> Any:
        _, _, _, MCPError = _sdk()
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
        from pydantic import ValidationError

        # The margin keeps time for a probe (is the server alive?) inside the runtime's own wait.
        margin = min(2.0, timeout * 0.4)
        end = time.monotonic() + timeout - margin
        try:
            if self.client is None:
                raise self._transport("is not connected (it exited)")
            with_timeout = max(0.05, end - time.monotonic())
            listing = await asyncio.wait_for(self.list_tools(), with_timeout)
            current = next((t for t in listing if t.name == tool.remote_name), None)
            now = None if current is None else definition_sha256(current.name, current.description, current.input_schema)
            if now != tool.sha256:
                change = "is no longer offered" if current is None else f"changed (pinned {tool.sha256[:12]}, now {now[:12]})"
                raise self._transport(f"tool '{tool.remote_name}' {change} during the run; a pinned definition may not change")
            return await self.client.call_tool(tool.remote_name, arguments,
                                               read_timeout_seconds=max(0.05, end - time.monotonic()))
        except ToolTransportError:
            raise
        except (asyncio.TimeoutError, MCPError) as exc:
            if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
                raise self._transport("closed the connection (it exited or crashed)") from None
            if isinstance(exc, MCPError) and exc.code != REQUEST_TIMEOUT:
                raise ToolError("mcp_error", f"{tool.name}: the server answered with error {exc.code}: "
                                             + " ".join(str(exc.message).split())[:300]) from None
            if self.broken:
                raise self._transport(f"broke the protocol: {self.broken}") from None
            try:  # tools/list as the probe: ping is gone from the 2026-07-28 protocol
                await asyncio.wait_for(self.client.list_tools(), margin * 0.7)
            except Exception:  # noqa: BLE001 -- no answer to a probe either: the server is gone
                raise self._transport(f"stopped answering (no reply within {timeout:g} s, nor to a probe)") from None
            raise ToolError("tool_timeout", f"{tool.name} did not finish within {timeout:g} s", retryable=True) from None
        except asyncio.CancelledError:
            if self.broken:
                raise self._transport(f"broke the protocol: {self.broken}") from None
            raise
        except (ValidationError, RuntimeError) as exc:
            raise self._transport(f"broke the protocol ({type(exc).__name__}: {str(exc)[:200]})") from None


def _not_bound(ctx: ToolContext, args: Any, cancel: threading.Event) -> dict[str, Any]:
    raise AssertionError("an MCP tool's execute is bound when it is registered")


# -- the servers of one run -----------------------------------------------------------------------

@dataclass
class McpTools:
    """The MCP servers of one run and their tools (``registry``), until ``close``."""

    servers: list[_Server]
    registry: ToolRegistry
    skipped: list[dict[str, str]]
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    closed: bool = False

    @classmethod
    def start(cls, specs: Iterable[Any], *, cwd: Path, timeout: float = START_TIMEOUT_SECONDS,
              cancel: threading.Event | None = None) -> McpTools:
        """Start every server (in parallel), list and pin their tools; McpStartError if one fails."""
        specs = list(specs)
        names = [s.name for s in specs]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ToolCollision(f"tool name collision: more than one MCP server is named {', '.join(twice)}")
        _sdk()
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="mcp-loop", daemon=True)
        thread.start()
        servers = [_Server(spec, Path(cwd), loop) for spec in specs]
        tools = cls(servers=servers, registry=ToolRegistry(), skipped=[], loop=loop, thread=thread)
        atexit.register(tools.close)
        try:
            future = asyncio.run_coroutine_threadsafe(tools._open_all(), loop)
            tools._wait(future, timeout, cancel)
            for server in servers:
                tools._register(server)
        except BaseException:
            tools.close()
            raise
        return tools

    async def _open_all(self) -> None:
        results = await asyncio.gather(*(s.open() for s in self.servers), return_exceptions=True)
        for server, outcome in zip(self.servers, results):
            if isinstance(outcome, BaseException):
                raise McpStartError(self._start_failure(server, outcome))

    @staticmethod
    def _start_failure(server: _Server, exc: BaseException) -> str:
        exc = _leaf(exc)
        if isinstance(exc, FileNotFoundError):
            why = "its command was not found"
        elif isinstance(exc, McpStartError):
            why = str(exc)
        else:
            why = f"it failed during start-up ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})"
        tail = server.stderr_tail()
        return f"MCP server '{server.spec.name}' could not start: {why}" + (f" (stderr: {tail})" if tail else "")

    def _wait(self, future: concurrent.futures.Future, timeout: float, cancel: threading.Event | None) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                future.result(timeout=0.05)
                return
            except concurrent.futures.TimeoutError:
                pass
            if cancel is not None and cancel.is_set():
                future.cancel()
                raise McpStartError("the run was cancelled while its MCP servers started")
            if time.monotonic() >= deadline:
                future.cancel()
                slow = [s.spec.name for s in self.servers if s.client is None]
                raise McpStartError(f"MCP server(s) {', '.join(slow) or '?'} did not start within {timeout:g} s")

    def _register(self, server: _Server) -> None:
        spec = server.spec
        for listed in server.listing:
            qualified = f"{spec.name}.{listed.name}"
            reason = None
            schema = listed.input_schema if isinstance(listed.input_schema, dict) else None
            if not _TOOL_NAME.match(listed.name or ""):
                reason = "its name is not a plain identifier (letters, digits, _ and -, at most 48)"
            elif len(qualified) > 64:
                reason = "server.tool is longer than 64 characters"
            elif schema is None or schema.get("type", "object") != "object":
                reason = "its input schema is not an object schema"
            elif len(json.dumps(schema, ensure_ascii=False)) > MAX_SCHEMA_BYTES:
                reason = f"its input schema exceeds {MAX_SCHEMA_BYTES // 1024} KiB"
            else:
                from jsonschema.exceptions import SchemaError
                from jsonschema.validators import validator_for

                try:
                    validator_for(schema).check_schema(schema)
                except SchemaError:
                    reason = "its input schema is not valid JSON Schema"
            sha = definition_sha256(listed.name, listed.description, listed.input_schema)
            if reason:
                self.skipped.append({"tool": qualified[:80], "reason": reason})
                continue
            server.pinned[listed.name] = sha
            field_name = spec.covers.get(listed.name)
            tool = McpTool(
                name=qualified.lower(), args_model=McpArguments,
                execute=_not_bound, timeout_seconds=float(spec.timeout_seconds),
                description=bounded_description(listed.description, f"{listed.name} (MCP server {spec.name})"),
                covers=(lambda r, f=field_name: r.get(f) if isinstance(r.get(f), str) else None) if field_name else None,
                server=spec.name, remote_name=listed.name, input_schema=_strict_schema(schema), sha256=sha,
                read_only=annotated_read_only(listed))
            tool.execute = self._executor(server, tool)
            try:
                self.registry.register(tool)
            except ValueError:
                raise ToolCollision(f"tool name collision: MCP server '{spec.name}' lists '{listed.name}' twice "
                                    "(names are compared case-insensitively)") from None

    def _executor(self, server: _Server, tool: McpTool):
        def execute(ctx: ToolContext, args: McpArguments, cancel: threading.Event) -> dict[str, Any]:
            if server.broken:
                raise server._transport(f"broke the protocol: {server.broken}")
            future = asyncio.run_coroutine_threadsafe(
                self._tracked(server, server.call(tool, args.model_dump(), tool.timeout_seconds)), self.loop)
            while True:
                try:
                    result = future.result(timeout=0.05)
                    break
                except concurrent.futures.TimeoutError:
                    if cancel.is_set():
                        future.cancel()  # the SDK tells the server the request is cancelled
                        raise ToolError("cancelled", "the run was cancelled during the call") from None
                except concurrent.futures.CancelledError:
                    if server.broken:
                        raise server._transport(f"broke the protocol: {server.broken}") from None
                    raise ToolError("cancelled", "the call was cancelled") from None
            if result.is_error:
                raise ToolError(*error_text(result))
            return bounded_result(result_dict(result), ctx.artifact_dir)

        return execute

    @staticmethod
    async def _tracked(server: _Server, coro: Any) -> Any:
        task = asyncio.current_task()
        server.pending.add(task)
        try:
            return await coro
        finally:
            server.pending.discard(task)

    def describe(self) -> list[dict[str, Any]]:
        """What the trace shows: per server, its protocol version and each tool's pin."""
        return [{"server": s.spec.name, "protocol_version": s.protocol_version,
                 "tools": [{"name": f"{s.spec.name}.{name}".lower(), "sha256": sha} for name, sha in s.pinned.items()]}
                for s in self.servers]

    def close(self) -> list[str]:
        """Stop every server (close stdin, then SIGTERM/SIGKILL its process group, as the SDK does);
        idempotent. Returns the servers' names."""
        if self.closed:
            return []
        self.closed = True
        atexit.unregister(self.close)
        if self.loop.is_running():
            future = asyncio.run_coroutine_threadsafe(self._close_all(), self.loop)
            try:
                future.result(timeout=CLOSE_TIMEOUT_SECONDS + 5)
            except Exception:  # noqa: BLE001 -- nothing more to do; the daemon thread dies with us
                pass
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)
        if not self.loop.is_running():
            self.loop.close()
        return [s.spec.name for s in self.servers]

    async def _close_all(self) -> None:
        await asyncio.gather(*(s.close() for s in self.servers), return_exceptions=True)


# -- composition and the operator's declarations ----------------------------------------------------

def compose(local: ToolRegistry, mcp: McpTools) -> ToolRegistry:
    """One registry for the run: the local tools, then every MCP server's; a name offered twice is
    refused (ToolCollision), never resolved by order."""
    registry = ToolRegistry(dict(local.tools))
    for tool in mcp.registry:
        if tool.name in registry:
            raise ToolCollision(f"tool name collision: '{tool.name}' is offered by the local tools and by "
                                f"MCP server '{tool.server}'")
        registry.register(tool)
    return registry


def parse_server_option(text: str) -> Any:
    """``NAME=COMMAND ARGS...`` (the CLI's ``--mcp``) as an McpServerSpec; ValueError when malformed."""
    from agent.contracts.task import McpServerSpec

    name, sep, command = text.partition("=")
    words = shlex.split(command)
    if not sep or not words:
        raise ValueError(f"--mcp expects NAME=COMMAND [ARGS...], got {text!r}")
    return McpServerSpec(name=name.strip(), command=words[0], args=words[1:])


def with_servers(pack: Any, specs: list[Any]) -> Any:
    """The pack with these servers added; one named like a pack's server replaces it."""
    import dataclasses

    names = {s.name for s in specs}
    servers = [s for s in pack.task.mcp_servers if s.name not in names] + list(specs)
    return dataclasses.replace(pack, task=pack.task.model_copy(update={"mcp_servers": servers}))
