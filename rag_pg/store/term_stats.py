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
from psycopg import sql
from psycopg.rows import scalar_row

from rag_pg.errors import SchemaMissing
from rag_pg.source.language import LANGUAGES
from rag_pg.store.boundary import translated
from rag_pg.store.queries import Queries

_REBUILD = ("term_stats_memory", "term_stats_drop", "chunk_stats_drop", "term_stats_count", "chunk_stats_count",
            "term_stats_resume")


class TermStatistics:
    """The term statistics part of :class:`rag_pg.store.documents.Store`, which sets ``q``
    and tells the schema's layout on a cluster."""

    q: Queries

    def layout(self, conn: psycopg.Connection[Any]) -> str | None:
        raise NotImplementedError

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
        if self.layout(conn) == "document":
            spread = SpreadStatistics(self.q)
            with conn.transaction(), conn.cursor() as cur:
                for name in _REBUILD[:3]:
                    cur.execute(self.q(name), params)
                spread.add(cur, collection, *spread.counts(cur, collection))
                cur.execute(self.q("term_stats_resume"), params)
            return
        with conn.pipeline(), conn.transaction():
            for name in _REBUILD:
                conn.execute(self.q(name), params)


# Rows per statement when the statistics are written by value: each row is a few parameters,
# and a statement carries at most 65,535.
_ROWS_PER_STATEMENT = 1000
_TERM_ROW = sql.SQL("(%s::text, %s::regconfig, %s::text, %s::integer, %s::integer, %s::integer)")
_CHUNK_ROW = sql.SQL("(%s::text, %s::regconfig, %s::bigint, %s::bigint)")


class SpreadStatistics:
    """The statistics of a collection spread over a cluster by document
    (rag_pg.store.distribution): ``term_stat`` and ``chunk_stat`` are the collection's, in
    shards apart from its chunks, where neither a trigger nor one statement can reach both.
    The writer reads a write's counts from the chunks (a query over every shard) and writes
    them by value into the collection's statistics (a statement routed to its shard), in the
    same transaction as the chunks. A configuration travels as its position in ``configs``:
    between nodes a ``regconfig`` value is an object id, which differs from node to node."""

    def __init__(self, q: Queries):
        self.q = q
        self.configs = [q.config(language) for language in LANGUAGES]

    def counts(self, cur: psycopg.Cursor[Any], collection: str, ids: list[int] | None = None,
               ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The (terms, chunks) counts of the documents ``ids`` (to add or subtract), or of
        the whole collection (None)."""
        params = {"collection": collection, "ids": ids, "ts_configs": self.configs}
        of = "collection" if ids is None else "documents"
        return (self._rows(cur, f"term_stats_of_{of}", params, collection),
                self._rows(cur, f"chunk_stats_of_{of}", params, collection))

    def _rows(self, cur: psycopg.Cursor[Any], name: str, params: dict[str, Any],
              collection: str) -> list[tuple[Any, ...]]:
        cur.execute(self.q(name), params)
        return [(collection, self.configs[row[0] - 1], *row[1:]) for row in cur.fetchall()]

    def add(self, cur: psycopg.Cursor[Any], collection: str, terms: list[tuple[Any, ...]],
            chunks: list[tuple[Any, ...]]) -> None:
        self._write(cur, "term_stats_add_values", collection, terms, _TERM_ROW)
        self._write(cur, "chunk_stats_add_values", collection, chunks, _CHUNK_ROW)

    def subtract(self, cur: psycopg.Cursor[Any], collection: str, terms: list[tuple[Any, ...]],
                 chunks: list[tuple[Any, ...]]) -> None:
        self._write(cur, "term_stats_drop_values", collection, terms, _TERM_ROW)
        self._write(cur, "term_stats_subtract_values", collection, terms, _TERM_ROW)
        self._write(cur, "chunk_stats_subtract_values", collection, chunks, _CHUNK_ROW)

    def _write(self, cur: psycopg.Cursor[Any], name: str, collection: str,
               rows: list[tuple[Any, ...]], row: sql.SQL) -> None:
        for start in range(0, len(rows), _ROWS_PER_STATEMENT):
            part = rows[start:start + _ROWS_PER_STATEMENT]
            cur.execute(self.q.compose(name, rows=sql.SQL(", ").join([row] * len(part)),
                                       collection=sql.Literal(collection)),
                        [value for r in part for value in r])
