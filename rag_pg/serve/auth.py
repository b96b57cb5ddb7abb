"""Who may call the service and where it may listen: the bearer tokens and the bind address.

Why strict: the index is private by default. A token short enough to guess is refused at
startup, the comparison is constant-time, and listening beyond loopback needs a token.

A service may have one token (``server.token``) or several callers (``[[server.clients]]``),
each known by its own token and reading as its own tenant and principals: the token decides
who a request acts as, never its body.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from rag_pg.config import Settings, client_token
from rag_pg.errors import ConfigError
from rag_pg.serve.rules import check_text
from rag_pg.store import permissions, tenancy

MIN_TOKEN_CHARS = 16


def check_token(token: str | None, where: str = "server.token") -> str | None:
    """The configured token, or None; a token too short to resist guessing is refused."""
    if token is None or token == "":
        return None
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"{where} must be at least {MIN_TOKEN_CHARS} characters"
            " (generate one: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    check_text(where, token)
    return token


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a token stands for: its name (in the request log), its tenant and principals (None:
    the server's own, ``tenancy.tenant`` and ``permissions.principals``)."""

    name: str
    tenant: str | None = None
    principals: tuple[str, ...] | None = None

    @contextmanager
    def acting(self) -> Iterator[None]:
        """The block reads as this caller (what it names; the rest stays the server's)."""
        with ExitStack() as stack:
            if self.tenant is not None:
                stack.enter_context(tenancy.acting_for(self.tenant))
            if self.principals is not None:
                stack.enter_context(permissions.acting_as(self.principals))
            yield


def callers(settings: Settings) -> dict[str, Caller]:
    """Each accepted token and who it stands for; empty: the service is open (loopback only).

    A client's token is read from the variable it names; each is checked like
    ``server.token``, and two callers with one token are refused (a request would not say
    which of them it is)."""
    found: dict[str, Caller] = {}
    token = check_token(settings.server.token)
    if token is not None:
        found[token] = Caller("default")
    for client in settings.server.clients:
        where = f"server.clients[{client.name!r}]"
        value = client_token(client)
        if value is None:
            raise ConfigError(f"{where}: the variable {client.token_env} is unset or empty")
        checked = check_token(value, where=f"{where} token")
        assert checked is not None
        if checked in found:
            raise ConfigError(f"{where}: its token is also {found[checked].name!r}'s")
        if client.tenant is not None and not settings.tenancy.enabled:
            raise ConfigError(f"{where}: names a tenant but tenancy.enabled is false")
        found[checked] = Caller(client.name, client.tenant, client.principals)
    return found


def caller_of(header: str | None, known: Mapping[str, Caller]) -> Caller | None:
    """The caller whose token the ``Authorization`` header carries, else None; every token is
    compared, in constant time, whichever matches."""
    match = None
    for token, caller in known.items():
        if token_matches(header, token):
            match = caller
    return match


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



__all__ = ["MIN_TOKEN_CHARS", "Caller", "caller_of", "callers", "check_bind", "check_token",
           "is_loopback", "token_matches"]
