-- ``ragpg check``: each statement returns one row per violation (subject, detail), by the
-- name check_<code>; then what --repair writes. Loaded by name (rag_pg/store/queries.py).
-- %(collection)s: one collection, or NULL for all (on a Citus cluster one collection's
-- checks run on its worker alone).

-- name: check_chunk_count
-- a document's chunk_count differs from its chunks
SELECT d.path AS subject, d.chunk_count || ' recorded, ' || count(c.id) || ' stored' AS detail
FROM {schema}.document d LEFT JOIN {schema}.chunk c ON c.document_id = d.id AND c.collection = d.collection AND c.shard_key = d.shard_key
WHERE (%(collection)s::text IS NULL OR d.collection = %(collection)s)
GROUP BY d.id, d.collection, d.shard_key HAVING d.chunk_count <> count(c.id);

-- name: check_positions
-- a document's chunk positions are not 0..n-1
SELECT d.path AS subject,
'positions ' || min(c.position) || '..' || max(c.position) || ' for ' || count(*) AS detail
FROM {schema}.document d JOIN {schema}.chunk c ON c.document_id = d.id AND c.collection = d.collection AND c.shard_key = d.shard_key
WHERE (%(collection)s::text IS NULL OR d.collection = %(collection)s)
GROUP BY d.id, d.collection, d.shard_key HAVING min(c.position) <> 0 OR max(c.position) <> count(*) - 1;

-- name: check_missing_vector
-- a chunk of an embedded document has no vector of its collection's model
SELECT d.path AS subject, count(*) || ' chunks without a ' || col.model || ' vector' AS detail
FROM {schema}.document d
JOIN {schema}.collection col ON col.name = d.collection AND col.model IS NOT NULL
JOIN {schema}.chunk c ON c.document_id = d.id AND c.collection = d.collection AND c.shard_key = d.shard_key
LEFT JOIN {schema}.chunk_vector v
ON v.chunk_id = c.id AND v.collection = c.collection AND v.shard_key = c.shard_key AND v.model = col.model
WHERE d.embed AND v.chunk_id IS NULL AND (%(collection)s::text IS NULL OR d.collection = %(collection)s) GROUP BY d.path, col.model;

-- name: check_dimension
-- a vector's dimension differs from its collection's
SELECT d.path AS subject, count(*) || ' vectors of ' || min(vector_dims(v.embedding)) || ' d' AS detail
FROM {schema}.chunk_vector v JOIN {schema}.chunk c ON c.id = v.chunk_id AND c.collection = v.collection AND c.shard_key = v.shard_key
JOIN {schema}.document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key
JOIN {schema}.collection col ON col.name = d.collection AND col.model = v.model
WHERE vector_dims(v.embedding) <> col.dimension AND (%(collection)s::text IS NULL OR d.collection = %(collection)s) GROUP BY d.path;

-- name: check_content_hash
-- a chunk's section or text differs from what it was indexed with
SELECT d.path AS subject, count(*) || ' chunks changed since they were indexed' AS detail
FROM {schema}.chunk c JOIN {schema}.document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key
WHERE c.content_hash <> encode(sha256(convert_to(c.section || E'\n' || c.content, 'UTF8')), 'hex')
  AND (%(collection)s::text IS NULL OR d.collection = %(collection)s)
GROUP BY d.path;

-- name: check_zero_vector
-- a vector is all zeros (it has no direction: no search can find its chunk)
SELECT d.path AS subject, count(*) || ' zero vectors' AS detail
FROM {schema}.chunk_vector v JOIN {schema}.chunk c ON c.id = v.chunk_id AND c.collection = v.collection AND c.shard_key = v.shard_key
JOIN {schema}.document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key
WHERE vector_norm(v.embedding) = 0 AND (%(collection)s::text IS NULL OR d.collection = %(collection)s) GROUP BY d.path;

-- name: check_foreign_vector
-- Other models' vectors are legitimate only around a re-embed (its source and target).
-- The runs are read in a CTE: on a Citus cluster they stay on the coordinator (a local table,
-- which Citus joins to the shards only from a subquery it runs first); one server inlines it.
-- a vector of a model that the collection neither uses nor re-embeds to
WITH runs AS (SELECT r.collection, r.source_model, r.target_model FROM {schema}.reembed_run r)
SELECT d.path AS subject, count(*) || ' vectors of ' || min(v.model) AS detail
FROM {schema}.chunk_vector v JOIN {schema}.chunk c ON c.id = v.chunk_id AND c.collection = v.collection AND c.shard_key = v.shard_key
JOIN {schema}.document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key
JOIN {schema}.collection col ON col.name = d.collection
WHERE v.model IS DISTINCT FROM col.model AND (%(collection)s::text IS NULL OR d.collection = %(collection)s)
AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.collection = d.collection
AND v.model IN (r.source_model, r.target_model))
GROUP BY d.path;

-- name: check_term_stat
-- A collection whose statistics are pending is not followed by them (store/term_stats.py).
-- The bounds may be looser than a recount after deletes, never tighter.
-- a collection's per-term statistics differ from its chunks
WITH followed AS (SELECT c.* FROM {schema}.chunk c WHERE (%(collection)s::text IS NULL OR c.collection = %(collection)s) AND NOT EXISTS (
SELECT 1 FROM {schema}.collection k WHERE k.name = c.collection AND k.term_stat_pending)),
counted AS (SELECT c.collection, c.ts_config, u.lexeme, count(*) AS df,
max(cardinality(u.positions)) AS max_tf, min(c.token_count) AS min_dl
FROM followed c CROSS JOIN LATERAL unnest(c.tsv) AS u GROUP BY 1, 2, 3),
kept AS (SELECT t.* FROM {schema}.term_stat t WHERE (%(collection)s::text IS NULL OR t.collection = %(collection)s) AND NOT EXISTS (
SELECT 1 FROM {schema}.collection k WHERE k.name = t.collection AND k.term_stat_pending))
SELECT coalesce(a.collection, t.collection) AS subject,
count(*) || ' terms whose df or bounds differ from a recount' AS detail
FROM counted a FULL JOIN kept t
ON t.collection = a.collection AND t.ts_config = a.ts_config AND t.lexeme = a.lexeme
WHERE a.df IS DISTINCT FROM t.df OR t.max_tf < a.max_tf OR t.min_dl > a.min_dl
GROUP BY 1;

-- name: check_chunk_stat
-- a collection's chunk count or total length differs from its chunks
WITH counted AS (SELECT c.collection, c.ts_config, count(*) AS chunks,
sum(c.token_count) AS tokens
FROM {schema}.chunk c WHERE (%(collection)s::text IS NULL OR c.collection = %(collection)s) GROUP BY 1, 2),
kept AS (SELECT t.* FROM {schema}.chunk_stat t
         WHERE (t.chunks <> 0 OR t.tokens <> 0) AND (%(collection)s::text IS NULL OR t.collection = %(collection)s))
SELECT coalesce(c.collection, t.collection) AS subject,
coalesce(t.chunks, 0) || ' chunks recorded, ' || coalesce(c.chunks, 0) || ' stored ('
|| coalesce(c.ts_config, t.ts_config)::text || ')' AS detail
FROM counted c FULL JOIN kept t ON t.collection = c.collection AND t.ts_config = c.ts_config
WHERE (c.chunks IS DISTINCT FROM t.chunks OR c.tokens IS DISTINCT FROM t.tokens)
AND NOT EXISTS (SELECT 1 FROM {schema}.collection k
WHERE k.name = coalesce(c.collection, t.collection) AND k.term_stat_pending);

-- name: check_tsvector
-- a chunk has no tsvector
SELECT d.path AS subject, count(*) || ' chunks' AS detail FROM {schema}.chunk c JOIN {schema}.document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key
WHERE c.tsv IS NULL AND (%(collection)s::text IS NULL OR d.collection = %(collection)s) GROUP BY d.path;

-- name: repair_documents
UPDATE {schema}.document SET fingerprint = 'needs-repair'
WHERE path = ANY(%(paths)s) AND (%(collection)s::text IS NULL OR collection = %(collection)s);

-- name: repair_statistics
INSERT INTO {schema}.collection (name, term_stat_pending) SELECT unnest(%(names)s::text[]), true
ON CONFLICT (name) DO UPDATE SET term_stat_pending = true;
