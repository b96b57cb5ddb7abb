"""Where ragpg gets its connections: a URL (own pool), or a caller's psycopg/SQLAlchemy object."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Protocol

import psycopg
from pgvector.psycopg import register_vector

from .config import redact_url
from .errors import ExtensionUnavailable, StoreError

APPLICATION_NAME = "ragpg"

# Settings for ragpg's own connections: a stuck peer never holds a lock forever.
OWN_CONNECTION_OPTIONS = "-c idle_in_transaction_session_timeout=300000 -c lock_timeout=60000"

# A pooled connection given back this recently is lent again without a ping (PoolSource).
RECENTLY_USED_SECONDS = 2.0
# ... and goes through the pool at least this often, whose lifetime and idle rules then apply.
POOL_ROUND_SECONDS = 60.0

_IDLE = psycopg.pq.TransactionStatus.IDLE
_INERROR = psycopg.pq.TransactionStatus.INERROR
# Transaction states in which a connection given back still has work to end.
_OPEN_TRANSACTION = (psycopg.pq.TransactionStatus.INTRANS, _INERROR)

_registered: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()
_registered_lock = threading.Lock()


class ConnectionSource(Protocol):
    """Lends psycopg connections; closes only what it opened itself."""

    owns_connections: bool

    def connection(self) -> Any: ...  # context manager yielding psycopg.Connection

    def close(self) -> None: ...


def prepare(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """Register pgvector's types once per connection (needs the extension to exist)."""
    if conn in _registered:
        return conn
    with _registered_lock:
        if conn in _registered:
            return conn
        try:
            register_vector(conn)
        except psycopg.ProgrammingError as exc:
            raise ExtensionUnavailable(
                "the pgvector extension is not installed in this database: run `ragpg init`"
            ) from exc
        _registered.add(conn)
    return conn


class PoolSource:
    """A URL: ragpg owns a small psycopg pool (thread-safe; closed by :meth:`close`).

    In front of the pool sits a short list of connections given back moments ago in good
    order: they are lent again from there, without a ping and without the pool's own
    bookkeeping, which costs a search more than a tenth of a millisecond when it runs cold
    between two waits on the network (measured on a 2-core machine). One idle for longer
    than ``RECENTLY_USED_SECONDS`` goes back to the pool at the next request, where its check
    (a ping) applies again, and one lent from the list for ``POOL_ROUND_SECONDS`` goes back
    at its next return, where the pool's lifetime and idle rules apply; while a thread waits
    on the pool, every connection given back goes to the pool, so the list never keeps one
    from it. A server restart inside that moment costs the next operation an
    OperationalError (a search retries once, see RagPG.search).
    """

    owns_connections = True

    def __init__(self, url: str, *, max_size: int = 4, connect_timeout: float = 10.0):
        from psycopg_pool import ConnectionPool

        self.url = url
        self._pool = ConnectionPool(
            url,
            min_size=0,
            max_size=max(1, max_size),
            kwargs={
                "autocommit": True,
                "application_name": APPLICATION_NAME,
                "connect_timeout": int(connect_timeout),
                "options": OWN_CONNECTION_OPTIONS,
            },
            open=False,
            timeout=connect_timeout,
            check=ConnectionPool.check_connection,
        )
        self._opened = False
        self._lock = threading.Lock()
        # (connection, given back at, taken from the pool at), oldest first
        self._ready: list[tuple[psycopg.Connection[Any], float, float]] = []
        self._waiting = 0  # threads inside the pool's getconn

    def _open(self) -> None:
        with self._lock:
            if not self._opened:
                self._pool.open(wait=False)
                self._opened = True

    def connection(self) -> _Lease:
        """A connection for a ``with`` block: a transaction left open on exit commits when the
        block succeeds and rolls back when it fails, as psycopg_pool's ``connection()`` does."""
        return _Lease(self)

    def _lend(self) -> tuple[psycopg.Connection[Any], float]:
        """A connection and when it left the pool."""
        if not self._opened:
            self._open()
        now = time.monotonic()
        with self._lock:
            if self._ready and now - self._ready[-1][1] < RECENTLY_USED_SECONDS:
                conn, _, since = self._ready.pop()
                return conn, since
            stale = [entry[0] for entry in self._ready]  # the newest is too old: all are
            self._ready.clear()
            self._waiting += 1
        try:
            for conn in stale:
                self._pool.putconn(conn)
            return self._pool.getconn(), now
        except Exception as exc:
            raise StoreError(f"database unavailable at {redact_url(self.url)}: {_one_line(exc)}") from None
        finally:
            with self._lock:
                self._waiting -= 1

    def _give_back(self, conn: psycopg.Connection[Any], since: float, failed: bool) -> None:
        try:
            status = conn.pgconn.transaction_status
            if status in _OPEN_TRANSACTION:
                if failed or status == _INERROR:
                    conn.rollback()
                else:
                    conn.commit()  # an error here is the block's: it reaches the caller
            if conn.pgconn.transaction_status == _IDLE and not conn.autocommit:
                conn.autocommit = True  # a caller switched it off for a while
        except psycopg.Error:
            if not failed:
                self._pool.putconn(conn)
                raise
        except BaseException:
            self._pool.putconn(conn)
            raise
        now = time.monotonic()
        if conn.pgconn.transaction_status == _IDLE and now - since < POOL_ROUND_SECONDS:
            with self._lock:
                if not self._waiting and self._opened:
                    self._ready.append((conn, now, since))
                    return
        self._pool.putconn(conn)  # broken or mid-statement ones are discarded there

    def dedicated(self) -> psycopg.Connection[Any]:
        """A connection outside the pool (for a session-long advisory lock)."""
        return connect(self.url)

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, False
            ready, self._ready = self._ready, []
        for conn, _, _ in ready:
            self._pool.putconn(conn)
        if opened:
            self._pool.close()


class _Lease:
    """``with source.connection() as conn``: lends on entry, gives back on exit."""

    __slots__ = ("_source", "_conn", "_since")

    def __init__(self, source: PoolSource) -> None:
        self._source = source
        self._conn: psycopg.Connection[Any] | None = None
        self._since = 0.0

    def __enter__(self) -> psycopg.Connection[Any]:
        self._conn, self._since = self._source._lend()
        return self._conn

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._source._give_back(conn, self._since, failed=exc_type is not None)


class BorrowedConnection:
    """The caller's psycopg connection: used as is, never closed, never committed by us."""

    owns_connections = False

    def __init__(self, conn: psycopg.Connection[Any]):
        self.conn = conn
        self._lock = threading.RLock()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        with self._lock:
            if (not self.conn.autocommit
                    and self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE):
                # A non-autocommit connection belongs to a caller who commits (Django's atomic(),
                # a Flask request): open its transaction now, so ragpg's transaction blocks are
                # savepoints inside it rather than transactions of their own that would commit.
                self.conn.execute("SELECT 1")
            yield self.conn

    def close(self) -> None:
        pass


class EngineSource:
    """A SQLAlchemy Engine (``postgresql+psycopg``): connections come from its pool."""

    owns_connections = False

    def __init__(self, engine: Any):
        if getattr(engine.dialect, "driver", "") != "psycopg":
            raise StoreError(
                "ragpg needs a SQLAlchemy engine on the psycopg 3 driver (postgresql+psycopg://...)"
            )
        self.engine = engine

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        raw = self.engine.raw_connection()
        try:
            conn = raw.driver_connection
            was_autocommit = conn.autocommit
            if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                conn.autocommit = True
            try:
                yield conn
            finally:
                if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                    conn.autocommit = was_autocommit
        finally:
            raw.close()

    def close(self) -> None:
        pass


class SAConnectionSource(BorrowedConnection):
    """A SQLAlchemy Connection: its psycopg connection and transaction are the caller's."""

    def __init__(self, sa_conn: Any):
        if getattr(sa_conn.dialect, "driver", "") != "psycopg":
            raise StoreError("ragpg needs a SQLAlchemy connection on the psycopg 3 driver")
        super().__init__(sa_conn.connection.driver_connection)


def connect(url: str, *, connect_timeout: float = 10.0) -> psycopg.Connection[Any]:
    """One connection of ragpg's own (autocommit; transactions are explicit blocks)."""
    try:
        return psycopg.connect(
            url,
            autocommit=True,
            application_name=APPLICATION_NAME,
            connect_timeout=int(connect_timeout),
            options=OWN_CONNECTION_OPTIONS,
        )
    except psycopg.Error as exc:
        raise StoreError(f"database unavailable at {redact_url(url)}: {_one_line(exc)}") from None


def source_for(target: Any, *, pool_size: int = 4) -> ConnectionSource:
    """Pick the source for what the caller handed over (URL, psycopg or SQLAlchemy object)."""
    if isinstance(target, str):
        return PoolSource(target, max_size=pool_size)
    if isinstance(target, psycopg.Connection):
        return BorrowedConnection(target)
    module = type(target).__module__
    if module.startswith("sqlalchemy"):
        if hasattr(target, "raw_connection"):
            return EngineSource(target)
        if hasattr(target, "connection") and hasattr(target, "dialect"):
            return SAConnectionSource(target)
    raise TypeError(
        "ragpg needs a connection URL, a psycopg.Connection, or a SQLAlchemy Engine/Connection"
        f" (got {type(target).__name__})"
    )


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
