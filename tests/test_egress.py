"""The embedding client's egress policy: an address written as a number, in any form the
system resolver reads, is judged when the settings are built (exit 2), like the dotted form."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from rag_pg.config import EmbeddingSettings
from rag_pg.config.egress import EgressPolicy, literal_address
from rag_pg.embed import make_provider
from rag_pg.errors import ConfigError

from .conftest import run_cli

METADATA = ipaddress.ip_address("169.254.169.254")
FORMS = ["169.254.169.254", "0xa9fea9fe", "0xA9FEA9FE", "2852039166", "169.254.43518",
         "0251.0376.0251.0376", "[::ffff:169.254.169.254]"]


@pytest.mark.parametrize("host", FORMS)
def test_every_spelling_of_the_metadata_address_is_that_address(host: str) -> None:
    address = literal_address(host)
    assert address is not None
    mapped = getattr(address, "ipv4_mapped", None)
    assert (mapped or address) == METADATA


def test_names_are_not_addresses() -> None:
    assert literal_address("embeddings.internal") is None
    assert literal_address("cafe") is None  # hex digits, but no resolver reads it as a number
    assert literal_address("10.0.0.7") == ipaddress.ip_address("10.0.0.7")


@pytest.mark.parametrize("host", FORMS)
def test_a_provider_aimed_at_it_is_refused_when_built(host: str) -> None:
    with pytest.raises(ConfigError, match="link-local, metadata or reserved"):
        EgressPolicy().check_literal(host.strip("[]"))
    with pytest.raises(ConfigError, match="embedding.url"):
        make_provider(EmbeddingSettings(provider="http", url=f"http://{host}:8080"))


def test_the_command_line_refuses_it_as_configuration(tmp_path: Path) -> None:
    env = {"RAGPG_DATABASE_URL": "postgresql://u@127.0.0.1:1/x",
           "RAGPG_EMBEDDING_URL": "http://0xa9fea9fe:8080"}
    out = run_cli(["search", "une question"], env=env, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "169.254.169.254" in out.stderr and out.stderr.count("\n") == 1
