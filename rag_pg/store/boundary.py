"""The one place where psycopg's errors become ragpg's: the stages above the store (ingest,
search, the facade, the surfaces) see the RagError tree only.

- a missing table or schema: ``SchemaMissing`` (run ``ragpg init``); a missing column: the
  schema is out of date;
- the connection broken under the call: ``ConnectionLost``;
- a server short of disk, memory or connections (SQLSTATE classes 53, 58): ``StoreError``
  (nothing the caller sent is at fault, every later write would fail the same);
- anything else the server refused: ``DatabaseRefused``, with its SQLSTATE.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

import psycopg

from rag_pg.errors import (
    ConnectionLost,
    DatabaseRefused,
    RagError,
    SchemaMissing,
    StoreError,
    first_line,
)
from rag_pg.store.db import connection_lost

P = ParamSpec("P")
R = TypeVar("R")

# SQLSTATE classes of a server short of something (53: disk full, out of memory, too many
# connections; 58: an I/O error).
_SERVER_SHORT = ("53", "58")
_NOT_INITIALISED = (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)


def translate(exc: psycopg.Error, conn: psycopg.Connection[Any] | None = None,
              *, schema: str = "ragpg") -> StoreError:
    """The RagError that ``exc``, raised on ``conn``, means to ragpg's callers."""
    if isinstance(exc, psycopg.errors.UndefinedColumn):
        return SchemaMissing.out_of_date(schema)
    if isinstance(exc, _NOT_INITIALISED):
        return SchemaMissing.not_initialised(schema)
    if (conn is not None and (conn.broken or conn.closed)) or (
            isinstance(exc, psycopg.OperationalError) and conn is None and connection_lost(exc)):
        return ConnectionLost(f"database connection lost: {first_line(exc)}")
    if (exc.sqlstate or "").startswith(_SERVER_SHORT):
        return StoreError(f"the database cannot take the write: {first_line(exc)}")
    return DatabaseRefused(f"database refused it: {first_line(exc)}", exc.sqlstate)


@contextmanager
def database_errors(conn: psycopg.Connection[Any] | None = None, *,
                    schema: str = "ragpg") -> Iterator[None]:
    """Run a block whose psycopg errors reach the caller as RagErrors (see :func:`translate`)."""
    try:
        yield
    except psycopg.Error as exc:
        raise translate(exc, conn, schema=schema) from exc


def translated(method: Callable[..., R]) -> Callable[..., R]:
    """A store method ``(self, conn, ...)`` whose psycopg errors reach its caller translated,
    judged on the connection it was given (broken: the connection was lost)."""

    @functools.wraps(method)
    def call(self: Any, conn: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> R:
        with database_errors(conn, schema=getattr(self, "schema", "ragpg")):
            return method(self, conn, *args, **kwargs)

    return call


def guarded(method: Callable[P, R]) -> Callable[P, R]:
    """A facade method whose database errors reach its caller as RagErrors: a host
    application catches ``RagError`` alone. Errors already of the tree pass unchanged."""

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except RagError:
            raise
        except psycopg.Error as exc:
            schema = getattr(getattr(args[0], "settings", None), "database", None)
            raise translate(exc, schema=getattr(schema, "schema", "ragpg")) from exc

    return call


C = TypeVar("C", bound=type)


def guarded_methods(cls: C) -> C:
    """Every public method of the facade ``cls`` :func:`guarded`: the one boundary between a
    host application and psycopg."""
    for name, value in list(vars(cls).items()):
        if not name.startswith("_") and inspect.isfunction(value):
            setattr(cls, name, guarded(value))
    return cls
