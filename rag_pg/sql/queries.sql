-- Runtime SQL, loaded by name (rag_pg/queries.py). {schema} is an identifier, {model}/{dim}
-- are literals bound by psycopg.sql; everything else is a named parameter.

-- name: document_states
SELECT path, content_hash, fingerprint, chunk_count, embed
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
DELETE FROM {schema}.chunk WHERE collection = %(collection)s AND document_id = ANY(%(ids)s);

-- name: chunk_ids_allocate
SELECT nextval(pg_get_serial_sequence(%(table)s, 'id')) FROM generate_series(1, %(n)s);

-- name: chunk_copy
COPY {schema}.chunk
    (id, document_id, collection, position, section, anchor, content, token_count, content_hash,
     ts_config)
FROM STDIN;

-- name: vector_copy
COPY {schema}.chunk_vector (chunk_id, collection, model, embedding) FROM STDIN (FORMAT BINARY);

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

-- name: search_vector_scope
-- Decides exact vs approximate search: the filters leave few enough vectors when at most
-- exact_limit chunks of embedded documents match. At most exact_limit + 1 document rows are
-- read (each counted document has at least one chunk), so an unfiltered query stays cheap.
vec_scope AS (
    SELECT coalesce(sum(s.chunk_count), 0) <= {exact_limit} AS exact
    FROM (SELECT d.chunk_count FROM {schema}.document d
          WHERE d.embed AND d.chunk_count > 0 AND {doc_filter}
          LIMIT {exact_limit} + 1) s
)

-- name: search_vector_scope_given
-- The caller already knows (an unfiltered search of a collection whose size it has read).
vec_scope AS (SELECT %(exact)s::boolean AS exact)

-- name: search_vector_leg
-- Vector candidates by cosine distance. Approximate branch: the model's partial HNSW index
-- with iterative scans (set per query), so that a filter still yields vec_fetch rows.
-- Exact branch (very selective filters): every matching vector, from the document side.
-- A one-time filter on vec_scope runs exactly one of the two branches.
-- Every join also equates the collection: on a Citus cluster sharded by collection the whole
-- statement then runs on the one shard that holds it (docs/scaling.md).
vec_ann AS MATERIALIZED (
    SELECT cv.chunk_id, c.document_id,
           (cv.embedding::{vkind}({dim})) <=> %(qvec)s::{vkind}({dim}) AS distance
    FROM {schema}.chunk_vector cv
    JOIN {schema}.chunk c ON c.id = cv.chunk_id AND c.collection = cv.collection
    JOIN {schema}.document d ON d.id = c.document_id AND d.collection = c.collection
    WHERE cv.collection = %(collection)s AND cv.model = {model} AND {doc_filter}
      AND NOT (SELECT exact FROM vec_scope)
    ORDER BY (cv.embedding::{vkind}({dim})) <=> %(qvec)s::{vkind}({dim})
    LIMIT {vec_fetch}
),
vec_exact AS MATERIALIZED (
    SELECT cv.chunk_id, c.document_id,
           (cv.embedding::{vkind}({dim})) <=> %(qvec)s::{vkind}({dim}) AS distance
    FROM {schema}.document d
    JOIN {schema}.chunk c ON c.document_id = d.id AND c.collection = d.collection
    JOIN {schema}.chunk_vector cv
      ON cv.chunk_id = c.id AND cv.collection = c.collection AND cv.model = {model}
    WHERE {doc_filter} AND (SELECT exact FROM vec_scope)
),
vec AS (
    SELECT u.chunk_id, u.distance,
           row_number() OVER (PARTITION BY u.document_id ORDER BY u.distance, u.chunk_id) AS doc_rank
    FROM (SELECT * FROM vec_ann UNION ALL SELECT * FROM vec_exact) u
),
vec_ranked AS (
    SELECT chunk_id, distance, row_number() OVER (ORDER BY distance, chunk_id) AS rank
    FROM vec WHERE doc_rank <= {per_document}
    ORDER BY distance, chunk_id
    LIMIT {candidates}
)

-- name: search_vector_collection
-- The common case, on its own: a whole collection (no other filter, no per-document cap),
-- large enough for the index. The HNSW scan filters on the vector rows' own collection, so
-- no candidate is joined to anything before the final k: as cheap as a bare pgvector query.
vec_ranked AS (
    SELECT a.chunk_id, a.distance, row_number() OVER (ORDER BY a.distance, a.chunk_id) AS rank
    FROM (SELECT cv.chunk_id, (cv.embedding::{vkind}({dim})) <=> %(qvec)s::{vkind}({dim}) AS distance
          FROM {schema}.chunk_vector cv
          WHERE cv.collection = %(collection)s AND cv.model = {model}
          ORDER BY (cv.embedding::{vkind}({dim})) <=> %(qvec)s::{vkind}({dim})
          LIMIT {vec_fetch}) a
)

-- name: search_keyword_leg
-- BM25 over the stored tsvector. Each chunk is matched and scored in its own text search
-- configuration (ragpg.french / english / simple: stemming, stop-words, accents folded), like
-- one field per language in Lucene: a term is (configuration, lexeme), and N, avgdl and df are
-- those of the collection's chunks in that configuration.
-- score = sum over query terms of qtf * ln(1 + (N - df + .5) / (df + .5))
--                                  * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
-- kw_terms: the query's lexemes per configuration, with their counts (repeats weigh, as in
--   Lucene and bm25s).
-- kw_match: every chunk of the collection holding one of its configuration's query lexemes
--   (GIN prefilter on the OR of the three tsqueries: one indexable condition; a lexeme found
--   only through another configuration's tsquery is dropped by the join on (cfg, lexeme) in
--   kw_scored_terms), with the frequency of each matched lexeme: setweight marks the query's
--   lexemes and ts_filter keeps them, so only matched lexemes are unnested, never a whole
--   tsvector. It spans the whole collection (filters apply afterwards) because it also yields
--   the document frequencies: df, N and avgdl come from the reader's own snapshot, so the
--   statistics can never be stale (docs/retrieval.md: why not a statistics table).
-- dl is the chunk's token_count and avgdl the collection's token_count / chunk_count per
--   language (columns the store maintains in the same transaction as the chunks).
kw_terms AS (
    SELECT t.cfg, t.language, u.lexeme, cardinality(u.positions) AS qtf
    FROM unnest(%(ts_configs)s::regconfig[], %(ts_languages)s::text[]) AS t(cfg, language)
    CROSS JOIN LATERAL unnest(to_tsvector(t.cfg, %(kw_text)s)) AS u
),
kw_match AS MATERIALIZED (
    SELECT c.id AS chunk_id, c.document_id, c.ts_config, c.token_count AS dl,
           {keep} AS keep, m.lexeme, cardinality(m.positions) AS tf
    FROM {schema}.chunk c
    {keep_join}
    CROSS JOIN LATERAL unnest(ts_filter(
        setweight(c.tsv, 'A', (SELECT array_agg(DISTINCT lexeme) FROM kw_terms)),
        ARRAY['a']::"char"[])) AS m
    WHERE c.collection = %(collection)s
      AND c.tsv @@ (websearch_to_tsquery((%(ts_configs)s::regconfig[])[1], %(kwq)s)
                    || websearch_to_tsquery((%(ts_configs)s::regconfig[])[2], %(kwq)s)
                    || websearch_to_tsquery((%(ts_configs)s::regconfig[])[3], %(kwq)s))
),
kw_scored_terms AS (
    SELECT m.chunk_id, m.document_id, m.keep, m.dl, m.tf, t.qtf, t.language,
           count(*) OVER (PARTITION BY t.cfg, t.lexeme) AS df
    FROM kw_match m
    JOIN kw_terms t ON t.cfg = m.ts_config AND t.lexeme = m.lexeme
),
kw_stats AS (
    SELECT language, sum(chunk_count)::float8 AS n,
           greatest(sum(token_count)::float8 / greatest(sum(chunk_count), 1), 1) AS avgdl
    FROM {schema}.document WHERE collection = %(collection)s
    GROUP BY language
),
kw AS (
    SELECT m.chunk_id, min(m.document_id) AS document_id,
           sum(m.qtf * ln(1 + (s.n - m.df + 0.5) / (m.df + 0.5))
               * m.tf * (%(k1)s + 1)
               / (m.tf + %(k1)s * (1 - %(b)s + %(b)s * m.dl / s.avgdl))) AS score
    FROM kw_scored_terms m
    JOIN kw_stats s ON s.language = m.language
    WHERE m.keep
    GROUP BY m.chunk_id
),
kw_ranked AS (
    SELECT chunk_id, score, row_number() OVER (ORDER BY score DESC, chunk_id) AS rank
    FROM (SELECT chunk_id, score,
                 row_number() OVER (PARTITION BY document_id ORDER BY score DESC, chunk_id) AS doc_rank
          FROM kw) capped
    WHERE doc_rank <= {per_document}
    ORDER BY score DESC, chunk_id
    LIMIT {candidates}
)

-- name: search_keyword_keep_join
-- kw_match's join to document, for the filters (a whole-collection search keeps every chunk).
JOIN {schema}.document d ON d.id = c.document_id AND d.collection = c.collection

-- The row counts (LIMITs, caps, exact_limit) are literals in the search statements, not
-- parameters: a prepared statement then gets a generic plan that knows them (with LIMIT $n
-- the generic plan sorts the whole table, so Postgres re-plans every execution instead).

-- name: search_select
-- Each candidate once, with the rank and raw score of each leg that found it, its provenance
-- and, when asked, its neighbour window and its related node's chunks (result shaping in the
-- same round trip; the Python side merges the texts), and the collection's current model.
SELECT c.id, cand.vrank, cand.distance, cand.krank, cand.kscore,
       c.position, c.section, c.anchor, c.content, c.token_count, c.content_hash,
       d.id, d.path, d.title, d.collection, {window} AS window, {expanded} AS expanded,
       g.model, g.dimension
FROM ({candidates_of}) cand
JOIN {schema}.chunk c ON c.id = cand.chunk_id AND c.collection = %(collection)s
JOIN {schema}.document d ON d.id = c.document_id AND d.collection = c.collection
-- the collection's model as this statement saw it: the caller checks it is the one it used
CROSS JOIN (SELECT model, dimension FROM {schema}.collection WHERE name = %(collection)s) g

-- name: search_candidates_hybrid
SELECT coalesce(v.chunk_id, k.chunk_id) AS chunk_id, v.rank AS vrank, v.distance,
       k.rank AS krank, k.score AS kscore
FROM vec_ranked v FULL JOIN kw_ranked k ON k.chunk_id = v.chunk_id

-- name: search_candidates_vector
SELECT v.chunk_id, v.rank AS vrank, v.distance, NULL::bigint AS krank, NULL::float8 AS kscore
FROM vec_ranked v

-- name: search_candidates_keyword
SELECT k.chunk_id, NULL::bigint AS vrank, NULL::float8 AS distance, k.rank AS krank,
       k.score AS kscore
FROM kw_ranked k

-- name: search_window
(SELECT jsonb_agg(jsonb_build_object('position', w.position, 'section', w.section,
                                     'anchor', w.anchor, 'content', w.content) ORDER BY w.position)
 FROM {schema}.chunk w
 WHERE w.document_id = c.document_id AND w.collection = c.collection
   AND w.position BETWEEN c.position - %(neighbours)s AND c.position + %(neighbours)s)

-- name: search_expand_parent
-- The parent node (document.parent_path, a path in the same collection), all its chunks in
-- order; computed once per document (first candidate row of each document).
CASE WHEN row_number() OVER (PARTITION BY d.id ORDER BY c.id) = 1 THEN (
    SELECT jsonb_build_object(
        'path', p.path, 'title', p.title,
        'chunks', coalesce((
            SELECT jsonb_agg(jsonb_build_object('position', pc.position, 'section', pc.section,
                                                'anchor', pc.anchor, 'content', pc.content)
                             ORDER BY pc.position)
            FROM {schema}.chunk pc
            WHERE pc.document_id = p.id AND pc.collection = p.collection), '[]'::jsonb))
    FROM {schema}.document p
    WHERE p.collection = d.collection
      AND p.path = ltrim(regexp_replace(d.parent_path, '^(\./)+', ''), '/')
) END

-- name: search_expand_children
-- The child nodes (documents whose parent_path is this document), in path order.
CASE WHEN row_number() OVER (PARTITION BY d.id ORDER BY c.id) = 1 THEN (
    SELECT jsonb_agg(jsonb_build_object(
        'path', ch.path, 'title', ch.title,
        'chunks', coalesce((
            SELECT jsonb_agg(jsonb_build_object('position', cc.position, 'section', cc.section,
                                                'anchor', cc.anchor, 'content', cc.content)
                             ORDER BY cc.position)
            FROM {schema}.chunk cc
            WHERE cc.document_id = ch.id AND cc.collection = ch.collection), '[]'::jsonb))
        ORDER BY ch.path)
    FROM {schema}.document ch
    WHERE ch.collection = d.collection
      AND ch.parent_path IN (d.path, './' || d.path, '/' || d.path)
) END

-- name: search_filter_collection
d.collection = %(collection)s

-- name: search_filter_path_prefix
(d.path = %(path_prefix)s OR starts_with(d.path, %(path_prefix_dir)s))

-- name: search_filter_front_matter
-- Every key must match: equal (containment for lists and objects), or, for a scalar, be one
-- of the items of a list value (tags: [a, b] matches tags=a).
NOT EXISTS (
    SELECT 1 FROM jsonb_each(%(front_matter)s::jsonb) AS f(key, value)
    WHERE NOT (d.front_matter @> jsonb_build_object(f.key, f.value)
               OR (jsonb_typeof(f.value) NOT IN ('array', 'object')
                   AND d.front_matter @> jsonb_build_object(f.key, jsonb_build_array(f.value))))
)

-- name: search_filter_level
d.level = %(level)s

-- name: search_filter_node_type
d.node_type = %(node_type)s

-- name: search_settings
-- Per query (SET LOCAL): the HNSW scan settings, and no sequential scan of chunk for the GIN
-- prefilter: the planner prices `tsv @@ query` like any operator and picks a seq scan that
-- detoasts every tsvector (measured 148 ms vs 3.6 ms for the bitmap scan on 20,650 chunks).
SELECT set_config('hnsw.ef_search', %(ef_search)s, true),
       set_config('hnsw.iterative_scan', %(iterative_scan)s, true),
       set_config('hnsw.max_scan_tuples', %(max_scan_tuples)s, true),
       set_config('enable_seqscan', %(enable_seqscan)s, true)

-- name: search_session_settings
-- The same HNSW settings kept on the session of one of ragpg's own pooled connections (only
-- HNSW scans read them), so that a vector search is a single autocommit statement.
SELECT set_config('hnsw.ef_search', %(ef_search)s, false),
       set_config('hnsw.iterative_scan', %(iterative_scan)s, false),
       set_config('hnsw.max_scan_tuples', %(max_scan_tuples)s, false)

-- name: search_check_pgvector
-- Startup check: pgvector >= 0.8 has iterative scans; an unknown or invalid value is ignored
-- silently, so read the setting back after the library is loaded.
SELECT (SELECT extversion FROM pg_extension WHERE extname = 'vector'),
       '[1]'::vector IS NOT NULL,
       set_config('hnsw.iterative_scan', 'relaxed_order', true),
       current_setting('hnsw.iterative_scan', true)

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

-- Model lifecycle (rag_pg/reembed.py): re-vectorise a collection beside its current vectors.
-- A chunk still to do is one of an embedding document without a vector of the target model.

-- name: reembed_pending_count
SELECT count(*)
FROM {schema}.chunk c JOIN {schema}.document d ON d.id = c.document_id
WHERE d.collection = %(collection)s AND d.embed
  AND NOT EXISTS (SELECT 1 FROM {schema}.chunk_vector cv
                  WHERE cv.chunk_id = c.id AND cv.model = %(model)s);

-- name: reembed_pending_chunks
-- Keyset pagination on the chunk id: each page starts after the last id of the previous one.
SELECT c.id, d.path, d.title, c.section, c.anchor, c.position, c.content, c.token_count,
       c.content_hash
FROM {schema}.chunk c JOIN {schema}.document d ON d.id = c.document_id
WHERE d.collection = %(collection)s AND d.embed AND c.id > %(after)s
  AND NOT EXISTS (SELECT 1 FROM {schema}.chunk_vector cv
                  WHERE cv.chunk_id = c.id AND cv.model = %(model)s)
ORDER BY c.id
LIMIT %(limit)s;

-- name: reembed_stage_create
CREATE TEMPORARY TABLE IF NOT EXISTS ragpg_reembed_stage
    (chunk_id bigint NOT NULL, embedding vector NOT NULL) ON COMMIT DELETE ROWS;

-- name: reembed_stage_copy
COPY pg_temp.ragpg_reembed_stage (chunk_id, embedding) FROM STDIN (FORMAT BINARY);

-- name: reembed_stage_insert
-- Chunks deleted meanwhile are skipped (the join), vectors already there are kept.
INSERT INTO {schema}.chunk_vector (chunk_id, collection, model, embedding)
SELECT s.chunk_id, c.collection, %(model)s, s.embedding
FROM pg_temp.ragpg_reembed_stage s JOIN {schema}.chunk c ON c.id = s.chunk_id
ON CONFLICT (chunk_id, model, collection) DO NOTHING;

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
DELETE FROM {schema}.chunk_vector cv
USING {schema}.chunk c, {schema}.document d
WHERE cv.chunk_id = c.id AND c.document_id = d.id
  AND d.collection = %(collection)s AND cv.model <> %(model)s;

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
SELECT DISTINCT cv.model
FROM {schema}.chunk_vector cv
JOIN {schema}.chunk c ON c.id = cv.chunk_id
JOIN {schema}.document d ON d.id = c.document_id
WHERE d.collection = %(collection)s
ORDER BY cv.model;
