-- The keyword leg's engine (rag_pg/store/keyword_engine.py): pg_textsearch's BM25 indexes, one
-- per text search configuration, and where the extension lives.

-- name: keyword_engine_extension
-- The schema pg_textsearch is installed in (NULL: not installed), and whether the server
-- offers it (a package on disk; creating it also needs the library preloaded).
SELECT (SELECT extnamespace::regnamespace::text FROM pg_extension
        WHERE extname = 'pg_textsearch') AS installed_in,
       EXISTS (SELECT FROM pg_available_extensions WHERE name = 'pg_textsearch') AS offered;

-- name: keyword_engine_install
CREATE EXTENSION IF NOT EXISTS pg_textsearch;

-- name: keyword_engine_indexes
-- The engine indexes of these names that exist, with their storage parameters.
SELECT c.relname AS name, coalesce(c.reloptions, '{{}}') AS options
FROM pg_class c
WHERE c.relnamespace = to_regnamespace(%(schema)s) AND c.relname = ANY(%(names)s);

-- name: keyword_engine_index_create
-- Every chunk, analysed in one configuration (a search reads it for its collection's chunks
-- in that configuration).
CREATE INDEX IF NOT EXISTS {index} ON {schema}.chunk USING bm25 (content)
    WITH (text_config = {config}, k1 = {k1}, b = {b});

-- name: keyword_engine_index_drop
DROP INDEX IF EXISTS {schema}.{index};
