"""How one HTTP exchange travels: a lean HTTP/1.1 client for plain http, httpx for the rest.

A query embeds one short text, so the client's own cost per request is most of what the
embedding step adds to a search: httpx builds URL, cookie and request objects and runs h11
for every call (about 1 ms on a 2-core machine), ``http.client`` parses every answer's head
with the e-mail parser; :class:`PlainWire` writes a request in one go and reads the answer
with a few byte operations (a query's embedding on loopback: 0.70 ms, against 1.67 ms with
httpx). Plain ``http://`` services (an
embedding server on the same host or network, the usual case) go through it; https (TLS
and certificates, which httpx does well) and an injected httpx transport (tests'
``MockTransport``) go through :class:`HttpxWire`. Both report failures as one
:class:`WireError` kind, so :class:`~rag_pg.embed.transport.JsonService` classifies them once.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Literal, Protocol

import httpx

#: what went wrong, as JsonService words it: ``timeout`` (the deadline passed), ``unreachable``
#: (no answer could be had), ``failed`` (the exchange broke otherwise), ``dropped`` (the body was
#: cut off), ``undecodable`` (the body cannot be decoded).
WireFailure = Literal["timeout", "unreachable", "failed", "dropped", "undecodable"]

_READ_SIZE = 64 * 1024
_MAX_IDLE = 32
_MAX_LINE = 64 * 1024
_MAX_FIELDS = 100
_MAX_INTERIM = 10
_UNSAFE = re.compile(r"[\r\n\0]")


class WireError(Exception):
    """One failed exchange, already described in words safe to show once scrubbed."""

    def __init__(self, failure: WireFailure, description: str = "") -> None:
        super().__init__(description or failure)
        self.failure: WireFailure = failure
        self.description = description


class Exchange(Protocol):
    """A response whose status and headers are known and whose body is still to be read."""

    status: int

    def header(self, name: str) -> str | None: ...

    def chunks(self, deadline: float) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class Wire(Protocol):
    def send(
        self, method: str, url: httpx.URL, body: bytes | None, headers: Mapping[str, str],
        deadline: float,
    ) -> Exchange: ...

    def close(self) -> None: ...


def open_wire(url: httpx.URL, transport: httpx.BaseTransport | None) -> Wire:
    """The cheapest wire able to carry requests to ``url``."""
    if transport is None and url.scheme == "http":
        return PlainWire(url.raw_host.decode("ascii"), url.port or 80)
    return HttpxWire(transport)


def describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise WireError("timeout")
    return left


# -- plain HTTP/1.1 -------------------------------------------------------------------------------


class _BadResponse(Exception):
    """The answer does not parse as HTTP/1.x."""


class _Closed(Exception):
    """The server closed the connection before its answer began."""


# A reused keep-alive socket the server has closed in the meantime fails with one of these
# before any answer: the request is sent again, once, on a fresh connection.
_STALE = (_Closed, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class _Socket:
    """One TCP connection and its buffered reader, kept alive between exchanges."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        try:
            # As every HTTP client does: a small write never waits on the peer's delayed ACK.
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.reader = self.sock.makefile("rb")
        except OSError:
            self.sock.close()
            raise

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


class PlainWire:
    """HTTP/1.1 over kept-alive sockets to one host, shared by any number of threads.

    The request is one write (head and body together); the answer's head is parsed with a
    few byte operations instead of ``http.client``'s e-mail parser. Bodies are framed by Content-Length, chunked encoding or the
    end of the connection (RFC 9112 §6.3), 1xx interim answers are skipped. A thread takes an
    idle connection (or opens one) for one exchange and gives it back once the body is read
    to its end; a connection whose body was not read whole, or that the server will close,
    is closed instead, so a reused socket never holds a stale answer.
    """

    def __init__(self, host: str, port: int) -> None:
        self._address = (host, port)
        self._idle: list[_Socket] = []
        self._lock = threading.Lock()
        self._closed = False

    def send(
        self, method: str, url: httpx.URL, body: bytes | None, headers: Mapping[str, str],
        deadline: float,
    ) -> Exchange:
        request = _request_bytes(method, url, body, headers)
        for attempt in (1, 2):
            conn, reused = self._take(deadline)
            try:
                conn.sock.settimeout(_remaining(deadline))
                conn.sock.sendall(request)
                status, fields, version = _read_head(conn, deadline)
            except TimeoutError:
                conn.close()
                raise WireError("timeout") from None
            except _STALE as exc:
                conn.close()
                if reused and attempt == 1:
                    continue
                said = str(exc) if isinstance(exc, _Closed) else describe(exc)
                raise WireError("unreachable", said) from None
            except OSError as exc:
                conn.close()
                raise WireError("unreachable", describe(exc)) from None
            except _BadResponse as exc:
                conn.close()
                raise WireError("failed", str(exc)) from None
            except BaseException:
                conn.close()
                raise
            return _PlainExchange(self, conn, method, status, fields, version)
        raise AssertionError("unreachable: the second attempt returns or raises")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _take(self, deadline: float) -> tuple[_Socket, bool]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is not None:
            return conn, True
        try:
            return _Socket(*self._address, timeout=_remaining(deadline)), False
        except TimeoutError:
            raise WireError("timeout") from None
        except OSError as exc:
            raise WireError("unreachable", describe(exc)) from None

    def _give_back(self, conn: _Socket) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()


def _request_bytes(
    method: str, url: httpx.URL, body: bytes | None, headers: Mapping[str, str]
) -> bytes:
    lines = [f"{method} {url.raw_path.decode('ascii')} HTTP/1.1", f"Host: {url.netloc.decode('ascii')}"]
    for name, value in headers.items():
        if _UNSAFE.search(name) or _UNSAFE.search(value):  # no header injection, ever
            raise WireError("failed", f"header {name.strip()!r} holds a line break")
        lines.append(f"{name}: {value}")
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body or b'')}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def _read_head(conn: _Socket, deadline: float) -> tuple[int, dict[str, str], bytes]:
    """Status, header fields (names lower-cased, repeats joined) and version of one answer."""
    for interim in range(_MAX_INTERIM + 1):
        line = _line(conn, deadline)
        if not line:
            if interim == 0:
                raise _Closed("the server closed the connection without answering")
            raise _BadResponse("the answer ended inside its head")
        parts = line.split(None, 2)
        if (len(line) > _MAX_LINE or len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0")
                or len(parts[1]) != 3 or not parts[1].isdigit()):
            raise _BadResponse("the answer does not start with an HTTP/1.x status line")
        status = int(parts[1])
        fields = _read_fields(conn, deadline)
        if not (100 <= status < 200 and status != 101):
            return status, fields, parts[0]
        # an interim answer (100 Continue, 103 Early Hints): the real one follows
    raise _BadResponse(f"more than {_MAX_INTERIM} interim answers")


def _read_fields(conn: _Socket, deadline: float) -> dict[str, str]:
    fields: dict[str, str] = {}
    for _ in range(_MAX_FIELDS):
        line = _line(conn, deadline)
        if line in (b"\r\n", b"\n"):
            return fields
        name, sep, value = line.partition(b":")
        if not line or len(line) > _MAX_LINE or not sep or not name or name != name.strip():
            raise _BadResponse("the answer's head holds a malformed header line")
        key = name.decode("latin-1").lower()
        text = value.strip().decode("latin-1")
        fields[key] = f"{fields[key]}, {text}" if key in fields else text
    raise _BadResponse(f"the answer's head holds more than {_MAX_FIELDS} header lines")


def _line(conn: _Socket, deadline: float, limit: int = _MAX_LINE + 1) -> bytes:
    """One line of the answer, each read bounded by what is left of the deadline."""
    conn.sock.settimeout(_remaining(deadline))
    return conn.reader.readline(limit)


class _PlainExchange:
    def __init__(
        self, wire: PlainWire, conn: _Socket, method: str, status: int, fields: dict[str, str],
        version: bytes,
    ) -> None:
        self._wire = wire
        self._conn: _Socket | None = conn
        self._fields = fields
        self.status = status
        tokens = {t.strip().lower() for t in fields.get("connection", "").split(",")}
        self._reusable = version == b"HTTP/1.1" and "close" not in tokens
        self._complete = False
        # Body framing, RFC 9112 §6.3: none, chunked, Content-Length, or until the close.
        self._length: int | None = None
        self._chunked = False
        coding = fields.get("transfer-encoding")
        if method == "HEAD" or status in (204, 304):
            self._length = 0
        elif coding is not None:
            self._chunked = coding.rsplit(",", 1)[-1].strip().lower() == "chunked"
        elif "content-length" in fields:
            values = {v.strip() for v in fields["content-length"].split(",")}
            value = values.pop() if len(values) == 1 else ""
            self._length = int(value) if value.isdigit() else -1
        if not self._chunked and self._length is None:
            self._reusable = False  # the body ends when the server closes

    def header(self, name: str) -> str | None:
        return self._fields.get(name.lower())

    def chunks(self, deadline: float) -> Iterator[bytes]:
        conn = self._conn
        if conn is None:
            raise WireError("dropped", "the answer was already closed")
        encoding = self._fields.get("content-encoding", "identity").strip().lower()
        if encoding != "identity":  # never asked for (Accept-Encoding: identity)
            raise WireError("undecodable", f"unrequested Content-Encoding {encoding!r}")
        if self._length is not None and self._length < 0:
            raise WireError("failed", "the answer's Content-Length is not a number")
        try:
            if self._chunked:
                yield from self._chunked_body(conn, deadline)
            else:
                yield from _read(conn, self._length, deadline)
        except TimeoutError:
            raise WireError("timeout") from None
        except _BadResponse as exc:
            raise WireError("dropped", str(exc)) from None
        except OSError as exc:
            raise WireError("dropped", describe(exc)) from None
        self._complete = True

    def _chunked_body(self, conn: _Socket, deadline: float) -> Iterator[bytes]:
        while True:
            line = _line(conn, deadline)
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                size = -1
            if not line.endswith(b"\n") or size < 0 or not size_text.isalnum():
                raise _BadResponse("the chunked body is cut off or malformed")
            if size == 0:
                _read_fields(conn, deadline)  # trailer fields, unused
                return
            yield from _read(conn, size, deadline)
            if _line(conn, deadline, 3) not in (b"\r\n", b"\n"):
                raise _BadResponse("a chunk of the body does not end where its size says")

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._complete and self._reusable:
            self._wire._give_back(conn)
        else:
            conn.close()


def _read(conn: _Socket, length: int | None, deadline: float) -> Iterator[bytes]:
    """``length`` bytes of the body (None: up to the close), as they arrive."""
    left = length
    while left is None or left > 0:
        conn.sock.settimeout(_remaining(deadline))
        data = conn.reader.read1(_READ_SIZE if left is None else min(left, _READ_SIZE))
        if not data:
            if left is None:
                return
            raise _BadResponse(f"the body ended {left} bytes early")
        if left is not None:
            left -= len(data)
        yield data


# -- httpx ----------------------------------------------------------------------------------------


class HttpxWire:
    """One shared ``httpx.Client`` (thread-safe, pooled): for https and injected transports."""

    def __init__(self, transport: httpx.BaseTransport | None) -> None:
        # trust_env=False: no proxy or netrc read from the environment behind our back.
        self._client = httpx.Client(transport=transport, follow_redirects=False, trust_env=False)

    def send(
        self, method: str, url: httpx.URL, body: bytes | None, headers: Mapping[str, str],
        deadline: float,
    ) -> Exchange:
        timeout = httpx.Timeout(_remaining(deadline))
        try:
            request = self._client.build_request(
                method, url, content=body, headers=headers, timeout=timeout
            )
            response = self._client.send(request, stream=True)
        except httpx.TimeoutException:
            raise WireError("timeout") from None
        except httpx.TransportError as exc:
            raise WireError("unreachable", describe(exc)) from None
        except httpx.HTTPError as exc:
            raise WireError("failed", describe(exc)) from None
        return _HttpxExchange(response)

    def close(self) -> None:
        self._client.close()


class _HttpxExchange:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code

    def header(self, name: str) -> str | None:
        value: str | None = self._response.headers.get(name)
        return value

    def chunks(self, deadline: float) -> Iterator[bytes]:
        try:
            for chunk in self._response.iter_bytes():
                yield chunk
                _remaining(deadline)
        except httpx.TimeoutException:
            raise WireError("timeout") from None
        except httpx.DecodingError:
            raise WireError("undecodable") from None
        except httpx.TransportError as exc:
            raise WireError("dropped", describe(exc)) from None

    def close(self) -> None:
        self._response.close()
