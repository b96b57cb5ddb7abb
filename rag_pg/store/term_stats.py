"""The per-term statistics of a first load: left pending while it writes, counted once at its end.

The triggers on ``chunk`` keep ``term_stat`` and ``chunk_stat`` exact in every writer's
transaction. On a collection's first load that costs an aggregate and a merge per write
group, in which the frequent words are updated again and again; counted once over the loaded
chunks, the same statistics cost a fraction of it. A collection marked pending
(``collection.term_stat_pending``) is left out by the triggers until :meth:`TermStatistics.rebuild_term_stats`
counts its chunks and clears the mark, in one transaction. A load killed in between leaves
the mark, and the next ingest rebuilds; until then searches read neither table for it (the
exhaustive keyword leg counts its own frequencies, the size class the documents' chunks).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import scalar_row

from rag_pg.errors import SchemaMissing
from rag_pg.store.boundary import translated
from rag_pg.store.queries import Queries

_REBUILD = ("term_stats_memory", "term_stats_drop", "chunk_stats_drop", "term_stats_count", "chunk_stats_count",
            "term_stats_resume")


class TermStatistics:
    """The term statistics part of :class:`rag_pg.store.documents.Store`, which sets ``q``."""

    q: Queries

    def term_stats_pending(self, conn: psycopg.Connection[Any], collection: str) -> bool:
        try:
            with conn.cursor(row_factory=scalar_row) as cur:
                return bool(cur.execute(self.q("term_stats_pending"),
                                        {"collection": collection}).fetchone())
        except psycopg.errors.UndefinedColumn:  # a schema of an earlier version, not upgraded
            raise SchemaMissing.out_of_date(self.q.schema) from None

    def defer_term_stats(self, conn: psycopg.Connection[Any], collection: str) -> None:
        """Mark the collection pending (committed before the first chunk is written)."""
        with conn.transaction():
            conn.execute(self.q("term_stats_defer"), {"collection": collection})

    @translated
    def rebuild_term_stats(self, conn: psycopg.Connection[Any], collection: str) -> None:
        """Count the collection's statistics from its chunks and clear the mark, atomically."""
        params = {"collection": collection}
        with conn.pipeline(), conn.transaction():
            for name in _REBUILD:
                conn.execute(self.q(name), params)
