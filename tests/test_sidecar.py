"""JSONL sidecars: export beside the Markdown, import into a new database with no embedding service."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rag_pg import RagPG, Settings
from rag_pg.models import SkippedFile
from rag_pg.source.markdown import PARSER_VERSION
from rag_pg.source.walk import walk
from rag_pg.store.documents import Store
from rag_pg.testing.embedserver import FakeEmbeddingServer
from rag_pg.tree.sidecar import SUFFIX, float_text, parse_sidecar
from rag_pg.tree.sidecar_export import export_sidecars
from rag_pg.tree.sidecar_import import import_sidecars

from .conftest import drop_database, new_database, run_cli
from .invariants import dump, violations
from .rows import values

BOOK = Path(__file__).parent / "data" / "book"
W = "essai-phares"
P1 = f"{W}/partie-1-les-phares"
P2 = f"{W}/partie-2-la-navigation"
LUMIERE = f"{P1}/chapitre-01-la-lumiere/source.md"
CARTES = f"{P2}/chapitre-01-les-cartes/source.md"
DOCUMENTS = 13
QUERIES = [
    "lentille de Fresnel et anneaux de verre",
    "le gardien attend la relève par gros temps",
    "portulans et lignes de rhumb",
    "heure de la pleine mer dans les annuaires",
    "phares et navigation côtière",
]
DOCUMENT_COLUMNS = ("path, title, content_hash, front_matter, parent_path, level, node_type, embed,"
                    " language, fingerprint, chunk_count, token_count, source_root")


@pytest.fixture
def book(tmp_path: Path) -> Path:
    target = tmp_path / "book"
    shutil.copytree(BOOK, target)
    return target


@pytest.fixture
def second_db(pg_server_url: str, pg_template: str) -> Iterator[str]:
    """Another fresh, migrated database: the 'other machine' of a round trip."""
    url = new_database(pg_server_url, pg_template)
    try:
        yield url
    finally:
        drop_database(pg_server_url, url)


def settings_for(url: str | None = None, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"embedding.batch_size": 8, **overrides}
    if url is not None:
        values["embedding.url"] = url
    return Settings.load(environ={}, overrides=values)


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def ingest_and_export(db_url: str, server: FakeEmbeddingServer, book: Path) -> None:
    with RagPG(db_url, settings_for(server.url)) as rag:
        assert rag.ingest(book).failures == []
        assert export_sidecars(rag, book).failures == []


def sidecars(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob(f"*{SUFFIX}"))}


def table(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()  # type: ignore[arg-type]


def paths(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return values(conn, "SELECT path FROM ragpg.document ORDER BY path")


def documents(url: str) -> list[tuple[Any, ...]]:
    return table(url, f"SELECT {DOCUMENT_COLUMNS} FROM ragpg.document ORDER BY path")  # noqa: S608


def vectors(url: str) -> list[tuple[Any, ...]]:
    return table(url, "SELECT d.path, c.position, c.section, c.anchor, c.token_count, v.model,"
                      " v.embedding::text FROM ragpg.document d JOIN ragpg.chunk c ON c.document_id = d.id"
                      " LEFT JOIN ragpg.chunk_vector v ON v.chunk_id = c.id ORDER BY 1, 2")


def results(rag: RagPG, modes: tuple[str, ...]) -> list[Any]:
    return [
        [(h.path, h.chunk.position, h.chunk.anchor, round(h.score, 9)) for h in rag.search(q, 5, mode=m)]
        for q in QUERIES for m in modes
    ]


def test_export_import_round_trip_needs_no_embedding_service(db_url, second_db, embed_server, book):
    ingest_and_export(db_url, embed_server, book)
    exported = sidecars(book)
    assert len(exported) == DOCUMENTS
    calls, health = embed_server.calls, embed_server.health_calls
    stopped_url = embed_server.url
    embed_server.stop()
    with RagPG(second_db, settings_for(stopped_url)) as rag:  # any embedding call would fail
        report = import_sidecars(rag, book)
        assert report.failures == [] and report.embedding_calls == 0
        assert (report.documents_seen, report.documents_indexed) == (DOCUMENTS, DOCUMENTS)
        assert export_sidecars(rag, book).written == []  # the rebuilt index exports the same bytes
    assert (embed_server.calls, embed_server.health_calls) == (calls, health)
    assert sidecars(book) == exported
    assert documents(second_db) == documents(db_url)
    assert vectors(second_db) == vectors(db_url)
    assert dump(second_db) == dump(db_url)
    assert violations(second_db) == []
    with FakeEmbeddingServer(dim=64) as queries:  # same deterministic model, for query vectors
        with RagPG(db_url, settings_for(queries.url)) as a, RagPG(second_db, settings_for(queries.url)) as b:
            expected = results(a, ("hybrid", "vector", "keyword"))
            assert results(b, ("hybrid", "vector", "keyword")) == expected
    assert [hit[0] for hit in expected[0]][:1] == [LUMIERE]
    with RagPG(second_db, settings_for(**{"embedding.provider": "none"})) as b:  # no service at all
        assert results(b, ("keyword",)) == [r for i, r in enumerate(expected) if i % 3 == 2]


def test_two_exports_are_byte_identical(db_url, embed_server, book):
    ingest_and_export(db_url, embed_server, book)
    first = sidecars(book)
    for path in book.rglob(f"*{SUFFIX}"):
        path.unlink()
    with RagPG(db_url, settings_for(embed_server.url)) as rag:
        again = export_sidecars(rag, book)
        third = export_sidecars(rag, book)
    assert len(again.written) == DOCUMENTS and sidecars(book) == first
    assert third.written == [] and len(third.unchanged) == DOCUMENTS


def test_sidecar_layout_follows_the_seed(db_url, embed_server, book):
    ingest_and_export(db_url, embed_server, book)
    lines = (book / (LUMIERE + SUFFIX)).read_text(encoding="utf-8").splitlines()
    manifest = json.loads(lines[0])
    stored = table(db_url, f"SELECT chunk_count, content_hash FROM ragpg.document WHERE path = '{LUMIERE}'")[0]  # noqa: S608
    assert manifest == {
        "type": "manifest",
        "source_file": LUMIERE,
        "source_file_hash": "sha256:" + hashlib.sha256((book / LUMIERE).read_bytes()).hexdigest(),
        "parent_source_file": f"{P1}/chapitre-01-la-lumiere/summary.md",
        "heading_path": "Essai sur les phares et la navigation (résumé) > Première partie : les phares"
                        " (résumé) > Chapitre I : la lumière (résumé) > Chapitre I : la lumière",
        "level": 0,
        "node_type": "source",
        "embedding_model": "fake-bow-64",
        "dimension": 64,
        "chunk_count": stored[0],
        "title": "Chapitre I : la lumière",
        "language": "french",
        "chunk_size": 300,
        "chunk_overlap": 45,
        "chunk_max_tokens": "auto",
        "anchor_style": "github",
        "parser": PARSER_VERSION,
    }
    assert list(manifest) == list(manifest.keys())  # parsed in file order
    assert lines[0].startswith('{"type": "manifest", "source_file": ')
    assert manifest["source_file_hash"] == f"sha256:{stored[1]}"
    chunk = json.loads(lines[1])
    assert list(chunk) == ["chunk_index", "content_token_count", "section", "anchor", "text", "embedding"]
    assert chunk["chunk_index"] == 0 and chunk["anchor"] == "le-feu-des-anciens"
    assert len(chunk["embedding"]) == 64 and len(lines) == 1 + stored[0]
    keyword = [json.loads(x) for x in (book / (CARTES + SUFFIX)).read_text(encoding="utf-8").splitlines()]
    assert "embedding_model" not in keyword[0] and "dimension" not in keyword[0]
    assert all(list(c) == ["chunk_index", "content_token_count", "section", "anchor", "text"] for c in keyword[1:])
    root = json.loads((book / W / ("summary.md" + SUFFIX)).read_text(encoding="utf-8").splitlines()[0])
    assert root["parent_source_file"] is None and root["level"] == 3
    assert root["heading_path"] == "Essai sur les phares et la navigation (résumé)"


def test_import_refuses_a_sidecar_whose_markdown_changed(db_url, second_db, embed_server, book):
    ingest_and_export(db_url, embed_server, book)
    target = book / LUMIERE
    target.write_text(target.read_text(encoding="utf-8") + "\nUn paragraphe ajouté.\n", encoding="utf-8")
    with RagPG(second_db, settings_for(dead_url())) as rag:
        report = import_sidecars(rag, book)
    assert [(f.path, f.kind) for f in report.failures] == [(LUMIERE, "hash_mismatch")]
    assert "no longer matches its sidecar" in report.failures[0].error
    assert "run `ragpg ingest`, then `ragpg export`" in report.failures[0].error
    assert report.documents_indexed == DOCUMENTS - 1 and report.documents_failed == 1
    assert LUMIERE not in paths(second_db)


def test_import_refuses_vectors_of_another_model(db_url, second_db, embed_server, book):
    ingest_and_export(db_url, embed_server, book)
    with psycopg.connect(second_db, autocommit=True) as conn:
        Store("ragpg").bind_model(conn, "default", "another-model", 64)
    with RagPG(second_db, settings_for(dead_url())) as rag:
        report = import_sidecars(rag, book)
    kinds = {f.path: f.kind for f in report.failures}
    assert set(kinds.values()) == {"model_mismatch"} and len(kinds) == DOCUMENTS - 2
    assert "'fake-bow-64' (64 d) but collection is indexed with 'another-model'" in report.failures[0].error
    # the two keyword-only sources carry no vectors: nothing to mix, they are imported
    assert sorted(paths(second_db)) == sorted(
        [CARTES, f"{P2}/chapitre-02-les-marees/source.md"])
    assert violations(second_db) == []


def test_unchanged_sidecars_are_skipped_and_ingest_then_embeds_nothing(db_url, second_db, embed_server, book):
    ingest_and_export(db_url, embed_server, book)
    with RagPG(second_db, settings_for(dead_url())) as rag:
        import_sidecars(rag, book)
        xmins = table(second_db, "SELECT id, xmin::text FROM ragpg.chunk ORDER BY id")
        again = import_sidecars(rag, book)
    assert again.documents_skipped == DOCUMENTS and again.documents_indexed == 0
    assert again.chunks_unchanged == len(xmins)
    assert table(second_db, "SELECT id, xmin::text FROM ragpg.chunk ORDER BY id") == xmins
    calls = embed_server.calls
    with RagPG(second_db, settings_for(embed_server.url)) as rag:
        report = rag.ingest(book)
    assert report.documents_skipped == DOCUMENTS and embed_server.calls == calls
    runs = table(second_db, "SELECT mode, status, documents_indexed FROM ragpg.ingest_run ORDER BY id")
    assert runs == [("import", "completed", DOCUMENTS), ("import", "completed", 0),
                    ("incremental", "completed", 0)]


def test_the_walker_never_takes_a_sidecar_for_a_document(db_url, embed_server, book):
    ingest_and_export(db_url, embed_server, book)
    # The walker counts what it does not index (README.txt, the sidecars) as not_markdown.
    paths = [item.path for item in walk(book) if not isinstance(item, SkippedFile)]
    assert len(paths) == DOCUMENTS and not [p for p in paths if p.endswith(SUFFIX)]
    with RagPG(db_url, settings_for(embed_server.url)) as rag:
        report = rag.ingest(book, full=True)
    assert report.documents_seen == DOCUMENTS and set(report.files_skipped) <= {"not_markdown"}
    assert report.failures == []


def test_a_broken_sidecar_fails_alone_and_keeps_the_stored_version(db_url, second_db, embed_server, book):
    ingest_and_export(db_url, embed_server, book)
    with RagPG(second_db, settings_for(dead_url())) as rag:
        import_sidecars(rag, book)
        before = vectors(second_db)
        side = book / (LUMIERE + SUFFIX)
        lines = side.read_text(encoding="utf-8").splitlines(keepends=True)
        broken = json.loads(lines[1])
        broken["embedding"] = broken["embedding"][:10]
        side.write_text(lines[0] + json.dumps(broken) + "\n" + "".join(lines[2:]), encoding="utf-8")
        (book / "orphan.md.jsonl").write_text('{"type": "manifest"}\n', encoding="utf-8")
        (book / "nosidecar.md").write_text("# Sans sidecar\n\nUn texte.\n", encoding="utf-8")
        report = import_sidecars(rag, book)
    assert sorted((f.path, f.kind) for f in report.failures) == [
        (LUMIERE, "invalid_sidecar"), ("orphan.md", "orphan_sidecar")]
    assert "line 2: embedding must be a list of 64 numbers" in [
        f.error for f in report.failures if f.path == LUMIERE][0]
    assert {k: v for k, v in report.files_skipped.items() if k != "not_markdown"} == {"no_sidecar": 1}
    assert vectors(second_db) == before and violations(second_db) == []


def test_export_refuses_a_file_changed_since_indexing(db_url, embed_server, book):
    with RagPG(db_url, settings_for(embed_server.url)) as rag:
        rag.ingest(book)
        (book / CARTES).write_text("---\nembed: false\n---\n# Changé\n\nAutre texte.\n", encoding="utf-8")
        (book / W / "preface" / "source.md").unlink()
        report = export_sidecars(rag, book)
    assert sorted((f.path, f.kind) for f in report.failures) == [
        (CARTES, "stale"), (f"{W}/preface/source.md", "missing_markdown")]
    assert len(report.written) == DOCUMENTS - 2
    assert not (book / (CARTES + SUFFIX)).exists()


def test_export_of_a_root_that_was_not_indexed_is_a_config_error(db_url, embed_server, book, tmp_path):
    from rag_pg.errors import ConfigError

    ingest_and_export(db_url, embed_server, book)
    other = tmp_path / "other"
    other.mkdir()
    with RagPG(db_url, settings_for(embed_server.url)) as rag:
        with pytest.raises(ConfigError, match="no document of collection 'default' was indexed from"):
            export_sidecars(rag, other)
        with pytest.raises(ConfigError, match="nothing is indexed in collection 'empty'"):
            export_sidecars(rag, book, collection="empty")


def test_cli_export_then_import_into_a_new_database(db_url, second_db, embed_server, book, tmp_path):
    with RagPG(db_url, settings_for(embed_server.url)) as rag:
        rag.ingest(book)
    out = run_cli(["export", str(book), "--json"],
                  env={"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": embed_server.url}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["written"]) == DOCUMENTS
    env = {"RAGPG_DATABASE_URL": second_db, "RAGPG_EMBEDDING_URL": dead_url()}
    out = run_cli(["import", str(book), "--json"], env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["documents_indexed"] == DOCUMENTS and data["embedding_calls"] == 0
    (book / LUMIERE).write_text("# Réécrit\n\nTout autre chose.\n", encoding="utf-8")
    out = run_cli(["import", str(book)], env=env, cwd=tmp_path)
    assert out.returncode == 1
    assert "no longer matches its sidecar" in out.stdout and "Traceback" not in out.stderr
    assert documents(second_db) == documents(db_url)  # the refused file kept its imported version


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float_text_is_json_and_round_trips_float32(value: float) -> None:
    text = float_text(value)
    back = np.float32(json.loads(text))
    assert back == np.float32(value) and np.signbit(back) == np.signbit(np.float32(value))
    assert float_text(back) == text


def test_parse_sidecar_checks_the_shape():
    good = b'{"type": "manifest", "chunk_count": 1}\n{"chunk_index": 0, "content_token_count": 2, "text": "a b"}\n'
    assert parse_sidecar(good).vectors is None
    for data, message in [
        (b"", "empty sidecar"),
        (b'{"type": "chunk"}\n', "line 1 is not a manifest"),
        (b'{"type": "manifest", "chunk_count": 2}\n{"chunk_index": 0, "content_token_count": 2, "text": "a"}\n',
         "chunk_count 2 but 1 chunk lines"),
        (b'{"type": "manifest", "chunk_count": 1}\n{"chunk_index": 1, "content_token_count": 2, "text": "a"}\n',
         "chunk_index must be 0"),
        (b'{"type": "manifest", "chunk_count": 1, "embedding_model": "m", "dimension": 2}\n'
         b'{"chunk_index": 0, "content_token_count": 2, "text": "a", "embedding": [1, NaN]}\n',
         "non-finite"),
        (b'{"type": "manifest", "chunk_count": 1}\n{"chunk_index": 0, "content_token_count": 1, "text": "a",'
         b' "embedding": [1.0]}\n', "no embedding_model"),
        (b'{"type": "manifest"\n', "line 1 is not JSON"),
        # the checks an embedding service's vectors pass (N6): no direction, no float32
        (b'{"type": "manifest", "chunk_count": 1, "embedding_model": "m", "dimension": 2}\n'
         b'{"chunk_index": 0, "content_token_count": 2, "text": "a", "embedding": [0.0, 0]}\n',
         "all zeros"),
        (b'{"type": "manifest", "chunk_count": 1, "embedding_model": "m", "dimension": 2}\n'
         b'{"chunk_index": 0, "content_token_count": 2, "text": "a", "embedding": [1e39, 1]}\n',
         "NaN or infinite"),
    ]:
        with pytest.raises(Exception, match=message) as caught:
            parse_sidecar(data)
        assert getattr(caught.value, "kind", None) == "invalid_sidecar"


def test_every_error_of_the_tree_and_rerank_is_a_rag_error():
    from rag_pg.errors import LLMError, RagError, RerankError, SidecarError

    assert all(issubclass(cls, RagError) for cls in (LLMError, RerankError, SidecarError))


def test_an_import_records_the_chunking_that_made_the_sidecar(db_url, second_db, embed_server, book):
    """Sidecars exported with a token cap and mkdocs anchors: the imported documents carry that
    fingerprint, so an ingest with those settings skips them all and one with the defaults
    (other chunks, other anchors) re-chunks every one instead of keeping stale chunks."""
    shaped = {"chunk.max_tokens": 400, "source.anchor_style": "mkdocs"}
    with RagPG(db_url, settings_for(embed_server.url, **shaped)) as rag:
        assert rag.ingest(book).failures == []
        assert export_sidecars(rag, book).failures == []
    manifest = json.loads((book / (LUMIERE + SUFFIX)).read_text(encoding="utf-8").splitlines()[0])
    assert (manifest["chunk_max_tokens"], manifest["anchor_style"]) == (400, "mkdocs")
    with RagPG(second_db, settings_for(dead_url())) as rag:  # defaults; no embedding service
        imported = import_sidecars(rag, book)
        assert imported.failures == [] and imported.documents_indexed > 0
    with RagPG(second_db, settings_for(embed_server.url, **shaped)) as rag:
        same = rag.ingest(book)
    assert same.documents_indexed == 0 and same.documents_skipped == imported.documents_indexed
    with RagPG(second_db, settings_for(embed_server.url)) as rag:
        other = rag.ingest(book)
    assert other.documents_indexed == imported.documents_indexed  # nothing kept stale


@pytest.mark.parametrize("forge", ["text", "section", "anchor", "count"])
def test_a_sidecar_whose_chunks_are_not_the_files_is_refused(db_url, second_db, embed_server, book,
                                                              forge):
    """N2: the file is chunked again on import; a sidecar saying another text, section, anchor
    or number of chunks is refused in one line, and nothing of it is indexed or cited."""
    ingest_and_export(db_url, embed_server, book)
    side = book / (LUMIERE + SUFFIX)
    lines = side.read_text(encoding="utf-8").splitlines(keepends=True)
    first = json.loads(lines[1])
    if forge == "count":
        manifest = json.loads(lines[0])
        manifest["chunk_count"] -= 1
        lines = [json.dumps(manifest) + "\n", *lines[1:-1]]
    else:
        first[forge] = "Texte falsifié, cité comme le fichier"
        lines[1] = json.dumps(first) + "\n"
    side.write_text("".join(lines), encoding="utf-8")
    with RagPG(second_db, settings_for(dead_url())) as rag:
        report = import_sidecars(rag, book)
    failures = [(f.path, f.kind) for f in report.failures]
    assert failures == [(LUMIERE, "chunk_mismatch")], report.failures
    assert "\n" not in report.failures[0].error
    assert report.documents_indexed == DOCUMENTS - 1
    assert LUMIERE not in paths(second_db)
    assert table(second_db, "SELECT count(*) FROM ragpg.chunk WHERE content LIKE '%falsifié%'") == [(0,)]
