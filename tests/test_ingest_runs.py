"""Runs that end badly: killed, terminated, or one document beyond a limit of the server."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys

import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.cli._common import Context
from rag_pg.store import checkpoints
from rag_pg.testing import faults

from .conftest import run_cli
from .rows import records, values
from .waiting import eventually


def small_corpus(root, n=3):
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"doc{i}.md").write_text(f"# Document {i}\n\nUn texte sur le sujet numéro {i}.\n")
    return root


def cli_env(db_url, server):
    return {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": server.url,
            "HOME": os.environ.get("HOME", "/tmp")}


def runs(db_url):
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT status FROM ragpg.ingest_run ORDER BY id").fetchall()


def test_a_run_left_running_by_a_killed_process_is_aborted_by_the_next(db_url, embed_server, tmp_path):
    corpus = small_corpus(tmp_path / "c")
    killed = run_cli(["ingest", str(corpus)], env=cli_env(db_url, embed_server), cwd=tmp_path,
                     faults=("before_write:1:exit",))
    assert killed.returncode == 137
    assert runs(db_url) == [("running",)]
    settings = Settings.load(environ={}, overrides={"embedding.url": embed_server.url})
    with RagPG(db_url, settings) as rag:
        assert rag.ingest(corpus).documents_indexed == 3
    assert runs(db_url) == [("aborted",), ("completed",)]


def test_sigterm_ends_an_ingest_in_one_line_and_records_it_aborted(db_url, embed_server, tmp_path):
    corpus = small_corpus(tmp_path / "c")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPG_")}
    env.update(cli_env(db_url, embed_server))
    proc = subprocess.Popen(faults.command(["before_write:1:sleep:600"], ["ingest", str(corpus)]),
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        def under_way() -> bool:  # the run is recorded
            assert proc.poll() is None, proc.communicate()
            return runs(db_url) == [("running",)]

        eventually(under_way, "the ingest recording its run")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1] == "ragpg: error: terminated (SIGTERM)" and "Traceback" not in err
    assert runs(db_url) == [("aborted",)]


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_says_so_at_once_and_does_not_wait_for_the_batch_in_flight(
        db_url, tmp_path, signum, code):
    """Ctrl-C or SIGTERM while the embedder takes its time: a line at once, and the command
    ends without waiting for the batch (the embedder would answer in ten minutes; the test
    would time out first), its run recorded aborted, nothing of the batch written."""
    from rag_pg.testing.embedserver import FakeEmbeddingServer

    corpus = small_corpus(tmp_path / "c")
    with FakeEmbeddingServer(dim=64, delay=600) as slow:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPG_")}
        env.update(cli_env(db_url, slow), RAGPG_EMBEDDING_MODEL=slow.model)
        proc = subprocess.Popen([sys.executable, "-m", "rag_pg", "ingest", str(corpus)], env=env,
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            eventually(lambda: proc.poll() is None and slow.calls >= 1
                       and runs(db_url) == [("running",)], "a batch in flight")
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert slow.texts_embedded == 0  # the batch never came back
    assert proc.returncode == code, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-2].startswith("ragpg: stopping") and lines[-1].startswith("ragpg: error: ")
    assert runs(db_url) == [("aborted",)]
    with psycopg.connect(db_url) as conn:
        assert values(conn, "SELECT count(*) FROM ragpg.chunk") == [0]


# An interrupt raised inside a weakref callback, as the garbage collector runs them: Python
# only prints it there. The CLI's hook sends the signal again, and the sleep after it ends.
SWALLOWED_SIGTERM = """
import os, signal, sys, time, weakref
from rag_pg.cli._common import Terminated, on_sigterm, redeliver_swallowed_interrupts
signal.signal(signal.SIGTERM, on_sigterm)
if sys.argv[1] == "hook":
    sys.unraisablehook = redeliver_swallowed_interrupts
class Thing:
    pass
def callback(ref):
    os.kill(os.getpid(), signal.SIGTERM)
    len("the handler runs at this call, inside the callback")
thing = Thing()
ref = weakref.ref(thing, callback)
del thing
print("after the callback", flush=True)
try:
    time.sleep(float(sys.argv[2]))
except Terminated:
    print("terminated", flush=True)
    sys.exit(143)
print("slept", flush=True)
"""


@pytest.mark.parametrize(("hook", "outcome"), [("hook", "terminated"), ("none", "slept")])
def test_a_sigterm_swallowed_by_a_weakref_callback_is_delivered_again(hook, outcome):
    """Without the hook the command sleeps on to the end (a short sleep, to show it); with it,
    SIGTERM ends the sleep (the sleep is long: only the signal can end it in time)."""
    seconds = "600" if hook == "hook" else "0.5"
    done = subprocess.run([sys.executable, "-c", SWALLOWED_SIGTERM, hook, seconds],
                          capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["after", "the", "callback", outcome], done.stderr
    assert ("Exception ignored" in done.stderr) == (hook == "none")


def test_a_path_over_the_btree_limit_fails_only_its_document(db_url, tmp_path):
    corpus = small_corpus(tmp_path / "c")
    deep = corpus
    for _ in range(12):  # ~3,000 bytes of incompressible path: over a btree entry's 2,704
        deep = deep / secrets.token_hex(120)
    deep.mkdir(parents=True)
    (deep / "long.md").write_text("# Long\n\nUn chemin trop long pour l'index.\n")
    settings = Settings.load(environ={}, overrides={"embedding.provider": "none"})
    with RagPG(db_url, settings) as rag:
        report = rag.ingest(corpus)
    assert report.documents_indexed == 3 and report.documents_failed == 1
    [failure] = report.failures
    assert failure.path.endswith("/long.md") and failure.kind == "store"
    assert "database refused it" in failure.error
    assert runs(db_url) == [("partial",)]


def test_an_injected_fault_fires_on_its_pass_and_the_hook_goes_away(db_url, embed_server, tmp_path):
    corpus = small_corpus(tmp_path / "c")
    settings = Settings.load(environ={}, overrides={"embedding.url": embed_server.url})
    with RagPG(db_url, settings) as rag:
        with faults.installed("before_write:1:raise") as injector, \
                pytest.raises(faults.InjectedFault, match="before_write #1"):
            rag.ingest(corpus)
        assert injector.counts == {"after_walk_item": 3, "before_embed": 1, "after_embed": 1,
                                   "before_write": 1}
        assert checkpoints.install(None) is None  # nothing left installed after the block
        assert rag.ingest(corpus).documents_indexed == 3
    assert runs(db_url) == [("failed",), ("completed",)]
    with pytest.raises(ValueError, match="mode"):
        faults.Fault.parse("before_write:1:explode")


def test_the_run_counters_move_while_the_run_is_going(db_url, embed_server, tmp_path):
    corpus = small_corpus(tmp_path / "c", n=12)
    seen: list[tuple[str, int]] = []

    def progress(event, data):
        if event == "document" and data["status"] == "indexed":
            with psycopg.connect(db_url) as other:
                [row] = records(other, "SELECT status, documents_indexed FROM ragpg.ingest_runs_v")
            seen.append((row["status"], row["documents_indexed"]))

    settings = Settings.load(environ={}, overrides={
        "embedding.url": embed_server.url, "embedding.batch_size": 1, "embedding.concurrency": 1})
    with RagPG(db_url, settings) as rag:
        report = rag.ingest(corpus, progress=progress)
    assert report.documents_indexed == 12 and len(seen) == 12
    assert all(status == "running" for status, _ in seen)
    assert 0 < max(indexed for _, indexed in seen) < 12  # earlier groups, seen mid-run


def test_a_runs_warnings_reach_ingest_runs_v(db_url, embed_server, tmp_path):
    """A front-matter value dropped is said in the run's errors (kind 'warning'), where a BI
    reader of ingest_runs_v looks, and the document is indexed all the same."""
    corpus = small_corpus(tmp_path / "c", n=1)
    (corpus / "warned.md").write_text("---\ntitle: Un\ntitle: Deux\n---\n# Doublon\n\nTexte.\n")
    settings = Settings.load(environ={}, overrides={"embedding.url": embed_server.url})
    with RagPG(db_url, settings) as rag:
        rag.init()
        report = rag.ingest(corpus)
    assert report.documents_indexed == 2 and report.warnings
    with psycopg.connect(db_url) as conn:
        (errors,) = conn.execute(
            "SELECT errors FROM ragpg.ingest_runs_v ORDER BY started_at DESC LIMIT 1").fetchone()
    assert [e["path"] for e in errors if e["kind"] == "warning"] == ["warned.md"]
    assert all("duplicate key" in e["error"] for e in errors), errors


def test_stats_never_shows_a_dead_run_as_running(db_url, embed_server, tmp_path):
    """A run left `running` by a killed process is marked aborted at the next `stats` (nobody
    holds the collection's lock), in text and JSON; a live run stays running."""
    corpus = small_corpus(tmp_path / "c")
    env = cli_env(db_url, embed_server)
    killed = run_cli(["ingest", str(corpus)], env=env, cwd=tmp_path, faults=("before_write:1:exit",))
    assert killed.returncode == 137 and runs(db_url) == [("running",)]
    shown = run_cli(["stats", "--json"], env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["last_run"]["status"] == "aborted"
    assert runs(db_url) == [("aborted",)]
    killed = run_cli(["ingest", str(corpus)], env=env, cwd=tmp_path, faults=("before_write:1:exit",))
    text = run_cli(["stats"], env=env, cwd=tmp_path)
    assert "last run:        #2 aborted" in text.stdout, text.stdout
    from rag_pg.store.locks import LOCK_CLASS, lock_key

    with psycopg.connect(db_url, autocommit=True) as holder:  # an ingest under way holds the lock
        holder.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, lock_key("ragpg", "default")))
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("UPDATE ragpg.ingest_run SET status = 'running', finished_at = NULL WHERE id = 2")
        live = run_cli(["stats", "--json"], env=env, cwd=tmp_path)
        assert json.loads(live.stdout)["last_run"]["status"] == "running"
    assert runs(db_url) == [("aborted",), ("running",)]


def test_a_path_over_the_btree_limit_exits_1_with_the_good_documents_indexed(db_url, embed_server,
                                                                             tmp_path):
    """As a user runs it, with an embedding service: the run goes on past the document the
    database refuses, says why in one line, and exits 1 (some documents failed)."""
    corpus = small_corpus(tmp_path / "c")
    deep = corpus
    for _ in range(12):
        deep = deep / secrets.token_hex(120)
    deep.mkdir(parents=True)
    (deep / "long.md").write_text("# Long\n\nUn chemin trop long pour l'index.\n")
    out = run_cli(["ingest", str(corpus), "--json"], env=cli_env(db_url, embed_server), cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    assert (report["documents_indexed"], report["documents_failed"]) == (3, 1)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    [line] = lines
    assert line.startswith("ragpg: 1 document(s) failed; first: ") and "long.md: database refused it" in line
    assert "Traceback" not in out.stderr
    with psycopg.connect(db_url) as conn:
        paths = values(conn, "SELECT path FROM ragpg.document ORDER BY path")
    assert paths == ["doc0.md", "doc1.md", "doc2.md"]


def test_a_pipeline_closing_on_a_refused_statement_logs_only_with_verbose(db_url, caplog):
    """psycopg logs the second error a pipeline meets when it closes on the first (the refused
    document's): under load that line reached the user's stderr beside ragpg's own. Quiet by
    default, shown with -v."""
    for verbose in (False, True):
        caplog.clear()
        Context(None, None, {}, verbose=verbose)
        with psycopg.connect(db_url, autocommit=True) as holder, psycopg.connect(db_url) as conn:
            holder.execute("SELECT pg_advisory_lock(7207)")
            with pytest.raises(RuntimeError), conn.pipeline():
                # The server waits on the lock, so no result is back before the block fails.
                conn.execute("SELECT pg_advisory_xact_lock(7207)")
                conn.execute("SELECT 1 / 0")
                holder.execute("SELECT pg_advisory_unlock(7207)")
                raise RuntimeError("the block fails while the statements are still queued")
        logged = [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")]
        assert bool(logged) is verbose, logged
        assert not verbose or "error ignored terminating" in logged[0]
    Context(None, None, {})  # back to quiet for the tests that follow
