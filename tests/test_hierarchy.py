"""The summary tree of seed 004: stored levels and parents, parent checks, `ragpg tree`, expand."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.errors import SchemaMissing
from rag_pg.ingest.parents import (
    MISSING_PARENT,
    missing_parent_message,
    record_missing_parents,
)
from rag_pg.models import FailedDocument, IngestReport
from rag_pg.store.parents import missing_parents
from rag_pg.tree.hierarchy import Node, build_tree, render, subtree

from .conftest import run_cli
from .invariants import violations
from .rows import records


def check_parents(rag: Any, report: IngestReport) -> int:
    """Post-ingest validation for callers of ``RagPG.ingest``: the report's root only.

    Idempotent: a link the ingest itself already reported is not added twice. Returns the
    number of broken links found.
    """
    with rag.source.connection() as conn:
        broken = missing_parents(
            conn, rag.settings.database.schema, report.collection, source_root=report.source_root
        )
    known = {f.path for f in report.failures if f.kind == MISSING_PARENT}
    for path, parent in broken:
        if path not in known:
            report.failures.append(
                FailedDocument(path=path, error=missing_parent_message(parent, report.collection),
                               kind=MISSING_PARENT)
            )
    return len(broken)


BOOK = Path(__file__).parent / "data" / "book"
W = "essai-phares"
P1 = f"{W}/partie-1-les-phares"
P2 = f"{W}/partie-2-la-navigation"
# path -> (parent_path, level, node_type, embed): the seed-004 rule, written out.
EXPECTED = {
    f"{W}/summary.md": (None, 3, "summary", True),
    f"{W}/preface/source.md": (f"{W}/preface/summary.md", 0, "source", True),
    f"{W}/preface/summary.md": (f"{W}/summary.md", 1, "summary", True),
    f"{P1}/summary.md": (f"{W}/summary.md", 2, "summary", True),
    f"{P1}/chapitre-01-la-lumiere/source.md": (f"{P1}/chapitre-01-la-lumiere/summary.md", 0, "source", True),
    f"{P1}/chapitre-01-la-lumiere/summary.md": (f"{P1}/summary.md", 1, "summary", True),
    f"{P1}/chapitre-02-les-gardiens/source.md": (f"{P1}/chapitre-02-les-gardiens/summary.md", 0, "source", True),
    f"{P1}/chapitre-02-les-gardiens/summary.md": (f"{P1}/summary.md", 1, "summary", True),
    f"{P2}/summary.md": (f"{W}/summary.md", 2, "summary", True),
    f"{P2}/chapitre-01-les-cartes/source.md": (f"{P2}/chapitre-01-les-cartes/summary.md", 0, "source", False),
    f"{P2}/chapitre-01-les-cartes/summary.md": (f"{P2}/summary.md", 1, "summary", True),
    f"{P2}/chapitre-02-les-marees/source.md": (f"{P2}/chapitre-02-les-marees/summary.md", 0, "source", False),
    f"{P2}/chapitre-02-les-marees/summary.md": (f"{P2}/summary.md", 1, "summary", True),
}


@pytest.fixture
def book(tmp_path: Path) -> Path:
    target = tmp_path / "book"
    shutil.copytree(BOOK, target)
    return target


def make_rag(db_url: str, server: Any, **overrides: Any) -> RagPG:
    settings = Settings.load(
        environ={}, overrides={"embedding.url": server.url, "embedding.batch_size": 8, **overrides}
    )
    return RagPG(db_url, settings)


def rows(url: str) -> dict[str, tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        found = records(conn,
            "SELECT path, parent_path, level, node_type, embed FROM ragpg.document ORDER BY path")
    return {r["path"]: (r["parent_path"], r["level"], r["node_type"], r["embed"]) for r in found}


def test_book_ingests_with_levels_parents_and_keyword_only_sources(db_url, embed_server, book):
    embed_server.poison = "roses des vents"  # only in an `embed: false` file: never sent
    with make_rag(db_url, embed_server) as rag:
        report = rag.ingest(book)
        hits = rag.search("portulans lignes de rhumb", k=1, mode="keyword")
    assert report.failures == [] and report.documents_indexed == len(EXPECTED)
    assert rows(db_url) == EXPECTED
    with psycopg.connect(db_url) as conn:
        per_doc = dict(conn.execute(
            "SELECT d.path, count(v.chunk_id) FROM ragpg.document d JOIN ragpg.chunk c ON c.document_id = d.id"
            " LEFT JOIN ragpg.chunk_vector v ON v.chunk_id = c.id GROUP BY d.path"
        ).fetchall())
        chunks = dict(conn.execute(
            "SELECT d.path, d.chunk_count FROM ragpg.document d"
        ).fetchall())
    for path, (_, _, _, embed) in EXPECTED.items():
        assert per_doc[path] == (chunks[path] if embed else 0), path
    assert embed_server.texts_embedded == sum(chunks[p] for p, e in EXPECTED.items() if e[3])
    assert hits[0].path == f"{P2}/chapitre-01-les-cartes/source.md"
    assert hits[0].chunk.anchor == "les-portulans"
    assert violations(db_url) == []


def test_an_intact_tree_has_no_missing_parent(db_url, embed_server, book):
    with make_rag(db_url, embed_server) as rag:
        report = rag.ingest(book)
        assert check_parents(rag, report) == 0
    with psycopg.connect(db_url) as conn:
        assert missing_parents(conn, "ragpg", "default") == []
    assert report.failures == []


def test_a_parent_written_with_a_leading_dot_slash_is_found(db_url, embed_server, tmp_path):
    """`./a/summary.md` names the root's `a/summary.md`, for the check as for the parent
    expansion of a search (which found it while the check called the link broken)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "summary.md").write_text("---\nlevel: 1\n---\n# A\n\nRésumé.\n", encoding="utf-8")
    for name, parent in (("one.md", "./a/summary.md"), ("two.md", "/a/summary.md"),
                         ("three.md", "a/summary.md"), ("four.md", "./a/absent.md")):
        (tmp_path / "a" / name).write_text(f"---\nparent_source_file: {parent}\n---\n# {name}\n\nTexte.\n",
                                           encoding="utf-8")
    with make_rag(db_url, embed_server) as rag:
        report = rag.ingest(tmp_path)
        assert [(f.path, f.kind) for f in report.failures] == [("a/four.md", MISSING_PARENT)]
        hits = rag.search("Texte", k=10, mode="keyword", expand="parent")
    assert {h.path: (h.extra.get("expanded") or {}).get("path") for h in hits} == {
        "a/one.md": "a/summary.md", "a/two.md": "a/summary.md", "a/three.md": "a/summary.md",
        "a/four.md": None}


def test_a_missing_parent_is_reported_per_document_and_the_document_is_kept(db_url, embed_server, book):
    (book / P2 / "summary.md").unlink()
    with make_rag(db_url, embed_server) as rag:
        report = rag.ingest(book)  # ingest itself records the broken links
        indexed = report.documents_indexed
        assert check_parents(rag, report) == 2  # found again, but not added twice (checked below)
    orphans = [f"{P2}/chapitre-01-les-cartes/summary.md", f"{P2}/chapitre-02-les-marees/summary.md"]
    assert [(f.path, f.kind) for f in report.failures] == [(p, MISSING_PARENT) for p in orphans]
    assert f"'{P2}/summary.md'" in report.failures[0].error
    assert "not indexed in collection 'default'" in report.failures[0].error
    assert report.documents_failed == 0 and indexed == len(EXPECTED) - 1
    stored = rows(db_url)
    assert all(p in stored for p in orphans)  # kept, with their (dangling) parent recorded
    assert stored[orphans[0]] == (f"{P2}/summary.md", 1, "summary", True)


def test_record_missing_parents_limits_the_check_to_the_paths_given(db_url, embed_server, book):
    (book / P1 / "summary.md").unlink()
    with make_rag(db_url, embed_server) as rag:
        rag.ingest(book)
    report = IngestReport(source_root=str(book))
    only = {f"{P1}/chapitre-01-la-lumiere/summary.md", f"{W}/summary.md"}
    with psycopg.connect(db_url) as conn:
        assert record_missing_parents(conn, "ragpg", "default", report, paths=only) == 1
        everything = missing_parents(conn, "ragpg", "default")
    assert [f.path for f in report.failures] == [f"{P1}/chapitre-01-la-lumiere/summary.md"]
    assert [p for p, _ in everything] == [f"{P1}/chapitre-01-la-lumiere/summary.md",
                                           f"{P1}/chapitre-02-les-gardiens/summary.md"]


def node(path: str, parent: str | None, level: int = 0) -> Node:
    return Node(path=path, title=path, parent_path=parent, level=level, node_type="source",
                embed=True, chunk_count=1, token_count=3)


def test_build_tree_links_children_and_flags_orphans_and_cycles():
    tree = build_tree([
        node("w.md", None, 3), node("a.md", "w.md", 1), node("b.md", "a.md"),
        node("o.md", "gone.md"), node("x.md", "y.md"), node("y.md", "x.md"), node("s.md", "s.md"),
        node("z.md", "x.md"),
    ])
    shape = [(r.path, r.problem, [c.path for c in r.children]) for r in tree.roots]
    assert shape == [
        ("w.md", None, ["a.md"]),
        ("s.md", "cycle", []),
        ("x.md", "cycle", ["y.md", "z.md"]),
        ("o.md", MISSING_PARENT, []),
    ]
    assert tree.roots[0].children[0].children[0].path == "b.md"
    assert tree.problems == [
        {"path": "s.md", "kind": "cycle", "parent": "s.md"},
        {"path": "x.md", "kind": "cycle", "parent": "y.md"},
        {"path": "o.md", "kind": MISSING_PARENT, "parent": "gone.md"},
    ]
    lines = render(tree)
    assert lines[0].startswith('L3 source  w.md  "w.md"')
    assert lines[1].startswith("  L1 source  a.md") and lines[2].startswith("    L0 source  b.md")


def test_subtree_by_node_or_by_folder():
    tree = build_tree([
        node("w/s.md", None, 3), node("w/p/s.md", "w/s.md", 2), node("w/p/c/x.md", "w/p/s.md"),
        node("w/q/s.md", "w/s.md", 2),
    ])
    assert [r.path for r in subtree(tree, "w/p/s.md").roots] == ["w/p/s.md"]
    assert [r.path for r in subtree(tree, "w/p").roots] == ["w/p/s.md"]
    assert [r.path for r in subtree(tree, "w/q/").roots] == ["w/q/s.md"]
    assert subtree(tree, "nowhere").roots == []


def test_tree_cli_prints_levels_and_json(db_url, embed_server, book, tmp_path):
    with make_rag(db_url, embed_server) as rag:
        rag.ingest(book)
    env = {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_PROVIDER": "none"}
    out = run_cli(["tree"], env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == len(EXPECTED)
    assert lines[0].startswith(f'L3 summary {W}/summary.md  "Essai sur les phares')
    assert f"      L0 source  {P2}/chapitre-01-les-cartes/source.md" in out.stdout
    assert "(keyword only)" in [ln for ln in lines if "les-cartes/source.md" in ln][0]
    out = run_cli(["tree", str(book / P1), "--json"], env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)

    def shape(n: dict[str, Any]) -> list[Any]:
        return [n["path"], n["level"], [shape(c) for c in n["children"]]]

    assert [shape(r) for r in data["roots"]] == [[f"{P1}/summary.md", 2, [
        [f"{P1}/chapitre-01-la-lumiere/summary.md", 1,
         [[f"{P1}/chapitre-01-la-lumiere/source.md", 0, []]]],
        [f"{P1}/chapitre-02-les-gardiens/summary.md", 1,
         [[f"{P1}/chapitre-02-les-gardiens/source.md", 0, []]]],
    ]]]
    assert data["problems"] == []


def test_tree_cli_exits_1_on_a_missing_parent_and_2_on_an_unknown_path(db_url, embed_server, book, tmp_path):
    (book / W / "summary.md").unlink()
    with make_rag(db_url, embed_server) as rag:
        rag.ingest(book)
    env = {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_PROVIDER": "none"}
    out = run_cli(["tree", "--json"], env=env, cwd=tmp_path)
    assert out.returncode == 1
    problems = json.loads(out.stdout)["problems"]
    assert sorted(p["path"] for p in problems) == sorted(
        [f"{W}/preface/summary.md", f"{P1}/summary.md", f"{P2}/summary.md"])
    assert {p["kind"] for p in problems} == {MISSING_PARENT}
    assert "missing parent" in out.stderr and "Traceback" not in out.stderr
    out = run_cli(["tree", "no/such/node.md"], env=env, cwd=tmp_path)
    assert out.returncode == 2 and "no indexed document" in out.stderr


def test_load_tree_needs_an_initialised_schema(empty_db_url):
    from rag_pg.tree.hierarchy import load_tree

    with RagPG(empty_db_url, Settings.load(environ={}, overrides={"embedding.provider": "none"})) as rag:
        with pytest.raises(SchemaMissing, match="ragpg init"):
            load_tree(rag)


def test_a_hit_in_a_chapter_source_with_expand_parent_brings_the_chapter_summary(db_url, embed_server, book):
    with make_rag(db_url, embed_server) as rag:
        rag.ingest(book)
        hits = rag.search("lentille de Fresnel anneaux", k=1, mode="keyword", expand="parent")
    assert hits[0].path == f"{P1}/chapitre-01-la-lumiere/source.md"
    expanded = hits[0].extra["expanded"]
    assert expanded["kind"] == "parent"
    assert expanded["path"] == f"{P1}/chapitre-01-la-lumiere/summary.md"
    assert expanded["title"] == "Chapitre I : la lumière (résumé)"
    assert "optique à échelons du dix-neuvième siècle" in expanded["text"]
    assert [c["position"] for c in expanded["chunks"]] == list(range(len(expanded["chunks"])))


def test_the_cli_says_a_broken_link_is_no_failed_document(db_url, embed_server, book, tmp_path):
    (book / P2 / "summary.md").unlink()
    (book / "dup.md").write_text("---\ntitle: a\ntitle: b\n---\n# Dup\n\nTexte.\n", encoding="utf-8")
    env = {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": embed_server.url}
    out = run_cli(["ingest", str(book)], env=env, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "0 failed" in out.stdout and "  failed " not in out.stdout
    assert f"  broken link {P2}/chapitre-01-les-cartes/summary.md" in out.stdout
    assert "2 broken parent link(s), the documents are indexed" in out.stderr
    assert "  warning dup.md: " in out.stdout  # a front-matter warning shows without --json
