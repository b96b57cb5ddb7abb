"""Which database errors stop an ingest, and which fail one document only."""

from __future__ import annotations

from typing import Any

import psycopg

from rag_pg.errors import StoreError

# SQLSTATE classes of a server short of something (53: disk full, out of memory, too many
# connections; 58: an I/O error): no document is at fault, every later one would fail the same.
_SERVER_SHORT = ("53", "58")


def raise_if_lost(conn: psycopg.Connection[Any], exc: psycopg.Error) -> None:
    """A StoreError when the connection itself is gone or the server is out of resources (the
    run stops, unavailable); otherwise the document is at fault."""
    if conn.broken or conn.closed:
        raise StoreError(f"database connection lost while writing: {first_line(exc)}") from None
    if (exc.sqlstate or "").startswith(_SERVER_SHORT):
        raise StoreError(f"the database cannot take the write: {first_line(exc)}") from None


def first_line(exc: BaseException) -> str:
    """The line a document's failure is reported with: the error's first, else its type."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
