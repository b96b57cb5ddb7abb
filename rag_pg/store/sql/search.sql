-- The search statement's fragments and the statements around it, loaded by name
-- (rag_pg/store/queries.py) and composed by rag_pg/search/statement.py: tests/golden_sql/ holds each whole
-- statement as it is sent. {schema} is an identifier, {model}/{dim}/{vkind} and the row counts
-- are SQL bound by psycopg.sql; everything else is a named parameter.

-- name: search_vector_scope
-- Decides exact vs approximate search: the filters leave few enough vectors when at most
-- exact_limit chunks of embedded documents match, or a share of a large collection
-- (retrieval.exact_share): a filtered HNSW scan walks the graph about 1/selectivity times as
-- far as an unfiltered one, so the break-even grows with the collection. At most
-- exact_limit + 1 document rows are read (each counted document has at least one chunk), so
-- a broad filter stays cheap to count; a filter of more documents than that takes the index
-- whatever its chunks.
vec_scope AS (
    SELECT coalesce(sum(s.chunk_count), 0)
               <= greatest({exact_limit}, floor(%(exact_share)s * {collection_chunks}))
           AND count(*) <= {exact_limit}
           AS exact
    FROM (SELECT d.chunk_count FROM {schema}.document d
          WHERE d.embed AND d.chunk_count > 0 AND {doc_filter}
          LIMIT {exact_limit} + 1) s
)

-- name: search_vector_scope_collection
-- A whole collection: exact search up to exact_limit chunks, the index past it.
vec_scope AS (SELECT {collection_chunks} <= {exact_limit} AS exact)

-- name: search_vector_scope_given
-- The caller decided (a test, or a plan forced exact).
vec_scope AS (SELECT %(exact)s::boolean AS exact)

-- name: search_collection_chunks
-- How many chunks the collection holds, from the counts the triggers on chunk keep
-- (chunk_stat, one row per text search configuration), not from the documents: a few index
-- entries whatever the collection's size. They count the chunks of documents indexed for
-- keyword search only too: such a collection may take the index where its vectors alone
-- would have allowed exact search, never the other way round. While the collection's term
-- statistics are pending (a first load under way, or killed: migration 0014) they are
-- incomplete: the documents' chunk counts are summed instead.
coalesce((SELECT CASE WHEN g.term_stat_pending
                      THEN (SELECT sum(d.chunk_count) FROM {schema}.document d
                            WHERE d.collection = %(collection)s)
                      ELSE (SELECT sum(s.chunks) FROM {schema}.chunk_stat s
                            WHERE s.collection = %(collection)s) END
          FROM {schema}.collection g WHERE g.name = %(collection)s), 0)::float8

-- name: search_vector_leg
-- Vector candidates by cosine distance. Approximate branch: the model's partial HNSW index
-- with iterative scans (set per query), so that a filter still yields vec_fetch rows.
-- Exact branch (search_vector_exact). A one-time filter on vec_scope runs exactly one of the
-- two branches.
-- Ranks are the chunk's among all the leg's chunks (numbered before the per-document filter),
-- so the fusion sees true chunk ranks; the filter (per_document: a few times the hits' cap)
-- only keeps one long file from filling the leg's list. The cap itself applies after fusion.
-- Every join also equates the collection: on a Citus cluster sharded by collection the whole
-- statement then runs on the one shard that holds it (docs/scaling.md).
vec_ann AS MATERIALIZED (
    SELECT cv.chunk_id, c.document_id,
           (cv.embedding::{vkind}({dim})) <=> %(qvec)s::{vkind}({dim}) AS distance
    FROM {schema}.chunk_vector cv
    JOIN {schema}.chunk c ON c.id = cv.chunk_id AND c.collection = cv.collection AND c.shard_key = cv.shard_key
    JOIN {schema}.document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key
    WHERE cv.collection = %(collection)s AND cv.model = {model} AND {doc_filter}
      AND NOT (SELECT exact FROM vec_scope)
    ORDER BY (cv.embedding::{vkind}({dim})) <=> %(qvec)s::{vkind}({dim})
    LIMIT {vec_fetch}
),
{exact},
vec AS (
    SELECT u.chunk_id, u.distance,
           row_number() OVER (PARTITION BY u.document_id ORDER BY u.distance, u.chunk_id) AS doc_rank,
           row_number() OVER (ORDER BY u.distance, u.chunk_id) AS rank
    FROM (SELECT * FROM vec_ann UNION ALL SELECT * FROM vec_exact) u
),
vec_ranked AS (
    SELECT chunk_id, distance, rank
    FROM vec WHERE doc_rank <= {per_document}
    ORDER BY rank
    LIMIT {candidates}
)

-- name: search_vector_exact
-- The exact branch (a small collection, a selective filter): every matching vector, from the
-- document side.
vec_exact AS MATERIALIZED (
    SELECT e.chunk_id, e.document_id, e.distance
    FROM (SELECT cv.chunk_id, c.document_id,
                 (cv.embedding::{vkind}({dim})) <=> %(qvec)s::{vkind}({dim}) AS distance
          FROM {schema}.document d
          JOIN {schema}.chunk c ON c.document_id = d.id AND c.collection = d.collection AND c.shard_key = d.shard_key
          JOIN {schema}.chunk_vector cv
            ON cv.chunk_id = c.id AND cv.collection = c.collection AND cv.shard_key = c.shard_key AND cv.model = {model}
          WHERE {doc_filter} AND (SELECT exact FROM vec_scope)
          OFFSET 0) e
    {exact_top}
)

-- name: search_vector_exact_top
-- The exact branch without a per-document cap: no chunk past the first vec_fetch by distance
-- can reach the leg's list (every chunk before it is one the list keeps), so only those are
-- kept, by a top-N sort, instead of numbering every matching vector twice. With a cap a
-- long document may fill the first rows: then every matching vector stays. The distances are
-- sorted outside the subquery (OFFSET 0 keeps it apart): ordered by the operator itself,
-- the planner would walk the HNSW index and join every row it yields to the filters.
ORDER BY e.distance, e.chunk_id LIMIT {vec_fetch}

-- name: search_vector_collection
-- The common case, on its own: a whole collection (no other filter, no per-document cap; the
-- readers of an asker, which each vector row carries, filter the rows the scan walks).
-- Large enough for the index, the HNSW scan filters on the vector rows' own collection, so
-- no candidate is joined to anything before the final k: as cheap as a bare pgvector query.
-- Small enough for exact search (vec_scope), the general leg's exact branch; one runs.
vec_ann AS MATERIALIZED (
    SELECT cv.chunk_id, (cv.embedding::{vkind}({dim})) <=> %(qvec)s::{vkind}({dim}) AS distance
    FROM {schema}.chunk_vector cv
    WHERE cv.collection = %(collection)s AND cv.model = {model}{vector_readers}
      AND NOT (SELECT exact FROM vec_scope)
    ORDER BY (cv.embedding::{vkind}({dim})) <=> %(qvec)s::{vkind}({dim})
    LIMIT {vec_fetch}
),
{exact},
vec_ranked AS (
    SELECT u.chunk_id, u.distance, row_number() OVER (ORDER BY u.distance, u.chunk_id) AS rank
    FROM (SELECT chunk_id, distance FROM vec_ann
          UNION ALL SELECT chunk_id, distance FROM vec_exact) u
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
--   the document frequencies, counted in the reader's own snapshot (the pruned leg reads the
--   same numbers from term_stat, which the writers' transactions keep).
-- dl is the chunk's token_count and avgdl the collection's token_count / chunk_count per
--   language (columns the store maintains in the same transaction as the chunks).
-- A chunk's terms are summed in lexeme order: the same float sum whatever the plan.
-- This leg is the reference of search_keyword_pruned, which searches by default.
kw_terms AS (
    SELECT t.cfg, t.language, u.lexeme, cardinality(u.positions) AS qtf
    FROM unnest(%(ts_configs)s::regconfig[], %(ts_languages)s::text[])
         WITH ORDINALITY AS t(config, language, cfg)
    CROSS JOIN LATERAL unnest(to_tsvector(t.config, %(kw_text)s)) AS u
),
kw_match AS MATERIALIZED (
    SELECT c.id AS chunk_id, c.document_id,
           array_position(%(ts_configs)s::regconfig[], c.ts_config) AS ts_config, c.token_count AS dl,
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
    SELECT m.chunk_id, m.document_id, m.keep, m.lexeme, m.dl, m.tf, t.qtf, t.language,
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
               / (m.tf + %(k1)s * (1 - %(b)s + %(b)s * m.dl / s.avgdl)) ORDER BY m.lexeme) AS score
    FROM kw_scored_terms m
    JOIN kw_stats s ON s.language = m.language
    WHERE m.keep
    GROUP BY m.chunk_id
)

-- name: search_keyword_pruned
-- The same BM25 top list as search_keyword_leg (same scores, ranks and per-document rule),
-- without scoring every chunk that holds a query word: MaxScore over the per-term statistics
-- (term_stat, kept by triggers on chunk in the writers' transactions, so df is the one the
-- exhaustive leg would count in this snapshot).
-- kw_bounds: each query term's df and an upper bound of what it adds to any chunk's score,
--   ub = qtf * idf * f(max_tf, min_dl) (the weight grows with tf and shrinks with length).
--   One primary-key probe per term (LIMIT 1 keeps the subquery a per-term lookup whatever
--   the planner believes of the table's size).
-- kw_seed: the chunks holding the terms of highest bound (rare words first), until their
--   postings reach seed_postings; scored in full. theta, the score of the candidates-th chunk
--   the per-document rule keeps among them, is a lower bound of the final list's last score
--   (a subset keeps at most as many chunks above any score as the whole set does).
-- kw_rest: a chunk whose terms all lie in the ascending prefix of bounds summing below theta
--   scores below theta and cannot enter the list; every other chunk holds an "essential" term.
--   The chunks holding an essential term outside the seed (and no seed term: those are
--   scored already) are scored in full. Nothing the exhaustive leg ranks at or above theta is
--   missed, so kw_ranked is identical. The 1e-9 margin covers the sums' rounding.
--   Only the chunks scoring theta or more are ranked (kw): the list's last score is at least
--   theta, a seed score summed the same way, and a chunk below it ranks after every chunk
--   above it, overall and in its document, so the ranks of those kept are the same and the
--   window sorts read about candidates rows instead of every chunk scored.
--   The seed is scored on its own because theta, which picks the rest, depends on its
--   scores; kw_rest scores every chunk found after it (kw_rest_match or kw_small_match).
--   Under a filter the rest is read whichever way reads less (by_filter): the essential
--   terms' postings through the GIN index (kw_rest_match, each posting then checked against
--   the filter), or the filter's own chunks, tested for the same terms (kw_small_match), when
--   they are fewer than those postings. A selective filter keeps few of the seed's chunks, so
--   theta stays low and frequent words become essential: their postings, most of the
--   collection, would be read to keep the filter's share of them. Both ways keep the same
--   chunks (the filter's, holding an essential term and no seed term), so the list is the same.
-- kw_stats: N and the total length per configuration from chunk_stat (the same triggers keep
--   it), equal to the sums of the documents' chunk_count / token_count the exhaustive leg
--   reads, without reading every document row of the collection.
-- Filters apply while matching (df does not need the other chunks). kw_scope: a filter that
-- leaves at most exact_limit chunks is answered from its documents' chunks alone
-- (kw_small_match: every one of them, no GIN scan, whatever the words' postings; theta is then
-- 0 and the seed empty); otherwise, and for a whole collection, the two GIN scans above run.
-- One-time filters run exactly one of them.
-- ts_match_vq re-checks the exhaustive leg's prefilter (a word with several lexemes is a
-- phrase there), as a function so that it stays a filter.
-- Each chunk's terms are summed in lexeme order, as in the exhaustive leg.
-- The chunk scans compare the collection with IS NOT DISTINCT FROM (the column is NOT NULL:
-- the same rows) so that no btree holding the collection can serve them: the GIN index's
-- cost for a tsquery known only at run time (and its pending list right after a load) once
-- made the planner read every chunk of the collection through the primary key instead
-- (search_chunk_collection; on a Citus cluster an equality, which routes the statement).
kw_terms AS (
    SELECT t.cfg, t.language, u.lexeme, cardinality(u.positions) AS qtf
    FROM unnest(%(ts_configs)s::regconfig[], %(ts_languages)s::text[])
         WITH ORDINALITY AS t(config, language, cfg)
    CROSS JOIN LATERAL unnest(to_tsvector(t.config, %(kw_text)s)) AS u
),
kw_stats AS (
    SELECT array_position(%(ts_configs)s::regconfig[], ts_config) AS cfg, chunks::float8 AS n,
           greatest(tokens::float8 / greatest(chunks, 1), 1) AS avgdl
    FROM {schema}.chunk_stat WHERE collection = %(collection)s
),
kw_bounds AS MATERIALIZED (
    SELECT t.cfg, t.language, t.lexeme, t.qtf, ts.df,
           t.qtf * ln(1 + (s.n - ts.df + 0.5) / (ts.df + 0.5))
               * ts.max_tf * (%(k1)s + 1)
               / (ts.max_tf + %(k1)s * (1 - %(b)s + %(b)s * ts.min_dl / s.avgdl)) AS ub
    FROM kw_terms t
    JOIN kw_stats s ON s.cfg = t.cfg
    CROSS JOIN LATERAL (SELECT x.df, x.max_tf, x.min_dl FROM {schema}.term_stat x
                        WHERE x.collection = %(collection)s
                          AND x.ts_config = (%(ts_configs)s::regconfig[])[t.cfg]
                          AND x.lexeme = t.lexeme
                        LIMIT 1) ts
),
kw_plan AS MATERIALIZED (
    SELECT b.lexeme, b.ub, b.df,
           coalesce(sum(b.df) OVER (ORDER BY b.ub DESC, b.cfg, b.lexeme
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
               < {seed_postings} AS seed,
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
    FROM {schema}.chunk c
    {keep_join}
    CROSS JOIN LATERAL unnest(ts_filter(setweight(c.tsv, 'A', (SELECT lexemes FROM kw_query)),
                                        ARRAY['a']::"char"[])) AS u
    WHERE {chunk_collection} AND {seed_match}
      AND NOT (SELECT small FROM kw_scope)
      AND ts_match_vq(c.tsv, (SELECT prefilter FROM kw_query)) AND {keep}
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
                     WHERE r.doc_rank <= {per_document}
                     ORDER BY r.score DESC
                     OFFSET {candidates} - 1 LIMIT 1), 0) AS theta
),
kw_rest_query AS MATERIALIZED (
    SELECT string_agg(p.quoted, ' | ')::tsquery AS q,
           {sql_gate}(SELECT counted AND NOT small FROM kw_scope)
               AND (SELECT chunks FROM kw_scope) < coalesce(sum(p.df), 0) AS by_filter
    FROM kw_plan p
    WHERE NOT p.seed AND p.ub_prefix * (1 + 1e-9) >= (SELECT theta FROM kw_theta)
),
kw_rest_match AS MATERIALIZED (
    SELECT c.id AS chunk_id, c.document_id,
           array_position(%(ts_configs)s::regconfig[], c.ts_config) AS ts_config, c.token_count AS dl, u.lexeme,
           cardinality(u.positions) AS tf
    FROM {schema}.chunk c
    {keep_join}
    CROSS JOIN LATERAL unnest(ts_filter(setweight(c.tsv, 'A', (SELECT lexemes FROM kw_query)),
                                        ARRAY['a']::"char"[])) AS u
    WHERE {chunk_collection} AND {rest_match}
      AND NOT (SELECT small FROM kw_scope) AND NOT (SELECT by_filter FROM kw_rest_query)
      AND NOT coalesce(ts_match_vq(c.tsv, (SELECT seed_q FROM kw_query)), false)
      AND ts_match_vq(c.tsv, (SELECT prefilter FROM kw_query)) AND {keep}
),
kw_small_match AS MATERIALIZED (
    SELECT c.id AS chunk_id, c.document_id,
           array_position(%(ts_configs)s::regconfig[], c.ts_config) AS ts_config, c.token_count AS dl, u.lexeme,
           cardinality(u.positions) AS tf
    FROM {schema}.document d
    CROSS JOIN LATERAL (SELECT w.id, w.document_id, w.ts_config, w.token_count, w.tsv
                        FROM {schema}.chunk w
                        WHERE w.document_id = d.id AND w.collection = %(collection)s
                          AND w.shard_key = d.shard_key
                        OFFSET 0) c
    CROSS JOIN LATERAL unnest(ts_filter(setweight(c.tsv, 'A', (SELECT lexemes FROM kw_query)),
                                        ARRAY['a']::"char"[])) AS u
    WHERE {doc_filter}
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
{leg} AS (
    SELECT chunk_id, document_id, score
    FROM (SELECT chunk_id, document_id, score FROM kw_seed
          UNION ALL
          SELECT chunk_id, document_id, score FROM kw_rest) scored
    WHERE score >= (SELECT theta FROM kw_theta)
)

-- name: search_keyword_engine
-- The keyword leg scored by pg_textsearch (rag_pg.store.keyword_engine). Each configuration's
-- index yields its best chunks of the collection in its own BM25 order (block-max WAND skips
-- the postings that cannot enter the list), the collection and the filters checked on the way:
-- the index scan goes on past the rows they drop, so the list still fills up. Where a filter
-- leaves at most exact_limit chunks (kw_engine_scope), the index would walk every other chunk
-- holding a query word to find theirs: the SQL leg scores them instead (kw_sql: the pruned leg
-- as it runs without an engine, every one of its scans gated by search_keyword_engine_gate),
-- so a search's list comes from one scorer. (A whole collection is planned by its size:
-- search_keyword_engine_alone, or the SQL leg alone when small.) The engine's order is
-- ascending (negative scores): negated here. A chunk that holds no query term scores 0 and is
-- left out.
kw_engine AS MATERIALIZED (
    {scans}
),
kw AS (
    SELECT chunk_id, document_id, score FROM kw_engine WHERE score > 0
    UNION ALL
    SELECT chunk_id, document_id, score FROM kw_sql
)

-- name: search_keyword_engine_alone
-- A whole collection larger than exact_limit chunks: the engine's lists alone.
kw_engine AS MATERIALIZED (
    {scans}
),
kw AS (
    SELECT chunk_id, document_id, score FROM kw_engine WHERE score > 0
)

-- name: search_keyword_engine_scoped
-- The engine's scans beside the SQL leg: read when the filter's scope is not small.
AND NOT (SELECT small FROM kw_engine_scope)

-- name: search_keyword_engine_gate
-- What runs the SQL leg beside an engine: a small scope only.
(SELECT small FROM kw_engine_scope) AND

-- name: search_keyword_engine_scope_same
-- A filtered search: the engine's scope is the SQL leg's own (same filter, same limit).
kw_engine_scope AS (SELECT small FROM kw_scope)

-- name: search_keyword_engine_scan
-- One configuration's best chunks of the collection, by its engine index; not read at all
-- when the collection has no chunk in that configuration (chunk_stat), where the scan would
-- walk every other chunk that holds a query word to find none. The collection is compared as
-- the SQL leg compares it (search_chunk_collection), so that no btree on it can take the place
-- of the engine's index (every chunk of the collection scored one by one, then sorted).
(SELECT c.id AS chunk_id, c.document_id, -({score}) AS score
 FROM {schema}.chunk c
 {keep_join}
 WHERE {chunk_collection} AND c.ts_config = {config}::regconfig AND {keep}
   {scoped}
   AND EXISTS (SELECT FROM {schema}.chunk_stat s
               WHERE s.collection = %(collection)s AND s.ts_config = {config}::regconfig
                 AND s.chunks > 0)
 ORDER BY {score}
 LIMIT {vec_fetch})

-- name: search_keyword_engine_score
-- A chunk's score by the engine index of its configuration (ascending).
c.bm25_text OPERATOR({engine}.<@>) {engine}.to_bm25query(%(kw_text)s, {index})

-- name: search_keyword_ranked
-- Either keyword leg's list: its scored chunks (kw) ranked by score, ties by chunk id, each
-- rank the chunk's among all of them, a document keeping its first per_document.
kw_ranked AS (
    SELECT chunk_id, score, rank
    FROM (SELECT chunk_id, score,
                 row_number() OVER (PARTITION BY document_id ORDER BY score DESC, chunk_id) AS doc_rank,
                 row_number() OVER (ORDER BY score DESC, chunk_id) AS rank
          FROM kw) ranked
    WHERE doc_rank <= {per_document}
    ORDER BY rank
    LIMIT {candidates}
)

-- name: search_keyword_scope
-- As vec_scope: at most exact_limit + 1 document rows are read. chunks is the filter's chunk
-- count when counted (every matching document was read), a lower bound otherwise.
kw_scope AS MATERIALIZED (
    SELECT coalesce(sum(s.chunk_count), 0) <= {exact_limit} AS small,
           coalesce(sum(s.chunk_count), 0) AS chunks, count(*) <= {exact_limit} AS counted
    FROM (SELECT d.chunk_count FROM {schema}.document d
          WHERE d.chunk_count > 0 AND {doc_filter}
          LIMIT {exact_limit} + 1) s
)

-- name: search_keyword_scope_whole
-- A whole collection: the GIN scans (its size is the postings' business).
kw_scope AS (SELECT false AS small, 0::bigint AS chunks, false AS counted)

-- name: search_keyword_gin
-- The postings of the pruned leg's words: the GIN index.
c.tsv @@ {query}

-- name: search_keyword_gin_readable
-- Read as principals, the chunk table is under row-level security, where PostgreSQL cannot
-- use the GIN index (the @@ operator is not leakproof: it would run on rows before the policy
-- hides them), and would read every chunk of the collection. The postings come from
-- readable_matches() instead, which runs as the tables' owner and returns the ids of the
-- matching chunks the acting principals may read; the rows are then read by primary key
-- (an equality PostgreSQL may use under the policy) and the policy holds them as ever.
c.id = ANY ({schema}.readable_matches(%(collection)s, {query}))

-- name: search_keyword_keep_join
-- kw_match's join to document, for the filters (a whole-collection search keeps every chunk).
JOIN {schema}.document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key

-- The row counts (LIMITs, caps, exact_limit) are literals in the search statements, not
-- parameters: a prepared statement then gets a generic plan that knows them (with LIMIT $n
-- the generic plan sorts the whole table, so Postgres re-plans every execution instead).

-- name: search_select
-- Each candidate once, with the rank and raw score of each leg that found it, its provenance
-- and, when asked, its neighbour window and its related node's chunks (result shaping in the
-- same round trip; the Python side merges the texts).
SELECT c.id AS chunk_id, cand.vector_rank, cand.distance, cand.keyword_rank, cand.keyword_score,
       c.position, c.section, c.anchor, c.content, c.token_count, c.content_hash,
       c.line_start, c.line_end, d.id AS document_id, d.path, d.title, d.collection,
       {window} AS window_chunks, {expanded} AS expanded, {phrases}
FROM ({candidates_of}) cand
{candidate_rows}
{expand_join}

-- name: search_candidate_rows
JOIN {schema}.chunk c ON c.id = cand.chunk_id AND c.collection = %(collection)s
JOIN {schema}.document d ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key

-- name: search_candidate_rows_held
-- Read as principals, the policies' conditions on chunk and document (an array overlap the
-- planner cannot estimate) can make a plain join read the whole collection to match a few
-- candidates: each candidate's chunk and document are read by primary key instead.
CROSS JOIN LATERAL (SELECT * FROM {schema}.chunk x
                    WHERE x.id = cand.chunk_id AND x.collection = %(collection)s OFFSET 0) c
CROSS JOIN LATERAL (SELECT * FROM {schema}.document y
                    WHERE y.id = c.document_id AND y.collection = %(collection)s
                      AND y.shard_key = c.shard_key OFFSET 0) d

-- name: search_phrases
-- Hybrid: the question's word pairs as phrases, in each text search configuration: two
-- neighbouring lexemes of the question, as far apart as they are in it (a stop-word between
-- them counts, as phraseto_tsquery counts it). The windows are the question's runs of two to
-- four words (search.phrase_windows), so that one or two stop-words may separate a pair; a
-- window that holds one lexeme, or three, is not a pair. An array parameter, not a series
-- computed from the text: the generic plan then knows the windows are few, and is reused.
phrases AS MATERIALIZED (
    SELECT DISTINCT g.cfg, p.q
    FROM unnest(%(ts_configs)s::regconfig[]) WITH ORDINALITY AS g(config, cfg)
    CROSS JOIN unnest(%(phrase_windows)s::text[]) AS w(words)
    CROSS JOIN LATERAL phraseto_tsquery(g.config, w.words) AS p(q)
    WHERE numnode(p.q) = 3
)

-- name: search_phrases_held
-- Each candidate's phrases of the question (its own configuration's), and how many the
-- question has in that configuration: the phrase leg (rag_pg.search.phrases). The CASE matches a
-- chunk's tsvector against its own configuration's phrases only.
ARRAY(SELECT p.q::text FROM phrases p
      WHERE CASE WHEN p.cfg = array_position(%(ts_configs)s::regconfig[], c.ts_config) THEN c.tsv @@ p.q ELSE false END ORDER BY 1)
    AS phrases_held,
(SELECT count(*) FROM phrases p WHERE p.cfg = array_position(%(ts_configs)s::regconfig[], c.ts_config))::integer AS phrases_asked

-- name: search_phrases_none
NULL::text[] AS phrases_held, NULL::integer AS phrases_asked

-- name: search_candidates_hybrid
SELECT coalesce(v.chunk_id, k.chunk_id) AS chunk_id, v.rank AS vector_rank, v.distance,
       k.rank AS keyword_rank, k.score AS keyword_score
FROM vec_ranked v FULL JOIN kw_ranked k ON k.chunk_id = v.chunk_id

-- name: search_candidates_vector
SELECT v.chunk_id, v.rank AS vector_rank, v.distance, NULL::bigint AS keyword_rank,
       NULL::float8 AS keyword_score
FROM vec_ranked v

-- name: search_candidates_keyword
SELECT k.chunk_id, NULL::bigint AS vector_rank, NULL::float8 AS distance,
       k.rank AS keyword_rank, k.score AS keyword_score
FROM kw_ranked k

-- name: search_window
(SELECT jsonb_agg(jsonb_build_object('position', w.position, 'section', w.section,
                                     'anchor', w.anchor, 'content', w.content) ORDER BY w.position)
 FROM {schema}.chunk w
 WHERE w.document_id = c.document_id AND w.collection = %(collection)s
   AND w.shard_key = c.shard_key
   AND w.position BETWEEN c.position - %(neighbours)s AND c.position + %(neighbours)s)

-- name: search_expand_documents
-- The candidates' documents, for their related nodes. The related nodes are read in their own
-- steps, not by a subquery of each row: on a cluster distributed by document a node and its
-- parent or children lie in other shards, which Citus reads only in a step of their own.
expand_documents AS MATERIALIZED (
    SELECT DISTINCT d.path, d.parent_path
    FROM ({candidates_of}) cand
    {candidate_rows}
)

-- name: search_expand_parent
-- The parent node (document.parent_path, a path in the same collection: `./a/b.md`,
-- `/a/b.md` and `a/b.md` name the same file), all its chunks in order; keyed by that path.
expand_nodes AS MATERIALIZED (
    SELECT p.path AS node_key, jsonb_build_object(
        'path', p.path, 'title', p.title,
        'chunks', coalesce((
            SELECT jsonb_agg(jsonb_build_object('position', pc.position, 'section', pc.section,
                                                'anchor', pc.anchor, 'content', pc.content)
                             ORDER BY pc.position)
            FROM {schema}.chunk pc
            WHERE pc.document_id = p.id AND pc.collection = %(collection)s
              AND pc.shard_key = p.shard_key), '[]'::jsonb)) AS node
    FROM {schema}.document p
    WHERE p.collection = %(collection)s
      AND p.path IN (SELECT ltrim(regexp_replace(e.parent_path, '^(\./)+', ''), '/')
                     FROM expand_documents e)
)

-- name: search_expand_parent_key
ltrim(regexp_replace(d.parent_path, '^(\./)+', ''), '/')

-- name: search_expand_children
-- The child nodes (documents whose parent_path is a candidate's document, as itself, ./ or /
-- before it), in path order, keyed by that document's path.
expand_nodes AS MATERIALIZED (
    SELECT k.node_key, jsonb_agg(jsonb_build_object(
        'path', ch.path, 'title', ch.title,
        'chunks', coalesce((
            SELECT jsonb_agg(jsonb_build_object('position', cc.position, 'section', cc.section,
                                                'anchor', cc.anchor, 'content', cc.content)
                             ORDER BY cc.position)
            FROM {schema}.chunk cc
            WHERE cc.document_id = ch.id AND cc.collection = %(collection)s
              AND cc.shard_key = ch.shard_key), '[]'::jsonb))
        ORDER BY ch.path) AS node
    FROM {schema}.document ch
    CROSS JOIN LATERAL (SELECT CASE WHEN ch.parent_path LIKE './%%' THEN substr(ch.parent_path, 3)
                                    WHEN ch.parent_path LIKE '/%%' THEN substr(ch.parent_path, 2)
                                    ELSE ch.parent_path END AS node_key) k
    WHERE ch.collection = %(collection)s
      AND k.node_key IN (SELECT e.path FROM expand_documents e)
    GROUP BY k.node_key
)

-- name: search_expand_children_key
d.path

-- name: search_expanded
-- A hit's related node: on its document's first candidate row only (computed once per document).
CASE WHEN row_number() OVER (PARTITION BY d.id, d.shard_key ORDER BY c.id) = 1 THEN x.node END

-- name: search_expand_join
LEFT JOIN expand_nodes x ON x.node_key = {key}

-- name: search_chunk_collection
c.collection IS NOT DISTINCT FROM %(collection)s

-- name: search_chunk_collection_routed
-- On a Citus coordinator: the equality by which the statement is routed to the collection's
-- worker (a scan it cannot prune to one shard sends every CTE through the coordinator).
c.collection = %(collection)s

-- name: search_filter_collection
d.collection = %(collection)s

-- name: search_filter_path_prefix
-- The document at the prefix, or one under it: in byte order the paths that start with
-- "docs/ops/" are those in ["docs/ops/", "docs/ops0") ("0" follows "/"), a range of the
-- (collection, path COLLATE "C") index, so only the matching documents are read.
(d.path = %(path_prefix)s
 OR (d.path COLLATE "C" >= %(path_prefix_dir)s AND d.path COLLATE "C" < %(path_prefix_end)s))

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

-- name: search_filter_readers
-- The rows the acting principals may read, as the reader policy decides (which holds them
-- anyway): written here too so that the plan counts them like any filter. {rows} is the
-- document (d), or a chunk (c) or vector row (cv), which carry their document's readers: the
-- keyword leg then needs no join, and the HNSW scan filters the rows it walks (with iterative
-- scans, until it has its rows), nothing joined before the final k.
({rows}.readers IS NULL OR {rows}.readers && %(readers)s::text[])

-- name: search_setting
-- One setting of a search, for its transaction only (SET LOCAL). The HNSW scan's; no sequential
-- scan of chunk for the GIN prefilter: the planner prices `tsv @@ query` like any operator and
-- picks a seq scan that detoasts every tsvector (measured 148 ms vs 3.6 ms for the bitmap scan
-- on 20,650 chunks). No parallel workers: a search statement holds branches that a one-time
-- filter leaves unexecuted (exact search or the index), and on a large collection the planner
-- gives such a branch a Gather whose workers start (~5 ms) even when the filter skips it.
-- SET LOCAL, not set_config(): on a Citus coordinator a SET LOCAL reaches the workers that run
-- the statement (citus.propagate_set_commands = local, which ragpg init sets there).
SET LOCAL {setting} = {value}

-- name: search_collection_engine
-- The keyword engine's columns of search_collection. The table's size is the planner's estimate
-- (pg_class.reltuples, at least the collection's own count): a share is a threshold, and an
-- exact count of every collection would read them all.
(SELECT extnamespace::regnamespace::text FROM pg_extension
        WHERE extname = 'pg_textsearch') AS engine_schema,
       (SELECT count(*) FROM pg_class x
        WHERE x.relnamespace = to_regnamespace({schema_name})
          AND x.relname IN ('chunk_bm25_french', 'chunk_bm25_english', 'chunk_bm25_simple')) = 3
           AS engine_ready,
       (SELECT sum(s.chunks) FROM {schema}.chunk_stat s WHERE s.collection = k.name)::bigint
           AS chunks,
       (SELECT min(s.chunks)::float8
               / greatest(max(t.reltuples)::float8, sum(s.chunks)::float8, 1)
        FROM {schema}.chunk_stat s
        CROSS JOIN (SELECT reltuples FROM pg_class
                    WHERE oid = to_regclass(format('%%I.chunk', {schema_name}))) t
        WHERE s.collection = k.name AND s.chunks > 0) AS engine_share

-- name: search_collection_engine_none
-- Where no engine can serve (a Citus cluster, or keyword_engine = sql): nothing read, no
-- catalog lookups on each search.
NULL::text AS engine_schema, false AS engine_ready, NULL::bigint AS chunks,
       NULL::float8 AS engine_share

-- name: search_collection
-- What the search's plan depends on, read in the search's own snapshot beside its statement:
-- the model and dimension of the collection's vectors (the query was embedded for one; a
-- `ragpg reembed` may have switched it since), whether its term statistics are pending (a
-- first load under way, or killed: migration 0014; the keyword leg then counts its own
-- document frequencies: the exhaustive leg), the type the model's partial HNSW index casts to
-- (a search must cast the same to use it; the name is store.vector_index_name's),
-- pgvector's version (iterative index scans need 0.8), and the keyword engine: the schema
-- of pg_textsearch when installed, whether its three indexes exist (the names are
-- store.keyword_engine.index_name's), the collection's chunks (whether a whole-collection
-- search walks the engine's index or scores them in SQL) and the smallest share of the
-- table's chunks its chunks of one configuration make (an engine index spans the table: a
-- scan for a small share walks the others' rows). One row, the collection known or not.
SELECT g.model, g.dimension,
       coalesce(g.term_stat_pending, false) AS term_stat_pending,
       CASE WHEN g.model IS NULL THEN NULL
            WHEN i.definition LIKE '%%::halfvec(%%' THEN 'halfvec'
            WHEN i.definition IS NOT NULL THEN 'vector' END AS vector_kind,
       (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS pgvector_version,
       {engine}
FROM (SELECT %(collection)s::text AS name) k
LEFT JOIN {schema}.collection g ON g.name = k.name
LEFT JOIN LATERAL (
    SELECT pg_get_indexdef(to_regclass(format('%%I.%%I', {schema_name},
        'chunk_vector_hnsw_'
        || left(encode(sha256(convert_to(coalesce(g.model, ''), 'UTF8')), 'hex'), 12))))
        AS definition
) i ON true
