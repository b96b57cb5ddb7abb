"""Model lifecycle: one row per ``ragpg reembed``, so a killed run is seen and resumed.

The vectors themselves need no new table: ``chunk_vector`` is keyed by (chunk, model), so the
new model's rows live beside the old ones while a re-embed runs, and "what is left to do" is
simply the chunks without a vector of the target model. This table records the intent
(source and target model, whether to keep the old vectors) and the progress, for
``ragpg reembed`` to say "resuming" and for operators to see a run that was interrupted.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from rag_pg.migrations import ddl

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE {s}.reembed_run (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    collection        text NOT NULL,
    source_model      text,
    source_dimension  integer,
    target_model      text NOT NULL,
    target_dimension  integer NOT NULL CHECK (target_dimension > 0),
    keep_old          boolean NOT NULL DEFAULT false,
    -- running: vectors being written (a killed run stays here until resumed)
    -- switched: the collection serves the target; old vectors may still be dropped
    -- completed | failed | abandoned (superseded by a re-embed to another model)
    status            text NOT NULL DEFAULT 'running'
        CHECK (status IN ('running', 'switched', 'completed', 'failed', 'abandoned')),
    chunks_total      integer NOT NULL DEFAULT 0,
    chunks_embedded   integer NOT NULL DEFAULT 0,
    chunks_failed     integer NOT NULL DEFAULT 0,
    resumed           integer NOT NULL DEFAULT 0,
    started_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    error             text
);
CREATE INDEX reembed_run_collection_idx ON {s}.reembed_run (collection, id DESC);
COMMENT ON TABLE {s}.reembed_run IS
    'One row per `ragpg reembed`: source and target model, progress, and how it ended.';
"""

DOWNGRADE = """
DROP TABLE IF EXISTS {s}.reembed_run;
"""


def upgrade(schema: str = "ragpg") -> None:
    ddl.run(UPGRADE, schema)


def downgrade(schema: str = "ragpg") -> None:
    ddl.run(DOWNGRADE, schema)
