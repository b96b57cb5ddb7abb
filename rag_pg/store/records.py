"""Reads of the records the library hands back: a stored document with its chunks, and what a
collection holds. Each row is read by name into its dataclass (``psycopg.rows.class_row``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import psycopg
from psycopg.rows import class_row, dict_row, scalar_row

from rag_pg.errors import CollectionNotFound
from rag_pg.models import ChunkRecord, DocumentRecord, ModelVectors, RunSummary, Stats
from rag_pg.store.queries import Queries


def document(
    conn: psycopg.Connection[Any], q: Queries, *, collection: str, path: str | None = None,
    id: int | None = None,
) -> DocumentRecord | None:
    """A stored document by id (any collection) or by path in ``collection``, with its chunks
    in order; None when there is none."""
    with conn.cursor(row_factory=class_row(DocumentRecord)) as cur:
        if id is not None:
            doc = cur.execute(q("document_by_id"), {"id": id}).fetchone()
        else:
            doc = cur.execute(q("document_by_path"), {"collection": collection, "path": path}).fetchone()
    if doc is None:
        return None
    with conn.cursor(row_factory=class_row(ChunkRecord)) as cur:
        chunks = cur.execute(q("document_chunks"), {"document_id": doc.id}).fetchall()
    return replace(doc, chunks=tuple(chunks))


def stats(conn: psycopg.Connection[Any], q: Queries, collection: str) -> Stats:
    """Documents, chunks and vectors per model of ``collection``, its model, its last run."""
    params = {"collection": collection}
    with conn.cursor(row_factory=dict_row) as cur:
        totals = cur.execute(q("stats_totals"), params).fetchone()
        bound = cur.execute(q("collection_get"), params).fetchone()
    assert totals is not None
    with conn.cursor(row_factory=class_row(ModelVectors)) as cur:
        models = cur.execute(q("stats_models"), params).fetchall()
    with conn.cursor(row_factory=class_row(RunSummary)) as cur:
        last = cur.execute(q("stats_last_run"), params).fetchone()
    return Stats(
        collection=collection, documents=int(totals["documents"]), chunks=int(totals["chunks"]),
        last_indexed_at=totals["last_indexed_at"],
        model=bound["model"] if bound else None, dimension=bound["dimension"] if bound else None,
        models=tuple(models), last_run=last,
    )


def collection_names(conn: psycopg.Connection[Any], q: Queries) -> list[str]:
    """Every collection of the index, by name."""
    with conn.cursor(row_factory=scalar_row) as cur:
        return [str(name) for name in cur.execute(q("collection_names")).fetchall()]


def require_collection(conn: psycopg.Connection[Any], q: Queries, collection: str) -> None:
    """Raise :class:`CollectionNotFound` (naming those that exist) unless ``collection`` does."""
    with conn.cursor(row_factory=scalar_row) as cur:
        found = cur.execute(q("collection_exists"), {"collection": collection}).fetchone()
    if not found:
        raise CollectionNotFound(collection, collection_names(conn, q))


def table_exists(conn: psycopg.Connection[Any], q: Queries, table: str) -> bool:
    """Whether the schema has ``table`` (ragpg's tables are created by ``ragpg init``)."""
    with conn.cursor(row_factory=scalar_row) as cur:
        return bool(cur.execute(q("table_exists"), {"table": q.table(table)}).fetchone())
