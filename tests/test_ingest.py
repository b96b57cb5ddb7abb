"""Ingest against a real Postgres and a real (fake, deterministic) embedding server on loopback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.errors import DimensionMismatch, EmbeddingError

from .conftest import run_cli
from .invariants import dump, violations
from .rows import records, value, values


def make_rag(db_url: str, server: Any, **overrides: Any) -> RagPG:
    settings = Settings.load(
        environ={}, overrides={"embedding.url": server.url, "embedding.batch_size": 8, **overrides}
    )
    return RagPG(db_url, settings)


def counts(url: str) -> tuple[int, int, int]:
    with psycopg.connect(url) as conn:
        [row] = records(conn,
            "SELECT (SELECT count(*) FROM ragpg.document) AS documents,"
            " (SELECT count(*) FROM ragpg.chunk) AS chunks,"
            " (SELECT count(*) FROM ragpg.chunk_vector) AS vectors")
        return int(row["documents"]), int(row["chunks"]), int(row["vectors"])


def test_cold_ingest_indexes_eligible_files_with_vectors(db_url, embed_server, corpus):
    with make_rag(db_url, embed_server) as rag:
        report = rag.ingest(corpus)
    assert report.documents_seen == 9
    assert report.documents_indexed == 9
    assert report.documents_failed == 0
    assert report.files_skipped == {"hard_excluded": 2, "not_markdown": 1}  # .aiignore itself
    docs, chunks, vectors = counts(db_url)
    assert (docs, chunks, vectors) == (9, report.chunks_upserted, report.chunks_upserted)
    assert embed_server.calls == report.embedding_calls > 0
    assert violations(db_url) == []
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT title, front_matter, language FROM ragpg.document WHERE path = 'fr/admin/sauvegardes.md'"
        ).fetchone()
    assert row == ("Sauvegardes PostgreSQL", {"title": "Sauvegardes PostgreSQL", "lang": "fr",
                                              "tags": ["postgresql", "sauvegarde"]}, "french")


def test_unchanged_reingest_makes_no_embedding_call_and_writes_no_row(db_url, embed_server, corpus):
    with make_rag(db_url, embed_server) as rag:
        rag.ingest(corpus)
        before = dump(db_url)
        with psycopg.connect(db_url) as conn:
            xmins = conn.execute("SELECT id, xmin::text FROM ragpg.chunk ORDER BY id").fetchall()
        calls = embed_server.calls
        for f in corpus.rglob("*.md"):
            f.touch()  # mtime only
        report = rag.ingest(corpus)
    assert embed_server.calls == calls
    assert report.documents_indexed == 0 and report.chunks_upserted == 0
    assert report.documents_skipped == 9 and report.chunks_unchanged == len(xmins)
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT id, xmin::text FROM ragpg.chunk ORDER BY id").fetchall() == xmins
    assert dump(db_url) == before


def test_changing_one_file_reindexes_exactly_that_document(db_url, embed_server, corpus):
    target = corpus / "en/ops/incident-response.md"
    with make_rag(db_url, embed_server) as rag:
        rag.ingest(corpus)
        target.write_text(target.read_text() + "\n## Page the database team\n\nCall the DBA on call.\n")
        report = rag.ingest(corpus)
        hits = rag.search("DBA on call", k=1, mode="keyword")
    assert report.documents_indexed == 1 and report.changed == ["en/ops/incident-response.md"]
    assert report.documents_skipped == 8
    assert hits[0].path == "en/ops/incident-response.md"
    assert hits[0].chunk.anchor == "page-the-database-team"
    assert violations(db_url) == []


def test_poison_document_fails_alone_and_keeps_its_stored_version(db_url, embed_server, corpus):
    target = corpus / "fr/cuisine/tarte-tatin.md"
    with make_rag(db_url, embed_server) as rag:
        rag.ingest(corpus)
        stored = [r for r in dump(db_url) if r["path"] == "fr/cuisine/tarte-tatin.md"]
        target.write_text(target.read_text() + "\nPOISON paragraph.\n")
        (corpus / "en/ops/new.md").write_text("# New page\n\nA brand new runbook page.\n")
        embed_server.poison = "POISON"
        report = rag.ingest(corpus)
    assert [f.path for f in report.failures] == ["fr/cuisine/tarte-tatin.md"]
    assert "poison text" in report.failures[0].error
    assert report.failures[0].kind == "invalid_input"
    assert "en/ops/new.md" in report.added and report.documents_indexed == 1
    assert [r for r in dump(db_url) if r["path"] == "fr/cuisine/tarte-tatin.md"] == stored
    assert violations(db_url) == []


@pytest.mark.parametrize("fault", ["500", "503"])
def test_down_service_aborts_and_leaves_the_index_intact(db_url, embed_server, corpus, fault):
    with make_rag(db_url, embed_server) as rag:
        rag.ingest(corpus)
        before = dump(db_url)
        for f in corpus.rglob("*.md"):
            f.write_text(f.read_text() + "\nUne ligne de plus.\n")
        embed_server.fault = fault
        with pytest.raises(EmbeddingError) as info:
            rag.ingest(corpus)
    assert info.value.kind == "unavailable"
    assert dump(db_url) == before
    assert violations(db_url) == []
    with psycopg.connect(db_url) as conn:
        status = conn.execute("SELECT status FROM ragpg.ingest_run ORDER BY id DESC LIMIT 1").fetchone()
    assert status == ("failed",)


@pytest.mark.parametrize("fault", ["wrong_dim", "nan", "wrong_count", "non_json"])
def test_malformed_responses_are_caught_before_any_write(db_url, embed_server, corpus, fault):
    with make_rag(db_url, embed_server) as rag:
        rag.ingest(corpus)
        before = dump(db_url)
        target = corpus / "fr/admin/sauvegardes.md"
        target.write_text(target.read_text() + "\nNouvelle section.\n")
        embed_server.fault = fault
        report = rag.ingest(corpus)
    assert [f.path for f in report.failures] == ["fr/admin/sauvegardes.md"]
    assert report.failures[0].kind == "malformed"
    assert dump(db_url) == before


def test_prune_removes_deleted_and_newly_excluded_documents(db_url, embed_server, corpus):
    with make_rag(db_url, embed_server) as rag:
        rag.ingest(corpus)
        (corpus / "en/ops/incident-response.md").unlink()
        shutil.move(str(corpus / "fr/cuisine"), str(corpus / "fr/legacy/cuisine"))
        kept = rag.ingest(corpus)
        assert kept.documents_deleted == 0 and counts(db_url)[0] == 9
        dry = rag.ingest(corpus, prune=True, dry_run=True)
        assert sorted(dry.deleted) == ["en/ops/incident-response.md", "fr/cuisine/pot-au-feu.md",
                                       "fr/cuisine/tarte-tatin.md"]
        assert counts(db_url)[0] == 9
        report = rag.ingest(corpus, prune=True)
    assert report.documents_deleted == 3
    assert counts(db_url)[0] == 6
    assert violations(db_url) == []


def test_dry_run_reports_work_and_writes_nothing(db_url, embed_server, corpus):
    with make_rag(db_url, embed_server) as rag:
        report = rag.ingest(corpus, dry_run=True)
    assert report.documents_indexed == 9 and len(report.added) == 9
    assert report.tokens_embedded > 0
    assert embed_server.calls == 0
    assert counts(db_url) == (0, 0, 0)


def test_full_reprocesses_everything(db_url, embed_server, corpus):
    with make_rag(db_url, embed_server) as rag:
        first = rag.ingest(corpus)
        before = dump(db_url)
        report = rag.ingest(corpus, full=True)
    assert report.documents_indexed == 9 and report.chunks_upserted == first.chunks_upserted
    assert dump(db_url) == before


def test_chunk_settings_change_reindexes(db_url, embed_server, corpus):
    with make_rag(db_url, embed_server) as rag:
        rag.ingest(corpus)
    with make_rag(db_url, embed_server, **{"chunk.size": 40, "chunk.overlap": 5}) as rag:
        report = rag.ingest(corpus)
    assert report.documents_indexed == 9
    assert violations(db_url) == []


def test_a_different_model_is_refused(db_url, embed_server, corpus):
    with make_rag(db_url, embed_server) as rag:
        rag.ingest(corpus)
    from rag_pg.testing.embedserver import FakeEmbeddingServer

    with FakeEmbeddingServer(dim=32, model="other-32") as other, make_rag(db_url, other) as rag:
        # nothing changed: decided from the stored hashes, nothing embedded; the service is
        # asked its model once, after the run, to say that the collection's model differs
        report = rag.ingest(corpus)
        assert report.documents_indexed == 0 and any("reembed" in w for w in report.warnings)
        assert (other.calls, other.health_calls) == (0, 1)
        changed = sorted(corpus.rglob("*.md"))[0]
        changed.write_text(changed.read_text(encoding="utf-8") + "\nUne ligne.\n", encoding="utf-8")
        with pytest.raises(DimensionMismatch, match="reembed"):
            rag.ingest(corpus)
        assert other.calls == 0  # refused before anything was embedded


def test_embed_false_documents_are_keyword_only(db_url, embed_server, corpus):
    (corpus / "en/ops/notes.md").write_text("---\nembed: false\n---\n# Notes\n\nZanzibar keyword only.\n")
    with make_rag(db_url, embed_server) as rag:
        rag.ingest(corpus)
        hits = rag.search("Zanzibar", k=1, mode="keyword")
    assert hits[0].path == "en/ops/notes.md"
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT count(v.chunk_id) FROM ragpg.document d JOIN ragpg.chunk c ON c.document_id = d.id"
            " LEFT JOIN ragpg.chunk_vector v ON v.chunk_id = c.id WHERE d.path = 'en/ops/notes.md'"
        ).fetchone()
    assert row == (0,)


def test_keyword_only_provider_indexes_without_vectors(db_url, corpus):
    settings = Settings.load(environ={}, overrides={"embedding.provider": "none"})
    with RagPG(db_url, settings) as rag:
        report = rag.ingest(corpus)
        hits = rag.search("pot-au-feu bouillon")
    assert report.documents_indexed == 9 and report.embedding_calls == 0
    assert hits and hits[0].path == "fr/cuisine/pot-au-feu.md"
    assert set(hits[0].ranks) == {"keyword"}
    assert counts(db_url)[2] == 0


def test_ingest_inside_a_caller_transaction_rolls_back_cleanly(db_url, embed_server, corpus):
    settings = Settings.load(environ={}, overrides={"embedding.url": embed_server.url})
    with psycopg.connect(db_url) as conn:
        with conn.transaction(), RagPG(conn, settings) as rag:
            report = rag.ingest(corpus)
            assert report.documents_indexed == 9
            assert conn.execute("SELECT count(*) FROM ragpg.document").fetchone() == (9,)
            raise psycopg.Rollback()
        assert conn.execute("SELECT count(*) FROM ragpg.document").fetchone() == (0,)
        # This database's locks only: the server may be shared with other test runs.
        locks = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone()
    assert locks == (0,)
    assert counts(db_url) == (0, 0, 0)


def test_sqlalchemy_engine_is_accepted(db_url, embed_server, corpus):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(db_url)
    url = sqlalchemy.engine.URL.create(
        "postgresql+psycopg", username=params.get("user"), password=params.get("password"),
        port=int(params["port"]) if params.get("port") else None, database=params.get("dbname"),
        query={"host": params["host"]} if params.get("host") else {},
    )
    engine = sqlalchemy.create_engine(url)
    settings = Settings.load(environ={}, overrides={"embedding.url": embed_server.url})
    try:
        with RagPG(engine, settings) as rag:
            report = rag.ingest(corpus)
            hits = rag.search("tarte aux pommes caramel", k=2)
    finally:
        engine.dispose()
    assert report.documents_indexed == 9
    assert hits[0].path == "fr/cuisine/tarte-tatin.md"


def test_report_json_has_the_contract_fields(db_url, embed_server, corpus):
    with make_rag(db_url, embed_server) as rag:
        data = rag.ingest(corpus).to_dict()
    for key in ("source_root", "documents_seen", "documents_indexed", "documents_skipped",
                "chunks_upserted", "chunks_unchanged", "duration_seconds"):
        assert key in data
    json.dumps(data)
    assert Path(data["source_root"]) == corpus.resolve()


def test_the_vector_index_is_built_after_the_first_bulk_load(db_url, embed_server, corpus):
    from rag_pg.store.vector_index import vector_index_name

    name = vector_index_name("fake-bow-64")
    with make_rag(db_url, embed_server) as rag:
        rag.ingest(corpus, dry_run=True)
        with psycopg.connect(db_url) as conn:
            assert conn.execute("SELECT to_regclass(%s)", (f"ragpg.{name}",)).fetchone() == (None,)
        rag.ingest(corpus)
    with psycopg.connect(db_url) as conn:
        row = value(conn, "SELECT indexdef FROM pg_indexes WHERE indexname = %s", (name,))
        assert row is not None and "hnsw" in row and "vector(64)" in row
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(values(conn,
            "EXPLAIN SELECT chunk_id FROM ragpg.chunk_vector WHERE model = 'fake-bow-64'"
            " ORDER BY embedding::vector(64) <=> (SELECT embedding FROM ragpg.chunk_vector LIMIT 1)::vector(64)"
            " LIMIT 5"))
    assert name in plan


# -- the pipeline fingerprint and the Markdown pipeline's settings ------------------------------


def test_a_new_parser_version_reindexes_and_the_same_one_skips(db_url, embed_server, corpus, monkeypatch):
    import rag_pg.source.markdown

    with make_rag(db_url, embed_server) as rag:
        first = rag.ingest(corpus)
        same = rag.ingest(corpus)
        monkeypatch.setattr(rag_pg.source.markdown, "PARSER_VERSION", "markdown-it/next")
        upgraded = rag.ingest(corpus)
        settled = rag.ingest(corpus)
    assert (same.documents_skipped, same.documents_indexed) == (first.documents_indexed, 0)
    assert (upgraded.documents_indexed, upgraded.documents_skipped) == (first.documents_indexed, 0)
    assert (settled.documents_skipped, settled.documents_indexed) == (first.documents_indexed, 0)
    with psycopg.connect(db_url) as conn:
        prints = set(values(conn, "SELECT fingerprint FROM ragpg.document"))
    assert prints and all(";parser=markdown-it/next;" in p for p in prints)


def test_anchor_style_and_cap_reach_the_chunks_and_the_fingerprint(db_url, embed_server, tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    long_list = "\n".join(f"- élément numéro {n} de la liste" for n in range(200))
    (root / "page.md").write_text(f"# Page\n\n## Déjà vu\n\n{long_list}\n", encoding="utf-8")
    with make_rag(db_url, embed_server, **{"chunk.max_tokens": 400}) as rag:
        rag.ingest(root)
        (root / "mkdocs.yml").write_text("site_name: x\n", encoding="utf-8")
        github = rag.ingest(root)  # the setting is github: mkdocs.yml changes nothing
    with make_rag(db_url, embed_server, **{"chunk.max_tokens": 400, "source.anchor_style": "auto"}) as rag:
        auto = rag.ingest(root)
    assert github.documents_skipped == 1 and auto.changed == ["page.md"]
    with psycopg.connect(db_url) as conn:
        anchors = set(values(conn, "SELECT anchor FROM ragpg.chunk"))
        tokens = max(values(conn, "SELECT token_count FROM ragpg.chunk"))
        (fp,) = conn.execute("SELECT fingerprint FROM ragpg.document").fetchone() or ("",)
    assert "deja-vu" in anchors and "déjà-vu" not in anchors  # Python-Markdown's slug
    assert tokens <= 400
    assert ";max=400;anchors=mkdocs;" in fp


def test_hard_links_are_read_only_when_allowed(db_url, embed_server, tmp_path):
    import os

    root = tmp_path / "tree"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nUn texte lié.\n", encoding="utf-8")
    os.link(root / "a.md", tmp_path / "outside.md")
    with make_rag(db_url, embed_server) as rag:
        refused = rag.ingest(root)
    with make_rag(db_url, embed_server, **{"source.read_hardlinks": True}) as rag:
        allowed = rag.ingest(root)
    assert refused.files_skipped == {"hardlink": 1} and refused.documents_indexed == 0
    assert allowed.added == ["a.md"]


def test_non_documents_are_all_counted_but_listed_up_to_a_limit(db_url, embed_server, tmp_path, monkeypatch):
    from rag_pg.ingest import run as ingest

    monkeypatch.setattr(ingest, "LISTED_NON_DOCUMENTS", 5)
    root = tmp_path / "tree"
    root.mkdir()
    for n in range(8):
        (root / f"image{n}.png").write_bytes(b"\x89PNG")
    (root / "SCRATCH.md").write_text("# x\n\ny\n", encoding="utf-8")
    (root / "a.md").write_text("# A\n\nTexte.\n", encoding="utf-8")
    with make_rag(db_url, embed_server, **{"source.formats": ["md"]}) as rag:
        report = rag.ingest(root)
    assert report.files_skipped == {"not_markdown": 8, "hard_excluded": 1}
    assert [s.reason for s in report.skipped].count("not_markdown") == 5
    assert ("SCRATCH.md", "hard_excluded") in [(s.path, s.reason) for s in report.skipped]


def test_a_service_that_answers_every_batch_malformed_stops_the_run(db_url, embed_server, corpus,
                                                                    tmp_path):
    """N7: when a group fails, then each of its documents alone, all with malformed answers,
    the service is at fault: the run stops (exit 3, one line) instead of failing every
    document one by one, nothing is written, and every call made is counted."""
    env = {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": embed_server.url,
           "RAGPG_EMBEDDING_ATTEMPTS": "1"}
    embed_server.fault = "wrong_count"
    out = run_cli(["ingest", str(corpus)], env=env, cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    [line] = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert "answers malformed" in line and "Traceback" not in out.stderr
    with psycopg.connect(db_url) as conn:
        documents = conn.execute("SELECT count(*) FROM ragpg.document").fetchone()
        run = conn.execute("SELECT status, embedding_calls FROM ragpg.ingest_run"
                           " ORDER BY id DESC LIMIT 1").fetchone()
    assert documents == (0,)
    assert run is not None and run[0] == "failed" and run[1] == embed_server.calls > 1
