"""Kill -9 and concurrent ingests: no partial document, no duplicate, and the next run converges."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import psycopg
import pytest

from .conftest import drop_database, new_database, run_cli
from .invariants import dump, violations
from .rows import records


def big_corpus(root, n=40):
    for i in range(n):
        folder = root / f"part{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        paragraphs = "\n\n".join(
            f"Paragraph {j} of document {i}: " + " ".join(f"mot{(i * 7 + j * 3 + w) % 97}" for w in range(40))
            for j in range(12)
        )
        (folder / f"doc{i:03}.md").write_text(f"# Document {i}\n\n## Section A\n\n{paragraphs}\n")
    return root


def env_for(db_url, server, **extra):
    return {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": server.url,
            "RAGPG_EMBEDDING_BATCH_SIZE": "8", **extra}


@pytest.mark.parametrize("site, nth", [("before_write", 2), ("after_write", 3), ("before_embed", 4),
                                       ("after_walk_item", 7)])
def test_hard_exit_at_a_checkpoint_then_rerun_converges(db_url, embed_server, tmp_path, pg_server_url,
                                                       pg_template, site, nth):
    corpus = big_corpus(tmp_path / "c")
    out = run_cli(["ingest", str(corpus)], env=env_for(db_url, embed_server), cwd=tmp_path,
                  faults=(f"{site}:{nth}:exit",))
    assert out.returncode == 137
    assert violations(db_url) == []
    out = run_cli(["ingest", str(corpus)], env=env_for(db_url, embed_server), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert violations(db_url) == []
    clean = new_database(pg_server_url, pg_template)
    try:
        out = run_cli(["ingest", str(corpus)], env=env_for(clean, embed_server), cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert dump(db_url) == dump(clean)
    finally:
        drop_database(pg_server_url, clean)


def test_sigkill_at_random_moments_never_leaves_a_partial_document(db_url, embed_server, tmp_path):
    corpus = big_corpus(tmp_path / "c", n=60)
    embed_server.delay = 0.02
    for delay in (0.8, 1.6, 2.4):
        with spawned(["ingest", str(corpus)], env_for(db_url, embed_server), tmp_path) as proc:
            time.sleep(delay)  # the moment of the kill, not a synchronisation: any moment must do
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        assert violations(db_url) == []
        # edit a few files between kills
        for i in range(0, 60, 17):
            f = corpus / f"part{i % 4}" / f"doc{i:03}.md"
            f.write_text(f.read_text() + f"\nEdit after kill {delay}.\n")
    embed_server.delay = 0.0
    out = run_cli(["ingest", str(corpus)], env=env_for(db_url, embed_server), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert violations(db_url) == []
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM ragpg.document").fetchone() == (60,)


def test_two_concurrent_ingests_never_duplicate(db_url, embed_server, tmp_path):
    corpus = big_corpus(tmp_path / "c", n=30)
    from rag_pg.store.locks import LOCK_CLASS, lock_key

    # The test holds the collection's lock until both ingests say they wait for it, then lets
    # them go at once: one writes while the other waits, whatever the machine's speed.
    env = env_for(db_url, embed_server, RAGPG_DATABASE_LOCK_TIMEOUT="600")
    with psycopg.connect(db_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, lock_key("ragpg", "default")))
        with spawned(["ingest", str(corpus)], env, tmp_path) as one, \
                spawned(["ingest", str(corpus)], env, tmp_path) as two:
            waiting = [first_line_with(p, "waiting for another ingest") for p in (one, two)]
            holder.execute("SELECT pg_advisory_unlock_all()")
            results = [p.communicate(timeout=300) for p in (one, two)]
            codes = [one.returncode, two.returncode]
    assert all(waiting), waiting
    assert codes == [0, 0], results
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT path) FROM ragpg.document").fetchone() == (30, 30)
        [row] = records(conn, "SELECT count(*) AS chunks, count(DISTINCT (document_id, position))"
                              " AS places FROM ragpg.chunk")
        assert row["chunks"] == row["places"]
    assert violations(db_url) == []


@contextmanager
def spawned(args, env, cwd):
    """``python -m rag_pg *args``, killed and reaped however the block ends."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("RAGPG_") and k != "DATABASE_URL"}
    proc = subprocess.Popen([sys.executable, "-m", "rag_pg", *args], env={**full, **env}, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def first_line_with(proc, text, limit=300.0):
    """Read the child's stderr until a line holds ``text`` (bounded: a stuck child fails the test);
    the lines read are kept on the process for the assertion messages."""
    found: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            found.append(line)
            if text in line:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(limit)
    return next((line for line in found if text in line), "")


def test_second_ingest_gives_up_clearly_when_the_lock_is_held(db_url, embed_server, tmp_path):
    corpus = big_corpus(tmp_path / "c", n=3)
    from rag_pg.store.locks import LOCK_CLASS, lock_key

    with psycopg.connect(db_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, lock_key("ragpg", "default")))
        out = run_cli(["ingest", str(corpus)], env=env_for(db_url, embed_server, RAGPG_DATABASE_LOCK_TIMEOUT="1"),
                      cwd=tmp_path)
    assert out.returncode == 3
    assert "another ingest" in out.stderr and "pid" in out.stderr
    assert "Traceback" not in out.stderr
