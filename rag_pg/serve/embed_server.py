"""``ragpg embed-server``: one embedding service for many clients, in two API shapes, with a cache.

Speaks ragpg's own contract (``GET /health``, ``POST /embed``) and OpenAI's
(``POST /v1/embeddings``, ``GET /v1/models``), and serves whatever provider it is given: the
in-process model, or any configured provider or chain (then it is a caching proxy).
Identical texts are never embedded twice while they stay in the LRU cache (keyed by type
and SHA-256 of the text). The HTTP side is FastAPI on uvicorn, as for ``ragpg serve``
(routes in :mod:`rag_pg.serve.embed_app`); this module holds the service itself and its
lifecycle.

Safety: loopback by default, a bearer token required to bind anywhere else (``/health``
stays open for probes), request size and texts per request capped before any work, at
most ``concurrency`` model calls at once (a request waits ``queue_timeout`` for one, and
when ``max_waiting`` already wait it gets 503 + Retry-After at once), and a graceful stop
that lets requests in flight finish for at most ``grace`` seconds.
"""

from __future__ import annotations

import hmac
import ipaddress
import math
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import uvicorn

from rag_pg.embed.base import EmbeddingProvider, EmbedType
from rag_pg.embed.cache import VectorCache
from rag_pg.errors import ConfigError
from rag_pg.serve.embed_app import HttpProblem, ServerLimits, busy, create_app
from rag_pg.serve.listen import listen

__all__ = ["EmbedServer", "HttpProblem", "ServerLimits", "VectorCache", "is_loopback"]

DEFAULT_CACHE_SIZE = 10_000
_HEALTH_TTL = 5.0


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class EmbedServer:
    """The service; ``with EmbedServer(provider, port=0) as s: s.url`` serves it in a thread."""

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
        self._admitted = 0  # requests between admission and answer (event loop only)
        self.counts = {"requests": 0, "texts": 0, "backend_calls": 0, "backend_texts": 0}
        self._health: tuple[float, dict[str, Any]] | None = None
        self._uvicorn: uvicorn.Server | None = None
        self._socket: socket.socket | None = None
        self._url: str | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop_asked = False
        self.model: str = ""
        self.dimension: int = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> EmbedServer:
        """Learn the backend's model, bind, serve in a background thread once the app is up."""
        server = self._prepare()
        thread = threading.Thread(target=self._run, args=(server,), name="ragpg-embed-server",
                                  daemon=True)
        self._thread = thread
        thread.start()
        while not self._ready.wait(0.05):  # the app's startup sets it; a crash ends the thread
            if not thread.is_alive():
                self._close_socket()
                raise ConfigError("embed-server stopped while starting")
        return self

    def serve(self, *, announce: Callable[[], None], on_signal: Callable[[], None]) -> None:
        """Serve in this (main) thread until SIGINT/SIGTERM; ``announce`` runs once listening."""
        server = self._prepare(on_signal=on_signal)
        announce()
        self._run(server)

    @property
    def url(self) -> str:
        """Where it listens (``--port 0`` resolved); still known after a stop."""
        if self._url is None:
            raise RuntimeError("EmbedServer is not started")
        return self._url

    def stop_soon(self) -> None:
        """Ask the server to stop (from a signal handler: returns at once, even mid-startup)."""
        self._stop_asked = True
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True

    def stop(self, grace: float | None = None) -> None:
        """Refuse new connections, let requests in flight finish (up to ``grace`` s), close."""
        server, thread = self._uvicorn, self._thread
        if server is None:
            return
        if grace is not None:
            server.config.timeout_graceful_shutdown = math.ceil(max(0.0, grace))
        server.should_exit = True
        if thread is not None:
            thread.join()
        self._uvicorn = self._thread = None

    def __enter__(self) -> EmbedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _prepare(self, on_signal: Callable[[], None] | None = None) -> uvicorn.Server:
        if self.backend.kind == "local":
            self.backend.health()  # load the model now: a broken install fails at start
        model, dimension = self.backend.model, self.backend.dimension
        if model is None or dimension is None:
            raise ConfigError("the embedding provider does not say its model and dimension")
        self.model, self.dimension = model, dimension
        self._socket = listen(self.host, self.port, who="embed-server", backlog=1024)
        host, port = self._socket.getsockname()[:2]
        self._url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
        config = uvicorn.Config(
            create_app(self, ready=self._ready.set), log_config=None, access_log=False,
            server_header=False, proxy_headers=False, lifespan="on",
            timeout_keep_alive=math.ceil(max(1.0, self.limits.idle_timeout)),
            timeout_graceful_shutdown=math.ceil(max(0.0, self.limits.grace)),
        )
        self._uvicorn = _Uvicorn(config, on_signal)
        self._uvicorn.should_exit = self._stop_asked
        return self._uvicorn

    def _run(self, server: uvicorn.Server) -> None:
        assert self._socket is not None
        try:
            server.run(sockets=[self._socket])
        finally:
            self._close_socket()

    def _close_socket(self) -> None:
        sock = self._socket
        if sock is not None:
            sock.close()

    # -- the work -------------------------------------------------------------------------------

    def admit(self) -> bool:
        """Count one more request in (event loop only); False: too many wait already, say 503."""
        if self._admitted >= max(1, self.limits.concurrency) + max(0, self.limits.max_waiting):
            return False
        self._admitted += 1
        self.counts["requests"] += 1
        return True

    def release(self) -> None:
        self._admitted -= 1

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
        with self._lock:
            self.counts["texts"] += len(texts)
        if missing:
            if not self._slots.acquire(timeout=self.limits.queue_timeout):
                raise busy()
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

    def cached_health(self) -> dict[str, Any] | None:
        """The last health answer while it is fresh (a few seconds), else None."""
        cached = self._health
        if cached is not None and time.monotonic() - cached[0] < _HEALTH_TTL:
            return cached[1]
        return None

    def health(self) -> dict[str, Any]:
        """The backend's health, cached a few seconds, so probes cannot hammer a remote provider."""
        cached = self.cached_health()
        if cached is not None:
            return cached
        now = time.monotonic()
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


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, telling the command when a signal asks it to stop."""

    def __init__(self, config: uvicorn.Config, on_signal: Callable[[], None] | None) -> None:
        super().__init__(config)
        self._on_signal = on_signal

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self._on_signal is not None and not self.should_exit:
            self._on_signal()
        super().handle_exit(sig, frame)


