"""``keyword_search()`` ranks with BM25, the same ranking as the library's keyword mode.

The first version ranked with ``ts_rank``: the same words gave different top hits in SQL and
through ``ragpg search --mode keyword``. This body is the search statement's keyword leg
(``search_keyword_leg`` in rag_pg/store/sql/search.sql: per-configuration terms, document
frequencies counted over the matching chunks, N and average length from ``document``) with
the default parameters k1 = 1.2, b = 0.75, and the query split into words as
``rag_pg.search.bm25.keyword_query`` splits it: runs of letters and digits (every space, control
character, ASCII punctuation, ``_`` and the usual Unicode punctuation ends a word), the first
256 words scored (repeats weigh), the first 64 distinct ones quoted and OR-ed for the GIN
prefilter. The separators are listed rather than taken from ``[[:alnum:]]``, whose meaning
beyond ASCII depends on the database's locale (in the C locale ``é`` would split a word).
Ties are broken by chunk id, as in the search statement. The arguments and result columns
are unchanged (a contract); tests/test_search.py pins that both return the same top 10.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from types import ModuleType

from psycopg import sql

from rag_pg.migrations import ddl

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# Word separators (a regex bracket expression), the SQL twin of bm25._WORD's complement.
SEPARATORS = (r"[[:space:][:punct:][:cntrl:]\u00a0-\u00a9\u00ab-\u00b1\u00b4\u00b6-\u00b8"
              r"\u00bb\u00bf\u00d7\u00f7\u2000-\u206f\u20a0-\u20cf\u3000-\u303f\ufeff]+")

KEYWORD_SEARCH = """
CREATE OR REPLACE FUNCTION {s}.keyword_search(query text, k integer, collection text DEFAULT 'default')
RETURNS TABLE (path text, title text, section text, anchor text, "position" integer,
               score double precision, content text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $fn$
WITH tokens AS (
    SELECT t.word, t.n
    FROM regexp_split_to_table(left(coalesce(keyword_search.query, ''), 65536), {sep})
         WITH ORDINALITY AS t(word, n)
    WHERE t.word <> ''
    ORDER BY t.n
    LIMIT 256
),
firsts AS (
    SELECT DISTINCT ON (lower(t.word)) lower(t.word) AS lw, t.word, t.n
    FROM tokens t ORDER BY lower(t.word), t.n
),
distinct_words AS (
    SELECT f.lw, f.word, f.n FROM firsts f ORDER BY f.n LIMIT 64
),
q AS (
    SELECT (SELECT string_agg(t.word, ' ' ORDER BY t.n)
            FROM tokens t JOIN distinct_words w ON w.lw = lower(t.word)) AS kw_text,
           (SELECT string_agg('"' || w.word || '"', ' or ' ORDER BY w.n)
            FROM distinct_words w) AS kwq
    WHERE coalesce(keyword_search.k, 0) > 0
),
kw_terms AS (
    SELECT t.cfg, t.language, u.lexeme, cardinality(u.positions) AS qtf
    FROM q
    CROSS JOIN unnest(ARRAY[{fr}, {en}, {si}]::regconfig[], ARRAY['french', 'english', 'simple'])
         AS t(cfg, language)
    CROSS JOIN LATERAL unnest(to_tsvector(t.cfg, q.kw_text)) AS u
),
kw_match AS MATERIALIZED (
    SELECT c.id AS chunk_id, c.ts_config, c.token_count AS dl, m.lexeme,
           cardinality(m.positions) AS tf
    FROM q
    JOIN {s}.chunk c
      ON c.tsv @@ (websearch_to_tsquery({fr}::regconfig, q.kwq)
                   || websearch_to_tsquery({en}::regconfig, q.kwq)
                   || websearch_to_tsquery({si}::regconfig, q.kwq))
    CROSS JOIN LATERAL unnest(ts_filter(
        setweight(c.tsv, 'A', (SELECT array_agg(DISTINCT lexeme) FROM kw_terms)),
        ARRAY['a']::"char"[])) AS m
    WHERE c.collection = keyword_search.collection
),
kw_scored_terms AS (
    SELECT m.chunk_id, m.dl, m.tf, t.qtf, t.language,
           count(*) OVER (PARTITION BY t.cfg, t.lexeme) AS df
    FROM kw_match m
    JOIN kw_terms t ON t.cfg = m.ts_config AND t.lexeme = m.lexeme
),
kw_stats AS (
    SELECT d.language, sum(d.chunk_count)::float8 AS n,
           greatest(sum(d.token_count)::float8 / greatest(sum(d.chunk_count), 1), 1) AS avgdl
    FROM {s}.document d WHERE d.collection = keyword_search.collection
    GROUP BY d.language
),
kw AS (
    SELECT m.chunk_id,
           sum(m.qtf * ln(1 + (s.n - m.df + 0.5) / (m.df + 0.5))
               * m.tf * (1.2::float8 + 1)
               / (m.tf + 1.2::float8 * (1 - 0.75::float8 + 0.75::float8 * m.dl / s.avgdl))) AS score
    FROM kw_scored_terms m
    JOIN kw_stats s ON s.language = m.language
    GROUP BY m.chunk_id
)
SELECT d.path, d.title, c.section, c.anchor, c.position, kw.score::double precision, c.content
FROM kw
JOIN {s}.chunk c ON c.id = kw.chunk_id AND c.collection = keyword_search.collection
JOIN {s}.document d ON d.id = c.document_id AND d.collection = c.collection
ORDER BY kw.score DESC, kw.chunk_id
LIMIT least(greatest(coalesce(keyword_search.k, 0), 0), 1000)
$fn$;
"""

COMMENT = (
    "Keyword search over chunks, best first, ranked by BM25 (k1 1.2, b 0.75) as the library's "
    "keyword mode ranks: keyword_search(query, k, collection default 'default') -> (path, title, "
    "section, anchor, position, score, content). Any text is accepted (words are runs of letters "
    "and digits, OR-ed, stemmed in the chunk's language, accents folded); a query of stop words "
    "only returns no rows; k is capped at 1000. Runs with the schema owner's rights (SECURITY "
    "DEFINER): grant EXECUTE, not table access."
)


def _configs(schema: str) -> dict[str, sql.Composable]:
    return {name: sql.Literal(ddl.qualified(schema, config))
            for name, config in (("fr", "french"), ("en", "english"), ("si", "simple"))}


def _comment(schema: str, text: str) -> sql.Composed:
    return sql.SQL("COMMENT ON FUNCTION {}.keyword_search(text, integer, text) IS {}").format(
        sql.Identifier(schema), sql.Literal(text))


def upgrade(schema: str = "ragpg") -> None:
    ddl.run(KEYWORD_SEARCH, schema, sep=sql.Literal(SEPARATORS), **_configs(schema))
    ddl.driver().execute(_comment(schema, COMMENT))


def _first_version() -> ModuleType:
    """The 0002 migration, whose function this one replaces."""
    return ddl.revision_module("0002_sql_surface.py")


def downgrade(schema: str = "ragpg") -> None:
    first = _first_version()
    body = first.KEYWORD_SEARCH.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
    ddl.run(body, schema, **_configs(schema))
    ddl.driver().execute(_comment(schema, first.FUNCTION_COMMENT))
