"""Who may read each document: its readers, and the principals a transaction acts as.

``document.readers`` lists the principals that may read the document (NULL: everyone who may
read its collection, as before); ``chunk.readers`` and ``chunk_vector.readers`` carry the same
list on each of its chunks and vectors, so that a policy or a search leg filters the rows it
scans without a join (an HNSW scan then filters the vector rows themselves). ``principal_role`` binds a BI
reader to its principals (``ragpg roles create-reader NAME --principals ...``).

``acting_principals()`` is what the reader policies call (installed by ``ragpg permissions
enable``, rag_pg.store.permissions): the principals of the current login in this transaction.
A reader bound by ``principal_role`` gets its own, whatever it sets; any other login the
transaction's ``ragpg.principals`` setting (ragpg sets it with ``SET LOCAL``), and without it
NULL: no restriction (the owner's ingest, an administrator). It keys on ``session_user``,
which neither a view, a SECURITY DEFINER function nor ``SET ROLE`` changes.

``readable_matches()`` gives a search held by the policies its keyword postings: under
row-level security PostgreSQL cannot use the GIN index for ``@@`` (not leakproof), so the
function, which runs as the tables' owner, returns the ids of the matching chunks the acting
principals may read (under tenancy's FORCE the owner is held too, tenant included).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

from rag_pg.migrations import ddl

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE {s}.document ADD COLUMN readers text[];
COMMENT ON COLUMN {s}.document.readers IS
    'The principals that may read the document (NULL: everyone who may read the collection).';
ALTER TABLE {s}.chunk ADD COLUMN readers text[];
COMMENT ON COLUMN {s}.chunk.readers IS 'Its document''s readers, kept with each chunk.';
ALTER TABLE {s}.chunk_vector ADD COLUMN readers text[];
COMMENT ON COLUMN {s}.chunk_vector.readers IS 'Its chunk''s readers, kept with each vector.';

CREATE TABLE {s}.principal_role (
    role       text PRIMARY KEY,
    principals text[] NOT NULL
);
COMMENT ON TABLE {s}.principal_role IS
    'Readers bound to principals: such a login reads as these, whatever it sets.';
REVOKE ALL ON {s}.principal_role FROM PUBLIC;

CREATE FUNCTION {s}.acting_principals() RETURNS text[]
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT CASE WHEN r.role IS NOT NULL THEN r.principals
                ELSE nullif(current_setting('ragpg.principals', true), '')::text[] END
    FROM (VALUES (1)) AS one (x)
    LEFT JOIN {s}.principal_role r ON r.role = session_user::text
$fn$;
COMMENT ON FUNCTION {s}.acting_principals() IS
    'The principals the current login reads as in this transaction; NULL: no restriction.'
    ' Called by the reader policies.';

CREATE FUNCTION {s}.readable_matches(collection text, query tsquery) RETURNS bigint[]
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT coalesce(array_agg(c.id), '{{}}'::bigint[])
    FROM (SELECT {s}.acting_principals() AS p) a, {s}.chunk c
    WHERE c.collection = $1 AND c.tsv @@ $2
      AND (a.p IS NULL OR c.readers IS NULL OR c.readers && a.p)
$fn$;
COMMENT ON FUNCTION {s}.readable_matches(text, tsquery) IS
    'The chunks of a collection matching a tsquery that the acting principals may read:'
    ' the keyword search''s postings under row-level security (the GIN index, which the'
    ' policies keep a held role from using).';
REVOKE ALL ON FUNCTION {s}.readable_matches(text, tsquery) FROM PUBLIC;
"""

DOWNGRADE = """
DROP FUNCTION {s}.readable_matches(text, tsquery);
DROP FUNCTION {s}.acting_principals();
DROP TABLE {s}.principal_role;
ALTER TABLE {s}.chunk_vector DROP COLUMN readers;
ALTER TABLE {s}.chunk DROP COLUMN readers;
ALTER TABLE {s}.document DROP COLUMN readers;
"""


def upgrade(schema: str = "ragpg") -> None:
    ddl.run(UPGRADE, schema)


def downgrade(schema: str = "ragpg") -> None:
    ddl.run(DOWNGRADE, schema)
