"""Where ragpg gets its connections: a URL (own pool), or a caller's psycopg/SQLAlchemy object."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import psycopg
from pgvector.psycopg import register_vector

from .config import redact_url
from .errors import ExtensionUnavailable, StoreError

APPLICATION_NAME = "ragpg"

# Settings for ragpg's own connections: a stuck peer never holds a lock forever.
OWN_CONNECTION_OPTIONS = "-c idle_in_transaction_session_timeout=300000 -c lock_timeout=60000"

# A pooled connection returned this recently is lent again without a ping (PoolSource._check).
RECENTLY_USED_SECONDS = 2.0

# Transaction states in which a connection given back still has work to end.
_OPEN_TRANSACTION = (psycopg.pq.TransactionStatus.INTRANS, psycopg.pq.TransactionStatus.INERROR)

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
    """A URL: ragpg owns a small psycopg pool (thread-safe; closed by :meth:`close`)."""

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
            check=self._check,
        )
        self._opened = False
        self._lock = threading.Lock()
        self._returned: weakref.WeakKeyDictionary[psycopg.Connection[Any], float] = (
            weakref.WeakKeyDictionary()
        )

    def _check(self, conn: psycopg.Connection[Any]) -> None:
        """Ping a connection before lending it, unless it came back moments ago in good order:
        back-to-back searches skip a round trip each. A server restart inside that moment costs
        the next operation an OperationalError (a search retries once, see RagPG.search)."""
        from psycopg_pool import ConnectionPool

        returned = self._returned.get(conn)
        if returned is not None and time.monotonic() - returned < RECENTLY_USED_SECONDS:
            return
        ConnectionPool.check_connection(conn)

    def _open(self) -> None:
        with self._lock:
            if not self._opened:
                self._pool.open(wait=False)
                self._opened = True

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection, given back on exit like psycopg_pool's ``connection()`` does
        (a transaction left open commits on success, rolls back on error), without its
        nested context managers: lending and taking back is on every search's path."""
        if not self._opened:
            self._open()
        try:
            conn = self._pool.getconn()
        except Exception as exc:
            raise StoreError(f"database unavailable at {redact_url(self.url)}: {_one_line(exc)}") from None
        try:
            yield conn
        except BaseException:
            self._returned.pop(conn, None)
            try:
                if conn.pgconn.transaction_status in _OPEN_TRANSACTION:
                    conn.rollback()
            except psycopg.Error:
                pass  # a broken connection: the pool discards it
            finally:
                self._pool.putconn(conn)
            raise
        try:
            if conn.pgconn.transaction_status in _OPEN_TRANSACTION:
                conn.commit()
            self._returned[conn] = time.monotonic()
        finally:
            self._pool.putconn(conn)

    def dedicated(self) -> psycopg.Connection[Any]:
        """A connection outside the pool (for a session-long advisory lock)."""
        return connect(self.url)

    def close(self) -> None:
        if self._opened:
            self._pool.close()
            self._opened = False


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
