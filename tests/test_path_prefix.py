"""The path-prefix filter: exactly the document at the prefix and those under it, whatever the
characters around the prefix, read as a range of the byte-ordered path index."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.search.plan import SearchPlan
from rag_pg.search.statement import Searcher

from .rows import value

# Siblings that share the prefix's characters and sort next to it in some order: a character
# below "/" after the prefix ("a-b", "a.md", "a!", "a b"), "0" (the range's end), letters
# above it, another case, accents and scripts outside ASCII, and a prefix that is a file.
PATHS = [
    "a.md", "a-b.md", "a!/x.md", "a b/x.md", "a/x.md", "a/b/y.md", "a/b.md", "a/bc/z.md",
    "a0.md", "a0/x.md", "ab/x.md", "A/x.md", "é/x.md", "é/ü/x.md", "éa/x.md", "e/x.md",
    "文档/x.md", "文档x/y.md", "a/é/z.md", "a/é-z.md", "z/a/x.md",
]
PREFIXES = ["a", "a/b", "a/b.md", "é", "é/ü", "文档", "A", "a/é", "e", "z", "a0", "zz"]


def under(prefix: str) -> set[str]:
    return {p for p in PATHS if p == prefix or p.startswith(prefix + "/")}


@pytest.fixture
def rag(db_url: str, embed_server: Any, tmp_path: Path) -> Iterator[RagPG]:
    root = tmp_path / "tree"
    for i, rel in enumerate(PATHS):
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"# Page {i}\n\nUn mot commun, et le numéro {i}.\n", encoding="utf-8")
    settings = Settings.load(environ={}, overrides={"embedding.url": embed_server.url})
    with RagPG(db_url, settings) as r:
        r.init()
        r.ingest(root)
        yield r


@pytest.mark.parametrize("exact_limit", [0, 5000])
def test_a_prefix_keeps_exactly_its_document_and_those_under_it(rag: RagPG, db_url: str,
                                                                 exact_limit: int):
    # exact_limit 0 sends the vector leg through the index, 5000 through its exact branch;
    # the keyword leg likewise takes its GIN scans or reads the filtered documents' chunks.
    searcher = RagPG(db_url, rag.settings.with_overrides(**{"retrieval.exact_limit": exact_limit}))
    try:
        for prefix in PREFIXES:
            for mode in ("vector", "keyword", "hybrid"):
                hits = searcher.search("mot commun", len(PATHS), mode=mode, path_prefix=prefix)
                assert {h.path for h in hits} == under(prefix), (prefix, mode, exact_limit)
    finally:
        searcher.close()


def test_the_prefix_filter_is_a_range_of_the_byte_ordered_index(rag: RagPG, db_url: str):
    """In the generic plan a prepared search reuses (the prefix unknown when it is planned),
    the documents under the prefix are found through the index on (collection, path
    COLLATE "C"): the filter is an index condition, not a filter on every document row."""
    plan = SearchPlan(collection="default", k=10, mode="keyword", query_text="mot commun",
                      path_prefix="a/b")
    searcher = Searcher("ragpg")
    with psycopg.connect(db_url) as conn:
        if conn.info.server_version < 160000:
            pytest.skip("EXPLAIN (GENERIC_PLAN) needs PostgreSQL 16")
        # a collection of some size, so that reading all of it costs more than the range
        conn.execute("INSERT INTO ragpg.document (path, shard_key, title, content_hash, fingerprint)"
                     " SELECT p, ('x' || left(md5(p), 8))::bit(32)::integer, '', '', ''"
                     " FROM generate_series(1, 5000) i, LATERAL (SELECT 'bulk/' || i || '.md') AS x(p)")
        conn.execute("ANALYZE ragpg.document")
        text = generic(searcher.statement(plan).as_string(conn))
        row = value(conn, f"EXPLAIN (GENERIC_PLAN, FORMAT JSON) {text}")
        conn.rollback()
    assert row is not None
    [plan] = row  # EXPLAIN (FORMAT JSON): one plan in a list
    nodes = list(plan_nodes(plan["Plan"]))
    conditions = [n.get("Index Cond", "") for n in nodes
                  if n.get("Index Name") == "document_collection_path_bytes_idx"]
    assert conditions and all(">=" in c and "<" in c for c in conditions), conditions
    # every other read of document is a probe by key: a chunk's document, or the path itself
    others = {(n["Node Type"], n.get("Index Name")) for n in nodes
              if n.get("Relation Name") == "document" or n.get("Index Name", "").startswith("document")}
    assert others <= {("Bitmap Heap Scan", None), ("Bitmap Index Scan", "document_collection_path_bytes_idx"),
                      ("Bitmap Index Scan", "document_collection_path_key"),
                      ("Index Scan", "document_pkey")}, others


def generic(text: str) -> str:
    """The statement with $n placeholders, as the server sees a prepared one."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", number, text).replace("%%", "%")


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)
