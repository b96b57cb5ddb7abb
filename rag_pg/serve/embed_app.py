"""The HTTP routes of ``ragpg embed-server`` (FastAPI): requests checked, answered in two shapes.

Every route reads what it needs by hand rather than through pydantic models, so that each
refusal says exactly what to change, in the error shape the client understands:
``{"detail": ...}`` on ragpg's own routes, OpenAI's ``{"error": {...}}`` under ``/v1/``.
The model work, the JSON parsing and the encoding of an answer run in a worker thread
(:func:`in_thread`): the event loop only moves bytes, so ``/health`` answers while a large
batch is being embedded.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from rag_pg.embed.base import EmbedType, check_request
from rag_pg.errors import EmbeddingError
from rag_pg.source.tokens import estimate_tokens

T = TypeVar("T")

#: OpenAI takes up to 2,048 inputs per request, and clients batch to that (LangChain: 1,000).
DEFAULT_MAX_TEXTS = 2048
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024


@dataclass
class ServerLimits:
    max_texts: int = DEFAULT_MAX_TEXTS
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    concurrency: int = 4  # model calls at once
    queue_timeout: float = 30.0  # seconds a request waits for a model slot before 503
    max_waiting: int = 32  # requests waiting for a slot beyond which the next gets 503 at once
    idle_timeout: float = 30.0  # seconds a keep-alive connection may stay silent
    grace: float = 1.0  # seconds requests in flight may take to finish once a stop is asked


class EmbedServer(Protocol):
    """What the HTTP app asks of the service it serves (``embed_server.EmbedServer``)."""

    model: str
    dimension: int
    default_type: EmbedType
    verbose: bool
    limits: ServerLimits

    def admit(self) -> bool: ...
    def release(self) -> None: ...
    def embed(self, type: EmbedType, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...
    def cached_health(self) -> dict[str, Any] | None: ...
    def health(self) -> dict[str, Any]: ...
    def authorised(self, header: str | None) -> bool: ...


_INPUT_TYPES: dict[str, EmbedType] = {
    "query": "query", "search_query": "query",
    "passage": "passage", "document": "passage", "search_document": "passage",
}
_TOKEN_IDS = (
    "input holds token ids, which this server cannot embed: its model reads text through"
    " its own tokenizer. Send the texts themselves (LangChain:"
    " OpenAIEmbeddings(check_embedding_ctx_length=False))"
)


class HttpProblem(Exception):
    """A request the server answers with an error status (never a traceback)."""

    def __init__(self, status: int, message: str, *, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = headers or {}


def busy() -> HttpProblem:
    return HttpProblem(503, "embed-server is busy: try again", code="busy",
                       headers={"Retry-After": "1"})


async def in_thread(work: Callable[[], T]) -> T:
    """``work()`` in a daemon thread of its own, awaited without blocking the event loop.

    Not the event loop's worker pool: its threads are joined when the process exits, so a
    call stuck on a stalled upstream would hold ``ragpg embed-server`` long after a
    SIGTERM. How many such threads exist is bounded by :meth:`EmbedServer.admit`.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: tuple[bool, Any]) -> None:
        if future.done():  # the request was cancelled by a stop meanwhile
            return
        ok, value = outcome
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def run() -> None:
        try:
            outcome: tuple[bool, Any] = (True, work())
        except BaseException as exc:  # handed to the awaiting request, raised there
            outcome = (False, exc)
        try:
            loop.call_soon_threadsafe(settle, outcome)
        except RuntimeError:  # the loop is closed: the server stopped, nobody waits
            pass

    threading.Thread(target=run, name="ragpg-embed-call", daemon=True).start()
    return await future


def _problem_handlers(app: FastAPI) -> None:
    """Every error answers as a problem document, never FastAPI's own shapes."""
    @app.exception_handler(HttpProblem)
    async def on_problem(request: Request, exc: HttpProblem) -> Response:
        return problem_response(request, exc)

    @app.exception_handler(EmbeddingError)
    async def on_embedding_error(request: Request, exc: EmbeddingError) -> Response:
        return problem_response(request, from_embedding_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> Response:
        message = "not found" if exc.status_code == 404 else str(exc.detail)
        return problem_response(request, HttpProblem(exc.status_code, message))


async def _log_request(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    response = await call_next(request)
    client = request.client.host if request.client else "-"
    # the request line and status only: never a body or a header
    sys.stderr.write(f"{client} {request.method} {request.url.path} {response.status_code}\n")
    return response


def create_app(server: EmbedServer, *, ready: Callable[[], None]) -> FastAPI:
    """The ASGI app serving ``server``; ``ready`` is called once the app has started."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ready()
        yield

    app = FastAPI(title="ragpg embed-server", docs_url=None, redoc_url=None,
                  openapi_url=None, lifespan=lifespan)

    _problem_handlers(app)
    if server.verbose:
        app.middleware("http")(_log_request)

    # One refresh at a time: a burst of probes on a stale answer starts one backend call (and
    # one thread), not one each.
    refreshing = asyncio.Lock()

    @app.get("/health")
    async def health() -> JSONResponse:
        answer = server.cached_health()
        if answer is None:
            async with refreshing:
                answer = server.cached_health() or await in_thread(server.health)
        return JSONResponse(answer)

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        authorise(server, request)
        return JSONResponse({"object": "list", "data": [model_card(server)]})

    @app.get("/v1/models/{model:path}")
    async def model(request: Request, model: str) -> JSONResponse:
        authorise(server, request)
        if model != server.model:
            raise not_served(server, model)
        return JSONResponse(model_card(server))

    @app.post("/embed")
    async def embed(request: Request) -> Response:
        authorise(server, request)
        raw = await read_body(request, server.limits.max_request_bytes)
        return await answer(server, lambda: embed_answer(server, parse(raw)))

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        authorise(server, request)
        raw = await read_body(request, server.limits.max_request_bytes)
        return await answer(server, lambda: openai_answer(server, parse(raw)))

    return app


# -- request plumbing ---------------------------------------------------------------------------


def authorise(server: EmbedServer, request: Request) -> None:
    if not server.authorised(request.headers.get("authorization")):
        raise HttpProblem(401, "missing or wrong bearer token", code="invalid_api_key",
                          headers={"WWW-Authenticate": "Bearer"})


async def read_body(request: Request, limit: int) -> bytes:
    """The body, read no further than ``limit`` bytes (refused unread when announced larger)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(f"request of {declared} bytes exceeds the {limit}-byte cap")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(f"request exceeds the {limit}-byte cap")
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(what: str) -> HttpProblem:
    return HttpProblem(413, f"{what}: raise it on the server (ragpg embed-server"
                            " --max-request-bytes) or send smaller batches (ragpg:"
                            " embedding.batch_size; LangChain: chunk_size)", code="too_large")


def parse(raw: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(raw)
    except (ValueError, RecursionError):
        raise HttpProblem(400, "request body is not valid JSON") from None
    if not isinstance(payload, dict):
        raise HttpProblem(400, "request body must be a JSON object")
    return payload


async def answer(server: EmbedServer, work: Callable[[], bytes]) -> Response:
    """Run one request's work in a thread, or say 503 at once when too many already wait."""
    if not server.admit():
        raise busy()
    try:
        body = await in_thread(work)
    except asyncio.CancelledError:
        # A stop whose grace ran out: the client is told to retry (elsewhere, or later)
        # rather than seeing its connection dropped or a bare 500.
        raise HttpProblem(503, "embed-server is stopping: try again", code="shutdown",
                          headers={"Retry-After": "1", "Connection": "close"}) from None
    finally:
        server.release()
    return Response(body, media_type="application/json")


def check_texts(server: EmbedServer, texts: object, *, openai: bool) -> list[str]:
    if not isinstance(texts, list) or not texts:
        raise HttpProblem(422, "texts must be a non-empty list of strings")
    if openai and (is_token_ids(texts) or all(is_token_ids(t) for t in texts)):
        raise HttpProblem(422, _TOKEN_IDS, code="token_ids_unsupported")
    limit = server.limits.max_texts
    if len(texts) > limit:
        raise HttpProblem(
            413, f"too many texts ({len(texts)} > {limit}): raise the limit on the server"
                 " (ragpg embed-server --max-texts) or send smaller batches (ragpg:"
                 " embedding.batch_size; LangChain: chunk_size)", code="too_many_texts")
    if not all(isinstance(t, str) for t in texts):
        raise HttpProblem(422, "texts must be strings")
    return texts


def is_token_ids(value: object) -> bool:
    return (isinstance(value, list) and bool(value)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value))


def embed_answer(server: EmbedServer, payload: dict[str, Any]) -> bytes:
    kind, texts = payload.get("type"), check_texts(server, payload.get("texts"), openai=False)
    if kind not in ("query", "passage"):
        raise HttpProblem(422, "type must be 'query' or 'passage'")
    encoding = payload.get("encoding", "float")
    if encoding not in ("float", "base64"):
        raise HttpProblem(422, "encoding must be 'float' or 'base64'")
    vectors = embed(server, kind, texts)
    rows = [to_base64(v) for v in vectors] if encoding == "base64" else vectors.tolist()
    return dumps({"model": server.model, "dim": server.dimension, "vectors": rows})


def openai_answer(server: EmbedServer, payload: dict[str, Any]) -> bytes:
    model = payload.get("model")
    if model is not None and model != server.model:
        raise not_served(server, str(model))
    dimensions = payload.get("dimensions")
    if dimensions is not None and dimensions != server.dimension:
        raise HttpProblem(400, f"dimensions must be {server.dimension} for {server.model!r}")
    encoding = payload.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise HttpProblem(400, "encoding_format must be 'float' or 'base64'")
    given = payload.get("input")
    texts = check_texts(server, [given] if isinstance(given, str) else given, openai=True)
    kind, texts = input_type(server, payload.get("input_type"), texts)
    vectors = embed(server, kind, texts)
    data = [
        {"object": "embedding", "index": i,
         "embedding": to_base64(v) if encoding == "base64" else v.tolist()}
        for i, v in enumerate(vectors)
    ]
    tokens = sum(estimate_tokens(t) for t in texts)
    return dumps({"object": "list", "data": data, "model": server.model,
                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


def input_type(server: EmbedServer, given: object, texts: list[str]) -> tuple[EmbedType, list[str]]:
    """OpenAI's shape has no type: ``input_type``, else the e5 prefix of the texts, else default.

    A leading ``query: ``/``passage: `` of the resolved type is stripped, since the model
    adds its own: a client configured with e5 prefixes (for TEI or vLLM) gets the same
    vectors here as through ``/embed``.
    """
    kind: EmbedType
    if given is not None:
        if not isinstance(given, str) or given not in _INPUT_TYPES:
            raise HttpProblem(400, "input_type must be query, passage or document")
        kind = _INPUT_TYPES[given]
    elif all(t.startswith("query: ") for t in texts):
        kind = "query"
    elif all(t.startswith("passage: ") for t in texts):
        kind = "passage"
    else:
        kind = server.default_type
    prefix = f"{kind}: "
    return kind, [t[len(prefix):] if t.startswith(prefix) else t for t in texts]


def embed(server: EmbedServer, kind: EmbedType, texts: list[str]) -> npt.NDArray[np.float32]:
    try:
        check_request(kind, texts)
    except EmbeddingError as exc:
        raise HttpProblem(422, str(exc)) from None
    return server.embed(kind, texts)


def model_card(server: EmbedServer) -> dict[str, Any]:
    return {"id": server.model, "object": "model", "created": 0, "owned_by": "ragpg"}


def not_served(server: EmbedServer, model: str) -> HttpProblem:
    return HttpProblem(404, f"model {model[:200]!r} is not served here; this server serves"
                            f" {server.model!r}", code="model_not_found")


# -- answers ------------------------------------------------------------------------------------


def dumps(body: dict[str, Any]) -> bytes:
    return json.dumps(body, allow_nan=False, separators=(",", ":")).encode("utf-8")


def to_base64(vector: npt.NDArray[np.float32]) -> str:
    """One vector as base64 of little-endian float32: what both APIs mean by "base64"."""
    return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")


def problem_response(request: Request, problem: HttpProblem) -> Response:
    message = str(problem)
    body: dict[str, Any]
    if request.url.path.startswith("/v1/"):
        body = {"error": {"message": message, "type": error_type(problem),
                          "code": problem.code}}
    else:
        body = {"detail": message}
    return Response(dumps(body), status_code=problem.status, headers=problem.headers,
                    media_type="application/json")


def from_embedding_error(exc: EmbeddingError) -> HttpProblem:
    """The backend's failure, as the status a client of this server should act on."""
    if exc.kind == "invalid_input":
        return HttpProblem(422, str(exc), code="invalid_input")
    if exc.kind == "malformed":
        return HttpProblem(502, f"the upstream embedding provider failed: {exc}", code="upstream")
    retry = getattr(exc, "retry_after", None)
    wait = str(max(1, int(retry + 0.999))) if isinstance(retry, int | float) else "1"
    return HttpProblem(503, str(exc), code="unavailable", headers={"Retry-After": wait})


def error_type(problem: HttpProblem) -> str:
    if problem.status == 401:
        return "authentication_error"
    if problem.status >= 500:
        return "server_error"
    return "invalid_request_error"
