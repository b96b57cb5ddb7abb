-- Runtime SQL, loaded by name (rag_pg/queries.py). {schema} is an identifier, {model}/{dim}
-- are literals bound by psycopg.sql; everything else is a named parameter.

-- name: document_states
SELECT path, content_hash, fingerprint, chunk_count
FROM {schema}.document
WHERE collection = %(collection)s;

-- name: collection_get
SELECT name, model, dimension FROM {schema}.collection WHERE name = %(collection)s;

-- name: collection_upsert
INSERT INTO {schema}.collection (name, model, dimension)
VALUES (%(collection)s, %(model)s, %(dimension)s)
ON CONFLICT (name) DO UPDATE
SET model = EXCLUDED.model, dimension = EXCLUDED.dimension, updated_at = now();

-- name: document_upsert
INSERT INTO {schema}.document AS d
    (collection, path, title, content_hash, front_matter, parent_path, level, node_type,
     embed, language, fingerprint, chunk_count, token_count, source_root, indexed_at)
VALUES
    (%(collection)s, %(path)s, %(title)s, %(content_hash)s, %(front_matter)s, %(parent_path)s,
     %(level)s, %(node_type)s, %(embed)s, %(language)s, %(fingerprint)s, %(chunk_count)s,
     %(token_count)s, %(source_root)s, now())
ON CONFLICT (collection, path) DO UPDATE SET
    title = EXCLUDED.title, content_hash = EXCLUDED.content_hash,
    front_matter = EXCLUDED.front_matter, parent_path = EXCLUDED.parent_path,
    level = EXCLUDED.level, node_type = EXCLUDED.node_type, embed = EXCLUDED.embed,
    language = EXCLUDED.language, fingerprint = EXCLUDED.fingerprint,
    chunk_count = EXCLUDED.chunk_count, token_count = EXCLUDED.token_count,
    source_root = EXCLUDED.source_root, indexed_at = now()
RETURNING id;

-- name: chunks_delete_for_documents
DELETE FROM {schema}.chunk WHERE document_id = ANY(%(ids)s);

-- name: chunk_ids_allocate
SELECT nextval(pg_get_serial_sequence(%(table)s, 'id')) FROM generate_series(1, %(n)s);

-- name: chunk_copy
COPY {schema}.chunk
    (id, document_id, position, section, anchor, content, token_count, content_hash, ts_config)
FROM STDIN;

-- name: vector_copy
COPY {schema}.chunk_vector (chunk_id, model, embedding) FROM STDIN (FORMAT BINARY);

-- name: documents_prune
DELETE FROM {schema}.document
WHERE collection = %(collection)s AND path = ANY(%(paths)s)
RETURNING path, chunk_count;

-- name: run_start
INSERT INTO {schema}.ingest_run (source_root, collection, mode, status, model, pid)
VALUES (%(source_root)s, %(collection)s, %(mode)s, 'running', %(model)s, pg_backend_pid())
RETURNING id;

-- name: run_finish
UPDATE {schema}.ingest_run SET
    finished_at = now(), status = %(status)s,
    documents_seen = %(documents_seen)s, documents_indexed = %(documents_indexed)s,
    documents_skipped = %(documents_skipped)s, documents_failed = %(documents_failed)s,
    documents_deleted = %(documents_deleted)s, chunks_upserted = %(chunks_upserted)s,
    chunks_unchanged = %(chunks_unchanged)s, chunks_deleted = %(chunks_deleted)s,
    embedding_calls = %(embedding_calls)s, tokens_embedded = %(tokens_embedded)s,
    errors = %(errors)s
WHERE id = %(id)s;

-- name: lock_holder
SELECT a.pid, a.application_name, a.state, a.backend_start
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %(classid)s AND l.objid = %(objid)s
LIMIT 1;

-- name: stats_totals
SELECT
    (SELECT count(*) FROM {schema}.document WHERE collection = %(collection)s) AS documents,
    (SELECT count(*) FROM {schema}.chunk c JOIN {schema}.document d ON d.id = c.document_id
      WHERE d.collection = %(collection)s) AS chunks,
    (SELECT max(indexed_at) FROM {schema}.document WHERE collection = %(collection)s) AS last_indexed_at;

-- name: stats_models
SELECT cv.model, max(vector_dims(cv.embedding)) AS dimension, count(*) AS vectors
FROM {schema}.chunk_vector cv
JOIN {schema}.chunk c ON c.id = cv.chunk_id
JOIN {schema}.document d ON d.id = c.document_id
WHERE d.collection = %(collection)s
GROUP BY cv.model ORDER BY cv.model;

-- name: stats_collections
SELECT c.name, c.model, c.dimension, count(d.id) AS documents
FROM {schema}.collection c LEFT JOIN {schema}.document d ON d.collection = c.name
GROUP BY c.name, c.model, c.dimension ORDER BY c.name;

-- name: stats_last_run
SELECT id, started_at, finished_at, status, documents_seen, documents_indexed, documents_failed
FROM {schema}.ingest_run WHERE collection = %(collection)s ORDER BY id DESC LIMIT 1;

-- name: has_vectors
SELECT EXISTS (
    SELECT 1 FROM {schema}.chunk_vector cv
    JOIN {schema}.chunk c ON c.id = cv.chunk_id
    JOIN {schema}.document d ON d.id = c.document_id
    WHERE d.collection = %(collection)s AND cv.model = %(model)s
);

-- name: search_vector_leg
-- Vector candidates (cosine distance), filtered by collection and path prefix.
vec AS MATERIALIZED (
    SELECT cv.chunk_id, (cv.embedding::vector({dim})) <=> %(qvec)s::vector({dim}) AS distance
    FROM {schema}.chunk_vector cv
    JOIN {schema}.chunk c ON c.id = cv.chunk_id
    JOIN {schema}.document d ON d.id = c.document_id
    WHERE cv.model = {model} AND d.collection = %(collection)s
      AND (%(path_prefix)s::text IS NULL OR d.path = %(path_prefix)s
           OR starts_with(d.path, %(path_prefix)s || '/'))
    ORDER BY (cv.embedding::vector({dim})) <=> %(qvec)s::vector({dim})
    LIMIT %(candidates)s
),
vec_ranked AS (
    SELECT chunk_id, distance, row_number() OVER (ORDER BY distance, chunk_id) AS rank FROM vec
)

-- name: search_keyword_leg
-- Keyword candidates: OR of the query's words, stemmed in French, English and unstemmed.
query AS (
    SELECT websearch_to_tsquery(%(cfg_french)s::regconfig, %(kwq)s)
        || websearch_to_tsquery(%(cfg_english)s::regconfig, %(kwq)s)
        || websearch_to_tsquery(%(cfg_simple)s::regconfig, %(kwq)s) AS q
),
kw AS MATERIALIZED (
    SELECT c.id AS chunk_id, ts_rank(c.tsv, query.q) AS score
    FROM query, {schema}.chunk c
    JOIN {schema}.document d ON d.id = c.document_id
    WHERE c.tsv @@ query.q AND d.collection = %(collection)s
      AND (%(path_prefix)s::text IS NULL OR d.path = %(path_prefix)s
           OR starts_with(d.path, %(path_prefix)s || '/'))
    ORDER BY score DESC, c.id
    LIMIT %(candidates)s
),
kw_ranked AS (
    SELECT chunk_id, score, row_number() OVER (ORDER BY score DESC, chunk_id) AS rank FROM kw
)

-- name: search_select_hybrid
SELECT c.id, v.rank, v.distance, k.rank, k.score,
       c.position, c.section, c.anchor, c.content, c.token_count, c.content_hash,
       d.id, d.path, d.title, d.collection
FROM vec_ranked v
FULL JOIN kw_ranked k ON k.chunk_id = v.chunk_id
JOIN {schema}.chunk c ON c.id = coalesce(v.chunk_id, k.chunk_id)
JOIN {schema}.document d ON d.id = c.document_id

-- name: search_select_vector
SELECT c.id, v.rank, v.distance, NULL::bigint, NULL::real,
       c.position, c.section, c.anchor, c.content, c.token_count, c.content_hash,
       d.id, d.path, d.title, d.collection
FROM vec_ranked v
JOIN {schema}.chunk c ON c.id = v.chunk_id
JOIN {schema}.document d ON d.id = c.document_id

-- name: search_select_keyword
SELECT c.id, NULL::bigint, NULL::double precision, k.rank, k.score,
       c.position, c.section, c.anchor, c.content, c.token_count, c.content_hash,
       d.id, d.path, d.title, d.collection
FROM kw_ranked k
JOIN {schema}.chunk c ON c.id = k.chunk_id
JOIN {schema}.document d ON d.id = c.document_id

-- name: document_by_path
SELECT id, collection, path, title, content_hash, front_matter, parent_path, level, node_type,
       embed, language, chunk_count, token_count, indexed_at
FROM {schema}.document WHERE collection = %(collection)s AND path = %(path)s;

-- name: document_by_id
SELECT id, collection, path, title, content_hash, front_matter, parent_path, level, node_type,
       embed, language, chunk_count, token_count, indexed_at
FROM {schema}.document WHERE id = %(id)s;

-- name: document_chunks
SELECT id, position, section, anchor, content, token_count, content_hash
FROM {schema}.chunk WHERE document_id = %(document_id)s ORDER BY position;
