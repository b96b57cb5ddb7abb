"""A bound on the embedding calls a process makes at once, for a service answering many
requests: at most ``slots`` calls run, ``queue`` more wait (each in its own worker thread,
holding no database connection: a search embeds its query before it borrows one), the rest
are refused at once with :class:`~rag_pg.errors.EmbeddingBusy`.

The bound is on the call only, not on the search around it: a healthy service answers in
milliseconds and its slots turn over as fast, while a stalled one holds ``slots`` threads and
``queue`` waiting ones, never every worker thread of the server.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rag_pg.embed.base import EmbeddingProvider, EmbedType
from rag_pg.errors import EmbeddingBusy

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


class CallGate:
    """At most ``slots`` calls at once; ``queue`` more wait up to ``patience`` seconds."""

    def __init__(self, slots: int, queue: int, patience: float):
        if slots < 1 or queue < 0 or patience <= 0:
            raise ValueError("a gate needs a slot, a queue of zero or more and some patience")
        self.slots, self.queue, self.patience = slots, queue, patience
        self._free = threading.Condition()
        self._running = 0
        self._waiting = 0

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return self._waiting

    @contextmanager
    def slot(self) -> Iterator[None]:
        with self._free:
            if self._running >= self.slots:
                if self._waiting >= self.queue:
                    raise self._busy()
                self._waiting += 1
                try:
                    if not self._free.wait_for(lambda: self._running < self.slots,
                                               timeout=self.patience):
                        raise self._busy()
                finally:
                    self._waiting -= 1
            self._running += 1
        try:
            yield
        finally:
            with self._free:
                self._running -= 1
                self._free.notify()

    def _busy(self) -> EmbeddingBusy:
        return EmbeddingBusy(
            f"{self._running} calls to the embedding service are running and {self._waiting} more"
            f" wait ({self.slots} at once); retry later, or search with mode keyword")


class GatedProvider:
    """``inner`` whose :meth:`embed` calls pass ``gate``; everything else is the inner's."""

    def __init__(self, inner: EmbeddingProvider, gate: CallGate):
        self.inner = inner
        self.gate = gate
        self.kind = inner.kind

    @property
    def model(self) -> str | None:
        return self.inner.model

    @property
    def dimension(self) -> int | None:
        return self.inner.dimension

    def embed(self, type: EmbedType, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        with self.gate.slot():
            return self.inner.embed(type, texts)

    def health(self) -> dict[str, Any]:
        return self.inner.health()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # What a provider offers beyond the protocol (the local model's token counts).
        return getattr(self.inner, name)
