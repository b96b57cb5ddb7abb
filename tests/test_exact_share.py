"""A filtered vector leg is exact when its filters leave at most a share of a large
collection's chunks (``retrieval.exact_share``), counted within ``exact_limit`` documents; else
it walks the HNSW index. The branch that ran is read from the statement's own EXPLAIN ANALYZE."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg import sql

from rag_pg import RagPG, Settings
from rag_pg.config import IndexSettings
from rag_pg.search.hits import shape
from rag_pg.search.plan import CollectionInfo, SearchPlan
from rag_pg.search.query_vectors import QueryVectors
from rag_pg.search.run import SearchOptions
from rag_pg.search.statement import Searcher
from rag_pg.store.db import read_snapshot
from rag_pg.store.documents import Store

from .rows import records, value

MODEL, DIM, PER_DOC = "m3", 3, 10
#: folder -> documents: a/ is 200 of the collection's 3,000 chunks, b/ 50
FOLDERS = {"a": 20, "b": 5, "rest": 275}


@pytest.fixture
def corpus(db_url: str) -> Any:
    rng = np.random.default_rng(5)
    with psycopg.connect(db_url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("INSERT INTO ragpg.collection (name, model, dimension) VALUES ('c', %s, %s)",
                     (MODEL, DIM))
        paths = [f"{folder}/d{i}.md" for folder, n in FOLDERS.items() for i in range(n)]
        conn.execute(
            "INSERT INTO ragpg.document (collection, path, shard_key, title, content_hash, front_matter,"
            " level, node_type, embed, language, fingerprint, chunk_count, token_count)"
            " SELECT 'c', p, ('x' || left(md5(p), 8))::bit(32)::integer, 't', 'h', '{}', 0, 'source', true, 'french',"
            " 'f', %s, 100"
            " FROM unnest(%s::text[]) p", (PER_DOC, paths))
        conn.execute(
            "INSERT INTO ragpg.chunk (id, document_id, collection, shard_key, position, section, anchor,"
            " content, token_count, content_hash, ts_config)"
            " SELECT row_number() OVER (ORDER BY d.id, p), d.id, 'c', d.shard_key, p, '', '', 'mot', 10,"
            " 'h', 'simple'"
            " FROM ragpg.document d CROSS JOIN generate_series(0, %s) p WHERE d.collection = 'c'",
            (PER_DOC - 1,))
        rows = records(conn, "SELECT id, shard_key FROM ragpg.chunk ORDER BY id")
        ids = [r["id"] for r in rows]
        vectors = rng.standard_normal((len(ids), DIM)).astype(np.float32)
        with conn.cursor() as cur, cur.copy("COPY ragpg.chunk_vector"
                                            " (chunk_id, collection, shard_key, model, embedding)"
                                            " FROM STDIN") as cp:
            for row, v in zip(rows, vectors, strict=True):
                cp.write_row((row["id"], "c", row["shard_key"], MODEL, json.dumps(v.tolist())))
        Store("ragpg", IndexSettings()).ensure_vector_index(conn, MODEL, DIM)
        conn.execute("ANALYZE ragpg.document, ragpg.chunk, ragpg.chunk_vector")
    yield db_url


def plan(prefix: str, exact_limit: int, share: float, query: np.ndarray) -> SearchPlan:
    return SearchPlan(collection="c", k=5, mode="vector", query_text="", query_vector=query,
                      model=MODEL, dimension=DIM, candidates=5, path_prefix=prefix,
                      exact_limit=exact_limit, exact_share=share)


def rows_of(node: dict[str, Any], cte: str) -> int:
    """Rows the named CTE produced, from an EXPLAIN (ANALYZE, FORMAT JSON) tree."""
    if node.get("Subplan Name") == f"CTE {cte}":
        return int(node["Actual Rows"])
    return sum(rows_of(child, cte) for child in node.get("Plans", []))


def branch(conn: psycopg.Connection[Any], p: SearchPlan) -> str:
    searcher = Searcher("ragpg")
    with conn.transaction():
        searcher.apply_settings(conn, p)
        tree = value(conn, sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + searcher.statement(p),
                     searcher.params(p))[0]["Plan"]
    exact, ann = rows_of(tree, "vec_exact"), rows_of(tree, "vec_ann")
    assert (exact > 0) != (ann > 0), (exact, ann)  # exactly one branch ran
    return "exact" if exact else "index"


@pytest.mark.parametrize(("exact_limit", "share", "expected"), [
    (30, 0.0, {"a": "index", "b": "index"}),   # 200 and 50 chunks > 30
    (30, 0.1, {"a": "exact", "b": "exact"}),   # <= 300 chunks, 20 and 5 documents <= 30
    (30, 0.05, {"a": "index", "b": "exact"}),  # 200 > 150
    (10, 0.1, {"a": "index", "b": "exact"}),   # a/ is 20 documents: more than counted
    (0, 1.0, {"a": "index", "b": "index"}),    # exact_limit 0 still forces the index
])
def test_the_filtered_vector_leg_is_exact_up_to_a_share_of_the_collection(
        corpus: str, exact_limit: int, share: float, expected: dict[str, str]) -> None:
    rng = np.random.default_rng(9)
    with psycopg.connect(corpus, autocommit=True) as conn:
        register_vector(conn)
        seen = {}
        for folder in expected:
            query = rng.standard_normal(DIM).astype(np.float32)
            p = plan(folder, exact_limit, share, query)
            seen[folder] = branch(conn, p)
            if seen[folder] == "exact":
                # exact means exact: the brute-force top 5 of the folder's vectors
                rows = records(conn,
                    "SELECT cv.chunk_id, cv.embedding::vector(3) AS embedding FROM ragpg.chunk_vector cv"
                    " JOIN ragpg.chunk c ON c.id = cv.chunk_id JOIN ragpg.document d ON d.id = c.document_id"
                    " WHERE starts_with(d.path, %s)", (folder + "/",))
                m = np.array([r["embedding"].to_numpy() for r in rows])
                cos = m @ query / (np.linalg.norm(m, axis=1) * np.linalg.norm(query))
                want = [rows[i]["chunk_id"] for i in np.argsort(-cos)[:5]]
                with read_snapshot(conn):
                    cur = Searcher("ragpg").execute(conn, p)
                got = [h.chunk_id for h in shape(cur.fetchall(), p)]
                assert got == want
    assert seen == expected


def test_the_settings_share_reaches_the_plan(db_url: str) -> None:
    settings = Settings.load(environ={}, overrides={"embedding.provider": "none",
                                                    "retrieval.exact_share": 0.1,
                                                    "retrieval.exact_limit": 7})
    info = CollectionInfo(model=None, dimension=None, term_stat_pending=False,
                          vector_kind=None, pgvector_version="0.8.0")
    with RagPG(db_url, settings) as rag:
        p = rag._runner()._plan("mot", 5, "keyword", "c", info, False, SearchOptions(path_prefix="a"),
                              QueryVectors(lambda: rag.provider, "mot"))
    assert p is not None and (p.exact_limit, p.exact_share) == (7, 0.1)
    with pytest.raises(Exception, match="exact_share must be between 0 and 1"):
        Settings.load(environ={}, overrides={"retrieval.exact_share": 1.5})
