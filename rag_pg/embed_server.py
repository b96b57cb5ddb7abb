"""``ragpg embed-server``: one embedding service for many clients, in two API shapes, with a cache.

Speaks the seed-000 contract (``GET /health``, ``POST /embed``) and OpenAI's
``POST /v1/embeddings``, and serves whatever provider it is given: the in-process model,
or any configured provider or chain (then it is a caching proxy). Identical texts are never
embedded twice while they stay in the LRU cache (keyed by type and SHA-256 of the text).
Standard library only (``ThreadingHTTPServer``): a plain ``pip install ragpg`` runs it.

Safety: loopback by default, a bearer token required to bind anywhere else (``/health``
stays open for probes), request size and texts per request capped before any work, at
most ``concurrency`` backend calls at once (others wait, then get 503 + Retry-After), and
a graceful stop: in-flight requests finish, new ones are refused, idle connections close.
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
import json
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import numpy.typing as npt

from .chunk import estimate_tokens
from .embed.base import EmbeddingProvider, EmbedType, check_request
from .embed.cache import VectorCache
from .errors import ConfigError, EmbeddingError

DEFAULT_MAX_TEXTS = 256
DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024
DEFAULT_CACHE_SIZE = 10_000
_INPUT_TYPES: dict[str, EmbedType] = {
    "query": "query", "search_query": "query",
    "passage": "passage", "document": "passage", "search_document": "passage",
}


class HttpProblem(Exception):
    """A request the server answers with an error status (never a traceback)."""

    def __init__(self, status: int, message: str, *, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = headers or {}


@dataclass
class ServerLimits:
    max_texts: int = DEFAULT_MAX_TEXTS
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    concurrency: int = 4
    queue_timeout: float = 30.0  # seconds a request waits for a backend slot before 503
    idle_timeout: float = 30.0  # seconds a keep-alive connection may stay silent


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class EmbedServer:
    """The service, started in background threads; ``with EmbedServer(provider) as s: s.url``."""

    def __init__(
        self,
        backend: EmbeddingProvider,
        *,
        host: str = "127.0.0.1",
        port: int = 8080,
        token: str | None = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
        limits: ServerLimits | None = None,
        default_type: EmbedType = "passage",
        verbose: bool = False,
    ) -> None:
        if backend.kind == "none":
            raise ConfigError("embed-server needs an embedding provider: none is configured")
        if not token and not is_loopback(host):
            raise ConfigError(
                f"binding to {host} exposes the service: set a token"
                " (RAGPG_EMBED_SERVER_TOKEN or --token) or bind to 127.0.0.1"
            )
        self.backend = backend
        self.host, self.port = host, port
        self.limits = limits or ServerLimits()
        self.cache = VectorCache(cache_size)
        self.default_type = default_type
        self.verbose = verbose
        self._token = token.encode() if token else None
        self._slots = threading.BoundedSemaphore(max(1, self.limits.concurrency))
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        self._stopping = threading.Event()
        self.counts = {"requests": 0, "texts": 0, "backend_calls": 0, "backend_texts": 0}
        self._health: tuple[float, dict[str, Any]] | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.model: str = ""
        self.dimension: int = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> EmbedServer:
        """Learn the backend's model (fails fast when it cannot say), bind, serve in a thread."""
        if self.backend.kind == "local":
            self.backend.health()  # load the model now: a broken install fails at start
        model, dimension = self.backend.model, self.backend.dimension
        if model is None or dimension is None:
            raise ConfigError("the embedding provider does not say its model and dimension")
        self.model, self.dimension = model, dimension
        try:
            self._server = _Server((self.host, self.port), self)
        except OSError as exc:
            raise ConfigError(
                f"embed-server cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
            name="ragpg-embed-server", daemon=True,
        )
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("EmbedServer is not started")
        host, port = self._server.server_address[:2]
        shown = str(host.decode() if isinstance(host, bytes) else host)
        return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"

    def stop(self, grace: float = 30.0) -> None:
        """Refuse new requests, let in-flight ones finish (up to ``grace`` s), close everything."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        server.shutdown()  # no new connections
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=grace)
        server.cut_connections()  # idle keep-alive connections
        server.server_close()  # joins the handler threads
        if thread is not None:
            thread.join()
        self._server = self._thread = None

    def __enter__(self) -> EmbedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the work -------------------------------------------------------------------------------

    def embed(self, type: EmbedType, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Vectors for ``texts``: cached ones reused, the others embedded once each."""
        keys = [VectorCache.key(type, t) for t in texts]
        found: dict[bytes, npt.NDArray[np.float32]] = {}
        missing: dict[bytes, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key in found or key in missing:
                continue
            vector = self.cache.get(key)
            if vector is None:
                missing[key] = text
            else:
                found[key] = vector
        if missing:
            if not self._slots.acquire(timeout=self.limits.queue_timeout):
                raise HttpProblem(503, "embed-server is busy: try again", code="busy",
                                  headers={"Retry-After": "1"})
            try:
                fresh = self.backend.embed(type, list(missing.values()))
            finally:
                self._slots.release()
            with self._lock:
                self.counts["backend_calls"] += 1
                self.counts["backend_texts"] += len(missing)
            for key, vector in zip(missing, fresh, strict=True):
                row = np.array(vector, dtype=np.float32)
                found[key] = row
                self.cache.put(key, row)
        return np.stack([found[key] for key in keys])

    def health(self) -> dict[str, Any]:
        """The backend's health, cached 5 s, so probes cannot hammer a remote provider."""
        now = time.monotonic()
        cached = self._health
        if cached is not None and now - cached[0] < 5.0:
            return cached[1]
        self.backend.health()
        answer = {"status": "ok", "model": self.model, "dim": self.dimension}
        self._health = (now, answer)
        return answer

    def authorised(self, header: str | None) -> bool:
        if self._token is None:
            return True
        if not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[7:].strip().encode(), self._token)

    def enter(self) -> bool:
        with self._lock:
            if self._stopping.is_set():
                return False
            self._in_flight += 1
            self.counts["requests"] += 1
            return True

    def leave(self) -> None:
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True

    def __init__(self, address: tuple[str, int], app: EmbedServer) -> None:
        self.app = app
        self.sockets: set[socket.socket] = set()
        self.sockets_lock = threading.Lock()
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.address_family = family
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # a client that went away
        super().handle_error(request, client_address)

    def cut_connections(self) -> None:
        with self.sockets_lock:
            sockets = list(self.sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ragpg-embed-server/1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.app.limits.idle_timeout)
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.sockets_lock:
            self.server.sockets.add(self.request)

    def finish(self) -> None:
        with self.server.sockets_lock:
            self.server.sockets.discard(self.request)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.app.verbose:  # the request line only: never a body or a header
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    # -- routes ---------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._serve(self._get)

    def do_POST(self) -> None:
        self._serve(self._post)

    def _serve(self, route: Any) -> None:
        app = self.server.app
        openai = self.path.split("?")[0].rstrip("/") == "/v1/embeddings"
        if not app.enter():
            self.close_connection = True
            self._problem(HttpProblem(503, "embed-server is shutting down", code="shutdown",
                                      headers={"Retry-After": "1"}), openai)
            return
        try:
            status, body = route()
            self._send(status, body)
        except HttpProblem as problem:
            self._problem(problem, openai)
        except EmbeddingError as exc:
            self._problem(_from_embedding_error(exc), openai)
        finally:
            app.leave()

    def _get(self) -> tuple[int, dict[str, Any]]:
        if self.path.split("?")[0].rstrip("/") != "/health":
            raise HttpProblem(404, "not found")
        return 200, self.server.app.health()

    def _post(self) -> tuple[int, dict[str, Any]]:
        path = self.path.split("?")[0].rstrip("/")
        if path not in ("/embed", "/v1/embeddings"):
            self._discard_body()
            raise HttpProblem(404, "not found")
        app = self.server.app
        if not app.authorised(self.headers.get("Authorization")):
            self._discard_body()
            raise HttpProblem(401, "missing or wrong bearer token", code="invalid_api_key",
                              headers={"WWW-Authenticate": "Bearer"})
        payload = self._json_body()
        return 200, (self._seed(payload) if path == "/embed" else self._openai(payload))

    def _seed(self, payload: dict[str, Any]) -> dict[str, Any]:
        kind, texts = payload.get("type"), payload.get("texts")
        self._check_texts(texts)
        assert isinstance(texts, list)
        if kind not in ("query", "passage"):
            raise HttpProblem(422, "type must be 'query' or 'passage'")
        encoding = payload.get("encoding", "float")
        if encoding not in ("float", "base64"):
            raise HttpProblem(422, "encoding must be 'float' or 'base64'")
        vectors = self._embed(kind, texts)
        app = self.server.app
        rows = [_base64(v) for v in vectors] if encoding == "base64" else vectors.tolist()
        return {"model": app.model, "dim": app.dimension, "vectors": rows}

    def _openai(self, payload: dict[str, Any]) -> dict[str, Any]:
        app = self.server.app
        model = payload.get("model")
        if model is not None and model != app.model:
            raise HttpProblem(404, f"model {str(model)[:200]!r} is not served here; this server"
                                   f" serves {app.model!r}", code="model_not_found")
        dimensions = payload.get("dimensions")
        if dimensions is not None and dimensions != app.dimension:
            raise HttpProblem(400, f"dimensions must be {app.dimension} for {app.model!r}")
        encoding = payload.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            raise HttpProblem(400, "encoding_format must be 'float' or 'base64'")
        texts = payload.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        self._check_texts(texts)
        assert isinstance(texts, list)
        kind, texts = self._input_type(payload.get("input_type"), texts)
        vectors = self._embed(kind, texts)
        data = [
            {"object": "embedding", "index": i,
             "embedding": _base64(v) if encoding == "base64" else v.tolist()}
            for i, v in enumerate(vectors)
        ]
        tokens = sum(estimate_tokens(t) for t in texts)
        return {"object": "list", "data": data, "model": app.model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    def _input_type(self, given: object, texts: list[str]) -> tuple[EmbedType, list[str]]:
        """OpenAI's shape has no type: ``input_type``, else the e5 prefix of the texts, else default.

        A leading ``query: ``/``passage: `` of the resolved type is stripped, since the model
        adds its own: a client configured with e5 prefixes (for TEI or vLLM) gets the same
        vectors here as through ``/embed``.
        """
        kind: EmbedType
        if given is not None:
            if not isinstance(given, str) or given not in _INPUT_TYPES:
                raise HttpProblem(400, "input_type must be query, passage or document")
            kind = _INPUT_TYPES[given]
        elif all(t.startswith("query: ") for t in texts):
            kind = "query"
        elif all(t.startswith("passage: ") for t in texts):
            kind = "passage"
        else:
            kind = self.server.app.default_type
        prefix = f"{kind}: "
        return kind, [t[len(prefix):] if t.startswith(prefix) else t for t in texts]

    # -- request plumbing -----------------------------------------------------------------------

    def _embed(self, kind: EmbedType, texts: list[str]) -> npt.NDArray[np.float32]:
        app = self.server.app
        try:
            check_request(kind, texts)
        except EmbeddingError as exc:
            raise HttpProblem(422, str(exc)) from None
        with app._lock:
            app.counts["texts"] += len(texts)
        return app.embed(kind, texts)

    def _check_texts(self, texts: object) -> None:
        limit = self.server.app.limits.max_texts
        if not isinstance(texts, list) or not texts:
            raise HttpProblem(422, "texts must be a non-empty list of strings")
        if len(texts) > limit:
            raise HttpProblem(413, f"too many texts ({len(texts)} > {limit}): send smaller"
                                   " batches (embedding.batch_size)", code="too_many_texts")
        if not all(isinstance(t, str) for t in texts):
            raise HttpProblem(422, "texts must be strings (token ids are not supported)")

    def _json_body(self) -> dict[str, Any]:
        limit = self.server.app.limits.max_request_bytes
        declared = self.headers.get("Content-Length")
        if declared is None or not declared.isdigit():
            self.close_connection = True
            raise HttpProblem(411, "a Content-Length is required")
        if int(declared) > limit:
            self.close_connection = True  # the body is never read
            raise HttpProblem(413, f"request of {declared} bytes exceeds the {limit}-byte cap")
        raw = self.rfile.read(int(declared))
        try:
            payload = json.loads(raw)
        except (ValueError, RecursionError):
            raise HttpProblem(400, "request body is not valid JSON") from None
        if not isinstance(payload, dict):
            raise HttpProblem(400, "request body must be a JSON object")
        return payload

    def _discard_body(self) -> None:
        declared = self.headers.get("Content-Length") or "0"
        limit = self.server.app.limits.max_request_bytes
        if declared.isdigit() and int(declared) <= limit:
            self.rfile.read(int(declared))
        else:
            self.close_connection = True

    def _problem(self, problem: HttpProblem, openai: bool) -> None:
        message = str(problem)
        if openai:
            body: dict[str, Any] = {"error": {"message": message, "type": _error_type(problem),
                                              "code": problem.code}}
        else:
            body = {"detail": message}
        self._send(problem.status, body, problem.headers)

    def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body, allow_nan=False).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True  # the client went away


def _base64(vector: npt.NDArray[np.float32]) -> str:
    """One vector as base64 of little-endian float32: what both APIs mean by "base64"."""
    return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")


def _from_embedding_error(exc: EmbeddingError) -> HttpProblem:
    """The backend's failure, as the status a client of this server should act on."""
    if exc.kind == "invalid_input":
        return HttpProblem(422, str(exc), code="invalid_input")
    if exc.kind == "malformed":
        return HttpProblem(502, f"the upstream embedding provider failed: {exc}", code="upstream")
    retry = getattr(exc, "retry_after", None)
    wait = str(max(1, int(retry + 0.999))) if isinstance(retry, int | float) else "1"
    return HttpProblem(503, str(exc), code="unavailable", headers={"Retry-After": wait})


def _error_type(problem: HttpProblem) -> str:
    if problem.status == 401:
        return "authentication_error"
    if problem.status >= 500:
        return "server_error"
    return "invalid_request_error"
