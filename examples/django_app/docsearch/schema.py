"""Creates or upgrades ragpg's schema from a Django migration (``RunPython``).

ragpg's tables, views and functions are created by ragpg's own Alembic revisions, never by
Django models: they live in their own schema (``ragpg``), with Alembic's version table in
that schema too, so Django's and ragpg's migration histories never meet. Running them from a
Django migration means ``manage.py migrate`` sets up everything, in Django's migration
transaction. When a new ragpg release ships new revisions, add a Django migration with the
same ``RunPython(upgrade_ragpg)`` (or run ``manage.py ragpg_upgrade``).
"""

from __future__ import annotations

from typing import Any

import psycopg

from rag_pg import upgrade_schema

from .engine import ragpg_settings


def upgrade_ragpg(apps: Any, schema_editor: Any) -> None:
    """``alembic upgrade head`` for ragpg, inside the migration's transaction."""
    wrapper = schema_editor.connection
    wrapper.ensure_connection()
    conn: psycopg.Connection[Any] = wrapper.connection
    if not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        # Django's atomic block has begun, but psycopg opens the transaction lazily, on the
        # first statement; open it now so that ragpg migrates in a savepoint of it.
        conn.execute("SELECT 1")
    upgrade_schema(conn, ragpg_settings().database.schema)
