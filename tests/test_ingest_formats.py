"""PDF, Word and Excel files ingested like Markdown: real files written by real writers, a
real Postgres, a loopback embedding server, conversions in the real worker process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.errors import ConfigError

from .conftest import run_cli
from .invariants import violations
from .test_convert import ANSWER, build_docx, build_pdf, build_xlsx

pytest.importorskip("pypdfium2")
pytest.importorskip("mammoth")
pytest.importorskip("openpyxl")

TEMPLATE = "https://docs.example.org/{path}?p={page}#{anchor}"


def make_rag(db_url: str, server: Any, **overrides: Any) -> RagPG:
    settings = Settings.load(environ={}, overrides={"embedding.url": server.url, **overrides})
    return RagPG(db_url, settings)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "manuel.pdf").write_bytes(build_pdf(10, answer_page=7))
    (root / "guide.docx").write_bytes(build_docx())
    (root / "stock.xlsx").write_bytes(build_xlsx())
    (root / "notes.md").write_text("# Notes\n\nLe serveur redémarre le dimanche.\n", encoding="utf-8")
    (root / "LICENSE.txt").write_text("no document\n", encoding="utf-8")
    return root


def stored(db_url: str) -> dict[str, int]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT path, chunk_count FROM ragpg.document ORDER BY path").fetchall()
    return {str(path): int(count) for path, count in rows}


def test_documents_are_ingested_and_cited_with_their_page(db_url, embed_server, tree):
    with make_rag(db_url, embed_server, **{"citation.url": TEMPLATE}) as rag:
        report = rag.ingest(tree)
        assert (report.documents_indexed, report.documents_converted, report.failures) == (4, 3, [])
        assert report.files_skipped == {"not_markdown": 1}
        page = rag.search("mot de passe du coffre zephyr", 1, mode="keyword")[0]
        cell = rag.search("ZX-9981", 1, mode="keyword")[0]
        word = rag.search("pg_restore clean", 1, mode="keyword")[0]
        hybrid = rag.search(ANSWER, 3)
    assert (page.path, page.chunk.section, page.chunk.anchor) == ("manuel.pdf", "Page 7", "page=7")
    assert page.url == "https://docs.example.org/manuel.pdf?p=7#page=7"
    assert page.to_dict()["url"] == page.url and (page.page, page.to_dict()["page"]) == (7, 7)
    assert (cell.path, cell.chunk.section) == ("stock.xlsx", "Inventaire")
    assert cell.url is not None and "?p=#" in cell.url  # no page: {page} is empty
    assert (word.path, word.chunk.section) == ("guide.docx", "Restaurer une sauvegarde")
    assert word.page is None and word.to_dict()["page"] is None
    assert "manuel.pdf" in [hit.path for hit in hybrid]
    assert set(stored(db_url)) == {"guide.docx", "manuel.pdf", "notes.md", "stock.xlsx"}
    assert violations(db_url) == []


def test_an_unchanged_document_is_not_converted_again(db_url, embed_server, tree):
    with make_rag(db_url, embed_server) as rag:
        first = rag.ingest(tree)
        again = rag.ingest(tree)
        (tree / "manuel.pdf").write_bytes(build_pdf(11, answer_page=7))
        changed = rag.ingest(tree)
    assert first.documents_converted == 3
    assert (again.documents_converted, again.documents_skipped, again.chunks_upserted) == (0, 4, 0)
    assert (changed.documents_converted, changed.changed) == (1, ["manuel.pdf"])


def test_a_converter_upgrade_reconverts_only_converted_files(db_url, embed_server, tree, monkeypatch):
    from rag_pg.source.convert.pdf_text import PdfConverter

    with make_rag(db_url, embed_server) as rag:
        rag.ingest(tree)
        monkeypatch.setattr(PdfConverter, "version", property(lambda self: "pdf-pdfium/test-upgrade"))
        report = rag.ingest(tree)
    assert (report.documents_converted, report.changed) == (1, ["manuel.pdf"])


def test_a_corrupt_document_fails_alone_and_keeps_its_stored_version(db_url, embed_server, tree):
    with make_rag(db_url, embed_server) as rag:
        rag.ingest(tree)
        before = stored(db_url)
        (tree / "guide.docx").write_bytes(b"PK\x03\x04 not really a zip archive" * 10)
        (tree / "other.md").write_text("# Autre\n\nUn texte de plus.\n", encoding="utf-8")
        report = rag.ingest(tree, prune=True)
    assert [(f.path, f.kind) for f in report.failures] == [("guide.docx", "corrupt")]
    assert report.failures[0].error.startswith("cannot convert: ")
    assert report.added == ["other.md"] and report.deleted == []
    assert stored(db_url) == {**before, "other.md": 1}  # the stored guide.docx stays
    assert violations(db_url) == []


def test_a_corrupt_document_makes_the_cli_exit_1(db_url, embed_server, tree, tmp_path):
    (tree / "guide.docx").write_bytes(b"\x00\x01 garbage")
    env = {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": embed_server.url}
    out = run_cli(["ingest", str(tree), "--json"], env=env, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    assert [f["path"] for f in report["failures"]] == ["guide.docx"]
    assert report["documents_indexed"] == 3
    assert "guide.docx" in out.stderr


def test_formats_narrow_what_is_read(db_url, embed_server, tree):
    with make_rag(db_url, embed_server, **{"source.formats": ["md"]}) as rag:
        report = rag.ingest(tree)
    assert report.documents_converted == 0
    assert report.files_skipped == {"unsupported_format": 3, "not_markdown": 1}
    assert sorted(s.path for s in report.skipped if s.reason == "unsupported_format") == [
        "guide.docx", "manuel.pdf", "stock.xlsx"]
    assert set(stored(db_url)) == {"notes.md"}


def test_an_unknown_format_stops_the_run_before_any_file_is_read(db_url, embed_server, tree):
    # The settings hold the list as written; the run resolves it against the converters.
    settings = Settings.load(environ={"RAGPG_SOURCE_FORMATS": "md, pdf"})
    assert settings.source.formats == ("md", "pdf")
    with make_rag(db_url, embed_server, **{"source.formats": ["md", "odt"]}) as rag:
        with pytest.raises(ConfigError, match="no converter reads 'odt'"):
            rag.ingest(tree)
    assert stored(db_url) == {}


def _docx(document_xml_edit: bytes | None = None) -> bytes:
    """An empty Word document; ``document_xml_edit`` is put after its XML declaration."""
    import io
    import zipfile

    from docx import Document as WordDocument

    buffer = io.BytesIO()
    WordDocument().save(buffer)
    if document_xml_edit is None:
        return buffer.getvalue()
    source, out = zipfile.ZipFile(io.BytesIO(buffer.getvalue())), io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "word/document.xml":
                data = data.replace(b"?>", b"?>" + document_xml_edit, 1)
            target.writestr(item, data)
    return out.getvalue()


def test_documents_with_no_text_are_skipped_and_a_dtd_is_refused_by_name(db_url, embed_server,
                                                                         tmp_path):
    """HTML without a body, a frameset, an empty DOCX convert (markdownify's own STRIP
    constant); those with no text are skipped as empty, not failed; a DOCX declaring a DTD is
    refused as such, never a 'corrupt ... ValueError'."""
    root = tmp_path / "tree"
    root.mkdir()
    (root / "head-only.html").write_text("<html><head><title>Titre seul</title></head></html>")
    (root / "frames.html").write_text('<html><frameset cols="50%,50%"><frame src="a.html">'
                                      "</frameset></html>")
    (root / "page.html").write_text("<p>Une page <b>sans</b> en-tête.</p>")
    (root / "empty.docx").write_bytes(_docx())
    (root / "entities.docx").write_bytes(_docx(b'<!DOCTYPE x [<!ENTITY a "aaaa">]>'))
    with make_rag(db_url, embed_server) as rag:
        report = rag.ingest(root)
    assert report.files_skipped.get("empty") == 2
    assert sorted(s.path for s in report.skipped if s.reason == "empty") == ["empty.docx", "frames.html"]
    [failure] = report.failures
    assert failure.path == "entities.docx" and failure.kind == "unsupported"
    assert "declares a DTD" in failure.error and "ValueError" not in failure.error
    assert set(stored(db_url)) == {"head-only.html", "page.html"}
