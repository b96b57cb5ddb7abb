-- The roles ragpg creates: readers (BI tools: SELECT on the published views, EXECUTE on the
-- published functions, read-only sessions with a statement timeout) and the runtime role of
-- tenancy (reads and writes the tables, named per transaction). Loaded by name
-- (rag_pg/store/queries.py); {parts} are composed by psycopg.sql, the rest are parameters.

-- name: roles_lock
SELECT pg_advisory_xact_lock(%s);

-- name: role_setting
ALTER ROLE {role} SET {setting} = {value};

-- name: role_revoke_all_in_schema
REVOKE ALL ON ALL {kind} IN SCHEMA {schema} FROM {role};

-- name: role_revoke_schema
REVOKE ALL ON SCHEMA {schema} FROM {role};

-- name: role_may_connect
SELECT has_database_privilege(%s, current_database(), 'CONNECT') AS allowed;

-- name: role_grant_connect
GRANT CONNECT ON DATABASE {database} TO {role};

-- name: role_grant_schema
GRANT USAGE ON SCHEMA {schema} TO {role};

-- name: role_grant_view
GRANT SELECT ON {schema}.{view} TO {role};

-- name: role_grant_function
GRANT EXECUTE ON FUNCTION {schema}.{function}({args}) TO {role};

-- name: role_reset
ALTER ROLE {role} RESET ALL;

-- name: runtime_role_grants
-- It reads and writes ragpg's tables; the tenant map is the owner's to write; the schema
-- version is read, never written.
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role};
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {role};
REVOKE ALL ON {schema}.tenant_collection, {schema}.tenant_role, {schema}.principal_role
    FROM {role};
GRANT EXECUTE ON FUNCTION {schema}.readable_matches(text, tsquery) TO {role};
REVOKE INSERT, UPDATE, DELETE ON {schema}.alembic_version FROM {role};

-- name: runtime_role_register
INSERT INTO {schema}.tenant_role (role, tenant) VALUES (%s, NULL)
ON CONFLICT (role) DO UPDATE SET tenant = NULL;

-- name: role_password
ALTER ROLE {role} PASSWORD {verifier};

-- name: reader_unbind
DELETE FROM {schema}.tenant_role WHERE role = %s;

-- name: reader_bind
INSERT INTO {schema}.tenant_role (role, tenant) VALUES (%s, %s)
ON CONFLICT (role) DO UPDATE SET tenant = excluded.tenant;

-- name: tenant_role_table
SELECT to_regclass(%s);

-- name: runtime_roles
SELECT role FROM {schema}.tenant_role WHERE tenant IS NULL;

-- name: readers
-- The readers of a schema: roles granted SELECT on its first published view (not its owner),
-- with their own role-wide settings.
SELECT r.rolname AS name,
       coalesce((SELECT array_agg(cfg ORDER BY cfg) FROM pg_db_role_setting s,
                        unnest(s.setconfig) AS cfg
                 WHERE s.setrole = r.oid AND s.setdatabase = 0), '{{}}') AS config
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN LATERAL aclexplode(c.relacl) AS a
JOIN pg_roles r ON r.oid = a.grantee
WHERE n.nspname = %(schema)s AND c.relname = %(view)s AND a.privilege_type = 'SELECT'
  AND r.oid <> c.relowner
ORDER BY r.rolname;

-- name: published_views_present
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relkind = 'v' AND c.relname = ANY(%s);

-- name: function_present
SELECT to_regprocedure(%s) AS proc;

-- name: database_name
SELECT current_database() AS name;

-- name: role_powers
SELECT r.rolsuper, r.rolcreatedb, r.rolcreaterole, r.rolreplication,
       r.rolbypassrls, r.rolname = current_user AS is_self,
       (SELECT string_agg(g.rolname, ', ' ORDER BY g.rolname) FROM pg_auth_members m
          JOIN pg_roles g ON g.oid = m.roleid WHERE m.member = r.oid) AS member_of,
       EXISTS (SELECT 1 FROM pg_namespace n WHERE n.nspname = %(schema)s
          AND (n.nspowner = r.oid OR EXISTS (SELECT 1 FROM pg_class c
            WHERE c.relnamespace = n.oid AND c.relowner = r.oid))) AS owner
FROM pg_roles r WHERE r.rolname = %(name)s;

-- name: role_create
CREATE ROLE {role} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS
    CONNECTION LIMIT {limit};

-- name: role_login
-- Only LOGIN and the limit: the other attributes were just checked to be off, and a
-- CREATEROLE (non-superuser) admin may not even mention SUPERUSER/REPLICATION/BYPASSRLS.
ALTER ROLE {role} WITH LOGIN CONNECTION LIMIT {limit};
