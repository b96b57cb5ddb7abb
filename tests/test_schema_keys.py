"""The schema stays shardable by collection and by document (docs/scaling.md §3): Citus requires
every primary key, unique constraint and foreign key of a distributed table to include its
distribution column (``collection``, or ``shard_key`` for one collection spread over every
worker), so no migration may add one to document, chunk or chunk_vector that does not."""

from __future__ import annotations

import psycopg
import pytest

from rag_pg.store.documents import shard_key

from .rows import value

TABLES = ("document", "chunk", "chunk_vector")


def constraints(conn: psycopg.Connection, table: str) -> list[tuple[str, str, list[str], list[str]]]:
    return conn.execute(
        """
        SELECT con.conname, con.contype,
               ARRAY(SELECT a.attname FROM unnest(con.conkey) k
                     JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k),
               ARRAY(SELECT a.attname FROM unnest(coalesce(con.confkey, '{}')) k
                     JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k)
        FROM pg_constraint con
        WHERE con.conrelid = %s::regclass AND con.contype IN ('p', 'u', 'f')
        ORDER BY con.conname
        """,
        (f"ragpg.{table}",),
    ).fetchall()


@pytest.mark.parametrize("table", TABLES)
@pytest.mark.parametrize("column", ["collection", "shard_key"])
def test_every_key_and_foreign_key_includes_both_distribution_columns(db_url, table, column):
    with psycopg.connect(db_url) as conn:
        found = constraints(conn, table)
        unique_indexes = conn.execute(
            """SELECT i.indexrelid::regclass::text,
                      ARRAY(SELECT a.attname FROM unnest(i.indkey) k
                            JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k)
               FROM pg_index i WHERE i.indrelid = %s::regclass AND i.indisunique""",
            (f"ragpg.{table}",),
        ).fetchall()
        has_column = value(conn,
            "SELECT count(*) FROM pg_attribute WHERE attrelid = %s::regclass"
            " AND attname = %s AND attnotnull", (f"ragpg.{table}", column))
    assert has_column == 1
    assert any(kind == "p" for _, kind, _, _ in found)
    bad = [(name, cols) for name, kind, cols, _ in found if column not in cols]
    bad += [(name, ref) for name, kind, _, ref in found if kind == "f" and column not in ref]
    bad += [(name, cols) for name, cols in unique_indexes if column not in cols]
    assert bad == []
    if table != "document":  # chunk and vector rows reach their parent within its shard
        assert [ref for _, kind, _, ref in found if kind == "f"] == [
            ["id", "collection", "shard_key"]]


def test_a_chunk_cannot_name_another_collection_than_its_document(db_url):
    with psycopg.connect(db_url) as conn:
        doc = value(conn,
            "INSERT INTO ragpg.document (collection, path, shard_key, title, content_hash, fingerprint)"
            " VALUES ('a', 'x.md', %s, 'X', 'h', 'f') RETURNING id", (shard_key("x.md"),))
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute(
                "INSERT INTO ragpg.chunk (document_id, collection, shard_key, position, section,"
                " anchor, content, token_count, content_hash, ts_config)"
                " VALUES (%s, 'b', %s, 0, 's', 'a', 'c', 1, 'h', 'simple')", (doc, shard_key("x.md")))


@pytest.mark.parametrize("path", ["x.md", "guides/été/ß ü.md", "a" * 300, "日本/語.md"])
def test_the_shard_key_is_the_paths_and_the_writers_agree_with_the_database(db_url, path):
    """The writer computes each document's shard key; the table's CHECK computes it again, so a
    document can have only its path's, and (collection, path, shard_key) is the path's key."""
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO ragpg.document (collection, path, shard_key, title, content_hash, fingerprint)"
            " VALUES ('a', %s, %s, 'X', 'h', 'f')", (path, shard_key(path)))
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(
                "INSERT INTO ragpg.document (collection, path, shard_key, title, content_hash,"
                " fingerprint) VALUES ('a', %s, %s, 'X', 'h', 'f')", (path, shard_key(path) ^ 1))
