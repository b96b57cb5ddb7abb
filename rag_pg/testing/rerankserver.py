"""A deterministic fake rerank service on loopback: TEI ``/rerank`` and Jina/Cohere ``/v1/rerank``.

The score a human can predict: the share of the query's distinct words (lower-cased, accents
stripped, ``[a-z0-9]+``) found in the text, mapped to a logit-like range,
``score = 10 * share - 5`` (no shared word: -5, every word: +5). ``fault`` makes it fail.
"""

from __future__ import annotations

import json
import re
import threading
import unicodedata
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_TOKEN = re.compile(r"[a-z0-9]+")
FAULTS = frozenset({"500", "non_json", "bad_index", "missing", "nan"})


def words(text: str) -> set[str]:
    folded = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return set(_TOKEN.findall(folded.lower()))


def fake_score(query: str, text: str) -> float:
    wanted = words(query)
    if not wanted:
        return -5.0
    return 10.0 * len(wanted & words(text)) / len(wanted) - 5.0


class FakeRerankServer:
    """``with FakeRerankServer() as s: s.url`` — a threaded HTTP server on 127.0.0.1."""

    def __init__(self, *, fault: str | None = None):
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        self.fault = fault
        self.calls = 0
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeRerankServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        with self._lock:
            self.calls += 1
            self.requests.append({"path": path, **body})
        if self.fault == "500":
            return 500, b'{"error": "boom"}'
        if self.fault == "non_json":
            return 200, b"<html>"
        query = str(body.get("query", ""))
        texts = body.get("texts") if path.endswith("/rerank") and "texts" in body else body.get("documents")
        if not isinstance(texts, list):
            return 422, b'{"error": "texts or documents must be a list"}'
        scores = [fake_score(query, str(t)) for t in texts]
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        items: list[dict[str, Any]] = []
        for i in order:
            index = len(texts) + 3 if self.fault == "bad_index" else i
            value: Any = "NaN" if self.fault == "nan" else scores[i]
            items.append({"index": index, "score": value} if "texts" in body
                         else {"index": index, "relevance_score": value})
        if self.fault == "missing":
            items = items[:-1]
        data: Any = items if "texts" in body else {"results": items}
        return 200, json.dumps(data).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = None
                if self.path not in ("/rerank", "/v1/rerank", "/v2/rerank") or not isinstance(body, dict):
                    status, payload = 404 if isinstance(body, dict) else 400, b'{"error": "bad request"}'
                else:
                    status, payload = server.answer(self.path, body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler
