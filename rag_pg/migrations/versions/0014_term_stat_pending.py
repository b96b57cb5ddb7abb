"""A collection's term statistics may be pending: not kept row batch by row batch, rebuilt once.

The first load of a collection writes every chunk once. Kept up by the triggers, each write
batch aggregates its lexemes and merges them into ``term_stat``, where the frequent words of
every batch are updated again and again: on a cold ingest about a third of the writer's time
in the database. Aggregated once over the loaded chunks they cost a fraction of that.

``collection.term_stat_pending`` says that the collection's rows of ``term_stat`` and
``chunk_stat`` are not maintained: the triggers leave its chunks out, and a rebuild (the
store's ``term_stats_rebuild``, one transaction: delete, aggregate, clear the flag) makes
them exact again. An ingest sets it before the first write of a first load and rebuilds at
its end; a load killed in between leaves the flag set, so the next ingest rebuilds, and
until then searches do not read the statistics (the exhaustive keyword leg counts its own
document frequencies; the size class counts the documents' chunks).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from rag_pg.migrations import ddl

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE {s}.collection ADD COLUMN term_stat_pending boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN {s}.collection.term_stat_pending IS
    'true while term_stat and chunk_stat do not follow this collection''s chunks (a first load'
    ' in progress or killed); the next ingest rebuilds them';
"""

# 0012's function, with the chunks of pending collections left out of every aggregate.
FOLLOW = """
CREATE OR REPLACE FUNCTION {s}.term_stat_follow() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    pending text[] := ARRAY(SELECT k.name FROM {s}.collection k WHERE k.term_stat_pending);
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        WITH gone AS MATERIALIZED (
            SELECT o.collection, o.ts_config, u.lexeme, count(*) AS df
            FROM old_rows o CROSS JOIN LATERAL unnest(o.tsv) AS u
            WHERE o.collection <> ALL (pending)
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
              FROM old_rows o WHERE o.collection <> ALL (pending) GROUP BY 1, 2) g
        WHERE t.collection = g.collection AND t.ts_config = g.ts_config;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        MERGE INTO {s}.term_stat t
        USING (SELECT n.collection, n.ts_config, u.lexeme, count(*) AS df,
                      max(cardinality(u.positions)) AS max_tf, min(n.token_count) AS min_dl
               FROM new_rows n CROSS JOIN LATERAL unnest(n.tsv) AS u
               WHERE n.collection <> ALL (pending)
               GROUP BY 1, 2, 3) a
        ON t.collection = a.collection AND t.ts_config = a.ts_config AND t.lexeme = a.lexeme
        WHEN MATCHED THEN UPDATE SET df = t.df + a.df, max_tf = greatest(t.max_tf, a.max_tf),
                                     min_dl = least(t.min_dl, a.min_dl)
        WHEN NOT MATCHED THEN INSERT (collection, ts_config, lexeme, df, max_tf, min_dl)
            VALUES (a.collection, a.ts_config, a.lexeme, a.df, a.max_tf, a.min_dl);
        MERGE INTO {s}.chunk_stat t
        USING (SELECT n.collection, n.ts_config, count(*) AS chunks, sum(n.token_count) AS tokens
               FROM new_rows n WHERE n.collection <> ALL (pending) GROUP BY 1, 2) a
        ON t.collection = a.collection AND t.ts_config = a.ts_config
        WHEN MATCHED THEN UPDATE SET chunks = t.chunks + a.chunks, tokens = t.tokens + a.tokens
        WHEN NOT MATCHED THEN INSERT (collection, ts_config, chunks, tokens)
            VALUES (a.collection, a.ts_config, a.chunks, a.tokens);
    END IF;
    RETURN NULL;
END
$fn$;
"""

# Going down: whatever is pending is rebuilt first (0012's triggers assume exact rows).
DOWNGRADE = """
DELETE FROM {s}.term_stat t USING {s}.collection k WHERE k.term_stat_pending AND t.collection = k.name;
DELETE FROM {s}.chunk_stat t USING {s}.collection k WHERE k.term_stat_pending AND t.collection = k.name;
INSERT INTO {s}.term_stat (collection, ts_config, lexeme, df, max_tf, min_dl)
SELECT c.collection, c.ts_config, u.lexeme, count(*), max(cardinality(u.positions)), min(c.token_count)
FROM {s}.chunk c JOIN {s}.collection k ON k.name = c.collection AND k.term_stat_pending
CROSS JOIN LATERAL unnest(c.tsv) AS u
GROUP BY 1, 2, 3;
INSERT INTO {s}.chunk_stat (collection, ts_config, chunks, tokens)
SELECT c.collection, c.ts_config, count(*), sum(c.token_count)
FROM {s}.chunk c JOIN {s}.collection k ON k.name = c.collection AND k.term_stat_pending
GROUP BY 1, 2;
ALTER TABLE {s}.collection DROP COLUMN term_stat_pending;
"""


def upgrade(schema: str = "ragpg") -> None:
    ddl.run(UPGRADE, schema)
    ddl.run(FOLLOW, schema)


def downgrade(schema: str = "ragpg") -> None:
    merge: str = ddl.revision_module("0012_term_stat_merge.py").FOLLOW  # the function replaced
    ddl.run(merge, schema)  # before the column goes: this function reads it
    ddl.run(DOWNGRADE, schema)
