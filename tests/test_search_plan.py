"""A search embeds its query first, then runs its plan in one snapshot that also reads what the
plan depends on in the collection: one statement when the collection is what the plan
expected (vectors of the model the query was embedded with), else the plan made from what the
snapshot read (another model, statistics pending, no vectors), once."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.errors import EmbeddingError, StoreError
from rag_pg.search.plan import SearchPlan
from rag_pg.store.db import prepare
from rag_pg.testing.embedserver import FakeEmbeddingServer

from .rows import values
from .test_reembed import run_reembed

QUESTION = "comment restaurer une sauvegarde ?"


def settings(**overrides: Any) -> Settings:
    flat = {"embedding.batch_size": 8, "embedding.backoff": 0.0, "embedding.attempts": 1,
            **overrides}
    return Settings.load(environ={}, overrides=flat)


def http(server: FakeEmbeddingServer) -> dict[str, Any]:
    return {"provider": "http", "url": server.url}


def indexed(db_url: str, corpus: Path, **overrides: Any) -> None:
    with RagPG(db_url, settings(**overrides)) as rag:
        rag.init()
        assert rag.ingest(corpus).documents_failed == 0


def recorded(rag: RagPG, monkeypatch: pytest.MonkeyPatch) -> list[SearchPlan]:
    """The plans whose statement the search sends, in order."""
    plans: list[SearchPlan] = []
    execute = rag.searcher.execute

    def record(conn: psycopg.Connection[Any], plan: SearchPlan) -> Any:
        plans.append(plan)
        return execute(conn, plan)

    monkeypatch.setattr(rag.searcher, "execute", record)
    return plans


def chunk_ids(hits: list[Any]) -> list[int]:
    return [h.chunk_id for h in hits]


def test_an_expected_collection_costs_one_statement_and_one_embedding(
        db_url: str, corpus: Path, old_server: FakeEmbeddingServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    indexed(db_url, corpus, **{"embedding.url": old_server.url})
    with RagPG(db_url, settings(**{"embedding.url": old_server.url})) as rag:
        plans = recorded(rag, monkeypatch)
        for mode, embeddings in (("vector", 1), ("hybrid", 1), ("keyword", 0)):
            old_server.reset_counters()
            plans.clear()
            hits = rag.search(QUESTION, 3, mode=mode)  # type: ignore[arg-type]
            assert len(hits) == 3, mode
            assert (len(plans), old_server.calls) == (1, embeddings), mode
        # the whole collection is small: the statement itself chose exact search
        assert plans[0].exact is None


def test_a_collection_switched_to_another_model_is_searched_with_that_model(
        db_url: str, corpus: Path, old_server: FakeEmbeddingServer,
        new_server: FakeEmbeddingServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain holding both models embeds with its first, finds the collection on the other
    in its snapshot, and runs again with the query embedded by the part that serves it."""
    indexed(db_url, corpus, **{"embedding.url": old_server.url})
    run_reembed(db_url, new_server, keep=True)  # now on the new model, the old vectors kept
    with RagPG(db_url, settings(**{"embedding.url": new_server.url})) as alone:
        expected = chunk_ids(alone.search(QUESTION, 3, mode="vector"))
    chain = settings(**{"embedding.providers": [http(old_server), http(new_server)]})
    with RagPG(db_url, chain) as rag:
        plans = recorded(rag, monkeypatch)
        old_server.reset_counters()
        new_server.reset_counters()
        hits = rag.search(QUESTION, 3, mode="vector")
    assert chunk_ids(hits) == expected
    assert [(p.model, p.dimension) for p in plans] == [("fake-bow-64", 64), ("fake-bow-32", 32)]
    assert (old_server.calls, new_server.calls) == (1, 1)


def test_a_provider_of_another_model_is_refused_in_one_line(
        db_url: str, corpus: Path, old_server: FakeEmbeddingServer,
        new_server: FakeEmbeddingServer) -> None:
    indexed(db_url, corpus, **{"embedding.url": old_server.url})
    with RagPG(db_url, settings(**{"embedding.url": new_server.url})) as rag, \
            pytest.raises(EmbeddingError, match="serves 'fake-bow-32' .* not 'fake-bow-64' .* that"
                                                " the collection is indexed with"):
        rag.search(QUESTION, 3, mode="hybrid")


def test_pending_statistics_are_read_in_the_snapshot_and_the_exhaustive_leg_runs(
        db_url: str, corpus: Path, old_server: FakeEmbeddingServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A first load killed before counting its statistics leaves them pending: the pruned
    keyword leg would read none, so the plan the snapshot calls for (exhaustive) runs."""
    indexed(db_url, corpus, **{"embedding.url": old_server.url})
    with RagPG(db_url, settings(**{"embedding.url": old_server.url})) as rag:
        expected = chunk_ids(rag.search(QUESTION, 5, mode="keyword"))
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("UPDATE ragpg.collection SET term_stat_pending = true")
            conn.execute("DELETE FROM ragpg.term_stat")
        plans = recorded(rag, monkeypatch)
        assert chunk_ids(rag.search(QUESTION, 5, mode="keyword")) == expected
    assert [p.keyword_exhaustive for p in plans] == [False, True]


def test_a_collection_without_vectors_is_searched_by_keywords_while_the_service_is_down(
        db_url: str, corpus: Path, old_server: FakeEmbeddingServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The query's embedding fails, but the collection needs none: its keyword hits, from one
    statement and one embedding attempt. A vector search needs the vector: the service's
    failure; with the service back, the collection's own reason, in one line."""
    indexed(db_url, corpus, **{"embedding.provider": "none"})
    old_server.fault = "503"
    down = settings(**{"embedding.url": old_server.url, "embedding.cooldown": 0})
    with RagPG(db_url, down) as rag:
        plans = recorded(rag, monkeypatch)
        hits = rag.search(QUESTION, 3, mode="hybrid")
        assert len(hits) == 3 and [p.mode for p in plans] == ["keyword"]
        assert (old_server.calls, old_server.health_calls) == (0, 1)  # one try, no second wait
        with pytest.raises(EmbeddingError, match="503"):
            rag.search(QUESTION, 3, mode="vector")
        old_server.fault = None
        with pytest.raises(StoreError, match="has no vectors: use keyword mode"):
            rag.search(QUESTION, 3, mode="vector")


def test_a_lost_connection_runs_the_snapshot_again_not_the_embedding(
        db_url: str, corpus: Path, old_server: FakeEmbeddingServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    indexed(db_url, corpus, **{"embedding.url": old_server.url})
    with RagPG(db_url, settings(**{"embedding.url": old_server.url})) as rag:
        expected = chunk_ids(rag.search(QUESTION, 3, mode="hybrid"))
        send = rag.searcher.send_collection
        lost: list[int] = []

        def lose_once(conn: psycopg.Connection[Any], collection: str, **options: Any) -> Any:
            if not lost:
                lost.append(1)
                raise psycopg.OperationalError("the server closed the connection")
            return send(conn, collection, **options)

        monkeypatch.setattr(rag.searcher, "send_collection", lose_once)
        old_server.reset_counters()
        assert chunk_ids(rag.search(QUESTION, 3, mode="hybrid")) == expected
    assert lost and old_server.calls == 1


def test_no_parallel_worker_starts_for_a_branch_the_statement_skips(
        db_url: str, corpus: Path, old_server: FakeEmbeddingServer) -> None:
    """A whole-collection vector search holds an exact branch that a one-time filter skips; on
    a collection large enough for a parallel plan its Gather would start workers anyway. The
    search's settings allow none. Parallel plans are made cheap here, so that a collection of
    a few chunks gets one: without the search settings workers start, with them none."""
    indexed(db_url, corpus, **{"embedding.url": old_server.url})
    with RagPG(db_url, settings(**{"embedding.url": old_server.url})) as rag:
        vector = rag.provider.embed("query", [QUESTION])[0]
        plan = SearchPlan(collection="default", k=3, mode="vector", query_text=QUESTION,
                          query_vector=vector, model=rag.provider.model, dimension=len(vector),
                          candidates=3, exact=False)
        searcher = rag.searcher
        with psycopg.connect(db_url, autocommit=True) as conn:
            prepare(conn)

            def launched(with_search_settings: bool) -> str:
                with conn.transaction():
                    for name in ("parallel_setup_cost", "parallel_tuple_cost",
                                 "min_parallel_table_scan_size", "min_parallel_index_scan_size"):
                        conn.execute(f"SET LOCAL {name} = 0")
                    if with_search_settings:
                        searcher.apply_settings(conn, plan)
                    return "\n".join(values(conn, psycopg.sql.SQL("EXPLAIN (ANALYZE, COSTS OFF) ")
                                             + searcher.statement(plan), searcher.params(plan)))

            assert re.search(r"Workers Launched: [1-9]", launched(False))
            assert "Workers" not in launched(True)
