"""The HTTP side of the fake services: a threaded server whose handler hands requests over.

Standard library on purpose: the fakes must be able to answer what no real server would
(a body cut short, dripped byte by byte, a length announced and never sent), which needs
the raw socket a framework hides.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

_MAX_REQUEST_BYTES = 64 * 1024 * 1024


class FakeService(Protocol):
    """What a fake answers with; the handler only parses and writes."""

    verbose: bool

    def connected(self) -> bool:
        """Count a new connection; False when the service is stopping (then it is cut)."""
        ...

    def answer_get(self, handler: FakeHandler, path: str) -> None: ...

    def answer_post(self, handler: FakeHandler, path: str, body: bytes) -> None: ...


class FakeHTTPServer(ThreadingHTTPServer):
    """Joins its handler threads on close and can cut idle keep-alive connections."""

    daemon_threads = False
    block_on_close = True
    fake: FakeService

    def __init__(self, address: tuple[str, int], fake: FakeService) -> None:
        self.fake = fake
        self.open_sockets: set[socket.socket] = set()
        self.sockets_lock = threading.Lock()
        super().__init__(address, FakeHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (timeout tests) is expected; stay quiet about it."""
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return
        super().handle_error(request, client_address)

    def cut_connections(self) -> None:
        with self.sockets_lock:
            sockets = list(self.open_sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class FakeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ragpg-fake-embed/1"
    timeout = 60.0
    server: FakeHTTPServer

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without this, Nagle plus delayed ACK
        # adds ~40 ms to every answer and skews benchmarks.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.sockets_lock:
            self.server.open_sockets.add(self.request)
        if not self.server.fake.connected():  # accepted just before stop(): hang up now
            self.server.cut_connections()

    def finish(self) -> None:
        with self.server.sockets_lock:
            self.server.open_sockets.discard(self.request)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.fake.verbose:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def do_GET(self) -> None:
        self.server.fake.answer_get(self, self.path.split("?")[0].rstrip("/"))

    def do_POST(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        self.server.fake.answer_post(self, path, self._drain())

    def _drain(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_REQUEST_BYTES:
            self.close_connection = True
            return b""
        return self.rfile.read(length)

    def send_json(
        self, status: int, payload: object, headers: dict[str, str] | None = None
    ) -> None:
        self.send_bytes(status, json.dumps(payload).encode("utf-8"), headers=headers)

    def send_bytes(
        self,
        status: int,
        data: bytes,
        *,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        length: int | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
