WITH vec_scope AS (SELECT %(exact)s::boolean AS exact),
vec_ann AS MATERIALIZED (
    SELECT cv.chunk_id, (cv.embedding::vector(64)) <=> %(qvec)s::vector(64) AS distance
    FROM "ragpg".chunk_vector cv
    WHERE cv.collection = %(collection)s AND cv.model = 'fake-bow-64'
      AND NOT (SELECT exact FROM vec_scope)
    ORDER BY (cv.embedding::vector(64)) <=> %(qvec)s::vector(64)
    LIMIT 10
),
vec_exact AS MATERIALIZED (
    SELECT e.chunk_id, e.document_id, e.distance
    FROM (SELECT cv.chunk_id, c.document_id,
                 (cv.embedding::vector(64)) <=> %(qvec)s::vector(64) AS distance
          FROM "ragpg".document d
          JOIN "ragpg".chunk c ON c.document_id = d.id AND c.collection = d.collection AND c.shard_key = d.shard_key
          JOIN "ragpg".chunk_vector cv
            ON cv.chunk_id = c.id AND cv.collection = c.collection AND cv.shard_key = c.shard_key AND cv.model = 'fake-bow-64'
          WHERE d.collection = %(collection)s AND (SELECT exact FROM vec_scope)
          OFFSET 0) e
    ORDER BY e.distance, e.chunk_id LIMIT 10
),
vec_ranked AS (
    SELECT u.chunk_id, u.distance, row_number() OVER (ORDER BY u.distance, u.chunk_id) AS rank
    FROM (SELECT chunk_id, distance FROM vec_ann
          UNION ALL SELECT chunk_id, distance FROM vec_exact) u
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
