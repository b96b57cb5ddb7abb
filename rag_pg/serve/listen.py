"""The listening socket of a server ragpg runs (``ragpg serve``, ``ragpg embed-server``)."""

from __future__ import annotations

import socket

from rag_pg.errors import ConfigError


def listen(host: str, port: int, *, who: str = "ragpg", backlog: int = 2048) -> socket.socket:
    """Bind and listen before uvicorn serves on the socket, so ``--port 0`` can report the
    port it got and a port already taken is one clear line, not a traceback."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigError(f"{who} cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"{who} cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock
