#!/usr/bin/env python3
"""What document permissions cost a search: askers who may read 100%, 10% and 1% of the
collection, against a search without permissions (one run, one machine).

    permissions.py [--chunks 100000] [--dim 384] [--queries 100] [--results bench/results]

Builds the collection of ``bench/scale.py`` (``--chunks`` chunks of Zipf-worded text, ten per
document, structured vectors, ragpg's HNSW index) in a private embedded PostgreSQL, gives each
document one reader group (``g00`` ... ``g99``, by its position, so ``g00`` reads the same 1%
as ``scale.py``'s path filter), enables the reader policy (``ragpg permissions enable``) and
times ragpg's search statement in each mode, as each asker, on the embedded server's
superuser: the transaction names the principals and sets the surface role first, exactly as
``RagPG(..., principals=...)`` does. Every hit is checked readable by its asker, and the number
of candidate rows per query is reported (20 per leg whenever that many readable chunks match).

Writes ``<results>/permissions.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from psycopg import sql

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import scale  # noqa: E402  (bench/ is not a package)
import scale_keyword  # noqa: E402

ASKERS: dict[str, tuple[str, ...] | None] = {
    "no permissions": None,
    "reads 100%": tuple(f"g{i:02d}" for i in range(100)),
    "reads 10%": tuple(f"g{i:02d}" for i in range(10)),
    "reads 1%": ("g00",),
}
MODES = ("vector", "keyword", "hybrid")


def give_readers(conn: Any, schema: str) -> None:
    """One reader group per document (g + its two-digit path prefix), copied on its chunks."""
    s = sql.Identifier(schema)
    with conn.transaction():
        conn.execute(sql.SQL("UPDATE {s}.document SET readers = ARRAY['g' || substr(path, 2, 2)]"
                             ).format(s=s))
        conn.execute(sql.SQL("UPDATE {s}.chunk c SET readers = d.readers FROM {s}.document d"
                             " WHERE d.id = c.document_id AND d.collection = c.collection").format(s=s))
    conn.execute(sql.SQL("VACUUM (ANALYZE) {s}.document, {s}.chunk").format(s=s))


def give_vector_readers(conn: Any, schema: str) -> None:
    """Each vector row gets its chunk's readers (after the vectors' COPY)."""
    s = sql.Identifier(schema)
    with conn.transaction():
        conn.execute(sql.SQL("UPDATE {s}.chunk_vector v SET readers = c.readers FROM {s}.chunk c"
                             " WHERE c.id = v.chunk_id AND c.collection = v.collection").format(s=s))
    conn.execute(sql.SQL("VACUUM (ANALYZE) {s}.chunk_vector").format(s=s))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--ef-search", type=int, default=40)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--results", type=Path, default=HERE / "results")
    a = ap.parse_args(argv)
    # What scale.load reads of its arguments.
    a.chunks_per_doc, a.words_per_chunk, a.keyword_only = 10, 20, False
    a.ingest_batch, a.ingest_compare = 1000, False

    import psycopg
    from pgvector.psycopg import register_vector

    from rag_pg.api import RagPG
    from rag_pg.config import Settings
    from rag_pg.search.plan import SearchPlan
    from rag_pg.search.statement import Searcher
    from rag_pg.store import permissions, tenancy
    from rag_pg.store.documents import Store

    workdir = Path(tempfile.mkdtemp(prefix="ragpg-permissions-"))
    url, server = scale.embedded_server(workdir, "2GB")
    schema = "ragpg"
    settings = Settings.load(environ={}, cwd=workdir, overrides={"database.url": url})
    with RagPG(url, settings) as rag:
        rag.init()
    lines: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        print(f"permissions: loading {a.chunks:,} chunks", file=sys.stderr)
        t0 = time.perf_counter()
        scale.load(conn, a, schema)
        give_readers(conn, schema)
        give_vector_readers(conn, schema)
        conn.execute("SET maintenance_work_mem = '1GB'")
        Store(schema).ensure_vector_index(conn, scale.MODEL, a.dim)
        conn.execute(sql.SQL("ANALYZE {s}.chunk_vector").format(s=sql.Identifier(schema)))
        permissions.enable(conn, schema)
        print(f"permissions: built in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        searcher = Searcher(schema)
        rng = np.random.default_rng(a.seed + 1)
        vectors = scale.lowrank(rng, a.queries, a.dim)
        words, _ = scale_keyword.vocabulary()
        texts = [scale_keyword.query_text(rng, words, "question") for _ in range(a.queries)]
        readers = {int(r[0]): r[1] for r in conn.execute(sql.SQL(
            "SELECT id, readers FROM {s}.chunk").format(s=sql.Identifier(schema)))}
        role = tenancy.surface_role(schema)

        def search(i: int, mode: str, asker: tuple[str, ...] | None) -> list[int]:
            plan = SearchPlan(collection=scale.COLLECTION, k=10, mode=mode,  # type: ignore[arg-type]
                              query_text=texts[i], query_vector=vectors[i], model=scale.MODEL,
                              dimension=a.dim, candidates=20, ef_search=a.ef_search,
                              readers=asker)
            with conn.transaction():
                if asker is not None:
                    for statement in permissions.statements_for(asker, role):
                        conn.execute(statement)
                return [int(row.chunk_id) for row in searcher.execute(conn, plan).fetchall()]

        results: dict[tuple[str, str], dict[str, Any]] = {}
        for mode in MODES:
            for name, asker in ASKERS.items():
                for i in range(min(20, a.queries)):  # warm-up: plans, caches
                    search(i, mode, asker)
                times, counts = [], []
                for i in range(a.queries):
                    start = time.perf_counter()
                    ids = search(i, mode, asker)
                    times.append((time.perf_counter() - start) * 1000)
                    counts.append(len(ids))
                    for chunk_id in ids:  # every hit readable by its asker
                        held = readers[chunk_id]
                        assert asker is None or held is None or set(held) & set(asker), (
                            name, chunk_id, held)
                times.sort()
                results[(mode, name)] = {"p50": statistics.median(times),
                                         "p95": times[int(0.95 * (len(times) - 1))],
                                         "hits": statistics.mean(counts)}
                print(f"permissions: {mode} {name}: {results[(mode, name)]}", file=sys.stderr)
        version = conn.execute("SELECT current_setting('server_version')").fetchone()[0]
    server.cleanup()
    lines += [
        "# Permissions: search cost by share of the collection an asker may read",
        "",
        f"`python bench/permissions.py --chunks {a.chunks} --dim {a.dim} --queries {a.queries}`"
        f" — {time.strftime('%Y-%m-%d', time.gmtime())}, PostgreSQL {version}, one run, one machine;"
        f" k = 10, 20 candidates per leg, ef_search {a.ef_search}. Each document has one reader"
        " group of 100; the reader policy is enabled for every row read, the asker's transaction"
        " sets the principals and the surface role.",
        "",
        "| mode | asker | p50 ms | p95 ms | p50 / no permissions | candidate rows per query |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for mode in MODES:
        base = results[(mode, "no permissions")]["p50"]
        for name in ASKERS:
            r = results[(mode, name)]
            lines.append(f"| {mode} | {name} | {r['p50']:.1f} | {r['p95']:.1f} |"
                         f" {r['p50'] / base:.2f} | {r['hits']:.1f} |")
    a.results.mkdir(parents=True, exist_ok=True)
    (a.results / "permissions.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
