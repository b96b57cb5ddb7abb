"""The BI views join a chunk to its document and vectors within the chunk's collection.

``chunks_v`` and ``corpus_stats_v`` joined chunks, documents and vectors on their ids alone.
Every row of those tables carries its collection, and the ids are unique only together with
it on a database that distributes the tables by collection (Citus): a join that does not
equate the collections cannot run there. ``chunks_v`` gains the collection in its join and
its vector lookup. ``corpus_stats_v`` no longer joins at all: each table is counted per
collection on its own (a chunk's collection is its document's, a vector's its chunk's: the
foreign keys include it), and the per-collection counts meet on the collection. The views
keep their columns (CREATE OR REPLACE keeps their grants and comments).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from rag_pg.migrations import ddl

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE OR REPLACE VIEW {s}.chunks_v AS
SELECT c.id AS chunk_id, c.document_id, d.collection, d.path, d.title, c.section, c.anchor,
       CASE WHEN c.anchor = '' THEN d.path ELSE d.path || '#' || c.anchor END AS citation,
       c.position, c.content, c.token_count, c.content_hash, d.language,
       EXISTS (SELECT 1 FROM {s}.chunk_vector v
               WHERE v.chunk_id = c.id AND v.collection = c.collection) AS has_vector,
       d.indexed_at
FROM {s}.chunk c
JOIN {s}.document d ON d.id = c.document_id AND d.collection = c.collection;

CREATE OR REPLACE VIEW {s}.corpus_stats_v AS
WITH docs AS (
    SELECT d.collection, count(*) AS documents, max(d.indexed_at) AS last_indexed_at
    FROM {s}.document d GROUP BY d.collection
),
names AS (
    SELECT name AS collection FROM {s}.collection
    UNION
    SELECT docs.collection FROM docs
),
chunks AS (
    SELECT c.collection, count(*) AS chunks, sum(c.token_count) AS tokens
    FROM {s}.chunk c GROUP BY c.collection
),
vectors AS (
    SELECT v.collection, count(*) AS vectors, array_agg(DISTINCT v.model ORDER BY v.model) AS models
    FROM {s}.chunk_vector v GROUP BY v.collection
),
last_run AS (
    SELECT DISTINCT ON (collection) collection, started_at, status
    FROM {s}.ingest_run ORDER BY collection, started_at DESC, id DESC
)
SELECT n.collection, col.model, col.dimension,
       coalesce(docs.documents, 0)::bigint AS documents,
       coalesce(chunks.chunks, 0)::bigint AS chunks,
       coalesce(chunks.tokens, 0)::bigint AS tokens,
       coalesce(vectors.vectors, 0)::bigint AS vectors,
       coalesce(vectors.models, ARRAY[]::text[]) AS models,
       docs.last_indexed_at,
       last_run.started_at AS last_run_started_at,
       last_run.status AS last_run_status
FROM names n
LEFT JOIN {s}.collection col ON col.name = n.collection
LEFT JOIN docs ON docs.collection = n.collection
LEFT JOIN chunks ON chunks.collection = n.collection
LEFT JOIN vectors ON vectors.collection = n.collection
LEFT JOIN last_run ON last_run.collection = n.collection;
"""


def _previous_views() -> str:
    """0002's view definitions, as replacements."""
    views: str = ddl.revision_module("0002_sql_surface.py").VIEWS
    return views.replace("CREATE VIEW", "CREATE OR REPLACE VIEW")


def upgrade(schema: str = "ragpg") -> None:
    ddl.run(UPGRADE, schema)


def downgrade(schema: str = "ragpg") -> None:
    ddl.run(_previous_views(), schema)
