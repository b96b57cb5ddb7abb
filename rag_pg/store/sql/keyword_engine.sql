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

-- name: keyword_engine_column_present
SELECT EXISTS (SELECT FROM pg_attribute
               WHERE attrelid = to_regclass(%(chunk)s) AND attname = 'bm25_text'
                 AND NOT attisdropped) AS present;

-- name: keyword_engine_column_add
-- What the engine indexes: the text of the chunk's tsv (its section heading, then its content).
-- pg_textsearch indexes a column, not an expression, hence a stored column (a rewrite of the
-- table, once, when the engine is first used).
ALTER TABLE {schema}.chunk ADD COLUMN IF NOT EXISTS bm25_text text
    GENERATED ALWAYS AS (section || E'\n' || content) STORED;

-- name: keyword_engine_index_create
-- Every chunk, analysed in one configuration (a search reads it for its collection's chunks
-- in that configuration).
CREATE INDEX IF NOT EXISTS {index} ON {schema}.chunk USING bm25 (bm25_text)
    WITH (text_config = {config}, k1 = {k1}, b = {b});

-- name: keyword_engine_index_drop
DROP INDEX IF EXISTS {schema}.{index};
