"""A database password never appears in a message, whatever form the DSN takes; a refused
connection and a malformed DSN each fail with one line and their own exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_pg import RagPG
from rag_pg.config import redact_url
from rag_pg.errors import ConfigError, StoreError
from tests.conftest import run_cli

SECRET = "SECRETPW"

# Port 1 on loopback refuses at once: nothing listens there.
FORMS = {
    "keywords": f"host=127.0.0.1 port=1 password={SECRET} dbname=x",
    "query": f"postgresql://127.0.0.1:1/x?password={SECRET}",
    "userinfo": f"postgresql://u:{SECRET}@127.0.0.1:1/x",
    # libpq takes these reserved characters in a URL's password as they are, and connects;
    # a URL parser would read a fragment, a query or a path there.
    "userinfo-hash": f"postgresql://u:Pa#{SECRET}@127.0.0.1:1/x",
    "userinfo-question": f"postgresql://u:Pa?{SECRET}@127.0.0.1:1/x",
    "userinfo-slash": f"postgresql://u:Pa/{SECRET}@127.0.0.1:1/x",
    "userinfo-encoded": f"postgresql://u:Pa%23{SECRET}@127.0.0.1:1/x",
}
COMMANDS = {
    "stats": ["stats"],
    "stats-json": ["stats", "--json"],
    "ingest-json": ["ingest", "{root}", "--json"],
    "context": ["context", "anything"],
    "init": ["init"],
    "search": ["search", "anything"],
    "ingest": ["ingest", "{root}"],
    "check": ["check"],
}


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_cli_never_prints_the_password(form: str, command: str, tmp_path: Path) -> None:
    args = [a.format(root=tmp_path) for a in COMMANDS[command]]
    result = run_cli(args, env={"RAGPG_DATABASE_URL": FORMS[form]}, cwd=tmp_path)
    assert "database unavailable" in result.stderr  # the failure is said...
    assert SECRET not in result.stdout  # ...without the secret
    assert SECRET not in result.stderr


@pytest.mark.parametrize("form", sorted(FORMS))
def test_library_error_hides_the_password(form: str) -> None:
    with RagPG(FORMS[form]) as rag, pytest.raises(StoreError) as caught:
        rag.stats()
    assert "database unavailable" in str(caught.value)
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize("dsn", [
    *FORMS.values(),
    f"host=h password={SECRET}",
    f"postgresql://h/x?password={SECRET}&sslmode=require",
    f"postgresql://u:{SECRET}@h/x",
    f"password='{SECRET} with spaces' host=h",
])
def test_redact_url_masks_every_form(dsn: str) -> None:
    shown = redact_url(dsn)
    assert SECRET not in shown
    assert "***" in shown


def test_unparsable_dsn_is_never_echoed() -> None:
    shown = redact_url(f"host=h bogus=1 password={SECRET}")
    assert SECRET not in shown
    assert "bogus" not in shown


def test_refused_connection_is_one_line_exit_3(tmp_path: Path) -> None:
    result = run_cli(["init"], env={"RAGPG_DATABASE_URL": FORMS["keywords"]}, cwd=tmp_path)
    assert result.returncode == 3
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "database unavailable" in result.stderr
    assert "psycopg" not in result.stderr  # no pool log lines


@pytest.mark.parametrize("dsn", [
    f"host=127.0.0.1 port=1 password={SECRET} sslmode=bogus",
    f"host=127.0.0.1 port=1 password={SECRET} bogus=1",
])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_invalid_dsn_is_a_configuration_error(dsn: str, command: str, tmp_path: Path) -> None:
    """Every command, `stats` included (it degrades when the database is down, but a DSN
    that cannot work is the user's to fix): exit 2, one line."""
    args = [a.format(root=tmp_path) for a in COMMANDS[command]]
    result = run_cli(args, env={"RAGPG_DATABASE_URL": dsn, "RAGPG_EMBEDDING_PROVIDER": "none"},
                     cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "invalid database URL" in result.stderr
    assert SECRET not in result.stderr


@pytest.mark.parametrize("dsn", [
    f"postgresql://u:Pa {SECRET}@127.0.0.1:1/x",  # a space: libpq's message would quote it
    f"postgresql://u:Pa%zz{SECRET}@127.0.0.1:1/x",  # a bad escape: likewise
])
def test_a_dsn_libpq_cannot_parse_is_shown_as_unparsable(dsn: str, tmp_path: Path) -> None:
    assert redact_url(dsn) == "<unparsable database URL>"
    result = run_cli(["search", "x"], env={"RAGPG_DATABASE_URL": dsn}, cwd=tmp_path)
    assert result.returncode == 2 and "<unparsable database URL>" in result.stderr
    assert SECRET not in result.stderr + result.stdout
    with pytest.raises(ConfigError) as caught:
        RagPG(dsn).stats()
    assert SECRET not in str(caught.value)


def test_invalid_dsn_raises_config_error_in_the_library() -> None:
    with pytest.raises(ConfigError, match="invalid database URL"):
        RagPG("host=127.0.0.1 port=1 sslmode=bogus").stats()
