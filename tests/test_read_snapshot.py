"""A search's statements run in one read-only snapshot and one round trip (db.read_snapshot),
on a real Postgres, read from libpq's own trace of the messages sent: one Sync (psycopg's
``transaction()`` in a pipeline sends four), a failed statement leaves no open transaction,
a caller's transaction keeps going, and the tenant is named inside the snapshot."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import pq
from psycopg.rows import dict_row

from rag_pg.store import tenancy
from rag_pg.store.db import PoolSource, read_snapshot

IDLE, INTRANS = pq.TransactionStatus.IDLE, pq.TransactionStatus.INTRANS


@pytest.fixture
def source(db_url: str) -> Iterator[PoolSource]:
    src = PoolSource(db_url, max_size=1)
    try:
        yield src
    finally:
        src.close()


def syncs(conn: psycopg.Connection, block) -> int:  # type: ignore[type-arg, no-untyped-def]
    """How many Sync messages (each a wait for the server) ``block`` sends on ``conn``."""
    with tempfile.TemporaryFile(mode="w+") as trace:
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            block()
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        return sum(1 for line in trace if line.split("\t")[2:3] == ["Sync\n"])


def test_the_statements_share_one_read_only_snapshot_in_one_round_trip(source: PoolSource) -> None:
    with source.connection() as conn:
        assert conn.autocommit and conn.info.transaction_status == IDLE
        seen: list[psycopg.Cursor] = []  # type: ignore[type-arg]

        def search() -> None:
            with read_snapshot(conn):
                for statement in ("SELECT current_setting('transaction_isolation') AS isolation,"
                                  " current_setting('transaction_read_only') AS read_only, now()",
                                  "SELECT pg_sleep(0.01), now()"):
                    cur = conn.cursor(row_factory=dict_row)
                    seen.append(cur.execute(statement))

        assert syncs(conn, search) == 1
        first, second = seen[0].fetchone(), seen[1].fetchone()
        assert first is not None and second is not None
        assert (first["isolation"], first["read_only"]) == ("repeatable read", "on")
        assert second["now"] == first["now"]  # one transaction
        assert conn.info.transaction_status == IDLE


def test_a_failed_statement_raises_and_leaves_no_transaction_open(source: PoolSource) -> None:
    with source.connection() as conn:
        with pytest.raises(psycopg.errors.UndefinedTable), read_snapshot(conn):
            conn.execute("SELECT 1")
            conn.execute("SELECT * FROM no_such_table")
        assert conn.info.transaction_status == IDLE
        assert conn.execute("SELECT current_setting('transaction_read_only')").fetchone() == ("off",)
        with pytest.raises(ZeroDivisionError), read_snapshot(conn):
            conn.execute("SELECT 1")
            raise ZeroDivisionError  # the caller's own failure, before the COMMIT was queued
        assert conn.info.transaction_status == IDLE


def test_inside_a_callers_transaction_it_is_a_savepoint_of_it(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:  # not autocommit: the caller's transaction
        conn.execute("CREATE TEMPORARY TABLE probe (v int)")
        with pytest.raises(psycopg.errors.UndefinedTable), read_snapshot(conn):
            conn.execute("SELECT * FROM no_such_table")
        assert conn.info.transaction_status == INTRANS  # rolled back to the savepoint only
        conn.execute("INSERT INTO probe VALUES (1)")
        with read_snapshot(conn):
            got = conn.execute("SELECT count(*) FROM probe")
        assert got.fetchone() == (1,)
        assert conn.info.transaction_status == INTRANS


def test_a_callers_idle_connection_that_is_not_autocommit_gets_the_snapshot_too(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        with read_snapshot(conn):
            got = conn.execute("SELECT current_setting('transaction_isolation')")
        assert got.fetchone() == ("repeatable read",)
        assert conn.info.transaction_status == IDLE


def test_the_tenant_is_named_inside_the_snapshot(source: PoolSource) -> None:
    with source.connection() as conn, tenancy.acting_for("acme"):
        with read_snapshot(conn):
            got = conn.execute("SELECT current_setting(%s, true)", (tenancy.SETTING,))
        assert got.fetchone() == ("acme",)
        after = conn.execute("SELECT coalesce(current_setting(%s, true), '')", (tenancy.SETTING,))
        assert after.fetchone() == ("",)  # transaction-local: gone with the snapshot
