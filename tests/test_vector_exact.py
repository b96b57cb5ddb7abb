"""The vector leg's exact branch (a filter or a collection small enough to compare every
vector) against a reference computed from the stored vectors: the nearest chunks by cosine
distance, and, under a per-document cap, each document's nearest chunk, even when one long
document holds every one of the nearest chunks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.store.db import prepare

QUERY = "marmotte hiver sommeil terrier"
# long.md: more chunks than a capped search fetches per leg (vec_fetch: 4 x the 40 candidates),
# each holding the query's words, so all nearer than any other document's; the others each
# hold some of them.
LONG = 200
TREE = {
    "long.md": "# Long\n\n" + "\n\n".join(
        f"La marmotte passe l'hiver en sommeil au fond du terrier, paragraphe {i} numéro{i}."
        for i in range(LONG)),
    "a.md": "# A\n\nLa marmotte sort du terrier au printemps.\n",
    "b.md": "# B\n\nUn long sommeil d'hiver.\n",
    "c.md": "# C\n\nLe renard chasse la marmotte.\n",
    "d.md": "# D\n\nLes bouquetins montent l'été.\n",
    "e.md": "# E\n\nUn terrier profond.\n",
}


@pytest.fixture
def rag(db_url: str, embed_server: Any, tmp_path: Path) -> Iterator[RagPG]:
    root = tmp_path / "tree"
    root.mkdir()
    for rel, text in TREE.items():
        (root / rel).write_text(text, encoding="utf-8")
    # The list as the vector leg ranks it: no per-section cap (long.md is one section).
    settings = Settings.load(environ={}, overrides={
        "embedding.url": embed_server.url, "chunk.size": 20, "chunk.overlap": 0,
        "retrieval.max_per_section": 0})
    with RagPG(db_url, settings) as r:
        r.init()
        r.ingest(root)
        yield r


def nearest(rag: RagPG, db_url: str) -> list[tuple[float, int, str]]:
    """(distance, chunk id, path) of every chunk, nearest first, from the stored vectors."""
    query = rag.provider.embed("query", [QUERY])[0].astype(np.float64)
    with psycopg.connect(db_url) as conn:
        prepare(conn)
        rows = conn.execute(
            "SELECT cv.chunk_id, d.path, cv.embedding::vector FROM ragpg.chunk_vector cv"
            " JOIN ragpg.chunk c ON c.id = cv.chunk_id JOIN ragpg.document d ON d.id = c.document_id"
            " WHERE d.collection = 'default'").fetchall()
    out = []
    for chunk_id, path, vector in rows:
        v = np.asarray(vector.to_numpy(), dtype=np.float64)
        out.append((1 - float(v @ query / (np.linalg.norm(v) * np.linalg.norm(query))), chunk_id, path))
    return sorted(out)


def test_the_fixture_puts_one_document_first_many_times(rag: RagPG, db_url: str):
    ranked = nearest(rag, db_url)
    assert {path for _, _, path in ranked[:LONG]} == {"long.md"}


@pytest.mark.parametrize("k", [1, 3, 8])
def test_uncapped_the_exact_branch_returns_the_nearest_chunks(rag: RagPG, db_url: str, k: int):
    expected = [chunk_id for _, chunk_id, _ in nearest(rag, db_url)[:k]]
    for prefix in (None, "long.md"):  # the whole (small) collection, and a filter
        hits = rag.search(QUERY, k, mode="vector", path_prefix=prefix)
        reference = expected if prefix is None else [
            chunk_id for _, chunk_id, path in nearest(rag, db_url) if path == prefix][:k]
        assert [h.chunk_id for h in hits] == reference, prefix


@pytest.mark.parametrize("k", [2, 4, 6])
def test_capped_each_document_keeps_its_nearest_chunk(rag: RagPG, db_url: str, k: int):
    """The first vec_fetch rows by distance are all long.md's: a branch that kept only those
    would return one document where k distinct ones exist."""
    best: dict[str, int] = {}
    for _, chunk_id, path in nearest(rag, db_url):
        best.setdefault(path, chunk_id)
    hits = rag.search(QUERY, k, mode="vector", max_per_document=1)
    assert [h.chunk_id for h in hits] == list(best.values())[:k]
