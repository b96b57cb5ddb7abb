"""The schema stays shardable by collection (docs/scaling.md §3): Citus requires every primary
key, unique constraint and foreign key of a distributed table to include its distribution
column, so no migration may add one to document, chunk or chunk_vector that does not."""

from __future__ import annotations

import psycopg
import pytest

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
def test_every_key_and_foreign_key_includes_the_collection(db_url, table):
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
            " AND attname = 'collection' AND attnotnull", (f"ragpg.{table}",))
    assert has_column == 1
    assert any(kind == "p" for _, kind, _, _ in found)
    bad = [(name, cols) for name, kind, cols, _ in found if "collection" not in cols]
    bad += [(name, ref) for name, kind, _, ref in found if kind == "f" and "collection" not in ref]
    bad += [(name, cols) for name, cols in unique_indexes if "collection" not in cols]
    assert bad == []
    if table != "document":  # chunk and vector rows reach their parent within the collection
        assert [ref for _, kind, _, ref in found if kind == "f"] == [
            ["id", "collection"]]


def test_a_chunk_cannot_name_another_collection_than_its_document(db_url):
    with psycopg.connect(db_url) as conn:
        doc = value(conn,
            "INSERT INTO ragpg.document (collection, path, title, content_hash, fingerprint)"
            " VALUES ('a', 'x.md', 'X', 'h', 'f') RETURNING id")
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute(
                "INSERT INTO ragpg.chunk (document_id, collection, position, section, anchor,"
                " content, token_count, content_hash, ts_config)"
                " VALUES (%s, 'b', 0, 's', 'a', 'c', 1, 'h', 'simple')", (doc,))
