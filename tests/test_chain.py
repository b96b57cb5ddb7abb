"""The provider chain against real loopback servers: every retry, fallback and refusal path."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.config import EmbeddingSettings
from rag_pg.embed import ChainUnavailable, EmbeddingChain, make_provider, serving
from rag_pg.errors import EmbeddingError
from rag_pg.testing.embedserver import FakeEmbeddingServer, fake_vector

from .invariants import violations
from .rows import records

MODEL = "shared-16"


@pytest.fixture
def primary() -> Iterator[FakeEmbeddingServer]:
    with FakeEmbeddingServer(dim=16, model=MODEL) as srv:
        yield srv


@pytest.fixture
def fallback() -> Iterator[FakeEmbeddingServer]:
    with FakeEmbeddingServer(dim=16, model=MODEL) as srv:
        yield srv


@pytest.fixture
def other_model() -> Iterator[FakeEmbeddingServer]:
    with FakeEmbeddingServer(dim=16, model="other-16") as srv:
        yield srv


class Waits:
    """Records the chain's waits instead of sleeping; ``then`` runs at each wait."""

    def __init__(self, then: Callable[[], None] | None = None) -> None:
        self.delays: list[float] = []
        self.then = then

    def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        if self.then is not None:
            self.then()


@pytest.fixture
def build() -> Iterator[Callable[..., EmbeddingChain]]:
    made: list[EmbeddingChain] = []

    def factory(*entries: dict[str, Any], sleep: Callable[[float], None] | None = None,
                clock: Callable[[], float] = time.monotonic, **common: Any) -> EmbeddingChain:
        common.setdefault("model", MODEL)
        common.setdefault("timeout", 5.0)
        common.setdefault("backoff", 0.0)
        settings = EmbeddingSettings(
            **common, providers=tuple(EmbeddingSettings(**e) for e in entries)
        ) if len(entries) != 1 else EmbeddingSettings(**{**common, **entries[0]})
        built = make_provider(settings, environ={})
        assert isinstance(built, EmbeddingChain)
        chain = EmbeddingChain(built.links, deadline=settings.deadline,
                               sleep=sleep or Waits(), rng=random.Random(7), clock=clock)
        made.append(chain)
        return chain

    yield factory
    for chain in made:
        chain.close()


def http(server: FakeEmbeddingServer, **extra: Any) -> dict[str, Any]:
    return {"provider": "http", "url": server.url, **extra}


def expected(texts: list[str]) -> np.ndarray:
    return np.stack([fake_vector(t, 16) for t in texts])


# -- retries on one provider ---------------------------------------------------------------------


def test_429_with_retry_after_waits_what_the_server_asks(primary, build):
    primary.fault, primary.retry_after = "429", "0.25"
    waits = Waits(then=lambda: setattr(primary, "fault", None))
    chain = build(http(primary, dimension=16), sleep=waits)
    assert np.array_equal(chain.embed("passage", ["a b"]), expected(["a b"]))
    assert waits.delays == [0.25] and primary.calls == 2


def test_429_without_retry_after_backs_off_exponentially_with_jitter(primary, build):
    primary.fault = "429"
    waits = Waits()
    chain = build(http(primary, dimension=16), sleep=waits, attempts=4, backoff=0.1,
                  backoff_max=0.3)
    with pytest.raises(ChainUnavailable, match="HTTP 429") as caught:
        chain.embed("passage", ["x"])
    assert primary.calls == 4 and "4 attempts" in str(caught.value)
    steps = [0.1, 0.2, 0.3]  # doubled, then capped by backoff_max
    assert len(waits.delays) == 3
    assert all(step / 2 <= d <= step for d, step in zip(waits.delays, steps, strict=True))
    assert len(set(waits.delays)) == 3  # jittered, not a fixed schedule


@pytest.mark.parametrize("status", ["500", "502", "503", "504"])
def test_server_errors_are_retried_then_fall_back_to_the_same_model(
    primary, fallback, build, status
):
    primary.fault = status
    waits = Waits()
    chain = build(http(primary, dimension=16), http(fallback), sleep=waits, attempts=3,
                  backoff=0.01)
    assert np.array_equal(chain.embed("passage", ["a", "b"]), expected(["a", "b"]))
    assert (primary.calls, fallback.calls, len(waits.delays)) == (3, 1, 2)
    # The primary now cools down: the next batch goes straight to the fallback.
    chain.embed("passage", ["c"])
    assert (primary.calls, fallback.calls) == (3, 2)


def test_a_cooled_down_provider_is_tried_again(primary, fallback, build):
    primary.fail_next = 1
    ahead = [0.0]  # the chain's clock runs ahead of the real one by this much
    chain = build(http(primary, dimension=16), http(fallback), attempts=1, cooldown=0.3,
                  clock=lambda: time.monotonic() + ahead[0])
    chain.embed("passage", ["a"])
    assert (primary.calls, fallback.calls) == (1, 1)
    chain.embed("passage", ["b"])  # still cooling down
    assert (primary.calls, fallback.calls) == (1, 2)
    ahead[0] = 0.35
    chain.embed("passage", ["c"])
    assert (primary.calls, fallback.calls) == (2, 2)


def test_refused_connection_falls_back(fallback, build):
    with FakeEmbeddingServer(dim=16, model=MODEL) as gone:
        url = gone.url
    chain = build({"provider": "http", "url": url, "dimension": 16}, http(fallback))
    assert chain.embed("query", ["q"]).shape == (1, 16)
    assert fallback.calls == 1


def test_timeout_falls_back(primary, fallback, build):
    primary.fault = "slow"
    chain = build(http(primary, timeout=0.3, dimension=16), http(fallback), attempts=1)
    assert chain.embed("passage", ["x"]).shape == (1, 16)
    assert (primary.calls, fallback.calls) == (1, 1)


def test_slow_drip_gives_up_at_the_batch_deadline(primary, build):
    primary.fault = "drip"
    chain = build(http(primary, dimension=16), deadline=1.0, timeout=30.0, attempts=5)
    started = time.monotonic()
    with pytest.raises(ChainUnavailable, match="timed out"):
        chain.embed("passage", ["a long enough text to drip for several seconds"] * 4)
    # The deadline (1 s) bounds it, not the read timeout (30 s): far apart, so a loaded machine
    # cannot blur them.
    assert time.monotonic() - started < 15.0


def test_retry_after_beyond_the_deadline_moves_on_at_once(primary, fallback, build):
    primary.fault, primary.retry_after = "429", "3600"
    waits = Waits()
    chain = build(http(primary, dimension=16), http(fallback), sleep=waits, deadline=10.0)
    chain.embed("passage", ["x"])
    assert waits.delays == [] and (primary.calls, fallback.calls) == (1, 1)
    assert chain.links[0].cooling_until - time.monotonic() > 3000  # honoured as a cooldown


@pytest.mark.parametrize("status", ["401", "403", "404", "redirect"])
def test_non_retryable_unavailability_moves_on_after_one_call(primary, fallback, build, status):
    primary.fault = status
    waits = Waits()
    chain = build(http(primary, dimension=16), http(fallback), sleep=waits, attempts=5)
    chain.embed("passage", ["x"])
    assert (primary.calls, fallback.calls, waits.delays) == (1, 1, [])


# -- never retried, never a fallback -------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "kind"),
    [("422", "invalid_input"), ("wrong_count", "malformed"), ("wrong_dim", "malformed"),
     ("nan", "malformed"), ("non_json", "malformed"), ("zero", "malformed"),
     ("truncated", "malformed")],
)
def test_bad_input_and_malformed_answers_are_raised_at_once(primary, fallback, build, fault, kind):
    primary.fault = fault
    chain = build(http(primary, dimension=16), http(fallback), attempts=5)
    with pytest.raises(EmbeddingError) as caught:
        chain.embed("passage", ["one", "two"])
    assert caught.value.kind == kind
    assert (primary.calls, fallback.calls) == (1, 0)


# -- the same-model guard ------------------------------------------------------------------------


def test_a_fallback_configured_with_another_model_never_serves(primary, other_model, build):
    primary.fault = "503"
    chain = build(http(primary, dimension=16), http(other_model, model="other-16"), attempts=1)
    with pytest.raises(ChainUnavailable) as caught:
        chain.embed("passage", ["x"])
    message = str(caught.value)
    assert "serves 'other-16'" in message and f"not {MODEL!r}" in message
    assert (other_model.calls, other_model.health_calls) == (0, 0)


def test_a_fallback_that_reports_another_model_never_serves(primary, other_model, build):
    primary.fault = "503"
    # The second table sets model = None explicitly: learn it from the service's /health.
    chain = build(http(primary, model=MODEL, dimension=16),
                  {"provider": "http", "url": other_model.url, "model": None}, attempts=1,
                  model=None)
    with pytest.raises(ChainUnavailable, match="serves 'other-16'"):
        chain.embed("passage", ["x"])
    assert other_model.health_calls == 1 and other_model.calls == 0


def test_a_fallback_of_another_dimension_never_serves(primary, build):
    primary.fault = "503"
    with FakeEmbeddingServer(dim=32, model=MODEL) as wide:
        chain = build(http(primary, dimension=16), http(wide, dimension=None), attempts=1)
        with pytest.raises(ChainUnavailable, match=r"\(32 d\), not 'shared-16' \(16 d\)"):
            chain.embed("passage", ["x"])
        assert wide.calls == 0


def test_all_down_lists_every_provider_and_when_to_retry(primary, fallback, build):
    primary.fault, fallback.fault = "503", "500"
    chain = build(http(primary), http(fallback), attempts=1, cooldown=60, dimension=16)
    with pytest.raises(ChainUnavailable) as caught:
        chain.embed("passage", ["x"])
    message = str(caught.value)
    assert message.startswith("no embedding provider could serve: 1) provider 1 (http)")
    assert "HTTP 503" in message and "2) provider 2 (http)" in message and "HTTP 500" in message
    assert caught.value.retry_after is not None and 55 < caught.value.retry_after <= 60
    with pytest.raises(ChainUnavailable, match="cools down"):
        chain.embed("passage", ["x"])
    # A fallback on ragpg's contract is asked which model it serves (/health) before any
    # text: that request is the one that failed, once.
    assert (primary.calls, fallback.health_calls, fallback.calls) == (1, 1, 0)


# -- identity and views --------------------------------------------------------------------------


def test_identity_comes_from_the_configuration_without_a_request(primary, fallback, build):
    primary.fault = "503"
    chain = build(http(primary), http(fallback, dimension=16))
    assert (chain.model, chain.dimension) == (MODEL, 16)
    assert primary.health_calls + fallback.health_calls == 0


def test_learning_the_identity_is_retried_like_an_embed(primary, build):
    primary.fault = "503"
    waits = Waits(then=lambda: setattr(primary, "fault", None))
    chain = build(http(primary), sleep=waits)
    assert (chain.model, chain.dimension) == (MODEL, 16)
    assert primary.health_calls == 2 and len(waits.delays) == 1


def test_identity_is_learned_when_not_configured(primary, fallback, build):
    primary.fault = "503"  # its /health answers 503 too: the fallback teaches the dimension
    chain = build(http(primary), http(fallback))
    assert (chain.model, chain.dimension) == (MODEL, 16)
    assert fallback.health_calls == 1


def test_health_reports_the_first_provider_that_answers(primary, fallback, build):
    primary.fault = "503"
    chain = build(http(primary, dimension=16), http(fallback))
    assert chain.health() == {"status": "ok", "model": MODEL, "dim": 16, "served_by": 2}


def test_serving_restricts_a_chain_to_one_model(primary, other_model, build):
    chain = build(http(primary, dimension=16), http(other_model, model="other-16", dimension=16))
    view = serving(chain, "other-16", 16)
    assert isinstance(view, EmbeddingChain) and view.model == "other-16"
    view.embed("query", ["x"])
    assert (primary.calls, other_model.calls) == (0, 1)
    assert serving(chain, MODEL, 16) is chain
    assert serving(chain, "absent", None) is None
    assert serving(chain, None, None) is None


# -- through an ingest ---------------------------------------------------------------------------


def chain_settings(*entries: dict[str, Any], **embedding: Any) -> Settings:
    embedding.setdefault("attempts", 2)
    embedding.setdefault("backoff", 0.01)
    embedding.setdefault("batch_size", 8)
    flat = {f"embedding.{k}": v for k, v in embedding.items()}
    return Settings.load(environ={}, overrides={**flat, "embedding.providers": list(entries)})


def vector_models(url: str) -> list[tuple[str, int]]:
    with psycopg.connect(url) as conn:
        return [(r["model"], int(r["vectors"])) for r in records(conn,
            "SELECT model, count(*) AS vectors FROM ragpg.chunk_vector GROUP BY model ORDER BY model")]


def test_ingest_completes_on_a_fallback_of_the_same_model(db_url, corpus, primary, fallback):
    primary.fault = "503"
    settings = chain_settings(http(primary, model=MODEL, dimension=16), http(fallback))
    with RagPG(db_url, settings) as rag:
        report = rag.ingest(corpus)
        hits = rag.search("sauvegarde", k=1, mode="vector")
    assert report.documents_failed == 0 and report.documents_indexed == 9
    assert vector_models(db_url) == [(MODEL, report.chunks_upserted)]
    assert fallback.texts_embedded >= report.chunks_upserted
    # Two attempts per batch in flight (4), then the primary cools down for the whole run.
    assert 2 <= primary.calls <= 8
    assert len(hits) == 1 and violations(db_url) == []


def test_ingest_refuses_a_fallback_of_another_model(db_url, corpus, primary, other_model):
    primary.fault = "503"
    settings = chain_settings(http(primary, model=MODEL, dimension=16), http(other_model))
    with RagPG(db_url, settings) as rag, pytest.raises(EmbeddingError) as caught:
        rag.ingest(corpus)
    assert caught.value.kind == "unavailable"
    assert "serves 'other-16'" in str(caught.value) and "not used" in str(caught.value)
    assert other_model.calls == 0 and vector_models(db_url) == []
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM ragpg.document").fetchone() == (0,)


def test_a_refused_document_never_falls_back(db_url, corpus, primary, fallback):
    target = corpus / "fr/cuisine/tarte-tatin.md"
    target.write_text(target.read_text() + "\nPOISON paragraph.\n")
    primary.poison = "POISON"
    settings = chain_settings(http(primary, model=MODEL, dimension=16), http(fallback))
    with RagPG(db_url, settings) as rag:
        report = rag.ingest(corpus)
    assert [(f.path, f.kind) for f in report.failures] == [
        ("fr/cuisine/tarte-tatin.md", "invalid_input")]
    assert report.documents_indexed == 8 and fallback.calls == 0


def test_a_pinned_model_skips_a_fallback_serving_another_one_with_the_reason(primary, other_model, build):
    """The fallback inherits embedding.model but its service serves another: skipped (its
    /health says so), never sent a text, never failing the documents as a malformed answer."""
    primary.fault = "503"
    chain = build(http(primary), http(other_model), attempts=1, dimension=16)
    with pytest.raises(ChainUnavailable) as caught:
        chain.embed("passage", ["x"])
    assert "provider 2 (http) serves 'other-16' (16 d), not 'shared-16' (16 d)" in str(caught.value)
    assert caught.value.kind == "unavailable" and other_model.calls == 0


def test_unpinned_with_the_first_provider_down_no_fallback_names_the_model(primary, other_model, build):
    """No embedding.model: the chain's model is the first provider's. While it is down the
    chain is unavailable (retry later), not "configured with the fallback's model" (which an
    ingest would refuse as a model change)."""
    primary.fault = "503"
    chain = build(http(primary), http(other_model), attempts=1, model=None, cooldown=0)
    with pytest.raises(ChainUnavailable, match="no fallback can stand in") as caught:
        chain.identity()
    assert caught.value.kind == "unavailable" and other_model.health_calls == 0
    primary.fault = None
    assert chain.identity() == (MODEL, 16)
