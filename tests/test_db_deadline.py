"""A frozen database server ends a command within database.call_timeout, in one line (exit 3),
and leaves the server intact once it runs again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.cli.progress import PREFIX as PROGRESS
from rag_pg.errors import DatabaseTimeout
from rag_pg.store.db import KEEPALIVE_OPTIONS, PoolSource

from .private_pg import private_server
from .rows import values

HERE = Path(__file__).resolve().parent
DEADLINE = 3


@pytest.fixture
def own_pg():
    with private_server() as url:
        yield url


def _corpus(root: Path, n: int = 3) -> Path:
    root.mkdir(parents=True)
    for i in range(n):
        (root / f"doc{i}.md").write_text(f"# Document {i}\n\nUn texte sur le sujet {i}.\n")
    return root


def _continue(pidfile: Path) -> None:
    if pidfile.exists():
        for pid in map(int, pidfile.read_text().split()):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def test_a_frozen_backend_ends_the_ingest_within_its_deadline(own_pg, tmp_path):
    corpus = _corpus(tmp_path / "c")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPG_")}
    env.update({"RAGPG_DATABASE_URL": own_pg, "RAGPG_EMBEDDING_PROVIDER": "none",
                "RAGPG_DATABASE_CALL_TIMEOUT": str(DEADLINE)})
    pidfile = tmp_path / "frozen.pids"
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "freeze_backend.py"), "before_write", str(pidfile), "--",
         "ingest", str(corpus)],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # A hang guard only: the deadline itself is what the command must honour.
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        _continue(pidfile)
    took = time.monotonic() - started
    assert pidfile.read_text().strip(), "the hook froze no backend"
    assert proc.returncode == 3, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(PROGRESS)]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("ragpg: error: the database did not answer within 3 s"), err
    assert took >= DEADLINE  # it did wait for the server, then gave up
    # The server is intact once the backend runs again: the next ingest converges, and the
    # run the frozen one left behind is marked aborted.
    settings = Settings.load(environ={}, overrides={"embedding.provider": "none"})
    with RagPG(own_pg, settings) as rag:
        assert rag.ingest(corpus).documents_indexed == 3
    with psycopg.connect(own_pg) as conn:
        statuses = values(conn,
            "SELECT status FROM ragpg.ingest_run ORDER BY id")
    assert statuses == ["aborted", "completed"]


def test_a_frozen_backend_fails_a_library_call_and_the_pool_recovers(own_pg):
    settings = Settings.load(environ={}, overrides={
        "embedding.provider": "none", "database.call_timeout": DEADLINE, "database.pool_size": 1})
    with RagPG(own_pg, settings) as rag:
        rag.init()
        with rag.source.connection() as conn:
            [server] = conn.execute("SELECT pg_backend_pid()").fetchone()
            os.kill(server, signal.SIGSTOP)  # frozen between two calls of one lending
            try:
                with pytest.raises(DatabaseTimeout, match="call_timeout"):
                    conn.execute("SELECT 1")
            finally:
                os.kill(server, signal.SIGCONT)
            assert conn.closed  # a connection abandoned mid-call is never lent again
        assert rag.stats().documents == 0  # a fresh connection serves the next call


def test_own_connections_carry_keepalives_and_the_deadline(own_pg):
    source = PoolSource(own_pg, call_timeout=DEADLINE)
    try:
        with source.connection() as conn:
            params = conn.info.get_parameters()
        dedicated = source.dedicated()
        try:
            assert dedicated.info.get_parameters()["tcp_user_timeout"] == "60000"
            assert getattr(dedicated, "call_timeout", None) == DEADLINE
        finally:
            dedicated.close()
    finally:
        source.close()
    for name, value in KEEPALIVE_OPTIONS.items():
        assert params[name] == str(value), name
    assert getattr(conn, "call_timeout", None) == DEADLINE
    own = PoolSource(own_pg + "?keepalives_idle=7")  # the DSN's own choice wins
    try:
        with own.connection() as conn:
            assert conn.info.get_parameters()["keepalives_idle"] == "7"
    finally:
        own.close()


def test_a_backend_frozen_while_the_query_is_embedded_is_replaced_at_the_lend(own_pg, embed_server,
                                                                            tmp_path):
    """A search embeds its query before it borrows a connection: a backend frozen meanwhile
    meets the deadline in the pool's check of the next lend, which replaces it, and the search
    is served (no hang, no error)."""
    from rag_pg.embed.http import HttpEmbeddingProvider

    frozen: list[int] = []

    class FreezingProvider(HttpEmbeddingProvider):
        """The real client; embedding a query first stops ragpg's backends."""

        def embed(self, type, texts):  # type: ignore[no-untyped-def]
            if type == "query" and not frozen:
                with psycopg.connect(own_pg, autocommit=True) as admin:
                    frozen.extend(values(admin,
                        "SELECT pid FROM pg_stat_activity WHERE application_name = 'ragpg'"))
                for pid in frozen:
                    os.kill(pid, signal.SIGSTOP)
            return super().embed(type, texts)

    # Each frozen idle connection costs its check one deadline: the lend may take a few of
    # them, and waits for the pool as long as connect_timeout allows.
    settings = Settings.load(environ={}, overrides={"database.call_timeout": DEADLINE,
                                                    "database.connect_timeout": 120})
    provider = FreezingProvider(embed_server.url)
    try:
        with RagPG(own_pg, settings, provider=provider) as rag:
            rag.init()
            assert rag.ingest(_corpus(tmp_path / "c")).documents_indexed == 3
            try:
                assert len(rag.search("le sujet")) == 3
            finally:
                for pid in frozen:
                    os.kill(pid, signal.SIGCONT)
            assert frozen
            assert rag.source.pool.get_stats().get("connections_lost", 0) >= 1
    finally:
        provider.close()


def test_a_backend_frozen_under_the_search_snapshot_fails_it_in_time(own_pg, embed_server, tmp_path):
    """The snapshot's pipeline waits for the server under the deadline: a backend frozen as
    the statement goes gives one DatabaseTimeout, and the next search a fresh connection."""
    settings = Settings.load(environ={}, overrides={"database.call_timeout": DEADLINE,
                                                    "embedding.url": embed_server.url})
    frozen: list[int] = []
    with RagPG(own_pg, settings) as rag:
        rag.init()
        assert rag.ingest(_corpus(tmp_path / "c")).documents_indexed == 3
        execute = rag.searcher.execute

        def freeze_then_execute(conn, plan):  # type: ignore[no-untyped-def]
            if not frozen:
                frozen.append(conn.info.backend_pid)
                os.kill(frozen[0], signal.SIGSTOP)
            return execute(conn, plan)

        rag.searcher.execute = freeze_then_execute  # type: ignore[method-assign]
        try:
            with pytest.raises(DatabaseTimeout, match="call_timeout"):
                rag.search("le sujet")
        finally:
            os.kill(frozen[0], signal.SIGCONT)
        assert len(rag.search("le sujet")) == 3  # served again, on a fresh connection
