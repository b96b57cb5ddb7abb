"""What the HTTP provider makes of each answer: statuses, malformed bodies, size caps, transport
errors and redirects, mostly through httpx's MockTransport; and validate_vectors directly."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import httpx
import numpy as np
import pytest

from rag_pg.embed import HttpEmbeddingProvider, validate_vectors
from rag_pg.errors import EmbeddingError
from rag_pg.testing.embedserver import FakeEmbeddingServer

PASSWORD = "s3cret-canary-pw"
API_KEY = "sk-canary-api-key-0042"
V = [0.6, 0.8]


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


# -- redirects and credentials ------------------------------------------------------------------


def test_redirects_are_not_followed() -> None:
    with FakeEmbeddingServer(dim=8) as front, FakeEmbeddingServer(dim=8) as internal:
        front.fault = "redirect"
        front.redirect_to = internal.url + "/embed"
        with HttpEmbeddingProvider(front.url) as provider:
            with pytest.raises(EmbeddingError, match="redirect") as caught:
                provider.embed("query", ["a"])
        assert caught.value.kind == "unavailable"
        assert (internal.calls, internal.connections) == (0, 0)


def test_credentials_are_still_sent_to_the_service() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization", ""))
        return httpx.Response(200, json={"status": "ok", "model": "m", "dim": 2})

    url = f"http://u:{PASSWORD}@embed.test"
    for api_key in (API_KEY, None):
        with HttpEmbeddingProvider(
            url, api_key=api_key, transport=httpx.MockTransport(handler)
        ) as provider:
            provider.health()
    assert seen == [f"Bearer {API_KEY}", httpx.BasicAuth("u", PASSWORD)._auth_header]


# -- malformed payloads and caps ----------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"vectors": [[0.6, 0.8]]}', id="count n-1"),
        pytest.param(b'{"vectors": [[0.6, 0.8], [0.6, 0.8], [0.6, 0.8]]}', id="count n+1"),
        pytest.param(b'{"vectors": []}', id="count 0"),
        pytest.param(b'{"dim": 2, "vectors": [[1.0], [1.0]]}', id="dim d-1"),
        pytest.param(b'{"dim": 2, "vectors": [[1.0, 0, 0], [1.0, 0, 0]]}', id="dim d+1"),
        pytest.param(b'{"vectors": [[], []]}', id="dim 0"),
        pytest.param(b'{"vectors": [[0.6, 0.8], [0.6]]}', id="ragged"),
        pytest.param(b'{"vectors": [[NaN, 0.8], [0.6, 0.8]]}', id="NaN token"),
        pytest.param(b'{"vectors": [[Infinity, 0.8], [0.6, 0.8]]}', id="Infinity token"),
        pytest.param(b'{"vectors": [[-Infinity, 0.8], [0.6, 0.8]]}', id="-Infinity token"),
        pytest.param(b'{"vectors": [[1e400, 0.8], [0.6, 0.8]]}', id="overflow"),
        pytest.param(b'{"vectors": [[1e39, 0.8], [0.6, 0.8]]}', id="float32 overflow"),
        pytest.param(b'{"vectors": [[0.0, 0.0], [0.6, 0.8]]}', id="zero vector"),
        pytest.param(b'{"vectors": [["0.6", "0.8"], [0.6, 0.8]]}', id="strings"),
        pytest.param(b'{"vectors": [[null, 0.8], [0.6, 0.8]]}', id="null item"),
        pytest.param(b'{"vectors": [null, [0.6, 0.8]]}', id="null vector"),
        pytest.param(b'{"vectors": [[true, false], [0.6, 0.8]]}', id="booleans"),
        pytest.param(b'{"vectors": [[[0.6], [0.8]], [0.6, 0.8]]}', id="nested lists"),
        pytest.param(b'{"vectors": {"0": [0.6, 0.8]}}', id="vectors object"),
        pytest.param(b'{"vectors": "0.6,0.8"}', id="vectors string"),
        pytest.param(b'{"vectors": null}', id="vectors null"),
        pytest.param(b'{"model": "m", "dim": 2}', id="missing vectors"),
        pytest.param(b"[[0.6, 0.8], [0.6, 0.8]]", id="not an object"),
        pytest.param(b"<html>oops</html>", id="non-JSON"),
        pytest.param(b'{"vectors": [[0.6, 0.8], [0.6', id="truncated JSON"),
        pytest.param(b"\xff\xfe garbage", id="not UTF-8"),
        pytest.param(b"[" * 100_000, id="deep nesting"),
        pytest.param(b'{"dim": "2", "vectors": [[0.6, 0.8], [0.6, 0.8]]}', id="dim not int"),
        pytest.param(b'{"dim": 3, "vectors": [[0.6, 0.8], [0.6, 0.8]]}', id="dim disagrees"),
        pytest.param(b'{"model": 7, "vectors": [[0.6, 0.8], [0.6, 0.8]]}', id="model not str"),
    ],
)
def test_malformed_payloads(body: bytes) -> None:
    with mock(raw_reply(body)) as provider, pytest.raises(EmbeddingError) as caught:
        provider.embed("passage", ["a", "b"])
    assert caught.value.kind == "malformed", str(caught.value)


def test_body_cap_is_enforced_from_the_header_without_reading() -> None:
    reads: list[int] = []

    def body() -> Iterator[bytes]:
        reads.append(1)
        yield b"{}"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-length": "1000"}, content=body())

    with mock(handler, max_response_bytes=100) as provider:
        with pytest.raises(EmbeddingError, match="cap") as caught:
            provider.embed("query", ["a"])
    assert caught.value.kind == "malformed" and reads == []


def test_body_cap_is_enforced_while_streaming() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=iter([b"x" * 60, b"x" * 60, b"x" * 60]))

    with mock(handler, max_response_bytes=100) as provider:
        with pytest.raises(EmbeddingError, match="cap") as caught:
            provider.embed("query", ["a"])
    assert caught.value.kind == "malformed"


@pytest.mark.parametrize(
    "status", [201, 204, 301, 302, 307, 401, 403, 404, 429, 500, 502, 503, 504]
)
def test_every_other_status_is_unavailable(status: int) -> None:
    with mock(json_reply({"vectors": [V]}, status)) as provider:
        with pytest.raises(EmbeddingError, match=f"HTTP {status}") as caught:
            provider.embed("query", ["a"])
    assert caught.value.kind == "unavailable"


@pytest.mark.parametrize(
    ("detail", "shown"),
    [
        ("too long", "too long"),
        (
            [{"loc": ["body", "texts", 0], "msg": "too long"}],
            '[{"loc":["body","texts",0],"msg":"too long"}]',
        ),
        ({"text": 3, "reason": "empty"}, '{"text":3,"reason":"empty"}'),
        ("multi\nline   detail", "multi line detail"),
    ],
)
def test_422_detail_is_rendered_compactly(detail: object, shown: str) -> None:
    with mock(json_reply({"detail": detail}, 422)) as provider:
        with pytest.raises(EmbeddingError) as caught:
            provider.embed("query", ["a"])
    assert caught.value.kind == "invalid_input"
    assert caught.value.detail == shown and str(caught.value).endswith(": " + shown)


def test_422_detail_is_truncated() -> None:
    with mock(json_reply({"detail": "x" * 10_000}, 422)) as provider:
        with pytest.raises(EmbeddingError) as caught:
            provider.embed("query", ["a"])
    assert caught.value.detail is not None and len(caught.value.detail) <= 500


@pytest.mark.parametrize("body", [b"not json", b"{}", b'{"detail": null}'])
def test_422_without_detail_is_still_invalid_input(body: bytes) -> None:
    with mock(raw_reply(body, 422)) as provider:
        with pytest.raises(EmbeddingError) as caught:
            provider.embed("query", ["a"])
    assert (caught.value.kind, caught.value.detail) == ("invalid_input", None)


@pytest.mark.parametrize(
    "error",
    [
        httpx.ConnectError("refused"),
        httpx.ConnectTimeout("slow connect"),
        httpx.ReadTimeout("slow read"),
        httpx.RemoteProtocolError("garbage"),
        httpx.ReadError("reset"),
        httpx.ProxyError("proxy"),
        httpx.UnsupportedProtocol("bad"),
    ],
)
def test_transport_errors_are_unavailable(error: httpx.HTTPError) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error

    with mock(handler) as provider:
        with pytest.raises(EmbeddingError) as caught:
            provider.embed("query", ["a"])
    assert caught.value.kind == "unavailable"


@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        ({"status": "degraded", "model": "m", "dim": 2}, 200, "unavailable"),
        ({"status": "ok", "model": "m", "dim": 2}, 503, "unavailable"),
        ({"status": "ok", "dim": 2}, 200, "malformed"),
        ({"status": "ok", "model": "m", "dim": "2"}, 200, "malformed"),
        ({"status": "ok", "model": "m", "dim": 0}, 200, "malformed"),
        (["ok"], 200, "malformed"),
    ],
)
def test_health_failures(body: object, status: int, kind: str) -> None:
    with mock(json_reply(body, status)) as provider, pytest.raises(EmbeddingError) as caught:
        provider.health()
    assert caught.value.kind == kind


def test_validate_vectors_accepts_lists_and_arrays() -> None:
    as_list = validate_vectors([[3, 4], [0.0, -1.5]], count=2, dimension=2)
    as_array = validate_vectors(
        np.array([[3, 4], [0.0, -1.5]], dtype=np.float64), count=2, dimension=None
    )
    assert as_list.dtype == np.float32 and np.array_equal(as_list, as_array)
    assert as_list.tolist() == [[3.0, 4.0], [0.0, -1.5]]


@pytest.mark.parametrize(
    "raw",
    [
        np.zeros((2, 2)),
        np.ones((3, 2)),
        np.ones(2),
        np.array([["a", "b"], ["c", "d"]]),
        np.array([[np.inf, 1.0], [1.0, 1.0]]),
        ((1.0, 0.0), (0.0, 1.0)),
        [[10**400, 1.0], [1.0, 1.0]],
    ],
)
def test_validate_vectors_refuses(raw: object) -> None:
    with pytest.raises(EmbeddingError) as caught:
        validate_vectors(raw, count=2, dimension=None)
    assert caught.value.kind == "malformed"
