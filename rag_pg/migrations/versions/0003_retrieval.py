"""Retrieval: evaluation history (``ragpg eval``).

BM25 needs no table of its own: document frequencies are counted in the search statement from
the chunks matching the query (the GIN prefilter already visits them), and N / average length
come from ``document.chunk_count`` / ``token_count``, so the statistics are always those of the
reader's snapshot; see docs/retrieval.md for the measurements behind that choice.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from rag_pg.migrations import ddl

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE {s}.eval_run (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    started_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz NOT NULL DEFAULT now(),
    questions_file    text NOT NULL,
    questions_sha256  text NOT NULL,
    question_count    integer NOT NULL,
    collection        text NOT NULL,
    root              text,
    k                 integer NOT NULL,
    modes             text[] NOT NULL,
    metrics           jsonb NOT NULL,
    settings          jsonb NOT NULL DEFAULT '{{}}'::jsonb
);
CREATE INDEX eval_run_collection_idx ON {s}.eval_run (collection, started_at DESC);
COMMENT ON TABLE {s}.eval_run IS
    'One row per `ragpg eval` run: metrics per mode (hit@1, hit@5, mrr@10, ndcg@10, recall@10).';
"""

DOWNGRADE = """
DROP TABLE IF EXISTS {s}.eval_run;
"""


def upgrade(schema: str = "ragpg") -> None:
    ddl.run(UPGRADE, schema)


def downgrade(schema: str = "ragpg") -> None:
    ddl.run(DOWNGRADE, schema)
