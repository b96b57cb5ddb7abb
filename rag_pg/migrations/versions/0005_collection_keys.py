"""Every row names its collection: the schema can be sharded by collection (Citus).

``chunk`` and ``chunk_vector`` reached their collection only through ``document``. Citus
distributes a table on a column of its own and requires every primary key, unique
constraint and foreign key between distributed tables to include that column, so each of
the three tables now carries ``collection`` and every key includes it (as its last column:
lookups by id keep using the key's leading columns, on one server nothing gets slower).
With the collection on ``chunk_vector`` a search filters the vector scan directly instead of
joining two tables for every candidate. docs/scaling.md shows the distribution calls.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from rag_pg.migrations import ddl

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE {s}.chunk_vector DROP CONSTRAINT chunk_vector_chunk_id_fkey;
ALTER TABLE {s}.chunk DROP CONSTRAINT chunk_document_id_fkey;

ALTER TABLE {s}.document
    DROP CONSTRAINT document_pkey,
    ADD CONSTRAINT document_pkey PRIMARY KEY (id, collection);

ALTER TABLE {s}.chunk ADD COLUMN collection text;
UPDATE {s}.chunk c SET collection = d.collection FROM {s}.document d WHERE d.id = c.document_id;
ALTER TABLE {s}.chunk
    ALTER COLUMN collection SET NOT NULL,
    DROP CONSTRAINT chunk_pkey,
    ADD CONSTRAINT chunk_pkey PRIMARY KEY (id, collection),
    DROP CONSTRAINT chunk_document_position_key,
    ADD CONSTRAINT chunk_document_position_key UNIQUE (document_id, position, collection),
    ADD CONSTRAINT chunk_document_fkey FOREIGN KEY (document_id, collection)
        REFERENCES {s}.document (id, collection) ON DELETE CASCADE;

ALTER TABLE {s}.chunk_vector ADD COLUMN collection text;
UPDATE {s}.chunk_vector v SET collection = c.collection FROM {s}.chunk c WHERE c.id = v.chunk_id;
ALTER TABLE {s}.chunk_vector
    ALTER COLUMN collection SET NOT NULL,
    DROP CONSTRAINT chunk_vector_pkey,
    ADD CONSTRAINT chunk_vector_pkey PRIMARY KEY (chunk_id, model, collection),
    ADD CONSTRAINT chunk_vector_chunk_fkey FOREIGN KEY (chunk_id, collection)
        REFERENCES {s}.chunk (id, collection) ON DELETE CASCADE;

COMMENT ON COLUMN {s}.chunk.collection IS
    'The collection of the chunk''s document (the sharding key; equal to document.collection).';
COMMENT ON COLUMN {s}.chunk_vector.collection IS
    'The collection of the vector''s chunk (the sharding key; equal to chunk.collection).';
"""

DOWNGRADE = """
ALTER TABLE {s}.chunk_vector DROP CONSTRAINT chunk_vector_chunk_fkey;
ALTER TABLE {s}.chunk DROP CONSTRAINT chunk_document_fkey;
ALTER TABLE {s}.chunk_vector
    DROP CONSTRAINT chunk_vector_pkey,
    ADD CONSTRAINT chunk_vector_pkey PRIMARY KEY (chunk_id, model),
    DROP COLUMN collection;
ALTER TABLE {s}.chunk
    DROP CONSTRAINT chunk_pkey,
    ADD CONSTRAINT chunk_pkey PRIMARY KEY (id),
    DROP CONSTRAINT chunk_document_position_key,
    ADD CONSTRAINT chunk_document_position_key UNIQUE (document_id, position),
    DROP COLUMN collection;
ALTER TABLE {s}.document
    DROP CONSTRAINT document_pkey,
    ADD CONSTRAINT document_pkey PRIMARY KEY (id);
ALTER TABLE {s}.chunk ADD CONSTRAINT chunk_document_id_fkey FOREIGN KEY (document_id)
    REFERENCES {s}.document (id) ON DELETE CASCADE;
ALTER TABLE {s}.chunk_vector ADD CONSTRAINT chunk_vector_chunk_id_fkey FOREIGN KEY (chunk_id)
    REFERENCES {s}.chunk (id) ON DELETE CASCADE;
"""


def upgrade(schema: str = "ragpg") -> None:
    ddl.run(UPGRADE, schema)


def downgrade(schema: str = "ragpg") -> None:
    ddl.run(DOWNGRADE, schema)
