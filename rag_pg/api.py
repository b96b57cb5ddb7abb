"""The library's front door: one object that ingests, searches and reports on an index."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from .bm25 import BM25Params
from .config import Settings
from .db import ConnectionSource, PoolSource, prepare, source_for
from .embed import make_provider, serving
from .embed.base import EmbeddingProvider
from .errors import ConfigError, SchemaMissing, StoreError
from .ingest import Ingestor, ProgressFn
from .models import Hit, IngestReport
from .search import MODES, Searcher, SearchRequest, StaleCollection, unfiltered
from .store import Store

#: How long a search trusts what it read of a collection (its model, whether it is small
#: enough for exact search). The model is re-checked in every search's own round trip anyway;
#: only the exact/index choice can lag this long behind a collection that grows or shrinks.
COLLECTION_INFO_TTL = 30.0


@dataclass(frozen=True, slots=True)
class _CollectionInfo:
    model: str | None
    dimension: int | None
    small: bool  # at most retrieval.exact_limit vectors: exact search beats the index
    vector_kind: str | None  # what the model's index casts to (a search must cast the same)
    read_at: float


class RagPG:
    """An index in one Postgres schema, reached through a URL or a caller's connection.

    ``database`` may be a URL (ragpg opens a small pool and closes it in :meth:`close`), a
    ``psycopg.Connection``, or a SQLAlchemy ``Engine``/``Connection`` on the psycopg driver
    (ragpg uses them and never closes or commits what it did not open; its writes run in
    ``conn.transaction()`` blocks, which become savepoints inside a caller's transaction).
    """

    def __init__(
        self,
        database: Any = None,
        settings: Settings | None = None,
        *,
        provider: EmbeddingProvider | None = None,
        warn: Callable[[str], None] | None = None,
    ):
        self.settings = settings or Settings()
        self.warn = warn or (lambda message: None)
        target = database if database is not None else self.settings.database.url
        if target is None:
            raise ConfigError(
                "no database: pass a URL or connection, or set database.url / RAGPG_DATABASE_URL"
            )
        self.source: ConnectionSource = source_for(target, pool_size=self.settings.database.pool_size)
        self._provider = provider
        self._owns_provider = provider is None  # never close what the caller handed over
        self._provider_lock = threading.Lock()
        self.store = Store(self.settings.database.schema, self.settings.index)
        self.searcher = Searcher(self.settings.database.schema)
        self._collections: dict[str, _CollectionInfo] = {}
        r = self.settings.retrieval
        # What every search request takes from [retrieval], read once (settings never change).
        self._retrieval: dict[str, Any] = {
            "rrf_k": r.rrf_k, "ef_search": r.ef_search, "exact_limit": r.exact_limit,
            "weights": {"vector": r.vector_weight, "keyword": r.keyword_weight},
            "bm25": BM25Params(r.bm25_k1, r.bm25_b), "max_scan_tuples": r.max_scan_tuples,
            "iterative_scan": r.iterative_scan,
        }

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def provider(self) -> EmbeddingProvider:
        if self._provider is None:
            with self._provider_lock:
                if self._provider is None:
                    self._provider = make_provider(self.settings.embedding, warn=self.warn)
        return self._provider

    def close(self) -> None:
        self.source.close()
        if self._provider is not None and self._owns_provider:
            self._provider.close()

    def __enter__(self) -> RagPG:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def init(self) -> str:
        """Create or upgrade the schema (``alembic upgrade head``); returns the revision."""
        from . import migrate  # Alembic + SQLAlchemy take ~0.5 s to import: only `init` needs them

        with self.source.connection() as conn:
            migrate.upgrade(conn, self.settings.database.schema)
            return migrate.current_revision(conn, self.settings.database.schema) or ""

    def _checked(self, conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
        schema = self.settings.database.schema
        with conn.transaction():
            row = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".document',)).fetchone()
        if not row or row[0] is None:
            raise SchemaMissing(f"the {schema!r} schema is not initialised: run `ragpg init`")
        return prepare(conn)

    # -- operations --------------------------------------------------------------------------

    def ingest(
        self,
        root: str | Path | None = None,
        *,
        collection: str | None = None,
        full: bool = False,
        prune: bool = False,
        dry_run: bool = False,
        progress: ProgressFn | None = None,
    ) -> IngestReport:
        """Index a Markdown tree incrementally (see SPEC §2.6)."""
        with self.source.connection() as conn:
            self._checked(conn)
        ingestor = Ingestor(self.settings, _Checked(self), self.provider, progress=progress, warn=self.warn)
        return ingestor.run(
            root if root is not None else self.settings.source.root,
            collection=collection, full=full, prune=prune, dry_run=dry_run,
        )

    def search(
        self,
        query: str,
        k: int | None = None,
        *,
        mode: str | None = None,
        collection: str | None = None,
        path_prefix: str | None = None,
        filters: Mapping[str, Any] | None = None,
        level: int | None = None,
        node_type: str | None = None,
        max_per_document: int | None = None,
        neighbours: int = 0,
        expand: str | None = None,
        rerank: bool | None = None,
    ) -> list[Hit]:
        """The best passages for ``query``, best first, each with its provenance.

        ``filters`` are front-matter values (equality, or containment for lists/objects);
        ``level``/``node_type`` filter the summary tree; both apply to every retriever.
        ``max_per_document`` caps hits per file; ``neighbours`` merges ±N chunks into each
        passage; ``expand`` ("parent" | "children") attaches the related node's text in
        ``hit.extra["expanded"]``; ``rerank`` applies the configured cross-encoder.
        """
        k = self.settings.retrieval.k if k is None else k
        if not query or not query.strip() or k <= 0:
            return []
        collection = collection or self.settings.collection
        if mode is not None and mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
        mode = mode or self.settings.retrieval.mode
        use_rerank = self.settings.rerank.enabled if rerank is None else rerank
        options = {"path_prefix": path_prefix, "filters": filters, "level": level,
                   "node_type": node_type, "max_per_document": max_per_document,
                   "neighbours": neighbours, "expand": expand}
        try:
            return self._search(query, k, mode, collection, use_rerank, options)
        except psycopg.OperationalError as exc:
            if not self.source.owns_connections or not _connection_lost(exc):
                raise
            # The pool lends a recently used connection without a ping: if the server went
            # away meanwhile, that connection is now discarded; a search is safe to repeat.
            return self._search(query, k, mode, collection, use_rerank, options)

    def _search(
        self, query: str, k: int, mode: str | None, collection: str, use_rerank: bool,
        options: dict[str, Any],
    ) -> list[Hit]:
        with self.source.connection() as conn:
            newer_than = 0.0
            for attempt in (1, 2):
                info = self._collection_info(conn, collection, newer_than=newer_than)
                newer_than = info.read_at + 1e-9  # a second attempt reads again (once)
                prepare(conn)  # pgvector's types, once per connection
                try:
                    return self._search_once(conn, query, k, mode, collection, info, use_rerank,
                                             options)
                except StaleCollection:
                    continue  # a reembed switched the model meanwhile: read it again
                except psycopg.errors.UndefinedTable:
                    self._collections.clear()  # the schema went away: the re-read says so
                    if attempt > 1:
                        raise
            raise StoreError(f"collection {collection!r} keeps changing model; try again")

    def _collection_info(
        self, conn: psycopg.Connection[Any], collection: str, *, newer_than: float = 0.0
    ) -> _CollectionInfo:
        """The collection's model and size, read once per COLLECTION_INFO_TTL (a round trip
        less per search), or again when the cached one was read before ``newer_than``; a
        savepoint, so a failure leaves a caller's transaction usable."""
        info = self._collections.get(collection)
        if (info is not None and info.read_at >= newer_than
                and time.monotonic() - info.read_at < COLLECTION_INFO_TTL):
            return info
        with conn.transaction():
            self._checked(conn)
            bound = self.store.collection_model(conn, collection)
            row = conn.execute(
                self.searcher.small_collection(self.settings.retrieval.exact_limit),
                {"collection": collection},
            ).fetchone()
            model, dimension = bound if bound else (None, None)
            kind = self.store.vector_index_kind(conn, model) if model else None
        info = _CollectionInfo(model, dimension, bool(row and row[0]), kind, time.monotonic())
        self._collections[collection] = info
        return info

    def _search_once(
        self, conn: psycopg.Connection[Any], query: str, k: int, mode: str | None,
        collection: str, info: _CollectionInfo, use_rerank: bool, options: dict[str, Any],
    ) -> list[Hit]:
        model, dimension = info.model, info.dimension
        if model is None:
            if mode == "vector":
                raise StoreError(f"collection {collection!r} has no vectors: use keyword mode")
            mode = "keyword"
        mode = mode or "hybrid"
        qvec = None
        if mode in ("hybrid", "vector"):
            # The provider (or the part of a chain) of the collection's model: a chain
            # holding both models follows the collection through a `ragpg reembed`.
            provider = serving(self.provider, model, dimension)
            if provider is None:
                raise StoreError(
                    f"collection {collection!r} is indexed with {model!r}, the configured"
                    f" provider gives {self.provider.model!r}"
                )
            qvec = provider.embed("query", [query])[0]
        request = self._search_request(query, k, mode, collection, qvec, info, use_rerank, **options)
        expect = (model, dimension)
        own = self.source.owns_connections
        if not use_rerank:
            hits = self.searcher.run(conn, request, expect=expect, own_session=own)
        else:
            from .rerank import Reranker

            reranker = Reranker(self.settings.rerank)
            try:
                hits = self.searcher.run(
                    conn, request, reranker=lambda found: reranker.rerank(query, found, k),
                    expect=expect, own_session=own,
                )
            finally:
                reranker.close()
        if not hits and model is not None:
            # No row to carry the collection's model: make sure it did not just change (the
            # re-read is cached, so a retry after StaleCollection does not read it again).
            now = self._collection_info(conn, collection, newer_than=info.read_at + 1e-9)
            if (now.model, now.dimension) != expect:
                raise StaleCollection(collection)
        return hits

    def _search_request(
        self, query: str, k: int, mode: str, collection: str, qvec: Any, info: _CollectionInfo,
        use_rerank: bool, **options: Any,
    ) -> SearchRequest:
        """Arguments + [retrieval] settings -> the searcher's request (validated there)."""
        r = self.settings.retrieval
        filters = options.pop("filters")
        if filters is not None and not isinstance(filters, Mapping):
            raise ConfigError("filters must be a mapping of front-matter keys to values")
        candidates, exact = max(r.candidates, k), None
        if unfiltered(options["path_prefix"], filters, options["level"], options["node_type"]):
            # The whole collection, whose size we know: exact search or the index, decided
            # here; with nothing to fuse or rerank, k rows are enough (the index's breadth is
            # ef_search; with a filter, the extra rows also widen the iterative scan).
            exact = info.small
            if mode == "vector" and not use_rerank:
                candidates = k
        return SearchRequest(
            collection=collection, k=k, mode=mode, query_text=query, query_vector=qvec,
            model=info.model, dimension=info.dimension, candidates=candidates, exact=exact,
            front_matter=dict(filters) if filters else None, vector_kind=info.vector_kind,
            neighbours=int(options.pop("neighbours") or 0), **self._retrieval, **options,
        )

    def get_document(
        self, path: str | None = None, *, id: int | None = None, collection: str | None = None
    ) -> dict[str, Any] | None:
        """A document's row and its chunks in order (with provenance), or None."""
        collection = collection or self.settings.collection
        with self.source.connection() as conn, conn.transaction():
            self._checked(conn)
            if id is not None:
                row = conn.execute(self.store.q("document_by_id"), {"id": id}).fetchone()
            else:
                row = conn.execute(
                    self.store.q("document_by_path"), {"collection": collection, "path": path}
                ).fetchone()
            if row is None:
                return None
            keys = ("id", "collection", "path", "title", "content_hash", "front_matter",
                    "parent_path", "level", "node_type", "embed", "language", "chunk_count",
                    "token_count", "indexed_at")
            doc = dict(zip(keys, row, strict=True))
            doc["indexed_at"] = doc["indexed_at"].isoformat()
            chunks = conn.execute(self.store.q("document_chunks"), {"document_id": doc["id"]}).fetchall()
            doc["chunks"] = [
                {"id": c[0], "position": c[1], "section": c[2], "anchor": c[3], "content": c[4],
                 "token_count": c[5], "content_hash": c[6]}
                for c in chunks
            ]
            return doc

    def stats(self, collection: str | None = None) -> dict[str, Any]:
        collection = collection or self.settings.collection
        with self.source.connection() as conn, conn.transaction():
            self._checked(conn)
            return self.store.stats(conn, collection)


def _connection_lost(exc: psycopg.OperationalError) -> bool:
    """The server closed or restarted under the connection (not a timeout or a lock error)."""
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


class _Checked:
    """The RagPG's source, with pgvector types registered on every connection lent."""

    def __init__(self, rag: RagPG):
        self._rag = rag
        self.owns_connections = rag.source.owns_connections

    def connection(self) -> Any:
        from contextlib import contextmanager

        @contextmanager
        def lend() -> Any:
            with self._rag.source.connection() as conn:
                yield prepare(conn)

        return lend()

    def dedicated(self) -> psycopg.Connection[Any]:
        assert isinstance(self._rag.source, PoolSource)
        return self._rag.source.dedicated()

    def close(self) -> None:
        pass
