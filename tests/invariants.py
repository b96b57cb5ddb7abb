"""The index's invariants (RELIABILITY H5), checked after every fault test."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from rag_pg.store.integrity import check


def violations(url: str, schema: str = "ragpg") -> list[str]:
    """Every way the index is inconsistent; an empty list means all invariants hold."""
    with psycopg.connect(url, autocommit=True) as conn:
        found = [f"{p.code} {p.subject}: {p.detail}" for p in check(conn, schema)]
        (locks,) = conn.execute(
            # this database's only: other tests may share the server
            "SELECT count(*) FROM pg_locks l JOIN pg_database db ON db.oid = l.database"
            " WHERE l.locktype = 'advisory' AND l.pid <> pg_backend_pid() AND db.datname = current_database()"
        ).fetchone() or (0,)
        if locks:
            found.append(f"I5 {locks} advisory locks left")
    return found


def dump(url: str, schema: str = "ragpg") -> list[dict[str, Any]]:
    """A canonical dump for convergence checks (I6)."""
    with psycopg.connect(url, autocommit=True) as conn, conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            f"""SELECT d.collection, d.path, d.content_hash, c.position, md5(c.content) AS content,
                       md5(round_vec) AS vector FROM "{schema}".document d
                JOIN "{schema}".chunk c ON c.document_id = d.id
                LEFT JOIN LATERAL (SELECT string_agg(round(x::numeric, 4)::text, ',') AS round_vec
                                   FROM "{schema}".chunk_vector v,
                                        unnest(v.embedding::real[]) AS x
                                   WHERE v.chunk_id = c.id) vv ON true
                ORDER BY 1, 2, 4"""  # noqa: S608 - test helper, schema is a constant
        ).fetchall()
