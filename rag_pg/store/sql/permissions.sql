-- Permissions: the principals named in each transaction, the reader policy on the tables that
-- hold a document's text, its title or its existence, and the readers bound to principals.
-- Loaded by name (rag_pg/store/queries.py); {parts} are composed by psycopg.sql (identifiers,
-- literals), everything else is a parameter.

-- name: principals_set
-- Transaction-local, and a utility statement (no snapshot), like the tenant's.
SET LOCAL {setting} = {principals};

-- name: principals_role
-- A login outside the policies (a superuser, the tables' owner) reads through the surface
-- role, which they hold, for the rest of the transaction.
SET LOCAL ROLE {role};

-- name: permissions_login
-- Where this login stands: held by row-level security on chunk already (a runtime role, an
-- owner under FORCE), and whether the reader policy is installed at all.
SELECT coalesce(row_security_active(to_regclass(%(table)s)), false) AS held,
       EXISTS (SELECT FROM pg_policy p WHERE p.polrelid = to_regclass(%(table)s)
               AND p.polname = %(policy)s) AS enabled;

-- name: permissions_tables
SELECT c.relname AS name, c.relrowsecurity AS rls,
       EXISTS (SELECT FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = %(policy)s)
           AS has_policy,
       EXISTS (SELECT FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = %(base)s)
           AS has_base,
       EXISTS (SELECT FROM pg_policy p WHERE p.polrelid = c.oid AND p.polpermissive
               AND p.polname <> %(base)s) AS other_permissive
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relname = ANY (%(tables)s)
ORDER BY c.relname;

-- name: permissions_policy_drop
DROP POLICY IF EXISTS {policy} ON {schema}.{table};

-- name: permissions_policy_readers
-- Restrictive: ANDed with the tenant policy where tenancy holds the table. The principals are
-- read once per statement (an InitPlan), not once per row; NULL: no restriction.
CREATE POLICY {policy} ON {schema}.{table} AS RESTRICTIVE
    USING ((SELECT {schema}.acting_principals()) IS NULL OR readers IS NULL
           OR readers && (SELECT {schema}.acting_principals()));

-- name: permissions_base
-- A restrictive policy alone lets no row through: without tenancy, this one lets every row
-- that the restrictive ones allow.
CREATE POLICY {policy} ON {schema}.{table} USING (true) WITH CHECK (true);

-- name: permissions_rls_on
ALTER TABLE {schema}.{table} ENABLE ROW LEVEL SECURITY;

-- name: permissions_rls_off
ALTER TABLE {schema}.{table} DISABLE ROW LEVEL SECURITY;

-- name: principal_role_unbind
DELETE FROM {schema}.principal_role WHERE role = %s;

-- name: principal_role_bind
INSERT INTO {schema}.principal_role (role, principals) VALUES (%s, %s)
ON CONFLICT (role) DO UPDATE SET principals = excluded.principals;

-- name: principal_roles_all
SELECT role, principals FROM {schema}.principal_role ORDER BY 1;

-- name: runtime_roles_registered
SELECT r.role FROM {schema}.tenant_role r WHERE r.tenant IS NULL
  AND EXISTS (SELECT FROM pg_roles g WHERE g.rolname = r.role);

-- name: role_grant_member
GRANT {role} TO {member};
