"""Views, column comments and SQL functions for BI tools.

The views are the published, least-privilege surface of the index: BI users (and the
reader role of ``ragpg roles create-reader``) read them, never the base tables, so the
tables can evolve while a view's columns stay a contract (pinned by tests/test_sql_surface.py).
Views run with their owner's rights (PostgreSQL's default), which is what lets a role with
SELECT on the views alone read them.

``keyword_search`` is SECURITY DEFINER with a fixed ``search_path``: it reads the base
tables as the schema owner, so the reader needs EXECUTE on it and nothing on the tables.
It never parses user text as tsquery syntax: the words are taken from ``to_tsvector`` (the
text search parser accepts any text), quoted, and OR-ed through ``websearch_to_tsquery``.
Migration 0003 may replace its body (BM25) with CREATE OR REPLACE: its arguments and result
columns are a contract. ``score`` is double precision so that a finer ranking fits.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from psycopg import sql

from rag_pg.migrations import ddl

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

VIEWS = """
CREATE VIEW {s}.documents_v AS
SELECT d.id, d.collection, d.path, d.title, d.language, d.node_type, d.level, d.parent_path,
       d.embed, d.chunk_count, d.token_count, d.content_hash, d.front_matter, d.source_root,
       d.indexed_at
FROM {s}.document d;

CREATE VIEW {s}.chunks_v AS
SELECT c.id AS chunk_id, c.document_id, d.collection, d.path, d.title, c.section, c.anchor,
       CASE WHEN c.anchor = '' THEN d.path ELSE d.path || '#' || c.anchor END AS citation,
       c.position, c.content, c.token_count, c.content_hash, d.language,
       EXISTS (SELECT 1 FROM {s}.chunk_vector v WHERE v.chunk_id = c.id) AS has_vector,
       d.indexed_at
FROM {s}.chunk c
JOIN {s}.document d ON d.id = c.document_id;

CREATE VIEW {s}.ingest_runs_v AS
SELECT r.id, r.collection, r.source_root, r.mode, r.status, r.started_at, r.finished_at,
       extract(epoch FROM r.finished_at - r.started_at)::double precision AS duration_seconds,
       r.documents_seen, r.documents_indexed, r.documents_skipped, r.documents_failed,
       r.documents_deleted, r.chunks_upserted, r.chunks_unchanged, r.chunks_deleted,
       r.embedding_calls, r.tokens_embedded, r.model,
       CASE WHEN jsonb_typeof(r.errors) = 'array' THEN jsonb_array_length(r.errors) ELSE 0 END
           AS error_count,
       r.errors
FROM {s}.ingest_run r;

CREATE VIEW {s}.corpus_stats_v AS
WITH names AS (
    SELECT name AS collection FROM {s}.collection
    UNION
    SELECT DISTINCT collection FROM {s}.document
),
docs AS (
    SELECT collection, count(*) AS documents, max(indexed_at) AS last_indexed_at
    FROM {s}.document GROUP BY collection
),
chunks AS (
    SELECT d.collection, count(*) AS chunks, sum(c.token_count) AS tokens
    FROM {s}.chunk c JOIN {s}.document d ON d.id = c.document_id
    GROUP BY d.collection
),
vectors AS (
    SELECT d.collection, count(*) AS vectors, array_agg(DISTINCT v.model ORDER BY v.model) AS models
    FROM {s}.chunk_vector v
    JOIN {s}.chunk c ON c.id = v.chunk_id
    JOIN {s}.document d ON d.id = c.document_id
    GROUP BY d.collection
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

# Each chunk is matched with the query parsed by the chunk's own configuration (the one
# its tsvector was built with), so a stop word of the document's language never matches;
# the OR of the three parses is a superset that the GIN index can serve first.
KEYWORD_SEARCH = """
CREATE FUNCTION {s}.keyword_search(query text, k integer, collection text DEFAULT 'default')
RETURNS TABLE (path text, title text, section text, anchor text, "position" integer,
               score double precision, content text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $fn$
WITH words AS (
    SELECT w.lexeme
    FROM unnest(to_tsvector('pg_catalog.simple'::regconfig,
                            left(coalesce(keyword_search.query, ''), 65536))) AS w
    ORDER BY w.positions[1], w.lexeme
    LIMIT 64
),
expr AS (
    SELECT string_agg('"' || replace(words.lexeme, '"', ' ') || '"', ' or ') AS q FROM words
),
parsed AS (
    SELECT websearch_to_tsquery({fr}::regconfig, expr.q) AS fr,
           websearch_to_tsquery({en}::regconfig, expr.q) AS en,
           websearch_to_tsquery({si}::regconfig, expr.q) AS si
    FROM expr
    WHERE expr.q IS NOT NULL AND coalesce(keyword_search.k, 0) > 0
),
matched AS (
    SELECT d.path, d.title, c.section, c.anchor, c.position, c.content, c.tsv,
           CASE c.ts_config WHEN {fr}::regconfig THEN p.fr
                            WHEN {en}::regconfig THEN p.en
                            ELSE p.si END AS lq
    FROM parsed p
    JOIN {s}.chunk c ON c.tsv @@ (p.fr || p.en || p.si)
    JOIN {s}.document d ON d.id = c.document_id
    WHERE d.collection = keyword_search.collection
)
SELECT m.path, m.title, m.section, m.anchor, m.position,
       ts_rank(m.tsv, m.lq)::double precision AS score, m.content
FROM matched m
WHERE m.tsv @@ m.lq
ORDER BY score DESC, m.path, m.position
LIMIT least(greatest(coalesce(keyword_search.k, 0), 0), 1000)
$fn$;

REVOKE ALL ON FUNCTION {s}.keyword_search(text, integer, text) FROM PUBLIC;
"""

COMMENTS: dict[str, tuple[str, dict[str, str]]] = {
    "documents_v": (
        "One row per indexed Markdown file (all collections). Published for BI tools: "
        "columns are a stable contract.",
        {
            "id": "Document id (stable while the file stays indexed; chunks_v.document_id).",
            "collection": "Collection (workspace) the file was indexed into.",
            "path": "File path relative to the ingested root, with / separators.",
            "title": "Title: front-matter title, else the first H1, else the file name.",
            "language": "Text search configuration used for the file: french, english or simple.",
            "node_type": "source for an original text, summary for a summary node (front-matter).",
            "level": "Summary-tree level: 0 = source text, higher = more condensed (front-matter).",
            "parent_path": "Path of the parent node in a summary tree, or NULL.",
            "embed": "False when the file is indexed for keyword search only (front-matter embed: false).",
            "chunk_count": "Number of chunks (passages) the file was split into.",
            "token_count": "Estimated tokens of the file's chunks: ceil(words x 1.33).",
            "content_hash": "sha256 (hex) of the raw file bytes: unchanged files are skipped.",
            "front_matter": "The YAML front-matter block, as a JSON object.",
            "source_root": "Root directory the file was ingested from.",
            "indexed_at": "When this version of the file was written to the index.",
        },
    ),
    "chunks_v": (
        "One row per passage, with its provenance (file, section, anchor, position); "
        "no vector column. Published for BI tools: columns are a stable contract.",
        {
            "chunk_id": "Chunk id (changes when its document is re-indexed).",
            "document_id": "Id of the chunk's document (documents_v.id).",
            "collection": "Collection of the chunk's document.",
            "path": "File path of the chunk's document, relative to the ingested root.",
            "title": "Title of the chunk's document.",
            "section": "Title of the heading section the chunk belongs to.",
            "anchor": "URL anchor (GitHub-style slug) of the section; '' before the first heading.",
            "citation": "path#anchor, ready to cite (just the path before the first heading).",
            "position": "Order of the chunk in its document, from 0.",
            "content": "The passage text (without its heading line).",
            "token_count": "Estimated tokens of the passage: ceil(words x 1.33).",
            "content_hash": "sha256 (hex) of the passage text.",
            "language": "Text search configuration of the chunk's document.",
            "has_vector": "True when at least one embedding model has vectorised the chunk.",
            "indexed_at": "When the chunk's document was last written to the index.",
        },
    ),
    "ingest_runs_v": (
        "One row per `ragpg ingest` run, newest with the highest id. Published for BI "
        "tools: columns are a stable contract.",
        {
            "id": "Run id, increasing.",
            "collection": "Collection the run indexed into.",
            "source_root": "Root directory that was walked.",
            "mode": "incremental (changed files only) or full (--full: every file reprocessed).",
            "status": "running, completed, partial (some documents failed) or failed (the run stopped).",
            "started_at": "When the run started.",
            "finished_at": "When the run finished; NULL while it runs (or if it died).",
            "duration_seconds": "finished_at - started_at in seconds; NULL while running.",
            "documents_seen": "Candidate Markdown files found by the walk.",
            "documents_indexed": "Documents written (new or changed).",
            "documents_skipped": "Documents unchanged since the previous run (not re-embedded).",
            "documents_failed": "Documents that could not be indexed (see errors).",
            "documents_deleted": "Documents removed by --prune.",
            "chunks_upserted": "Chunks written.",
            "chunks_unchanged": "Chunks of skipped documents.",
            "chunks_deleted": "Chunks removed (replaced or pruned).",
            "embedding_calls": "Requests made to the embedding provider.",
            "tokens_embedded": "Estimated tokens sent to the embedding provider.",
            "model": "Embedding model of the run, NULL for keyword-only.",
            "error_count": "Number of entries in errors.",
            "errors": "Failed documents: JSON array of objects with path, error and kind.",
        },
    ),
    "corpus_stats_v": (
        "One row per collection: size of the index and freshness. Published for BI tools: "
        "columns are a stable contract.",
        {
            "collection": "Collection (workspace) name.",
            "model": "Embedding model the collection is bound to; NULL when keyword-only.",
            "dimension": "Vector dimension of that model; NULL when keyword-only.",
            "documents": "Indexed documents.",
            "chunks": "Indexed chunks (passages).",
            "tokens": "Estimated tokens over all chunks: ceil(words x 1.33) each.",
            "vectors": "Stored vectors, all models together.",
            "models": "Embedding models that have vectors in the collection, sorted.",
            "last_indexed_at": "Most recent time a document of the collection was written.",
            "last_run_started_at": "Start of the most recent ingest run of the collection.",
            "last_run_status": "Status of that run: running, completed, partial or failed.",
        },
    ),
}

FUNCTION_COMMENT = (
    "Keyword search over chunks, best first: keyword_search(query, k, collection default "
    "'default') -> (path, title, section, anchor, position, score, content). Any text is "
    "accepted (operators and quotes are ignored; words are OR-ed, stemmed in the chunk's "
    "language, accents folded); a query of stop words only returns no rows; k is capped at "
    "1000. Runs with the schema owner's rights (SECURITY DEFINER): grant EXECUTE, not table access."
)


def _comments(schema: str) -> sql.Composed:
    out: list[sql.Composable] = []
    nsp = sql.Identifier(schema)
    for view, (about, columns) in COMMENTS.items():
        out.append(sql.SQL("COMMENT ON VIEW {}.{} IS {};").format(
            nsp, sql.Identifier(view), sql.Literal(about)))
        for column, text in columns.items():
            out.append(sql.SQL("COMMENT ON COLUMN {}.{}.{} IS {};").format(
                nsp, sql.Identifier(view), sql.Identifier(column), sql.Literal(text)))
    out.append(sql.SQL("COMMENT ON FUNCTION {}.keyword_search(text, integer, text) IS {};").format(
        nsp, sql.Literal(FUNCTION_COMMENT)))
    return sql.SQL("\n").join(out)


def upgrade(schema: str = "ragpg") -> None:
    ddl.run(VIEWS, schema)
    ddl.run(
        KEYWORD_SEARCH,
        schema,
        fr=sql.Literal(ddl.qualified(schema, "french")),
        en=sql.Literal(ddl.qualified(schema, "english")),
        si=sql.Literal(ddl.qualified(schema, "simple")),
    )
    ddl.driver().execute(_comments(schema))


def downgrade(schema: str = "ragpg") -> None:
    ddl.run(
        """
DROP FUNCTION IF EXISTS {s}.keyword_search(text, integer, text);
DROP VIEW IF EXISTS {s}.corpus_stats_v;
DROP VIEW IF EXISTS {s}.ingest_runs_v;
DROP VIEW IF EXISTS {s}.chunks_v;
DROP VIEW IF EXISTS {s}.documents_v;
""",
        schema,
    )
