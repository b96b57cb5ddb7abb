WITH kw_terms AS (
    SELECT t.cfg, t.language, u.lexeme, cardinality(u.positions) AS qtf
    FROM unnest(%(ts_configs)s::regconfig[], %(ts_languages)s::text[])
         WITH ORDINALITY AS t(config, language, cfg)
    CROSS JOIN LATERAL unnest(to_tsvector(t.config, %(kw_text)s)) AS u
),
kw_match AS MATERIALIZED (
    SELECT c.id AS chunk_id, c.document_id,
           array_position(%(ts_configs)s::regconfig[], c.ts_config) AS ts_config, c.token_count AS dl,
           (d.collection = %(collection)s
      AND (d.path = %(path_prefix)s
 OR (d.path COLLATE "C" >= %(path_prefix_dir)s AND d.path COLLATE "C" < %(path_prefix_end)s))
      AND NOT EXISTS (
    SELECT 1 FROM jsonb_each(%(front_matter)s::jsonb) AS f(key, value)
    WHERE NOT (d.front_matter @> jsonb_build_object(f.key, f.value)
               OR (jsonb_typeof(f.value) NOT IN ('array', 'object')
                   AND d.front_matter @> jsonb_build_object(f.key, jsonb_build_array(f.value))))
)
      AND d.level = %(level)s
      AND d.node_type = %(node_type)s) AS keep, m.lexeme, cardinality(m.positions) AS tf
    FROM "ragpg".chunk c
    JOIN "ragpg".document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key
    CROSS JOIN LATERAL unnest(ts_filter(
        setweight(c.tsv, 'A', (SELECT array_agg(DISTINCT lexeme) FROM kw_terms)),
        ARRAY['a']::"char"[])) AS m
    WHERE c.collection = %(collection)s
      AND c.tsv @@ (websearch_to_tsquery((%(ts_configs)s::regconfig[])[1], %(kwq)s)
                    || websearch_to_tsquery((%(ts_configs)s::regconfig[])[2], %(kwq)s)
                    || websearch_to_tsquery((%(ts_configs)s::regconfig[])[3], %(kwq)s))
),
kw_scored_terms AS (
    SELECT m.chunk_id, m.document_id, m.keep, m.lexeme, m.dl, m.tf, t.qtf, t.language,
           count(*) OVER (PARTITION BY t.cfg, t.lexeme) AS df
    FROM kw_match m
    JOIN kw_terms t ON t.cfg = m.ts_config AND t.lexeme = m.lexeme
),
kw_stats AS (
    SELECT language, sum(chunk_count)::float8 AS n,
           greatest(sum(token_count)::float8 / greatest(sum(chunk_count), 1), 1) AS avgdl
    FROM "ragpg".document WHERE collection = %(collection)s
    GROUP BY language
),
kw AS (
    SELECT m.chunk_id, min(m.document_id) AS document_id,
           sum(m.qtf * ln(1 + (s.n - m.df + 0.5) / (m.df + 0.5))
               * m.tf * (%(k1)s + 1)
               / (m.tf + %(k1)s * (1 - %(b)s + %(b)s * m.dl / s.avgdl)) ORDER BY m.lexeme) AS score
    FROM kw_scored_terms m
    JOIN kw_stats s ON s.language = m.language
    WHERE m.keep
    GROUP BY m.chunk_id
),
kw_ranked AS (
    SELECT chunk_id, score, rank
    FROM (SELECT chunk_id, score,
                 row_number() OVER (PARTITION BY document_id ORDER BY score DESC, chunk_id) AS doc_rank,
                 row_number() OVER (ORDER BY score DESC, chunk_id) AS rank
          FROM kw) ranked
    WHERE doc_rank <= 40
    ORDER BY rank
    LIMIT 40
)
SELECT c.id AS chunk_id, cand.vector_rank, cand.distance, cand.keyword_rank, cand.keyword_score,
       c.position, c.section, c.anchor, c.content, c.token_count, c.content_hash,
       c.line_start, c.line_end, d.id AS document_id, d.path, d.title, d.collection,
       NULL::jsonb AS window_chunks, NULL::jsonb AS expanded, NULL::text[] AS phrases_held, NULL::integer AS phrases_asked
FROM (SELECT k.chunk_id, NULL::bigint AS vector_rank, NULL::float8 AS distance,
       k.rank AS keyword_rank, k.score AS keyword_score
FROM kw_ranked k) cand
JOIN "ragpg".chunk c ON c.id = cand.chunk_id AND c.collection = %(collection)s
JOIN "ragpg".document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key
