"""Filters apply to both legs, and a filtered vector search still returns min(k, matches) rows:
at 50%, 10%, 1% and 0.1% selectivity, through HNSW iterative scans and through exact search."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg.types.json import Jsonb

from rag_pg import RagPG, Settings

from .rows import records, value

N_DOCS = 1000
SELECTIVITY = {"half": 2, "tenth": 10, "hundredth": 100, "thousandth": 1000}  # every n-th doc


def front_matter(i: int) -> str:
    lines = [f"{name}: {str(i % every == 0).lower()}" for name, every in SELECTIVITY.items()]
    lines.append(f"tags: [t{i % 7}, common]")
    return "---\n" + "\n".join(lines) + "\n---\n"


def folder(i: int) -> str:
    return "rare" if i % 500 == 0 else ("some" if i % 50 == 0 else f"bulk{i % 5}")


@pytest.fixture
def big(db_url: str, embed_server: Any, tmp_path: Path) -> Any:
    root = tmp_path / "big"
    words = ["réseau", "disque", "mémoire", "processus", "fichier", "noyau", "paquet", "service"]
    for i in range(N_DOCS):
        target = root / folder(i) / f"doc{i:04d}.md"
        target.parent.mkdir(parents=True, exist_ok=True)
        body = " ".join(words[(i * j) % len(words)] for j in range(1, 12))
        target.write_text(f"{front_matter(i)}# Doc {i}\n\n{body} n{i}\n", encoding="utf-8")
    # a near-identical folder name that a segment-aware prefix must not match
    (root / "rarely").mkdir()
    (root / "rarely" / "x.md").write_text("# X\n\nréseau disque mémoire\n", encoding="utf-8")
    settings = Settings.load(environ={}, overrides={"embedding.url": embed_server.url,
                                                    "embedding.batch_size": 256})
    with RagPG(db_url, settings) as rag:
        rag.init()
        rag.ingest(root)
        rag.ingest(root / "some", collection="tenant-b")  # a few of the files, another tenant
        yield rag


def exact_top(db_url: str, rag: RagPG, query: str, where: dict[str, Any], k: int,
              collection: str = "default") -> list[int]:
    qvec = rag.provider.embed("query", [query])[0]
    with psycopg.connect(db_url) as conn:
        rows = records(conn,
            "SELECT cv.chunk_id, cv.embedding::text AS embedding FROM ragpg.chunk_vector cv"
            " JOIN ragpg.chunk c ON c.id = cv.chunk_id JOIN ragpg.document d ON d.id = c.document_id"
            " WHERE d.collection = %s AND d.front_matter @> %s", (collection, Jsonb(where)))
    vectors = np.array([json.loads(r["embedding"]) for r in rows], dtype=np.float64)
    if not len(rows):
        return []
    sims = vectors @ qvec / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(qvec))
    order = sorted(range(len(rows)), key=lambda i: (-sims[i], rows[i]["chunk_id"]))
    return [int(rows[i]["chunk_id"]) for i in order[:k]]


CASES = [
    ("half", {"half": True}, N_DOCS // 2),
    ("tenth", {"tenth": True}, N_DOCS // 10),
    ("hundredth", {"hundredth": True}, N_DOCS // 100),
    ("thousandth", {"thousandth": True}, N_DOCS // 1000),
]


@pytest.mark.parametrize("exact_limit", [0, 5000])
def test_filtered_vector_search_returns_min_k_matches_at_every_selectivity(big, db_url, exact_limit):
    """exact_limit=0 forces the HNSW path (iterative scan); 5000 sends selective filters to the
    exact path. Either way: rows returned = min(k, matches) and recall@10 >= 0.9."""
    rag = RagPG(db_url, big.settings.with_overrides(**{"retrieval.exact_limit": exact_limit,
                                                        "retrieval.ef_search": 10}))
    report = {}
    k = 10
    for name, filters, matches in CASES:
        for query in ("réseau disque", "mémoire noyau service", "paquet fichier processus"):
            hits = rag.search(query, k, mode="vector", filters=filters)
            assert len(hits) == min(k, matches), (name, exact_limit, len(hits))
            expected = exact_top(db_url, rag, query, filters, k)
            recall = len({h.chunk_id for h in hits} & set(expected)) / len(expected)
            assert recall >= 0.9, (name, exact_limit, recall)
            report[name] = (len(hits), min(k, matches), recall)
    rag.close()
    print(json.dumps({"exact_limit": exact_limit, "rows/expected/recall": report}))


def test_path_prefix_is_segment_aware_and_applies_to_both_legs(big):
    for mode in ("vector", "keyword", "hybrid"):
        hits = big.search("réseau disque mémoire", 10, mode=mode, path_prefix="rare")
        assert sorted(h.path for h in hits) == ["rare/doc0000.md", "rare/doc0500.md"]
        some = big.search("réseau disque mémoire", 10, mode=mode, path_prefix="./some/")
        assert len(some) == 10 and all(h.path.startswith("some/") for h in some)


def test_front_matter_list_values_match_a_scalar_or_a_sublist(big):
    for mode in ("vector", "keyword", "hybrid"):
        t3 = big.search("réseau", 10, mode=mode, filters={"tags": "t3"})
        assert len(t3) == 10
        both = big.search("réseau", 50, mode=mode, filters={"tags": ["t3", "common"], "tenth": True})
        numbers = [int(h.path.split("doc")[1][:4]) for h in both]
        assert numbers and all(n % 7 == 3 and n % 10 == 0 for n in numbers)
        assert big.search("réseau", 10, mode=mode, filters={"tags": "nope"}) == []


def test_collection_is_a_filter_of_both_legs(big):
    for mode in ("vector", "keyword", "hybrid"):
        a = big.search("réseau", 5, mode=mode)
        b = big.search("réseau", 5, mode=mode, collection="tenant-b")
        assert {h.collection for h in a} == {"default"} and {h.collection for h in b} == {"tenant-b"}
        assert len(b) == 5 and all(h.path.startswith("doc") for h in b)  # ingested from some/
        assert any(not h.path.startswith("some/") for h in a)


def test_a_crowded_collection_scan_still_returns_k_hits_and_leaves_no_setting_behind(
    big, db_url, tmp_path
):
    """A whole-collection index search scans the model's HNSW index, which other collections
    share: with near twins of every document in another collection, about half the nearest
    rows of the index are not ours, and pgvector's iterative scan (set for the search's own
    transaction only) goes on past them. The caller's session keeps its own settings."""
    overrides = {"retrieval.exact_limit": 0, "retrieval.ef_search": 10}
    crowd = tmp_path / "crowd"
    for i, source in enumerate(sorted((tmp_path / "big").rglob("*.md"))):
        target = crowd / source.relative_to(tmp_path / "big")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source.read_text(encoding="utf-8") + f" twin{i}\n", encoding="utf-8")
    big.ingest(crowd, collection="crowd")
    with psycopg.connect(db_url, autocommit=True) as conn:
        # Small tables: statistics and no bitmap scans, so the planner walks the HNSW index.
        conn.execute("ANALYZE ragpg.chunk_vector")
        conn.execute("SET enable_bitmapscan = off")
        before = conn.execute("SELECT current_setting('hnsw.ef_search', true),"
                              " current_setting('hnsw.iterative_scan', true)").fetchone()
        with RagPG(conn, big.settings.with_overrides(**overrides)) as rag:
            for collection in ("default", "crowd"):
                for mode in ("vector", "hybrid"):
                    hits = rag.search("réseau disque", 10, mode=mode, collection=collection)
                    assert len(hits) == 10 and {h.collection for h in hits} == {collection}
        after = conn.execute("SELECT current_setting('hnsw.ef_search', true),"
                             " current_setting('hnsw.iterative_scan', true)").fetchone()
        assert after == before
        assert conn.execute("SHOW enable_bitmapscan").fetchone() == ("off",)


def test_a_bulk_load_leaves_fresh_planner_statistics(big, db_url, tmp_path):
    """Before autovacuum analyzes a freshly loaded collection the planner takes it for a tiny
    one and searches it exactly (a sequential scan): an ingest that wrote a large share of the
    collection runs ANALYZE itself (analyze_count counts manual ANALYZEs, not autovacuum's);
    a small change leaves that to autovacuum."""

    def analyzed() -> int:
        with psycopg.connect(db_url) as conn:
            return int(value(conn,
                "SELECT analyze_count FROM pg_stat_user_tables"
                " WHERE schemaname = 'ragpg' AND relname = 'chunk_vector'"))

    after_load = analyzed()
    assert after_load >= 1  # the fixture's cold load of 1,000 documents
    (tmp_path / "big" / "bulk1" / "doc0001.md").write_text("# Doc 1\n\nnoyau\n", encoding="utf-8")
    assert big.ingest(tmp_path / "big").chunks_upserted == 1
    assert analyzed() == after_load
