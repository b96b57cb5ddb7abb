-- What the store says to the server beside the index's own statements: a search's snapshot,
-- the pool's check, the collection's advisory lock, a replica's position, the migration
-- version, the vector index's build. Loaded by name (rag_pg/store/queries.py); {schema} and
-- the other {parts} are composed by psycopg.sql, everything else is a parameter.

-- name: snapshot_begin
BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY;

-- name: snapshot_set
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;

-- name: snapshot_commit
COMMIT;

-- name: ping
SELECT 1;

-- name: lock_try
SELECT pg_try_advisory_lock(%s, %s);

-- name: lock_release
SELECT pg_advisory_unlock(%s, %s);

-- name: lock_holder
SELECT a.pid, a.application_name, a.state
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s
LIMIT 1;

-- name: replica_caught_up
-- On a standby: has it replayed the primary's WAL up to %s? A server that is not in recovery
-- (read_url naming the primary itself, or a promoted replica) has everything it committed.
SELECT coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, NOT pg_is_in_recovery());

-- name: wal_position
SELECT pg_current_wal_lsn()::text;

-- name: migration_table_present
SELECT to_regclass(%(table)s) IS NOT NULL AS present;

-- name: migration_revision
SELECT version_num FROM {table};

-- name: superuser_password
ALTER ROLE {role} PASSWORD {verifier};

-- name: runs_abort_stale
-- Runs of the collection still marked running once its lock is ours: their process died
-- (a SIGKILL, a lost machine) without recording the end, since a live one would hold the lock.
UPDATE {schema}.ingest_run SET status = 'aborted', finished_at = now()
WHERE collection = %(collection)s AND status = 'running';

-- name: runs_progress
-- The counters of a run under way, after each write group: ingest_runs_v shows progress.
UPDATE {schema}.ingest_run SET documents_seen = %(seen)s, documents_indexed = %(indexed)s,
    documents_skipped = %(skipped)s, documents_failed = %(failed)s,
    chunks_upserted = %(chunks)s, embedding_calls = %(calls)s, tokens_embedded = %(tokens)s
WHERE id = %(id)s;

-- name: parents_missing
-- The parent's path as the parent expansion of a search reads it (search_expand_parent):
-- `./a/b.md`, `/a/b.md` and `a/b.md` name the same file of the root.
-- Two reads of the documents, not one correlated: on a cluster distributed by document a
-- parent and its child lie in different shards.
WITH children AS MATERIALIZED (
    SELECT d.path, d.parent_path, ltrim(regexp_replace(d.parent_path, '^(\./)+', ''), '/') AS parent
    FROM {schema}.document d
    WHERE d.collection = %(collection)s AND d.parent_path IS NOT NULL
      AND (%(source_root)s::text IS NULL OR d.source_root = %(source_root)s)
),
found AS MATERIALIZED (
    SELECT p.path FROM {schema}.document p
    WHERE p.collection = %(collection)s AND p.path IN (SELECT parent FROM children)
)
SELECT c.path, c.parent_path FROM children c
WHERE NOT EXISTS (SELECT 1 FROM found f WHERE f.path = c.parent)
ORDER BY c.path;

-- name: vector_index_create
CREATE INDEX IF NOT EXISTS {index} ON {schema}.chunk_vector USING hnsw
    ((embedding::{kind}({dim})) {ops}) WITH (m = {m}, ef_construction = {efc})
WHERE model = {model};

-- name: vector_index_build_memory
-- Raised for the build, never lowered: a session configured with more keeps its own.
SELECT set_config('maintenance_work_mem', %(memory)s, true)
WHERE pg_size_bytes(%(memory)s) > pg_size_bytes(current_setting('maintenance_work_mem'));

-- name: vector_index_definition
SELECT pg_get_indexdef(to_regclass(%s));

-- name: vector_index_drop
DROP INDEX IF EXISTS {schema}.{index};
