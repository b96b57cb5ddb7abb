"""The HTTP retrieval API: a FastAPI app over one RagPG, built by a factory (no globals).

Why it looks the way it does: every rule about input lives in :mod:`rag_pg.service` (the MCP
server applies the same); this module only adds what HTTP needs — a guard that checks the
bearer token and caps the body before anything is parsed, JSON errors with stable codes
instead of tracebacks, one JSON log line per request, and an OpenAPI document that states the
limits actually in force.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import __version__
from .config import Settings
from .errors import RagError
from .service import (
    MAX_ID,
    MAX_NAME_CHARS,
    MAX_PATH_CHARS,
    Limits,
    SearchRequest,
    Secrets,
    call_limited,
    check_token,
    classify,
    describe_errors,
    fetch_document,
    fetch_stats,
    log_event,
    run_search,
    token_matches,
)

if TYPE_CHECKING:
    from .api import RagPG

LOGGER = "ragpg.server"
# Paths anyone may read: liveness, and the API's own description (no index data in either).
OPEN_PATHS = frozenset({"/health", "/openapi.json", "/docs", "/docs/oauth2-redirect"})


# -- response shapes (documentation of the JSON the endpoints return) ---------------------------


class ErrorOut(BaseModel):
    error: str = Field(description="A stable code: invalid_request, unauthorized, not_found, too_large, timeout, database_unavailable, ...")
    message: str = Field(description="What went wrong and what to do, in one line.")
    detail: list[dict[str, Any]] | None = None


class HitOut(BaseModel):
    """A hit: the same object as in ``ragpg search --json``; cite it as ``path#anchor``."""

    model_config = ConfigDict(extra="allow")
    path: str
    title: str
    section: str
    anchor: str
    position: int
    score: float
    content: str
    collection: str
    token_count: int
    ranks: dict[str, int] = Field(description="1-based rank in each retriever that found the chunk.")
    scores: dict[str, float] = Field(description="Raw score of each retriever.")


class SearchOut(BaseModel):
    hits: list[HitOut] = Field(description="Best first.")


class ChunkOut(BaseModel):
    id: int
    position: int
    section: str
    anchor: str
    content: str
    token_count: int
    content_hash: str


class DocumentOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: int
    collection: str
    path: str
    title: str
    content_hash: str
    front_matter: dict[str, Any]
    parent_path: str | None
    level: int
    node_type: str
    embed: bool
    language: str
    chunk_count: int
    token_count: int
    indexed_at: str
    chunks: list[ChunkOut]


class HealthOut(BaseModel):
    status: str


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    text = {401: "Missing or wrong bearer token", 404: "No such document", 413: "Request body too large",
            422: "Invalid request", 503: "Database or embedding service unavailable",
            504: "Request timed out"}
    return {code: {"model": ErrorOut, "description": text[code]} for code in codes}


# -- the guard: token, body size, request log ---------------------------------------------------


class Guard:
    """Outermost middleware: checks the token and caps the body before any parsing, logs each request.

    Why not FastAPI dependencies: those run after the body is read and parsed, so an
    unauthenticated client could still make the server parse JSON; here it gets 401 first.
    The body is read up to the limit and replayed to the app, so a chunked upload without
    ``Content-Length`` is capped too.
    """

    def __init__(self, app: ASGIApp, *, token: str | None, max_body: int, secrets: Secrets,
                 log: logging.Logger):
        self.app = app
        self.token = token
        self.max_body = max_body
        self.secrets = secrets
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        state: dict[str, Any] = {"status": 0, "started": False}

        async def send_logged(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                state["started"] = True
            await send(message)

        try:
            await self._handle(scope, receive, send_logged)
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
                 client=client[0] if client else None)

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is not None and scope["path"] not in OPEN_PATHS:
            if not token_matches(_header(scope, b"authorization"), self.token):
                await _send_json(
                    send, 401,
                    {"error": "unauthorized",
                     "message": "a bearer token is required: send the header Authorization: Bearer <token>"},
                    headers=[(b"www-authenticate", b'Bearer realm="ragpg"')],
                )
                return
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


# -- the app -------------------------------------------------------------------------------------


def create_app(rag: RagPG, settings: Settings, *, secrets: Secrets | None = None,
               logger: logging.Logger | None = None) -> FastAPI:
    """A FastAPI app serving ``rag``; the caller owns ``rag`` and closes it after the server stops.

    Raises ConfigError for a bad ``[server]`` setting (limits, a token that is too short).
    """
    limits = Limits.from_settings(settings)
    token = check_token(settings.server.token)
    secrets = secrets or Secrets.from_settings(settings)
    log = logger or logging.getLogger(LOGGER)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Build the embedding provider now: two first requests racing would each make one.
        try:
            rag.provider  # noqa: B018
        except RagError as exc:
            log_event(log, logging.WARNING, f"embedding provider not ready: {secrets.scrub(str(exc))}",
                 event="warning")
        log_event(log, logging.INFO, "ready", event="ready", auth="token" if token else "none",
             max_body_bytes=limits.max_body_bytes, max_k=limits.max_k,
             request_timeout=limits.request_timeout)
        yield
        log_event(log, logging.INFO, "shutting down", event="shutdown")

    app = FastAPI(
        title="ragpg",
        version=__version__,
        summary="Hybrid retrieval (pgvector + keywords) over a Markdown tree, with citable provenance.",
        description=(
            "Search returns passages best first; each hit carries `path`, `section` and `anchor` so an"
            " answer can cite it as `path#anchor`. When a token is configured, every endpoint but"
            " `/health` and this documentation needs `Authorization: Bearer <token>`."
        ),
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.add_middleware(Guard, token=token, max_body=limits.max_body_bytes, secrets=secrets, log=log)

    def failure_response(exc: BaseException, **context: Any) -> JSONResponse:
        failure = classify(exc, secrets)
        if failure.status >= 500:
            log_event(log, logging.WARNING if failure.status != 500 else logging.ERROR, failure.message,
                 event="failure", error=failure.code, **context)
            if failure.status == 500:
                log.error("unexpected error", exc_info=exc, extra={"fields": {"event": "error"}})
        return JSONResponse(failure.to_dict(), status_code=failure.status)

    async def answer(fn: Callable[[], Any], not_found: str | None = None) -> JSONResponse:
        try:
            data = await call_limited(fn, limits)
        except Exception as exc:
            return failure_response(exc)
        if data is None and not_found is not None:
            return JSONResponse({"error": "not_found", "message": secrets.scrub(not_found)}, status_code=404)
        return JSONResponse(data)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        detail = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")),
                   "type": str(e.get("type", ""))} for e in errors]
        message = describe_errors(errors)
        if request.method == "POST" and "json" not in request.headers.get("content-type", ""):
            message = f"send a JSON object with Content-Type: application/json ({message})"
        return JSONResponse({"error": "invalid_request", "message": secrets.scrub(message),
                             "detail": detail}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # FastAPI's answer to a body it cannot decode (not UTF-8): the same verdict as bad JSON.
            return JSONResponse({"error": "invalid_request",
                                 "message": "the request body is not valid JSON in UTF-8"}, status_code=422)
        codes = {404: "not_found", 405: "method_not_allowed"}
        return JSONResponse({"error": codes.get(exc.status_code, "http_error"), "message": str(exc.detail)},
                            status_code=exc.status_code, headers=exc.headers)

    @app.get("/health", response_model=HealthOut, tags=["service"])
    async def health() -> JSONResponse:
        """Liveness: the server answers. Open to everyone; says nothing about the index."""
        return JSONResponse({"status": "ok"})

    @app.get("/stats", tags=["index"], responses=_errors(401, 422, 503, 504))
    async def stats(
        collection: str | None = Query(None, min_length=1, max_length=MAX_NAME_CHARS),
    ) -> JSONResponse:
        """Documents, chunks, last indexed time, models and the last ingest run of a collection."""
        return await answer(lambda: fetch_stats(rag, collection))

    @app.post("/search", response_model=SearchOut, tags=["search"],
              responses=_errors(401, 413, 422, 503, 504))
    async def search(body: SearchRequest) -> JSONResponse:
        """The best passages for a query, best first, with provenance and per-retriever ranks.

        Cite a hit as `path#anchor` (just `path` when the anchor is empty).
        """
        return await answer(lambda: {"hits": run_search(rag, body, limits)})

    @app.get("/documents/{document_id}", response_model=DocumentOut, tags=["documents"],
             responses=_errors(401, 404, 422, 503, 504))
    async def document_by_id(document_id: int = Path(ge=1, le=MAX_ID)) -> JSONResponse:
        """One document with its chunks in order (section, anchor, position, content)."""
        return await answer(lambda: fetch_document(rag, id=document_id),
                            not_found=f"no document with id {document_id}")

    @app.get("/documents", response_model=DocumentOut, tags=["documents"],
             responses=_errors(401, 404, 422, 503, 504))
    async def document_by_path(
        path: str = Query(min_length=1, max_length=MAX_PATH_CHARS,
                          description="Path relative to the ingested root, e.g. fr/admin/sauvegardes.md"),
        collection: str | None = Query(None, min_length=1, max_length=MAX_NAME_CHARS),
    ) -> JSONResponse:
        """One document, by its path in a collection, with its chunks in order."""
        return await answer(
            lambda: fetch_document(rag, path=path, collection=collection),
            not_found=f"no document {path!r} in collection {collection or settings.collection!r}",
        )

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, summary=app.summary,
                                 description=app.description, routes=app.routes)
            _state_limits(schema, limits, token is not None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _state_limits(schema: dict[str, Any], limits: Limits, secured: bool) -> None:
    """Write the limits in force (and the bearer scheme, when a token is set) into the schema."""
    props = schema.get("components", {}).get("schemas", {}).get("SearchRequest", {}).get("properties", {})

    if "query" in props:
        props["query"].update(minLength=1, maxLength=limits.max_query_chars)
    for name in ("k", "max_per_document"):
        if name in props:
            for branch in props[name].get("anyOf", [props[name]]):
                if branch.get("type") == "integer":
                    branch["maximum"] = limits.max_k
    if not secured:
        return
    schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearerAuth"] = {
        "type": "http", "scheme": "bearer",
    }
    unauthorized = {"description": "Missing or wrong bearer token",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}}
    for path, operations in schema.get("paths", {}).items():
        if path in OPEN_PATHS:
            continue
        for operation in operations.values():
            operation["security"] = [{"bearerAuth": []}]
            operation.setdefault("responses", {}).setdefault("401", unauthorized)


__all__ = ["Guard", "create_app"]
