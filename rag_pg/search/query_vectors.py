"""A search's question as vectors: embedded before any connection is lent, once per model."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rag_pg.embed import serving
from rag_pg.embed.base import EmbeddingProvider
from rag_pg.errors import EmbeddingError, StoreError
from rag_pg.search.plan import CollectionInfo

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


class QueryVectors:
    """The query's vector for each (model, dimension) a plan asks for.

    :meth:`expect` embeds it with the configured provider before the search reads its
    collection, and says what the search may expect of it: vectors of that model. A
    collection of another model (a chain holding both follows it through a `ragpg reembed`)
    gets the query embedded again by the part that serves its model. When the first call
    fails, the search still runs where no vector is needed (a collection without vectors is
    searched by keywords); anywhere else that failure is raised, not a second wait on the
    same service.
    """

    def __init__(self, provider: Callable[[], EmbeddingProvider], query: str):
        # Built on first use: a keyword search never needs the embedding client.
        self._provider_of = provider
        self.query = query
        self._vectors: dict[tuple[str | None, int | None], npt.NDArray[np.float32]] = {}
        self._failure: EmbeddingError | None = None

    @property
    def provider(self) -> EmbeddingProvider:
        return self._provider_of()

    def expect(self, *, required: bool) -> CollectionInfo:
        """Embed with the configured provider; the collection the search then expects. A
        failure is raised at once when the search cannot do without the vector (``required``:
        a vector search), else kept for :meth:`of`."""
        if self.provider.kind == "none":
            return CollectionInfo.expected(None, None)
        try:
            vector = self.provider.embed("query", [self.query])[0]
        except EmbeddingError as exc:
            if required:
                raise
            self._failure = exc
            return CollectionInfo.expected(None, None)
        model, dimension = self.provider.model, len(vector)
        self._vectors[model, dimension] = vector
        return CollectionInfo.expected(model, dimension)

    def of(self, collection: str, model: str, dimension: int | None) -> npt.NDArray[np.float32]:
        """The query as a vector of ``model``, comparable with the collection's."""
        key = (model, dimension)
        if key not in self._vectors:
            if self._failure is not None:
                raise self._failure
            provider = serving(self.provider, model, dimension)
            if provider is None:
                raise StoreError(
                    f"collection {collection!r} is indexed with {model!r}, the configured"
                    f" provider gives {self.provider.model!r}"
                )
            self._vectors[key] = provider.embed("query", [self.query])[0]
        return self._vectors[key]
