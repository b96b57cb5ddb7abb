"""rag_pg.testing.FakeEmbedder: a user's test indexes and searches with no embedding server."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rag_pg import RagPG, Settings
from rag_pg.errors import EmbeddingError
from rag_pg.testing import FakeEmbedder


def test_an_index_built_and_searched_in_process(db_url: str, tmp_path: Path) -> None:
    (tmp_path / "backup.md").write_text("# Sauvegardes\n\nRestaurer une sauvegarde avec pg_restore.\n")
    (tmp_path / "pool.md").write_text("# Pool\n\nLe pool garde dix connexions ouvertes.\n")
    fake = FakeEmbedder(dimension=32)
    with RagPG(db_url, Settings.load(environ={}), provider=fake) as rag:
        rag.init()
        report = rag.ingest(tmp_path)
        hits = rag.search("restaurer une sauvegarde", k=2, mode="vector")
    assert report.documents_indexed == 2 and fake.calls >= 2
    assert hits[0].path == "backup.md"
    assert hits[0].leg_scores["vector"] > hits[1].leg_scores["vector"]


def test_its_vectors_are_unit_length_and_stable() -> None:
    fake = FakeEmbedder(dimension=16)
    first = fake.embed("passage", ["un texte", "un texte", "autre chose"])
    assert first.shape == (3, 16) and first.dtype == np.float32
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0)
    assert np.array_equal(first[0], first[1]) and not np.array_equal(first[0], first[2])
    assert fake.health() == {"status": "ok", "model": "fake-embedder", "dim": 16}
    with pytest.raises(EmbeddingError):
        fake.embed("passage", [])
