"""Converters on real files: written in the test by real writers (fpdf2, python-docx,
python-pptx, openpyxl) or shipped from Debian's French documentation (tests/data/formats)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from rag_pg.errors import ConfigError
from rag_pg.source.chunk import Chunker
from rag_pg.source.convert import (
    DEFAULT_REGISTRY,
    ConversionPool,
    Converted,
    Registry,
    available_formats,
)
from rag_pg.source.convert.base import MarkdownBuilder, escape_line
from rag_pg.source.convert.pdf_text import PdfConverter
from rag_pg.source.convert.sheets import XlsxConverter
from rag_pg.source.convert.slides import PptxConverter
from rag_pg.source.convert.web import HtmlConverter
from rag_pg.source.convert.word import DocxConverter
from rag_pg.source.parse import parse_document

FORMATS = Path(__file__).parent / "data" / "formats"
ANSWER = "Le mot de passe du coffre est zephyr-42."


# -- writers -------------------------------------------------------------------------------


def build_pdf(pages: int, answer_page: int | None = None, *, password: str | None = None) -> bytes:
    """One distinct paragraph per page (running text differs, so nothing looks like a header)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title("Manuel d'exploitation")
    pdf.set_font("helvetica", size=11)
    for number in range(1, pages + 1):
        pdf.add_page()
        pdf.text(20, 10, f"Manuel d'exploitation - page {number}")  # a running header
        pdf.text(20, 20, f"Procedure {number * 7919 % 10007} du serveur.")
        pdf.text(20, 30, f"Total : {number + 40} jours de journaux.")  # like a header, not one
        if number == answer_page:
            pdf.text(20, 40, ANSWER)
    if password is not None:
        pdf.set_encryption(owner_password="owner-" + password, user_password=password)
    return bytes(pdf.output())


def build_docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Guide de restauration", level=0)
    document.add_paragraph("Ce guide explique comment restaurer une base.")
    document.add_heading("Restaurer une sauvegarde", level=1)
    document.add_paragraph("Lancez pg_restore avec l'option --clean.")
    document.add_heading("Vérifier les journaux", level=2)
    document.add_paragraph("Les journaux sont dans /var/log/postgresql.", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "Commande"
    table.cell(0, 1).text = "Durée"
    table.cell(1, 0).text = "pg_restore"
    table.cell(1, 1).text = "12 minutes"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def build_pptx() -> bytes:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    titles = ["Plan de reprise", "Budget 2026", "Questions"]
    for index, title in enumerate(titles):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        body = slide.placeholders[1].text_frame
        body.text = f"Point principal {index + 1}"
        detail = body.add_paragraph()
        detail.text = f"Détail {index + 1}"
        detail.level = 1
        if index == 1:
            shape = slide.shapes.add_table(2, 2, Inches(1), Inches(5), Inches(4), Inches(1))
            shape.table.cell(0, 0).text = "Poste"
            shape.table.cell(0, 1).text = "Montant"
            shape.table.cell(1, 0).text = "Stockage"
            shape.table.cell(1, 1).text = "4 200 €"
            slide.notes_slide.notes_text_frame.text = "Chiffres validés en comité."
        if index == 2:
            group = slide.shapes.add_group_shape()
            box = group.shapes.add_textbox(Inches(1), Inches(6), Inches(3), Inches(1))
            box.text_frame.text = "Contact : equipe-infra@example.org"
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def build_xlsx(rows: int = 3) -> bytes:
    import datetime as dt

    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    sheet.title = "Inventaire"
    sheet.append(["Référence", "Désignation", "Quantité", "Reçu le"])
    sheet.append(["ZX-9981", "Disque | 4 To", 12, dt.date(2026, 3, 1)])
    for index in range(rows):
        sheet.append([f"AB-{index:04d}", f"Câble {index}", index * 1.0, None])
    prices = book.create_sheet("Tarifs")
    prices.append(["Produit", "Prix"])
    prices.append(["Abonnement annuel", 1490.5])
    book.create_sheet("Vide")
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


HTML = """<!DOCTYPE html><html lang="fr"><head><meta charset="utf-8"><title>Installer ragpg</title>
<script>var tracking = "ne pas indexer";</script><style>h2 { color: red }</style></head>
<body><nav><a href="/">Accueil</a> | <a href="/docs">Docs</a></nav>
<main>
<h1 id="installer">Installer ragpg</h1>
<p>Avant de commencer, lisez <a href="https://example.org/pre">les prérequis</a> et <a href="local.html">la note</a>.</p>
<section id="prerequis"><h2>Prérequis</h2><p>PostgreSQL 16 et pgvector.</p></section>
<h2><a id="_docbook_style"></a>Configuration</h2><p>Éditez ragpg.toml.</p>
<h3 id="sphinx">Avec Sphinx<a class="headerlink" href="#sphinx">¶</a></h3><p>Texte sphinx.</p>
<h3>Sans identifiant</h3><p>Un paragraphe.</p><h3 id="sec.3.1">Détails</h3><p>Points.</p><img src="schema.png" alt="Schéma de l'architecture">
<pre><code># pas un titre
ragpg ingest docs/</code></pre>
<table><tr><th>Option</th><th>Défaut</th></tr><tr><td>chunk.size</td><td>512</td></tr></table>
</main>
<footer>Copyright pied de page</footer></body></html>""".encode()


def _line_of(markdown: str, needle: str) -> int:
    for number, line in enumerate(markdown.split("\n"), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in the converted text")


def _sections(path: str, converted: Converted) -> list[str]:
    document = parse_document(path, converted.markdown.encode(), converted.markdown)
    return [chunk.section for chunk in Chunker(200, 20).chunk(document)]


# -- PDF -------------------------------------------------------------------------------------


def test_pdf_answer_on_page_seven_is_located_on_page_seven():
    converted = PdfConverter().convert(build_pdf(10, answer_page=7), "manuel.pdf")
    line = _line_of(converted.markdown, "zephyr-42")
    assert converted.page_at(line) == 7
    region = converted.region_at(line)
    assert region is not None and region.kind == "page" and region.label == "7"
    assert "zephyr-42" in converted.markdown[region.start_char:region.end_char]
    assert [r.number for r in converted.regions] == list(range(1, 11))
    assert converted.title == "Manuel d'exploitation"
    assert converted.page_at(_line_of(converted.markdown, f"Procedure {3 * 7919 % 10007} ")) == 3
    assert converted.page_at(_line_of(converted.markdown, "Total : 43 jours")) == 3
    assert "page 3" not in converted.markdown  # the running header is dropped


def test_pdf_regions_tile_the_text_in_order():
    converted = PdfConverter().convert(build_pdf(5), "m.pdf")
    lines = converted.markdown.split("\n")
    previous_end = 0
    for region in converted.regions:
        assert region.start_line > previous_end
        assert lines[region.start_line - 1] == f"## Page {region.number} {{#page={region.number}}}"
        assert lines[region.start_line + 1].startswith(f"Procedure {region.number * 7919 % 10007} ")
        assert converted.markdown[region.start_char:].startswith(lines[region.start_line - 1])
        previous_end = region.end_line
    assert converted.region_at(previous_end + 1) is None


def test_pdf_without_text_layer_warns():
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_page()
    pdf.rect(10, 10, 50, 50)  # a drawing, no text: what a scan looks like to a text reader
    converted = PdfConverter().convert(bytes(pdf.output()), "scan.pdf")
    assert converted.markdown == ""
    assert converted.regions == ()
    assert any("OCR" in warning for warning in converted.warnings)


def test_real_french_pdf_excerpt():
    data = (FORMATS / "maint-guide-fr-extrait.pdf").read_bytes()
    converted = PdfConverter().convert(data, "maint-guide-fr-extrait.pdf")
    assert len(converted.regions) == 6
    assert converted.title == "Guide du nouveau responsable Debian (extrait)"
    assert converted.page_at(_line_of(converted.markdown, "Partir du bon pied")) == 1
    assert converted.page_at(_line_of(converted.markdown, "Premiers pas")) == 6
    assert converted.markdown.startswith("## Page 1 {#page=1}\n\nChapitre 1\n")
    assert "réécriture" in converted.markdown and "responsable" in converted.markdown
    # The running header "Guide du nouveau responsable Debian N / 58" is not body text.
    assert "/ 58" not in converted.markdown
    assert "\x02" not in converted.markdown  # PDFium's soft hyphens are joined


# -- DOCX ------------------------------------------------------------------------------------


def test_docx_headings_become_markdown_headings_and_sections():
    converted = DocxConverter().convert(build_docx(), "guide.docx")
    lines = converted.markdown.split("\n")
    assert "# Guide de restauration" in lines
    assert "# Restaurer une sauvegarde" in lines
    assert "## Vérifier les journaux" in lines
    assert "| pg_restore | 12 minutes |" in lines
    assert "- Les journaux sont dans /var/log/postgresql." in lines
    assert "pg_restore avec l'option --clean" in converted.markdown  # no escaping of _ or -
    sections = _sections("guide.docx", converted)
    assert "Restaurer une sauvegarde" in sections and "Vérifier les journaux" in sections
    assert converted.title == "Guide de restauration"


# -- PPTX ------------------------------------------------------------------------------------


def test_pptx_one_section_per_slide():
    converted = PptxConverter().convert(build_pptx(), "plan.pptx")
    lines = converted.markdown.split("\n")
    assert "## Slide 1: Plan de reprise {#slide-1}" in lines
    assert "## Slide 2: Budget 2026 {#slide-2}" in lines
    assert "## Slide 3: Questions {#slide-3}" in lines
    assert "- Point principal 2" in lines and "  - Détail 2" in lines
    assert "| Stockage | 4 200 € |" in lines
    assert "Notes: Chiffres validés en comité." in lines
    assert "Contact : equipe-infra@example.org" in lines  # inside a group shape
    assert [(r.kind, r.number, r.label) for r in converted.regions] == [
        ("slide", 1, "Plan de reprise"), ("slide", 2, "Budget 2026"), ("slide", 3, "Questions")]
    assert converted.page_at(_line_of(converted.markdown, "Stockage")) == 2
    assert converted.title == "Plan de reprise"


# -- XLSX ------------------------------------------------------------------------------------


def test_xlsx_sheets_are_sections_with_tables():
    converted = XlsxConverter().convert(build_xlsx(), "stock.xlsx")
    lines = converted.markdown.split("\n")
    assert "## Inventaire" in lines and "## Tarifs" in lines
    assert "| Référence | Désignation | Quantité | Reçu le |" in lines
    assert "| ZX-9981 | Disque \\| 4 To | 12 | 2026-03-01 |" in lines
    assert "| Abonnement annuel | 1490.5 |" in lines
    assert [(r.kind, r.label) for r in converted.regions] == [("sheet", "Inventaire"), ("sheet", "Tarifs")]
    region = converted.region_at(_line_of(converted.markdown, "ZX-9981"))
    assert region is not None and region.label == "Inventaire"
    assert converted.page_at(region.start_line) is None  # a sheet is not a page
    assert "Tarifs" in _sections("stock.xlsx", converted)


def test_xlsx_long_sheet_repeats_its_header_per_table():
    converted = XlsxConverter().convert(build_xlsx(rows=100), "long.xlsx")
    header = "| Référence | Désignation | Quantité | Reçu le |"
    assert converted.markdown.count(header) == 3  # 101 data rows in tables of 40
    assert "| AB-0099 | Câble 99 | 99 |  |" in converted.markdown.split("\n")


# -- HTML ------------------------------------------------------------------------------------


def test_html_keeps_heading_ids_as_anchors_and_drops_chrome():
    converted = HtmlConverter().convert(HTML, "install.html")
    lines = converted.markdown.split("\n")
    assert "# Installer ragpg {#installer}" in lines
    assert "## Prérequis {#prerequis}" in lines  # the id of the section the heading opens
    assert "## Configuration {#_docbook_style}" in lines  # an <a id> inside the heading
    assert "### Avec Sphinx {#sphinx}" in lines  # the permalink mark is gone
    assert "### Sans identifiant" in lines
    assert '### <a id="sec.3.1"></a>Détails' in lines  # {#sec.3.1} would read as id "sec"
    assert "[les prérequis](https://example.org/pre)" in converted.markdown
    assert "la note" in converted.markdown and "local.html" not in converted.markdown
    assert "Schéma de l'architecture" in converted.markdown and "schema.png" not in converted.markdown
    assert "# pas un titre" in lines and "```" in converted.markdown
    assert "| chunk.size | 512 |" in lines
    for chrome in ("Accueil", "tracking", "color: red", "pied de page"):
        assert chrome not in converted.markdown
    assert converted.title == "Installer ragpg"


def test_real_french_html_page():
    data = (FORMATS / "maint-guide-checkit.fr.html").read_bytes()
    converted = HtmlConverter().convert(data, "checkit.fr.html")
    lines = converted.markdown.split("\n")
    assert "# Chapitre 7. Contrôle des erreurs du paquet {#checkit}" in lines
    assert "## 7.2. Vérification de l'installation d'un paquet {#pinstall}" in lines
    assert "lintian" in converted.markdown
    assert "Précédent" not in converted.markdown  # the DocBook navigation bar
    assert converted.title == "Chapitre 7. Contrôle des erreurs du paquet"


# -- the pieces ------------------------------------------------------------------------------


def test_plain_text_that_looks_like_markdown_stays_text():
    assert escape_line("# 1 not a heading") == "\\# 1 not a heading"
    assert escape_line("1. first") == "1\\. first"
    assert escape_line("- item") == "\\- item"
    assert escape_line("---") == "\\---"
    assert escape_line("plain # text") == "plain # text"


def test_builder_records_regions_on_their_first_and_last_lines():
    builder = MarkdownBuilder()
    builder.add("intro")
    builder.begin("page", 1, "i")
    builder.add("one\ntwo")
    builder.begin("page", 2, "ii")  # no text on page 2: no region
    builder.begin("page", 3, "iii")
    builder.add("three")
    text = builder.markdown()
    assert text == "intro\n\none\ntwo\n\nthree\n"
    assert [(r.number, r.start_line, r.end_line) for r in builder.regions()] == [(1, 3, 4), (3, 6, 6)]
    first = builder.regions()[0]
    assert text[first.start_char:first.end_char] == "one\ntwo"


def test_converted_round_trips_through_its_dict():
    converted = PdfConverter().convert(build_pdf(3, answer_page=2), "r.pdf")
    again = Converted.from_dict(converted.to_dict())
    assert again == converted
    assert again.page_at(_line_of(again.markdown, "zephyr")) == 2


def test_registry_picks_by_extension_and_formats_resolve():
    assert available_formats() >= {".pdf", ".docx", ".pptx", ".xlsx", ".html", ".htm"}
    assert isinstance(DEFAULT_REGISTRY.for_name("docs/Rapport.PDF"), PdfConverter)
    assert DEFAULT_REGISTRY.for_name("notes.md") is None
    assert DEFAULT_REGISTRY.for_name(".pdf") is None  # a dot file, not a PDF
    default = DEFAULT_REGISTRY.resolve_formats(None)
    assert {".md", ".markdown", ".pdf", ".docx"} <= default
    assert DEFAULT_REGISTRY.resolve_formats(["md", ".PDF", "html"]) == {
        ".md", ".markdown", ".pdf", ".html", ".htm", ".xhtml"}
    with pytest.raises(ConfigError, match="no converter reads 'odt'"):
        DEFAULT_REGISTRY.resolve_formats(["odt"])
    with pytest.raises(ConfigError, match="expected a list"):
        DEFAULT_REGISTRY.resolve_formats("pdf")  # type: ignore[arg-type]


class _Missing(PdfConverter):
    modules = ("rag_pg_no_such_library",)


def test_a_format_whose_library_is_missing_is_not_available():
    registry = Registry([_Missing()])
    assert registry.available_formats() == frozenset()
    assert registry.for_name("a.pdf") is None
    assert registry.resolve_formats(None) == {".md", ".markdown"}
    with pytest.raises(ConfigError, match=r"ragpg\[documents\]"):
        registry.resolve_formats(["pdf"])


def test_version_names_the_converter_and_its_library():
    version = PdfConverter().version
    assert version.startswith("pdf-pdfium/1;pypdfium2==")
    assert DEFAULT_REGISTRY.fingerprint("a.pdf") == version
    assert DEFAULT_REGISTRY.fingerprint("a.md") is None


def test_every_format_through_the_worker_pool():
    samples = {
        "m.pdf": build_pdf(8, answer_page=7), "g.docx": build_docx(), "p.pptx": build_pptx(),
        "s.xlsx": build_xlsx(), "i.html": HTML,
    }
    with ConversionPool() as pool:
        converted = {name: pool.convert(data, name) for name, data in samples.items()}
        pid = pool.worker_pid
    assert pid is not None and not Path(f"/proc/{pid}").exists()  # closed and reaped
    assert converted["m.pdf"].page_at(_line_of(converted["m.pdf"].markdown, "zephyr")) == 7
    assert converted["m.pdf"].converter == "pdf-pdfium"
    assert "# Restaurer une sauvegarde" in converted["g.docx"].markdown
    assert "{#slide-2}" in converted["p.pptx"].markdown
    assert "ZX-9981" in converted["s.xlsx"].markdown
    assert "{#prerequis}" in converted["i.html"].markdown
    for name, result in converted.items():  # the worker's result is the in-process one
        converter = DEFAULT_REGISTRY.for_name(name)
        assert converter is not None and result == converter.convert(samples[name], name)


# -- through the parser and the chunker, as ingest will call them -----------------------------


def _spans(path: str, data: bytes, converted: Converted):
    document = parse_document(path, data, converted.markdown)
    return document, Chunker(120, 10).chunk_spans(document)


def test_pdf_chunk_first_lines_map_to_their_pages():
    data = build_pdf(10, answer_page=7)
    converted = PdfConverter().convert(data, "manuel.pdf")
    document, spans = _spans("manuel.pdf", data, converted)
    assert document.content_hash == __import__("hashlib").sha256(data).hexdigest()  # raw bytes
    answer = [span for span in spans if "zephyr-42" in span.chunk.content]
    assert len(answer) == 1
    assert converted.page_at(answer[0].first_line) == 7
    assert (answer[0].chunk.section, answer[0].chunk.anchor) == ("Page 7", "page=7")
    pages = [converted.page_at(span.first_line) for span in spans]
    assert pages == list(range(1, 11))  # one section per page: no chunk spans two


def test_html_and_slide_anchors_survive_the_parser():
    html = HtmlConverter().convert(HTML, "install.html")
    _, spans = _spans("install.html", HTML, html)
    anchors = {span.chunk.section: span.chunk.anchor for span in spans}
    assert anchors["Prérequis"] == "prerequis"
    assert anchors["Configuration"] == "_docbook_style"
    assert anchors["Détails"] == "sec.3.1"
    data = build_pptx()
    deck = PptxConverter().convert(data, "plan.pptx")
    _, spans = _spans("plan.pptx", data, deck)
    by_anchor = {span.chunk.anchor: span for span in spans}
    assert by_anchor["slide-2"].chunk.section == "Slide 2: Budget 2026"
    assert deck.page_at(by_anchor["slide-2"].first_line) == 2


def test_pipeline_glue_kind_document_and_fingerprint():
    from rag_pg.source.convert import fingerprint_part, source_kind, to_document

    formats = DEFAULT_REGISTRY.resolve_formats(["md", "pdf"])
    assert source_kind("a/b.md", formats) == "markdown"
    assert source_kind("a/Manuel.PDF", formats) == "convert"
    assert source_kind("a/b.docx", formats) is None  # counted as unsupported_format
    assert source_kind("Makefile", formats) is None
    data = build_pdf(10, answer_page=7)
    converted = PdfConverter().convert(data, "m.pdf")
    document = to_document("docs/m.pdf", data, converted)
    assert document.title == "Manuel d'exploitation"  # the PDF's metadata, not the file name
    assert document.content_hash == __import__("hashlib").sha256(data).hexdigest()
    assert fingerprint_part("m.pdf") == ";convert=" + PdfConverter().version
    assert fingerprint_part("m.md") == ""
    scan = bytes(__import__("fpdf").FPDF().output())  # no page, no text
    empty = PdfConverter().convert(scan, "vide.pdf")
    assert to_document("vide.pdf", scan, empty).title == "vide"


def test_importing_the_converters_loads_no_library():
    import subprocess
    import sys

    code = ("import sys, rag_pg.source.convert; heavy = ['pypdfium2', 'mammoth', 'pptx', 'openpyxl', "
            "'bs4', 'markdownify', 'lxml']; print([m for m in heavy if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# -- searchable as Markdown ------------------------------------------------------------------


def test_converted_text_is_found_by_keyword_search(db_url, embed_server, tmp_path):
    """The converted Markdown, ingested as Markdown files, is found by keyword with the
    section and anchor a reader follows: a cell by its sheet, the page-7 answer by its page,
    a Word paragraph by its heading."""
    from rag_pg import RagPG, Settings

    tree = tmp_path / "tree"
    tree.mkdir()
    for name, data, converter in [("stock.xlsx", build_xlsx(), XlsxConverter()),
                                  ("manuel.pdf", build_pdf(10, answer_page=7), PdfConverter()),
                                  ("guide.docx", build_docx(), DocxConverter())]:
        (tree / (name + ".md")).write_text(converter.convert(data, name).markdown, encoding="utf-8")
    settings = Settings.load(environ={}, overrides={"embedding.url": embed_server.url})
    with RagPG(db_url, settings) as rag:
        rag.init()
        rag.ingest(tree)
        cell = rag.search("ZX-9981", 1, mode="keyword")[0].chunk
        page = rag.search("mot de passe du coffre", 1, mode="keyword")[0].chunk
        word = rag.search("pg_restore clean", 1, mode="keyword")[0].chunk
    assert (cell.document_path, cell.section) == ("stock.xlsx.md", "Inventaire")
    assert (page.document_path, page.section, page.anchor) == ("manuel.pdf.md", "Page 7", "page=7")
    assert (word.document_path, word.section) == ("guide.docx.md", "Restaurer une sauvegarde")
