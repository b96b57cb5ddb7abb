WITH vec_ranked AS (
    SELECT a.chunk_id, a.distance, row_number() OVER (ORDER BY a.distance, a.chunk_id) AS rank
    FROM (SELECT cv.chunk_id, (cv.embedding::vector(64)) <=> %(qvec)s::vector(64) AS distance
          FROM "ragpg".chunk_vector cv
          WHERE cv.collection = %(collection)s AND cv.model = 'fake-bow-64'
          ORDER BY (cv.embedding::vector(64)) <=> %(qvec)s::vector(64)
          LIMIT 10) a
)
SELECT c.id AS chunk_id, cand.vector_rank, cand.distance, cand.keyword_rank, cand.keyword_score,
       c.position, c.section, c.anchor, c.content, c.token_count, c.content_hash,
       c.line_start, c.line_end, d.id AS document_id, d.path, d.title, d.collection,
       NULL::jsonb AS window_chunks, NULL::jsonb AS expanded, NULL::text[] AS phrases_held, NULL::integer AS phrases_asked
FROM (SELECT v.chunk_id, v.rank AS vector_rank, v.distance, NULL::bigint AS keyword_rank,
       NULL::float8 AS keyword_score
FROM vec_ranked v) cand
JOIN "ragpg".chunk c ON c.id = cand.chunk_id AND c.collection = %(collection)s
JOIN "ragpg".document d ON d.id = c.document_id AND d.collection = c.collection
