"""ragpg's tables spread over a Citus cluster, by collection.

On a coordinator (a database with the ``citus`` extension) ``ragpg init`` distributes the
index after migrating it: each collection lives on one worker, with its documents, chunks,
vectors and term statistics in colocated shards, so every statement of an ingest or a
search, which names one collection, is routed whole to the worker that holds it.

* ``collection``, ``tenant_collection`` and ``tenant_role`` become reference tables (a copy
  on every node: the search and the row-level policies read them beside any shard);
* ``document``, ``chunk``, ``chunk_vector``, ``term_stat`` and ``chunk_stat`` are
  distributed on ``collection`` and colocated;
* the run tables (``ingest_run``, ``eval_run``, ``reembed_run``) and Alembic's stay local to
  the coordinator, where every command connects.

Two defaults of the database, set on every node by each ``ragpg init`` (so also on a worker
added since): rows travel between nodes as text (``citus.enable_binary_protocol = off``:
Citus's binary format carries a ``regconfig`` as the sending node's object id, and the
nodes' ids for ragpg's text search configurations differ; for the same reason the writer
sends chunks by INSERT, not COPY, :meth:`rag_pg.store.documents.Store.distributed`), and a
``SET LOCAL`` reaches the workers (``citus.propagate_set_commands = local``: a search's
settings, the tenant a transaction acts for), and prepared statements are planned with their
parameters (``plan_cache_mode = force_custom_plan``: a generic plan hides the collection
from Citus, which then runs through the coordinator what it would route to one worker).

The term statistics: Citus cannot run the statement triggers on ``chunk`` on its shards
(their transition tables are not there), so they are dropped before ``chunk`` is
distributed and the writer keeps the statistics itself, in the same transaction
(:meth:`rag_pg.store.documents.Store.stats_by_writer`). Distributing is idempotent: a table
already in Citus's metadata is left as it is, so a later ``ragpg init`` (an upgrade) only
migrates, and DDL on distributed tables reaches the shards through Citus.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row, scalar_row

from rag_pg.errors import ConfigError
from rag_pg.store.queries import Queries, statement

DISTRIBUTIONS = ("collection",)
REFERENCE = ("collection", "tenant_collection", "tenant_role")
# In order: a table's foreign keys point at tables distributed before it.
DISTRIBUTED = ("document", "chunk", "chunk_vector", "term_stat", "chunk_stat")
ANCHOR = "document"  # the colocation group: the tables above are colocated with it


def citus_present(conn: psycopg.Connection[Any]) -> bool:
    with conn.cursor(row_factory=scalar_row) as cur:
        return bool(cur.execute(statement("citus_present")).fetchone())


def distributed(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether the schema is distributed: :func:`distribute` dropped the statistics' triggers
    from ``chunk`` (a question any server answers, with Citus or without)."""
    q = Queries(schema)
    with conn.cursor(row_factory=scalar_row) as cur:
        kept = cur.execute(q("term_stats_by_trigger"), {"chunk": q.table("chunk")}).fetchone()
    return not kept


def citus_tables(conn: psycopg.Connection[Any], schema: str) -> dict[str, str]:
    """The schema's tables in Citus's metadata: name -> ``reference`` or ``by <column>``."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(Queries(schema)("citus_tables"), {"schema": schema}).fetchall()
    return {r["name"]: "reference" if r["method"] == "n" else f"by {r['column']}" for r in rows}


def wanted(conn: psycopg.Connection[Any], distribution: str | None) -> str | None:
    """The distribution to apply: the setting's, or ``collection`` on a Citus database when
    nothing is set; None on a database without Citus. A setting that asks for Citus on a
    database without it is a configuration error."""
    if distribution is not None and distribution not in DISTRIBUTIONS:
        raise ConfigError(f"database.distribution must be one of {', '.join(DISTRIBUTIONS)}"
                          f" (got {distribution!r})")
    present = citus_present(conn)
    if distribution is not None and not present:
        raise ConfigError(f"database.distribution = {distribution!r} needs a Citus coordinator,"
                          " and this database has no citus extension (CREATE EXTENSION citus)")
    return (distribution or "collection") if present else None


def distribute(conn: psycopg.Connection[Any], schema: str, distribution: str | None) -> dict[str, str]:
    """Distribute the schema's tables where the database is a Citus coordinator (see the
    module); returns how each table is placed (empty without Citus). Each Citus call runs
    in its own transaction: ``conn`` must not be inside one."""
    mode = wanted(conn, distribution)
    if mode is None:
        return {}
    q = Queries(schema)
    placed = citus_tables(conn, schema)
    if "chunk" not in placed:
        with conn.transaction():
            conn.execute(q("term_stat_triggers_drop"))
    for table in REFERENCE:
        if table not in placed:
            with conn.transaction():
                conn.execute(q.compose("reference_table_create", table=sql.Literal(q.table(table))))
    for table in DISTRIBUTED:
        if table not in placed:
            colocate = "none" if table == ANCHOR else q.table(ANCHOR)
            with conn.transaction():
                conn.execute(q.compose("distributed_table_create", table=sql.Literal(q.table(table)),
                                       column=sql.Literal("collection"),
                                       colocate=sql.Literal(colocate)))
    with conn.transaction():
        conn.execute(q("cluster_settings"))
        conn.execute(q("tenant_function_nested"))
        conn.execute(q("keyword_search_invoker"))
    return citus_tables(conn, schema)
