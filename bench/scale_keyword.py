"""The keyword side of the scale run (``bench/scale.py``): chunk text, query words, the cost of
the per-term statistics at ingest, and the pruned BM25 leg against the exhaustive reference.

* Chunk text: ``--words-per-chunk`` words drawn from a Zipf vocabulary (exponent 1.1 over
  50,000 words: a few words in most chunks, most words rare — real text's shape). Each COPY
  batch draws from its own seeded generator, so the same corpus can be written twice.
* Queries (``--keyword-queries question``, the default): one mid-frequency word (ranks
  100-1,000) and two frequent ones (ranks 1-20), as a question after its stop-words; the
  older ``rare`` shape draws three words of ranks 300-20,000.
* Ingest cost: the same chunks COPYed in ``--ingest-batch`` rows per transaction (one
  statement each, like an ingest group), from empty tables each time (TRUNCATE between):
  with the term_stat triggers disabled; as a first load writes them (the collection pending,
  then its statistics counted once: ``Store.rebuild_term_stats``); and with the triggers
  keeping them batch by batch, as every later write does. The ratios to the first are the
  statistics' cost.
* Keyword latency (after ``VACUUM (ANALYZE)``, the state autovacuum reaches within a minute:
  the GIN pending list merged): ``mode="keyword"`` k=10 with the configured candidates (40), pruned and
  exhaustive, without a filter and with the 1% path prefix; every query's list (ids, ranks)
  must be identical and its scores equal to 1e-9.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace
from typing import Any

import numpy as np
from psycopg import sql

from rag_pg.store.documents import Store

VOCAB = 50_000
COLLECTION = "scale"
TRIGGERS = ("term_stat_insert", "term_stat_delete", "term_stat_update", "term_stat_truncate")


def vocabulary() -> tuple[list[str], np.ndarray]:
    words = [f"w{i:05d}" for i in range(VOCAB)]
    p = 1.0 / np.arange(1, VOCAB + 1) ** 1.1
    return words, p / p.sum()


def query_text(rng: np.random.Generator, words: list[str], shape: str) -> str:
    if shape == "rare":
        return " ".join(words[int(r)] for r in rng.integers(300, 20_000, size=3))
    mid = int(rng.integers(100, 1_000))
    frequent = rng.choice(20, size=2, replace=False)
    return " ".join([words[mid]] + [words[int(f)] for f in frequent])


def chunk_batches(a: Any, doc_ids: np.ndarray, config: str) -> Any:
    """(first row, COPY text) of each batch of ``a.ingest_batch`` chunks, reproducibly
    (``doc_ids``: each document's id and shard key, in document order)."""
    words, probs = vocabulary()
    n, per_doc, per_chunk = a.chunks, a.chunks_per_doc, a.words_per_chunk
    tokens = math.ceil(per_chunk * 1.33)
    for lo in range(0, n, a.ingest_batch):
        hi = min(n, lo + a.ingest_batch)
        drawn = np.random.default_rng((a.seed, lo)).choice(VOCAB, size=(hi - lo, per_chunk), p=probs)
        lines = []
        for i, row in zip(range(lo, hi), drawn, strict=True):
            text = " ".join(words[w] for w in row)
            doc_id, key = doc_ids[i // per_doc]
            lines.append(f"{i + 1}\t{doc_id}\t{COLLECTION}\t{key}\t{i % per_doc}\tSection\t"
                         f"section\t{text}\t{tokens}\t{i:064x}\t{config}\n")
        yield lo, "".join(lines).encode()


def copy_chunks(conn: Any, a: Any, schema: str, doc_ids: np.ndarray) -> float:
    """Write every chunk, one transaction and one COPY per batch; returns the seconds."""
    config = f'"{schema}".simple'
    stmt = sql.SQL("COPY {s}.chunk (id, document_id, collection, shard_key, position, section, anchor,"
                   " content, token_count, content_hash, ts_config) FROM STDIN").format(
        s=sql.Identifier(schema))
    spent = 0.0
    for _, data in chunk_batches(a, doc_ids, config):
        t0 = time.perf_counter()
        with conn.transaction(), conn.cursor() as cur, cur.copy(stmt) as cp:
            cp.write(data)
        spent += time.perf_counter() - t0
    conn.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", (f'"{schema}".chunk', a.chunks))
    return spent


def set_triggers(conn: Any, schema: str, enabled: bool) -> None:
    for name in TRIGGERS:
        conn.execute(sql.SQL("ALTER TABLE {s}.chunk {on} TRIGGER {t}").format(
            s=sql.Identifier(schema), on=sql.SQL("ENABLE" if enabled else "DISABLE"),
            t=sql.Identifier(name)))


def load_chunks(conn: Any, a: Any, schema: str, doc_ids: np.ndarray) -> dict[str, float]:
    """The chunks, written from empty tables: without the term statistics, as a first load
    (pending, then counted once), then kept batch by batch (the state the queries run on)."""
    timings: dict[str, float] = {}
    truncate = sql.SQL("TRUNCATE {s}.chunk CASCADE").format(s=sql.Identifier(schema))
    if a.ingest_compare:
        set_triggers(conn, schema, False)
        timings["chunks_copy_no_term_stats_s"] = round(copy_chunks(conn, a, schema, doc_ids), 2)
        conn.execute(truncate)
        set_triggers(conn, schema, True)
        store = Store(schema)
        store.defer_term_stats(conn, COLLECTION)
        spent = copy_chunks(conn, a, schema, doc_ids)
        t0 = time.perf_counter()
        store.rebuild_term_stats(conn, COLLECTION)
        timings["term_stats_rebuild_s"] = round(time.perf_counter() - t0, 2)
        timings["chunks_copy_first_load_s"] = round(spent + timings["term_stats_rebuild_s"], 2)
        conn.execute(truncate)
    timings["chunks_copy_s"] = round(copy_chunks(conn, a, schema, doc_ids), 2)
    if a.ingest_compare:
        bare = max(timings["chunks_copy_no_term_stats_s"], 1e-9)
        timings["term_stats_ingest_ratio"] = round(timings["chunks_copy_s"] / bare, 3)
        timings["first_load_ingest_ratio"] = round(timings["chunks_copy_first_load_s"] / bare, 3)
    # What autovacuum reaches a minute later: the GIN pending list merged, statistics fresh.
    conn.execute(sql.SQL("VACUUM (ANALYZE) {s}.chunk, {s}.term_stat").format(s=sql.Identifier(schema)))
    timings["term_stat_rows"] = conn.execute(
        sql.SQL("SELECT count(*) FROM {s}.term_stat").format(s=sql.Identifier(schema))).fetchone()[0]
    return timings


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))]


def keyword_runs(conn: Any, a: Any, schema: str, texts: list[str]) -> list[dict[str, Any]]:
    """p50/p95 of the pruned and exhaustive keyword legs, and whether their lists agree."""
    from rag_pg.search.plan import SearchPlan
    from rag_pg.search.statement import Searcher

    searcher = Searcher(schema)

    def rows(plan: SearchPlan) -> list[tuple[int, int, float]]:
        with conn.transaction():
            got = searcher.execute(conn, plan).fetchall()
        return sorted(((r.chunk_id, r.keyword_rank, r.keyword_score) for r in got), key=lambda r: r[1])

    recs: list[dict[str, Any]] = []
    for filt, prefix in (("none", None), ("1%", "p00")):
        plans = [SearchPlan(collection=COLLECTION, k=10, mode="keyword", query_text=t,
                            candidates=a.candidates, path_prefix=prefix) for t in texts]
        lists: dict[str, list[list[tuple[int, int, float]]]] = {}
        lat: dict[str, list[float]] = {}
        for method, exhaustive in (("pruned", False), ("exhaustive", True)):
            chosen = [replace(p, keyword_exhaustive=exhaustive) for p in plans]
            for p in chosen[:10]:  # warm-up
                rows(p)
            lat[method], lists[method] = [], []
            for p in chosen:
                t0 = time.perf_counter()
                lists[method].append(rows(p))
                lat[method].append((time.perf_counter() - t0) * 1000)
        same = sum(
            [(c, r) for c, r, _ in x] == [(c, r) for c, r, _ in y]
            and all(abs(u - v) <= 1e-9 * max(abs(v), 1.0) for (_, _, u), (_, _, v) in zip(x, y, strict=True))
            for x, y in zip(lists["pruned"], lists["exhaustive"], strict=True))
        for method in ("pruned", "exhaustive"):
            recs.append({"phase": "scale_keyword", "filter": filt, "method": f"ragpg keyword {method}",
                         "nq": len(texts), "p50_ms": round(statistics.median(lat[method]), 3),
                         "p95_ms": round(pct(lat[method], 95), 3), "identical_lists": same,
                         "candidates": a.candidates, "shape": a.keyword_queries})
        recs[-2]["ratio_to_exhaustive_p50"] = round(recs[-2]["p50_ms"] / recs[-1]["p50_ms"], 3)
        recs.append({"phase": "scale_keyword_explain", "filter": filt,
                     **{m: explain(conn, searcher, replace(plans[0], keyword_exhaustive=m == "exhaustive"))
                        for m in ("pruned", "exhaustive")}})
    return recs


def explain(conn: Any, searcher: Any, plan: Any) -> list[str]:
    """The executed plan of one query (where its time goes), as EXPLAIN ANALYZE prints it."""
    with conn.transaction():
        searcher.apply_settings(conn, plan)
        return [r[0] for r in conn.execute(
            b"EXPLAIN (ANALYZE, BUFFERS) " + searcher.statement(plan).as_bytes(conn), searcher.params(plan))]


def render(recs: list[dict[str, Any]]) -> list[str]:
    rows = [r for r in recs if r.get("phase") == "scale_keyword"]
    if not rows:
        return []
    lines = ["", f"Keyword leg (k=10, {rows[0]['candidates']} candidates, queries `{rows[0]['shape']}`):", "",
             "| filter | method | queries | p50 ms | p95 ms | p50 / exhaustive | lists identical |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['filter']} | {r['method']} | {r['nq']} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} |"
                     f" {r.get('ratio_to_exhaustive_p50', '')} | {r['identical_lists']}/{r['nq']} |")
    return lines
