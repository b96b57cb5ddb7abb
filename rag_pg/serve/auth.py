"""Who may call the service and where it may listen: the bearer token and the bind address.

Why strict: the index is private by default. A token short enough to guess is refused at
startup, the comparison is constant-time, and listening beyond loopback needs a token.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket

from rag_pg.errors import ConfigError
from rag_pg.serve.rules import check_text

MIN_TOKEN_CHARS = 16



def check_token(token: str | None) -> str | None:
    """The configured token, or None; a token too short to resist guessing is refused."""
    if token is None or token == "":
        return None
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"server.token must be at least {MIN_TOKEN_CHARS} characters"
            " (generate one: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    check_text("server.token", token)
    return token


def token_matches(header: str | None, token: str) -> bool:
    """Check an ``Authorization`` header in constant time (hmac.compare_digest on bytes)."""
    scheme, _, given = (header or "").partition(" ")
    ok_scheme = scheme.lower() == "bearer"
    try:
        given_bytes = given.strip().encode("utf-8")
    except UnicodeEncodeError:
        given_bytes = b""
    return hmac.compare_digest(given_bytes, token.encode("utf-8")) and ok_scheme


def is_loopback(host: str) -> bool:
    """True when every address ``host`` names is a loopback one (fails closed)."""
    name = host.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(name, None)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses)


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen beyond this machine without a token: the index is private by default."""
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host} without a token: set server.token (or RAGPG_SERVER_TOKEN),"
            " or bind to 127.0.0.1"
        )



__all__ = ["MIN_TOKEN_CHARS", "check_bind", "check_token", "is_loopback", "token_matches"]
