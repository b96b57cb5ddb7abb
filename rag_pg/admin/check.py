"""``ragpg check``: the index's invariants (SQLite's integrity_check, for a ragpg schema)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from rag_pg.admin.roles import drifted_readers

# Each check is (code, description, SQL returning one row per violation: subject, detail).
CHECKS: tuple[tuple[str, str, str], ...] = (
    ("chunk_count", "a document's chunk_count differs from its chunks",
     """SELECT d.path AS subject, d.chunk_count || ' recorded, ' || count(c.id) || ' stored' AS detail
        FROM {s}.document d LEFT JOIN {s}.chunk c ON c.document_id = d.id AND c.collection = d.collection
        GROUP BY d.id, d.collection HAVING d.chunk_count <> count(c.id)"""),
    ("positions", "a document's chunk positions are not 0..n-1",
     """SELECT d.path AS subject,
               'positions ' || min(c.position) || '..' || max(c.position) || ' for ' || count(*) AS detail
        FROM {s}.document d JOIN {s}.chunk c ON c.document_id = d.id AND c.collection = d.collection
        GROUP BY d.id, d.collection HAVING min(c.position) <> 0 OR max(c.position) <> count(*) - 1"""),
    ("missing_vector", "a chunk of an embedded document has no vector of its collection's model",
     """SELECT d.path AS subject, count(*) || ' chunks without a ' || col.model || ' vector' AS detail
        FROM {s}.document d
        JOIN {s}.collection col ON col.name = d.collection AND col.model IS NOT NULL
        JOIN {s}.chunk c ON c.document_id = d.id AND c.collection = d.collection
        LEFT JOIN {s}.chunk_vector v
          ON v.chunk_id = c.id AND v.collection = c.collection AND v.model = col.model
        WHERE d.embed AND v.chunk_id IS NULL GROUP BY d.path, col.model"""),
    ("dimension", "a vector's dimension differs from its collection's",
     """SELECT d.path AS subject, count(*) || ' vectors of ' || min(vector_dims(v.embedding)) || ' d' AS detail
        FROM {s}.chunk_vector v JOIN {s}.chunk c ON c.id = v.chunk_id AND c.collection = v.collection
        JOIN {s}.document d ON d.id = c.document_id AND d.collection = c.collection
        JOIN {s}.collection col ON col.name = d.collection AND col.model = v.model
        WHERE vector_dims(v.embedding) <> col.dimension GROUP BY d.path"""),
    ("content_hash", "a chunk's text differs from the text it was indexed with",
     """SELECT d.path AS subject, count(*) || ' chunks changed since they were indexed' AS detail
        FROM {s}.chunk c JOIN {s}.document d ON d.id = c.document_id AND d.collection = c.collection
        WHERE c.content_hash <> encode(sha256(convert_to(c.content, 'UTF8')), 'hex')
        GROUP BY d.path"""),
    ("zero_vector", "a vector is all zeros (it has no direction: no search can find its chunk)",
     """SELECT d.path AS subject, count(*) || ' zero vectors' AS detail
        FROM {s}.chunk_vector v JOIN {s}.chunk c ON c.id = v.chunk_id AND c.collection = v.collection
        JOIN {s}.document d ON d.id = c.document_id AND d.collection = c.collection
        WHERE vector_norm(v.embedding) = 0 GROUP BY d.path"""),
    # Other models' vectors are legitimate only around a re-embed (its source and target).
    ("foreign_vector", "a vector of a model that the collection neither uses nor re-embeds to",
     """SELECT d.path AS subject, count(*) || ' vectors of ' || min(v.model) AS detail
        FROM {s}.chunk_vector v JOIN {s}.chunk c ON c.id = v.chunk_id AND c.collection = v.collection
        JOIN {s}.document d ON d.id = c.document_id AND d.collection = c.collection
        JOIN {s}.collection col ON col.name = d.collection
        WHERE v.model IS DISTINCT FROM col.model
          AND NOT EXISTS (SELECT 1 FROM {s}.reembed_run r WHERE r.collection = d.collection
                          AND v.model IN (r.source_model, r.target_model))
        GROUP BY d.path"""),
    ("tsvector", "a chunk has no tsvector",
     """SELECT d.path AS subject, count(*) || ' chunks' AS detail FROM {s}.chunk c JOIN {s}.document d ON d.id = c.document_id AND d.collection = c.collection
        WHERE c.tsv IS NULL GROUP BY d.path"""),
)


@dataclass(frozen=True, slots=True)
class Problem:
    code: str
    description: str
    subject: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "description": self.description, "subject": self.subject,
                "detail": self.detail}


READER_SETTINGS = "reader_settings"


def check(conn: psycopg.Connection[Any], schema: str = "ragpg") -> list[Problem]:
    """Every inconsistency found; an empty list means the index is sound."""
    problems: list[Problem] = []
    with conn.cursor(row_factory=dict_row) as cur:
        for code, description, query in CHECKS:
            stmt = sql.SQL(query).format(s=sql.Identifier(schema))
            for row in cur.execute(stmt).fetchall():
                problems.append(Problem(code, description, str(row["subject"]), str(row["detail"])))
    for role, detail in drifted_readers(conn, schema):
        problems.append(Problem(
            READER_SETTINGS,
            "a reader role changed its own defaults: rerun `ragpg roles create-reader` for it",
            role, detail))
    return problems


def mark_for_repair(conn: psycopg.Connection[Any], problems: list[Problem], schema: str = "ragpg") -> int:
    """Make the next ingest re-index the documents concerned, even if their files are unchanged."""
    paths = sorted({p.subject for p in problems if p.code != READER_SETTINGS})  # roles are no paths
    if not paths:
        return 0
    stmt = sql.SQL(
        "UPDATE {s}.document SET fingerprint = 'needs-repair' WHERE path = ANY(%(paths)s)"
    ).format(s=sql.Identifier(schema))
    with conn.transaction():
        return conn.execute(stmt, {"paths": paths}).rowcount
