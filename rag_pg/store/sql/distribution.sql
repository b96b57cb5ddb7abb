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

-- name: distributed_table_create
SELECT create_distributed_table({table}, {column}, colocate_with := {colocate});

-- name: worker_count
SELECT count(*) AS workers FROM citus_get_active_worker_nodes();
