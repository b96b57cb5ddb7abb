"""Filtered vector search: the HNSW path against the exact path, at several filter shares.

Runs on a database that ``bench/scale.py --db URL`` loaded (it keeps it). Its documents sit in
100 folders ``p00/`` … ``p99/`` of 1% each; this moves ``p01``–``p02`` under ``y02/`` and
``p03``–``p07`` under ``y05/`` (once), so that one path prefix selects 1%, 2% or 5% of the
collection, interleaved with the rest as the folders are. Each search runs twice per query,
the branch forced each way (``exact`` False or True), and prints p50 ms, so the share
where the two cross (``retrieval.exact_share``) can be read off.

    python bench/filter_share.py --db postgresql://…/scale1m --queries 20 --ef-search 40,200
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import scale  # noqa: E402  (bench/ is not a package)
import scale_keyword  # noqa: E402

GROUPS = {"y02": r"^p0[1-2]/", "y05": r"^p0[3-7]/"}


def group_folders(conn: psycopg.Connection[Any]) -> None:
    for folder, pattern in GROUPS.items():
        conn.execute("UPDATE ragpg.document SET path = %s || path WHERE path ~ %s",
                     (f"{folder}/", pattern))
    conn.execute("ANALYZE ragpg.document")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True, help="a database bench/scale.py loaded")
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--ef-search", default="40", help="comma-separated")
    ap.add_argument("--candidates", type=int, default=40)
    a = ap.parse_args()
    from rag_pg.search.hits import shape
    from rag_pg.search.plan import SearchPlan
    from rag_pg.search.statement import Searcher
    from rag_pg.store.db import prepare

    conn = psycopg.connect(a.db, autocommit=True)
    prepare(conn)
    group_folders(conn)
    searcher = Searcher("ragpg")
    rng = np.random.default_rng(2)
    qv = scale.lowrank(rng, a.queries, 384)
    words, _ = scale.vocabulary()
    texts = [scale_keyword.query_text(rng, words, "question") for _ in range(a.queries)]

    def p50(mode: str, exact: bool, prefix: str | None, ef: int) -> float:
        times = []
        for i in range(a.queries):
            plan = SearchPlan(collection=scale.COLLECTION, k=10, mode=mode, query_text=texts[i],
                              query_vector=qv[i], model=scale.MODEL, dimension=384,
                              candidates=a.candidates, path_prefix=prefix, ef_search=ef,
                              exact=exact)
            t0 = time.perf_counter()
            with conn.transaction():
                shape(searcher.execute(conn, plan).fetchall(), plan)
            times.append(time.perf_counter() - t0)
        return round(statistics.median(times) * 1e3, 1)

    for ef in (int(x) for x in a.ef_search.split(",")):
        print(f"ef_search {ef}, unfiltered: vector {p50('vector', False, None, ef)} ms,"
              f" hybrid {p50('hybrid', False, None, ef)} ms", flush=True)
        for share, prefix in (("1%", "p00"), ("2%", "y02"), ("5%", "y05")):
            for mode in ("vector", "hybrid"):
                index = [p50(mode, False, prefix, ef) for _ in range(2)]
                exact = [p50(mode, True, prefix, ef) for _ in range(2)]
                print(f"ef_search {ef}, {share} filter, {mode}: index {index} ms, exact {exact} ms",
                      flush=True)


if __name__ == "__main__":
    main()
