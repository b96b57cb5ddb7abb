"""Tenants: which collections each tenant owns, which roles act for which tenant.

``tenant_collection`` maps a tenant to its collections (a tenant is a set of collections; a
collection may be shared by several tenants). ``tenant_role`` lists the roles that may read
under tenancy: a *runtime* role (``tenant`` NULL) names its tenant per transaction through the
``ragpg.tenant`` setting; a *reader* role is bound to one tenant and cannot choose another.

``tenant_collections()`` is what the row-level policies call: the collections the current
login may see in this transaction, empty when it has no tenant (fail closed). It runs with
its owner's rights so that no reader needs to read the two tables (they would tell every
tenant's collections), and it keys on ``session_user``, the login, which a SECURITY DEFINER
function (``keyword_search``) or a view does not change. The policies themselves are
installed by ``ragpg tenancy enable`` (rag_pg.store.tenancy), not here: an index without tenancy
keeps plain tables.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from rag_pg.migrations import ddl
from rag_pg.store import tenancy

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE {s}.tenant_collection (
    tenant     text NOT NULL CHECK (tenant <> ''),
    collection text NOT NULL,
    PRIMARY KEY (tenant, collection)
);
COMMENT ON TABLE {s}.tenant_collection IS
    'Under tenancy: the collections of each tenant (a tenant sees exactly these).';

CREATE TABLE {s}.tenant_role (
    role   text PRIMARY KEY,
    tenant text CHECK (tenant <> '')
);
COMMENT ON TABLE {s}.tenant_role IS
    'Under tenancy: roles that may read. tenant NULL: a runtime role naming its tenant per'
    ' transaction (ragpg.tenant); otherwise a reader bound to that tenant.';

REVOKE ALL ON {s}.tenant_collection, {s}.tenant_role FROM PUBLIC;

CREATE FUNCTION {s}.tenant_collections() RETURNS text[]
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT coalesce(array_agg(tc.collection ORDER BY tc.collection), '{{}}'::text[])
    FROM {s}.tenant_collection tc
    WHERE tc.tenant = (
        SELECT CASE
            -- a reader: its own tenant, whatever it sets
            WHEN r.tenant IS NOT NULL THEN r.tenant
            -- a runtime role, or the owner of ragpg's objects: the transaction's tenant
            WHEN r.role IS NOT NULL OR session_user = current_user
                THEN nullif(current_setting('ragpg.tenant', true), '')
        END
        FROM (VALUES (1)) AS one (x)
        LEFT JOIN {s}.tenant_role r ON r.role = session_user::text
    )
$fn$;
COMMENT ON FUNCTION {s}.tenant_collections() IS
    'Under tenancy: the collections the current login may see in this transaction; empty'
    ' without a tenant. Called by the row-level policies.';
"""

DOWNGRADE = """
DROP FUNCTION {s}.tenant_collections();
DROP TABLE {s}.tenant_role;
DROP TABLE {s}.tenant_collection;
"""


def upgrade(schema: str = "ragpg") -> None:
    ddl.run(UPGRADE, schema)


def downgrade(schema: str = "ragpg") -> None:
    tenancy.disable(ddl.driver(), schema)
    ddl.run(DOWNGRADE, schema)
