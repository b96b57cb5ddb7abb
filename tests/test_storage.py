"""How chunk rows are stored (migration 0006): each chunk's tsvector stays in its row, so the
keyword leg, which unnests it for every chunk holding a query term, never fetches it back
from the TOAST table; the text is what leaves a wide row."""

from __future__ import annotations

import random
from pathlib import Path

import psycopg
import pytest

from rag_pg import RagPG, Settings


def long_paragraphs(seed: int, documents: int = 6) -> dict[str, str]:
    """Documents of one ~1.2 kB paragraph of distinct words: a chunk row well over 2 kB once
    its tsvector is stored beside the text, and nothing in it that compresses."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return {
        f"doc{n}.md": f"# Document {n}\n\n"
        + " ".join("".join(rng.choice(letters) for _ in range(rng.randint(5, 9))) for _ in range(180))
        + "\n"
        for n in range(documents)
    }


def out_of_row(conn: psycopg.Connection) -> tuple[int, int]:
    """(chunks whose tsvector was moved to the TOAST table, chunks whose text was)."""
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE pg_column_toast_chunk_id(tsv) IS NOT NULL),"
        "       count(*) FILTER (WHERE pg_column_toast_chunk_id(content) IS NOT NULL)"
        " FROM ragpg.chunk"
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_a_chunks_tsvector_stays_in_its_row(db_url: str, tmp_path: Path) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        if conn.info.server_version < 170000:
            pytest.skip("pg_column_toast_chunk_id needs PostgreSQL 17")
        storage = conn.execute(
            "SELECT attstorage FROM pg_attribute"
            " WHERE attrelid = 'ragpg.chunk'::regclass AND attname = 'tsv'"
        ).fetchone()
        assert storage == ("m",)  # MAIN
    for name, text in long_paragraphs(1).items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    settings = Settings.load(environ={}, overrides={"embedding.provider": "none"})
    with RagPG(db_url, settings) as rag:
        report = rag.ingest(tmp_path)
        assert report.documents_indexed == 6
        with psycopg.connect(db_url, autocommit=True) as conn:
            tsv_out, text_out = out_of_row(conn)
            assert tsv_out == 0
            assert text_out > 0  # the rows were wide: the text is what left them
            # The same rows with the default storage: the tsvector, the widest value, leaves.
            conn.execute("ALTER TABLE ragpg.chunk ALTER COLUMN tsv SET STORAGE EXTENDED")
        rag.ingest(tmp_path, full=True)
        with psycopg.connect(db_url, autocommit=True) as conn:
            assert out_of_row(conn)[0] > 0
        assert [h.path for h in rag.search(a_word_of_doc0(tmp_path), 1, mode="keyword")] == ["doc0.md"]


def a_word_of_doc0(root: Path) -> str:
    """A word of doc0 (every word is unique to its document with this seed's lengths)."""
    return (root / "doc0.md").read_text(encoding="utf-8").split("\n")[2].split()[7]
