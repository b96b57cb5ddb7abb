"""The index's invariants (RELIABILITY H5), checked after every fault test."""

from __future__ import annotations

from typing import Any

import psycopg


def violations(url: str, schema: str = "ragpg") -> list[str]:
    """Every way the index is inconsistent; an empty list means all invariants hold."""
    found: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        def q(sql: str) -> list[tuple[Any, ...]]:
            return conn.execute(sql.replace("{s}", schema)).fetchall()  # type: ignore[arg-type]

        for (path,) in q("""SELECT d.path FROM {s}.document d
                             WHERE d.chunk_count <> (SELECT count(*) FROM {s}.chunk c WHERE c.document_id = d.id)"""):
            found.append(f"I1 {path}: chunk_count differs from its chunks")
        for (path,) in q("""SELECT d.path FROM {s}.document d JOIN {s}.chunk c ON c.document_id = d.id
                             GROUP BY d.id, d.path HAVING max(c.position) <> count(*) - 1 OR min(c.position) <> 0"""):
            found.append(f"I3 {path}: positions are not 0..n-1")
        for (path, n) in q("""SELECT d.path, count(*) FROM {s}.document d
                               JOIN {s}.collection col ON col.name = d.collection AND col.model IS NOT NULL
                               JOIN {s}.chunk c ON c.document_id = d.id
                               LEFT JOIN {s}.chunk_vector v ON v.chunk_id = c.id AND v.model = col.model
                               WHERE d.embed AND v.chunk_id IS NULL GROUP BY d.path"""):
            found.append(f"I1 {path}: {n} chunks without a vector")
        for (n,) in q("SELECT count(*) FROM {s}.chunk WHERE tsv IS NULL"):
            if n:
                found.append(f"I4 {n} chunks without tsvector")
        for (n,) in q("""SELECT count(*) FROM {s}.chunk_vector v JOIN {s}.chunk c ON c.id = v.chunk_id
                         JOIN {s}.document d ON d.id = c.document_id
                         JOIN {s}.collection col ON col.name = d.collection
                         WHERE vector_dims(v.embedding) <> col.dimension"""):
            if n:
                found.append(f"I2 {n} vectors of the wrong dimension")
        for (n,) in q("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid()"):
            if n:
                found.append(f"I5 {n} advisory locks left")
    return found


def dump(url: str, schema: str = "ragpg") -> list[tuple[Any, ...]]:
    """A canonical dump for convergence checks (I6)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            f"""SELECT d.collection, d.path, d.content_hash, c.position, md5(c.content),
                       md5(round_vec) FROM "{schema}".document d
                JOIN "{schema}".chunk c ON c.document_id = d.id
                LEFT JOIN LATERAL (SELECT string_agg(round(x::numeric, 4)::text, ',') AS round_vec
                                   FROM "{schema}".chunk_vector v,
                                        unnest(v.embedding::real[]) AS x
                                   WHERE v.chunk_id = c.id) vv ON true
                ORDER BY 1, 2, 4"""  # noqa: S608 - test helper, schema is a constant
        ).fetchall()
