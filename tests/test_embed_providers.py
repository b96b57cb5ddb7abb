"""The openai and ollama providers against the fake server on loopback (same fault plan as http)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator

import httpx
import numpy as np
import pytest

from rag_pg.config import EmbeddingSettings
from rag_pg.embed import (
    EmbeddingChain,
    OllamaEmbeddingProvider,
    OpenAIEmbeddingProvider,
    ProviderUnavailable,
    make_provider,
)
from rag_pg.embed.transport import parse_retry_after
from rag_pg.errors import ConfigError, EmbeddingError
from rag_pg.testing.embedserver import FakeEmbeddingServer, fake_vector

API_KEY = "sk-canary-openai-key-7731"
Remote = OpenAIEmbeddingProvider | OllamaEmbeddingProvider


@pytest.fixture
def server() -> Iterator[FakeEmbeddingServer]:
    with FakeEmbeddingServer(dim=16, model="m-16") as srv:
        yield srv


@pytest.fixture(params=["openai", "ollama"])
def make(request: pytest.FixtureRequest) -> Iterator[Callable[..., Remote]]:
    """Build the provider under test (both kinds), closed after the test."""
    made: list[Remote] = []
    cls = OpenAIEmbeddingProvider if request.param == "openai" else OllamaEmbeddingProvider

    def factory(url: str, **kwargs: object) -> Remote:
        kwargs.setdefault("model", "m-16")
        kwargs.setdefault("timeout", 5.0)
        provider = cls(url, **kwargs)  # type: ignore[arg-type]
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        provider.close()


def test_vectors_come_back_in_order_from_each_api_shape(server, make):
    provider = make(server.url)
    texts = ["alpha beta", "gamma", "élévation du niveau"]
    vectors = provider.embed("passage", texts)
    expected = np.stack([fake_vector(t, 16) for t in texts])
    assert vectors.dtype == np.float32 and np.array_equal(vectors, expected)
    shape = {"openai": "openai", "ollama": "ollama"}[provider.kind]
    assert [d["shape"] for d in server.details] == [shape]
    assert server.details[0]["model"] == "m-16"
    assert (provider.model, provider.dimension) == ("m-16", 16)


def test_prefixes_are_added_per_type(server, make):
    provider = make(server.url, query_prefix="query: ", passage_prefix="passage: ")
    provider.embed("query", ["a question"])
    provider.embed("passage", ["a passage"])
    assert [d["first"] for d in server.details] == ["query: a question", "passage: a passage"]


def test_batch_size_splits_requests(server, make):
    provider = make(server.url, batch_size=2)
    vectors = provider.embed("passage", [f"t{i}" for i in range(5)])
    assert vectors.shape == (5, 16)
    assert [r["count"] for r in server.requests] == [2, 2, 1]


def test_dimension_is_learned_from_a_probe_and_then_enforced(server, make):
    provider = make(server.url)
    assert provider.health() == {"status": "ok", "model": "m-16", "dim": 16}
    assert server.calls == 1  # one probe, no /health endpoint in these APIs
    server.fault = "wrong_dim"
    with pytest.raises(EmbeddingError) as caught:
        provider.embed("passage", ["x"])
    assert caught.value.kind == "malformed" and "dimension 17" in str(caught.value)


@pytest.mark.parametrize("fault", ["wrong_count", "nan", "non_json", "missing_vectors", "zero"])
def test_malformed_answers(server, make, fault):
    provider = make(server.url, dimension=16)
    server.fault = fault
    with pytest.raises(EmbeddingError) as caught:
        provider.embed("passage", ["one", "two"])
    assert caught.value.kind == "malformed"


@pytest.mark.parametrize(
    ("fault", "kind", "retryable"),
    [
        ("422", "invalid_input", None),
        ("400", "invalid_input", None),
        ("413", "invalid_input", None),
        ("429", "unavailable", True),
        ("500", "unavailable", True),
        ("502", "unavailable", True),
        ("503", "unavailable", True),
        ("401", "unavailable", False),
        ("redirect", "unavailable", False),
    ],
)
def test_status_classes(server, make, fault, kind, retryable):
    provider = make(server.url)
    server.fault = fault
    with pytest.raises(EmbeddingError) as caught:
        provider.embed("passage", ["x"])
    assert caught.value.kind == kind
    if retryable is not None:
        assert isinstance(caught.value, ProviderUnavailable)
        assert caught.value.retryable is retryable


def test_422_detail_reaches_the_message_in_each_error_shape(server, make):
    provider = make(server.url)
    server.fault = "422"
    server.fault_detail = "input too long: 9000 tokens"
    with pytest.raises(EmbeddingError, match="input too long: 9000 tokens") as caught:
        provider.embed("passage", ["x"])
    assert caught.value.detail == "input too long: 9000 tokens"


def test_unknown_model_is_unavailable_and_not_retryable(server, make):
    provider = make(server.url, model="not-pulled")
    with pytest.raises(ProviderUnavailable, match="HTTP 404") as caught:
        provider.embed("passage", ["x"])
    assert caught.value.retryable is False


def test_retry_after_is_read(server, make):
    provider = make(server.url)
    server.fault, server.retry_after = "429", "7"
    with pytest.raises(ProviderUnavailable) as caught:
        provider.embed("passage", ["x"])
    assert caught.value.retry_after == 7.0 and "Retry-After 7s" in str(caught.value)


def test_refused_connection_and_timeout_are_unavailable(server, make):
    with FakeEmbeddingServer() as gone:
        url = gone.url
    with pytest.raises(ProviderUnavailable, match="cannot be reached"):
        make(url).embed("passage", ["x"])
    server.fault = "slow"
    with pytest.raises(ProviderUnavailable, match="timed out"):
        make(server.url, timeout=0.3).embed("passage", ["x"])


def test_a_model_swapped_behind_the_url_is_caught(server, make):
    provider = make(server.url)
    provider.embed("passage", ["x"])
    server.model = "m-16-v2"
    provider._model = "m-16-v2"  # the server now only answers to the new name
    with pytest.raises(EmbeddingError, match="switched model") as caught:
        provider.embed("passage", ["x"])
    assert caught.value.kind == "malformed"


def test_api_key_is_sent_and_never_shown(server, make):
    provider = make(server.url, api_key=API_KEY)
    provider.embed("passage", ["x"])
    assert server.details[0]["authorization"] == f"Bearer {API_KEY}"
    server.fault = "503"
    with pytest.raises(EmbeddingError) as caught:
        provider.embed("passage", ["x"])
    assert API_KEY not in str(caught.value) and API_KEY not in repr(provider)


# -- OpenAI specifics ----------------------------------------------------------------------------


def openai_mock(reply: Callable[[dict[str, object]], httpx.Response], **kwargs: object
                ) -> tuple[OpenAIEmbeddingProvider, list[dict[str, object]]]:
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append({"path": request.url.path, **body})
        return reply(body)

    provider = OpenAIEmbeddingProvider(
        kwargs.pop("url", "http://embed.test/v1"), model="text-embedding-3-small",
        transport=httpx.MockTransport(handler), **kwargs,  # type: ignore[arg-type]
    )
    return provider, seen


def test_openai_sends_dimensions_only_when_asked():
    def reply(body: dict[str, object]) -> httpx.Response:
        n = len(body["input"])  # type: ignore[arg-type]
        dim = int(body.get("dimensions", 3))  # type: ignore[call-overload]
        return httpx.Response(200, json={"data": [
            {"index": i, "embedding": [1.0] + [0.0] * (dim - 1)} for i in range(n)]})

    provider, seen = openai_mock(reply, dimension=8, send_dimensions=True)
    assert provider.embed("passage", ["a"]).shape == (1, 8)
    assert seen[0] == {"path": "/v1/embeddings", "model": "text-embedding-3-small",
                       "input": ["a"], "encoding_format": "float", "dimensions": 8}
    plain, seen_plain = openai_mock(reply, url="http://embed.test")
    assert plain.embed("passage", ["a"]).shape == (1, 3)
    assert seen_plain[0]["path"] == "/v1/embeddings" and "dimensions" not in seen_plain[0]
    with pytest.raises(ConfigError, match="send_dimensions"):
        OpenAIEmbeddingProvider("http://embed.test/v1", model="m", send_dimensions=True)


def test_openai_reorders_by_index_and_decodes_base64():
    rows = [[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]

    def reply(body: dict[str, object]) -> httpx.Response:
        b64 = base64.b64encode(np.array(rows[2], dtype="<f4").tobytes()).decode()
        data = [{"index": 2, "embedding": b64}, {"index": 0, "embedding": rows[0]},
                {"index": 1, "embedding": rows[1]}]
        return httpx.Response(200, json={"data": data, "model": "text-embedding-3-small"})

    provider, _ = openai_mock(reply)
    assert np.allclose(provider.embed("passage", ["a", "b", "c"]), np.array(rows))


@pytest.mark.parametrize(
    "data",
    [
        [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}],
        [{"index": 0, "embedding": [1.0]}, {"index": 5, "embedding": [1.0]}],
        [{"index": 0, "embedding": [1.0]}, {"index": True, "embedding": [1.0]}],
        [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": "%%%"}],
        [{"index": 0, "embedding": [1.0]}, {"index": 1}],
        [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": ["1.0"]}],
    ],
)
def test_openai_bad_data_is_malformed(data):
    provider, _ = openai_mock(lambda body: httpx.Response(200, json={"data": data}))
    with pytest.raises(EmbeddingError) as caught:
        provider.embed("passage", ["a", "b"])
    assert caught.value.kind == "malformed"


def test_openai_error_message_is_read_from_its_error_object():
    provider, _ = openai_mock(lambda body: httpx.Response(
        400, json={"error": {"message": "maximum context length is 8192 tokens"}}))
    with pytest.raises(EmbeddingError, match="maximum context length") as caught:
        provider.embed("passage", ["a"])
    assert caught.value.kind == "invalid_input"


def test_retry_after_forms():
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
    assert parse_retry_after("nan") is None
    date = "Wed, 21 Oct 2015 07:28:00 GMT"
    assert parse_retry_after(date, now=1445412480.0 - 10) == pytest.approx(10.0)


# -- the factory --------------------------------------------------------------------------------


def test_factory_builds_each_kind_inside_a_chain(server):
    for kind in ("openai", "ollama"):
        settings = EmbeddingSettings(provider=kind, url=server.url, model="m-16",
                                     api_key_env="RAGPG_TEST_KEY")
        chain = make_provider(settings, environ={"RAGPG_TEST_KEY": API_KEY})
        try:
            assert isinstance(chain, EmbeddingChain)
            assert chain.links[0].provider.kind == kind
            assert chain.embed("passage", ["x"]).shape == (1, 16)
        finally:
            chain.close()
    # Per kind: one probe (the chain learns the dimension it must guard), then the batch.
    assert [d["authorization"] for d in server.details] == [f"Bearer {API_KEY}"] * 4
    assert [d["first"] for d in server.details] == ["ping", "x", "ping", "x"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"provider": "openai"}, "needs embedding.model"),
        ({"provider": "ollama"}, "needs embedding.model"),
        ({"provider": "openai", "model": "m", "api_key_env": "RAGPG_MISSING_KEY"},
         "RAGPG_MISSING_KEY, which is not set"),
        ({"provider": "http", "url": "http://127.0.0.1:1", "query_prefix": "q: "},
         "query_prefix"),
        ({"provider": "ollama", "model": "m", "send_dimensions": True, "dimension": 4},
         "send_dimensions"),
        ({"provider": "openai", "model": "m", "url": "file:///etc/passwd"}, "http or https"),
    ],
)
def test_factory_config_errors(settings, message):
    # Some are refused by the settings themselves, the others by the factory: either way a
    # ConfigError before anything is sent.
    with pytest.raises(ConfigError, match=message):
        make_provider(EmbeddingSettings(**settings), environ={})


def test_default_urls():
    assert OpenAIEmbeddingProvider(model="m").url == "https://api.openai.com/v1"
    assert OllamaEmbeddingProvider(model="m").url == "http://127.0.0.1:11434"
