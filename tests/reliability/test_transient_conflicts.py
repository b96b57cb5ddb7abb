"""C3: a foreign writer aborts ragpg's write transaction (lock timeout, deadlock, serialization
failure); ragpg replays it and the index ends as a conflict-free run leaves it. A lock held for
good fails that document alone, and an error of the data is never replayed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.store import checkpoints, db
from rag_pg.store.retry import TransientRetry

from ..conftest import drop_database, new_database
from ..invariants import dump, violations

DOCS = ("a.md", "b.md", "c.md")  # written in this order: one group, one transaction
OPTIONS = db.OWN_CONNECTION_OPTIONS  # ragpg's own, before a test adds to them
WAIT = 120  # seconds before a readiness wait gives up (it fails the test, never passes it)


def write(root: Path, version: int) -> Path:
    root.mkdir(exist_ok=True)
    for name in DOCS:
        (root / name).write_text(f"# {name} v{version}\n\nLe paragraphe {version} de {name}.\n")
    return root


def rag_for(url: str, server: Any) -> RagPG:
    return RagPG(url, Settings.load(environ={}, overrides={"embedding.url": server.url}))


@contextmanager
def retries_seen(on_retry: Callable[[], None] = lambda: None) -> Iterator[list[str]]:
    """Count the replays (and act at each, for the foreign writer to give way)."""
    seen: list[str] = []

    def hook(site: str) -> None:
        if site == "transient_retry":
            seen.append(site)
            on_retry()

    previous = checkpoints.install(hook)
    try:
        yield seen
    finally:
        checkpoints.install(previous)


def foreign(url: str) -> psycopg.Connection[Any]:
    """Another writer on the same rows, in an open transaction; its deadlock check waits longer
    than ragpg's, so that the deadlock detector aborts ragpg's side."""
    conn = psycopg.connect(url)
    conn.execute("SET deadlock_timeout = '10min'")
    return conn


def lock_row(conn: psycopg.Connection[Any], path: str) -> None:
    conn.execute("SELECT 1 FROM ragpg.document WHERE path = %s FOR UPDATE", (path,))


def wait_until_ragpg_waits_on_a_lock(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as watcher:
        for _ in range(WAIT * 20):
            (waiting,) = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                " AND wait_event_type = 'Lock' AND datname = current_database()",
                (db.APPLICATION_NAME,),
            ).fetchone() or (0,)
            if waiting:
                return
            watcher.execute("SELECT pg_sleep(0.05)")
    raise AssertionError("ragpg never waited on the foreign writer's lock")


@pytest.fixture
def indexed(db_url: str, embed_server: Any, tmp_path: Path) -> Path:
    """The three documents indexed once (v1), edited on disk (v2): the next ingest rewrites them."""
    tree = write(tmp_path / "tree", 1)
    with rag_for(db_url, embed_server) as rag:
        assert rag.ingest(tree).documents_indexed == 3
    return write(tree, 2)


@pytest.fixture
def conflict_free(pg_server_url: str, pg_template: str, embed_server: Any, tmp_path: Path) -> Iterator[list[Any]]:
    """What the same ingest leaves when nobody else writes."""
    url = new_database(pg_server_url, pg_template)
    try:
        with rag_for(url, embed_server) as rag:
            rag.ingest(write(tmp_path / "reference", 1))
            rag.ingest(write(tmp_path / "reference", 2))
        yield dump(url)
    finally:
        drop_database(pg_server_url, url)


def ingest_with_options(monkeypatch: pytest.MonkeyPatch, url: str, server: Any, tree: Path,
                        options: str) -> Any:
    monkeypatch.setattr(db, "OWN_CONNECTION_OPTIONS", f"{OPTIONS} {options}")
    with rag_for(url, server) as rag:
        return rag.ingest(tree)


def test_c3_lock_timeout_deadlock_and_serialization_failure_are_replayed(
        db_url, embed_server, indexed, conflict_free, monkeypatch, figure):
    replays: dict[str, int] = {}

    # 55P03: the foreign writer holds b.md's row past ragpg's lock_timeout, then gives way.
    other = foreign(db_url)
    lock_row(other, "b.md")
    with retries_seen(other.commit) as seen:
        report = ingest_with_options(monkeypatch, db_url, embed_server, indexed, "-c lock_timeout=200")
    other.close()
    assert (report.documents_indexed, report.documents_failed) == (3, 0), report.failures
    replays["55P03"] = len(seen)

    # 40P01: ragpg holds a.md and waits for b.md; the foreign writer holds b.md and asks for a.md.
    write(indexed, 1)
    other = foreign(db_url)
    lock_row(other, "b.md")

    def ask_for_a() -> None:
        wait_until_ragpg_waits_on_a_lock(db_url)
        lock_row(other, "a.md")  # returns once the deadlock detector has aborted ragpg's side

    asking = threading.Thread(target=ask_for_a)
    asking.start()
    with retries_seen(lambda: (asking.join(), other.commit())) as seen:
        report = ingest_with_options(monkeypatch, db_url, embed_server, indexed, "")
    asking.join()
    other.close()
    assert (report.documents_indexed, report.documents_failed) == (3, 0), report.failures
    replays["40P01"] = len(seen)

    # 40001: at SERIALIZABLE, the foreign writer commits a change to b.md that ragpg's snapshot
    # does not see, while ragpg waits to rewrite that row.
    write(indexed, 2)
    other = foreign(db_url)
    other.execute("UPDATE ragpg.document SET title = title WHERE path = 'b.md'")

    def commit_once_ragpg_waits() -> None:
        wait_until_ragpg_waits_on_a_lock(db_url)
        other.commit()

    committing = threading.Thread(target=commit_once_ragpg_waits)
    committing.start()
    with retries_seen() as seen:
        report = ingest_with_options(monkeypatch, db_url, embed_server, indexed,
                                     "-c default_transaction_isolation=serializable")
    committing.join()
    other.close()
    assert (report.documents_indexed, report.documents_failed) == (3, 0), report.failures
    replays["40001"] = len(seen)

    assert all(count >= 1 for count in replays.values()), replays
    assert dump(db_url) == conflict_free  # the same index as nobody else writing
    assert violations(db_url) == []
    figure("C3", f"3 injected conflicts (55P03, 40P01, 40001), {sum(replays.values())} replays, "
                 "0 user-visible transient failures, index identical to a conflict-free run",
           conflicts=3, replays=replays, failures=0)


def test_c3_a_lock_held_for_good_fails_that_document_alone(db_url, embed_server, indexed, monkeypatch, figure):
    other = foreign(db_url)
    lock_row(other, "b.md")
    try:
        with retries_seen() as seen:
            report = ingest_with_options(monkeypatch, db_url, embed_server, indexed, "-c lock_timeout=100")
    finally:
        other.close()
    assert report.documents_indexed == 2
    [failed] = report.failures
    assert failed.path == "b.md" and failed.kind == "store"
    assert "lock timeout" in failed.error and "\n" not in failed.error
    # The group's transaction, then b.md's own, each ran the whole policy before giving up.
    assert len(seen) == 2 * (TransientRetry().attempts - 1)
    with psycopg.connect(db_url) as conn:
        titles = dict(conn.execute("SELECT path, title FROM ragpg.document").fetchall())
    assert titles == {"a.md": "a.md v2", "b.md": "b.md v1", "c.md": "c.md v2"}  # b.md kept whole
    assert violations(db_url) == []
    figure("C3", f"a row locked for good: {len(seen)} replays, then b.md failed alone "
                 "(lock timeout), 2 others indexed", replays=len(seen), failed=1, indexed=2)


@pytest.mark.parametrize("statement, sqlstate", [
    ("SELECT 1 / 0", "22012"),
    ("INSERT INTO twice VALUES (1), (1)", "23505"),
])
def test_errors_of_the_data_are_never_replayed(db_url, statement, sqlstate):
    calls: list[int] = []
    sleeps: list[float] = []
    policy = TransientRetry(sleep=sleeps.append)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE twice (id int PRIMARY KEY)")

        def transaction() -> None:
            calls.append(1)
            with conn.transaction():
                conn.execute(statement)

        with pytest.raises(psycopg.Error) as raised:
            policy.run(conn, transaction)
    assert raised.value.sqlstate == sqlstate
    assert (len(calls), sleeps) == (1, [])


def test_a_callers_transaction_is_left_to_the_caller_to_replay(db_url):
    calls: list[int] = []
    with psycopg.connect(db_url, autocommit=True) as conn, conn.transaction():

        def transaction() -> None:
            calls.append(1)
            raise psycopg.errors.DeadlockDetected("deadlock detected")

        with pytest.raises(psycopg.errors.DeadlockDetected):
            TransientRetry(sleep=lambda _: None).run(conn, transaction)
    assert calls == [1]


def test_replays_back_off_with_jitter_and_stop_after_the_last_attempt():
    sleeps: list[float] = []
    calls: list[int] = []

    class Idle:
        class info:  # noqa: N801 - stands for psycopg's ConnectionInfo
            transaction_status = psycopg.pq.TransactionStatus.IDLE

    def transaction() -> None:
        calls.append(1)
        raise psycopg.errors.LockNotAvailable("canceling statement due to lock timeout")

    policy = TransientRetry(attempts=4, delay=0.1, sleep=sleeps.append, jitter=lambda: 0.5)
    with pytest.raises(psycopg.errors.LockNotAvailable):
        policy.run(Idle(), transaction)  # type: ignore[arg-type]
    assert len(calls) == 4
    assert sleeps == pytest.approx([0.1, 0.2, 0.4])
