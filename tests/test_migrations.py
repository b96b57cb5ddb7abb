"""Migrations: concurrent first runs wait for each other; DDL names the schema as an identifier."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from rag_pg.config import DatabaseSettings
from rag_pg.errors import ConfigError
from rag_pg.store import migrate

from .conftest import ROOT
from .rows import records, value
from .waiting import eventually


def waiting_backends(url: str, own_pid: int) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = value(conn, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND pid <> %s", (own_pid,))
    return int(row) if row else 0


def test_three_first_runs_at_once_all_succeed(empty_db_url, embed_server, tmp_path):
    # A migration held open in this connection: the three runs start while it is under way,
    # and must wait for it (not fail on CREATE SCHEMA once it commits).
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.md").write_text("# A\n\nUn texte.\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPG_")}
    env.update({"RAGPG_DATABASE_URL": empty_db_url, "RAGPG_EMBEDDING_URL": embed_server.url})
    commands = [["init"], ["ingest", str(tmp_path / "c")], ["init"]]
    procs: list[subprocess.Popen[str]] = []
    with psycopg.connect(empty_db_url) as holder:
        holder.execute("SELECT 1")  # a transaction is open: upgrade runs in it, uncommitted
        migrate.upgrade(holder, "ragpg")
        try:
            for args in commands:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "rag_pg", *args], env=env, cwd=tmp_path,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            def all_waiting() -> bool:
                assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
                return waiting_backends(empty_db_url, holder.info.backend_pid) >= len(commands)

            eventually(all_waiting, "every init waiting on the holder's lock")
            holder.commit()
            results = [p.communicate(timeout=120) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.communicate()
    assert [p.returncode for p in procs] == [0, 0, 0], results
    assert not any("Traceback" in err for _, err in results)
    with psycopg.connect(empty_db_url) as conn:
        assert migrate.current_revision(conn, "ragpg") == migrate.head_revision()
        assert conn.execute("SELECT count(*) FROM ragpg.document").fetchone() == (1,)


def test_an_odd_schema_name_is_quoted_by_the_migrations(empty_db_url):
    with psycopg.connect(empty_db_url) as conn:
        migrate.upgrade(conn, "Rag_Index")
        assert migrate.current_revision(conn, "Rag_Index") == migrate.head_revision()
        names = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname ILIKE 'rag_index'").fetchall()
    assert names == [("Rag_Index",)]


@pytest.mark.parametrize("schema", ['x"; DROP TABLE y; --', "1abc", "a" * 64, "", "tab le"])
def test_a_schema_that_is_no_plain_identifier_is_refused(schema):
    with pytest.raises(ConfigError, match="database.schema"):
        DatabaseSettings(schema=schema)


def test_no_migration_formats_a_name_into_sql_text():
    for path in sorted((ROOT / "rag_pg" / "migrations").rglob("*.py")):
        text = Path(path).read_text()
        assert "\"{schema}\"" not in text and "op.execute(" not in text, path.name


def test_this_rounds_replacements_go_down_and_up_again(db_url: str) -> None:
    """0011 and 0012 replace a view and a function that earlier revisions created: going
    down puts the earlier definitions back, going up again the current ones."""
    from alembic import command
    from sqlalchemy import create_engine, pool

    def definitions() -> tuple[str, str]:
        with psycopg.connect(db_url) as conn:
            [row] = records(conn,
                "SELECT p.prosrc AS function, pg_get_viewdef('ragpg.corpus_stats_v'::regclass) AS view"
                " FROM pg_proc p WHERE p.oid = 'ragpg.term_stat_follow'::regproc")
        return row["function"], row["view"]

    def to(revision: str) -> None:
        engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(db_url),
                               poolclass=pool.NullPool)
        cfg = migrate.alembic_config("ragpg")
        with engine.begin() as sa_conn:
            cfg.attributes["connection"] = sa_conn
            if revision == "head":
                command.upgrade(cfg, revision)
            else:
                command.downgrade(cfg, revision)
        engine.dispose()

    function, view = definitions()
    assert "MERGE INTO" in function and "JOIN ragpg.document" not in view
    to("0010")
    function, view = definitions()
    assert "ON CONFLICT" in function and "MERGE" not in function
    assert "JOIN ragpg.document" in view
    to("head")
    function, view = definitions()
    assert "MERGE INTO" in function and "JOIN ragpg.document" not in view
    with psycopg.connect(db_url) as conn:
        assert migrate.current_revision(conn, "ragpg") == migrate.head_revision()


def test_a_server_without_unaccent_gets_configurations_that_keep_accents(empty_db_url, monkeypatch):
    """A PostgreSQL built without its contrib modules (no unaccent) still takes the schema:
    the same configurations, accents not folded."""
    from rag_pg.migrations import ddl

    monkeypatch.setattr(ddl, "extension_available", lambda name: False)
    with psycopg.connect(empty_db_url) as conn:
        migrate.upgrade(conn, "ragpg")
        assert migrate.current_revision(conn, "ragpg") == migrate.head_revision()
        assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'unaccent'"
                            ).fetchone() == (0,)
        assert "é" in value(conn, "SELECT to_tsvector('ragpg.french', 'élévation')::text")
