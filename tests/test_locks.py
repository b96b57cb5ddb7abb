"""The collection's advisory lock is given back by the run that held it, not by its connection's
end: a closed connection's lock goes only once its server process has exited, after close()
returned, and a check or the next run looking at once found it still held."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from rag_pg.store.locks import collection_lock

from .rows import value


class KeptOpen:
    """A source whose dedicated connection survives ``close()``: only an explicit unlock can
    free the lock then."""

    owns_connections = True

    def __init__(self, url: str):
        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.close = lambda: None  # type: ignore[method-assign]

    def dedicated(self) -> Any:
        return self.conn


def advisory_locks(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = value(conn, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
    assert row is not None
    return int(row)


def test_a_run_that_ends_well_gives_its_lock_back_itself(db_url: str) -> None:
    source = KeptOpen(db_url)
    try:
        with psycopg.connect(db_url, autocommit=True) as conn:
            with collection_lock(conn, "ragpg", "default", timeout=5, source=source):
                assert advisory_locks(db_url) == 1
            assert advisory_locks(db_url) == 0
    finally:
        psycopg.Connection.close(source.conn)


def test_a_failed_run_leaves_its_lock_to_the_connection(db_url: str) -> None:
    """After a failure (a frozen server, say) no round trip is made: the connection's end
    frees the lock."""
    source = KeptOpen(db_url)
    try:
        with psycopg.connect(db_url, autocommit=True) as conn:
            with pytest.raises(RuntimeError), collection_lock(conn, "ragpg", "default", timeout=5,
                                                             source=source):
                raise RuntimeError("the run failed")
            assert advisory_locks(db_url) == 1  # kept open here: nothing released it
    finally:
        psycopg.Connection.close(source.conn)
