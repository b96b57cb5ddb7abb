"""Per-term statistics of each collection, kept by the database itself, for a pruned BM25 top-k.

``term_stat`` holds, per (collection, text search configuration, lexeme): ``df``, the number
of chunks whose tsvector holds the lexeme, and two bounds that let a search skip chunks that
cannot reach its top k: ``max_tf``, the largest frequency of the lexeme in one chunk, and
``min_dl``, the shortest chunk (token_count) that holds it. BM25's term weight grows with tf
and shrinks with the length, so idf * f(max_tf, min_dl) bounds what the term can add to any
chunk's score. Deletes only decrement ``df``: the two bounds then stay valid (only looser),
and a re-ingest that writes the term again tightens nothing but never breaks them.

``chunk_stat`` holds, per (collection, configuration), the number of chunks and their total
``token_count``: BM25's N and average length, without reading every document row.

Statement-level triggers on ``chunk`` keep both tables exact in the writer's own transaction,
whatever writes the chunks: the store's COPY, a document deleted with its chunks (the
cascade), a collection dropped by hand, TRUNCATE. Each fires once per statement with the
statement's rows (transition tables): one aggregated upsert per written batch, never a
statement per row. Every write batch updates the rows of its words (common words in every
batch): half-empty pages keep those updates on their page (HOT), without a new index entry
each time. A reader therefore sees df in the same snapshot as the chunks: the pruned
search and the exhaustive one count the same df.

``keyword_search()`` (the SQL function) sums each chunk's terms in lexeme order, as the search
statements now do: two chunks with the same terms then get bit-identical scores and the tie
goes to the lower chunk id in both, whatever order a plan feeds the rows in.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from types import ModuleType

from psycopg import sql

from rag_pg.migrations import ddl

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE {s}.term_stat (
    collection text NOT NULL,
    ts_config  regconfig NOT NULL,
    lexeme     text NOT NULL,
    df         integer NOT NULL CHECK (df > 0),
    max_tf     integer NOT NULL,
    min_dl     integer NOT NULL,
    PRIMARY KEY (collection, ts_config, lexeme)
) WITH (fillfactor = 50);
COMMENT ON TABLE {s}.term_stat IS
    'Per collection, text search configuration and lexeme: document frequency (chunks holding it), '
    'largest frequency in one chunk and shortest chunk holding it (bounds: looser after deletes). '
    'Maintained by triggers on chunk; read by the keyword search.';

CREATE TABLE {s}.chunk_stat (
    collection text NOT NULL,
    ts_config  regconfig NOT NULL,
    chunks     bigint NOT NULL,
    tokens     bigint NOT NULL,
    PRIMARY KEY (collection, ts_config)
) WITH (fillfactor = 50);
COMMENT ON TABLE {s}.chunk_stat IS
    'Per collection and text search configuration: chunks and their total token_count (BM25''s N '
    'and average length). Maintained by triggers on chunk; read by the keyword search.';

INSERT INTO {s}.term_stat (collection, ts_config, lexeme, df, max_tf, min_dl)
SELECT c.collection, c.ts_config, u.lexeme, count(*), max(cardinality(u.positions)), min(c.token_count)
FROM {s}.chunk c CROSS JOIN LATERAL unnest(c.tsv) AS u
GROUP BY 1, 2, 3;
INSERT INTO {s}.chunk_stat (collection, ts_config, chunks, tokens)
SELECT c.collection, c.ts_config, count(*), sum(c.token_count) FROM {s}.chunk c GROUP BY 1, 2;

-- One function for the three row events. A deleted chunk takes its lexemes' df down (a term
-- no chunk holds any more goes); an added one raises df and widens the bounds; an update is
-- both. Rows are aggregated per statement and upserted in key order.
CREATE FUNCTION {s}.term_stat_follow() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        WITH gone AS MATERIALIZED (
            SELECT o.collection, o.ts_config, u.lexeme, count(*) AS df
            FROM old_rows o CROSS JOIN LATERAL unnest(o.tsv) AS u
            GROUP BY 1, 2, 3
        ),
        emptied AS (
            DELETE FROM {s}.term_stat t USING gone g
            WHERE t.collection = g.collection AND t.ts_config = g.ts_config
              AND t.lexeme = g.lexeme AND t.df <= g.df
        )
        UPDATE {s}.term_stat t SET df = t.df - g.df
        FROM gone g
        WHERE t.collection = g.collection AND t.ts_config = g.ts_config
          AND t.lexeme = g.lexeme AND t.df > g.df;
        UPDATE {s}.chunk_stat t SET chunks = t.chunks - g.chunks, tokens = t.tokens - g.tokens
        FROM (SELECT o.collection, o.ts_config, count(*) AS chunks, sum(o.token_count) AS tokens
              FROM old_rows o GROUP BY 1, 2) g
        WHERE t.collection = g.collection AND t.ts_config = g.ts_config;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO {s}.term_stat AS t (collection, ts_config, lexeme, df, max_tf, min_dl)
        SELECT n.collection, n.ts_config, u.lexeme, count(*), max(cardinality(u.positions)),
               min(n.token_count)
        FROM new_rows n CROSS JOIN LATERAL unnest(n.tsv) AS u
        GROUP BY 1, 2, 3
        ORDER BY 1, 2, 3
        ON CONFLICT (collection, ts_config, lexeme) DO UPDATE
        SET df = t.df + EXCLUDED.df, max_tf = greatest(t.max_tf, EXCLUDED.max_tf),
            min_dl = least(t.min_dl, EXCLUDED.min_dl);
        INSERT INTO {s}.chunk_stat AS t (collection, ts_config, chunks, tokens)
        SELECT n.collection, n.ts_config, count(*), sum(n.token_count)
        FROM new_rows n GROUP BY 1, 2 ORDER BY 1, 2
        ON CONFLICT (collection, ts_config) DO UPDATE
        SET chunks = t.chunks + EXCLUDED.chunks, tokens = t.tokens + EXCLUDED.tokens;
    END IF;
    RETURN NULL;
END
$fn$;

CREATE FUNCTION {s}.term_stat_clear() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    DELETE FROM {s}.term_stat;
    DELETE FROM {s}.chunk_stat;
    RETURN NULL;
END
$fn$;

REVOKE ALL ON FUNCTION {s}.term_stat_follow(), {s}.term_stat_clear() FROM PUBLIC;

CREATE TRIGGER term_stat_insert AFTER INSERT ON {s}.chunk
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.term_stat_follow();
CREATE TRIGGER term_stat_delete AFTER DELETE ON {s}.chunk
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.term_stat_follow();
CREATE TRIGGER term_stat_update AFTER UPDATE ON {s}.chunk
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.term_stat_follow();
CREATE TRIGGER term_stat_truncate AFTER TRUNCATE ON {s}.chunk
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.term_stat_clear();
"""

DOWNGRADE = """
DROP TRIGGER term_stat_truncate ON {s}.chunk;
DROP TRIGGER term_stat_update ON {s}.chunk;
DROP TRIGGER term_stat_delete ON {s}.chunk;
DROP TRIGGER term_stat_insert ON {s}.chunk;
DROP FUNCTION {s}.term_stat_clear();
DROP FUNCTION {s}.term_stat_follow();
DROP TABLE {s}.chunk_stat;
DROP TABLE {s}.term_stat;
"""


def _bm25_version() -> ModuleType:
    """The 0006 migration, whose keyword_search() this one rewrites."""
    return ddl.revision_module("0006_keyword_search_bm25.py")


def _ordered_sum(body: str) -> str:
    """0006's keyword_search() body with the per-chunk sum in lexeme order."""
    replacements = (
        ("SELECT m.chunk_id, m.dl, m.tf, t.qtf, t.language,",
         "SELECT m.chunk_id, m.lexeme, m.dl, m.tf, t.qtf, t.language,"),
        ("* m.dl / s.avgdl))) AS score", "* m.dl / s.avgdl)) ORDER BY m.lexeme) AS score"),
    )
    for old, new in replacements:
        assert body.count(old) == 1, old
        body = body.replace(old, new)
    return body


def upgrade(schema: str = "ragpg") -> None:
    ddl.run(UPGRADE, schema)
    bm25 = _bm25_version()
    ddl.run(_ordered_sum(bm25.KEYWORD_SEARCH), schema, sep=sql.Literal(bm25.SEPARATORS),
            **bm25._configs(schema))


def downgrade(schema: str = "ragpg") -> None:
    bm25 = _bm25_version()
    ddl.run(bm25.KEYWORD_SEARCH, schema, sep=sql.Literal(bm25.SEPARATORS), **bm25._configs(schema))
    ddl.run(DOWNGRADE, schema)
