"""Each chunk remembers the lines of its file it was read from, so a hit can say where it is.

Nullable: chunks written before this revision have no span until their file is indexed again
(the parser's version is part of the pipeline fingerprint, so the next ingest re-reads them).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from rag_pg.migrations import ddl

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE {s}.chunk
    ADD COLUMN line_start integer CHECK (line_start > 0),
    ADD COLUMN line_end integer CHECK (line_end >= line_start);
COMMENT ON COLUMN {s}.chunk.line_start IS
    'First line of the file (1-based, front matter counted) the chunk was read from; NULL if unknown.';
COMMENT ON COLUMN {s}.chunk.line_end IS
    'Last line of the file (1-based, inclusive) the chunk was read from; NULL if unknown.';
"""

DOWNGRADE = """
ALTER TABLE {s}.chunk DROP COLUMN line_end, DROP COLUMN line_start;
"""


def upgrade(schema: str = "ragpg") -> None:
    ddl.run(UPGRADE, schema)


def downgrade(schema: str = "ragpg") -> None:
    ddl.run(DOWNGRADE, schema)
