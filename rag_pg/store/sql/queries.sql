-- The store's SQL (ingest writes, runs, statistics, documents), loaded by name
-- (rag_pg/store/queries.py); the search's is in search.sql, re-embedding's in reembed.sql.
-- {schema} is an identifier bound by psycopg.sql; everything else is a named parameter.

-- name: document_states
SELECT path, content_hash, fingerprint, chunk_count, embed
FROM {schema}.document
WHERE collection = %(collection)s;

-- name: collection_get
SELECT name, model, dimension FROM {schema}.collection WHERE name = %(collection)s;

-- name: collection_upsert
INSERT INTO {schema}.collection (name, model, dimension, updated_at)
VALUES (%(collection)s, %(model)s, %(dimension)s, now())
ON CONFLICT (name) DO UPDATE
SET model = EXCLUDED.model, dimension = EXCLUDED.dimension, updated_at = EXCLUDED.updated_at;

-- name: document_upsert
INSERT INTO {schema}.document AS d
    (collection, path, shard_key, title, content_hash, front_matter, parent_path, level,
     node_type, embed, language, fingerprint, chunk_count, token_count, source_root, readers,
     indexed_at)
VALUES
    (%(collection)s, %(path)s, %(shard_key)s, %(title)s, %(content_hash)s, %(front_matter)s, %(parent_path)s,
     %(level)s, %(node_type)s, %(embed)s, %(language)s, %(fingerprint)s, %(chunk_count)s,
     %(token_count)s, %(source_root)s, %(readers)s, now())
ON CONFLICT (collection, path, shard_key) DO UPDATE SET
    title = EXCLUDED.title, content_hash = EXCLUDED.content_hash,
    front_matter = EXCLUDED.front_matter, parent_path = EXCLUDED.parent_path,
    level = EXCLUDED.level, node_type = EXCLUDED.node_type, embed = EXCLUDED.embed,
    language = EXCLUDED.language, fingerprint = EXCLUDED.fingerprint,
    chunk_count = EXCLUDED.chunk_count, token_count = EXCLUDED.token_count,
    source_root = EXCLUDED.source_root, readers = EXCLUDED.readers,
    indexed_at = EXCLUDED.indexed_at
RETURNING id;

-- name: chunks_delete_for_documents
DELETE FROM {schema}.chunk WHERE collection = %(collection)s AND document_id = ANY(%(ids)s);

-- name: chunk_ids_allocate
SELECT nextval(pg_get_serial_sequence(%(table)s, 'id')) FROM generate_series(1, %(n)s);

-- name: chunk_copy
COPY {schema}.chunk
    (id, document_id, collection, shard_key, position, section, anchor, content, token_count,
     content_hash, ts_config, line_start, line_end, readers)
FROM STDIN;

-- name: chunk_insert
INSERT INTO {schema}.chunk
    (id, document_id, collection, shard_key, position, section, anchor, content, token_count,
     content_hash, ts_config, line_start, line_end, readers)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::regconfig, %s, %s, %s);

-- name: vector_insert
INSERT INTO {schema}.chunk_vector (chunk_id, collection, shard_key, model, embedding, readers)
VALUES (%s, %s, %s, %s, %s, %s);

-- name: vector_copy
COPY {schema}.chunk_vector (chunk_id, collection, shard_key, model, embedding, readers)
FROM STDIN (FORMAT BINARY);

-- Under row-level security PostgreSQL refuses COPY into the table itself: the rows go to a
-- temporary table of the same columns, then in by one INSERT that the policies check.
-- name: chunk_stage_create
CREATE TEMPORARY TABLE IF NOT EXISTS ragpg_chunk_stage ON COMMIT DROP AS
SELECT id, document_id, collection, shard_key, position, section, anchor, content, token_count,
       content_hash, ts_config, line_start, line_end, readers
FROM {schema}.chunk WITH NO DATA;

-- name: chunk_stage_copy
COPY pg_temp.ragpg_chunk_stage
    (id, document_id, collection, shard_key, position, section, anchor, content, token_count,
     content_hash, ts_config, line_start, line_end, readers)
FROM STDIN;

-- name: chunk_stage_insert
INSERT INTO {schema}.chunk
    (id, document_id, collection, shard_key, position, section, anchor, content, token_count,
     content_hash, ts_config, line_start, line_end, readers)
SELECT id, document_id, collection, shard_key, position, section, anchor, content, token_count,
       content_hash, ts_config, line_start, line_end, readers
FROM pg_temp.ragpg_chunk_stage;

-- name: row_security_active
SELECT row_security_active(%s::regclass);

-- name: chunk_stage_clear
DELETE FROM pg_temp.ragpg_chunk_stage;

-- name: vector_stage_create
CREATE TEMPORARY TABLE IF NOT EXISTS ragpg_vector_stage ON COMMIT DROP AS
SELECT chunk_id, collection, shard_key, model, embedding, readers
FROM {schema}.chunk_vector WITH NO DATA;

-- name: vector_stage_copy
COPY pg_temp.ragpg_vector_stage (chunk_id, collection, shard_key, model, embedding, readers)
FROM STDIN (FORMAT BINARY);

-- name: vector_stage_insert
INSERT INTO {schema}.chunk_vector (chunk_id, collection, shard_key, model, embedding, readers)
SELECT chunk_id, collection, shard_key, model, embedding, readers FROM pg_temp.ragpg_vector_stage;

-- name: vector_stage_clear
DELETE FROM pg_temp.ragpg_vector_stage;

-- The term statistics of a first load (see migration 0014): the collection is marked pending
-- before its first chunk is written, so that the triggers leave its chunks out, and rebuilt
-- from its chunks in one transaction at the end of the load.
-- name: term_stats_pending
SELECT coalesce((SELECT term_stat_pending FROM {schema}.collection WHERE name = %(collection)s),
                false) AS pending;

-- name: term_stats_defer
INSERT INTO {schema}.collection (name, term_stat_pending) VALUES (%(collection)s, true)
ON CONFLICT (name) DO UPDATE SET term_stat_pending = true;

-- name: term_stats_memory
-- The count's hash table holds one entry per distinct lexeme: in memory, not spilled to disk in
-- batches (the server's 4 MB default holds about 40,000). Raised for this transaction only,
-- never lowered.
SELECT set_config('work_mem', '64MB', true)
WHERE pg_size_bytes('64MB') > pg_size_bytes(current_setting('work_mem'));

-- name: term_stats_drop
DELETE FROM {schema}.term_stat WHERE collection = %(collection)s;

-- name: chunk_stats_drop
DELETE FROM {schema}.chunk_stat WHERE collection = %(collection)s;

-- name: term_stats_count
INSERT INTO {schema}.term_stat (collection, ts_config, lexeme, df, max_tf, min_dl)
SELECT c.collection, c.ts_config, u.lexeme, count(*), max(cardinality(u.positions)),
       min(c.token_count)
FROM {schema}.chunk c CROSS JOIN LATERAL unnest(c.tsv) AS u
WHERE c.collection = %(collection)s
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3;

-- name: chunk_stats_count
INSERT INTO {schema}.chunk_stat (collection, ts_config, chunks, tokens)
SELECT c.collection, c.ts_config, count(*), sum(c.token_count)
FROM {schema}.chunk c WHERE c.collection = %(collection)s
GROUP BY 1, 2;

-- name: term_stats_resume
UPDATE {schema}.collection SET term_stat_pending = false WHERE name = %(collection)s;

-- name: documents_prune
DELETE FROM {schema}.document
WHERE collection = %(collection)s AND path = ANY(%(paths)s)
RETURNING path, chunk_count;

-- name: run_start
INSERT INTO {schema}.ingest_run (source_root, collection, mode, status, model, pid)
VALUES (%(source_root)s, %(collection)s, %(mode)s, 'running', %(model)s, pg_backend_pid())
RETURNING id;

-- name: analyze_tables
-- After a bulk load: fresh planner statistics (see Store.refresh_statistics).
ANALYZE {schema}.document, {schema}.chunk, {schema}.chunk_vector;

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

-- name: stats_totals
SELECT
    (SELECT count(*) FROM {schema}.document WHERE collection = %(collection)s) AS documents,
    (SELECT count(*) FROM {schema}.chunk WHERE collection = %(collection)s) AS chunks,
    (SELECT max(indexed_at) FROM {schema}.document WHERE collection = %(collection)s) AS last_indexed_at;

-- name: stats_models
SELECT model, max(vector_dims(embedding)) AS dimension, count(*) AS vectors
FROM {schema}.chunk_vector WHERE collection = %(collection)s
GROUP BY model ORDER BY model;

-- name: stats_collections
SELECT c.name, c.model, c.dimension, count(d.id) AS documents
FROM {schema}.collection c LEFT JOIN {schema}.document d ON d.collection = c.name
GROUP BY c.name, c.model, c.dimension ORDER BY c.name;

-- name: stats_last_run
SELECT id, started_at, finished_at, status, documents_seen, documents_indexed, documents_failed
FROM {schema}.ingest_run WHERE collection = %(collection)s ORDER BY id DESC LIMIT 1;

-- name: has_vectors
SELECT EXISTS (
    SELECT 1 FROM {schema}.chunk_vector WHERE collection = %(collection)s AND model = %(model)s
);

-- name: search_document_roots
SELECT path, source_root FROM {schema}.document WHERE collection = %(collection)s

-- name: eval_run_insert
INSERT INTO {schema}.eval_run
    (started_at, finished_at, questions_file, questions_sha256, question_count, collection,
     root, k, modes, metrics, settings)
VALUES (%(started_at)s, now(), %(questions_file)s, %(questions_sha256)s, %(question_count)s,
        %(collection)s, %(root)s, %(k)s, %(modes)s, %(metrics)s, %(settings)s)
RETURNING id

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

-- name: collection_exists
-- A collection exists once an ingest recorded it or wrote a document into it.
SELECT EXISTS (SELECT 1 FROM {schema}.collection WHERE name = %(collection)s)
    OR EXISTS (SELECT 1 FROM {schema}.document WHERE collection = %(collection)s) AS found;

-- name: collection_names
SELECT name FROM {schema}.collection
UNION
SELECT DISTINCT collection FROM {schema}.document
ORDER BY 1;

-- The statistics kept by the writer, where no trigger keeps them (a Citus cluster: a trigger's
-- transition tables do not reach the shards, rag_pg/store/distribution.py). The same
-- arithmetic as the triggers' function (migration 0014), over the chunks of the documents
-- being replaced: subtracted before they are deleted, added once the new ones are in. A
-- pending collection is left out, as by the triggers. Every statement names one collection
-- and joins on it, so a cluster runs it whole on the shard that holds it (Citus would run a
-- MERGE through the coordinator, shipping the configurations' object ids between nodes).
-- name: term_stats_subtract_documents
-- The documents' terms counted once; a term left at no chunk goes, the others lose their count.
WITH g AS MATERIALIZED (
    SELECT o.collection, o.ts_config, u.lexeme, count(*) AS df
    FROM {schema}.chunk o CROSS JOIN LATERAL unnest(o.tsv) AS u
    WHERE o.collection = %(collection)s AND o.document_id = ANY(%(ids)s)
      AND NOT (SELECT k.term_stat_pending FROM {schema}.collection k
               WHERE k.name = %(collection)s)
    GROUP BY 1, 2, 3
),
emptied AS (
    DELETE FROM {schema}.term_stat t USING g
    WHERE t.collection = %(collection)s AND t.collection = g.collection
      AND t.ts_config = g.ts_config AND t.lexeme = g.lexeme AND t.df <= g.df
)
UPDATE {schema}.term_stat t SET df = t.df - g.df
FROM g
WHERE t.collection = %(collection)s AND t.collection = g.collection AND t.ts_config = g.ts_config
  AND t.lexeme = g.lexeme AND t.df > g.df;

-- name: chunk_stats_subtract_documents
UPDATE {schema}.chunk_stat t SET chunks = t.chunks - g.chunks, tokens = t.tokens - g.tokens
FROM (SELECT o.collection, o.ts_config, count(*) AS chunks, sum(o.token_count) AS tokens
      FROM {schema}.chunk o
      WHERE o.collection = %(collection)s AND o.document_id = ANY(%(ids)s)
        AND NOT (SELECT k.term_stat_pending FROM {schema}.collection k
                 WHERE k.name = %(collection)s)
      GROUP BY 1, 2) g
WHERE t.collection = %(collection)s AND t.collection = g.collection AND t.ts_config = g.ts_config;

-- name: term_stats_add_documents
INSERT INTO {schema}.term_stat (collection, ts_config, lexeme, df, max_tf, min_dl)
SELECT n.collection, n.ts_config, u.lexeme, count(*), max(cardinality(u.positions)),
       min(n.token_count)
FROM {schema}.chunk n CROSS JOIN LATERAL unnest(n.tsv) AS u
WHERE n.collection = %(collection)s AND n.document_id = ANY(%(ids)s)
  AND NOT (SELECT k.term_stat_pending FROM {schema}.collection k WHERE k.name = %(collection)s)
GROUP BY 1, 2, 3
ON CONFLICT (collection, ts_config, lexeme) DO UPDATE
SET df = term_stat.df + EXCLUDED.df, max_tf = greatest(term_stat.max_tf, EXCLUDED.max_tf),
    min_dl = least(term_stat.min_dl, EXCLUDED.min_dl);

-- name: chunk_stats_add_documents
INSERT INTO {schema}.chunk_stat (collection, ts_config, chunks, tokens)
SELECT n.collection, n.ts_config, count(*), sum(n.token_count)
FROM {schema}.chunk n
WHERE n.collection = %(collection)s AND n.document_id = ANY(%(ids)s)
  AND NOT (SELECT k.term_stat_pending FROM {schema}.collection k WHERE k.name = %(collection)s)
GROUP BY 1, 2
ON CONFLICT (collection, ts_config) DO UPDATE
SET chunks = chunk_stat.chunks + EXCLUDED.chunks, tokens = chunk_stat.tokens + EXCLUDED.tokens;

-- name: documents_ids_for_paths
SELECT id FROM {schema}.document WHERE collection = %(collection)s AND path = ANY(%(paths)s);

-- name: term_stats_by_trigger
SELECT EXISTS (SELECT FROM pg_catalog.pg_trigger
               WHERE tgrelid = %(chunk)s::regclass AND tgname = 'term_stat_insert') AS kept;

-- On a cluster distributed by document the statistics are the collection's, in shards apart
-- from the chunks' (rag_pg.store.distribution): the writer reads the documents' counts (each
-- chunk's configuration as its position in %(ts_configs)s, never a regconfig value between
-- nodes) and writes them back by value (rag_pg.store.term_stats.SpreadStatistics). A
-- collection pending its first count gives nothing (the count at the end of the load has it).
-- name: term_stats_of_documents
SELECT array_position(%(ts_configs)s::regconfig[], c.ts_config) AS cfg, u.lexeme,
       count(*) AS df, max(cardinality(u.positions)) AS max_tf, min(c.token_count) AS min_dl
FROM {schema}.chunk c CROSS JOIN LATERAL unnest(c.tsv) AS u
WHERE c.collection = %(collection)s AND c.document_id = ANY(%(ids)s)
  AND NOT (SELECT k.term_stat_pending FROM {schema}.collection k WHERE k.name = %(collection)s)
GROUP BY 1, 2;

-- name: chunk_stats_of_documents
SELECT array_position(%(ts_configs)s::regconfig[], c.ts_config) AS cfg,
       count(*) AS chunks, sum(c.token_count) AS tokens
FROM {schema}.chunk c
WHERE c.collection = %(collection)s AND c.document_id = ANY(%(ids)s)
  AND NOT (SELECT k.term_stat_pending FROM {schema}.collection k WHERE k.name = %(collection)s)
GROUP BY 1;

-- name: term_stats_of_collection
SELECT array_position(%(ts_configs)s::regconfig[], c.ts_config) AS cfg, u.lexeme,
       count(*) AS df, max(cardinality(u.positions)) AS max_tf, min(c.token_count) AS min_dl
FROM {schema}.chunk c CROSS JOIN LATERAL unnest(c.tsv) AS u
WHERE c.collection = %(collection)s
GROUP BY 1, 2;

-- name: chunk_stats_of_collection
SELECT array_position(%(ts_configs)s::regconfig[], c.ts_config) AS cfg,
       count(*) AS chunks, sum(c.token_count) AS tokens
FROM {schema}.chunk c WHERE c.collection = %(collection)s
GROUP BY 1;

-- name: term_stats_add_values
INSERT INTO {schema}.term_stat AS t (collection, ts_config, lexeme, df, max_tf, min_dl)
VALUES {rows}
ON CONFLICT (collection, ts_config, lexeme) DO UPDATE
SET df = t.df + EXCLUDED.df, max_tf = greatest(t.max_tf, EXCLUDED.max_tf),
    min_dl = least(t.min_dl, EXCLUDED.min_dl);

-- name: term_stats_drop_values
-- The terms the documents held in every chunk that had them go; the others lose their count.
DELETE FROM {schema}.term_stat t
USING (VALUES {rows}) AS v (collection, ts_config, lexeme, df, max_tf, min_dl)
WHERE t.collection = {collection} AND t.collection = v.collection
  AND t.ts_config = v.ts_config AND t.lexeme = v.lexeme AND t.df <= v.df;

-- name: term_stats_subtract_values
UPDATE {schema}.term_stat t SET df = t.df - v.df
FROM (VALUES {rows}) AS v (collection, ts_config, lexeme, df, max_tf, min_dl)
WHERE t.collection = {collection} AND t.collection = v.collection
  AND t.ts_config = v.ts_config AND t.lexeme = v.lexeme;

-- name: chunk_stats_add_values
INSERT INTO {schema}.chunk_stat AS t (collection, ts_config, chunks, tokens)
VALUES {rows}
ON CONFLICT (collection, ts_config) DO UPDATE
SET chunks = t.chunks + EXCLUDED.chunks, tokens = t.tokens + EXCLUDED.tokens;

-- name: chunk_stats_subtract_values
UPDATE {schema}.chunk_stat t SET chunks = t.chunks - v.chunks, tokens = t.tokens - v.tokens
FROM (VALUES {rows}) AS v (collection, ts_config, chunks, tokens)
WHERE t.collection = {collection} AND t.collection = v.collection AND t.ts_config = v.ts_config;
