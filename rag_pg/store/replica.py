"""Reads on a streaming replica, writes on the primary, and this process's own writes visible.

With ``database.read_url`` set, the read-only operations (searches, ``stats``,
``get_document``, the service's catalogue) borrow their connections from a second pool on
the replica; everything that writes (ingest, re-embed, migrations, the ingest advisory lock)
keeps using the primary's. A replica replays the primary's WAL a little behind it, so a
search right after an ingest of this process could miss what it wrote: after each write the
router notes the primary's WAL position, and reads go to the primary until the replica has
replayed past it (checked once per read, cleared for good as soon as it has).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import psycopg
from psycopg.rows import scalar_row

from rag_pg.config import DatabaseSettings
from rag_pg.errors import StoreError
from rag_pg.store.db import ConnectionSource, PoolSource
from rag_pg.store.queries import statement


class ReadRouter:
    """The source of read-only connections: the replica's pool when ``read_url`` is set and
    it has caught up with this process's writes, else the primary's source."""

    def __init__(self, primary: ConnectionSource, settings: DatabaseSettings):
        self.primary = primary
        self.replica: PoolSource | None = None
        if settings.read_url:
            self.replica = PoolSource(settings.read_url, max_size=settings.pool_size,
                                      connect_timeout=settings.connect_timeout,
                                      call_timeout=settings.call_timeout or None)
        self.owns_connections = primary.owns_connections
        self._lock = threading.Lock()
        self._awaited: str | None = None  # primary WAL position the replica must replay first

    def wrote(self) -> None:
        """Note the primary's WAL position after a write of this process (every commit of it
        is at or before that position): reads stay on the primary until the replica is there."""
        if self.replica is None:
            return
        try:
            with self.primary.connection() as conn, conn.cursor(row_factory=scalar_row) as cur:
                position = cur.execute(statement("wal_position")).fetchone()
        except (StoreError, psycopg.Error):
            # The primary went away during the write: its own error says so, not this one.
            return
        if position is not None:
            with self._lock:
                self._awaited = str(position)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one read; a replica that cannot be reached sends it to the primary."""
        source = self._choose()
        with ExitStack() as stack:
            try:
                conn = stack.enter_context(source.connection())
            except StoreError:
                if source is self.primary:
                    raise
                conn = stack.enter_context(self.primary.connection())
            yield conn

    def _choose(self) -> ConnectionSource:
        if self.replica is None:
            return self.primary
        with self._lock:
            awaited = self._awaited
        if awaited is None:
            return self.replica
        try:
            with self.replica.connection() as conn, conn.cursor(row_factory=scalar_row) as cur:
                caught_up = cur.execute(statement("replica_caught_up"), (awaited,)).fetchone()
        except (StoreError, psycopg.OperationalError):
            return self.primary
        if not caught_up:
            return self.primary
        with self._lock:
            if self._awaited == awaited:  # a later write may have moved it on meanwhile
                self._awaited = None
        return self.replica

    def close(self) -> None:
        """Close the replica's pool (the primary's source is its owner's to close)."""
        if self.replica is not None:
            self.replica.close()
