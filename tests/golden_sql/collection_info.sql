SELECT g.model, g.dimension,
       coalesce(CASE WHEN g.term_stat_pending
                     THEN (SELECT sum(d.chunk_count) FROM "ragpg".document d
                           WHERE d.collection = k.name)
                     ELSE (SELECT sum(s.chunks) FROM "ragpg".chunk_stat s
                           WHERE s.collection = k.name) END, 0)::bigint AS chunks,
       coalesce(g.term_stat_pending, false) AS term_stat_pending,
       CASE WHEN g.model IS NULL THEN NULL
            WHEN i.definition LIKE '%%::halfvec(%%' THEN 'halfvec'
            WHEN i.definition IS NOT NULL THEN 'vector' END AS vector_kind,
       (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS pgvector_version
FROM (SELECT %(collection)s::text AS name) k
LEFT JOIN "ragpg".collection g ON g.name = k.name
LEFT JOIN LATERAL (
    SELECT pg_get_indexdef(to_regclass(format('%%I.%%I', 'ragpg',
        'chunk_vector_hnsw_'
        || left(encode(sha256(convert_to(coalesce(g.model, ''), 'UTF8')), 'hex'), 12))))
        AS definition
) i ON true
