"""Reading rows in tests by name, as the package does: one value (``scalar_row``), one column,
or rows as dicts (``dict_row``); never by position."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row, scalar_row

Query = str | bytes | sql.Composable


def value(conn: psycopg.Connection[Any], query: Query, params: Any = None) -> Any:
    """The first column of the first row (None when there is no row)."""
    with conn.cursor(row_factory=scalar_row) as cur:
        return cur.execute(query, params).fetchone()  # type: ignore[arg-type]


def values(conn: psycopg.Connection[Any], query: Query, params: Any = None) -> list[Any]:
    """The first column of every row, in order."""
    with conn.cursor(row_factory=scalar_row) as cur:
        return cur.execute(query, params).fetchall()  # type: ignore[arg-type]


def records(conn: psycopg.Connection[Any], query: Query, params: Any = None) -> list[dict[str, Any]]:
    """Every row as a dict of its columns."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query, params).fetchall()  # type: ignore[arg-type]
