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

# The hashes are computed in a CTE joined back on the key: Citus refuses an UPDATE of a
# distributed table that calls a STABLE function (convert_to) on its columns, and runs the
# CTE on its own (one server inlines it: the same plan as a plain UPDATE).
REHASH = """
WITH h AS (SELECT id, collection, encode(sha256(convert_to({text}, 'UTF8')), 'hex') AS hash
           FROM {s}.chunk)
UPDATE {s}.chunk c SET content_hash = h.hash
FROM h WHERE h.id = c.id AND h.collection = c.collection;
COMMENT ON COLUMN {s}.chunk.content_hash IS {comment};
"""
# A schema distributed over Citus has no trigger on chunk (rag_pg.store.distribution), and
# Citus refuses ALTER TABLE ... TRIGGER on its tables: only where the triggers are.
TRIGGERS = "ALTER TABLE {s}.chunk {toggle} TRIGGER USER;"


def _rehash(schema: str, text: str, comment: str) -> None:
    triggers = ddl.has_term_stat_triggers(schema)
    if triggers:
        ddl.run(TRIGGERS, schema, toggle=sql.SQL("DISABLE"))
    ddl.run(REHASH, schema, text=sql.SQL(text), comment=sql.Literal(comment))
    if triggers:
        ddl.run(TRIGGERS, schema, toggle=sql.SQL("ENABLE"))


def upgrade(schema: str = "ragpg") -> None:
    _rehash(schema, "section || E'\\n' || content", "sha256 of the section, a newline and the content")


def downgrade(schema: str = "ragpg") -> None:
    _rehash(schema, "content", "sha256 of the content")
