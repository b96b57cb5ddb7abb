"""A first load counts its term statistics once, at its end; a killed one leaves them pending.

While a collection is pending the triggers leave its chunks out of term_stat and chunk_stat,
searches do without both (the exhaustive keyword leg, the documents' chunk counts), and the
next ingest counts them again. Checked through the real ingest and CLI: during the load (a
hook at the write checkpoint reads from another connection), after a process killed between
two write groups, on an incremental run (which keeps them row batch by row batch), and
after ``ragpg check --repair`` found them wrong.
"""

from __future__ import annotations

from pathlib import Path

import psycopg

from rag_pg import RagPG, Settings
from rag_pg.search.plan import SearchPlan
from rag_pg.search.statement import Searcher
from rag_pg.store import checkpoints
from rag_pg.store.integrity import check, mark_for_repair

from .conftest import run_cli
from .rows import records
from .test_bm25_pruned import assert_term_stats_hold, both

KEYWORD_ONLY = {"embedding.provider": "none", "source.language": "french"}


def write_tree(root: Path, n: int) -> Path:
    """``n`` short pages of a skewed vocabulary: more than one write group of documents."""
    for i in range(n):
        words = " ".join(f"mot{(i * 7 + w) % 53}" for w in range(30))
        folder = root / f"part{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"page{i:03}.md").write_text(
            f"# Page {i}\n\nSauvegarde de la base {i % 5}. {words}\n\n## Suite\n\nRestauration {words}\n")
    return root


def pending(url: str, collection: str = "default") -> tuple[bool, int, int]:
    """(the collection's mark, its term_stat rows, its chunks), read from another connection."""
    with psycopg.connect(url, autocommit=True) as conn:
        [row] = records(conn,
            "SELECT coalesce((SELECT term_stat_pending FROM ragpg.collection WHERE name = %(c)s), false)"
            " AS pending, (SELECT count(*) FROM ragpg.term_stat WHERE collection = %(c)s) AS terms,"
            " (SELECT count(*) FROM ragpg.chunk WHERE collection = %(c)s) AS chunks", {"c": collection})
    return bool(row["pending"]), int(row["terms"]), int(row["chunks"])


def ingest_watching(url: str, tree: Path) -> list[tuple[bool, int, int]]:
    """Ingest ``tree``, reading the mark after every write group."""
    seen: list[tuple[bool, int, int]] = []

    def record(site: str) -> None:
        if site == "after_write":
            seen.append(pending(url))

    previous = checkpoints.install(record)
    try:
        with RagPG(url, Settings().with_overrides(**KEYWORD_ONLY)) as rag:
            rag.ingest(tree)
    finally:
        checkpoints.install(previous)
    return seen


def assert_sound(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        assert check(conn) == []
        assert_term_stats_hold(conn, "default")
        searcher = Searcher("ragpg")
        for words in ("sauvegarde base", "mot3 mot7 restauration", "page"):
            both(conn, searcher, SearchPlan(collection="default", k=5, mode="keyword",
                                            query_text=words, candidates=10))


def test_a_first_load_leaves_the_triggers_out_then_counts_once(db_url: str, tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "tree", 150)
    during = ingest_watching(db_url, tree)
    assert len(during) >= 2  # several write groups
    for mark, terms, chunks in during:
        assert mark and terms == 0 and chunks > 0
    mark, terms, _ = pending(db_url)
    assert not mark and terms > 0
    assert_sound(db_url)
    # An incremental run keeps them row batch by row batch: never pending, exact after each write.
    for page in sorted(tree.rglob("*.md"))[:70]:
        page.write_text(page.read_text() + "\nUne ligne de plus sur la sauvegarde.\n")
    during = ingest_watching(db_url, tree)
    assert during and all(not mark and terms > 0 for mark, terms, _ in during)
    assert_sound(db_url)


def test_a_killed_first_load_stays_pending_and_searches_do_without(db_url: str, tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "tree", 150)
    env = {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_PROVIDER": "none",
           "RAGPG_SOURCE_LANGUAGE": "french"}
    out = run_cli(["ingest", str(tree)], env=env, cwd=tmp_path, faults=("after_write:2:exit",))
    assert out.returncode == 137, out.stderr
    mark, terms, chunks = pending(db_url)
    assert mark and terms == 0 and chunks > 0  # two groups written, their statistics not counted
    settings = Settings().with_overrides(**KEYWORD_ONLY)
    with RagPG(db_url, settings) as rag, psycopg.connect(db_url, autocommit=True) as conn:
        assert check(conn) == []  # pending statistics are no inconsistency
        hits = rag.search("sauvegarde de la base", k=5, mode="keyword")
        plan = SearchPlan(collection="default", k=5, mode="keyword",
                          query_text="sauvegarde de la base", keyword_exhaustive=True)
        with conn.transaction():
            rows = Searcher("ragpg").execute(conn, plan).fetchall()
        reference = sorted(rows, key=lambda r: r.keyword_rank)[:5]
        assert [h.chunk_id for h in hits] == [r.chunk_id for r in reference] and len(hits) == 5
        rag.ingest(tree)  # the next run writes the rest and counts them
    assert pending(db_url)[0] is False
    assert_sound(db_url)


def test_check_finds_drifted_statistics_and_the_next_ingest_counts_them(db_url: str,
                                                                         tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "tree", 20)
    with RagPG(db_url, Settings().with_overrides(**KEYWORD_ONLY)) as rag:
        rag.ingest(tree)
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("UPDATE ragpg.term_stat SET df = df + 1 WHERE lexeme LIKE 'mot1%%'")
            conn.execute("UPDATE ragpg.chunk_stat SET chunks = chunks + 3")
            problems = check(conn)
            assert {(p.code, p.subject) for p in problems} == {("term_stat", "default"),
                                                               ("chunk_stat", "default")}
            assert mark_for_repair(conn, problems) == 1
        assert pending(db_url)[0] is True
        report = rag.ingest(tree)  # nothing changed on disk: only the statistics are counted
        assert report.documents_indexed == 0
    assert pending(db_url)[0] is False
    assert_sound(db_url)


def test_the_cli_says_what_repair_marks(db_url: str, tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "tree", 5)
    with RagPG(db_url, Settings().with_overrides(**KEYWORD_ONLY)) as rag:
        rag.ingest(tree)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DELETE FROM ragpg.term_stat WHERE lexeme = 'sauvegard'")
    env = {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_PROVIDER": "none"}
    out = run_cli(["check", "--repair"], env=env, cwd=tmp_path)
    assert out.returncode == 1
    assert out.stdout.splitlines()[-1] == (
        "1 problem(s); 1 collection(s)' statistics will be counted again by the next ingest")


def test_an_earlier_versions_schema_is_one_line_run_init(db_url: str, tmp_path: Path) -> None:
    """A schema at 0013 (before the pending mark): search and ingest say to run `ragpg init`."""
    from alembic import command
    from sqlalchemy import create_engine, pool

    from rag_pg.errors import SchemaMissing
    from rag_pg.store import migrate

    tree = write_tree(tmp_path / "tree", 3)
    with RagPG(db_url, Settings().with_overrides(**KEYWORD_ONLY)) as rag:
        rag.ingest(tree)
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(db_url),
                           poolclass=pool.NullPool)
    cfg = migrate.alembic_config("ragpg")
    with engine.begin() as sa_conn:
        cfg.attributes["connection"] = sa_conn
        command.downgrade(cfg, "0013")
    engine.dispose()
    with RagPG(db_url, Settings().with_overrides(**KEYWORD_ONLY)) as rag:
        for attempt in (lambda: rag.search("sauvegarde", k=3), lambda: rag.ingest(tree)):
            try:
                attempt()
            except SchemaMissing as exc:
                assert str(exc) == "the 'ragpg' schema is out of date: run `ragpg init`"
            else:
                raise AssertionError("an out-of-date schema was used")
        rag.init()
        assert rag.search("sauvegarde", k=3)
