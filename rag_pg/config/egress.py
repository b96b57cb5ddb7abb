"""Where ragpg's outbound HTTP may connect: a configured URL's host is resolved once per
request, every address it resolves to is checked, and the connection goes to an address that
was checked, never to a second lookup's answer.

Checking a name and then letting the HTTP library resolve it again would leave a gap: a DNS
server that answers a public address to the check and the cloud's metadata service to the
connect (DNS rebinding) would pass. So the embedding client's transport
(``rag_pg.embed.transport.GuardedTransport``) hands httpx the checked address itself, with the name kept as the ``Host`` header and as the TLS server name, so
virtual hosts and certificate checks see the name the user configured.

Always refused, unless a network of the allowlist holds them: link-local addresses (where
the cloud metadata services answer), the unspecified, multicast and reserved ranges.
Loopback and private addresses stay reachable by default: a local embedding service is the
common case. With an allowlist, only the hosts and networks it names are reachable.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rag_pg.errors import ConfigError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# host, port -> the addresses it resolves to, in the order to try them
Resolver = Callable[[str, int], Sequence[str]]

DENIED: tuple[IPNetwork, ...] = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8",           # "this network"; 0.0.0.0 reaches the local host
    "169.254.0.0/16",      # link-local: AWS, GCP and Azure metadata at 169.254.169.254
    "100.100.100.200/32",  # Alibaba Cloud's metadata service
    "224.0.0.0/4",         # multicast
    "240.0.0.0/4",         # reserved, and the broadcast address
    "::/128",              # unspecified
    "fe80::/10",           # link-local
    "fd00:ec2::254/128",   # AWS's metadata service over IPv6
    "ff00::/8",            # multicast
))


class EgressRefused(Exception):
    """The URL's host, or an address it resolves to, is not one ragpg may connect to.

    It never reaches a caller as such: the embedding client reports it as its service being
    unavailable (not retryable), configuration checks as a ``ConfigError``.
    """


def system_resolver(host: str, port: int) -> list[str]:
    """The system resolver's addresses for ``host``, in its order, without repeats."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def literal_address(host: str) -> IPAddress | None:
    """The address a host name written as a number stands for, as the system resolver reads
    it: dotted or not, in decimal, hex or octal (``2852039166``, ``0xa9fea9fe`` and
    ``169.254.43518`` are all 169.254.169.254); None for a name."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        pass
    if not host or any(c not in "0123456789abcdefABCDEFxX." for c in host):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def _canonical(address: IPAddress) -> IPAddress:
    # ::ffff:169.254.169.254 is the IPv4 address it maps, for the kernel and so for the check
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """The allowlist: host names (``api.openai.com``, ``*.example.com``), addresses and networks
    (``10.1.2.3``, ``10.0.0.0/8``). Empty: any host whose addresses are not denied."""

    allowed: tuple[str, ...] = ()
    setting: str = "embedding.allowed_hosts"  # the setting messages point at
    names: tuple[str, ...] = field(init=False, default=())
    networks: tuple[IPNetwork, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        names: list[str] = []
        networks: list[IPNetwork] = []
        for entry in self.allowed:
            text = entry.strip().lower().rstrip(".")
            try:
                networks.append(ipaddress.ip_network(text, strict=False))
                continue
            except ValueError:
                pass
            label = text.removeprefix("*.")
            if not label or "/" in label or "*" in label or any(c.isspace() for c in label):
                raise ConfigError(f"{self.setting}: {entry!r} is neither a host name, *.domain, an address nor a network")
            names.append(text)
        object.__setattr__(self, "names", tuple(names))
        object.__setattr__(self, "networks", tuple(networks))

    def _name_allowed(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return any(host == name or (name.startswith("*.") and host.endswith(name[1:]))
                   for name in self.names)

    def check_address(self, host: str, address: IPAddress, *, named: bool) -> None:
        """Refuse ``address`` (one of ``host``'s) unless this policy allows it."""
        address = _canonical(address)
        if any(address in network for network in self.networks):
            return
        subject = host if host == str(address) else f"{host} ({address})"
        if any(address in network for network in DENIED):
            raise EgressRefused(
                f"{subject} is a link-local, metadata or reserved address: refused"
                f" (list that address in {self.setting} to allow it)"
            )
        if self.allowed and not named:
            raise EgressRefused(f"{subject} is not in {self.setting}: refused")

    def addresses(self, host: str, port: int, resolve: Resolver = system_resolver) -> list[IPAddress]:
        """The addresses ``host`` may be reached at, in order; :class:`EgressRefused` if any of
        its addresses is refused (one bad answer is enough to distrust the name), OSError if
        it does not resolve."""
        literal = literal_address(host)
        if literal is not None:
            found = [literal]
            named = False
        else:
            named = self._name_allowed(host)
            found = [ipaddress.ip_address(a.split("%", 1)[0]) for a in resolve(host, port)]
            if not found:
                raise OSError(f"{host} resolves to no address") from None
        for address in found:
            self.check_address(host, address, named=named)
        return found

    def check_literal(self, host: str) -> None:
        """At configuration time: a URL whose host is an address is judged before any call."""
        address = literal_address(host)
        if address is None:
            return
        try:
            self.check_address(host, address, named=False)
        except EgressRefused as refused:
            raise ConfigError(f"{self.setting.partition('.')[0]}.url: {refused}") from None
