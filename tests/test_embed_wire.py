"""The plain-HTTP wire: framing, keep-alive, stale sockets and broken answers, on real sockets.

The fake embedding server (``http.server``) speaks one dialect; the scripted server below
answers raw bytes, so each framing rule of RFC 9112 the client relies on is pinned.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import numpy as np
import pytest

from rag_pg.embed import HttpEmbeddingProvider
from rag_pg.embed.wire import HttpxWire, PlainWire, _request_bytes, open_wire
from rag_pg.errors import ConfigError, EmbeddingError
from rag_pg.testing.embedserver import FakeEmbeddingServer

HEALTH = json.dumps({"status": "ok", "model": "scripted", "dim": 4}).encode()


@dataclass
class Answer:
    data: bytes
    close: bool = False  # hang up once sent


class ScriptedServer:
    """Loopback TCP server answering each request with the next scripted bytes, verbatim."""

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()

    def _serve(self) -> None:
        self._sock.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader:
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                with self._lock:
                    self.requests.append(head + reader.read(length))
                    answer = self.answers.pop(0) if self.answers else None
                if answer is None:
                    return
                conn.sendall(answer.data)
                if answer.close:
                    return


@pytest.fixture
def scripted() -> Iterator[list[ScriptedServer]]:
    servers: list[ScriptedServer] = []
    yield servers
    for server in servers:
        server.close()


def serve(servers: list[ScriptedServer], *answers: Answer) -> ScriptedServer:
    server = ScriptedServer(list(answers))
    servers.append(server)
    return server


def ok(body: bytes, *extra: str, version: str = "1.1") -> bytes:
    head = [f"HTTP/{version} 200 OK", "Content-Type: application/json", *extra]
    if not any(h.lower().startswith(("content-length", "transfer-encoding")) for h in extra):
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunked(body: bytes, size: int = 7) -> bytes:
    parts = [f"{len(body[i:i + size]):x};ext=1\r\n".encode() + body[i:i + size] + b"\r\n"
             for i in range(0, len(body), size)]
    return b"".join(parts) + b"0\r\nX-Trailer: yes\r\n\r\n"


# -- framing ---------------------------------------------------------------------------------------


def test_a_chunked_answer_is_reassembled(scripted: list[ScriptedServer]) -> None:
    server = serve(scripted, Answer(ok(chunked(HEALTH), "Transfer-Encoding: chunked")),
                   Answer(ok(HEALTH)))
    with HttpEmbeddingProvider(server.url) as provider:
        assert provider.health()["model"] == "scripted"
        assert provider.health()["dim"] == 4  # the same connection, read to its end
    assert server.connections == 1


def test_interim_answers_are_skipped(scripted: list[ScriptedServer]) -> None:
    early = b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n"
    server = serve(scripted, Answer(early + ok(HEALTH)))
    with HttpEmbeddingProvider(server.url) as provider:
        assert provider.health()["status"] == "ok"


def test_a_body_ended_by_the_close_is_read_and_the_socket_not_reused(
    scripted: list[ScriptedServer],
) -> None:
    bare = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + HEALTH
    server = serve(scripted, Answer(bare, close=True), Answer(bare, close=True))
    with HttpEmbeddingProvider(server.url) as provider:
        assert provider.health()["model"] == "scripted"
        assert provider.health()["model"] == "scripted"
    assert server.connections == 2


def test_connection_close_is_honoured(scripted: list[ScriptedServer]) -> None:
    server = serve(scripted, Answer(ok(HEALTH, "Connection: close"), close=True), Answer(ok(HEALTH)))
    with HttpEmbeddingProvider(server.url) as provider:
        provider.health()
        provider.health()
    assert server.connections == 2


@pytest.mark.parametrize(
    ("answer", "kind", "words"),
    [
        (b"HTP/1.1 200 OK\r\n\r\n", "unavailable", "request failed"),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", "unavailable", "request failed"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "unavailable", "request failed"),
        (b"HTTP/1.1 200 OK\r\nContent-Le", "unavailable", "request failed"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n" + HEALTH, "unavailable",
         "dropped the connection"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\nx", "unavailable", "request failed"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "unavailable",
         "dropped the connection"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcdEF", "unavailable",
         "dropped the connection"),
        (ok(b"\x1f\x8b\x08\x00", "Content-Encoding: gzip", "Content-Length: 4"), "malformed",
         "cannot be decoded"),
        (b"HTTP/1.1 100 Continue\r\n\r\n" * 11 + ok(HEALTH), "unavailable", "interim"),
    ],
    ids=["version", "status", "header", "cut-head", "short-body", "two-lengths", "chunk-size",
         "chunk-end", "gzip", "endless-interim"],
)
def test_a_broken_answer_is_one_clear_error(
    scripted: list[ScriptedServer], answer: bytes, kind: str, words: str
) -> None:
    server = serve(scripted, Answer(answer, close=True))
    with HttpEmbeddingProvider(server.url, timeout=2.0) as provider:
        with pytest.raises(EmbeddingError) as caught:
            provider.health()
    assert caught.value.kind == kind
    assert words in str(caught.value) and server.url in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_server_hanging_up_on_a_fresh_connection_is_not_retried(
    scripted: list[ScriptedServer],
) -> None:
    server = serve(scripted)  # reads the request, answers nothing, hangs up
    with HttpEmbeddingProvider(server.url) as provider:
        with pytest.raises(EmbeddingError, match="cannot be reached") as caught:
            provider.health()
    assert caught.value.kind == "unavailable"
    assert (server.connections, len(server.requests)) == (1, 1)


# -- the request -----------------------------------------------------------------------------------


def test_the_request_is_plain_http_1_1(scripted: list[ScriptedServer]) -> None:
    vector = np.asarray([0.5, 0.5, 0.5, 0.5], dtype="<f4")
    answer = json.dumps({"model": "m", "dim": 4, "vectors": [vector.tolist()]}).encode()
    server = serve(scripted, Answer(ok(answer)))
    url = server.url.replace("http://", "http://user:pa%3Ass@") + "/base/?v=2"
    with HttpEmbeddingProvider(url) as provider:
        provider.embed("query", ["été"])
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert lines[0] == "POST /base/embed?v=2 HTTP/1.1"
    assert headers["Host"] == server.url.removeprefix("http://")
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"user:pa:ss").decode()
    assert headers["Accept-Encoding"] == "identity"
    assert int(headers["Content-Length"]) == len(body)
    assert json.loads(body) == {"type": "query", "texts": ["été"], "encoding": "base64"}


def test_ipv6_and_default_ports_in_the_host_header() -> None:
    assert b"\r\nHost: [::1]:8080\r\n" in _request_bytes(
        "GET", httpx.URL("http://[::1]:8080/health"), None, {}
    )
    request = _request_bytes("GET", httpx.URL("http://example.org/health"), None, {})
    assert request.startswith(b"GET /health HTTP/1.1\r\nHost: example.org\r\n")
    assert b"Content-Length" not in request


def test_a_line_break_in_a_credential_is_refused_up_front() -> None:
    with pytest.raises(ConfigError, match="line break"):
        HttpEmbeddingProvider("http://127.0.0.1:1", api_key="key\r\nX-Evil: 1")


def test_the_wire_follows_the_scheme() -> None:
    assert isinstance(open_wire(httpx.URL("http://127.0.0.1:1"), None), PlainWire)
    https = open_wire(httpx.URL("https://127.0.0.1:1"), None)
    mocked = open_wire(httpx.URL("http://127.0.0.1:1"),
                       httpx.MockTransport(lambda request: httpx.Response(200)))
    assert isinstance(https, HttpxWire) and isinstance(mocked, HttpxWire)
    https.close()
    mocked.close()


# -- keep-alive (reuse and threads: tests/test_embed_http.py) ------------------------------------


def test_a_socket_the_server_closed_is_replaced_once(server: FakeEmbeddingServer) -> None:
    with HttpEmbeddingProvider(server.url) as provider:
        first = provider.embed("query", ["bonjour"])
        server.cut_connections()  # the idle socket now reads as closed
        again = provider.embed("query", ["bonjour"])
    assert np.array_equal(first, again)
    assert (server.connections, server.calls) == (2, 2)


def test_a_closed_provider_refuses_calls(server: FakeEmbeddingServer) -> None:
    provider = HttpEmbeddingProvider(server.url)
    provider.embed("query", ["a"])
    provider.close()
    with pytest.raises(EmbeddingError, match="closed") as caught:
        provider.embed("query", ["a"])
    assert caught.value.kind == "unavailable"
