"""``/embed`` with ``"encoding": "base64"``: client decoding, its checks, and both servers."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from rag_pg.config import EmbeddingSettings
from rag_pg.embed import HttpEmbeddingProvider, make_provider, validate_vectors
from rag_pg.errors import EmbeddingError
from rag_pg.serve.embed_server import EmbedServer
from rag_pg.testing.embedserver import FakeEmbeddingServer, fake_vector

TEXTS = ["zeta", "alpha beta", "élève café", ""]


def b64(values: list[float]) -> str:
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode("ascii")


@pytest.fixture
def provider(server: FakeEmbeddingServer) -> Iterator[HttpEmbeddingProvider]:
    with HttpEmbeddingProvider(server.url, timeout=5.0) as made:
        yield made


def mock_reply(body: object) -> HttpEmbeddingProvider:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=body))
    return HttpEmbeddingProvider("http://embed.test", transport=transport)


# -- the client, against the fake server ----------------------------------------------------------


def test_client_asks_for_base64_and_decodes_the_same_vectors(
    server: FakeEmbeddingServer, provider: HttpEmbeddingProvider
) -> None:
    packed = provider.embed("passage", TEXTS)
    server.honour_encoding = False  # the same server, now answering JSON floats
    floats = provider.embed("passage", TEXTS)
    assert [d["encoding"] for d in server.details] == ["base64", "base64"]
    assert packed.dtype == np.float32 and packed.flags.c_contiguous and packed.flags.writeable
    assert np.array_equal(packed, floats)
    assert np.array_equal(packed, np.stack([fake_vector(t, 16) for t in TEXTS]))


def test_fake_server_answers_strings_only_when_asked(server: FakeEmbeddingServer) -> None:
    body = {"type": "query", "texts": ["a b"]}
    plain = httpx.post(server.url + "/embed", json=body).json()["vectors"][0]
    packed = httpx.post(server.url + "/embed", json={**body, "encoding": "base64"}).json()
    assert isinstance(plain, list) and isinstance(packed["vectors"][0], str)
    decoded = np.frombuffer(base64.b64decode(packed["vectors"][0]), dtype="<f4")
    assert np.array_equal(decoded, np.asarray(plain, dtype=np.float32))


def test_server_that_ignores_encoding_still_works(
    server: FakeEmbeddingServer, provider: HttpEmbeddingProvider
) -> None:
    server.honour_encoding = False
    raw = httpx.post(server.url + "/embed", json={"type": "passage", "texts": ["x"],
                                                  "encoding": "base64"}).json()
    assert isinstance(raw["vectors"][0], list)  # it really answered floats
    vectors = provider.embed("passage", TEXTS)
    assert np.array_equal(vectors, np.stack([fake_vector(t, 16) for t in TEXTS]))


@pytest.mark.parametrize("fault", ["bad_base64", "odd_base64", "wrong_dim", "nan", "zero"])
def test_broken_base64_answers_are_malformed(
    server: FakeEmbeddingServer, provider: HttpEmbeddingProvider, fault: str
) -> None:
    server.fault = fault
    with pytest.raises(EmbeddingError) as caught:
        provider.embed("passage", ["first text", "second text"])
    assert caught.value.kind == "malformed"
    assert server.details[-1]["encoding"] == "base64"


def test_malformed_messages_say_what_is_wrong(server: FakeEmbeddingServer) -> None:
    messages: dict[str, str] = {}
    for fault in ("bad_base64", "odd_base64"):
        server.fault = fault
        with HttpEmbeddingProvider(server.url) as provider, pytest.raises(EmbeddingError) as caught:
            provider.embed("passage", ["a", "b"])
        messages[fault] = str(caught.value)
    assert "vector 0 is a string that is not valid base64" in messages["bad_base64"]
    assert "vector 0 is 63 bytes of base64, not a whole number of float32" in messages["odd_base64"]


# -- decoding edge cases, through MockTransport and validate_vectors -----------------------------


@pytest.mark.parametrize(
    "vectors",
    [
        pytest.param([b64([0.6, 0.8]), b64([0.6, 0.8, 0.0])], id="ragged"),
        pytest.param([b64([0.6, 0.8, 0.0]), b64([0.6, 0.8, 0.0])], id="dim d+1"),
        pytest.param([b64([1.0]), b64([1.0])], id="dim d-1"),
        pytest.param(["", ""], id="empty strings"),
        pytest.param([b64([0.6, 0.8]), "AAAA====="], id="bad padding"),
        pytest.param([b64([0.6, 0.8]), "AAAAAAAA"], id="6 bytes"),
        pytest.param([b64([0.6, 0.8]), "AA AAAAA"], id="space inside"),
        pytest.param([b64([float("nan"), 0.8]), b64([0.6, 0.8])], id="NaN"),
        pytest.param([b64([float("inf"), 0.8]), b64([0.6, 0.8])], id="Infinity"),
        pytest.param([b64([0.0, 0.0]), b64([0.6, 0.8])], id="zero vector"),
        pytest.param([b64([0.6, 0.8]), 7], id="number row"),
        pytest.param([b64([0.6, 0.8]), None], id="null row"),
        pytest.param([b64([0.6, 0.8]), ["0.6", "0.8"]], id="list of strings beside base64"),
        pytest.param([b64([0.6, 0.8])], id="count n-1"),
        pytest.param([b64([0.6, 0.8])] * 3, id="count n+1"),
    ],
)
def test_malformed_base64_payloads(vectors: list[object]) -> None:
    with mock_reply({"dim": 2, "vectors": vectors}) as provider, pytest.raises(
        EmbeddingError
    ) as caught:
        provider.embed("passage", ["a", "b"])
    assert caught.value.kind == "malformed", str(caught.value)


def test_base64_and_float_rows_may_be_mixed() -> None:
    mixed = validate_vectors([b64([3.0, 4.0]), [0.0, -1.5]], count=2, dimension=2)
    assert mixed.dtype == np.float32 and mixed.tolist() == [[3.0, 4.0], [0.0, -1.5]]
    with mock_reply({"vectors": [[0.6, 0.8], b64([0.6, 0.8])]}) as provider:
        assert provider.embed("query", ["a", "b"]).shape == (2, 2)


def test_decoded_vectors_are_not_tied_to_the_response_buffer() -> None:
    vectors = validate_vectors([b64([3.0, 4.0])], count=1, dimension=None)
    vectors[0, 0] = 1.0  # frombuffer alone would be read-only
    assert vectors.tolist() == [[1.0, 4.0]]


# -- `ragpg embed-server` -------------------------------------------------------------------------


@pytest.fixture
def embed_server(server: FakeEmbeddingServer) -> Iterator[EmbedServer]:
    backend = make_provider(
        EmbeddingSettings(url=server.url, dimension=16, attempts=1, backoff=0.0), environ={}
    )
    running = EmbedServer(backend, port=0).start()
    yield running
    running.stop(grace=5)
    backend.close()


def test_embed_server_honours_encoding(embed_server: EmbedServer) -> None:
    body = {"type": "passage", "texts": TEXTS}
    plain = httpx.post(embed_server.url + "/embed", json=body, timeout=10)
    floats = httpx.post(embed_server.url + "/embed", json={**body, "encoding": "float"}, timeout=10)
    packed = httpx.post(embed_server.url + "/embed", json={**body, "encoding": "base64"},
                        timeout=10)
    assert plain.json() == floats.json()
    rows = packed.json()["vectors"]
    assert all(isinstance(row, str) for row in rows)
    decoded = np.stack([np.frombuffer(base64.b64decode(row), dtype="<f4") for row in rows])
    assert np.array_equal(decoded, np.asarray(plain.json()["vectors"], dtype=np.float32))
    with HttpEmbeddingProvider(embed_server.url) as provider:
        assert np.array_equal(provider.embed("passage", TEXTS), decoded)


def test_embed_server_refuses_an_unknown_encoding(embed_server: EmbedServer) -> None:
    reply = httpx.post(embed_server.url + "/embed",
                       json={"type": "passage", "texts": ["a"], "encoding": "hex"}, timeout=10)
    assert reply.status_code == 422
    assert "encoding must be 'float' or 'base64'" in reply.json()["detail"]
