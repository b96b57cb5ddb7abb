"""``ragpg check``: the index's invariants (SQLite's integrity_check, for a ragpg schema)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from rag_pg.store.queries import Queries
from rag_pg.store.roles import drifted_readers

# Each check: (code, description); its statement ``check_<code>`` (store/sql/integrity.sql)
# returns one row per violation: subject, detail.
CHECKS: tuple[tuple[str, str], ...] = (
    ("chunk_count", "a document's chunk_count differs from its chunks"),
    ("positions", "a document's chunk positions are not 0..n-1"),
    ("missing_vector", "a chunk of an embedded document has no vector of its collection's model"),
    ("dimension", "a vector's dimension differs from its collection's"),
    ("content_hash", "a chunk's section or text differs from what it was indexed with"),
    ("zero_vector", "a vector is all zeros (it has no direction: no search can find its chunk)"),
    ("foreign_vector", "a vector of a model that the collection neither uses nor re-embeds to"),
    ("term_stat", "a collection's per-term statistics differ from its chunks"),
    ("chunk_stat", "a collection's chunk count or total length differs from its chunks"),
    ("tsvector", "a chunk has no tsvector"),
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
# A sampled chunk whose model the configured embedder does not make (nothing to repair).
SAMPLE_UNCHECKED = "sample_unchecked"
# Problems whose subject is a collection: repaired by counting its statistics again.
STATISTICS = ("term_stat", "chunk_stat")


def check(conn: psycopg.Connection[Any], schema: str = "ragpg",
          collection: str | None = None) -> list[Problem]:
    """Every inconsistency found (in one collection, or in all); an empty list means the
    index is sound."""
    problems: list[Problem] = []
    q = Queries(schema)
    with conn.cursor(row_factory=dict_row) as cur:
        for code, description in CHECKS:
            for row in cur.execute(q(f"check_{code}"), {"collection": collection}).fetchall():
                problems.append(Problem(code, description, str(row["subject"]), str(row["detail"])))
    for role, detail in drifted_readers(conn, schema):
        problems.append(Problem(
            READER_SETTINGS,
            "a reader role changed its own defaults: rerun `ragpg roles create-reader` for it",
            role, detail))
    return problems


def mark_for_repair(conn: psycopg.Connection[Any], problems: list[Problem], schema: str = "ragpg",
                    collection: str | None = None) -> int:
    """Make the next ingest re-index the documents concerned, even if their files are
    unchanged, and count again the statistics of the collections concerned (marked pending:
    searches do without them meanwhile). Returns the documents and collections marked."""
    paths = sorted({p.subject for p in problems
                    if p.code not in (READER_SETTINGS, SAMPLE_UNCHECKED, *STATISTICS)})
    collections = sorted({p.subject for p in problems if p.code in STATISTICS})
    q = Queries(schema)
    marked = 0
    with conn.transaction():
        if paths:
            marked += conn.execute(q("repair_documents"),
                                   {"paths": paths, "collection": collection}).rowcount
        if collections:
            marked += conn.execute(q("repair_statistics"), {"names": collections}).rowcount
    return marked
