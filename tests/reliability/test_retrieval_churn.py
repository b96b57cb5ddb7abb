"""D3: every document edited eight times with autovacuum off, the HNSW path forced: searches
still return k rows with the recall of an exact scan, before and after VACUUM."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import psycopg

from rag_pg import RagPG, Settings

from ..rows import value
from ..test_filters import exact_top
from .conftest import counted, slow

WORDS = ["réseau", "disque", "mémoire", "processus", "fichier", "noyau", "paquet", "service", "sauvegarde",
         "journal", "index", "requête"]
QUERIES = ("réseau disque", "mémoire noyau service", "paquet fichier processus", "journal requête index")


def write_docs(root: Path, docs: int, rng: random.Random, round_: int) -> None:
    for i in range(docs):
        folder = root / f"part{i % 5}"
        folder.mkdir(parents=True, exist_ok=True)
        paragraphs = "\n\n".join(" ".join(rng.choice(WORDS) for _ in range(25)) + f" r{round_}d{i}p{j}"
                                 for j in range(3))
        (folder / f"doc{i:04}.md").write_text(f"# Doc {i}\n\n{paragraphs}\n")


def churn(db_url: str, server: Any, root: Path, docs: int, rounds: int = 8, k: int = 10) -> dict[str, Any]:
    rng = random.Random(31)
    settings = Settings().with_overrides(**{"embedding.url": server.url, "embedding.batch_size": 32,
                                            "retrieval.exact_limit": 0, "retrieval.ef_search": 40})
    with psycopg.connect(db_url, autocommit=True) as conn:
        for table in ("chunk", "chunk_vector", "document"):
            conn.execute(f"ALTER TABLE ragpg.{table} SET (autovacuum_enabled = false)")
    stats: dict[str, Any] = {"docs": docs, "rounds": rounds, "short_answers": 0, "worst_recall": 1.0,
                             "after_vacuum_recall": 1.0, "after_vacuum_short": 0}

    def measure(rag: RagPG) -> tuple[int, float]:
        short, worst = 0, 1.0
        for query in QUERIES:
            hits = rag.search(query, k, mode="vector")
            short += len(hits) < k
            expected = exact_top(db_url, rag, query, {}, k)
            worst = min(worst, len({h.chunk_id for h in hits} & set(expected)) / len(expected))
        return short, worst

    with RagPG(db_url, settings) as rag:
        write_docs(root, docs, rng, 0)
        rag.ingest(root)
        for round_ in range(1, rounds + 1):
            write_docs(root, docs, rng, round_)  # every document changes: delete + insert of its vectors
            rag.ingest(root)
            short, worst = measure(rag)
            stats["short_answers"] += short
            stats["worst_recall"] = min(stats["worst_recall"], worst)
        with psycopg.connect(db_url, autocommit=True) as conn:
            row = value(conn, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = 'ragpg'"
                               " AND relname = 'chunk_vector'")
            stats["dead_tuples_before_vacuum"] = int(row) if row else 0
            conn.execute("VACUUM ragpg.chunk_vector")
        stats["after_vacuum_short"], stats["after_vacuum_recall"] = measure(rag)
    stats["worst_recall"] = round(stats["worst_recall"], 2)
    stats["after_vacuum_recall"] = round(stats["after_vacuum_recall"], 2)
    return stats


def check(stats: dict[str, Any]) -> None:
    assert stats["short_answers"] == stats["after_vacuum_short"] == 0, stats
    assert stats["worst_recall"] >= 0.9 and stats["after_vacuum_recall"] >= 0.9, stats


def d3_text(stats: dict[str, Any]) -> str:
    return (f"{stats['docs']} docs edited {stats['rounds']} times with autovacuum off (HNSW forced):"
            f" k rows for {len(QUERIES) * stats['rounds'] - stats['short_answers']}/{len(QUERIES) * stats['rounds']}"
            f" searches, worst recall@10 {stats['worst_recall']},"
            f" after VACUUM {stats['after_vacuum_recall']}; VACUUM errors 0")


def test_d3_edit_churn_without_vacuum(db_url, embed_server, tmp_path, figure):
    stats = churn(db_url, embed_server, tmp_path / "tree", docs=80)
    check(stats)
    figure("D3", d3_text(stats), **stats)


@slow
def test_d3_counted_edit_churn(db_url, embed_server, tmp_path, figure):
    stats = churn(db_url, embed_server, tmp_path / "tree", docs=counted(1000, "D3"))
    check(stats)
    figure("D3", d3_text(stats), **stats)
