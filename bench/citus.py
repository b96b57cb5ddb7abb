#!/usr/bin/env python3
"""One node against a Citus cluster (a coordinator and two workers on loopback), same tree.

    citus.py [--documents 400] [--queries 40] [--vocabulary 20000] [--results bench/results]
             [--distribution collection|document] [--shard-count N] [--output citus.md]
    citus.py --documents 20000       # ~100,000 chunks: ~5 min of ingest per side on 2 cores

Needs Citus built into the embedded PostgreSQL (``make citus``). Starts the cluster and one
plain server from the same binaries, ingests the same generated tree (``tests/test_citus.py``'s
French and English pages, the fake bag-of-words embedder) into each through ``ragpg``, then
times each search mode (p50/p95 over ``--queries`` questions, after one warm-up round) and
checks every answer is the same on both. ``--distribution`` is the cluster's layout: each
collection on one worker (``collection``) or the collection's documents over every worker
(``document``). On one 2-core machine the cluster cannot gain: it
adds the coordinator's hop and planning; this measures that overhead.

Writes ``<results>/citus.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rag_pg import RagPG  # noqa: E402
from rag_pg.testing.embedserver import FakeEmbeddingServer  # noqa: E402
from tests.citus_cluster import citus_built, citus_cluster  # noqa: E402
from tests.private_pg import private_server  # noqa: E402
from tests.test_citus import QUERIES, WORDS_EN, WORDS_FR, settings, write_tree  # noqa: E402


def questions(n: int) -> list[str]:
    words = WORDS_FR + WORDS_EN
    return [*QUERIES, *(" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(3))
                        for i in range(max(0, n - len(QUERIES))))][:n]


def timed(rag: RagPG, query: str, mode: str) -> tuple[float, list[tuple[str, int, float]]]:
    start = time.perf_counter()
    hits = rag.search(query, k=10, mode=mode)  # type: ignore[arg-type]
    return (time.perf_counter() - start) * 1000, [(h.path, h.chunk.position, h.score) for h in hits]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--vocabulary", type=int, default=20000,
                        help="made-up words beside the real ones (Zipf-drawn)")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--distribution", choices=("collection", "document"), default="collection")
    parser.add_argument("--shard-count", type=int, help="database.shard_count (unset: Citus's 32)")
    parser.add_argument("--output", default="citus.md", help="the results file's name")
    args = parser.parse_args()
    if not citus_built():
        print("Citus is not built into the embedded PostgreSQL: run `make citus` first")
        return 2
    folder = tempfile.TemporaryDirectory(prefix="ragpg-citus-bench-")  # the tree, removed at the end
    tree = write_tree(Path(folder.name) / "tree", args.documents, vocabulary=args.vocabulary)
    asked = questions(args.queries)
    rows = []
    with folder, citus_cluster(workers=2) as cluster, private_server() as one_url, \
            FakeEmbeddingServer(dim=64) as embedder:
        options = {"retrieval.exact_limit": 5000, "chunk.size": 80}
        with RagPG(one_url, settings(embedder, **options)) as one, \
                RagPG(cluster.url, settings(embedder, "bench", **options,
                                            **{"database.distribution": args.distribution,
                                               "database.shard_count": args.shard_count})) as many:
            loads = {}
            for name, rag in (("one node", one), ("cluster", many)):
                rag.init()
                start = time.perf_counter()
                report = rag.ingest(tree)
                loads[name] = (time.perf_counter() - start, report.chunks_upserted)
            differ: dict[str, int] = {}
            for mode in ("vector", "keyword", "hybrid"):
                times: dict[str, list[float]] = {"one node": [], "cluster": []}
                for rag in (one, many):
                    for q in asked:  # warm-up: plans, caches, connections
                        timed(rag, q, mode)
                for q in asked:
                    t1, a = timed(one, q, mode)
                    t2, b = timed(many, q, mode)
                    times["one node"].append(t1)
                    times["cluster"].append(t2)
                    differ[mode] = differ.get(mode, 0) + ([x[:2] for x in a] != [x[:2] for x in b])
                p = {n: (statistics.median(t), sorted(t)[int(0.95 * (len(t) - 1))]) for n, t in times.items()}
                rows.append((mode, p["one node"], p["cluster"]))
    shards = f", {args.shard_count} shards" if args.shard_count else ""
    lines = [f"# One node and a 2-worker Citus cluster (by {args.distribution}{shards}),"
             f" {loads['one node'][1]} chunks",
             "", f"Ingest: one node {loads['one node'][0]:.1f} s, cluster {loads['cluster'][0]:.1f} s"
             f" ({loads['cluster'][1]} chunks); {len(asked)} questions per mode, k = 10;"
             " answers differing (the vector leg over HNSW is approximate: two builds of the index,"
             " on two servers or one, need not keep the same neighbours):"
             f" {', '.join(f'{m} {n}' for m, n in differ.items())}.", "",
             "| mode | one node p50 / p95 (ms) | cluster p50 / p95 (ms) | p50 ratio |", "|---|---:|---:|---:|"]
    for mode, a, b in rows:
        lines.append(f"| {mode} | {a[0]:.1f} / {a[1]:.1f} | {b[0]:.1f} / {b[1]:.1f} | {b[0] / a[0]:.2f} |")
    text = "\n".join(lines) + "\n"
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / args.output).write_text(text, encoding="utf-8")
    print(text)
    return 0 if differ["keyword"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
