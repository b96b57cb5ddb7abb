"""Where ragpg gets its connections: a URL (own pool), or a caller's psycopg/SQLAlchemy object."""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, Union
from urllib.parse import unquote

import psycopg
from pgvector.psycopg import register_vector
from psycopg.abc import PQGen
from psycopg.conninfo import conninfo_to_dict
from psycopg.errors import _WaitTimeout
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool, PoolTimeout

from rag_pg.config import DatabaseSettings, redact_url
from rag_pg.config.settings import UNPARSABLE_DSN, mask_secret
from rag_pg.errors import ConfigError, DatabaseTimeout, ExtensionUnavailable, StoreError
from rag_pg.store import permissions, tenancy
from rag_pg.store.queries import statement

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection as SAConnection
    from sqlalchemy.engine import Engine

#: What ``RagPG(database)`` accepts: a URL, or a caller's psycopg or SQLAlchemy object
#: (SQLAlchemy on the psycopg 3 driver; it is imported only by those who pass one, hence the
#: names in quotes, and Union: ``|`` cannot join a quoted name at run time).
Database: TypeAlias = Union[str, psycopg.Connection[Any], "Engine", "SAConnection"]  # noqa: UP007

APPLICATION_NAME = "ragpg"

# Settings for ragpg's own connections: a stuck peer never holds a lock forever.
OWN_CONNECTION_OPTIONS = "-c idle_in_transaction_session_timeout=300000 -c lock_timeout=60000"

DEFAULT_CONNECT_TIMEOUT = DatabaseSettings().connect_timeout
POOL_CLOSE_WAIT = 1.0  # seconds closing a pool waits for its workers
DEFAULT_CALL_TIMEOUT = DatabaseSettings().call_timeout

# TCP keepalives and tcp_user_timeout (libpq options, ignored on a Unix socket): a peer that
# vanished (a lost host, a cable, a blackholed route) is noticed in about a minute even while
# the connection is idle in the pool or waits for a lock, instead of after the kernel's hours.
KEEPALIVE_OPTIONS = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 60_000,  # ms sent data may stay unacknowledged before the socket fails
}
RV = TypeVar("RV")
_IDLE = psycopg.pq.TransactionStatus.IDLE
_OPEN = (psycopg.pq.TransactionStatus.INTRANS, psycopg.pq.TransactionStatus.INERROR)

#: A search reads its collection and its candidates in one snapshot, so that the model it
#: embedded the query with is the one whose vectors it scans, even while `ragpg reembed`
#: switches the collection to another model. Read-only: it never waits, never fails to commit.


class DeadlineConnection(psycopg.Connection[TupleRow]):
    """A psycopg connection whose every wait for the server ends after ``call_timeout`` s.

    Keepalives cannot tell a frozen server from a busy one: its kernel still acknowledges
    every packet, and a cancel request is only acted on once the backend runs again. So the
    wait itself is bounded (psycopg's own timeout on the generator of each call); past it the
    query is cancelled, the connection closed (a pool then discards it), and the caller gets
    one :class:`DatabaseTimeout` instead of hanging. ``None`` or 0: no limit.
    """

    call_timeout: float | None = None
    # Each transaction opened here first names the tenant and the acting principals
    # (rag_pg.store.tenancy, rag_pg.store.permissions).
    tenant_aware = True

    @contextmanager
    def transaction(
        self, savepoint_name: str | None = None, force_rollback: bool = False
    ) -> Iterator[psycopg.Transaction]:
        idle = self.info.transaction_status == _IDLE
        tenant = tenancy.active() if idle else None
        acting = permissions.opening_statements() if idle else ()
        with super().transaction(savepoint_name, force_rollback) as tx:
            if tenant is not None:
                self.execute(tenancy.statement(tenant))
            for opening in acting:
                self.execute(opening)
            yield tx

    def wait(self, gen: PQGen[RV], interval: float = 0.1, timeout: float | None = None) -> RV:
        limit = self.call_timeout
        if timeout is not None or not limit:
            return super().wait(gen, interval=interval, timeout=timeout)
        try:
            return super().wait(gen, interval=interval, timeout=limit)
        except _WaitTimeout:
            # Cancel (the server stops the statement once it runs again), then close: the
            # state of a connection abandoned mid-call is unknown, it must not be reused.
            try:  # quietly: psycopg's own helper would log a warning line beside ours
                self.cancel_safe(timeout=cancel_budget(limit))
            except Exception:  # noqa: BLE001 - the server may not even take the request
                pass
            self.pgconn.finish()
            raise DatabaseTimeout(
                f"the database did not answer within {limit:g} s (database.call_timeout):"
                " the call was cancelled and its connection closed"
            ) from None


def cancel_budget(limit: float) -> float:
    """How long a call past its deadline may still spend asking the server to cancel it: a
    quarter of the deadline, one second at most (a blackholed server never answers the cancel
    request either). A call so ends within ``call_timeout`` plus this budget."""
    return min(1.0, limit / 4)


def _deadline_connect(url: str, connect_timeout: float,
                      call_timeout: float | None) -> DeadlineConnection:
    conn = DeadlineConnection.connect(url, **_connect_kwargs(url, connect_timeout))
    conn.call_timeout = call_timeout
    return conn


class ConnectionSource(Protocol):
    """Lends psycopg connections; closes only what it opened itself."""

    owns_connections: bool

    def connection(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...

    def close(self) -> None: ...


def has_vector_types(conn: psycopg.Connection[Any]) -> bool:
    """Whether pgvector's types are registered on this connection (its own adapters map)."""
    return conn.adapters.types.get("vector") is not None


def prepare(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """Register pgvector's types on ``conn`` unless they already are (needs the extension)."""
    if not has_vector_types(conn):
        try:
            register_vector(conn)
        except psycopg.ProgrammingError as exc:
            raise ExtensionUnavailable(
                "the pgvector extension is not installed in this database: run `ragpg init`"
            ) from exc
    return conn


@contextmanager
def read_snapshot(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Run the statements sent in the block in one read-only snapshot, in one round trip.

    The statements are pipelined; their rows are read once the block has ended. On an idle
    autocommit connection (ragpg's own) BEGIN and COMMIT travel in the pipeline beside them,
    and the block's end is the one Sync: psycopg's ``transaction()`` in a pipeline syncs
    after BEGIN and around COMMIT to learn the transaction's state (four waits for the
    server instead of one). Inside a caller's transaction the block is a savepoint of it;
    on a caller's connection that is not autocommit, psycopg's own transaction.
    """
    if not conn.autocommit or conn.info.transaction_status != _IDLE:
        snapshot = conn.info.transaction_status == _IDLE  # else a caller's transaction
        with conn.pipeline(), conn.transaction():
            if snapshot:
                conn.execute(statement("snapshot_set"))
            yield
        return
    # The tenant, as DeadlineConnection.transaction names it in each transaction it opens.
    ours = isinstance(conn, DeadlineConnection)
    tenant = tenancy.active() if ours else None
    try:
        with conn.pipeline():
            conn.execute(statement("snapshot_begin"))
            if tenant is not None:
                conn.execute(tenancy.statement(tenant))
            for opening in permissions.opening_statements() if ours else ():
                conn.execute(opening)
            yield
            conn.execute(statement("snapshot_commit"))
    except BaseException:
        # A failed statement leaves the transaction open (the pipeline skipped the COMMIT).
        if not conn.closed and conn.info.transaction_status in _OPEN:
            conn.rollback()
        raise


def _configure(conn: psycopg.Connection[Any], call_timeout: float | None) -> None:
    """A new pooled connection: its call deadline, and pgvector's types when the extension
    exists already (before ``ragpg init`` it does not; :func:`prepare` registers them once it
    does)."""
    if isinstance(conn, DeadlineConnection):
        conn.call_timeout = call_timeout
    try:
        register_vector(conn)
    except psycopg.ProgrammingError:
        pass


def _reset(conn: psycopg.Connection[Any]) -> None:
    """A connection given back to the pool: autocommit again, as ragpg's connections are (a
    migration switches it off for a while)."""
    if not conn.autocommit:
        conn.autocommit = True


class PoolSource:
    """A URL: ragpg owns a psycopg pool (thread-safe; opened on first use, closed by
    :meth:`close`). Connections are autocommit, so transactions are explicit blocks; the pool
    commits a transaction left open when the block succeeds, rolls it back when it fails,
    checks a connection before lending it and replaces a broken one."""

    owns_connections = True

    def __init__(self, url: str, *, max_size: int = 4,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 call_timeout: float | None = DEFAULT_CALL_TIMEOUT):
        check_url(url)
        self.url = url
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self._pool: ConnectionPool[DeadlineConnection] = ConnectionPool(
            url,
            connection_class=DeadlineConnection,
            min_size=0,
            max_size=max(1, max_size),
            kwargs=_connect_kwargs(url, connect_timeout),
            configure=functools.partial(_configure, call_timeout=call_timeout),
            reset=_reset,
            check=ConnectionPool.check_connection,
            open=False,
            timeout=connect_timeout,
            name=APPLICATION_NAME,
        )
        self._open_lock = threading.Lock()
        self._closed = False

    @property
    def pool(self) -> ConnectionPool[DeadlineConnection]:
        return self._pool

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection for a ``with`` block (the pool's own ``connection()``)."""
        if self._pool.closed:
            with self._open_lock:
                if self._closed:
                    raise StoreError("this RagPG is closed")
                if self._pool.closed:
                    # One direct connection first: a refused or misconfigured server is
                    # reported at once with libpq's own reason, instead of the pool's
                    # workers retrying (and logging) until its timeout.
                    connect(self.url, connect_timeout=self.connect_timeout).close()
                    self._pool.open(wait=False)
        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout:
            raise StoreError(
                f"database unavailable at {redact_url(self.url)}: no connection within"
                f" {self.connect_timeout:g} s (database.connect_timeout)"
            ) from None

    def dedicated(self) -> psycopg.Connection[Any]:
        """A connection outside the pool (for a session-long advisory lock)."""
        return connect(self.url, connect_timeout=self.connect_timeout,
                       call_timeout=self.call_timeout)

    def close(self) -> None:
        with self._open_lock:
            self._closed = True
        if not self._pool.closed:
            # A worker still trying to connect (to a server that went silent) is left to its
            # own connect timeout: closing does not wait for it past this.
            self._pool.close(timeout=POOL_CLOSE_WAIT)


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
                self.conn.execute(statement("ping"))
            yield self.conn

    def close(self) -> None:
        pass


class EngineSource:
    """A SQLAlchemy Engine (``postgresql+psycopg``): connections come from its pool."""

    owns_connections = False

    def __init__(self, engine: Engine):
        if getattr(engine.dialect, "driver", "") != "psycopg":
            raise StoreError(
                "ragpg needs a SQLAlchemy engine on the psycopg 3 driver (postgresql+psycopg://...)"
            )
        self.engine = engine

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        raw = self.engine.raw_connection()
        try:
            conn = _psycopg_connection(raw.driver_connection)
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

    def __init__(self, sa_conn: SAConnection):
        if getattr(sa_conn.dialect, "driver", "") != "psycopg":
            raise StoreError("ragpg needs a SQLAlchemy connection on the psycopg 3 driver")
        super().__init__(_psycopg_connection(sa_conn.connection.driver_connection))


def _psycopg_connection(driver_connection: Any) -> psycopg.Connection[Any]:
    """The psycopg connection under a SQLAlchemy one (the driver was checked: psycopg 3)."""
    if not isinstance(driver_connection, psycopg.Connection):
        raise StoreError("ragpg needs a SQLAlchemy connection on the psycopg 3 driver (sync)")
    return driver_connection


def _connect_kwargs(url: str, connect_timeout: float) -> dict[str, Any]:
    # libpq counts connect_timeout in whole seconds (and treats 0 as "wait forever"). The
    # keepalive defaults give way to what the DSN itself says (a network the user knows).
    given = conninfo_to_dict(url)
    return {
        "autocommit": True,
        "application_name": APPLICATION_NAME,
        "connect_timeout": max(1, round(connect_timeout)),
        "options": OWN_CONNECTION_OPTIONS,
        **{name: value for name, value in KEEPALIVE_OPTIONS.items() if name not in given},
    }


def check_url(url: str) -> None:
    """Refuse a DSN libpq cannot parse (an unknown option, a malformed URL): a configuration
    error, reported before any connection is tried."""
    try:
        conninfo_to_dict(url)
    except psycopg.Error:
        # libpq's message quotes the part it could not read, which may be the password.
        raise ConfigError(
            f"invalid database URL: {UNPARSABLE_DSN} (percent-encode a password's spaces and"
            " '%' signs: %20, %25)") from None


# libpq's messages for a value it refuses before reaching any server ("invalid sslmode value",
# "invalid integer value", "invalid port number"): the DSN is wrong, not the server down.
_CONFIG_MESSAGES = ("invalid ", "unrecognized ")


def connect(url: str, *, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
            call_timeout: float | None = DEFAULT_CALL_TIMEOUT) -> psycopg.Connection[Any]:
    """One connection of ragpg's own (autocommit; transactions are explicit blocks; every call
    bounded by ``call_timeout``)."""
    check_url(url)
    try:
        return _deadline_connect(url, connect_timeout, call_timeout)
    except psycopg.Error as exc:
        reason = _one_line(exc, url)
        if reason.removeprefix("connection is bad: ").startswith(_CONFIG_MESSAGES):
            raise ConfigError(f"invalid database URL: {reason}") from None
        raise StoreError(f"database unavailable at {redact_url(url)}: {reason}") from None


def source_for(target: Database, *, pool_size: int = 4,
               connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
               call_timeout: float | None = DEFAULT_CALL_TIMEOUT) -> ConnectionSource:
    """Pick the source for what the caller handed over (URL, psycopg or SQLAlchemy object)."""
    if isinstance(target, str):
        return PoolSource(target, max_size=pool_size, connect_timeout=connect_timeout,
                          call_timeout=call_timeout)
    if isinstance(target, psycopg.Connection):
        return BorrowedConnection(target)
    if type(target).__module__.startswith("sqlalchemy"):
        # SQLAlchemy is optional and slow to import: only a caller who made one of its
        # objects has it loaded already.
        from sqlalchemy.engine import Connection as SAConnection
        from sqlalchemy.engine import Engine

        if isinstance(target, Engine):
            return EngineSource(target)
        if isinstance(target, SAConnection):
            return SAConnectionSource(target)
    raise TypeError(
        "ragpg needs a connection URL, a psycopg.Connection, or a SQLAlchemy Engine/Connection"
        f" (got {type(target).__name__})"
    )


def _one_line(exc: BaseException, url: str) -> str:
    """The first line of ``exc``'s text, without the password of ``url`` (libpq and psycopg
    may quote the DSN or one of its values)."""
    text = str(exc).strip().splitlines()
    return scrub(text[0], url) if text else type(exc).__name__


def scrub(text: str, url: str) -> str:
    """``text`` with the DSN ``url`` and its password masked wherever they appear."""
    if url:
        text = text.replace(url, redact_url(url))
        for password in dsn_passwords(url):
            text = mask_secret(text, password)
    # A DSN that does not parse still hides what looks like its password.
    text = _PASSWORD_WORD.sub(r"\1***", text)
    return _URL_PASSWORD.sub(r"\1***@", text)


_PASSWORD_WORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def connection_lost(exc: psycopg.OperationalError) -> bool:
    """The server closed or restarted under the connection (not a timeout or a lock error)."""
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


def dsn_passwords(url: str) -> list[str]:
    """The password of a DSN as libpq parsed it, and as written in a URL's user part (up to
    the last '@': libpq takes '#', '?' and '/' there as they are), raw and decoded."""
    found: list[str] = []
    try:
        password = conninfo_to_dict(url).get("password")
        if password:
            found.append(str(password))
    except psycopg.Error:
        pass
    if "://" in url:
        rest = url.split("://", 1)[1]
        creds = rest[:rest.rfind("@")] if "@" in rest else ""
        if ":" in creds:
            raw = creds.split(":", 1)[1]
            found += [raw, unquote(raw)]
    return [p for p in dict.fromkeys(found) if p]


class _SecondPipelineError(logging.Filter):
    """Drops psycopg's "error ignored terminating <Pipeline>" record: psycopg logs it when a
    pipeline cannot close while an error raised in it is propagating, and that first error
    reaches ragpg's caller (as a RagError); the record only repeated it on stderr."""

    dropping = True  # off when psycopg's whole log is asked for (``ragpg -v``)

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.dropping and isinstance(record.msg, str)
                    and record.msg.startswith("error ignored terminating"))


_PIPELINE_NOISE = _SecondPipelineError()


def quiet_second_pipeline_errors() -> None:
    """Install the filter above on psycopg's logger, once (when a RagPG is built, never at
    import): a host application's own psycopg log is otherwise left as it is."""
    log = logging.getLogger("psycopg")
    if _PIPELINE_NOISE not in log.filters:
        log.addFilter(_PIPELINE_NOISE)


def show_second_pipeline_errors(show: bool) -> None:
    """Let that record through (the command line's ``-v`` shows psycopg's whole log)."""
    _PIPELINE_NOISE.dropping = not show
