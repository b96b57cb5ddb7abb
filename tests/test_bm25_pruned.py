"""The pruned keyword leg (MaxScore over term_stat) returns exactly the exhaustive leg's list.

Random small corpora written through the store (replace, re-ingest, delete), random queries,
candidate counts, per-document caps, filters (answered from the filter's chunks alone, or
through the GIN scans) and seed sizes: the same chunk ids, ranks and scores (to 1e-9) from
both statements, in the same snapshot. The per-term statistics are checked
against a recount of the chunks. Then the shipped French set, and a corpus built so that
pruning must skip the frequent word's postings (read from the plan's own row counts).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_pg import RagPG, Settings
from rag_pg.admin.evaluate import load_questions
from rag_pg.models import Chunk, Document
from rag_pg.search.bm25 import BM25Params
from rag_pg.search.plan import SearchPlan
from rag_pg.search.statement import Searcher
from rag_pg.store.documents import PreparedDocument, Store

from .bm25_reference import score, term_bound
from .rows import value, values

DATA = Path(__file__).parent / "data" / "tldr-fr-mini"
# Frequent words repeated, so that drawn texts follow a skewed (Zipf-like) distribution;
# French and English forms that stem together, accents, stop-words.
VOCAB = (["base"] * 8 + ["données"] * 6 + ["the"] * 5 + ["de"] * 5 + ["bases"] * 3
         + ["sauvegarde", "sauvegardes", "pool", "connection", "connections", "restore",
            "zèbre", "élévation", "elevation", "rare", "pg"])
LANGS = ("french", "english", "simple")
_collections = itertools.count()

words = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=30)
chunk_st = st.tuples(words, st.integers(min_value=0, max_value=40))  # (words, extra tokens)
doc_st = st.tuples(st.integers(min_value=0, max_value=7),  # path slot (re-ingests replace)
                   st.sampled_from(LANGS),
                   st.lists(chunk_st, min_size=1, max_size=5))
step_st = st.one_of(
    st.tuples(st.just("write"), st.lists(doc_st, min_size=1, max_size=4)),
    st.tuples(st.just("delete"), st.lists(st.integers(min_value=0, max_value=7), max_size=3)),
)
query_st = st.tuples(
    st.lists(st.sampled_from(VOCAB), min_size=1, max_size=4),  # words (repeats weigh)
    st.integers(min_value=1, max_value=4),  # candidates
    st.one_of(st.none(), st.integers(min_value=1, max_value=3)),  # max_per_document
    st.sampled_from([None, "a", "b/x"]),  # path prefix
    st.sampled_from([1, 2, 4, 8, 40]),  # postings scored first (moves work, not results)
    # exact_limit: the GIN scans (0), a filter's chunks scored alone (5000), or in between (3):
    # a filter of few documents but more chunks, whose rest is read by whichever way reads less
    st.sampled_from([0, 3, 5000]),
)


def path_of(slot: int) -> str:
    return ("a/", "b/x/", "b/y/")[slot % 3] + f"doc{slot}.md"


def prepared(slot: int, language: str, chunks: list[tuple[list[str], int]]) -> PreparedDocument:
    text = "\n\n".join(" ".join(w) for w, _ in chunks)
    doc = Document(path=path_of(slot), title=f"Doc {slot}", content=text,
                   content_hash=hashlib.sha256(text.encode()).hexdigest())
    out = [Chunk(document_path=doc.path, document_title=doc.title, section="", anchor=f"c{i}",
                 position=i, content=" ".join(w), token_count=len(w) + extra,
                 content_hash=hashlib.sha256(f"{i}{w}".encode()).hexdigest())
           for i, (w, extra) in enumerate(chunks)]
    return PreparedDocument(document=doc, chunks=out, vectors=None, language=language,
                            fingerprint="test")


def candidates(conn: psycopg.Connection[Any], searcher: Searcher,
               plan: SearchPlan) -> list[tuple[int, int, float]]:
    """(chunk id, keyword rank, keyword score) of the leg's list, best first."""
    with conn.transaction():
        rows = searcher.execute(conn, plan).fetchall()
    ranked = sorted(rows, key=lambda r: r.keyword_rank)
    return [(r.chunk_id, r.keyword_rank, r.keyword_score) for r in ranked]


def both(conn: psycopg.Connection[Any], searcher: Searcher, plan: SearchPlan) -> None:
    pruned = candidates(conn, searcher, plan)
    exhaustive = candidates(conn, searcher, replace(plan, keyword_exhaustive=True))
    assert [(c, r) for c, r, _ in pruned] == [(c, r) for c, r, _ in exhaustive], plan
    for (_, _, a), (_, _, b) in zip(pruned, exhaustive, strict=True):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12)


def assert_term_stats_hold(conn: psycopg.Connection[Any], collection: str) -> None:
    """df equals a recount; max_tf and min_dl still bound every chunk holding the term; the
    chunk counts and total lengths per configuration equal a recount."""
    bad = conn.execute(
        "WITH actual AS (SELECT c.ts_config, u.lexeme, count(*) AS df,"
        "                       max(cardinality(u.positions)) AS max_tf, min(c.token_count) AS min_dl"
        "                FROM ragpg.chunk c, unnest(c.tsv) u WHERE c.collection = %(c)s GROUP BY 1, 2),"
        " stored AS (SELECT * FROM ragpg.term_stat WHERE collection = %(c)s)"
        " SELECT a.lexeme, a.df, s.df FROM actual a FULL JOIN stored s"
        "   ON s.ts_config = a.ts_config AND s.lexeme = a.lexeme"
        " WHERE a.df IS DISTINCT FROM s.df OR s.max_tf < a.max_tf OR s.min_dl > a.min_dl",
        {"c": collection}).fetchall()
    assert bad == []
    counted = conn.execute(
        "SELECT ts_config::text, count(*), sum(token_count) FROM ragpg.chunk WHERE collection = %s"
        " GROUP BY 1 ORDER BY 1", (collection,)).fetchall()
    kept = conn.execute(
        "SELECT ts_config::text, chunks, tokens FROM ragpg.chunk_stat WHERE collection = %s"
        " AND chunks > 0 ORDER BY 1", (collection,)).fetchall()
    assert kept == counted


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step_st, min_size=1, max_size=5), queries=st.lists(query_st, min_size=1, max_size=4))
def test_pruned_equals_exhaustive_on_random_corpora(db_url: str, steps: list[Any],
                                                    queries: list[Any]) -> None:
    collection = f"h{next(_collections)}"
    store, searcher = Store("ragpg"), Searcher("ragpg")
    with psycopg.connect(db_url) as conn:
        conn.autocommit = True
        for kind, payload in steps:
            if kind == "write":
                docs = {slot: prepared(slot, lang, chunks) for slot, lang, chunks in payload}
                store.replace_documents(conn, collection, list(docs.values()), None)
            else:
                store.delete_documents(conn, collection, [path_of(s) for s in payload])
        assert_term_stats_hold(conn, collection)
        for query_words, count, cap, prefix, seed, exact_limit in queries:
            plan = SearchPlan(collection=collection, k=count, mode="keyword",
                              query_text=" ".join(query_words), candidates=count,
                              max_per_document=cap, path_prefix=prefix, keyword_seed=seed,
                              exact_limit=exact_limit)
            both(conn, searcher, plan)


def test_term_stats_follow_every_write_path(db_url: str) -> None:
    """COPY, replacement, the cascade from document, a hand-written UPDATE and TRUNCATE."""
    store = Store("ragpg")
    with psycopg.connect(db_url) as conn:
        conn.autocommit = True
        store.replace_documents(conn, "c1", [prepared(0, "french", [(["base", "données"], 0)]),
                                             prepared(1, "english", [(["base", "pool"], 3)])], None)
        store.replace_documents(conn, "c2", [prepared(0, "simple", [(["base"], 0)])], None)
        store.replace_documents(conn, "c1", [prepared(0, "french", [(["base", "base"], 0)])], None)
        assert_term_stats_hold(conn, "c1")
        conn.execute("UPDATE ragpg.chunk SET content = 'zèbre rare' WHERE collection = 'c2'")
        assert_term_stats_hold(conn, "c2")
        assert conn.execute("SELECT lexeme FROM ragpg.term_stat WHERE collection = 'c2'"
                            " ORDER BY 1").fetchall() == conn.execute(
            "SELECT lexeme FROM unnest(to_tsvector('ragpg.simple', 'zèbre rare')) ORDER BY 1").fetchall()
        conn.execute("DELETE FROM ragpg.document WHERE collection = 'c1' AND path = %s", (path_of(1),))
        assert_term_stats_hold(conn, "c1")
        conn.execute("TRUNCATE ragpg.chunk CASCADE")
        assert conn.execute("SELECT count(*) FROM ragpg.term_stat").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM ragpg.chunk_stat").fetchone() == (0,)


def test_pruned_equals_exhaustive_on_the_shipped_set(db_url: str) -> None:
    settings = Settings.load(environ={}, overrides={"embedding.provider": "none",
                                                    "source.language": "french"})
    with RagPG(db_url, settings) as rag:
        rag.init()
        rag.ingest(DATA / "corpus", collection="eval")
    searcher = Searcher("ragpg")
    questions = load_questions(DATA / "questions.jsonl")
    assert len(questions) >= 10
    with psycopg.connect(db_url) as conn:
        conn.autocommit = True
        assert_term_stats_hold(conn, "eval")
        for q in questions:
            for cap, prefix, exact_limit in ((None, None, 5000), (1, None, 5000),
                                             (2, "common", 5000), (None, "common", 0)):
                both(conn, searcher, SearchPlan(collection="eval", k=10, mode="keyword",
                                                query_text=q.query, candidates=40,
                                                max_per_document=cap, path_prefix=prefix,
                                                exact_limit=exact_limit))


def rows_of(plan: Any, cte: str) -> int | None:
    """Actual rows of the CTE ``cte`` in an EXPLAIN ANALYZE (JSON) plan tree."""
    if plan.get("Subplan Name") == f"CTE {cte}":
        return int(plan["Actual Rows"])
    for child in plan.get("Plans", []):
        found = rows_of(child, cte)
        if found is not None:
            return found
    return None


def explained(conn: psycopg.Connection[Any], searcher: Searcher, plan: SearchPlan) -> Any:
    """The executed plan tree of the search statement (EXPLAIN ANALYZE, JSON)."""
    with conn.transaction():
        searcher.apply_settings(conn, plan)
        explain = value(conn, b"EXPLAIN (ANALYZE, FORMAT JSON) "
                               + searcher.statement(plan).as_bytes(conn), searcher.params(plan))
    assert explain is not None
    return (explain if isinstance(explain, list) else json.loads(explain))[0]["Plan"]


def test_the_frequent_words_postings_are_skipped(db_url: str) -> None:
    """300 chunks hold "base", 30 also "zèbre": the top 3 of "zèbre base" come from the 30,
    and no chunk holding only "base" is scored."""
    store, searcher = Store("ragpg"), Searcher("ragpg")
    docs = [prepared(i, "simple", [(["base", "de", "la"] + ["zèbre"] * (i < 10), 0)] * 3)
            for i in range(100)]
    plan = SearchPlan(collection="p", k=3, mode="keyword", query_text="zèbre base", candidates=3)
    with psycopg.connect(db_url) as conn:
        conn.autocommit = True
        store.replace_documents(conn, "p", docs, None)
        both(conn, searcher, plan)
        tree = explained(conn, searcher, plan)
        assert rows_of(tree, "kw_seed") == 30  # 10 documents x 3 chunks hold "zèbre"
        assert rows_of(tree, "kw_rest") == 0  # "base" alone cannot reach the top 3


def test_chunks_without_the_rarest_word_still_enter_the_list(db_url: str) -> None:
    """The rare word sits once in 4 long chunks; 5 short chunks repeating two common words
    score higher: the seed (the rare word, highest bound) sets a threshold that leaves one
    common word essential, and the chunks found through it (kw_rest) lead the list."""
    store, searcher = Store("ragpg"), Searcher("ragpg")
    filler = ["zèbre"] * 60
    docs = ([prepared(i, "simple", [(["rare"] + filler, 0)]) for i in range(4)]
            + [prepared(10 + i, "simple", [(["base"] * 5 + ["pool"] * 5, 0)]) for i in range(5)]
            + [prepared(15 + i, "simple", [(["base", "pool"] + filler, 0)]) for i in range(20)]
            + [prepared(35 + i, "simple", [(filler, 0)]) for i in range(40)])
    plan = SearchPlan(collection="r", k=3, mode="keyword", query_text="rare base pool",
                      candidates=3, keyword_seed=1)
    with psycopg.connect(db_url) as conn:
        conn.autocommit = True
        store.replace_documents(conn, "r", docs, None)
        both(conn, searcher, plan)
        assert (rows_of(explained(conn, searcher, plan), "kw_rest") or 0) >= 5  # found past the seed
        top = {c for c, _, _ in candidates(conn, searcher, plan)}
        short = set(values(conn,
            "SELECT id FROM ragpg.chunk WHERE collection = 'r' AND token_count = 10"))
        assert top <= short


def test_a_selective_filter_reads_only_its_own_documents_chunks(db_url: str) -> None:
    """A filter leaving at most exact_limit chunks: no GIN scan over the collection, every
    chunk of the filter's documents scored; the same list as the exhaustive leg."""
    store, searcher = Store("ragpg"), Searcher("ragpg")
    docs = [prepared(i, "simple", [(["base", "zèbre"] * (1 + i % 3), 0)] * 2) for i in range(60)]
    plan = SearchPlan(collection="f", k=5, mode="keyword", query_text="zèbre base",
                      candidates=5, path_prefix="a", exact_limit=100)
    with psycopg.connect(db_url) as conn:
        conn.autocommit = True
        store.replace_documents(conn, "f", docs, None)
        both(conn, searcher, plan)
        tree = explained(conn, searcher, plan)
        assert rows_of(tree, "kw_small_match") == 20 * 2 * 2  # 20 documents under a/, 2 chunks, 2 terms
        assert rows_of(tree, "kw_seed_match") == 0 and rows_of(tree, "kw_rest_match") == 0
        wide = explained(conn, searcher, replace(plan, exact_limit=10))  # 40 chunks > 10
        assert rows_of(wide, "kw_small_match") == 0 and (rows_of(wide, "kw_seed_match") or 0) > 0
        both(conn, searcher, replace(plan, exact_limit=10))


def test_a_filters_rest_is_read_from_its_own_chunks_when_they_are_fewer(db_url: str) -> None:
    """Every chunk holds "base"; "zèbre", the seed, is mostly outside the filter, so theta stays
    0 and "base" is essential: its postings (every chunk) outnumber the filter's chunks, which
    are read instead of them. The same list as the exhaustive leg either way."""
    store, searcher = Store("ragpg"), Searcher("ragpg")
    docs = [prepared(i, "simple", [(["base", "de"] + ["zèbre"] * (i % 3 == 0 or i == 1), i % 5)] * 3)
            for i in range(240)]
    # path_of: slot % 3 == 1 lies under b/x, 80 documents and 240 chunks of the 720; "zèbre" is
    # in 3 of them (document 1), fewer than the 5 candidates
    plan = SearchPlan(collection="g", k=5, mode="keyword", query_text="zèbre base",
                      candidates=5, path_prefix="b/x", exact_limit=100)
    with psycopg.connect(db_url) as conn:
        conn.autocommit = True
        for start in range(0, len(docs), 60):
            store.replace_documents(conn, "g", docs[start:start + 60], None)
        conn.execute("ANALYZE ragpg.chunk")
        both(conn, searcher, plan)
        tree = explained(conn, searcher, plan)
        assert (rows_of(tree, "kw_rest_match") or 0) == 0
        assert rows_of(tree, "kw_small_match") == 3 * (80 - 1)  # "base" in the filter's other chunks
        # A filter of more documents than exact_limit is not counted: the GIN scans stand.
        wide = explained(conn, searcher, replace(plan, exact_limit=50))
        assert (rows_of(wide, "kw_rest_match") or 0) > 0 and (rows_of(wide, "kw_small_match") or 0) == 0
        both(conn, searcher, replace(plan, exact_limit=50))


@given(qtf=st.integers(1, 5), df=st.integers(1, 500), extra_n=st.integers(0, 5000),
       max_tf=st.integers(1, 300), tf_cut=st.integers(0, 299), min_dl=st.integers(1, 500),
       dl_more=st.integers(0, 2000), avgdl=st.floats(0.5, 3000),
       k1=st.floats(0, 3), b=st.floats(0, 1))
def test_a_terms_bound_holds_for_every_chunk_it_covers(qtf: int, df: int, extra_n: int,
                                                       max_tf: int, tf_cut: int, min_dl: int,
                                                       dl_more: int, avgdl: float, k1: float,
                                                       b: float) -> None:
    """Any tf <= max_tf in any chunk at least min_dl long scores at most the bound."""
    params = BM25Params(k1=k1, b=b)
    n = df + extra_n
    tf = max(1, max_tf - tf_cut)
    got = score({"t": qtf}, {"t": tf}, min_dl + dl_more, n=n, avgdl=avgdl, df={"t": df}, params=params)
    bound = term_bound(qtf, n=n, df=df, max_tf=max_tf, min_dl=min_dl, avgdl=avgdl, params=params)
    assert got <= bound * (1 + 1e-12)
