"""ragpg's connections from a URL, on a real Postgres: whatever happened while a connection was
lent, the next block gets one in a clean state (a transaction left open commits on success and
rolls back on error, autocommit is restored, a broken connection is replaced), threads share
the pool without a leak, and ``close()`` closes every connection ragpg opened."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

from rag_pg.errors import StoreError
from rag_pg.store.db import PoolSource, has_vector_types, prepare

from .rows import records, value, values

IDLE = psycopg.pq.TransactionStatus.IDLE


@pytest.fixture
def source(db_url: str) -> Iterator[PoolSource]:
    src = PoolSource(db_url, max_size=1)  # one connection: each block sees the one given back
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
        return values(conn, "SELECT v FROM pool_probe ORDER BY v")


def backends(db_url: str) -> list[tuple[int, str]]:
    """ragpg's own sessions on the test database: (pid, state)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        return [(int(r["pid"]), str(r["state"])) for r in records(conn,
            "SELECT pid, coalesce(state, '') AS state FROM pg_stat_activity"
            " WHERE application_name = 'ragpg' AND datname = current_database()")]


def test_a_transaction_left_open_commits_when_the_block_succeeds(source: PoolSource, table: str) -> None:
    with source.connection() as conn:
        conn.autocommit = False  # as a migration does for a while
        conn.execute("INSERT INTO pool_probe VALUES (1)")
        assert conn.info.transaction_status != IDLE
    assert rows(table) == [1]
    with source.connection() as again:
        assert again.info.transaction_status == IDLE
        assert again.autocommit  # given back as ragpg's connections are: autocommit


def test_a_transaction_left_open_rolls_back_when_the_block_fails(source: PoolSource, table: str) -> None:
    with pytest.raises(RuntimeError, match="boom"), source.connection() as conn:
        conn.autocommit = False
        conn.execute("INSERT INTO pool_probe VALUES (2)")
        raise RuntimeError("boom")
    assert rows(table) == []
    with source.connection() as again:  # usable, nothing pending, autocommit again
        assert again.info.transaction_status == IDLE and again.autocommit
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


def test_a_connection_killed_while_idle_in_the_pool_is_not_lent(source: PoolSource, db_url: str) -> None:
    """The pool checks a connection before lending it: a server-side kill between two blocks
    costs the next block nothing."""
    with source.connection() as conn:
        pid = conn.info.backend_pid
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            admin.execute("SELECT pg_sleep(0.01)")
    with source.connection() as fresh:
        assert fresh.info.backend_pid != pid
        assert fresh.execute("SELECT 1").fetchone() == (1,)


def test_pooled_connections_have_pgvector_types_and_borrowed_ones_get_them_once(
    source: PoolSource, db_url: str
) -> None:
    with source.connection() as conn:
        assert has_vector_types(conn)  # the pool's configure
        assert value(conn, "SELECT '[1,2]'::vector").to_list() == [1.0, 2.0]
    with psycopg.connect(db_url) as one, psycopg.connect(db_url) as other:
        assert not has_vector_types(one)
        assert prepare(one) is one and has_vector_types(one)
        assert prepare(one) is one  # a second call registers nothing more, and fails nothing
        assert not has_vector_types(other)  # nothing global: each connection its own


def test_lending_many_times_keeps_one_connection(source: PoolSource, db_url: str) -> None:
    pids = set()
    for i in range(50):
        try:
            with source.connection() as conn:
                pids.add(conn.info.backend_pid)
                if i % 2:
                    conn.autocommit = False
                    conn.execute("SELECT 1")
                    raise KeyError(i)
        except KeyError:
            pass
    assert len(pids) == 1
    assert backends(db_url) == [(pids.pop(), "idle")]


def test_an_unreachable_database_is_one_store_error() -> None:
    src = PoolSource("postgresql://nobody@127.0.0.1:1/none", connect_timeout=1)
    try:
        with pytest.raises(StoreError, match="database unavailable"), src.connection():
            pass
    finally:
        src.close()


def test_close_closes_every_connection_and_refuses_more(db_url: str) -> None:
    src = PoolSource(db_url, max_size=2)
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with src.connection():
            held.set()
            release.wait(30)

    worker = threading.Thread(target=hold)
    worker.start()
    try:
        held.wait(30)
        with src.connection():  # a second connection while the first is lent
            assert len(backends(db_url)) == 2
    finally:
        release.set()
        worker.join(30)
    src.close()
    with psycopg.connect(db_url, autocommit=True) as admin:
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE application_name = 'ragpg'"
                            " AND datname = current_database()").fetchone():
            admin.execute("SELECT pg_sleep(0.01)")
    assert backends(db_url) == []
    with pytest.raises(StoreError, match="closed"), src.connection():
        pass


def test_many_threads_share_two_connections_without_a_leak(db_url: str) -> None:
    """Eight threads, two connections, one block in three failing with a transaction open:
    every lend is served, no more than two sessions are ever opened, and none is left in a
    transaction."""
    src = PoolSource(db_url, max_size=2, connect_timeout=30)
    errors: list[BaseException] = []
    pids: set[int] = set()
    lock = threading.Lock()

    def worker(n: int) -> None:
        for i in range(40):
            try:
                with src.connection() as conn:
                    assert conn.info.transaction_status == IDLE and conn.autocommit
                    conn.execute("SELECT pg_sleep(0.002)")
                    with lock:
                        pids.add(conn.info.backend_pid)
                    if (n + i) % 3 == 0:
                        conn.autocommit = False
                        conn.execute("SELECT 1")
                        raise LookupError(i)
            except LookupError:
                pass
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors
        assert len(pids) <= 2
        sessions = backends(db_url)
        assert len(sessions) <= 2 and {state for _, state in sessions} <= {"idle"}
    finally:
        src.close()
