-- Tenancy: the tenant named in each transaction, the row-level-security policy on every table
-- with a collection, the role that owns the published surface while tenancy is on, and the
-- tenants' collections. Loaded by name (rag_pg/store/queries.py); {parts} are composed by
-- psycopg.sql (identifiers, literals), everything else is a parameter.

-- name: tenant_set
-- The first statement of a transaction acting for a tenant: transaction-local, and a
-- utility statement (no snapshot), so SET TRANSACTION ISOLATION LEVEL may follow it.
SET LOCAL {setting} = {tenant};

-- name: tenancy_tables
SELECT c.relname AS name, a.attname AS column, c.relrowsecurity AS rls,
       c.relforcerowsecurity AS forced,
       EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = %(policy)s)
           AS has_policy
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND NOT a.attisdropped
WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p')
  AND (a.attname = 'collection' OR (c.relname = 'collection' AND a.attname = 'name'))
  AND c.relname <> ALL (%(unscoped)s)
ORDER BY c.relname;

-- name: tenancy_installed
SELECT to_regprocedure(%s);

-- name: tenancy_surface
-- The views and the SECURITY DEFINER functions of the published surface.
SELECT 'VIEW' AS kind, format('%%I.%%I', n.nspname, c.relname) AS name
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relkind IN ('v', 'm')
UNION ALL
SELECT 'FUNCTION', p.oid::regprocedure::text
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
-- The functions the policies and the held searches call keep their owner: they read the
-- tables of tenancy and permissions, and the chunks past the policies' hold on the GIN index.
WHERE n.nspname = %(schema)s AND p.prosecdef
  AND p.proname NOT IN ('tenant_collections', 'acting_principals', 'readable_matches')
ORDER BY 1, 2;

-- name: tenancy_surface_owner
ALTER {kind} {name} OWNER TO {owner};

-- name: role_exists
SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = %s);

-- name: role_may_become
SELECT pg_has_role(current_user, %s, 'SET');

-- name: role_become
GRANT {role} TO CURRENT_USER;

-- name: tenancy_surface_role_create
CREATE ROLE {role} NOLOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT;

-- name: tenancy_surface_role_grants
-- SELECT on the tables and nothing else: the policies apply to every read made through
-- the surface it owns; the tenancy tables are read only through tenant_collections().
GRANT USAGE, CREATE ON SCHEMA {schema} TO {role};
GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role};
REVOKE ALL ON {schema}.tenant_collection, {schema}.tenant_role, {schema}.principal_role
    FROM {role};
GRANT EXECUTE ON FUNCTION {schema}.readable_matches(text, tsquery) TO {role};

-- name: tenancy_surface_role_revoke
REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role};
REVOKE ALL ON ALL ROUTINES IN SCHEMA {schema} FROM {role};
REVOKE ALL ON SCHEMA {schema} FROM {role};

-- name: tenancy_hold_reset
-- The tenant policy on one table, forced (its owner too is held by it): four statements, each
-- sent on its own (Citus forwards a distributed table's DDL to its shards one command at a time).
DROP POLICY IF EXISTS {policy} ON {schema}.{table};

-- name: tenancy_hold_reset_reader_base
-- The permissive policy that stands beside the reader policy of permissions while tenancy is
-- off: beside the tenant policy it would let every tenant's rows through.
DROP POLICY IF EXISTS ragpg_rows ON {schema}.{table};

-- name: tenancy_hold_policy
CREATE POLICY {policy} ON {schema}.{table}
    USING ({column} = ANY ((SELECT {schema}.tenant_collections())::text[]))
    WITH CHECK ({column} = ANY ((SELECT {schema}.tenant_collections())::text[]));

-- name: tenancy_hold_policy_distributed
-- On a Citus cluster: Citus cannot carry a policy holding a subquery to the shards; the
-- function is then called in the condition itself.
CREATE POLICY {policy} ON {schema}.{table}
    USING ({column} = ANY ({schema}.tenant_collections()))
    WITH CHECK ({column} = ANY ({schema}.tenant_collections()));

-- name: tenancy_hold_enable
ALTER TABLE {schema}.{table} ENABLE ROW LEVEL SECURITY;

-- name: tenancy_hold_force
ALTER TABLE {schema}.{table} FORCE ROW LEVEL SECURITY;

-- name: tenancy_policy_drop
DROP POLICY {policy} ON {schema}.{table};

-- name: tenancy_reader_base
CREATE POLICY ragpg_rows ON {schema}.{table} USING (true) WITH CHECK (true);

-- name: tenancy_reader_policy_tables
SELECT c.relname FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND p.polname = 'ragpg_reader';

-- name: tenancy_unforce
ALTER TABLE {schema}.{table} NO FORCE ROW LEVEL SECURITY;

-- name: tenancy_rls_off
ALTER TABLE {schema}.{table} DISABLE ROW LEVEL SECURITY;

-- name: schema_owner
SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = %s;

-- name: tenant_collection_remove
DELETE FROM {schema}.tenant_collection WHERE tenant = %s AND collection = %s;

-- name: tenant_collection_add
INSERT INTO {schema}.tenant_collection (tenant, collection) VALUES (%s, %s) ON CONFLICT DO NOTHING;

-- name: tenant_collections_of
SELECT collection FROM {schema}.tenant_collection WHERE tenant = %s ORDER BY 1;

-- name: tenant_collections_all
SELECT tenant, collection FROM {schema}.tenant_collection ORDER BY 1, 2;

-- name: tenant_roles_all
SELECT role, tenant FROM {schema}.tenant_role ORDER BY 1;
