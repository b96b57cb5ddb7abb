"""Alembic environment for ragpg: runs on a connection handed over, version table in our schema."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import Connection

from rag_pg.migrations import ddl

config = context.config
schema: str = config.attributes.get("schema") or config.get_main_option("ragpg_schema") or "ragpg"


def _run(connection: Connection) -> None:
    ddl.prepare_schema(connection, schema)
    context.configure(
        connection=connection,
        version_table="alembic_version",
        version_table_schema=schema,
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations(schema=schema)


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if url is None:
        raise RuntimeError("ragpg's migrations run on a connection handed over by rag_pg.store.migrate")
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.begin() as conn:
        _run(conn)


if context.is_offline_mode():
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        literal_binds=True,
        version_table_schema=schema,
    )
    with context.begin_transaction():
        context.run_migrations(schema=schema)
else:
    run_migrations_online()
