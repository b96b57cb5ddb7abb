"""The embedding gate: at most ``slots`` calls at once, ``queue`` more wait, the rest are
refused at once; a freed slot goes to a waiter; the provider behind it is otherwise itself."""

from __future__ import annotations

import threading

import pytest

from rag_pg.embed.chain import serving
from rag_pg.embed.gated import CallGate, GatedProvider
from rag_pg.errors import EmbeddingBusy
from rag_pg.testing import FakeEmbedder

from .waiting import eventually


class HeldEmbedder(FakeEmbedder):
    """Each call waits for ``go``: the test decides when the service answers."""

    def __init__(self) -> None:
        super().__init__(dimension=8)
        self.go = threading.Event()
        self.inside = 0

    def embed(self, type, texts):  # type: ignore[no-untyped-def]
        self.inside += 1
        self.go.wait(60)
        return super().embed(type, texts)


def test_slots_then_a_queue_then_busy_at_once_and_every_waiter_served() -> None:
    inner = HeldEmbedder()
    provider = GatedProvider(inner, CallGate(slots=2, queue=3, patience=60))
    results: list[object] = []

    def call() -> None:
        try:
            results.append(provider.embed("query", ["q"]).shape)
        except EmbeddingBusy as exc:
            results.append(exc)

    threads = [threading.Thread(target=call) for _ in range(5)]
    for t in threads:
        t.start()
    eventually(lambda: inner.inside == 2 and provider.gate.waiting == 3, "2 calls in, 3 waiting")
    with pytest.raises(EmbeddingBusy, match="2 at once"):
        provider.embed("query", ["one too many"])
    inner.go.set()
    for t in threads:
        t.join()
    assert results == [(1, 8)] * 5 and inner.inside == 5
    assert provider.gate.running == 0 and provider.gate.waiting == 0


def test_a_waiter_gives_up_after_its_patience() -> None:
    inner = HeldEmbedder()
    gate = CallGate(slots=1, queue=1, patience=0.01)
    provider = GatedProvider(inner, gate)
    first = threading.Thread(target=lambda: provider.embed("query", ["held"]))
    first.start()
    eventually(lambda: inner.inside == 1, "the first call running")
    with pytest.raises(EmbeddingBusy):
        provider.embed("query", ["waits too long"])
    inner.go.set()
    first.join()


def test_the_gated_provider_is_the_inner_one_otherwise() -> None:
    inner = FakeEmbedder(model="m", dimension=4)
    provider = GatedProvider(inner, CallGate(1, 0, 1.0))
    assert (provider.kind, provider.model, provider.dimension) == ("fake", "m", 4)
    assert provider.health()["status"] == "ok" and provider.calls == 0  # the inner's counters
    again = serving(provider, "m", 4)
    assert isinstance(again, GatedProvider) and again.gate is provider.gate
    assert serving(provider, "other", 4) is None
