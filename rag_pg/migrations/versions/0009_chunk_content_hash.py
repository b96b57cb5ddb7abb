"""Chunks are found by their content hash: an ingest reuses the vector of an unchanged text.

Before embedding a group of changed documents, ingest asks for the stored vectors of the
chunks whose embedded text (document title, section, content) and model are the same as a
new chunk's; the lookup starts from the content hash, within the collection. Without this
index that lookup would read every chunk of the collection for each group.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from rag_pg.migrations import ddl

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE INDEX chunk_collection_content_hash_idx ON {s}.chunk (collection, content_hash);
"""

DOWNGRADE = """
DROP INDEX IF EXISTS {s}.chunk_collection_content_hash_idx;
"""


def upgrade(schema: str = "ragpg") -> None:
    ddl.run(UPGRADE, schema)


def downgrade(schema: str = "ragpg") -> None:
    ddl.run(DOWNGRADE, schema)
