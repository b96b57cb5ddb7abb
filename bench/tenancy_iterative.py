"""Filtered vector search under row-level security: does a tenant still get k rows?

A tenant owning one collection of ten holds a tenth of the vectors; the HNSW graph is shared
by every collection of a model, so the index walk meets nine foreign vectors for each of the
tenant's, and the policy drops them. With ``hnsw.iterative_scan`` off, a scan of ef_search
candidates then returns about a tenth of them; with ``relaxed_order`` (ragpg's default) it
goes on scanning until k rows pass. Run: ``.venv/bin/python bench/tenancy_iterative.py URL``
(a superuser URL of a scratch database; its ragpg schema is replaced).
"""

from __future__ import annotations

import sys
import uuid

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from rag_pg import RagPG, Settings
from rag_pg.config import IndexSettings
from rag_pg.store import migrate, roles, tenancy
from rag_pg.store.documents import Store, shard_key
from rag_pg.testing.embedserver import FakeEmbeddingServer

COLLECTIONS, PER_COLLECTION, K, QUERIES = 10, 3000, 10, 30
WORDS = ["backup", "replica", "index", "vacuum", "tenant", "search", "vector", "policy",
         "restore", "schema", "pool", "ledger", "invoice", "garden", "harbour", "lantern"]


def main(url: str) -> None:
    runtime = f"ragpg_bench_rt_{uuid.uuid4().hex[:8]}"
    with FakeEmbeddingServer(dim=64) as emb, psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS ragpg CASCADE")
        migrate.upgrade(conn, "ragpg")
        base = Settings().with_overrides(**{"embedding.provider": "http", "embedding.url": emb.url})
        with RagPG(url, base) as rag:
            model, dim = rag.provider.model, rag.provider.dimension
            texts = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(i % 5 + 2))
                     for i in range(400)]
        with conn.transaction():
            for c in range(COLLECTIONS):
                name = f"c{c}"
                conn.execute("INSERT INTO ragpg.collection (name, model, dimension) VALUES (%s, %s, %s)",
                             (name, model, dim))
                doc = conn.execute(
                    "INSERT INTO ragpg.document (collection, path, shard_key, title, content_hash,"
                    " fingerprint) VALUES (%s, 'doc.md', %s, 'doc', 'h', 'f') RETURNING id",
                    (name, shard_key("doc.md"))).fetchone()
                assert doc is not None
                with conn.cursor() as cur, cur.copy(
                        "COPY ragpg.chunk (document_id, collection, shard_key, position, section,"
                        " anchor, content, token_count, content_hash, ts_config) FROM STDIN") as copy:
                    for i in range(PER_COLLECTION):
                        copy.write_row((doc[0], name, shard_key("doc.md"), i, "", f"a{i}",
                                        texts[(i + c) % 400], 5, f"h{i}", "simple"))
                conn.execute(  # random directions: every collection spread over the graph
                    "INSERT INTO ragpg.chunk_vector (chunk_id, collection, shard_key, model, embedding)"
                    " SELECT id, collection, shard_key, %s, array(SELECT random() - 0.5"
                    "   FROM generate_series(1, %s) WHERE id IS NOT NULL)::real[]::vector"
                    " FROM ragpg.chunk WHERE collection = %s", (model, dim, name))
        Store("ragpg", IndexSettings()).ensure_vector_index(conn, model, dim)
        conn.execute("ANALYZE ragpg.chunk_vector, ragpg.chunk")
        tenancy.enable(conn)
        roles.create_runtime(conn, runtime, password="bench")
        tenancy.assign(conn, "one", ["c3"])
        try:
            direct(make_conninfo(url, user=runtime, password="bench"), model, dim)
            for scan in ("off", "relaxed_order", "strict_order"):
                for ef in (40, 100):
                    settings = base.with_overrides(**{
                        "tenancy.enabled": True, "retrieval.exact_limit": 0,
                        "retrieval.iterative_scan": scan, "retrieval.ef_search": ef})
                    with RagPG(make_conninfo(url, user=runtime, password="bench"), settings,
                               tenant="one") as rag:
                        counts = [len(rag.search(" ".join(WORDS[q % 16:q % 16 + 2]), k=K,
                                                 mode="vector", collection="c3"))
                                  for q in range(QUERIES)]
                    print(f"iterative_scan={scan:13} ef_search={ef:3}: rows per query"
                          f" min {min(counts)} mean {sum(counts) / len(counts):.1f} (k={K},"
                          f" tenant holds 1/{COLLECTIONS} of {COLLECTIONS * PER_COLLECTION} vectors)")
        finally:
            tenancy.disable(conn)
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(runtime)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(runtime)))


def direct(url: str, model: str, dim: int) -> None:
    """The vector leg's shape on its own, under the policy: ORDER BY distance LIMIT k on the
    model's partial HNSW index, the plan checked to be that index scan."""
    with psycopg.connect(url, autocommit=True) as conn:
        query = f"[{','.join('0.1' for _ in range(dim))}]"
        for scan in ("off", "relaxed_order"):
            for ef in (40, 100):
                with conn.transaction():
                    conn.execute(tenancy.statement("one"))
                    conn.execute(sql.SQL("SET LOCAL hnsw.iterative_scan = {}").format(
                        sql.Literal(scan)))
                    conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(ef)))
                    statement = sql.SQL(
                        "SELECT chunk_id FROM ragpg.chunk_vector WHERE model = {m}"
                        " AND collection = 'c3' ORDER BY embedding::vector({d}) <=> {q}::vector({d})"
                        " LIMIT {k}").format(m=sql.Literal(model), d=sql.Literal(dim),
                                              q=sql.Literal(query), k=sql.Literal(K))
                    plan = "\n".join(r[0] for r in conn.execute(sql.SQL("EXPLAIN {}").format(
                        statement)))
                    rows = len(conn.execute(statement).fetchall())
                print(f"direct: iterative_scan={scan:13} ef_search={ef:3}: {rows} rows of k={K}"
                      f" ({'HNSW index scan' if 'hnsw' in plan else 'no HNSW scan'})")


if __name__ == "__main__":
    main(sys.argv[1])
