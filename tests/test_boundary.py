"""The database-error boundary: what each psycopg error becomes, and that RagPG's methods let
none through."""

from __future__ import annotations

import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.errors import (
    ConfigError,
    ConnectionLost,
    DatabaseRefused,
    SchemaMissing,
    StoreError,
)
from rag_pg.store.boundary import database_errors, guarded, translate


def test_each_error_becomes_its_kind() -> None:
    assert isinstance(translate(psycopg.errors.UndefinedTable("x"), schema="s"), SchemaMissing)
    assert "out of date" in str(translate(psycopg.errors.UndefinedColumn("x"), schema="s"))
    assert isinstance(translate(psycopg.OperationalError("server closed the connection")),
                      ConnectionLost)
    refused = translate(psycopg.errors.LockNotAvailable("could not obtain lock\nDETAIL: ..."))
    assert isinstance(refused, DatabaseRefused) and refused.sqlstate == "55P03"
    assert str(refused) == "database refused it: could not obtain lock"
    short = translate(psycopg.errors.DiskFull("no space left on device"))
    assert type(short) is StoreError and "cannot take the write" in str(short)


def test_the_block_and_the_method_wrappers_translate_and_pass_ragpg_errors() -> None:
    with pytest.raises(ConnectionLost) as lost, database_errors():
        raise psycopg.OperationalError("gone")
    assert isinstance(lost.value.__cause__, psycopg.OperationalError)

    @guarded
    def config_error() -> None:
        raise ConfigError("mine")

    with pytest.raises(ConfigError, match="mine"):
        config_error()


def test_a_facade_method_on_an_uninitialised_database_says_so(empty_db_url: str) -> None:
    with RagPG(empty_db_url, Settings.load(environ={}, overrides={"embedding.provider": "none"})) as rag:
        with pytest.raises(SchemaMissing, match="ragpg init"):
            rag.stats()
        with pytest.raises(SchemaMissing, match="ragpg init"):
            rag.search("une question", mode="keyword")


def test_the_library_prints_nothing_of_its_own_on_stderr(empty_db_url: str, tmp_path) -> None:
    """A search on a database with pgvector but no ragpg schema fails with SchemaMissing, and
    nothing else: psycopg's second 'error ignored terminating <Pipeline>' line is not printed."""
    import subprocess
    import sys

    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    script = tmp_path / "search.py"
    script.write_text(
        "import sys\n"
        "from rag_pg import RagPG, SchemaMissing, Settings\n"
        "settings = Settings.load(environ={}, overrides={'embedding.provider': 'none'})\n"
        "with RagPG(sys.argv[1], settings) as rag:\n"
        "    try:\n"
        "        rag.search('une question', mode='keyword')\n"
        "    except SchemaMissing:\n"
        "        print('schema missing')\n")
    out = subprocess.run([sys.executable, str(script), empty_db_url], capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.strip() == "schema missing", out.stderr
    assert out.stderr == ""
