"""Batches cut by count and tokens, several in flight, errors ranked; and the ingest's progress."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rag_pg import RagPG, Settings
from rag_pg.embed import embed_all, plan_batches
from rag_pg.embed.base import EmbedType
from rag_pg.errors import EmbeddingError
from rag_pg.source.tokens import estimate_tokens
from rag_pg.testing.embedserver import fake_vector

words = st.lists(st.sampled_from(["a", "bb", "ccc dd", "e f g h", "x " * 40]), max_size=60)


@given(texts=words, max_count=st.integers(1, 9), max_tokens=st.integers(1, 120))
def test_batches_cover_every_text_in_order_within_both_limits(texts, max_count, max_tokens):
    ranges = plan_batches(texts, max_count=max_count, max_tokens=max_tokens)
    assert [i for start, end in ranges for i in range(start, end)] == list(range(len(texts)))
    for start, end in ranges:
        assert 1 <= end - start <= max_count
        cost = sum(max(1, estimate_tokens(t)) for t in texts[start:end])
        assert cost <= max_tokens or end - start == 1  # an oversized text goes alone


def test_token_budget_cuts_before_the_count_does():
    texts = ["one two three four"] * 6  # 6 tokens each (ceil(4 x 1.33))
    assert plan_batches(texts, max_count=32, max_tokens=12) == [(0, 2), (2, 4), (4, 6)]
    assert plan_batches(texts, max_count=4, max_tokens=1000) == [(0, 4), (4, 6)]
    with pytest.raises(ValueError):
        plan_batches(texts, max_count=0, max_tokens=10)


class Recorder:
    """A provider that records how many calls overlap, and fails on chosen texts."""

    kind = "fake"
    model = "fake-8"
    dimension = 8

    def __init__(self, *, hold: float = 0.0, fail: dict[str, EmbeddingError] | None = None):
        self.hold = hold
        self.fail = fail or {}
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.calls: list[list[str]] = []

    def embed(self, type: EmbedType, texts: Sequence[str]) -> np.ndarray:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.calls.append(list(texts))
        try:
            time.sleep(self.hold)  # lets batches overlap; no assertion is made on time
            for text in texts:
                if text in self.fail:
                    raise self.fail[text]
            return np.stack([fake_vector(t, 8) for t in texts])
        finally:
            with self.lock:
                self.active -= 1

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "model": self.model, "dim": self.dimension}

    def close(self) -> None:
        pass


@pytest.mark.parametrize("concurrency", [1, 4])
def test_vectors_keep_text_order_whatever_the_concurrency(concurrency):
    texts = [f"text number {i}" for i in range(37)]
    provider = Recorder(hold=0.01)
    seen: list[int] = []
    vectors = embed_all(provider, "passage", texts, batch_size=5, batch_tokens=1000,
                        concurrency=concurrency, on_batch=seen.append)
    assert np.array_equal(vectors, np.stack([fake_vector(t, 8) for t in texts]))
    assert sorted(seen) == [2] + [5] * 7 and len(provider.calls) == 8
    assert (provider.peak > 1) is (concurrency > 1)
    assert provider.peak <= concurrency


def test_unavailable_outranks_other_failures_and_stops_new_batches():
    texts = [f"t{i}" for i in range(40)]
    provider = Recorder(hold=0.05, fail={
        "t1": EmbeddingError.unavailable("down at t1"),
        "t6": EmbeddingError.invalid_input("refused t6"),
    })
    with pytest.raises(EmbeddingError, match="down at t1"):
        embed_all(provider, "passage", texts, batch_size=4, batch_tokens=1000, concurrency=2)
    assert len(provider.calls) < 10  # batches not yet started were never sent


def test_the_first_refusal_in_text_order_is_raised():
    provider = Recorder(fail={"t9": EmbeddingError.malformed("bad t9"),
                              "t2": EmbeddingError.invalid_input("refused t2")})
    with pytest.raises(EmbeddingError, match="refused t2"):
        embed_all(provider, "passage", [f"t{i}" for i in range(12)], batch_size=2,
                  batch_tokens=1000, concurrency=1)


def test_ingest_reports_embedded_of_total_and_keeps_requests_in_flight(
    db_url, embed_server, corpus
):
    events: list[dict[str, Any]] = []
    settings = Settings.load(environ={}, overrides={
        "embedding.url": embed_server.url, "embedding.batch_size": 4,
        "embedding.concurrency": 4})
    embed_server.delay = 0.05
    with RagPG(db_url, settings) as rag:
        report = rag.ingest(corpus, progress=lambda event, data: events.append(
            {"event": event, **{k: v for k, v in data.items() if k != "report"}}))
    embedded = [e for e in events if e["event"] == "embedded"]
    assert sum(e["count"] for e in embedded) == report.chunks_upserted
    assert embedded[-1]["embedded"] == embedded[-1]["total"] == report.chunks_upserted
    assert all(e["embedded"] <= e["total"] for e in embedded)
    assert len(embedded) == report.embedding_calls == embed_server.calls
    assert all(r["count"] <= 4 for r in embed_server.requests)
    assert embed_server.connections > 1  # requests overlapped: one connection each
