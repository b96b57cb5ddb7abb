"""`ragpg reembed`: side by side, atomic switch, resumable after a kill, searches never fail."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.admin.reembed import Reembedder, reembed, target_provider
from rag_pg.errors import ConfigError, DimensionMismatch, IngestBusy
from rag_pg.store.vector_index import vector_index_name
from rag_pg.testing.embedserver import FakeEmbeddingServer

from .conftest import run_cli
from .invariants import violations
from .rows import records

OLD, NEW = "fake-bow-64", "fake-bow-32"


def settings(server: FakeEmbeddingServer | None, **overrides: Any) -> Settings:
    flat: dict[str, Any] = {"embedding.batch_size": 4, "embedding.backoff": 0.0, **overrides}
    if server is not None:
        flat.setdefault("embedding.url", server.url)
    return Settings.load(environ={}, overrides=flat)


def rag_for(db_url: str, server: FakeEmbeddingServer | None, **overrides: Any) -> RagPG:
    return RagPG(db_url, settings(server, **overrides))


def run_reembed(db_url: str, server: FakeEmbeddingServer, **kwargs: Any) -> Any:
    with rag_for(db_url, server) as rag:
        provider, owned = target_provider(rag.settings, kwargs.pop("model", None))
        try:
            return Reembedder(rag.settings, rag.source, provider, drop_grace=0.0,
                              progress=kwargs.pop("progress", None)).run(**kwargs)
        finally:
            if owned:
                provider.close()


def by_model(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        return {r["model"]: int(r["vectors"]) for r in records(conn,
            "SELECT model, count(*) AS vectors FROM ragpg.chunk_vector GROUP BY model")}


def collection_row(url: str, name: str = "default") -> tuple[Any, ...] | None:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT model, dimension FROM ragpg.collection WHERE name = %s",
                            (name,)).fetchone()


def vectors_by_chunk(url: str, collection: str = "default") -> dict[tuple[str, int], list[float]]:
    with psycopg.connect(url) as conn:
        rows = records(conn,
            "SELECT d.path, c.position, cv.embedding::text AS embedding FROM ragpg.chunk_vector cv"
            " JOIN ragpg.chunk c ON c.id = cv.chunk_id JOIN ragpg.document d ON d.id = c.document_id"
            " WHERE d.collection = %s", (collection,))
    return {(r["path"], int(r["position"])): json.loads(r["embedding"]) for r in rows}


def indexes(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        return {r["indexname"]: r["indexdef"] for r in records(conn,
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'ragpg'"
            " AND indexname LIKE 'chunk_vector_hnsw_%'")}


def ingest(db_url: str, server: FakeEmbeddingServer | None, corpus: Path, **overrides: Any) -> Any:
    with rag_for(db_url, server, **overrides) as rag:
        return rag.ingest(corpus)


# -- the switch ----------------------------------------------------------------------------------


def test_reembed_switches_and_drops_the_old_vectors(db_url, corpus, old_server, new_server):
    chunks = ingest(db_url, old_server, corpus).chunks_upserted
    report = run_reembed(db_url, new_server)
    assert (report.status, report.switched, report.resumed) == ("completed", True, False)
    assert (report.source_model, report.target_model, report.target_dimension) == (OLD, NEW, 32)
    assert report.chunks_total == report.chunks_embedded == chunks
    assert report.vectors_dropped == chunks and report.indexes_dropped == [OLD]
    assert by_model(db_url) == {NEW: chunks} and collection_row(db_url) == (NEW, 32)
    assert set(indexes(db_url)) == {vector_index_name(NEW)}
    assert "vector(32)" in indexes(db_url)[vector_index_name(NEW)]
    assert violations(db_url) == []
    # Same vectors as an ingest with the new model: the text is rebuilt exactly (no re-parse).
    ingest(db_url, new_server, corpus, collection="fresh")
    assert vectors_by_chunk(db_url) == vectors_by_chunk(db_url, "fresh")
    # The fingerprints name the new model: the next ingest embeds nothing.
    new_server.reset_counters()
    again = ingest(db_url, new_server, corpus)
    assert (again.documents_skipped, again.embedding_calls, new_server.calls) == (9, 0, 0)
    with psycopg.connect(db_url) as conn:
        run = conn.execute("SELECT status, target_model, chunks_embedded, finished_at IS NOT NULL"
                           " FROM ragpg.reembed_run").fetchall()
    assert run == [("completed", NEW, chunks, True)]


def test_keep_leaves_both_models_and_switching_back_embeds_nothing(
    db_url, corpus, old_server, new_server
):
    chunks = ingest(db_url, old_server, corpus).chunks_upserted
    run_reembed(db_url, new_server, keep=True)
    assert by_model(db_url) == {OLD: chunks, NEW: chunks}
    with rag_for(db_url, new_server) as rag:
        models = rag.stats().to_dict()["models"]
    assert [(m["model"], m["dimension"], m["vectors"]) for m in models] == [
        (NEW, 32, chunks), (OLD, 64, chunks)]
    old_server.reset_counters()
    back = run_reembed(db_url, old_server)
    assert (back.chunks_total, back.switched, old_server.texts_embedded) == (0, True, 0)
    assert by_model(db_url) == {OLD: chunks} and collection_row(db_url) == (OLD, 64)


def test_ingest_refuses_to_mix_and_points_to_reembed(db_url, corpus, old_server, new_server):
    ingest(db_url, old_server, corpus)
    # Nothing changed: the run decides from the stored hashes and embeds nothing; once done it
    # asks the service its model (one /health) to say the collection's differs.
    new_server.reset_counters()
    unchanged = ingest(db_url, new_server, corpus)
    assert unchanged.documents_skipped > 0 and any("ragpg reembed" in w for w in unchanged.warnings)
    assert (new_server.health_calls, new_server.texts_embedded) == (1, 0)
    # A changed document needs the service's model: a different one is refused, nothing written.
    first = sorted(Path(corpus).rglob("*.md"))[0]
    first.write_text(first.read_text(encoding="utf-8") + "\nUne ligne de plus.\n", encoding="utf-8")
    with pytest.raises(DimensionMismatch, match=f"ragpg reembed --collection default --model {NEW}"):
        ingest(db_url, new_server, corpus)
    assert by_model(db_url) == {OLD: sum(by_model(db_url).values())}
    # With the model configured, the swap is refused at once, even when nothing changed.
    first.write_text(first.read_text(encoding="utf-8")[: -len("Une ligne de plus.\n")], encoding="utf-8")
    with pytest.raises(DimensionMismatch, match="ragpg reembed"):
        ingest(db_url, new_server, corpus, **{"embedding.model": NEW})


def test_a_keyword_only_collection_gets_its_first_vectors(db_url, corpus, new_server):
    chunks = ingest(db_url, None, corpus, **{"embedding.provider": "none"}).chunks_upserted
    assert collection_row(db_url) == (None, None)
    report = run_reembed(db_url, new_server)
    assert report.switched and by_model(db_url) == {NEW: chunks}
    assert ingest(db_url, new_server, corpus).embedding_calls == 0


def test_more_than_2000_dimensions_are_indexed_as_halfvec(db_url, corpus, old_server):
    ingest(db_url, old_server, corpus)
    with FakeEmbeddingServer(dim=2048) as wide:
        run_reembed(db_url, wide)
        assert "halfvec(2048)" in indexes(db_url)[vector_index_name("fake-bow-2048")]
        with rag_for(db_url, wide) as rag:
            hits = rag.search("restaurer une sauvegarde", k=2, mode="vector")
    assert len(hits) == 2 and all("vector" in h.ranks for h in hits)


def test_a_refused_chunk_blocks_the_switch_until_fixed(db_url, corpus, old_server, new_server):
    chunks = ingest(db_url, old_server, corpus).chunks_upserted
    new_server.poison = "Tarte Tatin"
    report = run_reembed(db_url, new_server)
    assert (report.status, report.switched) == ("incomplete", False)
    assert report.chunks_failed >= 1 and report.failures[0]["path"] == "fr/cuisine/tarte-tatin.md"
    assert collection_row(db_url) == (OLD, 64) and by_model(db_url)[OLD] == chunks
    new_server.poison = None
    new_server.reset_counters()
    done = run_reembed(db_url, new_server)
    assert done.resumed and done.switched and done.chunks_total == report.chunks_failed
    assert new_server.texts_embedded == report.chunks_failed
    assert by_model(db_url) == {NEW: chunks}


def test_model_option_picks_the_provider_of_that_model(db_url, corpus, old_server, new_server):
    ingest(db_url, old_server, corpus)
    report = run_reembed(db_url, new_server, model=NEW)
    assert report.target_model == NEW
    with pytest.raises(ConfigError, match="serves model 'absent-model'"):
        run_reembed(db_url, new_server, model="absent-model")
    with pytest.raises(ConfigError, match="does not exist"):
        run_reembed(db_url, new_server, collection="nowhere")


# -- concurrency: ingest excluded, searches never fail -------------------------------------------


def test_ingest_is_refused_while_a_reembed_runs(db_url, corpus, old_server, new_server):
    ingest(db_url, old_server, corpus)
    holding, release = threading.Event(), threading.Event()

    def hold(event: str, data: dict[str, Any]) -> None:
        if event == "reembedded" and not holding.is_set():
            holding.set()
            release.wait(30)

    worker = threading.Thread(target=lambda: run_reembed(db_url, new_server, progress=hold))
    worker.start()
    try:
        assert holding.wait(30)
        with pytest.raises(IngestBusy, match="running"):
            ingest(db_url, old_server, corpus, **{"database.lock_timeout": 0.3})
    finally:
        release.set()
        worker.join()
    assert collection_row(db_url) == (NEW, 32)


def test_searches_keep_working_through_the_switch(db_url, corpus, old_server, new_server):
    chunks = ingest(db_url, old_server, corpus).chunks_upserted
    new_server.delay = 0.02  # a re-embed long enough for many searches to overlap it
    # The searchers know both models (a chain): they follow the collection's switch.
    searching = settings(None, **{"embedding.providers": [
        {"provider": "http", "url": old_server.url, "model": OLD, "dimension": 64},
        {"provider": "http", "url": new_server.url, "model": NEW, "dimension": 32},
    ]})
    stop = threading.Event()
    failures: list[BaseException] = []
    results: list[tuple[int, bool]] = []

    def search_loop() -> None:
        with RagPG(db_url, searching) as rag:
            while not stop.is_set():
                try:
                    hits = rag.search("restaurer une sauvegarde PostgreSQL", k=3)
                    results.append((len(hits), any("vector" in h.ranks for h in hits)))
                except BaseException as exc:  # every failure counts, whatever its type
                    failures.append(exc)

    threads = [threading.Thread(target=search_loop) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        with rag_for(db_url, new_server) as rag:
            report = reembed(rag)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert failures == []
    assert len(results) > 20 and all(n == 3 and used_vectors for n, used_vectors in results)
    assert report.switched and by_model(db_url) == {NEW: chunks}
    queries = [r for r in new_server.requests if r["type"] == "query"]
    assert queries  # after the switch, queries were embedded with the new model


# -- killed half-way (a real process, a real kill) -----------------------------------------------


def cli_env(db_url: str, server: FakeEmbeddingServer, **extra: str) -> dict[str, str]:
    return {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": server.url,
            "RAGPG_EMBEDDING_BATCH_SIZE": "2", "RAGPG_EMBEDDING_CONCURRENCY": "1",
            "HOME": os.environ.get("HOME", "/tmp"), **extra}


def test_a_killed_reembed_resumes_and_completes(db_url, corpus, old_server, new_server):
    chunks = ingest(db_url, old_server, corpus).chunks_upserted
    assert chunks > 16
    killed = run_cli(["reembed", "--json"], env=cli_env(db_url, new_server),
        faults=("reembed_after_batch:2:exit",))
    assert killed.returncode == 137, killed.stderr
    # Two pages of 8 are stored beside the old vectors; searches still use the old model.
    assert by_model(db_url) == {OLD: chunks, NEW: 16}
    assert collection_row(db_url) == (OLD, 64)
    with rag_for(db_url, old_server) as rag:
        assert len(rag.search("sauvegarde", k=2, mode="vector")) == 2
    resumed = run_cli(["reembed", "--json"], env=cli_env(db_url, new_server))
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert (report["resumed"], report["chunks_total"], report["switched"]) == (
        True, chunks - 16, True)
    assert "resuming the re-embed" in resumed.stderr
    assert new_server.texts_embedded == chunks  # no chunk embedded twice
    assert by_model(db_url) == {NEW: chunks} and collection_row(db_url) == (NEW, 32)
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT status, resumed FROM ragpg.reembed_run").fetchall() == [
            ("completed", 1)]


def test_killed_after_the_switch_the_next_run_only_drops(db_url, corpus, old_server, new_server):
    chunks = ingest(db_url, old_server, corpus).chunks_upserted
    killed = run_cli(["reembed"], env=cli_env(db_url, new_server),
        faults=("reembed_after_switch:1:exit",))
    assert killed.returncode == 137
    assert collection_row(db_url) == (NEW, 32) and by_model(db_url) == {OLD: chunks, NEW: chunks}
    new_server.reset_counters()
    again = run_cli(["reembed"], env=cli_env(db_url, new_server))
    assert again.returncode == 0, again.stderr
    assert f"already uses {NEW}" in again.stdout and f"{chunks} old vectors dropped" in again.stdout
    assert by_model(db_url) == {NEW: chunks} and new_server.texts_embedded == 0


def test_cli_exit_codes(db_url, corpus, old_server, new_server):
    ingest(db_url, old_server, corpus)
    wrong = run_cli(["reembed", "--model", "absent-model"], env=cli_env(db_url, new_server))
    assert wrong.returncode == 2 and "absent-model" in wrong.stderr
    new_server.poison = "Tarte Tatin"
    partial = run_cli(["reembed"], env=cli_env(db_url, new_server))
    assert partial.returncode == 1 and "still uses fake-bow-64" in partial.stderr
    assert "Traceback" not in partial.stderr + wrong.stderr


def test_progress_counts_up_to_the_total(db_url, corpus, old_server, new_server):
    chunks = ingest(db_url, old_server, corpus).chunks_upserted
    seen: list[tuple[int, int]] = []
    run_reembed(db_url, new_server, progress=lambda event, data: seen.append(
        (data["embedded"], data["total"])) if event == "reembedded" else None)
    assert seen[-1] == (chunks, chunks)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    assert np.all(np.array([total for _, total in seen]) == chunks)


def test_a_reembed_to_another_model_abandons_the_unfinished_one(
    db_url, corpus, old_server, new_server
):
    chunks = ingest(db_url, old_server, corpus).chunks_upserted
    killed = run_cli(["reembed"], env=cli_env(db_url, new_server),
        faults=("reembed_after_batch:1:exit",))
    assert killed.returncode == 137 and by_model(db_url) == {OLD: chunks, NEW: 8}
    with FakeEmbeddingServer(dim=24) as third:
        other = run_cli(["reembed"], env=cli_env(db_url, third))
    assert other.returncode == 0, other.stderr
    assert f"abandoning the unfinished re-embed of 'default' to '{NEW}'" in other.stderr
    assert by_model(db_url) == {"fake-bow-24": chunks}  # partial vectors of NEW dropped too
    with psycopg.connect(db_url) as conn:
        runs = conn.execute("SELECT target_model, status FROM ragpg.reembed_run ORDER BY id")
        assert runs.fetchall() == [(NEW, "abandoned"), ("fake-bow-24", "completed")]
