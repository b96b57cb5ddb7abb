#!/usr/bin/env python3
"""HNSW build rate: ragpg's partial expression index against a plain ``vector(384)`` column.

    hnsw_build.py [--vectors 50000] [--dim 384] [--m 16] [--ef-construction 64]
                  [--maintenance-work-mem 1GB] [--workers 1] [--repeat 1] [--db URL]
                  [--variants plain,ragpg,...] [--results bench/results]

The same L2-normalised vectors (low-rank plus noise, the geometry of text embeddings; see
bench/scale.py) are loaded by binary COPY into two tables of one scratch schema:

* ``chunk_vector``: ragpg's shape (chunk_id, collection, model, untyped ``vector``), where
  ``Store.ensure_vector_index`` builds ragpg's index: ``(embedding::vector(d))`` with
  ``WHERE model = ...``, its ``maintenance_work_mem`` set from ``index.build_memory``;
* ``plain``: (id, ``vector(d)``), the plain pgvector table, with a plain HNSW index.

Then each variant is built in turn on the same session settings (``--maintenance-work-mem``
and ``--workers`` as ``max_parallel_maintenance_workers``), dropped, and the next built, so
one run compares them; variants that change one factor at a time tell what costs:

    plain        plain column, plain index                                   (the reference)
    typed_wide   ragpg's row shape with a typed column, no cast, no predicate
    typed_partial  the same with ragpg's partial predicate
    cast         ragpg's table, the cast expression, no predicate
    ragpg        ragpg's table and statement (Store.ensure_vector_index)
    ragpg_session  ragpg's statement with the session's maintenance_work_mem and workers
                 only (the build_memory setting not applied) -- shows what the setting does

Writes ``<results>/hnsw_build.md`` and ``.jsonl``: build seconds, vectors/s, ratio to plain,
and the parallel workers PostgreSQL planned (from the build's own log line at DEBUG1).
"""

from __future__ import annotations

import argparse
import json
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

SCHEMA = "hnsw_bench"
MODEL = "bench-lowrank"
COLLECTION = "bench"
VARIANTS = ("plain", "typed_wide", "typed_partial", "cast", "ragpg", "ragpg_session")
COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
COPY_TRAILER = (-1).to_bytes(2, "big", signed=True)


def Q(text: str, **parts: sql.Composable) -> sql.Composed:  # noqa: N802
    return sql.SQL(text).format(s=sql.Identifier(SCHEMA), **parts)


def vectors(n: int, dim: int, seed: int) -> np.ndarray:
    from scale import lowrank

    return lowrank(np.random.default_rng(seed), n, dim)


def plain_rows(x: np.ndarray) -> bytes:
    """Binary COPY rows (id int8, embedding vector)."""
    dim = x.shape[1]
    dt = np.dtype([("nf", ">i2"), ("l1", ">i4"), ("id", ">i8"), ("l2", ">i4"), ("dim", ">i2"),
                   ("unused", ">i2"), ("v", ">f4", (dim,))])
    rows = np.empty(len(x), dtype=dt)
    rows["nf"], rows["l1"], rows["id"] = 2, 8, np.arange(1, len(x) + 1)
    rows["l2"], rows["dim"], rows["unused"], rows["v"] = 4 + 4 * dim, dim, 0, x
    return rows.tobytes()


def load(conn: Any, x: np.ndarray) -> None:
    from scale import vector_rows

    dim = x.shape[1]
    conn.execute(Q("DROP SCHEMA IF EXISTS {s} CASCADE"))
    conn.execute(Q("CREATE SCHEMA {s}"))
    conn.execute(Q("CREATE TABLE {s}.chunk_vector (chunk_id bigint NOT NULL, collection text NOT NULL,"
                   " model text NOT NULL, embedding vector NOT NULL,"
                   " PRIMARY KEY (chunk_id, model, collection))"))
    conn.execute(Q("CREATE TABLE {s}.typed (chunk_id bigint NOT NULL, collection text NOT NULL,"
                   " model text NOT NULL, embedding vector({d}) NOT NULL)", d=sql.Literal(dim)))
    conn.execute(Q("CREATE TABLE {s}.plain (id bigint PRIMARY KEY, embedding vector({d}) NOT NULL)",
                   d=sql.Literal(dim)))
    ids = np.arange(1, len(x) + 1, dtype=np.int64)
    for table in ("chunk_vector", "typed"):
        with conn.cursor() as cur, cur.copy(Q("COPY {s}.{t} (chunk_id, collection, model, embedding)"
                                              " FROM STDIN (FORMAT BINARY)", t=sql.Identifier(table))) as cp:
            cp.write(COPY_HEADER + vector_rows(ids, x, MODEL, COLLECTION) + COPY_TRAILER)
    with conn.cursor() as cur, cur.copy(Q("COPY {s}.plain (id, embedding) FROM STDIN (FORMAT BINARY)")) as cp:
        cp.write(COPY_HEADER + plain_rows(x) + COPY_TRAILER)
    for table in ("chunk_vector", "typed", "plain"):
        conn.execute(Q("VACUUM ANALYZE {s}.{t}", t=sql.Identifier(table)))


def statement(variant: str, dim: int, m: int, efc: int) -> sql.Composed:
    with_ = sql.SQL("WITH (m = {m}, ef_construction = {e})").format(m=sql.Literal(m), e=sql.Literal(efc))
    predicate = sql.SQL("WHERE model = {model}").format(model=sql.Literal(MODEL))
    d = sql.Literal(dim)
    shapes = {
        "plain": Q("CREATE INDEX bench_idx ON {s}.plain USING hnsw (embedding vector_cosine_ops) {w}", w=with_),
        "typed_wide": Q("CREATE INDEX bench_idx ON {s}.typed USING hnsw (embedding vector_cosine_ops) {w}",
                        w=with_),
        "typed_partial": Q("CREATE INDEX bench_idx ON {s}.typed USING hnsw (embedding vector_cosine_ops) {w} {p}",
                           w=with_, p=predicate),
        "cast": Q("CREATE INDEX bench_idx ON {s}.chunk_vector USING hnsw ((embedding::vector({d}))"
                  " vector_cosine_ops) {w}", d=d, w=with_),
    }
    return shapes[variant]


def build(conn: Any, variant: str, a: argparse.Namespace) -> dict[str, Any]:
    from rag_pg.config import IndexSettings
    from rag_pg.store.documents import Store
    from rag_pg.store.vector_index import vector_index_name

    conn.execute(f"SET maintenance_work_mem = '{a.maintenance_work_mem}'")
    conn.execute(f"SET max_parallel_maintenance_workers = {int(a.workers)}")
    notices: list[str] = []

    def notice(diagnostic: Any) -> None:
        notices.append(diagnostic.message_primary or "")

    conn.add_notice_handler(notice)
    conn.execute("SET client_min_messages = debug1")  # "building index ... with request for N workers"
    memory = a.build_memory or a.maintenance_work_mem
    t0 = time.perf_counter()
    if variant == "ragpg":
        Store(SCHEMA, IndexSettings(hnsw_m=a.m, hnsw_ef_construction=a.ef_construction,
                                    build_memory=memory)).ensure_vector_index(conn, MODEL, a.dim)
    elif variant == "ragpg_session":
        store = Store(SCHEMA, IndexSettings(hnsw_m=a.m, hnsw_ef_construction=a.ef_construction))
        conn.execute(store.vector_index_statement(MODEL, a.dim))
    else:
        conn.execute(statement(variant, a.dim, a.m, a.ef_construction))
    seconds = time.perf_counter() - t0
    conn.execute("RESET client_min_messages")
    conn.remove_notice_handler(notice)
    name = vector_index_name(MODEL) if variant.startswith("ragpg") else "bench_idx"
    size = conn.execute("SELECT pg_relation_size(%s::regclass)", (f'"{SCHEMA}"."{name}"',)).fetchone()[0]
    conn.execute(Q("DROP INDEX {s}.{n}", n=sql.Identifier(name)))
    workers = [n.split(" with ")[-1] if "parallel" in n else "serial" for n in notices if "building index" in n]
    spilled = [n for n in notices if "no longer fits" in n]
    return {"variant": variant, "build_s": round(seconds, 2), "rate": round(a.vectors / seconds, 1),
            "index_bytes": int(size), "workers_note": workers[0] if workers else "",
            "spilled": bool(spilled)}


def render(records: list[dict[str, Any]], a: argparse.Namespace, env: tuple[Any, ...], command: str) -> str:
    plain = [r["rate"] for r in records if r["variant"] == "plain"]
    ref = sum(plain) / len(plain) if plain else float("nan")
    lines = [f"# HNSW build: {a.vectors:,} vectors of {a.dim} d, m = {a.m}, ef_construction = {a.ef_construction}",
             "", f"PostgreSQL {env[0]}, pgvector {env[1]}; maintenance_work_mem {a.maintenance_work_mem},"
             f" max_parallel_maintenance_workers {a.workers}; `{command}`", "",
             "| variant | build s | vectors/s | × plain | index MB | parallel workers | spilled to disk |",
             "|---|---:|---:|---:|---:|---|---|"]
    for r in records:
        lines.append(f"| {r['variant']} | {r['build_s']} | {r['rate']:,.0f} | {r['rate'] / ref:.2f} |"
                     f" {r['index_bytes'] / 2**20:.0f} | {r['workers_note'] or '-'} | {'yes' if r['spilled'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vectors", type=int, default=50_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=64)
    ap.add_argument("--maintenance-work-mem", default="1GB")
    ap.add_argument("--build-memory", default=None, help="index.build_memory for the ragpg variant"
                    " (default: --maintenance-work-mem)")
    ap.add_argument("--workers", type=int, default=1, help="max_parallel_maintenance_workers")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--db", default=None, help="a PostgreSQL URL (default: an embedded server)")
    ap.add_argument("--shared-buffers", default="1GB")
    ap.add_argument("--results", type=Path, default=HERE / "results")
    a = ap.parse_args(argv)
    variants = [v for v in a.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        ap.error(f"unknown variants: {', '.join(sorted(unknown))}")
    import psycopg

    server = None
    workdir = Path(tempfile.mkdtemp(prefix="ragpg-hnsw-"))
    url = a.db
    if url is None:
        from scale import embedded_server

        url, server = embedded_server(workdir, a.shared_buffers)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            env = conn.execute("SELECT current_setting('server_version'),"
                               " (SELECT extversion FROM pg_extension WHERE extname = 'vector')").fetchone()
            x = vectors(a.vectors, a.dim, a.seed)
            print(f"hnsw_build: loading {a.vectors:,} vectors", file=sys.stderr)
            load(conn, x)
            records = []
            for rep in range(a.repeat):
                for variant in variants:
                    rec = build(conn, variant, a)
                    rec["repeat"] = rep
                    records.append(rec)
                    print(f"hnsw_build: {variant}: {rec['build_s']} s, {rec['rate']:,.0f}/s {rec['workers_note']}",
                          file=sys.stderr)
            conn.execute(Q("DROP SCHEMA {s} CASCADE"))
    finally:
        if server is not None:
            server.cleanup()
    command = "python bench/hnsw_build.py " + " ".join(argv if argv is not None else sys.argv[1:])
    a.results.mkdir(parents=True, exist_ok=True)
    (a.results / "hnsw_build.md").write_text(render(records, a, env, command.strip()))
    with open(a.results / "hnsw_build.jsonl", "w") as out:
        for r in records:
            out.write(json.dumps({**r, "vectors": a.vectors, "dim": a.dim, "m": a.m,
                                  "ef_construction": a.ef_construction,
                                  "maintenance_work_mem": a.maintenance_work_mem, "workers": a.workers}) + "\n")
    print(render(records, a, env, command.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
