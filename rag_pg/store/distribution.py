"""ragpg's tables spread over a Citus cluster, by collection or by document.

On a coordinator (a database with the ``citus`` extension) ``ragpg init`` distributes the
index after migrating it, in one of two layouts (``database.distribution``):

* ``collection`` (the default): each collection lives on one worker, with its documents,
  chunks, vectors and term statistics in colocated shards, so every statement of an ingest or
  a search, which names one collection, is routed whole to the worker that holds it;
  ``document``, ``chunk``, ``chunk_vector``, ``term_stat`` and ``chunk_stat`` are distributed
  on ``collection`` and colocated;
* ``document``: one collection's documents spread over every worker. ``document``, ``chunk``
  and ``chunk_vector`` are distributed on ``shard_key`` (a hash of the document's path, in
  every key that ties a chunk to its document and a vector to its chunk) and colocated, so a
  document's rows share one shard; the term statistics (``term_stat``, ``chunk_stat``) are the
  collection's, distributed on ``collection`` apart. A search fans out: each shard finds its
  candidates for each leg (the keyword leg scored with the collection's statistics), the
  coordinator merges them, so scores and order are one node's.

In both, ``collection``, ``tenant_collection`` and ``tenant_role`` become reference tables (a
copy on every node: the search and the row-level policies read them beside any shard), and the
run tables (``ingest_run``, ``eval_run``, ``reembed_run``) and Alembic's stay local to the
coordinator, where every command connects. A schema distributed one way stays so: asking for
the other is an error that says so.

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
(:meth:`rag_pg.store.documents.Store._follow_statistics`; by document
:class:`rag_pg.store.term_stats.SpreadStatistics`). Distributing is idempotent: a table
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

DISTRIBUTIONS = ("collection", "document")
REFERENCE = ("collection", "tenant_collection", "tenant_role")
# In order: a table's foreign keys point at tables distributed before it.
DISTRIBUTED = ("document", "chunk", "chunk_vector", "term_stat", "chunk_stat")
# Each table's distribution column, and the table it is colocated with ("none": it starts a
# colocation group), by layout.
PLACEMENT: dict[str, dict[str, tuple[str, str]]] = {
    "collection": {table: ("collection", "none" if table == "document" else "document")
                   for table in DISTRIBUTED},
    "document": {"document": ("shard_key", "none"), "chunk": ("shard_key", "document"),
                 "chunk_vector": ("shard_key", "document"), "term_stat": ("collection", "none"),
                 "chunk_stat": ("collection", "term_stat")},
}
# How Citus holds ``chunk`` (rag_pg.store.distribution.citus_tables) -> the layout.
LAYOUTS = {"by collection": "collection", "by shard_key": "document"}


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


def layout(conn: psycopg.Connection[Any], schema: str) -> str | None:
    """How the schema is distributed: ``collection``, ``document``, or None (one server, or
    not distributed yet), from how Citus holds ``chunk``."""
    if not citus_present(conn):
        return None
    return LAYOUTS.get(citus_tables(conn, schema).get("chunk", ""))


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


def distribute(conn: psycopg.Connection[Any], schema: str, distribution: str | None,
               shard_count: int | None = None) -> dict[str, str]:
    """Distribute the schema's tables where the database is a Citus coordinator (see the
    module), each colocation group in ``shard_count`` shards (None: Citus's default); returns
    how each table is placed (empty without Citus). Each Citus call runs in its own
    transaction: ``conn`` must not be inside one."""
    mode = wanted(conn, distribution)
    if mode is None:
        return {}
    q = Queries(schema)
    placed = citus_tables(conn, schema)
    found = LAYOUTS.get(placed.get("chunk", ""))
    if found is not None and found != mode:
        if distribution is None:
            mode = found  # no setting: keep the layout the schema has
        else:
            raise ConfigError(f"database.distribution = {distribution!r}, but schema {schema!r} is"
                              f" already distributed by {found}; a schema is distributed once")
    if "chunk" not in placed:
        with conn.transaction():
            conn.execute(q("term_stat_triggers_drop"))
    for table in REFERENCE:
        if table not in placed:
            with conn.transaction():
                conn.execute(q.compose("reference_table_create", table=sql.Literal(q.table(table))))
    for table in DISTRIBUTED:
        if table not in placed:
            column, with_table = PLACEMENT[mode][table]
            colocate = "none" if with_table == "none" else q.table(with_table)
            with conn.transaction():
                if shard_count is not None and with_table == "none":  # the others follow it
                    conn.execute(q("shard_count_set"), {"shards": str(shard_count)})
                conn.execute(q.compose("distributed_table_create", table=sql.Literal(q.table(table)),
                                       column=sql.Literal(column), colocate=sql.Literal(colocate)))
    with conn.transaction():
        conn.execute(q("cluster_settings"))
        conn.execute(q("tenant_function_nested"))
        conn.execute(q("keyword_search_invoker"))
    return citus_tables(conn, schema)
