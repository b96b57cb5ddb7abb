WITH vec_scope AS (SELECT coalesce((SELECT CASE WHEN g.term_stat_pending
                      THEN (SELECT sum(d.chunk_count) FROM "ragpg".document d
                            WHERE d.collection = %(collection)s)
                      ELSE (SELECT sum(s.chunks) FROM "ragpg".chunk_stat s
                            WHERE s.collection = %(collection)s) END
          FROM "ragpg".collection g WHERE g.name = %(collection)s), 0)::float8 <= 5000 AS exact),
vec_ann AS MATERIALIZED (
    SELECT cv.chunk_id, (cv.embedding::vector(64)) <=> %(qvec)s::vector(64) AS distance
    FROM "ragpg".chunk_vector cv
    WHERE cv.collection = %(collection)s AND cv.model = 'fake-bow-64'
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
          WHERE d.collection = %(collection)s AND (SELECT exact FROM vec_scope)
          OFFSET 0) e
    ORDER BY e.distance, e.chunk_id LIMIT 40
),
vec_ranked AS (
    SELECT u.chunk_id, u.distance, row_number() OVER (ORDER BY u.distance, u.chunk_id) AS rank
    FROM (SELECT chunk_id, distance FROM vec_ann
          UNION ALL SELECT chunk_id, distance FROM vec_exact) u
),
kw_scope AS (SELECT false AS small, 0::bigint AS chunks, false AS counted),
kw_terms AS (
    SELECT t.cfg, t.language, u.lexeme, cardinality(u.positions) AS qtf
    FROM unnest(%(ts_configs)s::regconfig[], %(ts_languages)s::text[])
         WITH ORDINALITY AS t(config, language, cfg)
    CROSS JOIN LATERAL unnest(to_tsvector(t.config, %(kw_text)s)) AS u
),
kw_stats AS (
    SELECT array_position(%(ts_configs)s::regconfig[], ts_config) AS cfg, chunks::float8 AS n,
           greatest(tokens::float8 / greatest(chunks, 1), 1) AS avgdl
    FROM "ragpg".chunk_stat WHERE collection = %(collection)s
),
kw_bounds AS MATERIALIZED (
    SELECT t.cfg, t.language, t.lexeme, t.qtf, ts.df,
           t.qtf * ln(1 + (s.n - ts.df + 0.5) / (ts.df + 0.5))
               * ts.max_tf * (%(k1)s + 1)
               / (ts.max_tf + %(k1)s * (1 - %(b)s + %(b)s * ts.min_dl / s.avgdl)) AS ub
    FROM kw_terms t
    JOIN kw_stats s ON s.cfg = t.cfg
    CROSS JOIN LATERAL (SELECT x.df, x.max_tf, x.min_dl FROM "ragpg".term_stat x
                        WHERE x.collection = %(collection)s
                          AND x.ts_config = (%(ts_configs)s::regconfig[])[t.cfg]
                          AND x.lexeme = t.lexeme
                        LIMIT 1) ts
),
kw_plan AS MATERIALIZED (
    SELECT b.lexeme, b.ub, b.df,
           coalesce(sum(b.df) OVER (ORDER BY b.ub DESC, b.cfg, b.lexeme
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
               < 40 AS seed,
           sum(b.ub) OVER (ORDER BY b.ub, b.cfg, b.lexeme ROWS UNBOUNDED PRECEDING) AS ub_prefix,
           '''' || replace(replace(b.lexeme, '\', '\\'), '''', '\''') || '''' AS quoted
    FROM kw_bounds b
),
kw_query AS MATERIALIZED (
    SELECT (SELECT array_agg(DISTINCT lexeme) FROM kw_bounds) AS lexemes,
           (SELECT string_agg(quoted, ' | ')::tsquery FROM kw_plan WHERE seed) AS seed_q,
           websearch_to_tsquery((%(ts_configs)s::regconfig[])[1], %(kwq)s)
           || websearch_to_tsquery((%(ts_configs)s::regconfig[])[2], %(kwq)s)
           || websearch_to_tsquery((%(ts_configs)s::regconfig[])[3], %(kwq)s) AS prefilter
),
kw_seed_match AS MATERIALIZED (
    SELECT c.id AS chunk_id, c.document_id,
           array_position(%(ts_configs)s::regconfig[], c.ts_config) AS ts_config, c.token_count AS dl, u.lexeme,
           cardinality(u.positions) AS tf
    FROM "ragpg".chunk c
    
    CROSS JOIN LATERAL unnest(ts_filter(setweight(c.tsv, 'A', (SELECT lexemes FROM kw_query)),
                                        ARRAY['a']::"char"[])) AS u
    WHERE c.collection IS NOT DISTINCT FROM %(collection)s AND c.tsv @@ (SELECT seed_q FROM kw_query)
      AND NOT (SELECT small FROM kw_scope)
      AND ts_match_vq(c.tsv, (SELECT prefilter FROM kw_query)) AND true
),
kw_seed AS MATERIALIZED (
    SELECT m.chunk_id, min(m.document_id) AS document_id,
           sum(t.qtf * ln(1 + (s.n - t.df + 0.5) / (t.df + 0.5))
               * m.tf * (%(k1)s + 1)
               / (m.tf + %(k1)s * (1 - %(b)s + %(b)s * m.dl / s.avgdl)) ORDER BY m.lexeme) AS score
    FROM kw_seed_match m
    JOIN kw_bounds t ON t.cfg = m.ts_config AND t.lexeme = m.lexeme
    JOIN kw_stats s ON s.cfg = t.cfg
    GROUP BY m.chunk_id
),
kw_theta AS MATERIALIZED (
    SELECT coalesce((SELECT r.score
                     FROM (SELECT score, row_number() OVER (PARTITION BY document_id
                                                             ORDER BY score DESC, chunk_id) AS doc_rank
                           FROM kw_seed) r
                     WHERE r.doc_rank <= 40
                     ORDER BY r.score DESC
                     OFFSET 40 - 1 LIMIT 1), 0) AS theta
),
kw_rest_query AS MATERIALIZED (
    SELECT string_agg(p.quoted, ' | ')::tsquery AS q,
           (SELECT counted AND NOT small FROM kw_scope)
               AND (SELECT chunks FROM kw_scope) < coalesce(sum(p.df), 0) AS by_filter
    FROM kw_plan p
    WHERE NOT p.seed AND p.ub_prefix * (1 + 1e-9) >= (SELECT theta FROM kw_theta)
),
kw_rest_match AS MATERIALIZED (
    SELECT c.id AS chunk_id, c.document_id,
           array_position(%(ts_configs)s::regconfig[], c.ts_config) AS ts_config, c.token_count AS dl, u.lexeme,
           cardinality(u.positions) AS tf
    FROM "ragpg".chunk c
    
    CROSS JOIN LATERAL unnest(ts_filter(setweight(c.tsv, 'A', (SELECT lexemes FROM kw_query)),
                                        ARRAY['a']::"char"[])) AS u
    WHERE c.collection IS NOT DISTINCT FROM %(collection)s AND c.tsv @@ (SELECT q FROM kw_rest_query)
      AND NOT (SELECT small FROM kw_scope) AND NOT (SELECT by_filter FROM kw_rest_query)
      AND NOT coalesce(ts_match_vq(c.tsv, (SELECT seed_q FROM kw_query)), false)
      AND ts_match_vq(c.tsv, (SELECT prefilter FROM kw_query)) AND true
),
kw_small_match AS MATERIALIZED (
    SELECT c.id AS chunk_id, c.document_id,
           array_position(%(ts_configs)s::regconfig[], c.ts_config) AS ts_config, c.token_count AS dl, u.lexeme,
           cardinality(u.positions) AS tf
    FROM "ragpg".document d
    CROSS JOIN LATERAL (SELECT w.id, w.document_id, w.ts_config, w.token_count, w.tsv
                        FROM "ragpg".chunk w
                        WHERE w.document_id = d.id AND w.collection = %(collection)s
                          AND w.shard_key = d.shard_key
                        OFFSET 0) c
    CROSS JOIN LATERAL unnest(ts_filter(setweight(c.tsv, 'A', (SELECT lexemes FROM kw_query)),
                                        ARRAY['a']::"char"[])) AS u
    WHERE d.collection = %(collection)s
      AND ((SELECT small FROM kw_scope) OR (SELECT by_filter FROM kw_rest_query))
      AND ts_match_vq(c.tsv, (SELECT prefilter FROM kw_query))
      AND ((SELECT small FROM kw_scope)
           OR ts_match_vq(c.tsv, (SELECT q FROM kw_rest_query))
              AND NOT coalesce(ts_match_vq(c.tsv, (SELECT seed_q FROM kw_query)), false))
),
kw_rest AS MATERIALIZED (
    SELECT m.chunk_id, min(m.document_id) AS document_id,
           sum(t.qtf * ln(1 + (s.n - t.df + 0.5) / (t.df + 0.5))
               * m.tf * (%(k1)s + 1)
               / (m.tf + %(k1)s * (1 - %(b)s + %(b)s * m.dl / s.avgdl)) ORDER BY m.lexeme) AS score
    FROM (SELECT * FROM kw_rest_match UNION ALL SELECT * FROM kw_small_match) m
    JOIN kw_bounds t ON t.cfg = m.ts_config AND t.lexeme = m.lexeme
    JOIN kw_stats s ON s.cfg = t.cfg
    GROUP BY m.chunk_id
),
kw AS (
    SELECT chunk_id, document_id, score
    FROM (SELECT chunk_id, document_id, score FROM kw_seed
          UNION ALL
          SELECT chunk_id, document_id, score FROM kw_rest) scored
    WHERE score >= (SELECT theta FROM kw_theta)
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
),
phrases AS MATERIALIZED (
    SELECT DISTINCT g.cfg, p.q
    FROM unnest(%(ts_configs)s::regconfig[]) WITH ORDINALITY AS g(config, cfg)
    CROSS JOIN unnest(%(phrase_windows)s::text[]) AS w(words)
    CROSS JOIN LATERAL phraseto_tsquery(g.config, w.words) AS p(q)
    WHERE numnode(p.q) = 3
),
expand_documents AS MATERIALIZED (
    SELECT DISTINCT d.path, d.parent_path
    FROM (SELECT coalesce(v.chunk_id, k.chunk_id) AS chunk_id, v.rank AS vector_rank, v.distance,
       k.rank AS keyword_rank, k.score AS keyword_score
FROM vec_ranked v FULL JOIN kw_ranked k ON k.chunk_id = v.chunk_id) cand
    JOIN "ragpg".chunk c ON c.id = cand.chunk_id AND c.collection = %(collection)s
JOIN "ragpg".document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key
),
expand_nodes AS MATERIALIZED (
    SELECT p.path AS node_key, jsonb_build_object(
        'path', p.path, 'title', p.title,
        'chunks', coalesce((
            SELECT jsonb_agg(jsonb_build_object('position', pc.position, 'section', pc.section,
                                                'anchor', pc.anchor, 'content', pc.content)
                             ORDER BY pc.position)
            FROM "ragpg".chunk pc
            WHERE pc.document_id = p.id AND pc.collection = %(collection)s
              AND pc.shard_key = p.shard_key), '[]'::jsonb)) AS node
    FROM "ragpg".document p
    WHERE p.collection = %(collection)s
      AND p.path IN (SELECT ltrim(regexp_replace(e.parent_path, '^(\./)+', ''), '/')
                     FROM expand_documents e)
)
SELECT c.id AS chunk_id, cand.vector_rank, cand.distance, cand.keyword_rank, cand.keyword_score,
       c.position, c.section, c.anchor, c.content, c.token_count, c.content_hash,
       c.line_start, c.line_end, d.id AS document_id, d.path, d.title, d.collection,
       (SELECT jsonb_agg(jsonb_build_object('position', w.position, 'section', w.section,
                                     'anchor', w.anchor, 'content', w.content) ORDER BY w.position)
 FROM "ragpg".chunk w
 WHERE w.document_id = c.document_id AND w.collection = %(collection)s
   AND w.shard_key = c.shard_key
   AND w.position BETWEEN c.position - %(neighbours)s AND c.position + %(neighbours)s) AS window_chunks, CASE WHEN row_number() OVER (PARTITION BY d.id, d.shard_key ORDER BY c.id) = 1 THEN x.node END AS expanded, ARRAY(SELECT p.q::text FROM phrases p
      WHERE CASE WHEN p.cfg = array_position(%(ts_configs)s::regconfig[], c.ts_config) THEN c.tsv @@ p.q ELSE false END ORDER BY 1)
    AS phrases_held,
(SELECT count(*) FROM phrases p WHERE p.cfg = array_position(%(ts_configs)s::regconfig[], c.ts_config))::integer AS phrases_asked
FROM (SELECT coalesce(v.chunk_id, k.chunk_id) AS chunk_id, v.rank AS vector_rank, v.distance,
       k.rank AS keyword_rank, k.score AS keyword_score
FROM vec_ranked v FULL JOIN kw_ranked k ON k.chunk_id = v.chunk_id) cand
JOIN "ragpg".chunk c ON c.id = cand.chunk_id AND c.collection = %(collection)s
JOIN "ragpg".document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key
LEFT JOIN expand_nodes x ON x.node_key = ltrim(regexp_replace(d.parent_path, '^(\./)+', ''), '/')
