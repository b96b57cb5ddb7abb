SELECT g.model, g.dimension,
       coalesce(g.term_stat_pending, false) AS term_stat_pending,
       CASE WHEN g.model IS NULL THEN NULL
            WHEN i.definition LIKE '%%::halfvec(%%' THEN 'halfvec'
            WHEN i.definition IS NOT NULL THEN 'vector' END AS vector_kind,
       (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS pgvector_version,
       (SELECT extnamespace::regnamespace::text FROM pg_extension
        WHERE extname = 'pg_textsearch') AS engine_schema,
       (SELECT count(*) FROM pg_class x
        WHERE x.relnamespace = to_regnamespace('ragpg')
          AND x.relname IN ('chunk_bm25_french', 'chunk_bm25_english', 'chunk_bm25_simple')) = 3
           AS engine_ready,
       (SELECT sum(s.chunks) FROM "ragpg".chunk_stat s WHERE s.collection = k.name)::bigint
           AS chunks,
       (SELECT min(s.chunks)::float8
               / greatest(max(t.reltuples)::float8, sum(s.chunks)::float8, 1)
        FROM "ragpg".chunk_stat s
        CROSS JOIN (SELECT reltuples FROM pg_class
                    WHERE oid = to_regclass(format('%%I.chunk', 'ragpg'))) t
        WHERE s.collection = k.name AND s.chunks > 0) AS engine_share
FROM (SELECT %(collection)s::text AS name) k
LEFT JOIN "ragpg".collection g ON g.name = k.name
LEFT JOIN LATERAL (
    SELECT pg_get_indexdef(to_regclass(format('%%I.%%I', 'ragpg',
        'chunk_vector_hnsw_'
        || left(encode(sha256(convert_to(coalesce(g.model, ''), 'UTF8')), 'hex'), 12))))
        AS definition
) i ON true
