"""The MCP server's stdio wire: every line is checked before the SDK sees it, and a malformed
one is answered with a JSON-RPC error instead of silence.

Why: the SDK drops a line it cannot parse (not JSON, not UTF-8, a batch, ``"jsonrpc": "1.0"``,
``"id": null``, params that are not an object) without answering, so a client waits forever
for a reply to a request it got slightly wrong. Here such a line gets the error JSON-RPC 2.0
prescribes — -32700 when it is not JSON, -32600 when it is not a valid request, -32602 for bad
params — with the request's id when it has a usable one, ``null`` otherwise. A line longer than
``server.max_body_bytes`` or nested deeper than :data:`MAX_DEPTH` is refused before it is parsed,
so neither memory nor the parser's recursion is at the sender's mercy.

The answers go out through the SDK's own writer (one writer: frames are never interleaved).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

MAX_DEPTH = 64  # objects and arrays inside one message; tool arguments need far fewer


class Refused(Exception):
    """A line that gets a JSON-RPC error instead of reaching the SDK."""

    def __init__(self, code: int, message: str, id: Any = None):
        super().__init__(message)
        self.code = code
        self.id = id


def depth_of(text: str) -> int:
    """The deepest nesting of objects/arrays in JSON text, found without parsing it."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _usable_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def encodable(value: Any) -> bool:
    """Whether every string in ``value`` (keys included) encodes to UTF-8."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def check_line(raw: bytes, max_bytes: int) -> str | None:
    """The line as text when the SDK may have it, None for a blank line; else :class:`Refused`."""
    if len(raw) > max_bytes:
        raise Refused(types.INVALID_REQUEST, f"message longer than {max_bytes} bytes (server.max_body_bytes)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(types.PARSE_ERROR, "parse error: the message is not UTF-8 text") from None
    if not text.strip():
        return None
    if depth_of(text) > MAX_DEPTH:
        raise Refused(types.INVALID_REQUEST, f"message nested deeper than {MAX_DEPTH} levels")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise Refused(types.PARSE_ERROR, f"parse error: not JSON ({exc})") from None
    if isinstance(data, list):
        raise Refused(types.INVALID_REQUEST, "batches are not supported: send one JSON-RPC object per line")
    if not isinstance(data, dict):
        raise Refused(types.INVALID_REQUEST, "a JSON-RPC message is a JSON object")
    id = data.get("id") if _usable_id(data.get("id")) else None
    if data.get("jsonrpc") != "2.0":
        raise Refused(types.INVALID_REQUEST, 'jsonrpc must be "2.0"', id)
    if "id" in data and id is None:
        raise Refused(types.INVALID_REQUEST, "id must be a string or an integer (not null)")
    if not encodable(data):
        # "\ud800" is valid JSON but no text: the SDK would fail to answer it at all.
        raise Refused(types.INVALID_PARAMS, "a string of the message is not valid Unicode"
                      " (a lone surrogate escape such as \\ud800)", id)
    if "method" in data:
        if not isinstance(data["method"], str):
            raise Refused(types.INVALID_REQUEST, "method must be a string", id)
        if "params" in data and not isinstance(data["params"], dict):
            raise Refused(types.INVALID_PARAMS, "params must be a JSON object", id)
    elif id is None or not ("result" in data or "error" in data):
        raise Refused(types.INVALID_REQUEST, "a request needs a method (a response, an id and a result)", id)
    try:
        types.jsonrpc_message_adapter.validate_python(data, by_name=False)
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid"}
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or "message"
        raise Refused(types.INVALID_REQUEST, f"invalid JSON-RPC message: {where}: {first['msg']}", id) from None
    return text


class CheckedStdin:
    """Standard input as the SDK reads it (an async iterator of lines), lines checked first."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.reply: Any = None  # the SDK's write stream, once the transport is open
        self.ready = anyio.Event()
        self._buffer = sys.stdin.buffer

    async def _readline(self) -> bytes:
        return await anyio.to_thread.run_sync(self._buffer.readline, self.max_bytes + 1,
                                              abandon_on_cancel=True)

    async def _lines(self) -> AsyncIterator[bytes]:
        """Raw lines, each cut at max_bytes + 1 so an endless line is never held whole."""
        while True:
            raw = await self._readline()
            if not raw:
                return
            if raw.endswith(b"\n") or len(raw) <= self.max_bytes:
                yield raw.rstrip(b"\r\n")
                continue
            while raw and not raw.endswith(b"\n"):  # the rest of an oversized line: dropped
                raw = await self._readline()
            yield b"x" * (self.max_bytes + 1)

    async def __aiter__(self) -> AsyncIterator[str]:
        async for raw in self._lines():
            try:
                text = check_line(raw, self.max_bytes)
            except Refused as refused:
                await self._answer(refused)
                continue
            if text is not None:
                yield text

    async def _answer(self, refused: Refused) -> None:
        await self.ready.wait()
        error = types.JSONRPCError(jsonrpc="2.0", id=refused.id,
                                   error=types.ErrorData(code=refused.code, message=str(refused)))
        try:
            await self.reply.send(SessionMessage(error))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the server is shutting down


async def serve_stdio(server: MCPServer, max_bytes: int) -> None:
    """Run ``server`` on stdin/stdout with the checked reader (the SDK's stdio transport otherwise)."""
    stdin = CheckedStdin(max_bytes)
    async with stdio_server(stdin=stdin) as (read_stream, write_stream):  # type: ignore[arg-type]
        stdin.reply = write_stream
        stdin.ready.set()
        lowlevel = server._lowlevel_server  # the SDK offers no public way to pass a transport
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


__all__ = ["MAX_DEPTH", "CheckedStdin", "Refused", "check_line", "depth_of", "serve_stdio"]
