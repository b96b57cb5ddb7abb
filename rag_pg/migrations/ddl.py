"""How ragpg's migrations run their DDL: names enter the statement only as psycopg.sql parts.

A migration writes its DDL as a template with ``{s}`` for the schema (and other named
placeholders); :func:`run` composes it with :class:`psycopg.sql.Identifier` and executes it on
the psycopg connection under Alembic's, in the migration's transaction.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
from alembic import op
from psycopg import sql
from sqlalchemy.engine import Connection as SAConnection

# pg_advisory_xact_lock key held while migrations run: concurrent first runs (three `ragpg
# ingest` on a fresh database) wait for each other instead of racing on CREATE SCHEMA or
# CREATE EXTENSION. One key per database: every schema shares the extensions.
MIGRATION_LOCK = 0x7267_7067_6D69_6772  # "rgpgmigr"


def driver(bind: SAConnection | None = None) -> psycopg.Connection[Any]:
    """The psycopg connection under Alembic's (the one ``rag_pg.store.migrate`` handed over)."""
    connection = (bind if bind is not None else op.get_bind()).connection.driver_connection
    assert connection is not None
    return connection  # type: ignore[no-any-return]


def revision_module(filename: str) -> ModuleType:
    """An earlier revision's module, for a migration that replaces what it created (the
    versions folder is not an importable package: alembic loads each file by path)."""
    path = Path(__file__).with_name("versions") / filename
    spec = importlib.util.spec_from_file_location(f"ragpg_migration_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compose(template: str, schema: str, **parts: sql.Composable) -> sql.Composed:
    """``template`` with ``{s}`` the schema's identifier and ``parts`` in their places."""
    return sql.SQL(template).format(s=sql.Identifier(schema), **parts)


def run(template: str, schema: str, **parts: sql.Composable) -> None:
    """Execute the composed template (several statements are fine: no parameters are sent)."""
    driver().execute(compose(template, schema, **parts))


def qualified(schema: str, name: str) -> str:
    """``"schema".name`` as SQL text, for a value that names an object (a ``regconfig``)."""
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(name)).as_string(driver())


def has_term_stat_triggers(schema: str) -> bool:
    """Whether the statement triggers that keep the term statistics are on ``chunk`` (a
    schema distributed over Citus has none: the writer keeps them there)."""
    found = driver().execute(
        "SELECT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = %s::regclass"
        " AND tgname = 'term_stat_insert')", (qualified(schema, "chunk"),)).fetchone()
    return bool(found and found[0])


def extension_available(name: str) -> bool:
    """Whether the server can create the extension ``name`` (installed already, or its files
    are there)."""
    found = driver().execute("SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = %s)",
                             (name,)).fetchone()
    return bool(found and found[0])


def prepare_schema(bind: SAConnection, schema: str) -> None:
    """Wait for any other migration of this database, then make sure the schema exists."""
    conn = driver(bind)
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
