"""The documents whose ``parent_source_file`` names no document of their collection."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

_MISSING = sql.SQL(
    "SELECT d.path, d.parent_path FROM {schema}.document d"
    " WHERE d.collection = %(collection)s AND d.parent_path IS NOT NULL"
    " AND (%(source_root)s::text IS NULL OR d.source_root = %(source_root)s)"
    " AND NOT EXISTS (SELECT 1 FROM {schema}.document p"
    "                 WHERE p.collection = d.collection AND p.path = d.parent_path)"
    " ORDER BY d.path"
)


def missing_parents(
    conn: psycopg.Connection[Any],
    schema: str,
    collection: str,
    *,
    paths: Collection[str] | None = None,
    source_root: str | None = None,
) -> list[tuple[str, str]]:
    """``(path, parent)`` of each document whose parent is not in the collection.

    ``paths`` limits the children checked (an ingest passes the files it saw, so another
    root's orphans are not blamed on this run); ``source_root`` does the same by root.
    """
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            _MISSING.format(schema=sql.Identifier(schema)),
            {"collection": collection, "source_root": source_root},
        ).fetchall()
    found = [(str(r["path"]), str(r["parent_path"])) for r in rows]
    if paths is not None:
        wanted = set(paths)
        found = [item for item in found if item[0] in wanted]
    return found
