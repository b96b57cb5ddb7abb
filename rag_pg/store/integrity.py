"""``ragpg check``: the index's invariants (SQLite's integrity_check, for a ragpg schema)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from rag_pg.store.roles import drifted_readers

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
    ("content_hash", "a chunk's section or text differs from what it was indexed with",
     """SELECT d.path AS subject, count(*) || ' chunks changed since they were indexed' AS detail
        FROM {s}.chunk c JOIN {s}.document d ON d.id = c.document_id AND d.collection = c.collection
        WHERE c.content_hash <> encode(sha256(convert_to(c.section || E'\\n' || c.content, 'UTF8')), 'hex')
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
    # A collection whose statistics are pending is not followed by them (rag_pg.store.term_stats).
    # The bounds may be looser than a recount after deletes, never tighter.
    ("term_stat", "a collection's per-term statistics differ from its chunks",
     """WITH followed AS (SELECT c.* FROM {s}.chunk c WHERE NOT EXISTS (
            SELECT 1 FROM {s}.collection k WHERE k.name = c.collection AND k.term_stat_pending)),
        counted AS (SELECT c.collection, c.ts_config, u.lexeme, count(*) AS df,
                           max(cardinality(u.positions)) AS max_tf, min(c.token_count) AS min_dl
                    FROM followed c CROSS JOIN LATERAL unnest(c.tsv) AS u GROUP BY 1, 2, 3),
        kept AS (SELECT t.* FROM {s}.term_stat t WHERE NOT EXISTS (
            SELECT 1 FROM {s}.collection k WHERE k.name = t.collection AND k.term_stat_pending))
        SELECT coalesce(a.collection, t.collection) AS subject,
               count(*) || ' terms whose df or bounds differ from a recount' AS detail
        FROM counted a FULL JOIN kept t
          ON t.collection = a.collection AND t.ts_config = a.ts_config AND t.lexeme = a.lexeme
        WHERE a.df IS DISTINCT FROM t.df OR t.max_tf < a.max_tf OR t.min_dl > a.min_dl
        GROUP BY 1"""),
    ("chunk_stat", "a collection's chunk count or total length differs from its chunks",
     """WITH counted AS (SELECT c.collection, c.ts_config, count(*) AS chunks,
                                sum(c.token_count) AS tokens
                         FROM {s}.chunk c GROUP BY 1, 2),
        kept AS (SELECT t.* FROM {s}.chunk_stat t WHERE t.chunks <> 0 OR t.tokens <> 0)
        SELECT coalesce(c.collection, t.collection) AS subject,
               coalesce(t.chunks, 0) || ' chunks recorded, ' || coalesce(c.chunks, 0) || ' stored ('
                   || coalesce(c.ts_config, t.ts_config)::text || ')' AS detail
        FROM counted c FULL JOIN kept t ON t.collection = c.collection AND t.ts_config = c.ts_config
        WHERE (c.chunks IS DISTINCT FROM t.chunks OR c.tokens IS DISTINCT FROM t.tokens)
          AND NOT EXISTS (SELECT 1 FROM {s}.collection k
                          WHERE k.name = coalesce(c.collection, t.collection) AND k.term_stat_pending)"""),
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
# A sampled chunk whose model the configured embedder does not make (nothing to repair).
SAMPLE_UNCHECKED = "sample_unchecked"
# Problems whose subject is a collection: repaired by counting its statistics again.
STATISTICS = ("term_stat", "chunk_stat")


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
    """Make the next ingest re-index the documents concerned, even if their files are
    unchanged, and count again the statistics of the collections concerned (marked pending:
    searches do without them meanwhile). Returns the documents and collections marked."""
    paths = sorted({p.subject for p in problems
                    if p.code not in (READER_SETTINGS, SAMPLE_UNCHECKED, *STATISTICS)})
    collections = sorted({p.subject for p in problems if p.code in STATISTICS})
    s = sql.Identifier(schema)
    marked = 0
    with conn.transaction():
        if paths:
            marked += conn.execute(sql.SQL(
                "UPDATE {s}.document SET fingerprint = 'needs-repair' WHERE path = ANY(%(paths)s)"
            ).format(s=s), {"paths": paths}).rowcount
        if collections:
            marked += conn.execute(sql.SQL(
                "INSERT INTO {s}.collection (name, term_stat_pending) SELECT unnest(%(names)s::text[]), true"
                " ON CONFLICT (name) DO UPDATE SET term_stat_pending = true"
            ).format(s=s), {"names": collections}).rowcount
    return marked
