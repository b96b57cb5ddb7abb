"""A chunk's hash covers its section as well as its text.

The section is part of what a chunk is embedded as and of its tsvector: a chunk whose section
changed after it was indexed (by hand, by a faulty writer) must not pass ``ragpg check`` with
a vector and keywords of another section. ``content_hash`` becomes sha256(section, a newline,
content); the stored hashes are computed again, the term statistics' triggers left out (the
tsvectors do not change).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07
"""

from psycopg import sql

from rag_pg.migrations import ddl

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

REHASH = """
ALTER TABLE {s}.chunk DISABLE TRIGGER USER;
UPDATE {s}.chunk SET content_hash = encode(sha256(convert_to({text}, 'UTF8')), 'hex');
ALTER TABLE {s}.chunk ENABLE TRIGGER USER;
COMMENT ON COLUMN {s}.chunk.content_hash IS {comment};
"""


def upgrade(schema: str = "ragpg") -> None:
    ddl.run(REHASH, schema, text=sql.SQL("section || E'\\n' || content"),
            comment=sql.Literal("sha256 of the section, a newline and the content"))


def downgrade(schema: str = "ragpg") -> None:
    ddl.run(REHASH, schema, text=sql.SQL("content"),
            comment=sql.Literal("sha256 of the content"))
