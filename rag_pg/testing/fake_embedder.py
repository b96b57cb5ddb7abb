"""An in-process embedding provider for your own tests: no server, no model, no network.

Its vectors are a hashed bag of words (``fakevector``): texts that share words are close, the
same text always gets the same vector in every process, so a test can reason about which
passage a question finds::

    from rag_pg import RagPG
    from rag_pg.testing import FakeEmbedder

    with RagPG(database_url, provider=FakeEmbedder()) as rag:
        rag.init()
        rag.ingest("docs/")
        assert rag.search("restore a backup")[0].path == "ops/backup.md"
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from rag_pg.embed.base import EmbedType, check_request
from rag_pg.testing.fakevector import fake_vector


class FakeEmbedder:
    """An :class:`~rag_pg.embed.base.EmbeddingProvider` computing fake vectors in process;
    ``calls`` and ``texts`` count what it was asked (a test of re-embedding can read them)."""

    kind = "fake"

    def __init__(self, *, model: str = "fake-embedder", dimension: int = 64):
        if dimension <= 0:
            raise ValueError("dimension must be positive")
        self._model, self._dimension = model, dimension
        self.calls = 0
        self.texts = 0

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, type: EmbedType, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        check_request(type, texts)
        self.calls += 1
        self.texts += len(texts)
        return np.stack([fake_vector(text, self._dimension) for text in texts])

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "model": self._model, "dim": self._dimension}

    def close(self) -> None:
        """Nothing to release."""
