"""The composed SQL of every search shape, pinned in ``tests/golden_sql/<shape>.sql``.

The search statement is assembled from fragments of ``rag_pg/store/sql/search.sql`` at run time;
these files show each whole statement as it is sent (schema ``ragpg``, a 64-d model), so a
change to composition is read and reviewed as SQL. A test fails when a statement differs from
its file. After an intended change, rewrite the files and review the diff::

    RAGPG_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden_sql.py
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from rag_pg.search.plan import SearchPlan
from rag_pg.search.statement import Searcher

GOLDEN = Path(__file__).parent / "golden_sql"
UPDATE = os.environ.get("RAGPG_UPDATE_GOLDEN") == "1"

BASE: dict[str, Any] = {"collection": "default", "k": 10, "query_text": "sauvegarde de la base",
                        "model": "fake-bow-64", "dimension": 64, "candidates": 40}
FILTERS: dict[str, Any] = {"path_prefix": "docs/ops", "front_matter": {"lang": "fr"}, "level": 0,
                           "node_type": "source"}

#: shape -> the plan fields that make it (besides BASE)
SHAPES: dict[str, dict[str, Any]] = {
    # a whole collection: one HNSW scan of its own rows, or exact search when it is small
    "vector_collection": {"mode": "vector", "candidates": 10},
    # the same, exact search forced by the caller
    "vector_collection_exact": {"mode": "vector", "exact": True, "candidates": 10},
    # a whole collection, capped per document: the general vector leg
    "vector_capped": {"mode": "vector", "max_per_document": 1},
    # filtered: the statement decides exact or index from the filters' row count; every
    # filter's fragment is in it (each alone only leaves the others out)
    "vector_filtered": {"mode": "vector", **FILTERS},
    "vector_halfvec": {"mode": "vector", "candidates": 10, "vector_kind": "halfvec"},
    "keyword": {"mode": "keyword"},
    "keyword_filtered": {"mode": "keyword", **FILTERS},
    # the exhaustive keyword leg: the reference the pruned one equals (tests/test_bm25_pruned.py)
    "keyword_exhaustive": {"mode": "keyword", "keyword_exhaustive": True},
    "keyword_exhaustive_filtered": {"mode": "keyword", "keyword_exhaustive": True, **FILTERS},
    "keyword_capped_window": {"mode": "keyword", "max_per_document": 2, "neighbours": 1},
    "hybrid": {"mode": "hybrid"},
    "hybrid_exact": {"mode": "hybrid", "exact": True},
    "hybrid_filtered": {"mode": "hybrid", **FILTERS},
    "hybrid_expand_parent": {"mode": "hybrid", "neighbours": 1, "expand": "parent"},
    "hybrid_expand_children": {"mode": "hybrid", "expand": "children", "level": 1},
    # on a Citus coordinator: every chunk scan names the collection by equality (routed)
    "keyword_routed": {"mode": "keyword", "routed": True},
}


def render(statement: sql.Composable) -> str:
    return statement.as_string().strip() + "\n"


def statements() -> dict[str, str]:
    searcher = Searcher("ragpg")
    out = {shape: render(searcher.statement(SearchPlan(**{**BASE, **fields})))
           for shape, fields in SHAPES.items()}
    out["collection_info"] = render(searcher.collection_statement())
    out["settings"] = "".join(render(s) for s in searcher.settings_statements(SearchPlan(**BASE, mode="hybrid")))
    return out


@pytest.mark.parametrize("shape", sorted([*SHAPES, "collection_info", "settings"]))
def test_the_composed_statement_matches_its_golden_file(shape: str) -> None:
    text = statements()[shape]
    path = GOLDEN / f"{shape}.sql"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden file for {shape}: run with RAGPG_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), (
        f"the {shape} statement changed: review it, then RAGPG_UPDATE_GOLDEN=1 to rewrite {path.name}"
    )


def test_every_golden_file_is_a_shape_still_composed() -> None:
    """A file left from a shape that is no longer built would pin nothing."""
    assert {p.stem for p in GOLDEN.glob("*.sql")} == set(statements())


def test_shapes_differ_where_the_plan_does() -> None:
    """Each shape is its own statement: a filter or option that did not reach the SQL would
    leave two files identical."""
    texts = statements()
    assert len(set(texts.values())) == len(texts)
    # the whole collection's index scan joins nothing: its rows' own collection filters them
    ann = texts["vector_collection"].split("vec_ann AS MATERIALIZED (")[1].split("),")[0]
    assert "JOIN" not in ann and "ORDER BY" in ann
    # the collection's size, read by the statement itself, decides exact search or the index
    assert "term_stat_pending" in texts["vector_collection"] and "vec_scope" not in texts["keyword"]
    assert "LIMIT 10" in texts["vector_collection"]  # row counts are literals
    assert "kw_ranked" not in texts["vector_collection"] and "vec_ranked" not in texts["keyword"]
    for clause in ("d.path COLLATE \"C\" >=", "d.front_matter @>", "d.level =", "d.node_type ="):
        assert clause in texts["hybrid_filtered"] and clause not in texts["hybrid"]
