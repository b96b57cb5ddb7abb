"""G4: where an embedding URL may lead. Metadata and link-local addresses are refused, an
allowlist keeps every other host out, and the address checked is the address connected to (a
name that resolves elsewhere on its second lookup reaches nothing). Only loopback is ever
connected to: the resolver is a stub, and refused addresses are never tried."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Sequence

import pytest

from rag_pg import Settings
from rag_pg.config.egress import EgressPolicy, EgressRefused
from rag_pg.embed import HttpEmbeddingProvider, make_provider
from rag_pg.embed.transport import GuardedTransport
from rag_pg.errors import ConfigError, EmbeddingError
from rag_pg.testing.embedserver import FakeEmbeddingServer

FORBIDDEN = ["169.254.169.254", "::ffff:169.254.169.254", "fe80::1", "0.0.0.0", "100.100.100.200",
             "fd00:ec2::254", "224.0.0.1", "255.255.255.255", "::"]


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


class StubResolver:
    """Answers each lookup of a name with the next of its answers, and counts the lookups."""

    def __init__(self, *answers: Sequence[str]) -> None:
        self.answers = list(answers)
        self.lookups: list[str] = []

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.lookups.append(host)
        return self.answers[min(len(self.lookups), len(self.answers)) - 1]


@pytest.mark.parametrize("address", FORBIDDEN)
def test_metadata_link_local_and_reserved_addresses_are_refused(address):
    with pytest.raises(EgressRefused, match="link-local, metadata or reserved"):
        EgressPolicy().check_address(address, ip(address), named=False)


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "10.1.2.3", "192.168.1.20", "8.8.8.8"])
def test_loopback_private_and_public_addresses_are_reachable_by_default(address):
    EgressPolicy().check_address(address, ip(address), named=False)


def test_an_allowlist_admits_what_it_names_and_nothing_else():
    policy = EgressPolicy(("api.example.com", "*.internal.example", "10.0.0.0/8"))
    policy.check_address("api.example.com", ip("93.184.216.34"), named=True)
    assert policy.addresses("tei.internal.example", 80, StubResolver(["192.168.9.9"])) == [ip("192.168.9.9")]
    assert policy.addresses("10.2.3.4", 80) == [ip("10.2.3.4")]
    with pytest.raises(EgressRefused, match="not in embedding.allowed_hosts"):
        policy.addresses("192.168.1.20", 80)
    with pytest.raises(EgressRefused, match="not in embedding.allowed_hosts"):
        policy.addresses("elsewhere.example", 80, StubResolver(["8.8.8.8"]))
    with pytest.raises(EgressRefused, match="not in embedding.allowed_hosts"):
        policy.addresses("127.0.0.1", 80)  # with an allowlist, loopback too must be listed


def test_a_name_that_resolves_to_the_metadata_service_is_refused_even_when_allowed():
    policy = EgressPolicy(("api.example.com",))
    with pytest.raises(EgressRefused, match=r"api\.example\.com \(169\.254\.169\.254\)"):
        policy.addresses("api.example.com", 443, StubResolver(["93.184.216.34", "169.254.169.254"]))


def test_only_a_listed_network_opens_a_denied_address():
    EgressPolicy(("169.254.169.254/32",)).check_address("169.254.169.254", ip("169.254.169.254"), named=False)
    with pytest.raises(EgressRefused):
        EgressPolicy(("169.254.1.1",)).check_address("169.254.169.254", ip("169.254.169.254"), named=False)


@pytest.mark.parametrize("entry", ["", "a b", "*.", "http://x/y", "x*y"])
def test_an_entry_that_is_no_host_nor_network_is_a_configuration_error(entry):
    with pytest.raises(ConfigError, match="allowed_hosts"):
        Settings.load(environ={}, overrides={"embedding.allowed_hosts": (entry,)})


def test_the_setting_is_read_from_the_environment_as_a_list():
    settings = Settings.load(environ={"RAGPG_EMBEDDING_ALLOWED_HOSTS": "api.example.com, 10.0.0.0/8"})
    assert settings.embedding.allowed_hosts == ("api.example.com", "10.0.0.0/8")


@pytest.mark.parametrize("url", ["http://169.254.169.254/", "http://[fd00:ec2::254]:80", "http://0.0.0.0:8000"])
def test_a_configured_metadata_url_is_refused_before_any_request(url):
    settings = Settings.load(environ={}, overrides={"embedding.url": url})
    with pytest.raises(ConfigError, match=r"^embedding\.url: .*link-local, metadata or reserved"):
        make_provider(settings.embedding)


@pytest.fixture
def front_and_internal() -> Iterator[tuple[FakeEmbeddingServer, FakeEmbeddingServer]]:
    """The embedding service on 127.0.0.2 and an "internal" service on 127.0.0.3, same port."""
    with FakeEmbeddingServer(dim=8, host="127.0.0.2") as front:
        port = int(front.url.rsplit(":", 1)[1])
        with FakeEmbeddingServer(dim=8, host="127.0.0.3", port=port) as internal:
            yield front, internal


def test_the_checked_address_is_the_one_connected_to_and_a_rebinding_reaches_nothing(front_and_internal, figure):
    front, internal = front_and_internal
    port = int(front.url.rsplit(":", 1)[1])
    policy = EgressPolicy(("127.0.0.2",))
    # embed.test exists in no DNS: the call can only succeed by connecting to the stub's answer.
    resolver = StubResolver(["127.0.0.2"], ["127.0.0.3"])
    url = f"http://embed.test:{port}"
    with HttpEmbeddingProvider(url, egress=policy, transport=GuardedTransport(policy, resolve=resolver)) as provider:
        assert len(provider.embed("query", ["premier appel"])) == 1
        requests_before = len(resolver.lookups)
        assert front.details[-1]["host"] == f"embed.test:{port}"  # the name, not the address
        with pytest.raises(EmbeddingError, match=r"was not called: embed\.test \(127\.0\.0\.3\) is not in") as caught:
            provider.embed("query", ["second appel"])
    assert caught.value.kind == "unavailable"
    assert "\n" not in str(caught.value)
    assert len(resolver.lookups) == requests_before + 1  # one lookup per request: no second one
    assert (internal.calls, internal.health_calls, internal.connections) == (0, 0, 0)
    figure("G4", "forbidden targets tried: 9 addresses, 3 configured URLs, 1 rebinding name;"
                 " requests reaching them = 0", forbidden=len(FORBIDDEN) + 3 + 1, reached=0)


def test_an_allowed_name_whose_lookup_answers_the_metadata_service_is_never_connected(front_and_internal):
    front, _ = front_and_internal
    port = int(front.url.rsplit(":", 1)[1])
    policy = EgressPolicy()
    resolver = StubResolver(["169.254.169.254"])
    with HttpEmbeddingProvider(f"http://embed.test:{port}", egress=policy,
                               transport=GuardedTransport(policy, resolve=resolver)) as provider:
        with pytest.raises(EmbeddingError, match="link-local, metadata or reserved") as caught:
            provider.embed("query", ["x"])
    assert caught.value.kind == "unavailable" and not getattr(caught.value, "retryable", True)
    assert resolver.lookups == ["embed.test"]  # refused once, not retried
    assert front.calls == 0


def test_the_next_address_is_tried_when_the_first_cannot_be_connected_to(front_and_internal):
    front, _ = front_and_internal
    port = int(front.url.rsplit(":", 1)[1])
    policy = EgressPolicy()
    resolver = StubResolver(["127.0.0.4", "127.0.0.2"])  # nothing listens on 127.0.0.4
    with HttpEmbeddingProvider(f"http://embed.test:{port}", egress=policy,
                               transport=GuardedTransport(policy, resolve=resolver)) as provider:
        assert len(provider.embed("query", ["x"])) == 1
    assert front.calls == 1
