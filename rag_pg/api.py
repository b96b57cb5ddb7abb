"""The library's front door: one object that ingests, searches and reports on an index."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

from rag_pg.config import Settings
from rag_pg.embed import make_provider
from rag_pg.embed.base import EmbeddingProvider
from rag_pg.embed.gated import CallGate, GatedProvider
from rag_pg.errors import (
    ConfigError,
    RagError,
    SchemaMissing,
)
from rag_pg.models import DocumentRecord, Hit, IngestReport, Stats
from rag_pg.search.locate import DEFAULT_DEPTH as LOCATE_DEPTH
from rag_pg.search.locate import Location, locate_target
from rag_pg.search.plan import (
    Expansion,
    Mode,
)
from rag_pg.store import distribution, keyword_engine, permissions, records, replica, tenancy
from rag_pg.store.boundary import guarded_methods
from rag_pg.store.db import (
    ConnectionSource,
    Database,
    PoolSource,
    prepare,
    quiet_second_pipeline_errors,
    source_for,
)
from rag_pg.store.documents import Store
from rag_pg.store.locks import lock_free
from rag_pg.store.runs import abort_stale_runs

if TYPE_CHECKING:
    from rag_pg.ingest.run import ProgressFn
    from rag_pg.search.run import SearchRunner
    from rag_pg.search.statement import Searcher


def upgrade_schema(conn: psycopg.Connection[Any], schema: str = "ragpg") -> str:
    """Create or upgrade ragpg's schema on the caller's connection (``alembic upgrade head``,
    with Alembic's version table in ``schema``), inside the caller's transaction when one is
    open: a web framework's migration runs it in its own. Returns the revision."""
    # Alembic + SQLAlchemy take ~0.5 s to import: only a schema upgrade needs them.
    from rag_pg.store import migrate

    migrate.upgrade(conn, schema)
    return migrate.current_revision(conn, schema) or ""


@guarded_methods
class RagPG:
    """An index in one Postgres schema, reached through a URL or a caller's connection.

    ``database`` may be a URL (ragpg opens a small pool and closes it in :meth:`close`), a
    ``psycopg.Connection``, or a SQLAlchemy ``Engine``/``Connection`` on the psycopg driver
    (ragpg uses them and never closes or commits what it did not open; its writes run in
    ``conn.transaction()`` blocks, which become savepoints inside a caller's transaction).
    """

    def __init__(
        self,
        database: Database | None = None,
        settings: Settings | None = None,
        *,
        provider: EmbeddingProvider | None = None,
        warn: Callable[[str], None] | None = None,
        tenant: str | None = None,
        principals: Sequence[str] | None = None,
    ):
        self.settings = settings or Settings()
        self.warn = warn or (lambda message: None)
        quiet_second_pipeline_errors()
        target = database if database is not None else self.settings.database.url
        if target is None:
            raise ConfigError(
                "no database: pass a URL or connection, or set database.url / RAGPG_DATABASE_URL"
            )
        # With tenancy, every connection lent acts for the tenant (docs/tenancy.md).
        t = self.settings.tenancy
        self.source: ConnectionSource = tenancy.scoped(source_for(
            target, pool_size=self.settings.database.pool_size,
            connect_timeout=self.settings.database.connect_timeout,
            call_timeout=self.settings.database.call_timeout or None), t.enabled, tenant or t.tenant)
        # Read-only operations borrow from here: a replica's pool with database.read_url. They
        # read as the principals given (or the configured ones): docs/permissions.md.
        acting = permissions.principals_of(
            principals if principals is not None else self.settings.permissions.principals)
        self.reads = permissions.scoped(
            tenancy.scoped(replica.ReadRouter(self.source, self.settings.database),
                           t.enabled, tenant or t.tenant),
            self.settings.database.schema, acting)
        self._provider = provider
        self._owns_provider = provider is None  # never close what the caller handed over
        self._provider_lock = threading.Lock()
        self._gate: CallGate | None = None
        self.store = Store(self.settings.database.schema, self.settings.index)
        #: what scores keyword searches, as the last ``init`` found the database: ``pg_textsearch``
        #: or ``sql`` (None before ``init``); rag_pg.store.keyword_engine
        self.keyword_engine: str | None = None
        self._search_runner: SearchRunner | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def provider(self) -> EmbeddingProvider:
        if self._provider is None:
            with self._provider_lock:
                if self._provider is None:
                    self._provider = make_provider(self.settings.embedding, warn=self.warn)
        if self._gate is not None:
            return GatedProvider(self._provider, self._gate)
        return self._provider

    def _runner(self) -> SearchRunner:
        """The search stage, loaded with the first search: an ingest never needs it."""
        if self._search_runner is None:
            from rag_pg.search.run import SearchRunner

            self._search_runner = SearchRunner(self.settings, self.reads, lambda: self.provider)
        return self._search_runner

    @property
    def searcher(self) -> Searcher:
        """The search statements of this index's schema."""
        return self._runner().searcher

    def bound_embedding_calls(self, slots: int, queue: int, *, patience: float = 30.0) -> None:
        """At most ``slots`` embedding calls at once from this object's threads; ``queue`` more
        wait (up to ``patience`` seconds), the others fail at once with ``EmbeddingBusy``.

        For a service answering many requests in threads: only the call is bounded, not the
        search around it (the query is embedded before a connection is borrowed), so a
        healthy embedding service never turns a request away, and a stalled one holds at most
        ``slots + queue`` threads."""
        self._gate = CallGate(slots, queue, patience)

    def close(self) -> None:
        self.reads.close()
        self.source.close()
        if self._provider is not None and self._owns_provider:
            self._provider.close()

    def __enter__(self) -> RagPG:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def init(self) -> str:
        """Create or upgrade the schema (``alembic upgrade head``); returns the revision."""
        with self.source.connection() as conn:
            revision = upgrade_schema(conn, self.settings.database.schema)
            distribution.distribute(conn, self.settings.database.schema,
                                    self.settings.database.distribution,
                                    self.settings.database.shard_count)
            self.store.forget_layout()
            self.keyword_engine = keyword_engine.prepare(
                conn, self.settings.database.schema, self.settings.retrieval,
                distributed=self.store.distributed(conn)) or "sql"
            if self.settings.tenancy.enabled:
                tenancy.enable(conn, self.settings.database.schema)
            if self.settings.permissions.enabled:
                permissions.enable(conn, self.settings.database.schema)
            return revision

    def acting_as(self, principals: Sequence[str] | None) -> AbstractContextManager[None]:
        """A block whose reads act as ``principals`` (None: no restriction), whatever this
        object's own: ``with rag.acting_as(user_groups): rag.search(...)``."""
        return permissions.acting_as(principals)

    def _checked(self, conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
        with conn.transaction():
            ready = records.table_exists(conn, self.store.q, "document")
        if not ready:
            raise self._schema_missing()
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
        """Index a Markdown tree incrementally: new and changed files are parsed, chunked,
        embedded and written (each document in one transaction), unchanged ones skipped;
        ``prune`` deletes the documents whose file is gone, ``full`` re-indexes everything."""
        with self.source.connection() as conn:
            self._checked(conn)
        # The parser and the converters load with the first ingest, not with every search.
        from rag_pg.ingest.run import Ingestor

        ingestor = Ingestor(self.settings, _Checked(self), self.provider, progress=progress, warn=self.warn)
        try:
            report = ingestor.run(
                root if root is not None else self.settings.source.root,
                collection=collection, full=full, prune=prune, dry_run=dry_run,
            )
        finally:
            self.reads.wrote()
        if not dry_run and report.documents_skipped and not report.documents_indexed:
            drift = self._model_drift(report.collection)
            if drift is not None:
                report.warnings.append(drift)
        return report

    def _model_drift(self, collection: str) -> str | None:
        """After a run that wrote nothing: whether the collection's model is not the configured
        provider's (a model changed in the configuration). Such a run decides "unchanged"
        against the collection's model without asking the provider, so this asks once; a
        provider that does not answer leaves the question open (the run needed none)."""
        with self.source.connection() as conn:
            bound = self.store.collection_model(conn, collection)
        if bound is None or bound[0] is None:
            return None
        try:
            configured = self.provider.model
        except RagError:
            return None
        if configured in (None, bound[0]):
            return None
        return (f"collection {collection!r} is indexed with {bound[0]!r}, the configured provider"
                f" gives {configured!r}: its unchanged documents keep their {bound[0]!r} vectors"
                f" and searches need that model; run `ragpg reembed --collection {collection}`"
                " to switch")

    def search(
        self,
        query: str,
        k: int | None = None,
        *,
        mode: Mode | None = None,
        collection: str | None = None,
        path_prefix: str | None = None,
        filters: Mapping[str, Any] | None = None,
        level: int | None = None,
        node_type: str | None = None,
        max_per_document: int | None = None,
        neighbours: int = 0,
        expand: Expansion | None = None,
        rerank: bool | None = None,
    ) -> list[Hit]:
        """The best passages for ``query``, best first, each with its provenance.

        ``filters`` are front-matter values (equality, or containment for lists/objects);
        ``level``/``node_type`` filter the summary tree; both apply to every retriever.
        ``max_per_document`` caps hits per file; ``neighbours`` merges ±N chunks into each
        passage; ``expand`` ("parent" | "children") attaches the related node's text in
        ``hit.extra["expanded"]``; ``rerank`` applies the configured cross-encoder.
        """
        from rag_pg.search.hits import with_citation_urls
        from rag_pg.search.run import SearchOptions

        options = SearchOptions(path_prefix=path_prefix, filters=filters, level=level,
                                node_type=node_type, max_per_document=max_per_document,
                                neighbours=neighbours, expand=expand)
        hits = self._runner().search(query, k, mode=mode, collection=collection, rerank=rerank,
                                   options=options)
        return with_citation_urls(hits, self.settings.citation.url)

    def _schema_missing(self) -> SchemaMissing:
        return SchemaMissing.not_initialised(self.settings.database.schema)

    def locate(
        self,
        query: str,
        target: str,
        *,
        mode: Mode | None = None,
        collection: str | None = None,
        path_prefix: str | None = None,
        filters: Mapping[str, Any] | None = None,
        level: int | None = None,
        node_type: str | None = None,
        depth: int = LOCATE_DEPTH,
    ) -> Location:
        """Why ``target`` (``path`` or ``path#anchor``) is, or is not, among the hits of
        ``query``: its rank and raw score in each retriever's list and in the fused one, down
        to ``depth``, or why it is absent (a filter removed it, no match, ranked deeper)."""
        return locate_target(self.search, lambda path, name: self.get_document(path, collection=name),
                             query, target, mode=mode,
                             collection=collection or self.settings.collection,
                             path_prefix=path_prefix, filters=filters, level=level,
                             node_type=node_type, depth=depth)

    def get_document(
        self, path: str | None = None, *, id: int | None = None, collection: str | None = None
    ) -> DocumentRecord | None:
        """A stored document and its chunks in order (with provenance), by ``path`` in the
        collection or by ``id``; None when there is none. ``.to_dict()`` gives its JSON."""
        collection = collection or self.settings.collection
        with self.reads.connection() as conn, conn.transaction():
            self._checked(conn)
            found = records.document(conn, self.store.q, collection=collection, path=path, id=id)
            if found is None and id is None:
                self._require_collection(conn, collection)
            return found

    def stats(self, collection: str | None = None) -> Stats:
        """What the collection holds: documents, chunks, vectors per model, the last run."""
        collection = collection or self.settings.collection
        with self.reads.connection() as conn, conn.transaction():
            self._checked(conn)
            stats = records.stats(conn, self.store.q, collection)
            if stats.documents == 0 and stats.model is None and stats.last_run is None:
                self._require_collection(conn, collection)
            if permissions.reading_as() is not None:
                # Counted by the policies for these principals; the last run's counts are
                # the whole collection's: left out.
                return replace(stats, last_run=None)
        if stats.last_run is not None and stats.last_run.status == "running":
            stats = self._settle_last_run(stats)
        return stats

    def _settle_last_run(self, stats: Stats) -> Stats:
        """A run shown ``running`` while nobody holds the collection's lock was left by a
        process that died (a SIGKILL, a lost machine): it is marked ``aborted`` (on the
        primary), so that no report shows a dead run as under way."""
        schema = self.settings.database.schema
        with self.source.connection() as conn:
            prepare(conn)
            if not lock_free(conn, schema, stats.collection):
                return stats
            abort_stale_runs(conn, schema, stats.collection)
        assert stats.last_run is not None
        return replace(stats, last_run=replace(stats.last_run, status="aborted"))

    def collections(self) -> list[str]:
        """The names of the index's collections."""
        with self.reads.connection() as conn, conn.transaction():
            self._checked(conn)
            return records.collection_names(conn, self.store.q)

    def require_collection(self, collection: str | None = None) -> None:
        """Raise :class:`CollectionNotFound` unless ``collection`` exists (or is the
        configured one, which is only empty before its first ingest)."""
        with self.reads.connection() as conn, conn.transaction():
            self._checked(conn)
            self._require_collection(conn, collection or self.settings.collection)

    def _require_collection(self, conn: psycopg.Connection[Any], collection: str) -> None:
        self._runner().require_collection(conn, collection)


class _Checked:
    """The RagPG's source, with pgvector types registered on every connection lent."""

    def __init__(self, rag: RagPG):
        self._rag = rag
        self.owns_connections = rag.source.owns_connections

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        with self._rag.source.connection() as conn:
            yield prepare(conn)

    def dedicated(self) -> psycopg.Connection[Any]:
        source = tenancy.unwrapped(self._rag.source)
        assert isinstance(source, PoolSource)
        return source.dedicated()

    def close(self) -> None:
        pass
