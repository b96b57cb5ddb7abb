-- Model lifecycle (rag_pg/admin/reembed.py, through Store), loaded by name (rag_pg/store/queries.py):
-- re-vectorise a collection beside its current vectors.
-- A chunk still to do is one of an embedding document without a vector of the target model.

-- name: reembed_pending_count
SELECT count(*)
FROM {schema}.chunk c
JOIN {schema}.document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key
WHERE c.collection = %(collection)s AND d.embed
  AND NOT EXISTS (SELECT 1 FROM {schema}.chunk_vector cv
                  WHERE cv.chunk_id = c.id AND cv.collection = c.collection AND cv.shard_key = c.shard_key
                    AND cv.model = %(model)s);

-- name: reembed_pending_chunks
-- Keyset pagination on the chunk id: each page starts after the last id of the previous one.
SELECT c.id, d.path, d.title, c.section, c.anchor, c.position, c.content, c.token_count,
       c.content_hash
FROM {schema}.chunk c
JOIN {schema}.document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key
WHERE c.collection = %(collection)s AND d.embed AND c.id > %(after)s
  AND NOT EXISTS (SELECT 1 FROM {schema}.chunk_vector cv
                  WHERE cv.chunk_id = c.id AND cv.collection = c.collection AND cv.shard_key = c.shard_key
                    AND cv.model = %(model)s)
ORDER BY c.id
LIMIT %(limit)s;

-- name: reembed_stage_create
CREATE TEMPORARY TABLE IF NOT EXISTS ragpg_reembed_stage
    (chunk_id bigint NOT NULL, embedding vector NOT NULL) ON COMMIT DELETE ROWS;

-- name: reembed_stage_copy
COPY pg_temp.ragpg_reembed_stage (chunk_id, embedding) FROM STDIN (FORMAT BINARY);

-- name: reembed_stage_insert
-- Chunks deleted meanwhile are skipped (the join), vectors already there are kept.
INSERT INTO {schema}.chunk_vector (chunk_id, collection, shard_key, model, embedding, readers)
SELECT s.chunk_id, c.collection, c.shard_key, %(model)s, s.embedding, c.readers
FROM pg_temp.ragpg_reembed_stage s JOIN {schema}.chunk c ON c.id = s.chunk_id
ON CONFLICT (chunk_id, model, collection, shard_key) DO NOTHING;

-- name: reembed_lock_collection
SELECT model, dimension FROM {schema}.collection WHERE name = %(collection)s FOR UPDATE;

-- name: reembed_set_model
UPDATE {schema}.collection
SET model = %(model)s, dimension = %(dimension)s, updated_at = now()
WHERE name = %(collection)s;

-- name: reembed_refingerprint
-- The fingerprint names the model (store.fingerprint): without this, the next ingest would
-- take every document for changed and embed it all again.
UPDATE {schema}.document
SET fingerprint = replace(fingerprint, %(old_part)s, %(new_part)s)
WHERE collection = %(collection)s AND embed AND strpos(fingerprint, %(old_part)s) > 0;

-- name: reembed_drop_other_vectors
-- A vector row carries its chunk's collection: no join needed.
DELETE FROM {schema}.chunk_vector
WHERE collection = %(collection)s AND model <> %(model)s;

-- name: reembed_model_in_use
SELECT EXISTS (SELECT 1 FROM {schema}.chunk_vector WHERE model = %(model)s)
    OR EXISTS (SELECT 1 FROM {schema}.collection WHERE model = %(model)s);

-- name: reembed_run_current
SELECT id, source_model, source_dimension, target_model, target_dimension, status,
       chunks_embedded
FROM {schema}.reembed_run
WHERE collection = %(collection)s AND status IN ('running', 'switched')
ORDER BY id DESC LIMIT 1;

-- name: reembed_run_start
INSERT INTO {schema}.reembed_run
    (collection, source_model, source_dimension, target_model, target_dimension, keep_old,
     chunks_total)
VALUES (%(collection)s, %(source_model)s, %(source_dimension)s, %(target_model)s,
        %(target_dimension)s, %(keep_old)s, %(chunks_total)s)
RETURNING id;

-- name: reembed_run_resume
UPDATE {schema}.reembed_run
SET resumed = resumed + 1, keep_old = %(keep_old)s, chunks_total = %(chunks_total)s,
    updated_at = now()
WHERE id = %(id)s;

-- name: reembed_run_progress
UPDATE {schema}.reembed_run
SET chunks_embedded = chunks_embedded + %(embedded)s, chunks_failed = %(failed)s,
    updated_at = now()
WHERE id = %(id)s;

-- name: reembed_run_status
UPDATE {schema}.reembed_run
SET status = %(status)s, error = %(error)s, updated_at = now(),
    finished_at = CASE WHEN %(status)s IN ('completed', 'failed', 'abandoned') THEN now() END
WHERE id = %(id)s;

-- name: reembed_stage_clear
DELETE FROM pg_temp.ragpg_reembed_stage;

-- name: reembed_models
SELECT DISTINCT model FROM {schema}.chunk_vector WHERE collection = %(collection)s
ORDER BY model;
