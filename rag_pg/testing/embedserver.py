"""A deterministic fake embedding service (ragpg's /embed contract and two others) with a fault plan."""

from __future__ import annotations

import argparse
import base64
import json
import signal
import threading
from typing import Any

import numpy as np

from rag_pg.testing.fake_http import FakeHandler, FakeHTTPServer
from rag_pg.testing.fakevector import fake_vector

__all__ = ["FAULTS", "FakeEmbeddingServer", "fake_vector"]

FAULTS = frozenset(
    {
        "500",
        "503",
        "422",
        "wrong_count",
        "wrong_dim",
        "nan",
        "zero",
        "non_json",
        "slow",
        "missing_vectors",
        "truncated",
        "redirect",
        "drip",
        "huge",
        "bad_base64",
        "odd_base64",
    }
)
# The same fake answers three API shapes, so every provider meets the same fault plan.
_SHAPES = {"/embed": "ragpg", "/v1/embeddings": "openai", "/api/embed": "ollama"}


class FakeEmbeddingServer:
    """An in-process embedding service on loopback whose answers and failures tests script.

    ::

        with FakeEmbeddingServer(dim=64) as server:
            provider = HttpEmbeddingProvider(server.url)
            server.fault = "503"          # every /embed now fails, until set back to None

    It answers ragpg's ``POST /embed``, OpenAI's ``POST /v1/embeddings`` and Ollama's
    ``POST /api/embed`` (those two must name ``model``, else 404), all under the same fault
    plan; ``details`` records each request's shape, model, first text and Authorization.
    Set ``fault`` (any time) to one of FAULTS, or to any 4xx/5xx code as a string; set
    ``poison`` to make batches holding that substring fail with ``poison_status`` (422 unless
    set: 400 and 413 are how other services refuse one input); set ``fail_next`` to
    fail the next N calls with 503. ``/embed`` answers base64 float32 rows when asked
    (``"encoding": "base64"``) unless ``honour_encoding`` is False (a server that ignores the
    field); ``bad_base64``/``odd_base64`` break the first row. Counters are thread-safe. For benchmarks or manual use:
    ``python -m rag_pg.testing.embedserver --port 8089 --dim 64``.
    """

    def __init__(
        self,
        *,
        dim: int = 64,
        model: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        delay: float = 0.0,
        verbose: bool = False,
    ) -> None:
        if dim <= 0:
            raise ValueError("dim must be positive")
        self.dim = dim
        self.model = model if model is not None else f"fake-bow-{dim}"
        self.host = host
        self.port = port
        self.delay = delay
        self.verbose = verbose
        self.fault_detail = "fake server refused the input"
        self.poison: str | None = None
        self.poison_status = 422
        self.fail_next = 0
        self.retry_after: str | None = None
        self.redirect_to = "/elsewhere"
        self.slow_seconds = 30.0
        self.drip_interval = 0.05
        self.huge_bytes = 80 * 1024 * 1024
        self.honour_encoding = True
        self.requests: list[dict[str, Any]] = []
        # Per request: API shape, model and dimensions asked, first text, Authorization and Host headers.
        self.details: list[dict[str, Any]] = []
        self._fault: str | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._calls = 0
        self._texts_embedded = 0
        self._health_calls = 0
        self._connections = 0
        self._server: FakeHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- configuration and counters -------------------------------------------------------------

    @property
    def fault(self) -> str | None:
        return self._fault

    @fault.setter
    def fault(self, value: str | None) -> None:
        if value is not None and value not in FAULTS and not _is_error_status(value):
            raise ValueError(
                f"unknown fault {value!r}: expected one of {sorted(FAULTS)} or 4xx/5xx"
            )
        self._fault = value

    @property
    def calls(self) -> int:
        """POST /embed requests received, whatever their outcome."""
        with self._lock:
            return self._calls

    @property
    def texts_embedded(self) -> int:
        """Texts answered with a vector (successful calls only)."""
        with self._lock:
            return self._texts_embedded

    @property
    def health_calls(self) -> int:
        """GET /health requests received."""
        with self._lock:
            return self._health_calls

    @property
    def connections(self) -> int:
        """TCP connections accepted: shows whether a client reuses its connections."""
        with self._lock:
            return self._connections

    def reset_counters(self) -> None:
        with self._lock:
            self._calls = 0
            self._texts_embedded = 0
            self._health_calls = 0
            self._connections = 0
            self.requests.clear()
            self.details.clear()

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self, f"_{name}", getattr(self, f"_{name}") + 1)

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeEmbeddingServer is not started")
        address = self._server.server_address
        host = address[0].decode() if isinstance(address[0], bytes) else str(address[0])
        port = address[1]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}"

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> FakeEmbeddingServer:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = FakeHTTPServer((self.host, self.port), self)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.01},
            name=f"fake-embed-{server.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, cut keep-alive connections, join every thread, close the socket."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.cut_connections()
        server.server_close()
        if thread is not None:
            thread.join()
        self._server = None
        self._thread = None

    def cut_connections(self) -> None:
        """Hang up every open connection, as a restarting service would: a client's idle
        keep-alive socket then reads as closed."""
        if self._server is not None:
            self._server.cut_connections()

    def __enter__(self) -> FakeEmbeddingServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- answers --------------------------------------------------------------------------------

    def connected(self) -> bool:
        self._count("connections")
        return not self._stopping.is_set()

    def answer_get(self, handler: FakeHandler, path: str) -> None:
        if path != "/health":
            handler.send_json(404, {"detail": "not found"})
            return
        self._count("health_calls")
        fault = self.fault
        if fault is not None and fault.isdigit() and fault != "422":
            handler.send_json(int(fault), {"detail": f"fault {fault}"})
            return
        handler.send_json(200, {"status": "ok", "model": self.model, "dim": self.dim})

    def answer_post(self, handler: FakeHandler, path: str, body: bytes) -> None:
        shape = _SHAPES.get(path)
        if shape is None:
            handler.send_json(404, {"detail": "not found"})
            return
        self._answer_embed(handler, body, shape)

    def _answer_embed(self, handler: FakeHandler, body: bytes, shape: str = "ragpg") -> None:
        with self._lock:
            self._calls += 1
            failing = self.fail_next > 0
            if failing:
                self.fail_next -= 1
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        data = payload if isinstance(payload, dict) else {}
        if shape == "ragpg":
            kind, texts = data.get("type"), data.get("texts")
        else:  # OpenAI and Ollama know no types; a lone string is one input
            kind, texts = "passage", data.get("input")
            texts = [texts] if isinstance(texts, str) else texts
        with self._lock:
            count = len(texts) if isinstance(texts, list) else None
            self.requests.append({"type": kind, "count": count})
            self.details.append(
                {
                    "shape": shape,
                    "model": data.get("model"),
                    "dimensions": data.get("dimensions"),
                    "first": texts[0] if isinstance(texts, list) and texts else None,
                    "encoding": data.get("encoding"),
                    "authorization": handler.headers.get("Authorization"),
                    "host": handler.headers.get("Host"),
                }
            )
        if self.delay > 0 and self._stopping.wait(self.delay):
            return
        fault = self._fault
        if failing:
            handler.send_json(503, _error_body(shape, "fail_next"))
            return
        if fault is not None and _is_error_status(fault) and fault != "422":
            extra = {"Retry-After": self.retry_after} if self.retry_after is not None else None
            handler.send_json(int(fault), _error_body(shape, f"fault {fault}"), headers=extra)
            return
        if fault == "redirect":
            handler.send_bytes(302, b"", headers={"Location": self.redirect_to})
            return
        if shape != "ragpg" and data.get("model") != self.model:
            handler.send_json(404, _error_body(shape, f"model {data.get('model')!r} not found"))
            return
        problem = _check_payload(kind, texts)
        if problem is not None:
            handler.send_json(422, _error_body(shape, problem))
            return
        assert isinstance(texts, list)
        if fault == "422":
            handler.send_json(422, _error_body(shape, self.fault_detail))
            return
        if self.poison is not None and any(self.poison in t for t in texts):
            handler.send_json(self.poison_status, _error_body(shape, "poison text"))
            return
        if fault == "slow" and self._stopping.wait(self.slow_seconds):
            return
        base64_rows = shape == "ragpg" and self.honour_encoding and data.get("encoding") == "base64"
        self._send_vectors(handler, texts, fault, shape, base64_rows=base64_rows)

    def _reply(self, vectors: list[Any], shape: str) -> dict[str, Any]:
        if shape == "openai":
            data = [
                {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
            ]
            return {"object": "list", "data": data, "model": self.model}
        if shape == "ollama":
            return {"model": self.model, "embeddings": vectors}
        return {"model": self.model, "dim": self.dim, "vectors": vectors}

    def _send_vectors(
        self, handler: FakeHandler, texts: list[str], fault: str | None, shape: str = "ragpg",
        *, base64_rows: bool = False,
    ) -> None:
        vectors = [fake_vector(t, self.dim).tolist() for t in texts]
        if fault == "wrong_count":
            vectors = vectors[:-1] if len(vectors) > 1 else vectors * 2
        elif fault == "wrong_dim":
            vectors = [v + [0.0] for v in vectors]
        elif fault == "nan":
            vectors[0][0] = float("nan")
        elif fault == "zero":
            vectors[0] = [0.0] * self.dim
        rows: list[Any] = vectors
        if base64_rows:
            rows = [_base64(v) for v in vectors]
            if fault == "bad_base64":
                rows[0] = "not base64!"
            elif fault == "odd_base64":
                whole = np.asarray(vectors[0], dtype="<f4").tobytes()
                rows[0] = base64.b64encode(whole[:-1]).decode("ascii")  # not whole float32s
        reply = self._reply(rows, shape)
        if fault == "missing_vectors":
            del reply[{"ragpg": "vectors", "openai": "data", "ollama": "embeddings"}[shape]]
        if fault == "non_json":
            handler.send_bytes(200, b"this is not JSON", content_type="text/plain")
            return
        if fault == "huge":
            self._send_huge(handler)
            return
        data = json.dumps(reply).encode("utf-8")
        if fault == "truncated":
            data = data[: max(1, len(data) // 2)]
        if fault == "drip":
            self._drip(handler, data)
            return
        if fault is None:  # counted before answering, so a client never sees a stale count
            with self._lock:
                self._texts_embedded += len(texts)
        handler.send_bytes(200, data)

    def _send_huge(self, handler: FakeHandler) -> None:
        """Announce a body over any sane cap; a careful client refuses it from the header."""
        handler.close_connection = True
        handler.send_bytes(200, b'{"vectors": [', length=self.huge_bytes)

    def _drip(self, handler: FakeHandler, data: bytes) -> None:
        """Send the body a few bytes at a time: each read is quick, the whole is not."""
        handler.send_bytes(200, b"", length=len(data))
        for i in range(0, len(data), 4):
            if self._stopping.wait(self.drip_interval):
                return
            handler.wfile.write(data[i : i + 4])
            handler.wfile.flush()


def _base64(vector: list[float]) -> str:
    """A vector as the contract's base64: little-endian float32 bytes."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def _error_body(shape: str, message: str) -> dict[str, Any]:
    """An error as each API spells it (FastAPI ``detail``, OpenAI ``error.message``, Ollama ``error``)."""
    if shape == "openai":
        return {"error": {"message": message, "type": "invalid_request_error"}}
    if shape == "ollama":
        return {"error": message}
    return {"detail": message}


def _is_error_status(value: str) -> bool:
    return len(value) == 3 and value.isdigit() and 400 <= int(value) <= 599


def _check_payload(kind: object, texts: object) -> str | None:
    """The 422 a real service would give, so the client's own checks can be tested."""
    if kind not in ("query", "passage"):
        return "type must be 'query' or 'passage'"
    if not isinstance(texts, list) or not texts:
        return "texts must be a non-empty list"
    if not all(isinstance(t, str) for t in texts):
        return "texts must be strings"
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the fake server in the foreground and print its URL."""
    parser = argparse.ArgumentParser(
        prog="python -m rag_pg.testing.embedserver", description=__doc__
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--model", default=None, help="model name (default fake-bow-DIM)")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds added to each /embed")
    parser.add_argument("--verbose", action="store_true", help="log each request on stderr")
    args = parser.parse_args(argv)
    server = FakeEmbeddingServer(
        dim=args.dim,
        model=args.model,
        host=args.host,
        port=args.port,
        delay=args.delay,
        verbose=args.verbose,
    )
    # Ctrl-C stops it even when its parent ignored SIGINT (a background job inherits that).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    server.start()
    try:  # from the start: a Ctrl-C right after the URL must still stop the server's threads
        print(server.url, flush=True)
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
