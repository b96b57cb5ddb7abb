"""The model's HNSW index is built with index.build_memory or more, never less than the session has."""

from __future__ import annotations

import psycopg
from pgvector.psycopg import register_vector

from rag_pg.config import IndexSettings
from rag_pg.store.documents import Store
from rag_pg.store.vector_index import vector_index_name

from .rows import value

MODEL = "m-build"


def build_with(db_url: str, session: str, build_memory: str) -> tuple[str, str]:
    """(maintenance_work_mem in force after the build, the index definition)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute(f"SET maintenance_work_mem = '{session}'")
        store = Store("ragpg", IndexSettings(build_memory=build_memory))
        with conn.transaction():  # the build's setting is local to it: look before it ends
            store.ensure_vector_index(conn, MODEL, 8)
            memory = value(conn, "SHOW maintenance_work_mem")
            definition = value(conn, "SELECT pg_get_indexdef(to_regclass(%s))", (f"ragpg.{vector_index_name(MODEL)}",))
            conn.execute(f"DROP INDEX ragpg.{vector_index_name(MODEL)}")
    assert memory is not None and definition is not None
    return memory, definition


def test_build_memory_raises_a_smaller_session_setting(db_url):
    memory, definition = build_with(db_url, "64MB", "1GB")
    assert memory == "1GB"
    assert "(embedding)::vector(8)" in definition and f"WHERE (model = '{MODEL}'::text)" in definition


def test_a_larger_session_setting_is_kept(db_url):
    memory, _ = build_with(db_url, "3GB", "1GB")
    assert memory == "3GB"  # lowering it would push a large graph to an on-disk build
