"""The SQL surface for BI tools (migration 0002): view contracts, comments, keyword_search."""

from __future__ import annotations

import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rag_pg import RagPG, Settings
from rag_pg.store import migrate
from rag_pg.store.roles import PUBLISHED_FUNCTIONS, PUBLISHED_VIEWS

from .rows import records, value, values

# The published columns, in order, with their types. Changing one is a breaking change for
# every dashboard built on it: add columns at the end, in a new migration, and update this.
VIEW_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "documents_v": [
        ("id", "bigint"), ("collection", "text"), ("path", "text"), ("title", "text"),
        ("language", "text"), ("node_type", "text"), ("level", "integer"),
        ("parent_path", "text"), ("embed", "boolean"), ("chunk_count", "integer"),
        ("token_count", "integer"), ("content_hash", "text"), ("front_matter", "jsonb"),
        ("source_root", "text"), ("indexed_at", "timestamp with time zone"),
    ],
    "chunks_v": [
        ("chunk_id", "bigint"), ("document_id", "bigint"), ("collection", "text"),
        ("path", "text"), ("title", "text"), ("section", "text"), ("anchor", "text"),
        ("citation", "text"), ("position", "integer"), ("content", "text"),
        ("token_count", "integer"), ("content_hash", "text"), ("language", "text"),
        ("has_vector", "boolean"), ("indexed_at", "timestamp with time zone"),
    ],
    "ingest_runs_v": [
        ("id", "bigint"), ("collection", "text"), ("source_root", "text"), ("mode", "text"),
        ("status", "text"), ("started_at", "timestamp with time zone"),
        ("finished_at", "timestamp with time zone"), ("duration_seconds", "double precision"),
        ("documents_seen", "integer"), ("documents_indexed", "integer"),
        ("documents_skipped", "integer"), ("documents_failed", "integer"),
        ("documents_deleted", "integer"), ("chunks_upserted", "integer"),
        ("chunks_unchanged", "integer"), ("chunks_deleted", "integer"),
        ("embedding_calls", "integer"), ("tokens_embedded", "integer"), ("model", "text"),
        ("error_count", "integer"), ("errors", "jsonb"),
    ],
    "corpus_stats_v": [
        ("collection", "text"), ("model", "text"), ("dimension", "integer"),
        ("documents", "bigint"), ("chunks", "bigint"), ("tokens", "bigint"),
        ("vectors", "bigint"), ("models", "text[]"),
        ("last_indexed_at", "timestamp with time zone"),
        ("last_run_started_at", "timestamp with time zone"), ("last_run_status", "text"),
    ],
}
KEYWORD_SEARCH_ARGS = "query text, k integer, collection text DEFAULT 'default'::text"
KEYWORD_SEARCH_RESULT = (
    'TABLE(path text, title text, section text, anchor text, "position" integer,'
    " score double precision, content text)"
)


def settings_for(db_url: str, embed_server: Any) -> Settings:
    return Settings().with_overrides(**{
        "database.url": db_url, "embedding.provider": "http", "embedding.url": embed_server.url,
    })


@pytest.fixture
def indexed(db_url: str, embed_server: Any, corpus: Path) -> Iterator[RagPG]:
    """The sample corpus ingested into collection 'default' (vectors from the fake embedder)."""
    with RagPG(db_url, settings_for(db_url, embed_server)) as rag:
        report = rag.ingest(corpus)
        assert report.documents_indexed == 9
        yield rag


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


def keyword_search(conn: psycopg.Connection[Any], query: str, k: int | None = 10,
                   collection: str | None = None) -> list[dict[str, Any]]:
    if collection is None:
        return records(conn, "SELECT * FROM ragpg.keyword_search(%s, %s)", (query, k))
    return records(conn, "SELECT * FROM ragpg.keyword_search(%s, %s, %s)", (query, k, collection))


# -- contracts ----------------------------------------------------------------------------------


def test_every_view_pins_its_columns_in_order(conn: psycopg.Connection[Any]) -> None:
    rows = conn.execute(
        "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod)"
        " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'ragpg' AND c.relkind IN ('v', 'm') AND a.attnum > 0"
        " AND NOT a.attisdropped ORDER BY c.relname, a.attnum"
    ).fetchall()
    found: dict[str, list[tuple[str, str]]] = {}
    for view, column, type_name in rows:
        found.setdefault(view, []).append((column, type_name))
    assert found == VIEW_COLUMNS
    assert sorted(PUBLISHED_VIEWS) == sorted(VIEW_COLUMNS)  # every view is granted to readers


def test_no_view_exposes_a_vector(conn: psycopg.Connection[Any]) -> None:
    types = {t for columns in VIEW_COLUMNS.values() for _, t in columns}
    assert not {t for t in types if t.startswith(("vector", "halfvec", "sparsevec", "tsvector"))}
    assert conn.execute("SELECT count(*) FROM pg_views WHERE schemaname = 'ragpg'").fetchone() == (4,)


def test_every_view_and_column_has_a_comment(conn: psycopg.Connection[Any]) -> None:
    missing = conn.execute(
        "SELECT c.relname, a.attname FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
        " WHERE n.nspname = 'ragpg' AND c.relkind = 'v'"
        " AND (obj_description(c.oid, 'pg_class') IS NULL"
        "      OR coalesce(col_description(c.oid, a.attnum), '') = '')"
    ).fetchall()
    assert missing == []
    comment = value(conn, "SELECT obj_description('ragpg.keyword_search(text, integer, text)'::regprocedure, 'pg_proc')")
    assert comment is not None and "SECURITY DEFINER" in comment


def test_keyword_search_signature_is_a_contract(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute(
        "SELECT pg_get_function_arguments(p.oid), pg_get_function_result(p.oid), p.prosecdef,"
        " p.provolatile, p.proconfig,"
        " has_function_privilege('public', p.oid, 'EXECUTE')"
        " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = 'ragpg' AND p.proname = 'keyword_search'"
    ).fetchone()
    assert row == (
        KEYWORD_SEARCH_ARGS, KEYWORD_SEARCH_RESULT, True, "s",
        ["search_path=pg_catalog, pg_temp", "client_min_messages=warning"], False,
    )
    published = values(conn,
        "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = 'ragpg' AND p.prokind = 'f'"
        " AND p.prorettype <> 'trigger'::regtype ORDER BY 1"  # triggers are not callable
    )
    # Besides the published surface, one function ragpg's own searches call (never a reader's).
    internal = ["readable_matches"]
    assert published == sorted([*(name for name, _ in PUBLISHED_FUNCTIONS), *internal])


def test_downgrade_to_0001_removes_the_surface_and_upgrade_restores_it(db_url: str) -> None:
    from alembic import command
    from sqlalchemy import create_engine, pool

    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(db_url),
                           poolclass=pool.NullPool)
    try:
        with engine.begin() as sa_conn:
            cfg = migrate.alembic_config("ragpg")
            cfg.attributes["connection"] = sa_conn
            command.downgrade(cfg, "0001")
    finally:
        engine.dispose()
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_views WHERE schemaname = 'ragpg'"
        ).fetchone() == (0,)
        assert conn.execute("SELECT to_regproc('ragpg.keyword_search')").fetchone() == (None,)
        migrate.upgrade(conn, "ragpg")
        assert conn.execute(
            "SELECT count(*) FROM pg_views WHERE schemaname = 'ragpg'"
        ).fetchone() == (len(VIEW_COLUMNS),)


# -- the views agree with the library -----------------------------------------------------------


def test_documents_and_chunks_views_match_the_library(indexed: RagPG, conn: psycopg.Connection[Any]) -> None:
    record = indexed.get_document("fr/admin/sauvegardes.md")
    assert record is not None
    doc = record.to_dict()
    row = conn.execute(
        "SELECT id, collection, path, title, language, node_type, level, parent_path, embed,"
        " chunk_count, token_count, content_hash FROM ragpg.documents_v WHERE path = %s",
        ("fr/admin/sauvegardes.md",),
    ).fetchone()
    assert row == (
        doc["id"], "default", "fr/admin/sauvegardes.md", doc["title"], "french", "source", 0,
        None, True, doc["chunk_count"], doc["token_count"], doc["content_hash"],
    )
    chunks = conn.execute(
        "SELECT chunk_id, document_id, position, section, anchor, content, token_count,"
        " content_hash, citation, has_vector FROM ragpg.chunks_v WHERE path = %s ORDER BY position",
        ("fr/admin/sauvegardes.md",),
    ).fetchall()
    expected = [
        (c["id"], doc["id"], c["position"], c["section"], c["anchor"], c["content"],
         c["token_count"], c["content_hash"],
         f"fr/admin/sauvegardes.md#{c['anchor']}" if c["anchor"] else "fr/admin/sauvegardes.md",
         True)
        for c in doc["chunks"]
    ]
    assert chunks == expected and len(chunks) == doc["chunk_count"] > 1


def test_corpus_stats_and_ingest_runs_views_match_the_library(
    indexed: RagPG, conn: psycopg.Connection[Any], corpus: Path
) -> None:
    indexed.ingest(corpus)  # a second, incremental run: everything skipped
    stats = indexed.stats().to_dict()
    row = conn.execute(
        "SELECT collection, model, dimension, documents, chunks, vectors, models, last_run_status"
        " FROM ragpg.corpus_stats_v"
    ).fetchall()
    assert row == [("default", "fake-bow-64", 64, 9, stats["chunks"], stats["chunks"],
                    ["fake-bow-64"], "completed")]
    tokens = conn.execute("SELECT sum(token_count) FROM ragpg.documents_v").fetchone()
    assert conn.execute("SELECT tokens FROM ragpg.corpus_stats_v").fetchone() == tokens
    runs = conn.execute(
        "SELECT collection, mode, status, documents_seen, documents_indexed, documents_skipped,"
        " documents_failed, error_count, errors, duration_seconds >= 0"
        " FROM ragpg.ingest_runs_v ORDER BY id"
    ).fetchall()
    assert runs == [
        ("default", "incremental", "completed", 9, 9, 0, 0, 0, [], True),
        ("default", "incremental", "completed", 9, 0, 9, 0, 0, [], True),
    ]


# -- keyword_search -----------------------------------------------------------------------------


def test_keyword_search_finds_the_passage_with_provenance(indexed: RagPG, conn: psycopg.Connection[Any]) -> None:
    rows = keyword_search(conn, "restaurer une sauvegarde pg_dump", 3)
    assert 1 <= len(rows) <= 3
    top = rows[0]
    assert list(top) == ["path", "title", "section", "anchor", "position", "score", "content"]
    assert top["path"] == "fr/admin/sauvegardes.md" and "pg_dump" in top["content"]
    assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    library = indexed.search("restaurer une sauvegarde pg_dump", 3, mode="keyword")
    assert (top["path"], top["section"], top["anchor"], top["position"]) == (
        library[0].path, library[0].chunk.section, library[0].chunk.anchor, library[0].chunk.position
    )
    assert top["title"] == library[0].chunk.document_title and top["score"] > 0
    # accents folded and stemmed in the chunk's own language: each word finds its file
    assert {r["path"] for r in keyword_search(conn, "ELEVATION sauvegardé", 2)} == {
        "fr/admin/index-et-performances.md", "fr/admin/sauvegardes.md"}


def test_keyword_search_returns_nothing_for_k_below_one(indexed: RagPG, conn: psycopg.Connection[Any]) -> None:
    assert keyword_search(conn, "sauvegarde", 1) != []
    assert {k: keyword_search(conn, "sauvegarde", k) for k in (0, -5, None)} == {0: [], -5: [], None: []}


def test_keyword_search_caps_k_and_scopes_by_collection(
    indexed: RagPG, conn: psycopg.Connection[Any], corpus: Path
) -> None:
    everything = keyword_search(conn, "postgresql index requête vector search", 1000)
    assert 1 < len(everything) == len(keyword_search(conn, "postgresql index requête vector search", 10**6))
    assert keyword_search(conn, "sauvegarde", 10, "nowhere") == []
    indexed.ingest(corpus / "fr" / "cuisine", collection="recettes")
    recipes = keyword_search(conn, "tarte sauvegarde", 10, "recettes")
    assert {r["path"] for r in recipes} == {"tarte-tatin.md"}


def test_stop_words_or_no_words_return_no_rows(indexed: RagPG, conn: psycopg.Connection[Any]) -> None:
    queries = ["the and of", "THE, of; AND!", "le la de et", "", "   ", "!!! ??? ..."]
    assert {q: keyword_search(conn, q) for q in queries} == {q: [] for q in queries}
    assert keyword_search(conn, "the sauvegarde of")[0]["path"] == "fr/admin/sauvegardes.md"


NASTY = [
    "'", "''", '"', '"unterminated', "\\", "a:*", "a:*B", "!(", ")(", "<->", "<2>", "a <-> b",
    "& | !", "!!!a", "a & (b | !c)", "foo:ABCD", "-sauvegarde", "sauvegarde or", "or or or",
    "x" * 3000 + " sauvegarde", "😀 sauvegarde 🍰", "\x01\x02\x1f\x7f sauvegarde",
    " ".join(["sauvegarde"] * 200), " ".join(f"w{i}" for i in range(500)),
    "pg_dump --format=custom 'db' && rm -rf /", "http://example.com/a?b=c&d=e#f",
    "'; DROP TABLE ragpg.document; --",
]


def test_keyword_search_accepts_nasty_input(indexed: RagPG, conn: psycopg.Connection[Any]) -> None:
    """Operators and quotes are inert: the words around them are still found."""
    for query in NASTY:
        rows = keyword_search(conn, query, 5)
        assert len(rows) <= 5, query
        if "sauvegarde" in query:
            assert rows and rows[0]["path"] == "fr/admin/sauvegardes.md", query
    assert conn.execute("SELECT count(*) FROM ragpg.document").fetchone() == (9,)


_ALPHABET = st.characters(
    blacklist_categories=("Cs",), blacklist_characters="\x00",
) | st.sampled_from(list("'\"&|!:*()<>-\\@#$%^~`[]{};,./?") + [chr(c) for c in range(1, 32)] + ["\x7f"])
_WORDS = st.sampled_from(["sauvegarde", "pg_dump", "tarte", "index", "the", "le", "OR", "AND", "NOT"])
_QUERIES = st.one_of(
    st.text(alphabet=_ALPHABET, max_size=200),
    st.lists(st.one_of(_WORDS, st.text(alphabet=_ALPHABET, max_size=8)), max_size=40).map(" ".join),
    st.text(alphabet=_ALPHABET, min_size=1, max_size=64).map(lambda s: (s * (10_240 // len(s) + 1))[:10_240]),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=_QUERIES, k=st.integers(min_value=-3, max_value=50))
@example(query=("'&|!:*()<>\"" * 1000)[:10_240], k=10)
@example(query=string.punctuation * 300, k=10)
@example(query="".join(chr(c) for c in range(1, 32)) * 320, k=10)
def test_keyword_search_never_raises_on_fuzzed_text(indexed: RagPG, conn: psycopg.Connection[Any],
                                                    query: str, k: int) -> None:
    rows = keyword_search(conn, query, k)
    assert len(rows) <= max(k, 0)
    scores = [r["score"] for r in rows]
    assert scores == sorted(scores, reverse=True)
    assert all(r["path"] and r["score"] > 0 for r in rows)


def test_docs_describe_every_view_column_and_the_function() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "sql.md").read_text(encoding="utf-8")
    missing = [f"{view}.{column}" for view, columns in VIEW_COLUMNS.items()
               for column, _ in columns if f"`{column}`" not in text]
    missing += [f"ragpg.{view}" for view in VIEW_COLUMNS if f"`ragpg.{view}`" not in text]
    assert missing == []
    assert "ragpg.keyword_search(query text, k integer, collection text DEFAULT 'default')" in text
