"""``ragpg check``: the index's invariants (SQLite's integrity_check, for a ragpg schema)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

# Each check is (code, description, SQL returning one row per violation: (subject, detail)).
CHECKS: tuple[tuple[str, str, str], ...] = (
    ("chunk_count", "a document's chunk_count differs from its chunks",
     """SELECT d.path, d.chunk_count || ' recorded, ' || count(c.id) || ' stored'
        FROM {s}.document d LEFT JOIN {s}.chunk c ON c.document_id = d.id
        GROUP BY d.id, d.collection HAVING d.chunk_count <> count(c.id)"""),
    ("positions", "a document's chunk positions are not 0..n-1",
     """SELECT d.path, 'positions ' || min(c.position) || '..' || max(c.position) || ' for ' || count(*)
        FROM {s}.document d JOIN {s}.chunk c ON c.document_id = d.id
        GROUP BY d.id, d.collection HAVING min(c.position) <> 0 OR max(c.position) <> count(*) - 1"""),
    ("missing_vector", "a chunk of an embedded document has no vector of its collection's model",
     """SELECT d.path, count(*) || ' chunks without a ' || col.model || ' vector'
        FROM {s}.document d
        JOIN {s}.collection col ON col.name = d.collection AND col.model IS NOT NULL
        JOIN {s}.chunk c ON c.document_id = d.id
        LEFT JOIN {s}.chunk_vector v ON v.chunk_id = c.id AND v.model = col.model
        WHERE d.embed AND v.chunk_id IS NULL GROUP BY d.path, col.model"""),
    ("dimension", "a vector's dimension differs from its collection's",
     """SELECT d.path, count(*) || ' vectors of ' || min(vector_dims(v.embedding)) || ' d'
        FROM {s}.chunk_vector v JOIN {s}.chunk c ON c.id = v.chunk_id
        JOIN {s}.document d ON d.id = c.document_id
        JOIN {s}.collection col ON col.name = d.collection AND col.model = v.model
        WHERE vector_dims(v.embedding) <> col.dimension GROUP BY d.path"""),
    ("tsvector", "a chunk has no tsvector",
     """SELECT d.path, count(*) || ' chunks' FROM {s}.chunk c JOIN {s}.document d ON d.id = c.document_id
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


def check(conn: psycopg.Connection[Any], schema: str = "ragpg") -> list[Problem]:
    """Every inconsistency found; an empty list means the index is sound."""
    problems: list[Problem] = []
    for code, description, query in CHECKS:
        stmt = sql.SQL(query).format(s=sql.Identifier(schema))
        for subject, detail in conn.execute(stmt).fetchall():
            problems.append(Problem(code, description, str(subject), str(detail)))
    return problems


def mark_for_repair(conn: psycopg.Connection[Any], problems: list[Problem], schema: str = "ragpg") -> int:
    """Make the next ingest re-index the documents concerned, even if their files are unchanged."""
    paths = sorted({p.subject for p in problems})
    if not paths:
        return 0
    stmt = sql.SQL(
        "UPDATE {s}.document SET fingerprint = 'needs-repair' WHERE path = ANY(%(paths)s)"
    ).format(s=sql.Identifier(schema))
    with conn.transaction():
        return conn.execute(stmt, {"paths": paths}).rowcount
