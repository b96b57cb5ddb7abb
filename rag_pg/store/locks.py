"""The collection's advisory lock: ingest, import and re-embed of one collection never interleave."""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row, scalar_row

from rag_pg.errors import IngestBusy
from rag_pg.store.queries import statement

LOCK_CLASS = 0x72677067 & 0x7FFFFFFF  # "rgpg": ragpg's advisory-lock namespace



def lock_key(schema: str, collection: str) -> int:
    return zlib.crc32(f"{schema}\x00{collection}".encode()) & 0x7FFFFFFF


def holder(conn: psycopg.Connection[Any], key: int) -> str:
    """Who holds the lock, so a waiting user knows whom to ask (or what to kill)."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(statement("lock_holder"), (LOCK_CLASS, key)).fetchone()
    if row is None:
        return "holder unknown"
    return f"pid {row['pid']}, application {row['application_name'] or '?'}, {row['state'] or 'state unknown'}"


def lock_free(conn: psycopg.Connection[Any], schema: str, collection: str) -> bool:
    """Whether no ingest, import or re-embed of the collection holds its lock now (taken and
    released at once: a process that died let go of it with its connection)."""
    key = lock_key(schema, collection)
    with conn.cursor(row_factory=scalar_row) as cur:
        free = bool(cur.execute(statement("lock_try"), (LOCK_CLASS, key)).fetchone())
    if free:
        conn.execute(statement("lock_release"), (LOCK_CLASS, key))
    return free


@contextmanager
def collection_lock(
    conn: psycopg.Connection[Any],
    schema: str,
    collection: str,
    *,
    timeout: float,
    source: Any = None,
    warn: Callable[[str], None] | None = None,
    what: str = "ingest",
) -> Iterator[None]:
    """Hold the collection's session advisory lock; wait up to ``timeout`` s, then fail.

    With a source that owns its connections, the lock lives on a dedicated connection, so the
    pool's connections stay free and a killed process releases it with its socket. On a
    caller's connection it is taken there and released explicitly (it survives a rollback).
    """
    key = lock_key(schema, collection)
    dedicated = None
    lock_conn = conn
    if source is not None and getattr(source, "owns_connections", False) and hasattr(source, "dedicated"):
        dedicated = source.dedicated()
        lock_conn = dedicated
    try:
        deadline = time.monotonic() + timeout
        told = False
        while True:
            with lock_conn.cursor(row_factory=scalar_row) as cur:
                taken = cur.execute(statement("lock_try"), (LOCK_CLASS, key)).fetchone()
            if taken:
                break
            who = holder(lock_conn, key)
            if time.monotonic() >= deadline:
                raise IngestBusy(
                    f"another ingest of collection {collection!r} is running ({who});"
                    f" the {what} gave up after {timeout:g} s"
                )
            if not told and warn is not None:
                warn(f"waiting for another ingest of collection {collection!r} ({who})")
                told = True
            time.sleep(0.2)
        failed = True
        try:
            yield
            failed = False
        finally:
            # Released explicitly when the run ended well: a closed connection's lock goes
            # only once its server process has exited, after close() returned, and the next
            # run (or a check) must not find it held. After a failure the connection is
            # closed without that round trip (a frozen server would make it wait again).
            if dedicated is None or not failed:
                try:
                    lock_conn.execute(statement("lock_release"), (LOCK_CLASS, key))
                except psycopg.Error:
                    pass  # the lock goes with the connection
    finally:
        if dedicated is not None:
            dedicated.close()
