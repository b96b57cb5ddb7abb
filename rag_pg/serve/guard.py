"""The HTTP guard: the outermost middleware, which checks the token and caps the body first.

Why an ASGI middleware and not FastAPI dependencies: those run after the body is read and
parsed, so an unauthenticated client could still make the server parse JSON; here it gets 401
before anything else. It also writes the one JSON log line of each request.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rag_pg.serve.auth import Caller, caller_of
from rag_pg.serve.failures import Secrets, classify, log_event

# Paths anyone may read: liveness, the API's own description, and the inspection page's files
# (HTML, CSS, JavaScript: no index data; the page asks for the token before it reads any).
OPEN_PATHS = frozenset({"/", "/health", "/openapi.json", "/docs", "/docs/oauth2-redirect"})
OPEN_PREFIXES = ("/page/",)


def is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


class Guard:
    """Outermost middleware: checks the token and caps the body before any parsing, logs each request.

    Why not FastAPI dependencies: those run after the body is read and parsed, so an
    unauthenticated client could still make the server parse JSON; here it gets 401 first.
    The body is read up to the limit and replayed to the app, so a chunked upload without
    ``Content-Length`` is capped too.
    """

    def __init__(self, app: ASGIApp, *, callers: dict[str, Caller], max_body: int,
                 secrets: Secrets, log: logging.Logger):
        self.app = app
        self.callers = callers
        self.max_body = max_body
        self.secrets = secrets
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        state: dict[str, Any] = {"status": 0, "started": False, "caller": None}

        async def send_logged(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                state["started"] = True
            await send(message)

        try:
            await self._handle(scope, receive, send_logged, state)
        except Exception as exc:
            self.log.error("unhandled error", exc_info=True, extra={"fields": {"event": "error"}})
            if not state["started"]:
                failure = classify(exc, self.secrets)
                await _send_json(send_logged, failure.status, failure.to_dict())
        finally:
            client = scope.get("client")
            log_event(self.log, logging.INFO, "request", event="request", method=scope.get("method"),
                 path=scope.get("path"), status=state["status"],
                 duration_ms=round((time.perf_counter() - start) * 1000, 1),
                 client=client[0] if client else None, caller=state["caller"])

    async def _handle(self, scope: Scope, receive: Receive, send: Send, state: dict[str, Any]) -> None:
        caller = Caller("anonymous")
        if self.callers and not is_open(scope["path"]):
            found = caller_of(_header(scope, b"authorization"), self.callers)
            if found is None:
                await _send_json(
                    send, 401,
                    {"error": "unauthorized",
                     "message": "a bearer token is required: send the header Authorization: Bearer <token>"},
                    headers=[(b"www-authenticate", b'Bearer realm="ragpg"')],
                )
                return
            caller = found
            state["caller"] = caller.name
        # The request reads as its caller: its token's tenant and principals, never its body's.
        with caller.acting():
            await self._admit(scope, receive, send)

    async def _admit(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = _header(scope, b"content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                await _send_json(send, 400, {"error": "bad_request", "message": "invalid Content-Length"})
                return
            if int(declared) > self.max_body:
                await self._too_large(send)
                return
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            total += len(body)
            if total > self.max_body:
                await self._too_large(send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send) -> None:
        await _send_json(send, 413, {
            "error": "too_large",
            "message": f"the request body is larger than {self.max_body} bytes (server.max_body_bytes)",
        })


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def _send_json(send: Send, status: int, data: dict[str, Any],
                     headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps(data, ensure_ascii=False).encode("utf-8")
    await send({
        "type": "http.response.start", "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    *(headers or [])],
    })
    await send({"type": "http.response.body", "body": body})



__all__ = ["OPEN_PATHS", "OPEN_PREFIXES", "Guard", "is_open"]
