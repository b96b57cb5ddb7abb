"""What the index holds, read for the service: its collections, and the ingest runs.

Whether a collection exists is the library's rule (``RagPG.require_collection``; a search, a
document or stats of an unknown one raise ``CollectionNotFound``). The ingest runs are read
from the ``ingest_runs_v`` view, the index's documented SQL surface.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg.rows import dict_row

from rag_pg.errors import SchemaMissing
from rag_pg.store import records
from rag_pg.store.boundary import database_errors
from rag_pg.store.queries import Queries

if TYPE_CHECKING:

    from rag_pg.api import RagPG

MAX_RUNS = 100

def _read(rag: RagPG, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    q = Queries(rag.settings.database.schema)
    with database_errors(schema=q.schema), rag.reads.connection() as conn, conn.transaction():
        if not records.table_exists(conn, q, "document"):
            raise SchemaMissing.not_initialised(q.schema)
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(q(name), params).fetchall()


def collection_names(rag: RagPG) -> list[str]:
    return rag.collections()


def ingest_runs(rag: RagPG, collection: str | None, limit: int) -> list[dict[str, Any]]:
    """The latest ingest runs, newest first, with their counts and per-document errors."""
    rows = _read(rag, "catalog_runs", {"collection": collection, "limit": limit})
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
