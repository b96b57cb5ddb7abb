"""The HTTP retrieval API: a FastAPI app over one RagPG, built by a factory (no globals).

Why it looks the way it does: every rule about input lives in :mod:`rag_pg.serve.rules` (the MCP
server applies the same); this module only adds what HTTP needs — the guard
(:mod:`rag_pg.serve.guard`: token, body cap, request log), JSON errors with stable codes
instead of tracebacks, a gate in front of the embedding service (:mod:`rag_pg.serve.gate`) so
that a stalled one cannot starve the requests that need only the database, the inspection
page at ``/`` (whose data is this same public API), and an OpenAPI document that states the
limits actually in force.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path as FilePath
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from rag_pg import __version__
from rag_pg.config import Settings
from rag_pg.errors import RagError
from rag_pg.serve import catalog
from rag_pg.serve.auth import callers
from rag_pg.serve.failures import Secrets, classify, log_event
from rag_pg.serve.gate import ModelGate
from rag_pg.serve.guard import Guard, is_open
from rag_pg.serve.inspect import LocateRequest, explain, locate
from rag_pg.serve.rules import (
    MAX_ID,
    MAX_NAME_CHARS,
    MAX_PATH_CHARS,
    NO_NUL,
    Limits,
    SearchRequest,
    call_limited,
    describe_errors,
    fetch_collections,
    fetch_document,
    fetch_runs,
    fetch_stats,
    needs_model,
    run_search,
)
from rag_pg.serve.schemas import (
    CollectionsOut,
    DocumentOut,
    ExplainedSearchOut,
    HealthOut,
    LocateOut,
    RunsOut,
    errors,
)

if TYPE_CHECKING:
    from rag_pg.api import RagPG

LOGGER = "ragpg.server"
PAGE = FilePath(__file__).with_name("page")
# The page loads its own files only and inserts data as text; the policy makes sure of both.
PAGE_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
                               " connect-src 'self'; base-uri 'none'; form-action 'self';"
                               " frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def create_app(rag: RagPG, settings: Settings, *, secrets: Secrets | None = None,
               logger: logging.Logger | None = None) -> FastAPI:
    """A FastAPI app serving ``rag``; the caller owns ``rag`` and closes it after the server stops.

    Raises ConfigError for a bad ``[server]`` setting (limits, a token that is too short).
    """
    limits = Limits.from_settings(settings)
    known = callers(settings)
    secrets = secrets or Secrets.from_settings(settings)
    log = logger or logging.getLogger(LOGGER)
    gate: ModelGate = limits.gate()
    rag.bound_embedding_calls(limits.embedding_slots, limits.embedding_queue,
                              patience=limits.request_timeout)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Build the embedding provider now: two first requests racing would each make one.
        try:
            rag.provider  # noqa: B018
        except RagError as exc:
            log_event(log, logging.WARNING, f"embedding provider not ready: {secrets.scrub(str(exc))}",
                 event="warning")
        log_event(log, logging.INFO, "ready", event="ready", auth="token" if known else "none",
             max_body_bytes=limits.max_body_bytes, max_k=limits.max_k,
             request_timeout=limits.request_timeout, embedding_slots=gate.slots)
        yield
        log_event(log, logging.INFO, "shutting down", event="shutdown")

    app = FastAPI(
        title="ragpg",
        version=__version__,
        summary="Hybrid retrieval (pgvector + keywords) over a Markdown tree, with citable provenance.",
        description=(
            "Search returns passages best first; each hit carries `path`, `section` and `anchor` so an"
            " answer can cite it as `path#anchor`. When a token is configured, every endpoint but"
            " `/health` and this documentation needs `Authorization: Bearer <token>`. The inspection"
            " page at `/` is built on these endpoints."
        ),
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.gate = gate
    app.add_middleware(Guard, callers=known, max_body=limits.max_body_bytes, secrets=secrets, log=log)
    answer = _Answers(limits, gate, secrets, log)
    _error_handlers(app, secrets)
    _page_routes(app)
    _index_routes(app, rag, answer)
    _search_routes(app, rag, answer, limits, settings)
    _document_routes(app, rag, answer, settings)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, summary=app.summary,
                                 description=app.description, routes=app.routes)
            _state_limits(schema, limits, bool(known))
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


class _Answers:
    """Runs a route's work within the service's limits and turns its failure into the answer
    the API documents (logged when it is the server's)."""

    def __init__(self, limits: Limits, gate: ModelGate, secrets: Secrets, log: logging.Logger):
        self.limits, self.gate, self.secrets, self.log = limits, gate, secrets, log

    def failure(self, exc: BaseException) -> JSONResponse:
        failure = classify(exc, self.secrets)
        if failure.status >= 500:
            log_event(self.log, logging.WARNING if failure.status != 500 else logging.ERROR,
                      failure.message, event="failure", error=failure.code)
            if failure.status == 500:
                self.log.error("unexpected error", exc_info=exc, extra={"fields": {"event": "error"}})
        headers = {"Retry-After": "1"} if failure.code == "embedding_busy" else None
        return JSONResponse(failure.to_dict(), status_code=failure.status, headers=headers)

    async def __call__(self, fn: Callable[[], Any], not_found: str | None = None, *,
                       model: bool = False) -> JSONResponse:
        try:
            data = await call_limited(fn, self.limits, self.gate if model else None)
        except Exception as exc:
            return self.failure(exc)
        if data is None and not_found is not None:
            return JSONResponse({"error": "not_found", "message": self.secrets.scrub(not_found)},
                                status_code=404)
        return JSONResponse(data)


def _error_handlers(app: FastAPI, secrets: Secrets) -> None:
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


def _page_routes(app: FastAPI) -> None:
    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        """The inspection page: static HTML whose script reads this API with the token it asks for."""
        return FileResponse(PAGE / "index.html", media_type="text/html; charset=utf-8",
                            headers=PAGE_HEADERS)

    app.mount("/page", StaticFiles(directory=PAGE), name="page")

    @app.get("/health", response_model=HealthOut, tags=["service"])
    async def health() -> JSONResponse:
        """Liveness: the server answers. Open to everyone; says nothing about the index."""
        return JSONResponse({"status": "ok"})


def _index_routes(app: FastAPI, rag: RagPG, answer: _Answers) -> None:
    @app.get("/stats", tags=["index"], responses=errors(401, 404, 422, 503, 504))
    async def stats(
        collection: str | None = Query(None, min_length=1, max_length=MAX_NAME_CHARS,
                                       json_schema_extra=NO_NUL),
    ) -> JSONResponse:
        """Documents, chunks, last indexed time, models and the last ingest run of a collection."""
        return await answer(lambda: fetch_stats(rag, collection))

    @app.get("/collections", response_model=CollectionsOut, tags=["index"],
             responses=errors(401, 503, 504))
    async def collections() -> JSONResponse:
        """The collections of the index, and the one a request without `collection` searches."""
        return await answer(lambda: fetch_collections(rag))

    @app.get("/runs", response_model=RunsOut, tags=["index"], responses=errors(401, 404, 422, 503, 504))
    async def runs(
        collection: str | None = Query(None, min_length=1, max_length=MAX_NAME_CHARS,
                                       json_schema_extra=NO_NUL),
        limit: int = Query(20, ge=1, le=catalog.MAX_RUNS, description="How many runs, newest first."),
    ) -> JSONResponse:
        """The latest ingest runs: status, counts and per-document errors."""
        return await answer(lambda: fetch_runs(rag, collection, limit))


def _search_routes(app: FastAPI, rag: RagPG, answer: _Answers, limits: Limits,
                   settings: Settings) -> None:
    @app.post("/search", response_model=ExplainedSearchOut, tags=["search"],
              responses=errors(401, 404, 413, 422, 503, 504))
    async def search(body: SearchRequest) -> JSONResponse:
        """The best passages for a query, best first, with provenance and per-retriever ranks.

        Cite a hit as `path#anchor` (just `path` when the anchor is empty). A collection that does
        not exist is a 404, not an empty list. With `explain`, each hit also has `legs`.
        """
        def go() -> dict[str, Any]:
            hits = run_search(rag, body, limits)
            return {"hits": explain(hits) if body.explain else hits}

        return await answer(go, model=needs_model(body, settings))

    @app.post("/locate", response_model=LocateOut, tags=["search"],
              responses=errors(401, 404, 413, 422, 503, 504))
    async def locate_target(body: LocateRequest) -> JSONResponse:
        """"Why not": where an expected document (or `path#anchor`) ranked in each retriever.

        Each retriever is run alone, up to `depth` results deep, with the request's filters;
        a target absent there but present without them was removed by a filter.
        """
        return await answer(lambda: locate(rag, body, limits), model=needs_model(body, settings))


def _document_routes(app: FastAPI, rag: RagPG, answer: _Answers, settings: Settings) -> None:
    @app.get("/documents/{document_id}", response_model=DocumentOut, tags=["documents"],
             responses=errors(401, 404, 422, 503, 504))
    async def document_by_id(document_id: int = Path(ge=1, le=MAX_ID)) -> JSONResponse:
        """One document with its chunks in order (section, anchor, position, content)."""
        return await answer(lambda: fetch_document(rag, id=document_id),
                            not_found=f"no document with id {document_id}")

    @app.get("/documents", response_model=DocumentOut, tags=["documents"],
             responses=errors(401, 404, 422, 503, 504))
    async def document_by_path(
        path: str = Query(min_length=1, max_length=MAX_PATH_CHARS, json_schema_extra=NO_NUL,
                          description="Path relative to the ingested root, e.g. fr/admin/sauvegardes.md"),
        collection: str | None = Query(None, min_length=1, max_length=MAX_NAME_CHARS,
                                       json_schema_extra=NO_NUL),
    ) -> JSONResponse:
        """One document, by its path in a collection, with its chunks in order."""
        return await answer(
            lambda: fetch_document(rag, path=path, collection=collection),
            not_found=f"no document {path!r} in collection {collection or settings.collection!r}",
        )


def _state_limits(schema: dict[str, Any], limits: Limits, secured: bool) -> None:
    """Write the limits in force (and the bearer scheme, when a token is set) into the schema."""
    components = schema.get("components", {}).get("schemas", {})
    for name in ("SearchRequest", "LocateRequest"):
        props = components.get(name, {}).get("properties", {})
        if "query" in props:
            props["query"].update(minLength=1, maxLength=limits.max_query_chars)
        for field in ("k", "max_per_document"):
            if field in props:
                for branch in props[field].get("anyOf", [props[field]]):
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
        if is_open(path):
            continue
        for operation in operations.values():
            operation["security"] = [{"bearerAuth": []}]
            operation.setdefault("responses", {}).setdefault("401", unauthorized)


__all__ = ["Guard", "create_app"]
