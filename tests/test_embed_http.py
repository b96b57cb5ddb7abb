"""The HTTP provider against the real fake server on loopback, plus MockTransport edge cases."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import httpx
import numpy as np
import pytest

import rag_pg.embed
from rag_pg import RagPG, Settings
from rag_pg.embed import HttpEmbeddingProvider, check_request
from rag_pg.errors import ConfigError, EmbeddingError
from rag_pg.testing.embedserver import FakeEmbeddingServer, fake_vector

PASSWORD = "s3cret-canary-pw"
API_KEY = "sk-canary-api-key-0042"

Factory = Callable[..., HttpEmbeddingProvider]


@pytest.fixture
def make() -> Iterator[Factory]:
    """Providers built in a test are closed after it (no leaked sockets)."""
    made: list[HttpEmbeddingProvider] = []

    def factory(url: str, **kwargs: object) -> HttpEmbeddingProvider:
        kwargs.setdefault("timeout", 5.0)
        provider = HttpEmbeddingProvider(url, **kwargs)  # type: ignore[arg-type]
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        provider.close()


def mock(
    handler: Callable[[httpx.Request], httpx.Response], **kwargs: object
) -> HttpEmbeddingProvider:
    return HttpEmbeddingProvider(
        "http://embed.test",
        transport=httpx.MockTransport(handler),
        **kwargs,  # type: ignore[arg-type]
    )


def raw_reply(body: bytes, status: int = 200) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(status, content=body)


def json_reply(body: object, status: int = 200) -> Callable[[httpx.Request], httpx.Response]:
    return raw_reply(json.dumps(body).encode(), status)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_public_names_are_sorted_and_exist() -> None:
    assert rag_pg.embed.__all__ == sorted(rag_pg.embed.__all__)
    assert all(hasattr(rag_pg.embed, name) for name in rag_pg.embed.__all__)


# -- happy path ---------------------------------------------------------------------------------


def test_vectors_come_back_validated_and_in_order(
    server: FakeEmbeddingServer, make: Factory
) -> None:
    texts = ["zeta", "alpha beta", "élève café", "", "nul\x00byte"]
    vectors = make(server.url).embed("passage", texts)
    assert vectors.dtype == np.float32 and vectors.flags.c_contiguous
    assert np.array_equal(vectors, np.stack([fake_vector(t, 16) for t in texts]))
    assert server.requests == [{"type": "passage", "count": 5}]


def test_batches_keep_the_order(server: FakeEmbeddingServer, make: Factory) -> None:
    texts = [f"text number {i}" for i in range(7)]
    vectors = make(server.url, batch_size=3).embed("query", texts)
    assert np.array_equal(vectors, np.stack([fake_vector(t, 16) for t in texts]))
    assert [r["count"] for r in server.requests] == [3, 3, 1]


def test_model_and_dimension_are_learned_once_from_health(
    server: FakeEmbeddingServer, make: Factory
) -> None:
    provider = make(server.url)
    assert (provider.model, provider.dimension, provider.model) == (
        "fake-bow-16",
        16,
        "fake-bow-16",
    )
    assert server.health_calls == 1 and server.calls == 0


def test_configured_model_and_dimension_need_no_request(
    server: FakeEmbeddingServer, make: Factory
) -> None:
    provider = make(server.url, model="fake-bow-16", dimension=16)
    assert (provider.kind, provider.model, provider.dimension) == ("http", "fake-bow-16", 16)
    assert server.health_calls == 0


def test_health(server: FakeEmbeddingServer, make: Factory) -> None:
    assert make(server.url).health() == {"status": "ok", "model": "fake-bow-16", "dim": 16}


def test_one_connection_is_reused(server: FakeEmbeddingServer, make: Factory) -> None:
    provider = make(server.url)
    for _ in range(5):
        provider.embed("query", ["a"])
    provider.health()
    assert server.connections == 1


def test_threads_share_one_provider(server: FakeEmbeddingServer, make: Factory) -> None:
    provider = make(server.url)
    failures: list[str] = []

    def work(n: int) -> None:
        for i in range(15):
            text = f"thread {n} call {i}"
            if not np.array_equal(provider.embed("query", [text])[0], fake_vector(text, 16)):
                failures.append(text)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == [] and server.calls == 120
    assert server.connections <= 8  # kept-alive connections, shared by the threads


def test_base_path_is_kept(make: Factory) -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json={"model": "m", "dim": 2, "vectors": [[1.0, 0.0]]})

    provider = HttpEmbeddingProvider(
        "https://gw.test/models/e5/?tenant=a", transport=httpx.MockTransport(handler)
    )
    provider.embed("query", ["a"])
    provider.close()
    assert seen == ["https://gw.test/models/e5/embed?tenant=a"]


# -- local validation: nothing is sent ----------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "texts"),
    [
        ("bogus", ["a"]),
        ("QUERY", ["a"]),
        ("query", []),
        ("query", "a plain string"),
        ("passage", ["ok", 3]),
        ("passage", ["ok", None]),
        ("passage", ["lone \ud800 surrogate"]),
    ],
)
def test_invalid_input_sends_no_request(
    server: FakeEmbeddingServer, make: Factory, kind: str, texts: object
) -> None:
    with pytest.raises(EmbeddingError) as caught:
        make(server.url).embed(kind, texts)  # type: ignore[arg-type]
    assert caught.value.kind == "invalid_input"
    assert (server.calls, server.connections) == (0, 0)


def test_check_request_accepts_tuples_and_empty_strings() -> None:
    check_request("query", ("", "a"))


# -- fault modes of the real server --------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        ("500", "unavailable"),
        ("503", "unavailable"),
        ("400", "invalid_input"),
        ("413", "invalid_input"),
        ("429", "unavailable"),
        ("502", "unavailable"),
        ("504", "unavailable"),
        ("422", "invalid_input"),
        ("wrong_count", "malformed"),
        ("wrong_dim", "malformed"),
        ("nan", "malformed"),
        ("zero", "malformed"),
        ("non_json", "malformed"),
        ("missing_vectors", "malformed"),
        ("truncated", "malformed"),
        ("huge", "malformed"),
        ("redirect", "unavailable"),
    ],
)
def test_each_fault_maps_to_its_kind(
    server: FakeEmbeddingServer, make: Factory, fault: str, kind: str
) -> None:
    server.fault = fault
    with pytest.raises(EmbeddingError) as caught:
        make(server.url).embed("passage", ["first text", "second text"])
    assert caught.value.kind == kind
    assert server.url in str(caught.value)


def test_422_message_carries_the_detail(server: FakeEmbeddingServer, make: Factory) -> None:
    server.fault = "422"
    server.fault_detail = "text 1 exceeds 512 tokens"
    with pytest.raises(EmbeddingError) as caught:
        make(server.url).embed("passage", ["a", "b"])
    assert "text 1 exceeds 512 tokens" in str(caught.value)
    assert caught.value.detail == "text 1 exceeds 512 tokens"


def test_poison_batch_is_invalid_input(server: FakeEmbeddingServer, make: Factory) -> None:
    server.poison = "BAD"
    provider = make(server.url)
    with pytest.raises(EmbeddingError) as caught:
        provider.embed("passage", ["fine", "BAD one"])
    assert (caught.value.kind, caught.value.detail) == ("invalid_input", "poison text")
    assert provider.embed("passage", ["fine"]).shape == (1, 16)


@pytest.mark.parametrize("status", [400, 413, 422])
def test_a_refused_text_fails_as_its_own_fault_and_the_others_pass(
    server: FakeEmbeddingServer, make: Factory, status: int
) -> None:
    # A service refusing one input (over the context, too large) is not down: "unavailable"
    # would abort a whole ingest over one document, where invalid input fails only it.
    server.poison, server.poison_status = "BAD", status
    provider = make(server.url)
    with pytest.raises(EmbeddingError) as caught:
        provider.embed("passage", ["BAD one"])
    assert caught.value.kind == "invalid_input"
    assert f"HTTP {status}" in str(caught.value) and caught.value.detail == "poison text"
    assert provider.embed("passage", ["fine", "also fine"]).shape == (2, 16)
    assert server.calls == 2  # refused once, never retried


@pytest.mark.parametrize("status", [400, 413])
def test_an_ingest_fails_only_the_document_the_service_refuses(
    db_url: str, corpus: Path, status: int
) -> None:
    target = corpus / "fr/cuisine/tarte-tatin.md"
    target.write_text(target.read_text() + "\nPOISON paragraph.\n")
    with FakeEmbeddingServer(dim=16) as fake:
        fake.poison, fake.poison_status = "POISON", status
        overrides = {"embedding.provider": "http", "embedding.url": fake.url,
                     "embedding.attempts": 1}
        with RagPG(db_url, Settings.load(environ={}, overrides=overrides)) as rag:
            report = rag.ingest(corpus)
    assert [(f.path, f.kind) for f in report.failures] == [
        ("fr/cuisine/tarte-tatin.md", "invalid_input")]
    assert report.documents_indexed > 0 and report.documents_failed == 1


def test_service_recovers_after_fail_next(server: FakeEmbeddingServer, make: Factory) -> None:
    server.fail_next = 1
    provider = make(server.url)
    with pytest.raises(EmbeddingError, match="HTTP 503"):
        provider.embed("query", ["a"])
    assert provider.embed("query", ["a"]).shape == (1, 16)


def test_timeout_is_unavailable_and_quick(make: Factory) -> None:
    with FakeEmbeddingServer(dim=8, delay=3.0) as slow:
        provider = make(slow.url, timeout=0.3)
        started = time.monotonic()
        with pytest.raises(EmbeddingError) as caught:
            provider.embed("query", ["a"])
        elapsed = time.monotonic() - started
    assert caught.value.kind == "unavailable" and "timed out" in str(caught.value)
    assert elapsed < 2.9  # gave up (0.3 s) well before the server would answer (3 s)


def test_slow_fault_is_unavailable(server: FakeEmbeddingServer, make: Factory) -> None:
    server.fault = "slow"
    with pytest.raises(EmbeddingError, match="timed out") as caught:
        make(server.url, timeout=0.2).embed("query", ["a"])
    assert caught.value.kind == "unavailable"


def test_slow_drip_hits_the_total_deadline(server: FakeEmbeddingServer, make: Factory) -> None:
    server.fault = "drip"  # each read is quick, the whole body takes a minute
    server.drip_interval = 0.5
    provider = make(server.url, timeout=0.5)
    started = time.monotonic()
    with pytest.raises(EmbeddingError) as caught:
        provider.embed("query", ["a"])
    assert caught.value.kind == "unavailable"
    assert time.monotonic() - started < 15.0  # the 0.5 s deadline, far from the body's minute


def test_connection_refused_is_unavailable(make: Factory) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    provider = make(url)
    for call in (lambda: provider.embed("query", ["a"]), provider.health):
        with pytest.raises(EmbeddingError) as caught:
            call()
        assert caught.value.kind == "unavailable" and url in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "gopher://127.0.0.1:70/",
        "ftp://127.0.0.1/",
        "127.0.0.1:8089",
        "",
        "http://",
        "not a url",
    ],
)
def test_only_http_and_https_urls_are_accepted(url: str) -> None:
    with pytest.raises(ConfigError):
        HttpEmbeddingProvider(url)


@pytest.mark.parametrize("setting", [{"dimension": 0}, {"timeout": 0}, {"batch_size": 0}])
def test_bad_numbers_are_config_errors(setting: dict[str, int]) -> None:
    with pytest.raises(ConfigError):
        HttpEmbeddingProvider("http://127.0.0.1:1", **setting)  # type: ignore[arg-type]


# -- secrets never leak --------------------------------------------------------------------------


def test_password_and_api_key_never_appear_in_errors(
    server: FakeEmbeddingServer, make: Factory
) -> None:
    port = server.url.rsplit(":", 1)[1]
    urls = [
        f"http://admin:{PASSWORD}@127.0.0.1:{port}",
        f"http://admin:{PASSWORD}@127.0.0.1:{port}/?key={API_KEY}",
        f"http://admin:{PASSWORD}@127.0.0.1:{closed_port()}",
    ]
    captured: list[str] = []
    for url in urls:
        provider = make(url, api_key=API_KEY, timeout=0.3)
        captured.append(repr(provider))
        for fault in ("500", "422", "nan", "redirect", "slow", "truncated", None):
            server.fault = fault
            server.fault_detail = f"echo {PASSWORD} {API_KEY}"  # a service that echoes secrets
            for call in (partial(provider.embed, "query", ["a"]), provider.health):
                try:
                    call()
                except EmbeddingError as exc:
                    captured += [str(exc), repr(exc), str(exc.detail), str(exc.__cause__)]
    text = "\n".join(captured)
    assert "embedding service at http://127.0.0.1:" in text
    assert PASSWORD not in text and API_KEY not in text and "admin" not in text


# -- model and dimension drift -----------------------------------------------------------------


def test_configured_model_must_match(server: FakeEmbeddingServer, make: Factory) -> None:
    with pytest.raises(
        EmbeddingError, match="returned model 'fake-bow-16', configured 'e5'"
    ) as caught:
        make(server.url, model="e5").embed("query", ["a"])
    assert caught.value.kind == "malformed"


def test_configured_dimension_must_match(server: FakeEmbeddingServer, make: Factory) -> None:
    with pytest.raises(EmbeddingError, match="dimension") as caught:
        make(server.url, dimension=32).embed("query", ["a"])
    assert caught.value.kind == "malformed"


def test_model_switch_mid_run_is_refused(server: FakeEmbeddingServer, make: Factory) -> None:
    provider = make(server.url)
    provider.embed("query", ["a"])
    server.model = "another-model"
    with pytest.raises(EmbeddingError, match="another-model") as caught:
        provider.embed("query", ["a"])
    assert caught.value.kind == "malformed"


def test_dimension_switch_mid_run_is_refused(server: FakeEmbeddingServer, make: Factory) -> None:
    provider = make(server.url)
    assert provider.dimension == 16
    server.dim = 24
    with pytest.raises(EmbeddingError) as caught:
        provider.embed("query", ["a"])
    assert caught.value.kind == "malformed"


# -- caps, a service that is down, a closed provider ----------------------------------------


def test_real_server_body_cap(server: FakeEmbeddingServer, make: Factory) -> None:
    with pytest.raises(EmbeddingError, match="cap") as caught:
        make(server.url, max_response_bytes=100).embed("query", ["a", "b", "c"])
    assert caught.value.kind == "malformed"


def test_dimension_property_raises_when_the_service_is_down(make: Factory) -> None:
    provider = make(f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(EmbeddingError) as caught:
        _ = provider.dimension
    assert caught.value.kind == "unavailable"


def test_closed_provider_is_unavailable(server: FakeEmbeddingServer) -> None:
    provider = HttpEmbeddingProvider(server.url)
    provider.embed("query", ["a"])
    provider.close()
    provider.close()
    with pytest.raises(EmbeddingError) as caught:
        provider.embed("query", ["a"])
    assert caught.value.kind == "unavailable"
