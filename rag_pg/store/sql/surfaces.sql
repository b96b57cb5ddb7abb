-- What the surfaces read beside the search (the service's catalogue, the summary tree, the
-- sidecar export, the schema check), loaded by name (rag_pg/store/queries.py).
-- {schema} is an identifier bound by psycopg.sql; everything else is a named parameter.

-- name: table_exists
SELECT to_regclass(%(table)s) IS NOT NULL AS found;

-- name: catalog_runs
SELECT id, collection, source_root, mode, status, started_at, finished_at, duration_seconds,
       documents_seen, documents_indexed, documents_skipped, documents_failed, documents_deleted,
       chunks_upserted, chunks_unchanged, chunks_deleted, embedding_calls, tokens_embedded, model,
       error_count, errors
FROM {schema}.ingest_runs_v
WHERE (%(collection)s::text IS NULL OR collection = %(collection)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: tree_nodes
SELECT path, title, parent_path, level, node_type, embed, chunk_count, token_count
FROM {schema}.document WHERE collection = %(collection)s ORDER BY path;

-- name: tree_roots
SELECT DISTINCT source_root FROM {schema}.document
WHERE collection = %(collection)s AND source_root IS NOT NULL;

-- name: export_documents
SELECT id, collection, shard_key, path, title, content_hash, parent_path, level, node_type, embed, language,
       fingerprint, chunk_count, front_matter, source_root
FROM {schema}.document WHERE collection = %(collection)s ORDER BY path;

-- name: export_chunks
SELECT c.position, c.section, c.anchor, c.content, c.token_count, v.embedding::real[] AS embedding
FROM {schema}.chunk c LEFT JOIN {schema}.chunk_vector v
  ON v.chunk_id = c.id AND v.collection = c.collection AND v.shard_key = c.shard_key AND v.model = %(model)s
-- The collection and the shard key route the read to the document's shard on a cluster.
WHERE c.document_id = %(document_id)s AND c.collection = %(collection)s
  AND c.shard_key = %(shard_key)s
ORDER BY c.position;

-- name: check_sample
-- Chunks drawn at random with their vector of their collection's model (ragpg check --sample).
SELECT d.path, d.title, c.position, c.section, c.anchor, c.content, c.token_count,
       c.content_hash, col.model, col.dimension, v.embedding::real[] AS embedding
FROM {schema}.chunk c
JOIN {schema}.document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key
JOIN {schema}.collection col ON col.name = c.collection
JOIN {schema}.chunk_vector v
  ON v.chunk_id = c.id AND v.collection = c.collection AND v.shard_key = c.shard_key AND v.model = col.model
ORDER BY random()
LIMIT %(n)s;
