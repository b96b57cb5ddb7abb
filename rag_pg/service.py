"""The rules both service surfaces (HTTP API, MCP server) apply: limits, validation, errors.

Why one module: an agent calling the MCP tool and a client calling ``POST /search`` must meet
the same limits and get the same verdict for the same input, so neither surface validates on
its own. Each surface only translates: :class:`InvalidRequest` becomes a 422 or a tool error,
:func:`classify` turns any exception into a status, a stable code and a message that carries no
secret (see :class:`Secrets`).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import math
import socket
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import unquote

import anyio
import anyio.to_thread
import psycopg
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .config import Settings
from .errors import ConfigError, EmbeddingError, SchemaMissing, StoreError

if TYPE_CHECKING:
    from .api import RagPG

T = TypeVar("T")

MAX_NAME_CHARS = 200  # a collection name (Settings.validate uses the same bound)
MAX_PATH_CHARS = 1024  # a document path or a path prefix
MAX_NEIGHBOURS = 10
MAX_LEVEL = 1_000
MAX_FILTER_KEYS = 32
MAX_FILTER_DEPTH = 8
MAX_ID = 2**63 - 1  # document ids are bigint: a larger one would be a database error
MIN_TOKEN_CHARS = 16
Mode = Literal["hybrid", "vector", "keyword"]


class InvalidRequest(ValueError):
    """The caller's input breaks a rule; the message says which field and what to send."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field


class RequestTimeout(Exception):
    """The request ran past ``server.request_timeout``."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds every request is held to (from the ``[server]`` settings)."""

    max_body_bytes: int = 64 * 1024
    max_query_chars: int = 4096
    max_k: int = 100
    request_timeout: float = 30.0
    default_k: int = 5

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        """Read and check the limits once, at startup, so a bad setting fails before serving."""
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
        return cls(s.max_body_bytes, s.max_query_chars, s.max_k, s.request_timeout, settings.retrieval.k)


# -- requests ------------------------------------------------------------------------------------


class SearchRequest(BaseModel):
    """A search, as ``POST /search`` and the MCP ``search`` tool receive it.

    Strict types (``"5"`` is not a number) so that what the schema says is what is accepted;
    the bounds that depend on settings (``k``, the query length) are checked by
    :func:`check_search`, which both surfaces call.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    query: str = Field(description="The question or keywords, in any language the corpus uses.")
    k: int | None = Field(None, ge=1, description="How many hits (default: retrieval.k).")
    mode: Mode | None = Field(
        None, description="hybrid (vectors + keywords, fused), vector or keyword; default hybrid when vectors exist."
    )
    collection: str | None = Field(
        None, min_length=1, max_length=MAX_NAME_CHARS, description="Collection (workspace) to search."
    )
    path_prefix: str | None = Field(
        None, max_length=MAX_PATH_CHARS, description="Only documents under this relative path (segment-aware)."
    )
    filters: dict[str, Any] | None = Field(
        None, description="Front-matter values to match: equality, or containment for lists/objects."
    )
    level: int | None = Field(None, ge=0, le=MAX_LEVEL, description="Summary-tree level (0 = source text).")
    node_type: str | None = Field(
        None, min_length=1, max_length=64, description="Summary-tree node type: source or summary."
    )
    max_per_document: int | None = Field(None, ge=1, description="At most this many hits per document.")
    neighbours: int = Field(0, ge=0, le=MAX_NEIGHBOURS, description="Merge ±N neighbouring chunks into each hit.")
    expand: Literal["parent", "children"] | None = Field(
        None, description="Attach the parent's or the children's text to each hit."
    )
    rerank: bool | None = Field(None, description="Apply the configured cross-encoder reranker.")


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


def run_search(rag: RagPG, req: SearchRequest, limits: Limits) -> list[dict[str, Any]]:
    """Validate, search, and return hits in the JSON shape of ``ragpg search --json``."""
    req = check_search(req, limits)
    hits = rag.search(
        req.query, req.k if req.k is not None else limits.default_k,
        mode=req.mode, collection=req.collection, path_prefix=req.path_prefix,
        filters=req.filters or None, level=req.level, node_type=req.node_type,
        max_per_document=req.max_per_document, neighbours=req.neighbours,
        expand=req.expand, rerank=req.rerank,
    )
    return [hit.to_dict() for hit in hits]


def fetch_document(
    rag: RagPG, *, path: str | None = None, id: int | None = None, collection: str | None = None
) -> dict[str, Any] | None:
    """A document with its chunks (by path in a collection, or by id), or None when absent."""
    collection = check_collection(collection)
    if id is not None:
        if not 1 <= id <= MAX_ID:
            raise InvalidRequest(f"id must be between 1 and {MAX_ID}", field="id")
        return rag.get_document(id=id)
    if path is None or not path.strip():
        raise InvalidRequest("path must not be empty", field="path")
    if len(path) > MAX_PATH_CHARS:
        raise InvalidRequest(f"path must be at most {MAX_PATH_CHARS} characters", field="path")
    check_text("path", path)
    return rag.get_document(path, collection=collection)


def fetch_stats(rag: RagPG, collection: str | None = None) -> dict[str, Any]:
    return rag.stats(check_collection(collection))


async def call_limited(fn: Callable[[], T], limits: Limits) -> T:
    """Run blocking library code in the worker threadpool, answering within the timeout.

    On timeout the worker is abandoned, not killed (Python cannot stop a thread): it finishes
    its query, returns its pooled connection, and its result is dropped.
    """
    try:
        with anyio.fail_after(limits.request_timeout):
            return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)
    except TimeoutError:
        raise RequestTimeout(
            f"the request took longer than {limits.request_timeout:g} s (server.request_timeout)"
        ) from None


# -- errors --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Failure:
    """What a surface tells its caller about an exception: status, stable code, safe message."""

    status: int
    code: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message}


def classify(exc: BaseException, secrets: Secrets | None = None) -> Failure:
    """Map any exception to a Failure; the message is scrubbed of every known secret.

    Client mistakes are 4xx; a database or embedding service that is down is 503 (retry
    later); only an unexpected exception is 500, and its text is not shown to the caller.
    """
    scrub = secrets.scrub if secrets is not None else (lambda text: text)

    def msg(e: BaseException) -> str:
        lines = str(e).strip().splitlines()
        return scrub(lines[0] if lines else type(e).__name__)

    if isinstance(exc, InvalidRequest):
        return Failure(422, "invalid_request", msg(exc))
    if isinstance(exc, RequestTimeout):
        return Failure(504, "timeout", msg(exc))
    if isinstance(exc, ConfigError):
        return Failure(422, "invalid_request", msg(exc))
    if isinstance(exc, SchemaMissing):
        return Failure(503, "not_initialised", msg(exc))
    if isinstance(exc, StoreError) and "has no vectors" in str(exc):
        # api.search raises a plain StoreError for "vector mode on a collection without
        # vectors": the request cannot succeed as sent, so it is the caller's 422.
        return Failure(422, "invalid_request", msg(exc))
    if isinstance(exc, StoreError):
        return Failure(503, "database_unavailable", msg(exc))
    if isinstance(exc, EmbeddingError):
        if exc.kind == "invalid_input":
            return Failure(422, "invalid_request", msg(exc))
        if exc.kind == "unavailable":
            return Failure(503, "embedding_unavailable", msg(exc))
        return Failure(502, "embedding_malformed", msg(exc))
    if isinstance(exc, psycopg.OperationalError):
        return Failure(503, "database_unavailable", f"database unavailable: {msg(exc)}")
    return Failure(500, "internal", "internal error; the server log has the details")


# -- secrets -------------------------------------------------------------------------------------


class Secrets:
    """Every secret the service knows, so logs and error bodies can be scrubbed of them.

    Messages are already built with :func:`redact_url`; this is the second fence, for text
    that comes from elsewhere (a driver's error, a traceback).
    """

    def __init__(self, values: Iterable[str | None] = ()):
        self._values = sorted({v for v in values if v and len(v) >= 4}, key=len, reverse=True)

    @classmethod
    def from_settings(cls, settings: Settings, extra: Iterable[str | None] = ()) -> Secrets:
        values: list[str | None] = [settings.server.token, *extra]
        if settings.database.url:
            values += _password_of(settings.database.url)
        return cls(values)

    def scrub(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, "***")
        return text


def _password_of(url: str) -> list[str]:
    """The password of a DSN, both as written (maybe percent-encoded) and decoded."""
    found: list[str] = []
    try:
        from psycopg.conninfo import conninfo_to_dict

        password = conninfo_to_dict(url).get("password")
        if password:
            found.append(str(password))
    except psycopg.Error:
        pass
    if "://" in url and "@" in url.split("://", 1)[1].split("/", 1)[0]:
        creds = url.split("://", 1)[1].split("/", 1)[0].rsplit("@", 1)[0]
        if ":" in creds:
            raw = creds.split(":", 1)[1]
            found += [raw, unquote(raw)]
    return found


# -- logging -------------------------------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    """One JSON object per line; every known secret is replaced by ``***`` in the whole line."""

    def __init__(self, secrets: Secrets):
        super().__init__()
        self.secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            data.update(fields)
        if record.exc_info and record.exc_info[1] is not None:
            data["error"] = type(record.exc_info[1]).__name__
            data["traceback"] = "".join(traceback.format_exception(*record.exc_info))
        return self.secrets.scrub(json.dumps(data, ensure_ascii=False, default=str))


def setup_logging(secrets: Secrets, level: int = logging.INFO) -> logging.Handler:
    """Send every log record of the process to stderr as one scrubbed JSON line.

    The root logger gets the handler, so the driver's, the pool's and the SDKs' records are
    scrubbed too; stdout stays for results (and, for MCP, the protocol alone).
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(secrets))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)
    for name in ("ragpg", "uvicorn", "uvicorn.error", "uvicorn.access", "mcp", "psycopg"):
        logger = logging.getLogger(name)
        logger.handlers = []
        logger.propagate = True
        logger.setLevel(logging.NOTSET)
    for name in ("httpx", "httpcore"):  # one INFO line per embedding call is noise
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    return handler


def log_event(log: logging.Logger, level: int, message: str, **fields: Any) -> None:
    """Log ``message`` with structured fields that :class:`JsonFormatter` merges into the line."""
    log.log(level, message, extra={"fields": fields})


# -- authentication and binding ------------------------------------------------------------------


def check_token(token: str | None) -> str | None:
    """The configured token, or None; a token too short to resist guessing is refused."""
    if token is None or token == "":
        return None
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"server.token must be at least {MIN_TOKEN_CHARS} characters"
            " (generate one: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    check_text("server.token", token)
    return token


def token_matches(header: str | None, token: str) -> bool:
    """Check an ``Authorization`` header in constant time (hmac.compare_digest on bytes)."""
    scheme, _, given = (header or "").partition(" ")
    ok_scheme = scheme.lower() == "bearer"
    try:
        given_bytes = given.strip().encode("utf-8")
    except UnicodeEncodeError:
        given_bytes = b""
    return hmac.compare_digest(given_bytes, token.encode("utf-8")) and ok_scheme


def is_loopback(host: str) -> bool:
    """True when every address ``host`` names is a loopback one (fails closed)."""
    name = host.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(name, None)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses)


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen beyond this machine without a token: the index is private by default."""
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host} without a token: set server.token (or RAGPG_SERVER_TOKEN),"
            " or bind to 127.0.0.1"
        )


__all__ = [
    "Failure", "InvalidRequest", "JsonFormatter", "Limits", "RequestTimeout", "SearchRequest", "Secrets",
    "call_limited", "check_bind", "check_search", "check_token", "classify", "describe_errors",
    "fetch_document", "fetch_stats", "is_loopback", "log_event", "parse_search", "run_search",
    "setup_logging",
    "token_matches",
]
