"""The exceptions ragpg raises, so callers can catch one base class.

Tree::

    RagError                      base: catch this to handle any ragpg failure
    ├── ConfigError               a setting is missing, malformed or out of bounds   (CLI exit 2)
    │   └── CollectionNotFound       the collection named does not exist (HTTP 404)
    ├── EmbeddingError            the embedding provider failed                      (exit 3, or 1 per document)
    │     kind = "invalid_input"     the provider refused the input (HTTP 422): never retried
    │     kind = "unavailable"       transport error, timeout, any other non-200: retryable
    │     kind = "malformed"         wrong count, wrong dimension, NaN/Inf, not JSON
    │   └── ProviderUnavailable      (embed.base) no provider of the chain could serve
    ├── RerankError               the rerank service failed                          (exit 3)
    ├── LLMError                  the chat endpoint failed          (exit 3 unavailable, else 1)
    ├── SidecarError              one sidecar file cannot be used (recorded, import goes on)
    ├── StoreError                the database failed or refused                     (exit 3)
    │   ├── ExtensionUnavailable     pgvector (or unaccent) cannot be created
    │   ├── DimensionMismatch        vectors do not match the collection's model/dimension
    │   ├── SchemaMissing            `ragpg init` has not been run
    │   ├── DatabaseTimeout          a call got no answer within database.call_timeout
    │   └── IngestBusy               another ingest holds the collection's lock
    └── DocumentError             one document could not be indexed (recorded, run goes on)
          └── ConversionError        (convert.base) a PDF/Office/HTML file could not be converted
"""

from __future__ import annotations

from typing import Literal

EmbeddingErrorKind = Literal["invalid_input", "unavailable", "malformed"]


class RagError(Exception):
    """Base class of every error ragpg raises on purpose."""

    exit_code = 1


class ConfigError(RagError):
    """A configuration value is missing, malformed or out of bounds."""

    exit_code = 2


class CollectionNotFound(ConfigError):
    """A read named a collection that no ingest created: a typo must not look like "no result".

    The configured collection is never "not found": before its first ingest it is empty.
    """

    def __init__(self, name: str, existing: list[str]):
        shown = ", ".join(repr(n) for n in existing[:10]) + (" ..." if len(existing) > 10 else "")
        super().__init__(f"no collection {name!r} in this index"
                         + (f" (collections: {shown})" if existing else ""))
        self.name = name
        self.existing = existing


class EmbeddingError(RagError):
    """The embedding provider failed; ``kind`` says whether retrying can help."""

    exit_code = 3

    def __init__(self, kind: EmbeddingErrorKind, message: str, *, detail: str | None = None):
        super().__init__(message)
        self.kind: EmbeddingErrorKind = kind
        self.detail = detail

    @classmethod
    def invalid_input(cls, message: str, *, detail: str | None = None) -> EmbeddingError:
        return cls("invalid_input", message, detail=detail)

    @classmethod
    def unavailable(cls, message: str) -> EmbeddingError:
        return cls("unavailable", message)

    @classmethod
    def malformed(cls, message: str) -> EmbeddingError:
        return cls("malformed", message)


class EmbeddingBusy(EmbeddingError):
    """Every slot for embedding calls is taken and as many calls wait already: retry in a
    moment, or search with mode keyword (see :meth:`RagPG.bound_embedding_calls`)."""

    def __init__(self, message: str):
        super().__init__("unavailable", message)


class StoreError(RagError):
    """The database is unreachable, or refused an operation."""

    exit_code = 3


class ExtensionUnavailable(StoreError):
    """A required Postgres extension (pgvector, unaccent) cannot be created."""


class DimensionMismatch(StoreError):
    """Vectors of one model or dimension were about to be mixed with another's."""

    exit_code = 2


class SchemaMissing(StoreError):
    """The ragpg schema is absent or out of date: run ``ragpg init``."""

    exit_code = 2

    @classmethod
    def not_initialised(cls, schema: str) -> SchemaMissing:
        return cls(f"the {schema!r} schema is not initialised: run `ragpg init`")

    @classmethod
    def out_of_date(cls, schema: str) -> SchemaMissing:
        """A schema of an earlier ragpg version, not upgraded since (a column is missing)."""
        return cls(f"the {schema!r} schema is out of date: run `ragpg init`")


class DatabaseTimeout(StoreError):
    """A database call got no answer in time (a frozen or overloaded server): it was cancelled
    and its connection closed."""


class ConnectionLost(StoreError):
    """The connection to the database broke under a call (the server restarted, a failover,
    the network): a read may be tried again on a new connection, a write's outcome is
    whatever its transaction committed."""


class DatabaseRefused(StoreError):
    """The database refused a statement for what it was given (a value over one of the
    server's limits, a constraint): the connection is fine, that one operation failed."""

    def __init__(self, message: str, sqlstate: str | None = None):
        super().__init__(message)
        self.sqlstate = sqlstate


class NoVectors(StoreError):
    """A vector search on a collection that holds no vectors (indexed without a model): only
    keyword search can answer it."""

    @classmethod
    def in_collection(cls, collection: str) -> NoVectors:
        return cls(f"collection {collection!r} has no vectors: use keyword mode")


class IngestBusy(StoreError):
    """Another ingest of the same collection holds the advisory lock."""


class DocumentError(RagError):
    """One document could not be indexed; the run records it and goes on."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.reason = message


class RerankError(RagError):
    """The rerank service failed (transport, status or response shape): the search fails
    rather than silently returning an order the caller did not ask for."""

    exit_code = 3


class LLMError(RagError):
    """The chat endpoint failed. ``kind``: ``unavailable`` (exit 3) or ``malformed`` / ``refused``."""

    exit_code = 3

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        if kind != "unavailable":
            self.exit_code = 1


class SidecarError(RagError):
    """One sidecar cannot be used; ``kind`` is the failure kind recorded in the report."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def first_line(exc: BaseException) -> str:
    """The line an error is reported with: its text's first, else its type's name."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
