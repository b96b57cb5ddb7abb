"""A btree over the documents' paths in byte order, so that a path-prefix filter is a range.

A search under ``docs/ops`` keeps the documents whose path is ``docs/ops`` or starts with
``docs/ops/``. As ``starts_with`` under the database's collation that is a filter on every
document row of the collection, read before any chunk: linear in the collection, twice per
hybrid search (the exact-or-index decision, then the leg itself). In byte order (the "C"
collation, whatever the database's) the paths under ``docs/ops/`` are exactly those in
[``docs/ops/``, ``docs/ops0``) (``0`` follows ``/``), a range this index serves with the
collection as its first column. The unique (collection, path) index stays: it serves the
upserts and the equality under the database's collation.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from rag_pg.migrations import ddl

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade(schema: str = "ragpg") -> None:
    ddl.run('CREATE INDEX document_collection_path_bytes_idx ON {s}.document (collection, path COLLATE "C")',
            schema)


def downgrade(schema: str = "ragpg") -> None:
    ddl.run("DROP INDEX {s}.document_collection_path_bytes_idx", schema)
