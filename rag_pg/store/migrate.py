"""Runs ragpg's Alembic migrations on a connection, with the version table in our schema."""

from __future__ import annotations

from typing import Any

import psycopg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from psycopg import sql
from psycopg.rows import dict_row
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import Connection as SAConnection

from rag_pg.errors import ExtensionUnavailable
from rag_pg.store.queries import statement


def alembic_config(schema: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", "rag_pg:migrations")
    cfg.set_main_option("ragpg_schema", schema)
    cfg.attributes["schema"] = schema
    return cfg


def head_revision(schema: str = "ragpg") -> str:
    head = ScriptDirectory.from_config(alembic_config(schema)).get_current_head()
    assert head is not None
    return head


def upgrade(conn: psycopg.Connection, schema: str = "ragpg") -> None:
    """``alembic upgrade head`` on the caller's psycopg connection.

    When the caller has a transaction open, the migration runs in a savepoint of it and
    nothing is committed; otherwise it runs in its own transaction and commits.
    """
    was_autocommit = conn.autocommit
    in_transaction = conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
    dbapi: object = _CallerTransaction(conn) if in_transaction else conn
    engine = create_engine(
        "postgresql+psycopg://",
        creator=lambda: dbapi,
        poolclass=pool.StaticPool,
        pool_reset_on_return=None,
        use_native_hstore=False,
    )
    try:
        if was_autocommit and not in_transaction:
            conn.autocommit = False
        with engine.connect() as sa_conn:
            if in_transaction:
                with sa_conn.begin_nested():
                    _upgrade_on(sa_conn, schema)
            else:
                with sa_conn.begin():
                    _upgrade_on(sa_conn, schema)
    except psycopg.errors.FeatureNotSupported as exc:
        raise ExtensionUnavailable(f"cannot create a required extension: {exc}") from None
    except psycopg.errors.UndefinedFile as exc:
        raise ExtensionUnavailable(
            f"pgvector or unaccent is not installed on this server: {str(exc).strip()}"
        ) from None
    except psycopg.errors.InsufficientPrivilege as exc:
        raise ExtensionUnavailable(f"not allowed to create the schema or extensions: {exc}") from None
    finally:
        if was_autocommit and not in_transaction:
            conn.autocommit = True
        engine.dispose(close=False)


class _CallerTransaction:
    """The caller's connection with commit/rollback disabled: SQLAlchemy must not end a
    transaction it did not begin (it only issues SAVEPOINTs inside it)."""

    def __init__(self, conn: psycopg.Connection):
        self._conn = conn

    def commit(self) -> None:
        pass

    def rollback(self) -> None:
        pass

    def __getattr__(self, name: str) -> object:
        return getattr(self._conn, name)


def _upgrade_on(sa_conn: SAConnection, schema: str) -> None:
    cfg = alembic_config(schema)
    cfg.attributes["connection"] = sa_conn
    command.upgrade(cfg, "head")


def current_revision(conn: psycopg.Connection[Any], schema: str = "ragpg") -> str | None:
    """The schema's Alembic revision, or None where ragpg was never installed."""
    table = sql.Identifier(schema, "alembic_version")
    with conn.cursor(row_factory=dict_row) as cur:
        found = cur.execute(statement("migration_table_present"),
                            {"table": table.as_string(conn)}).fetchone()
        if not found or not found["present"]:
            return None
        row = cur.execute(statement("migration_revision").format(table=table)).fetchone()
    return str(row["version_num"]) if row else None


__all__ = ["MigrationContext", "alembic_config", "current_revision", "head_revision", "upgrade"]
