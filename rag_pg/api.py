"""The library's front door: one object that ingests, searches and reports on an index."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import psycopg
from psycopg.rows import scalar_row

from rag_pg.config import Settings
from rag_pg.embed import make_provider
from rag_pg.embed.base import EmbeddingProvider
from rag_pg.errors import (
    ConfigError,
    ExtensionUnavailable,
    NoVectors,
    RagError,
    SchemaMissing,
)
from rag_pg.models import DocumentRecord, Hit, IngestReport, Stats
from rag_pg.search.bm25 import BM25Params
from rag_pg.search.hits import Candidate, shape, with_citation_urls
from rag_pg.search.locate import DEFAULT_DEPTH as LOCATE_DEPTH
from rag_pg.search.locate import Location, locate_target
from rag_pg.search.plan import (
    MODES,
    CollectionInfo,
    Expansion,
    Mode,
    SearchPlan,
    same_plan,
    settle,
    unfiltered,
)
from rag_pg.search.query_vectors import QueryVectors
from rag_pg.search.question import keyword_text
from rag_pg.search.rerank import Reranker
from rag_pg.search.statement import Searcher
from rag_pg.store import records, replica, tenancy
from rag_pg.store.db import (
    ConnectionSource,
    Database,
    PoolSource,
    prepare,
    read_snapshot,
    source_for,
)
from rag_pg.store.documents import Store
from rag_pg.store.locks import lock_free
from rag_pg.store.runs import abort_stale_runs
from rag_pg.store.vector_index import vector_kind

if TYPE_CHECKING:
    from rag_pg.ingest.run import ProgressFn


def upgrade_schema(conn: psycopg.Connection[Any], schema: str = "ragpg") -> str:
    """Create or upgrade ragpg's schema on the caller's connection (``alembic upgrade head``,
    with Alembic's version table in ``schema``), inside the caller's transaction when one is
    open: a web framework's migration runs it in its own. Returns the revision."""
    # Alembic + SQLAlchemy take ~0.5 s to import: only a schema upgrade needs them.
    from rag_pg.store import migrate

    migrate.upgrade(conn, schema)
    return migrate.current_revision(conn, schema) or ""


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
    ):
        self.settings = settings or Settings()
        self.warn = warn or (lambda message: None)
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
        # Read-only operations borrow from here: a replica's pool with database.read_url.
        self.reads = tenancy.scoped(replica.ReadRouter(self.source, self.settings.database),
                                    t.enabled, tenant or t.tenant)
        self._provider = provider
        self._owns_provider = provider is None  # never close what the caller handed over
        self._provider_lock = threading.Lock()
        self.store = Store(self.settings.database.schema, self.settings.index)
        self.searcher = Searcher(self.settings.database.schema)

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def provider(self) -> EmbeddingProvider:
        if self._provider is None:
            with self._provider_lock:
                if self._provider is None:
                    self._provider = make_provider(self.settings.embedding, warn=self.warn)
        return self._provider

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
            if self.settings.tenancy.enabled:
                tenancy.enable(conn, self.settings.database.schema)
            return revision

    def _checked(self, conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
        with conn.transaction(), conn.cursor(row_factory=scalar_row) as cur:
            table = cur.execute("SELECT to_regclass(%s)", (self.store.q.table("document"),)).fetchone()
        if table is None:
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
        k = self.settings.retrieval.k if k is None else k
        if not query or not query.strip() or k <= 0:
            return []
        collection = collection or self.settings.collection
        if mode is not None and mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
        chosen = mode or self.settings.retrieval.mode or "hybrid"
        use_rerank = self.settings.rerank.enabled if rerank is None else rerank
        options = {"path_prefix": path_prefix, "filters": filters, "level": level,
                   "node_type": node_type, "max_per_document": max_per_document,
                   "neighbours": neighbours, "expand": expand}
        # The query is embedded before any connection is lent (a slow embedding service
        # never holds a connection, a snapshot or a lock), once for both tries below.
        vectors = QueryVectors(lambda: self.provider, query)
        expected = (vectors.expect(required=chosen == "vector") if chosen != "keyword"
                    else CollectionInfo.expected(None, None))
        try:
            hits = self._search(vectors, expected, k, chosen, collection, use_rerank, options)
        except psycopg.OperationalError as exc:
            if not self.source.owns_connections or not _connection_lost(exc):
                raise
            # The server went away under the connection (a restart, a failover): the pool
            # replaces it, and a search, which writes nothing, is safe to run again once.
            hits = self._search(vectors, expected, k, chosen, collection, use_rerank, options)
        return with_citation_urls(hits, self.settings.citation.url)

    def _search(
        self, vectors: QueryVectors, expected: CollectionInfo, k: int, wanted: str,
        collection: str, use_rerank: bool, options: dict[str, Any],
    ) -> list[Hit]:
        """Run the plan made for the ``expected`` collection in one snapshot that also reads
        what the plan depends on in the collection (its model, its index, its statistics).

        When the collection is not what the plan expected (a `ragpg reembed` switched its
        model, its index casts otherwise, its statistics are being rebuilt, it has no
        vectors), the plan made from what the snapshot read runs instead, once."""
        query = vectors.query
        with self.reads.connection() as conn:
            prepare(conn)  # pgvector's types, unless this connection has them already
            plan = self._plan(query, k, wanted, collection, expected, use_rerank, options, vectors)
            if plan is None:
                self._require_collection(conn, collection)
                return []
            rows, seen = self._run_plan(conn, collection, plan)
            if seen.model is None:
                self._require_collection(conn, collection)  # no vectors: maybe no collection
            again = self._plan(query, k, wanted, collection, seen, use_rerank, options, vectors)
            if again is None:
                return []
            if not same_plan(plan, again):
                plan = again
                rows, _ = self._run_plan(conn, collection, plan)
        if not use_rerank:
            return shape(rows, plan)
        reranker = Reranker(self.settings.rerank)
        try:
            return shape(rows, plan, reranker=lambda found: reranker.rerank(query, found, k))
        finally:
            reranker.close()

    def _schema_missing(self) -> SchemaMissing:
        schema = self.settings.database.schema
        return SchemaMissing(f"the {schema!r} schema is not initialised: run `ragpg init`")

    def _run_plan(self, conn: psycopg.Connection[Any], collection: str,
                  plan: SearchPlan) -> tuple[list[Candidate], CollectionInfo]:
        """The candidates and the collection as one snapshot saw them, in one round trip
        (BEGIN, the collection, settings, statement, COMMIT, pipelined)."""
        try:
            with read_snapshot(conn):
                seen = self.searcher.send_collection(conn, collection)
                cur = self.searcher.execute(conn, plan)
            info = seen.fetchone()
            rows = cur.fetchall()
        except (ExtensionUnavailable, psycopg.errors.UndefinedTable):
            raise self._schema_missing() from None
        except psycopg.errors.UndefinedColumn:
            raise SchemaMissing.out_of_date(self.settings.database.schema) from None
        assert info is not None  # the statement always returns one row
        return rows, info

    def _plan(
        self, query: str, k: int, mode: str, collection: str, info: CollectionInfo,
        use_rerank: bool, options: dict[str, Any], vectors: QueryVectors,
    ) -> SearchPlan | None:
        """Arguments + [retrieval] settings + the collection -> the plan that runs, or None when
        nothing can match (a query without a word to match, in keyword mode)."""
        if info.model is None:
            if mode == "vector":
                raise NoVectors.in_collection(collection)
            mode = "keyword"
        qvec = None
        if mode in ("hybrid", "vector") and info.model is not None:
            qvec = vectors.of(collection, info.model, info.dimension)
        r = self.settings.retrieval
        filters = options["filters"]
        if filters is not None and not isinstance(filters, Mapping):
            raise ConfigError("filters must be a mapping of front-matter keys to values")
        candidates = max(r.candidates, k)
        if (mode == "vector" and not use_rerank and unfiltered(
                options["path_prefix"], filters, options["level"], options["node_type"])):
            # A whole collection with nothing to fuse or rerank: k rows are enough (the
            # index's breadth is ef_search; with a filter, the extra rows also widen the
            # iterative scan).
            candidates = k
        vector_leg = mode != "keyword"
        plan = SearchPlan(
            collection=collection, k=k, mode=cast(Mode, mode), query_vector=qvec,
            # hybrid: the keyword leg's words (rag_pg.search.question); keyword mode is the SQL's BM25
            query_text=keyword_text(query) if mode == "hybrid" else query,
            model=info.model if vector_leg else None,
            dimension=info.dimension if vector_leg else None, candidates=candidates,
            front_matter=dict(filters) if filters else None,
            # the index's type when it exists, else the one its dimension calls for
            vector_kind=(info.vector_kind or vector_kind(info.dimension or 0)) if vector_leg else None,
            path_prefix=options["path_prefix"], level=options["level"],
            node_type=options["node_type"], max_per_document=options["max_per_document"],
            neighbours=int(options["neighbours"] or 0), expand=options["expand"],
            rrf_k=r.rrf_k, fusion=r.fusion, ef_search=r.ef_search, exact_limit=r.exact_limit,
            exact_share=r.exact_share,
            weights={"vector": r.vector_weight, "keyword": r.keyword_weight},
            bm25=BM25Params(r.bm25_k1, r.bm25_b), max_scan_tuples=r.max_scan_tuples,
            iterative_scan=r.iterative_scan,
            keyword_exhaustive=info.term_stat_pending and mode != "vector",
        )
        return settle(plan, iterative_scans=info.iterative_scans)

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
        """Every read of a named collection passes here: an unknown name is an error (a
        typo must not read as "no result"), except the configured collection."""
        if collection != self.settings.collection:
            with conn.transaction() if tenancy.active() else nullcontext():
                records.require_collection(conn, self.store.q, collection)


def _connection_lost(exc: psycopg.OperationalError) -> bool:
    """The server closed or restarted under the connection (not a timeout or a lock error)."""
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


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
