"""The "none" provider: no vectors at all, so ragpg runs keyword-only (BM25) search."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rag_pg.embed.base import EmbedType
from rag_pg.errors import EmbeddingError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


class NoneEmbeddingProvider:
    """Stands in when no model is configured or loadable; callers check ``kind`` first."""

    kind = "none"

    @property
    def model(self) -> None:
        return None

    @property
    def dimension(self) -> None:
        return None

    def embed(self, type: EmbedType, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Always refuses: reaching it is a caller bug, never a reason to retry."""
        raise EmbeddingError.invalid_input("keyword-only index: no embedding provider")

    def health(self) -> dict[str, Any]:
        """Always healthy: there is nothing that could be down."""
        return {"status": "ok", "model": None, "dim": None}

    def close(self) -> None:
        """Nothing to release."""

    def __repr__(self) -> str:
        return "NoneEmbeddingProvider()"
