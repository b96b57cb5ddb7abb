-- A schema distributed over a Citus cluster (rag_pg/store/distribution.py). Loaded by name
-- (rag_pg/store/queries.py); {table} and {colocate} are composed by psycopg.sql as literals.

-- name: citus_present
SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus') AS present;

-- name: citus_tables
-- The schema's tables already in Citus's metadata, with how: 'h' hash-distributed, 'n' a
-- reference table, and the distribution column.
SELECT c.relname AS name, p.partmethod AS method,
       CASE WHEN p.partmethod = 'h' THEN column_to_column_name(p.logicalrelid, p.partkey) END
           AS column
FROM pg_dist_partition p JOIN pg_catalog.pg_class c ON c.oid = p.logicalrelid
WHERE c.relnamespace = %(schema)s::regnamespace;

-- name: term_stat_triggers_drop
-- Citus runs no trigger with transition tables on shards: on a cluster the writer keeps the
-- statistics (queries.sql, term_stats_*_documents).
DROP TRIGGER IF EXISTS term_stat_insert ON {schema}.chunk;
DROP TRIGGER IF EXISTS term_stat_delete ON {schema}.chunk;
DROP TRIGGER IF EXISTS term_stat_update ON {schema}.chunk;
DROP TRIGGER IF EXISTS term_stat_truncate ON {schema}.chunk;

-- name: reference_table_create
SELECT create_reference_table({table});

-- name: shard_count_set
-- For the distribution that follows, in this transaction: a table colocated with another has
-- that one's shards.
SELECT set_config('citus.shard_count', %(shards)s, true);

-- name: distributed_table_create
SELECT create_distributed_table({table}, {column}, colocate_with := {colocate});

-- name: worker_count
SELECT count(*) AS workers FROM citus_get_active_worker_nodes();

-- name: cluster_settings
-- Two defaults of the database, on every node, for the sessions that start after them (the
-- rebalancer's too):
-- * rows travel as text: in Citus's binary format a regconfig (a chunk's text search
--   configuration) is the sending node's object id, which names another configuration, or
--   none, on the receiving node; a shard moved to a new worker then fails to copy;
-- * a SET LOCAL reaches the workers the transaction's statements run on: a search's own
--   settings (hnsw.ef_search...) and the tenant it acts for (ragpg.tenant, read by the
--   row-level policies on the shards);
-- * a prepared statement is planned with its parameters each time: with a generic plan Citus
--   cannot see the collection, and runs a statement it would route to one worker through the
--   coordinator instead (a MERGE of the term statistics then ships rows in binary: above).
SELECT run_command_on_all_nodes(format(
    'ALTER DATABASE %I SET citus.enable_binary_protocol = off;'
    ' ALTER DATABASE %I SET citus.propagate_set_commands = local;'
    ' ALTER DATABASE %I SET plan_cache_mode = force_custom_plan',
    current_database(), current_database(), current_database()));

-- name: tenant_function_nested
-- The tenant policies call tenant_collections() on the shards, where it reads the tenancy's
-- reference tables (a copy on every node, read locally): Citus refuses such a read nested in a
-- shard's query unless the function allows it.
ALTER FUNCTION {schema}.tenant_collections() SET citus.allow_nested_distributed_execution = on;

-- name: keyword_search_invoker
-- Citus reaches the shards as the current user, and the owner of the published functions
-- may not log in: on a cluster keyword_search() runs as its caller, whom ragpg grants the
-- tables it reads there (rag_pg/store/roles.py; row-level security still holds a tenant's
-- reader to its rows).
ALTER FUNCTION {schema}.keyword_search(text, integer, text) SECURITY INVOKER;

