WITH vec_scope AS (
    SELECT coalesce(sum(s.chunk_count), 0)
               <= greatest(5000, floor(%(exact_share)s * coalesce((SELECT CASE WHEN g.term_stat_pending
                      THEN (SELECT sum(d.chunk_count) FROM "ragpg".document d
                            WHERE d.collection = %(collection)s)
                      ELSE (SELECT sum(s.chunks) FROM "ragpg".chunk_stat s
                            WHERE s.collection = %(collection)s) END
          FROM "ragpg".collection g WHERE g.name = %(collection)s), 0)::float8))
           AND count(*) <= 5000
           AS exact
    FROM (SELECT d.chunk_count FROM "ragpg".document d
          WHERE d.embed AND d.chunk_count > 0 AND d.collection = %(collection)s
      AND (d.path = %(path_prefix)s
 OR (d.path COLLATE "C" >= %(path_prefix_dir)s AND d.path COLLATE "C" < %(path_prefix_end)s))
      AND NOT EXISTS (
    SELECT 1 FROM jsonb_each(%(front_matter)s::jsonb) AS f(key, value)
    WHERE NOT (d.front_matter @> jsonb_build_object(f.key, f.value)
               OR (jsonb_typeof(f.value) NOT IN ('array', 'object')
                   AND d.front_matter @> jsonb_build_object(f.key, jsonb_build_array(f.value))))
)
      AND d.level = %(level)s
      AND d.node_type = %(node_type)s
          LIMIT 5000 + 1) s
),
vec_ann AS MATERIALIZED (
    SELECT cv.chunk_id, c.document_id,
           (cv.embedding::vector(64)) <=> %(qvec)s::vector(64) AS distance
    FROM "ragpg".chunk_vector cv
    JOIN "ragpg".chunk c ON c.id = cv.chunk_id AND c.collection = cv.collection AND c.shard_key = cv.shard_key
    JOIN "ragpg".document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key
    WHERE cv.collection = %(collection)s AND cv.model = 'fake-bow-64' AND d.collection = %(collection)s
      AND (d.path = %(path_prefix)s
 OR (d.path COLLATE "C" >= %(path_prefix_dir)s AND d.path COLLATE "C" < %(path_prefix_end)s))
      AND NOT EXISTS (
    SELECT 1 FROM jsonb_each(%(front_matter)s::jsonb) AS f(key, value)
    WHERE NOT (d.front_matter @> jsonb_build_object(f.key, f.value)
               OR (jsonb_typeof(f.value) NOT IN ('array', 'object')
                   AND d.front_matter @> jsonb_build_object(f.key, jsonb_build_array(f.value))))
)
      AND d.level = %(level)s
      AND d.node_type = %(node_type)s
      AND NOT (SELECT exact FROM vec_scope)
    ORDER BY (cv.embedding::vector(64)) <=> %(qvec)s::vector(64)
    LIMIT 40
),
vec_exact AS MATERIALIZED (
    SELECT e.chunk_id, e.document_id, e.distance
    FROM (SELECT cv.chunk_id, c.document_id,
                 (cv.embedding::vector(64)) <=> %(qvec)s::vector(64) AS distance
          FROM "ragpg".document d
          JOIN "ragpg".chunk c ON c.document_id = d.id AND c.collection = d.collection AND c.shard_key = d.shard_key
          JOIN "ragpg".chunk_vector cv
            ON cv.chunk_id = c.id AND cv.collection = c.collection AND cv.shard_key = c.shard_key AND cv.model = 'fake-bow-64'
          WHERE d.collection = %(collection)s
      AND (d.path = %(path_prefix)s
 OR (d.path COLLATE "C" >= %(path_prefix_dir)s AND d.path COLLATE "C" < %(path_prefix_end)s))
      AND NOT EXISTS (
    SELECT 1 FROM jsonb_each(%(front_matter)s::jsonb) AS f(key, value)
    WHERE NOT (d.front_matter @> jsonb_build_object(f.key, f.value)
               OR (jsonb_typeof(f.value) NOT IN ('array', 'object')
                   AND d.front_matter @> jsonb_build_object(f.key, jsonb_build_array(f.value))))
)
      AND d.level = %(level)s
      AND d.node_type = %(node_type)s AND (SELECT exact FROM vec_scope)
          OFFSET 0) e
    ORDER BY e.distance, e.chunk_id LIMIT 40
),
vec AS (
    SELECT u.chunk_id, u.distance,
           row_number() OVER (PARTITION BY u.document_id ORDER BY u.distance, u.chunk_id) AS doc_rank,
           row_number() OVER (ORDER BY u.distance, u.chunk_id) AS rank
    FROM (SELECT * FROM vec_ann UNION ALL SELECT * FROM vec_exact) u
),
vec_ranked AS (
    SELECT chunk_id, distance, rank
    FROM vec WHERE doc_rank <= 40
    ORDER BY rank
    LIMIT 40
)
SELECT c.id AS chunk_id, cand.vector_rank, cand.distance, cand.keyword_rank, cand.keyword_score,
       c.position, c.section, c.anchor, c.content, c.token_count, c.content_hash,
       c.line_start, c.line_end, d.id AS document_id, d.path, d.title, d.collection,
       NULL::jsonb AS window_chunks, NULL::jsonb AS expanded, NULL::text[] AS phrases_held, NULL::integer AS phrases_asked
FROM (SELECT v.chunk_id, v.rank AS vector_rank, v.distance, NULL::bigint AS keyword_rank,
       NULL::float8 AS keyword_score
FROM vec_ranked v) cand
JOIN "ragpg".chunk c ON c.id = cand.chunk_id AND c.collection = %(collection)s
JOIN "ragpg".document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key
