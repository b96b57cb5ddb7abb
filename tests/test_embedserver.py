"""The fake embedding server: deterministic vectors, fault plan, counters, clean shutdown."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_pg.testing.embedserver import FAULTS, FakeEmbeddingServer, fake_vector

from .waiting import eventually


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5.0, trust_env=False) as c:
        yield c


def post(client: httpx.Client, server: FakeEmbeddingServer, body: object) -> httpx.Response:
    return client.post(server.url + "/embed", json=body)


# -- fake_vector --------------------------------------------------------------------------------


def test_fake_vector_is_pinned_across_processes() -> None:
    # blake2b, not hash(): these numbers must never change, other suites rely on them.
    expected = [0.0, -0.546454, 0.0, 0.0, -0.546454, 0.0, 0.322745, 0.546454]
    assert np.round(fake_vector("Hello hello world", 8).astype(np.float64), 6).tolist() == expected


def test_fake_vector_folds_case_accents_and_punctuation() -> None:
    assert np.array_equal(fake_vector("Élève, CAFÉ!", 32), fake_vector("eleve cafe", 32))


def test_fake_vector_shared_words_are_closer() -> None:
    a, b, c = (
        fake_vector(t, 64) for t in ("the cat sat on the mat", "a cat on a mat", "stocks fell")
    )
    assert float(a @ b) > float(a @ c)


def test_fake_vector_without_tokens_is_a_fixed_unit_vector() -> None:
    assert fake_vector("", 4).tolist() == [0.5, 0.5, 0.5, 0.5]
    assert np.array_equal(fake_vector("!!! ...", 4), fake_vector("", 4))


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200), dim=st.integers(min_value=1, max_value=300))
def test_fake_vector_is_a_finite_unit_vector(text: str, dim: int) -> None:
    vector = fake_vector(text, dim)
    assert vector.dtype == np.float32 and vector.shape == (dim,)
    assert np.isfinite(vector).all()
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5
    assert np.array_equal(vector, fake_vector(text, dim))


# -- contract -----------------------------------------------------------------------------------


def test_health(server: FakeEmbeddingServer, client: httpx.Client) -> None:
    response = client.get(server.url + "/health")
    assert (response.status_code, response.json()) == (
        200,
        {"status": "ok", "model": "fake-bow-16", "dim": 16},
    )
    assert server.health_calls == 1 and server.calls == 0


def test_embed_returns_fake_vectors_in_order(
    server: FakeEmbeddingServer, client: httpx.Client
) -> None:
    texts = ["zeta", "alpha beta", "", "Ünïcode"]
    response = post(client, server, {"type": "passage", "texts": texts})
    body = response.json()
    assert response.status_code == 200
    assert {k: body[k] for k in ("model", "dim")} == {"model": "fake-bow-16", "dim": 16}
    assert np.array_equal(
        np.array(body["vectors"], dtype=np.float32), [fake_vector(t, 16) for t in texts]
    )
    assert (server.calls, server.texts_embedded) == (1, 4)
    assert server.requests == [{"type": "passage", "count": 4}]


def test_counters_reset(server: FakeEmbeddingServer, client: httpx.Client) -> None:
    post(client, server, {"type": "query", "texts": ["a"]})
    server.reset_counters()
    assert (server.calls, server.texts_embedded, server.requests) == (0, 0, [])


@pytest.mark.parametrize(
    "body",
    [
        {"type": "bogus", "texts": ["a"]},
        {"type": "query", "texts": []},
        {"type": "query", "texts": "abc"},
        {"type": "query", "texts": [1]},
        ["not", "an", "object"],
    ],
)
def test_bad_payload_gets_422(
    server: FakeEmbeddingServer, client: httpx.Client, body: object
) -> None:
    response = post(client, server, body)
    assert response.status_code == 422 and isinstance(response.json()["detail"], str)
    assert server.calls == 1 and server.texts_embedded == 0


def test_unknown_path_is_404(server: FakeEmbeddingServer, client: httpx.Client) -> None:
    assert client.get(server.url + "/nope").status_code == 404
    assert client.post(server.url + "/nope", json={}).status_code == 404


# -- fault plan ---------------------------------------------------------------------------------


def test_fault_setter_rejects_unknown_modes(server: FakeEmbeddingServer) -> None:
    with pytest.raises(ValueError):
        server.fault = "explode"
    for fault in sorted(FAULTS) + ["429", "502", None]:
        server.fault = fault


@pytest.mark.parametrize("fault", ["500", "503", "429", "504"])
def test_status_faults(server: FakeEmbeddingServer, client: httpx.Client, fault: str) -> None:
    server.fault = fault
    server.retry_after = "2"
    response = post(client, server, {"type": "query", "texts": ["a"]})
    assert response.status_code == int(fault)
    assert response.headers["retry-after"] == "2"
    assert client.get(server.url + "/health").status_code == int(fault)


def test_payload_faults(server: FakeEmbeddingServer, client: httpx.Client) -> None:
    body = {"type": "query", "texts": ["a b", "c"]}
    outcomes: dict[str, object] = {}
    for fault in ("wrong_count", "wrong_dim", "zero", "missing_vectors"):
        server.fault = fault
        reply = post(client, server, body).json()
        vectors = reply.get("vectors")
        outcomes[fault] = None if vectors is None else [len(v) for v in vectors]
    assert outcomes == {
        "wrong_count": [16],
        "wrong_dim": [17, 17],
        "zero": [16, 16],
        "missing_vectors": None,
    }
    server.fault = "nan"
    assert "NaN" in post(client, server, body).text
    server.fault = "non_json"
    assert post(client, server, body).text == "this is not JSON"
    server.fault = "truncated"
    with pytest.raises(json.JSONDecodeError):
        json.loads(post(client, server, body).text)
    assert server.texts_embedded == 0


def test_422_fault_uses_fault_detail(server: FakeEmbeddingServer, client: httpx.Client) -> None:
    server.fault = "422"
    server.fault_detail = "text too long"
    response = post(client, server, {"type": "query", "texts": ["a"]})
    assert (response.status_code, response.json()) == (422, {"detail": "text too long"})


def test_poison_only_hits_batches_holding_it(
    server: FakeEmbeddingServer, client: httpx.Client
) -> None:
    server.poison = "POISON"
    bad = post(client, server, {"type": "passage", "texts": ["ok", "has POISON inside"]})
    good = post(client, server, {"type": "passage", "texts": ["ok"]})
    assert (bad.status_code, bad.json(), good.status_code) == (422, {"detail": "poison text"}, 200)


def test_fail_next_then_recovers(server: FakeEmbeddingServer, client: httpx.Client) -> None:
    server.fail_next = 2
    codes = [post(client, server, {"type": "query", "texts": ["a"]}).status_code for _ in range(3)]
    assert codes == [503, 503, 200] and server.fail_next == 0 and server.calls == 3


def test_redirect_fault(server: FakeEmbeddingServer, client: httpx.Client) -> None:
    server.fault = "redirect"
    server.redirect_to = "http://127.0.0.1:9/embed"
    response = post(client, server, {"type": "query", "texts": ["a"]})
    assert (response.status_code, response.headers["location"]) == (302, server.redirect_to)


def test_huge_fault_announces_a_body_over_the_cap(
    server: FakeEmbeddingServer, client: httpx.Client
) -> None:
    server.fault = "huge"
    with client.stream("POST", server.url + "/embed", json={"type": "query", "texts": ["a"]}) as r:
        assert int(r.headers["content-length"]) > 64 * 1024 * 1024


# -- concurrency and lifecycle ------------------------------------------------------------------


def test_concurrent_requests_are_all_counted(server: FakeEmbeddingServer) -> None:
    def work() -> None:
        with httpx.Client(trust_env=False) as c:
            for _ in range(10):
                assert post(c, server, {"type": "query", "texts": ["a", "b"]}).status_code == 200

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (server.calls, server.texts_embedded, len(server.requests)) == (80, 160, 80)


def test_keep_alive_connections_are_reused(
    server: FakeEmbeddingServer, client: httpx.Client
) -> None:
    for _ in range(5):
        post(client, server, {"type": "query", "texts": ["a"]})
    assert server.connections == 1


def test_stop_is_prompt_with_idle_and_slow_connections() -> None:
    before = set(threading.enumerate())
    srv = FakeEmbeddingServer(dim=8).start()
    idle = httpx.Client(trust_env=False)
    idle.get(srv.url + "/health")  # leaves a keep-alive connection open
    srv.fault = "slow"
    slow = threading.Thread(target=_swallow, args=(srv.url,))
    slow.start()
    eventually(lambda: srv.requests, "the slow request reaching the server")  # held there
    started = time.monotonic()
    srv.stop()
    srv.stop()  # idempotent
    slow.join()
    idle.close()
    # The slow answer would take srv.slow_seconds (30 s): stopping does not wait for it.
    assert time.monotonic() - started < srv.slow_seconds / 2
    assert set(threading.enumerate()) - before == set()


def _swallow(url: str) -> None:
    try:
        with httpx.Client(trust_env=False, timeout=10.0) as c:
            c.post(url + "/embed", json={"type": "query", "texts": ["a"]})
    except httpx.HTTPError:
        pass


def test_url_requires_a_started_server() -> None:
    with pytest.raises(RuntimeError):
        _ = FakeEmbeddingServer().url


def test_command_line_runs_in_the_foreground() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rag_pg.testing.embedserver", "--port", "0", "--dim", "8"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        with httpx.Client(trust_env=False) as c:
            assert c.get(url + "/health").json() == {
                "status": "ok",
                "model": "fake-bow-8",
                "dim": 8,
            }
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
    assert code == 0
