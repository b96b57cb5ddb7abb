"""ragpg's own pool (PoolSource) on a real Postgres: a connection comes back in a clean state
whatever happened while it was lent (a transaction left open commits on success, rolls back on
error, a broken connection is replaced), and lending goes on without a leak."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from rag_pg import db
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
        assert again.autocommit  # given back as ragpg's connections are: autocommit


def test_a_connection_given_back_moments_ago_is_lent_without_the_pool(source: PoolSource) -> None:
    with source.connection() as conn:
        pid = conn.info.backend_pid
    requests = source._pool.get_stats().get("requests_num", 0)
    for _ in range(5):
        with source.connection() as again:
            assert again.info.backend_pid == pid
    assert source._pool.get_stats().get("requests_num", 0) == requests


def test_a_busy_connection_still_goes_through_the_pool_now_and_then(
    source: PoolSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's lifetime and idle rules see every connection at least every
    POOL_ROUND_SECONDS, however busy: here at once, so each lend is a request to the pool."""
    monkeypatch.setattr(db, "POOL_ROUND_SECONDS", 0.0)
    requests = source._pool.get_stats().get("requests_num", 0)
    for _ in range(3):
        with source.connection():
            pass
    assert source._pool.get_stats().get("requests_num", 0) == requests + 3
    assert not source._ready


def test_an_idle_connection_goes_back_to_the_pool_and_is_checked(
    source: PoolSource, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db, "RECENTLY_USED_SECONDS", 0.05)
    with source.connection() as conn:
        pid = conn.info.backend_pid
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    time.sleep(0.1)
    # older than the moment: the pool takes it back, its check finds it dead, a new one serves
    with source.connection() as fresh:
        assert fresh.info.backend_pid != pid
        assert fresh.execute("SELECT 1").fetchone() == (1,)


def test_a_thread_waiting_on_the_pool_gets_the_connection_given_back(db_url: str) -> None:
    src = PoolSource(db_url, max_size=1, connect_timeout=3)
    got: list[int] = []
    try:
        with src.connection() as held:
            waiter = threading.Thread(target=lambda: got.append(_pid_of(src)))
            waiter.start()
            time.sleep(0.3)  # the waiter is inside the pool's getconn by now
            pid = held.info.backend_pid
        waiter.join(5)
        assert got == [pid]  # handed over at once, not kept aside until the waiter times out
    finally:
        src.close()


def _pid_of(src: PoolSource) -> int:
    with src.connection() as conn:
        return conn.info.backend_pid


def test_close_closes_the_connections_kept_aside(db_url: str) -> None:
    src = PoolSource(db_url)
    with src.connection() as conn:
        pid = conn.info.backend_pid
    src.close()
    with psycopg.connect(db_url, autocommit=True) as admin:
        for _ in range(50):
            if not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
                break
            time.sleep(0.05)
        else:
            pytest.fail("the connection kept aside is still open after close()")


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
    assert stats["pool_size"] == 1  # one connection ever opened, idle: in the pool or kept aside
    assert stats["pool_available"] + len(source._ready) == 1


def test_an_unreachable_database_is_one_store_error() -> None:
    src = PoolSource("postgresql://nobody@127.0.0.1:1/none", connect_timeout=1)
    try:
        with pytest.raises(StoreError, match="database unavailable"), src.connection():
            pass
    finally:
        src.close()


def test_many_threads_share_two_connections_without_starving(db_url: str) -> None:
    """Eight threads, two connections, one in three blocks failing: every lend is served well
    before the pool's timeout (the list kept in front of the pool never holds a connection
    while a thread waits), nothing leaks, and no connection comes back in a transaction."""
    src = PoolSource(db_url, max_size=2, connect_timeout=5)
    errors: list[BaseException] = []
    slowest = [0.0]
    pids: set[int] = set()
    lock = threading.Lock()

    def worker(n: int) -> None:
        for i in range(40):
            started = time.monotonic()
            try:
                with src.connection() as conn:
                    waited = time.monotonic() - started
                    assert conn.info.transaction_status == IDLE
                    conn.execute("SELECT pg_sleep(0.002)")
                    with lock:
                        pids.add(conn.info.backend_pid)
                        slowest[0] = max(slowest[0], waited)
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
            t.join(60)
        assert not errors
        assert len(pids) <= 2
        assert slowest[0] < 4.0  # none came near the 5 s pool timeout (what a starved one waits)
        stats = src._pool.get_stats()
        assert stats["pool_size"] <= 2
        assert stats["pool_available"] + len(src._ready) == stats["pool_size"]
    finally:
        src.close()
