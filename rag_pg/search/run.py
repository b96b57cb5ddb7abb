"""A search from question to hits, the one path every surface takes: embed the question with
no connection lent, plan, run the plan in one snapshot that also reads what the plan depends
on, and plan once more when the collection was not as expected."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any, cast

import psycopg

from rag_pg.config import Settings
from rag_pg.embed.base import EmbeddingProvider
from rag_pg.errors import (
    ConfigError,
    ConnectionLost,
    DatabaseRefused,
    ExtensionUnavailable,
    NoVectors,
    SchemaMissing,
)
from rag_pg.models import Hit
from rag_pg.search.bm25 import BM25Params
from rag_pg.search.hits import Candidate, shape
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
from rag_pg.store import distribution, keyword_engine, permissions, records, retry, tenancy
from rag_pg.store.boundary import database_errors
from rag_pg.store.db import ConnectionSource, prepare, read_snapshot
from rag_pg.store.keyword_engine import ENGINE
from rag_pg.store.vector_index import vector_kind

# The keyword engine serves a collection whose chunks of each configuration make at least this
# share of all chunks (rag_pg.store.keyword_engine: its indexes span the table).
MIN_ENGINE_SHARE = 0.1
# What a plan reads of the collection for the engine, remembered between searches.
ENGINE_FIELDS = ("engine_schema", "engine_ready", "chunks", "engine_share")
# Runs of a search the server aborted for a reason that passes with time: a deadlock or a
# serialization failure (a lock wait past lock_timeout is not run again: it would wait as long).
SEARCH_ATTEMPTS = 4
ABORTED = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """What narrows or shapes a search beyond its question, k, mode and collection."""

    path_prefix: str | None = None
    filters: Mapping[str, Any] | None = None
    level: int | None = None
    node_type: str | None = None
    max_per_document: int | None = None
    neighbours: int = 0
    expand: Expansion | None = None


class SearchRunner:
    """Searches of one index: its settings, the connections reads borrow, its statements."""

    def __init__(self, settings: Settings, reads: ConnectionSource,
                 provider: Callable[[], EmbeddingProvider],
                 pause: Callable[[float], None] = time.sleep):
        self.settings = settings
        self.pause = pause  # between the runs of an aborted search
        self.reads = reads
        self.provider = provider  # built on first use: a keyword search needs none
        self.searcher = Searcher(settings.database.schema)
        self._routed: bool | None = None  # the schema is distributed over Citus (read once)
        # Per collection, its keyword engine and size as the last search saw them: the next
        # plan expects the same, so its statement runs once.
        self._engines: dict[str, dict[str, Any]] = {}

    def search(self, query: str, k: int | None, *, mode: Mode | None, collection: str | None,
               rerank: bool | None, options: SearchOptions) -> list[Hit]:
        """:meth:`RagPG.search`: the best passages for ``query``, best first."""
        k = self.settings.retrieval.k if k is None else k
        if k < 1:  # the rule of every surface: the HTTP API and MCP refuse it too
            raise ConfigError(f"k must be >= 1 (got {k})")
        if not query or not query.strip():
            return []
        collection = collection or self.settings.collection
        if mode is not None and mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
        chosen = mode or self.settings.retrieval.mode or "hybrid"
        use_rerank = self.settings.rerank.enabled if rerank is None else rerank
        # The query is embedded before any connection is lent (a slow embedding service
        # never holds a connection, a snapshot or a lock), once for both tries below.
        vectors = QueryVectors(self.provider, query)
        expected = (vectors.expect(required=chosen == "vector") if chosen != "keyword"
                    else CollectionInfo.expected(None, None))
        schema = self.settings.database.schema
        # A search writes nothing, so it is safe to run again: once when the server went away
        # under the connection (a restart, a failover: the pool replaces it), and a few times
        # when the server aborted it for a reason that passes with time (a deadlock with a
        # shard move on a cluster, a serialization failure), as the writers replay theirs.
        lost, aborted = False, 0
        while True:
            try:
                with database_errors(schema=schema):
                    return self._search(vectors, expected, k, chosen, collection, use_rerank,
                                        options)
            except ConnectionLost:
                if lost or not self.reads.owns_connections:
                    raise
                lost = True
            except (DatabaseRefused, SchemaMissing) as exc:
                aborted += 1
                if (not self._passing(exc.__cause__) or aborted == SEARCH_ATTEMPTS
                        or not self.reads.owns_connections):  # a caller's transaction is its own
                    raise
                self.pause(retry.DEFAULT.delay * 2 ** aborted)


    def _passing(self, cause: BaseException | None) -> bool:
        """Whether the server aborted the search for a reason that passes with time: a deadlock,
        a serialization failure, or, on a cluster, a shard a worker no longer holds (moved by a
        rebalance between two steps of the search)."""
        if isinstance(cause, ABORTED):
            return True
        return (bool(self._routed) and isinstance(cause, psycopg.errors.UndefinedTable)
                and "while executing command on" in (cause.diag.context or ""))

    def _search(
        self, vectors: QueryVectors, expected: CollectionInfo, k: int, wanted: str,
        collection: str, use_rerank: bool, options: SearchOptions,
    ) -> list[Hit]:
        """Run the plan made for the ``expected`` collection in one snapshot that also reads
        what the plan depends on in the collection (its model, its index, its statistics).

        When the collection is not what the plan expected (a `ragpg reembed` switched its
        model, its index casts otherwise, its statistics are being rebuilt, it has no
        vectors), the plan made from what the snapshot read runs instead, once."""
        query = vectors.query
        if collection in self._engines:
            expected = replace(expected, **self._engines[collection])
        with self.reads.connection() as conn:
            try:
                prepare(conn)  # pgvector's types, unless this connection has them already
            except ExtensionUnavailable:  # a database ragpg init never ran on
                raise SchemaMissing.not_initialised(self.settings.database.schema) from None
            if self._routed is None:
                with conn.transaction():
                    self._routed = distribution.distributed(conn, self.settings.database.schema)
            plan = self._plan(query, k, wanted, collection, expected, use_rerank, options, vectors)
            if plan is None:
                self.require_collection(conn, collection)
                return []
            rows, seen = self._run_plan(conn, collection, plan)
            self._engines[collection] = {name: getattr(seen, name) for name in ENGINE_FIELDS}
            if seen.engine_schema is None and self.settings.retrieval.keyword_engine == ENGINE:
                raise keyword_engine.missing(ENGINE, "this database has no pg_textsearch"
                                                     " extension (`ragpg init` installs it)")
            if seen.model is None:
                self.require_collection(conn, collection)  # no vectors: maybe no collection
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

    def _run_plan(self, conn: psycopg.Connection[Any], collection: str,
                  plan: SearchPlan) -> tuple[list[Candidate], CollectionInfo]:
        """The candidates and the collection as one snapshot saw them, in one round trip
        (BEGIN, the collection, settings, statement, COMMIT, pipelined)."""
        try:
            with read_snapshot(conn):
                seen = self.searcher.send_collection(conn, collection, engine=self._engine_possible)
                cur = self.searcher.execute(conn, plan)
            info = seen.fetchone()
            rows = cur.fetchall()
        except ExtensionUnavailable:
            raise SchemaMissing.not_initialised(self.settings.database.schema) from None
        assert info is not None  # the statement always returns one row
        return rows, info

    def _plan(
        self, query: str, k: int, mode: str, collection: str, info: CollectionInfo,
        use_rerank: bool, options: SearchOptions, vectors: QueryVectors,
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
        filters = options.filters
        if filters is not None and not isinstance(filters, Mapping):
            raise ConfigError("filters must be a mapping of front-matter keys to values")
        candidates = max(r.candidates, k)
        readers = permissions.reading_as()
        if (mode == "vector" and not use_rerank and readers is None and unfiltered(
                options.path_prefix, filters, options.level, options.node_type)):
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
            path_prefix=options.path_prefix, level=options.level,
            node_type=options.node_type, max_per_document=options.max_per_document,
            max_per_section=r.max_per_section,
            neighbours=int(options.neighbours or 0), expand=options.expand,
            rrf_k=r.rrf_k, fusion=r.fusion, ef_search=r.ef_search, exact_limit=r.exact_limit,
            exact_share=r.exact_share,
            weights={"vector": r.vector_weight, "keyword": r.keyword_weight},
            bm25=BM25Params(r.bm25_k1, r.bm25_b), max_scan_tuples=r.max_scan_tuples,
            iterative_scan=r.iterative_scan,
            keyword_exhaustive=info.term_stat_pending and mode != "vector",
            routed=bool(self._routed), readers=readers,
        )
        plan = replace(plan, keyword_engine=self._keyword_engine(info, plan))
        return settle(plan, iterative_scans=info.iterative_scans)

    @property
    def _engine_possible(self) -> bool:
        """Whether the setting lets a keyword engine serve at all, off Citus (else the
        collection's engine columns are not even read)."""
        return not self._routed and keyword_engine.wanted(self.settings.retrieval)

    def _keyword_engine(self, info: CollectionInfo, plan: SearchPlan) -> str | None:
        """The schema of the engine that scores this search's keyword leg; None: SQL. The
        engine once the collection has its indexes (``ragpg init`` builds them) and the
        setting allows it, never on a Citus cluster; for a whole collection, only one of more
        than ``exact_limit`` chunks (a smaller one is scored in SQL, as a small filter is); and
        only where each configuration's chunks of the collection make at least
        MIN_ENGINE_SHARE of the table's (an index spans the table: a scan for a smaller share
        walks that many more rows of others, measured at 170 ms for 0.6%)."""
        if plan.mode == "vector" or not self._engine_possible or not info.engine_ready:
            return None
        if Searcher.whole_collection(plan) and (info.chunks or 0) <= plan.exact_limit:
            return None
        if (info.engine_share or 0) < MIN_ENGINE_SHARE:
            return None
        return info.engine_schema

    def require_collection(self, conn: psycopg.Connection[Any], collection: str) -> None:
        """Every read of a named collection passes here: an unknown name is an error (a
        typo must not read as "no result"), except the configured collection."""
        if collection != self.settings.collection:
            with conn.transaction() if tenancy.active() else nullcontext():
                records.require_collection(conn, self.searcher.q, collection)
