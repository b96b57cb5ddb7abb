"""What the index holds, read for the service: its collections, and the ingest runs.

Whether a collection exists is the library's rule (``RagPG.require_collection``; a search, a
document or stats of an unknown one raise ``CollectionNotFound``). The ingest runs are read
from the ``ingest_runs_v`` view, the index's documented SQL surface.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg import sql
from psycopg.rows import dict_row, scalar_row

from rag_pg.errors import SchemaMissing

if TYPE_CHECKING:
    import psycopg

    from rag_pg.api import RagPG

MAX_RUNS = 100

_RUNS = """
SELECT id, collection, source_root, mode, status, started_at, finished_at, duration_seconds,
       documents_seen, documents_indexed, documents_skipped, documents_failed, documents_deleted,
       chunks_upserted, chunks_unchanged, chunks_deleted, embedding_calls, tokens_embedded, model,
       error_count, errors
FROM {s}.ingest_runs_v
WHERE (%(collection)s::text IS NULL OR collection = %(collection)s)
ORDER BY id DESC
LIMIT %(limit)s
"""
def _read(rag: RagPG, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    schema = rag.settings.database.schema
    with rag.reads.connection() as conn, conn.transaction():
        _check_schema(conn, schema)
        statement = sql.SQL(query).format(s=sql.Identifier(schema))
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(statement, params).fetchall()


def _check_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    table = sql.SQL("{}.document").format(sql.Identifier(schema)).as_string(conn)
    with conn.cursor(row_factory=scalar_row) as cur:
        found = cur.execute("SELECT to_regclass(%s)", (table,)).fetchone()
    if found is None:
        raise SchemaMissing(f"the {schema!r} schema is not initialised: run `ragpg init`")


def collection_names(rag: RagPG) -> list[str]:
    return rag.collections()


def ingest_runs(rag: RagPG, collection: str | None, limit: int) -> list[dict[str, Any]]:
    """The latest ingest runs, newest first, with their counts and per-document errors."""
    rows = _read(rag, _RUNS, {"collection": collection, "limit": limit})
    runs = []
    for row in rows:
        run = dict(row)
        for key in ("started_at", "finished_at"):
            if isinstance(run[key], datetime):
                run[key] = run[key].isoformat()
        if not isinstance(run["errors"], list):
            run["errors"] = []
        runs.append(run)
    return runs


__all__ = ["MAX_RUNS", "collection_names", "ingest_runs"]
