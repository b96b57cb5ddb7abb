"""The rules both service surfaces (HTTP API, MCP server) apply: limits, validation, operations.

Why one module: an agent calling the MCP tool and a client calling ``POST /search`` must meet
the same limits and get the same verdict for the same input, so neither surface validates on
its own. Each surface only translates: :class:`InvalidRequest` becomes a 422 or a tool error,
and :func:`rag_pg.serve.failures.classify` turns any exception into a status, a stable code and
a message that carries no secret.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio
import anyio.to_thread
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from rag_pg.config import Settings
from rag_pg.errors import ConfigError
from rag_pg.search.plan import Expansion, Mode
from rag_pg.serve import catalog
from rag_pg.serve.gate import Busy, ModelGate

if TYPE_CHECKING:
    from rag_pg.api import RagPG

T = TypeVar("T")

MAX_NAME_CHARS = 200  # a collection name (Settings.validate uses the same bound)
MAX_PATH_CHARS = 1024  # a document path or a path prefix
MAX_NEIGHBOURS = 10
MAX_LEVEL = 1_000
MAX_FILTER_KEYS = 32
MAX_FILTER_DEPTH = 8
MAX_ID = 2**63 - 1  # document ids are bigint: a larger one would be a database error
EMBEDDING_QUEUE_PER_SLOT = 4  # model-bound requests that may wait per slot, at least
WORKER_THREADS = 40  # anyio's worker threads, which run every request's library calls
RESERVED_THREADS = 8  # left to the requests that need no model while one is stalled


class InvalidRequest(ValueError):
    """The caller's input breaks a rule; the message says which field and what to send."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field


class RequestTimeout(Exception):
    """The request ran past ``server.request_timeout``."""


class NotFound(LookupError):
    """The request names something the index does not hold (a document, a collection)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds every request is held to (from the ``[server]`` settings)."""

    max_body_bytes: int = 64 * 1024
    max_query_chars: int = 4096
    max_k: int = 100
    request_timeout: float = 30.0
    default_k: int = 5
    embedding_slots: int = 3
    embedding_queue: int = 29

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        """Read and check the limits once, at startup, so a bad setting fails before serving.

        ``embedding_slots``: embedding calls at once (``database.pool_size - 1``, as many as
        the searches that can then run); ``embedding_queue``: calls that may wait for a slot,
        each in a worker thread holding no connection, as many as leave
        :data:`RESERVED_THREADS` of the worker threads to the requests that need no model
        (a stalled embedding service cannot take them all).
        """
        s = settings.server
        if s.max_body_bytes < 1024:
            raise ConfigError(f"server.max_body_bytes must be >= 1024 (got {s.max_body_bytes})")
        if s.max_query_chars < 1:
            raise ConfigError(f"server.max_query_chars must be >= 1 (got {s.max_query_chars})")
        if not 1 <= s.max_k <= 10_000:
            raise ConfigError(f"server.max_k must be between 1 and 10000 (got {s.max_k})")
        if not (math.isfinite(s.request_timeout) and s.request_timeout > 0):
            raise ConfigError(f"server.request_timeout must be > 0 seconds (got {s.request_timeout})")
        if not 1 <= settings.retrieval.k <= s.max_k:
            raise ConfigError(
                f"retrieval.k ({settings.retrieval.k}) must be between 1 and server.max_k ({s.max_k})"
            )
        slots = max(1, settings.database.pool_size - 1)
        queue = max(slots * EMBEDDING_QUEUE_PER_SLOT, WORKER_THREADS - RESERVED_THREADS - slots)
        return cls(s.max_body_bytes, s.max_query_chars, s.max_k, s.request_timeout, settings.retrieval.k,
                   slots, queue)

    def gate(self) -> ModelGate:
        """The gate of one server: its slots for model calls and their queue."""
        return ModelGate(self.embedding_slots, self.embedding_slots * EMBEDDING_QUEUE_PER_SLOT)


# -- requests ------------------------------------------------------------------------------------


def _whole(value: Any) -> Any:
    """84.0 is the integer 84, as JSON Schema's ``integer`` says; "84" stays refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


_WHOLE = BeforeValidator(_whole)  # an integer as the OpenAPI schema states it
#: What the schema says of text the database stores: no NUL character (checked by check_text).
NO_NUL: dict[str, Any] = {"pattern": "^[^\\u0000]*$"}


class SearchRequest(BaseModel):
    """A search, as ``POST /search`` and the MCP ``search`` tool receive it.

    Strict types (``"5"`` is not a number) so that what the schema says is what is accepted;
    the bounds that depend on settings (``k``, the query length) are checked by
    :func:`check_search`, which both surfaces call.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    query: str = Field(description="The question or keywords, in any language the corpus uses.",
                       json_schema_extra=NO_NUL)
    k: Annotated[int, Field(ge=1), _WHOLE] | None = Field(
        None, description="How many hits (default: retrieval.k).")
    mode: Mode | None = Field(
        None, description="hybrid (vectors + keywords, fused), vector or keyword; default hybrid when vectors exist."
    )
    collection: str | None = Field(
        None, min_length=1, max_length=MAX_NAME_CHARS, description="Collection (workspace) to search.",
        json_schema_extra=NO_NUL,
    )
    path_prefix: str | None = Field(
        None, max_length=MAX_PATH_CHARS, description="Only documents under this relative path (segment-aware).",
        json_schema_extra=NO_NUL,
    )
    filters: dict[str, Any] | None = Field(
        None, description="Front-matter values to match: equality, or containment for lists/objects."
    )
    level: Annotated[int, Field(ge=0, le=MAX_LEVEL), _WHOLE] | None = Field(
        None, description="Summary-tree level (0 = source text).")
    node_type: str | None = Field(
        None, min_length=1, max_length=64, description="Summary-tree node type: source or summary.",
        json_schema_extra=NO_NUL,
    )
    max_per_document: Annotated[int, Field(ge=1), _WHOLE] | None = Field(
        None, description="At most this many hits per document.")
    neighbours: Annotated[int, Field(ge=0, le=MAX_NEIGHBOURS), _WHOLE] = Field(
        0, description="Merge ±N neighbouring chunks into each hit.")
    expand: Expansion | None = Field(
        None, description="Attach the parent's or the children's text to each hit."
    )
    rerank: bool | None = Field(None, description="Apply the configured cross-encoder reranker.")
    explain: bool = Field(
        False, description="Add each hit's `legs` (per retriever: rank, raw score, share of the fused"
                           " score) and `fused_score`."
    )


def parse_search(data: Mapping[str, Any]) -> SearchRequest:
    """Build a :class:`SearchRequest` from untyped input, or raise :class:`InvalidRequest`."""
    try:
        return SearchRequest.model_validate(dict(data))
    except ValidationError as exc:
        raise InvalidRequest(describe_errors(exc.errors())) from None


def describe_errors(errors: Sequence[Mapping[str, Any]]) -> str:
    """One line for pydantic/FastAPI validation errors: ``k: Input should be ...; query: ...``."""
    parts = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ())]
        if len(loc) > 1 and loc[0] in ("body", "query", "path", "header", "cookie"):
            loc = loc[1:]  # FastAPI's "where it came from" prefix; a field may be named "query"
        where = ".".join(loc) or "request"
        parts.append(f"{where}: {err.get('msg', 'invalid value')}")
    return "; ".join(parts) or "invalid request"


def check_search(req: SearchRequest, limits: Limits) -> SearchRequest:
    """Apply the limits that depend on settings, and refuse text Postgres cannot store.

    Why text is checked here: a NUL character or a lone UTF-16 surrogate is valid JSON but
    makes the database driver fail, and that must be the caller's 422, not the server's 500.
    """
    if not req.query.strip():
        raise InvalidRequest("query must not be empty", field="query")
    if len(req.query) > limits.max_query_chars:
        raise InvalidRequest(
            f"query is {len(req.query)} characters long; the limit is {limits.max_query_chars}"
            " (server.max_query_chars)", field="query",
        )
    k = req.k if req.k is not None else limits.default_k
    if not 1 <= k <= limits.max_k:
        raise InvalidRequest(f"k must be between 1 and {limits.max_k} (got {k})", field="k")
    if req.max_per_document is not None and req.max_per_document > limits.max_k:
        raise InvalidRequest(
            f"max_per_document must be between 1 and {limits.max_k}", field="max_per_document"
        )
    for name in ("query", "collection", "path_prefix", "node_type"):
        value = getattr(req, name)
        if value is not None:
            check_text(name, value)
    if req.filters:
        check_filters(req.filters)
    return req


def check_text(name: str, value: str) -> str:
    """Refuse NUL characters and unpaired surrogates, which no Postgres text can hold."""
    if "\x00" in value:
        raise InvalidRequest(f"{name} must not contain NUL characters", field=name)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(f"{name} is not valid Unicode (unpaired surrogate)", field=name) from None
    return value


def check_filters(filters: Mapping[str, Any]) -> None:
    """Bound the front-matter filter: few keys, shallow, finite numbers, storable text."""
    if len(filters) > MAX_FILTER_KEYS:
        raise InvalidRequest(f"filters may have at most {MAX_FILTER_KEYS} keys", field="filters")

    def walk(value: Any, where: str, depth: int) -> None:
        if depth > MAX_FILTER_DEPTH:
            raise InvalidRequest(f"filters are nested deeper than {MAX_FILTER_DEPTH} levels", field="filters")
        if isinstance(value, str):
            check_text(where, value)
        elif isinstance(value, float) and not math.isfinite(value):
            raise InvalidRequest(f"{where} must be a finite number", field="filters")
        elif isinstance(value, Mapping):
            for key, item in value.items():
                check_text(f"{where} key", str(key))
                if len(str(key)) > MAX_NAME_CHARS:
                    raise InvalidRequest(f"{where} has a key longer than {MAX_NAME_CHARS} characters", field="filters")
                walk(item, f"{where}.{key}", depth + 1)
        elif isinstance(value, list):
            for item in value:
                walk(item, where, depth + 1)

    walk(filters, "filters", 0)


def check_collection(collection: str | None) -> str | None:
    if collection is None:
        return None
    if not 1 <= len(collection) <= MAX_NAME_CHARS:
        raise InvalidRequest(f"collection must be 1 to {MAX_NAME_CHARS} characters", field="collection")
    return check_text("collection", collection)


# -- operations ----------------------------------------------------------------------------------


def as_json(value: Any) -> Any:
    """A library result as JSON data: a dict as it is, a typed record through its ``to_dict``."""
    if value is None or isinstance(value, dict):
        return value
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def needs_model(req: SearchRequest, settings: Settings) -> bool:
    """Whether a search calls the reranking service: it then passes the request gate. The
    query's embedding passes the embedding gate, around the call alone
    (:meth:`RagPG.bound_embedding_calls`)."""
    return settings.rerank.enabled if req.rerank is None else req.rerank


def search_hits(rag: RagPG, req: SearchRequest, limits: Limits) -> list[Any]:
    """Validate and search; the library's hits (CollectionNotFound for a collection that does
    not exist)."""
    req = check_search(req, limits)
    hits = rag.search(
        req.query, req.k if req.k is not None else limits.default_k,
        mode=req.mode, collection=req.collection, path_prefix=req.path_prefix,
        filters=req.filters or None, level=req.level, node_type=req.node_type,
        max_per_document=req.max_per_document, neighbours=req.neighbours,
        expand=req.expand, rerank=req.rerank,
    )
    return list(hits)


def run_search(rag: RagPG, req: SearchRequest, limits: Limits) -> list[dict[str, Any]]:
    """Validate, search, and return hits in the JSON shape of ``ragpg search --json``."""
    return [hit.to_dict() for hit in search_hits(rag, req, limits)]


def fetch_document(
    rag: RagPG, *, path: str | None = None, id: int | None = None, collection: str | None = None
) -> dict[str, Any] | None:
    """A document with its chunks (by path in a collection, or by id), or None when absent.

    CollectionNotFound when the collection itself does not exist, so a misspelt name says so.
    """
    collection = check_collection(collection)
    if id is not None:
        if not 1 <= id <= MAX_ID:
            raise InvalidRequest(f"id must be between 1 and {MAX_ID}", field="id")
        return as_json(rag.get_document(id=id))  # type: ignore[no-any-return]
    if path is None or not path.strip():
        raise InvalidRequest("path must not be empty", field="path")
    if len(path) > MAX_PATH_CHARS:
        raise InvalidRequest(f"path must be at most {MAX_PATH_CHARS} characters", field="path")
    check_text("path", path)
    return as_json(rag.get_document(path, collection=collection))  # type: ignore[no-any-return]


def fetch_stats(rag: RagPG, collection: str | None = None) -> dict[str, Any]:
    collection = check_collection(collection)
    stats: dict[str, Any] = as_json(rag.stats(collection))
    return stats


def fetch_runs(rag: RagPG, collection: str | None, limit: int) -> dict[str, Any]:
    collection = check_collection(collection)
    if not 1 <= limit <= catalog.MAX_RUNS:
        raise InvalidRequest(f"limit must be between 1 and {catalog.MAX_RUNS}", field="limit")
    if collection is not None:
        rag.require_collection(collection)
    return {"runs": catalog.ingest_runs(rag, collection, limit)}


def fetch_collections(rag: RagPG) -> dict[str, Any]:
    names = catalog.collection_names(rag)
    return {"default": rag.settings.collection, "collections": names}


async def call_limited(fn: Callable[[], T], limits: Limits, gate: ModelGate | None = None) -> T:
    """Run blocking library code in the worker threadpool, answering within the timeout.

    With a ``gate``, the call first waits for one of its slots (the wait counts in the timeout;
    a full queue is :class:`Busy` at once) and the worker thread gives the slot back when it
    ends. On timeout the worker is abandoned, not killed (Python cannot stop a thread): it
    finishes its query, returns its pooled connection, and its result is dropped.
    """
    try:
        with anyio.fail_after(limits.request_timeout):
            release = await gate.acquire() if gate is not None else (lambda: None)
            lock = threading.Lock()
            state = {"started": False, "dropped": False}

            def run() -> T:
                with lock:
                    if state["dropped"]:  # the request gave up before this thread began
                        raise RequestTimeout("dropped")
                    state["started"] = True
                try:
                    return fn()
                finally:
                    release()

            try:
                return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
            finally:
                with lock:
                    if not state["started"]:
                        state["dropped"] = True
                        release()  # no thread will: give the slot back now
    except TimeoutError:
        raise RequestTimeout(
            f"the request took longer than {limits.request_timeout:g} s (server.request_timeout)"
        ) from None


__all__ = [
    "Busy", "InvalidRequest", "Limits", "NotFound", "RequestTimeout", "SearchRequest",
    "as_json", "call_limited", "check_collection", "check_search", "check_text", "describe_errors",
    "fetch_collections", "fetch_document", "fetch_runs", "fetch_stats", "needs_model",
    "parse_search", "run_search", "search_hits",
]
