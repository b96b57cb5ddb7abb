"""Where a search's time goes: its parts timed one after the other, query by query.

Runs on an index ragpg already holds (any tree ingested with an HTTP embedding service) and
the service that embedded it:

    python bench/search_parts.py --db URL --embed-url http://127.0.0.1:PORT \\
        --queries queries.txt [--mode vector] [--repeat 2] [--collection default]

``--queries``: one question per line (or JSON lines with a ``query`` field, as the shared
harness writes them). For each query, in turn: the pool's lend (with its check), the
embedding call through ragpg's provider and through a bare ``httpx.Client``, the snapshot
(the collection read, settings, statement: what ``RagPG._run_plan`` sends), the same
statements through psycopg's ``transaction()`` in a pipeline (four Syncs instead of one),
the collection read alone, the statement alone, and the whole ``RagPG.search``. Prints each
part's p50 ms and the median of the paired difference between the two snapshots (same hits
checked on each query).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))



def read_queries(path: Path) -> list[str]:
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return [json.loads(line)["query"] if line.startswith("{") else line for line in lines if line]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--embed-url", required=True)
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--mode", default="vector", choices=("vector", "hybrid", "keyword"))
    ap.add_argument("--collection", default="default")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--ef-search", type=int, default=40)
    a = ap.parse_args()

    import httpx

    from rag_pg.api import RagPG
    from rag_pg.config import Settings
    from rag_pg.embed import serving
    from rag_pg.search.query_vectors import QueryVectors
    from rag_pg.search.run import SearchOptions
    from rag_pg.store.db import read_snapshot
    from rag_pg.store.queries import statement

    settings = Settings.load(environ={}, cwd=HERE, overrides={
        "database.url": a.db, "embedding.provider": "http", "embedding.url": a.embed_url,
        "retrieval.ef_search": a.ef_search})
    queries = read_queries(a.queries)
    times: dict[str, list[float]] = {}

    def timed(name: str, part: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = part(*args, **kwargs)
        times.setdefault(name, []).append(time.perf_counter() - start)
        return out

    bare = httpx.Client(trust_env=False)
    with RagPG(a.db, settings) as rag, rag.reads.connection() as conn:
        info = rag.searcher.read_collection(conn, a.collection)
        provider = serving(rag.provider, info.model, info.dimension)
        searcher = rag.searcher

        def one_sync(plan: Any) -> list[int]:
            with read_snapshot(conn):
                searcher.send_collection(conn, a.collection)
                cur = searcher.execute(conn, plan)
            return [row.chunk_id for row in cur.fetchall()]

        def four_syncs(plan: Any) -> list[int]:
            with conn.pipeline():
                with conn.transaction():
                    conn.execute(statement("snapshot_set"))
                    searcher.send_collection(conn, a.collection)
                    cur = searcher.execute(conn, plan)
                return [row.chunk_id for row in cur.fetchall()]

        def statement(plan: Any) -> list[int]:
            cur = conn.execute(searcher.statement(plan), searcher.params(plan))
            return [row[0] for row in cur.fetchall()]

        for _ in range(a.repeat + 1):  # the first pass warms caches and prepared statements
            times.clear()
            for i, query in enumerate(queries):
                if provider is not None:
                    timed("embed, ragpg's provider", provider.embed, "query", [query])
                    timed("embed, bare httpx", bare.post, a.embed_url.rstrip("/") + "/embed",
                          json={"texts": [query], "type": "query", "encoding": "base64"})
                timed("collection read alone", searcher.read_collection, conn, a.collection)
                plan = rag._runner()._plan(query, 10, a.mode, a.collection, info, False, SearchOptions(),
                                 QueryVectors(lambda: rag.provider, query))
                if plan is None:
                    continue
                pair = [("snapshot, one Sync", one_sync), ("snapshot, four Syncs", four_syncs)]
                got = [timed(name, f, plan) for name, f in pair[:: 1 if i % 2 else -1]]
                if got[0] != got[1]:
                    raise SystemExit(f"the two snapshots disagree on {query!r}")
                timed("statement alone (autocommit)", statement, plan)

        def lend() -> None:  # a second connection of the pool, with the pool's own check
            with rag.reads.connection():
                pass

        for query in queries:
            timed("pool lend", lend)
            timed(f"RagPG.search({a.mode})", rag.search, query, 10, mode=a.mode)
    bare.close()
    for name, values in times.items():
        print(f"{name:32s} p50 {statistics.median(values) * 1e3:7.2f} ms  (n={len(values)})")
    one, four = times["snapshot, one Sync"], times["snapshot, four Syncs"]
    paired = statistics.median(b - a_ for a_, b in zip(one, four, strict=True))
    print(f"{'four Syncs - one Sync, paired':32s} p50 {paired * 1e3:7.2f} ms")


if __name__ == "__main__":
    main()
