"""The documents whose ``parent_source_file`` names no document of their collection."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import psycopg
from psycopg.rows import dict_row

from rag_pg.store.queries import Queries


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
            Queries(schema)("parents_missing"),
            {"collection": collection, "source_root": source_root},
        ).fetchall()
    found = [(str(r["path"]), str(r["parent_path"])) for r in rows]
    if paths is not None:
        wanted = set(paths)
        found = [item for item in found if item[0] in wanted]
    return found
