"""ragpg's own pool (PoolSource) on a real Postgres: a connection comes back in a clean state
whatever happened while it was lent (a transaction left open commits on success, rolls back on
error, a broken connection is replaced), and lending goes on without a leak."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from rag_pg.db import PoolSource
from rag_pg.errors import StoreError

IDLE = psycopg.pq.TransactionStatus.IDLE


@pytest.fixture
def source(db_url: str) -> Iterator[PoolSource]:
    src = PoolSource(db_url, max_size=1)  # one connection: each test sees the one it gave back
    try:
        yield src
    finally:
        src.close()


@pytest.fixture
def table(db_url: str) -> str:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE pool_probe (v int)")
    return db_url


def rows(db_url: str) -> list[int]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT v FROM pool_probe ORDER BY v")]


def test_a_transaction_left_open_commits_when_the_block_succeeds(source: PoolSource, table: str) -> None:
    with source.connection() as conn:
        conn.autocommit = False  # as a migration does for a while
        conn.execute("INSERT INTO pool_probe VALUES (1)")
        assert conn.info.transaction_status != IDLE
    assert rows(table) == [1]
    with source.connection() as again:
        assert again.info.transaction_status == IDLE


def test_a_transaction_left_open_rolls_back_when_the_block_fails(source: PoolSource, table: str) -> None:
    with pytest.raises(RuntimeError, match="boom"), source.connection() as conn:
        conn.autocommit = False
        conn.execute("INSERT INTO pool_probe VALUES (2)")
        raise RuntimeError("boom")
    assert rows(table) == []
    with source.connection() as again:  # the same connection, usable, nothing pending
        assert again.info.transaction_status == IDLE
        assert again.execute("SELECT 1").fetchone() == (1,)


def test_a_failed_statement_leaves_no_aborted_transaction_behind(source: PoolSource, table: str) -> None:
    with pytest.raises(psycopg.errors.UndefinedTable), source.connection() as conn:
        conn.autocommit = False
        conn.execute("SELECT * FROM no_such_table")
    with source.connection() as again:
        assert again.execute("SELECT count(*) FROM pool_probe").fetchone() == (0,)


def test_a_connection_killed_while_lent_is_replaced(source: PoolSource, db_url: str) -> None:
    with pytest.raises(psycopg.OperationalError), source.connection() as conn:
        pid = conn.info.backend_pid
        with psycopg.connect(db_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        conn.execute("SELECT 1")
    with source.connection() as fresh:
        assert fresh.info.backend_pid != pid
        assert fresh.execute("SELECT 1").fetchone() == (1,)


def test_lending_many_times_keeps_one_connection(source: PoolSource) -> None:
    pids = set()
    for i in range(50):
        try:
            with source.connection() as conn:
                pids.add(conn.info.backend_pid)
                if i % 2:
                    raise KeyError(i)
        except KeyError:
            pass
    assert len(pids) == 1
    stats = source._pool.get_stats()
    assert stats["pool_size"] == 1 and stats["pool_available"] == 1


def test_an_unreachable_database_is_one_store_error() -> None:
    src = PoolSource("postgresql://nobody@127.0.0.1:1/none", connect_timeout=1)
    try:
        with pytest.raises(StoreError, match="database unavailable"), src.connection():
            pass
    finally:
        src.close()
