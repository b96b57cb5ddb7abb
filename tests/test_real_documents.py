"""Real documentation pages, as their authors wrote them, through walk, parse and chunk.

The fixtures are pages of two sites (Astro's French docs in MDX, mkdocs-material's docs;
both MIT, licences beside them); the full trees are used too when asked for, with
``RAGPG_REAL_MD=../shared/data/real-md`` (opt-in: a checkout beside ``../shared`` runs the same
suite as one without). What a user of those sites expects: every page indexed, the site's anchors, plain
titles, component and admonition text without page scaffolding, and chunks within the cap.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from rag_pg.models import Chunk, SkippedFile
from rag_pg.source.chunk import Chunker, is_mdx
from rag_pg.source.markdown.outline import Heading, outline
from rag_pg.source.parse import parse_document
from rag_pg.source.walk import SourceFile, walk

from .markdown_checks import (
    DIRTY_TITLE,
    balanced,
    mid_line_fences,
    prose_lines,
    scaffolding_only,
)

TESTS = Path(__file__).resolve().parent
FIXTURES = TESTS / "fixtures" / "real-md"
SHARED = Path(os.environ["RAGPG_REAL_MD"]).resolve() if os.environ.get("RAGPG_REAL_MD") else None
SITES = {"astro-docs-fr": "github", "mkdocs-material-docs": "mkdocs"}
ROOTS = [FIXTURES] + ([SHARED] if SHARED is not None and SHARED.is_dir() else [])


def root_id(root: Path) -> str:
    return "shared" if root == SHARED else "fixtures"


def bench() -> ModuleType:
    """The benchmark's renderer harness (Python-Markdown with the site's extensions)."""
    path = TESTS.parent / "bench" / "real_documents.py"
    spec = importlib.util.spec_from_file_location("real_documents_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def site_chunks(root: Path, site: str) -> list[tuple[str, Chunk]]:
    chunker = Chunker(300, 45, slug_style=SITES[site])
    found = []
    for item in walk(root / site):
        if isinstance(item, SourceFile):
            document = parse_document(item.path, item.data, item.text)
            found.extend((item.path, chunk) for chunk in chunker.chunk(document))
    return found


@pytest.mark.parametrize("root", ROOTS, ids=root_id)
@pytest.mark.parametrize("site", sorted(SITES))
def test_every_page_is_indexed_and_every_other_entry_counted(root: Path, site: str) -> None:
    pages = {
        str(p.relative_to(root / site))
        for p in (root / site).rglob("*")
        if p.is_file() and p.suffix in (".md", ".mdx")
    }
    indexed = set()
    for item in walk(root / site):
        if isinstance(item, SourceFile):
            indexed.add(item.path)
        else:
            assert isinstance(item, SkippedFile) and item.reason == "not_markdown", item
    assert pages and indexed == pages


@pytest.mark.parametrize("root", ROOTS, ids=root_id)
@pytest.mark.parametrize("site", sorted(SITES))
def test_chunks_are_readable(root: Path, site: str) -> None:
    chunks = site_chunks(root, site)
    assert chunks
    for path, chunk in chunks:
        mdx = is_mdx(path)
        where = f"{path}#{chunk.anchor}"
        assert chunk.token_count <= 600, where  # the default cap, 2 × chunk.size
        assert balanced(chunk.content, mdx), where
        assert mid_line_fences(chunk.content) == 0, where
        assert not scaffolding_only(chunk.content, mdx), where
        assert not DIRTY_TITLE.search(chunk.section), where
        assert not DIRTY_TITLE.search(chunk.document_title), where
        if mdx:
            assert not any(
                line.startswith(("import ", "export ")) for line in prose_lines(chunk.content, mdx)
            ), where


@pytest.mark.parametrize("root", ROOTS, ids=root_id)
def test_mkdocs_anchors_are_the_rendered_pages_ids(root: Path) -> None:
    pytest.importorskip("markdown", reason="the Markdown test dependency renders the pages")
    pytest.importorskip("pymdownx", reason="pymdown-extensions renders the site's tabs")
    harness = bench()
    checked = 0
    for item in walk(root / "mkdocs-material-docs"):
        if not isinstance(item, SourceFile):
            continue
        document = parse_document(item.path, item.data, item.text)
        ids = harness.mkdocs_page_ids(document.content)
        for heading in outline(document.content, False, "mkdocs").items:
            if isinstance(heading, Heading):
                assert heading.anchor in ids, f"{item.path}: {heading.title}"
                checked += 1
    assert checked > 10


def test_mdx_page_keeps_component_text_and_drops_scaffolding() -> None:
    chunks = [c for p, c in site_chunks(FIXTURES, "astro-docs-fr") if p.endswith("1-setup/5.mdx")]
    text = "\n\n".join(c.content for c in chunks)
    assert "Ajouter votre dépôt GitHub comme nouvelle application Netlify" in text  # <PreCheck>
    assert "\nNous utiliserons...\n" in text  # the aside's title, as a short line
    assert "Add new project" in text and "<kbd>" not in text
    for scaffolding in ("import ", "<Steps>", "</Steps>", "<PreCheck>", "<Option", "<Box"):
        assert scaffolding not in text
    assert [c.anchor for c in chunks][:2] == ["", "créer-un-nouveau-site-netlify"]


def test_mkdocs_page_keeps_tab_and_admonition_titles() -> None:
    chunks = [
        c for p, c in site_chunks(FIXTURES, "mkdocs-material-docs") if p.endswith("content-tabs.md")
    ]
    lines = {line for c in chunks for line in prose_lines(c.content)}
    assert {"C", "C++"} <= lines  # ``=== "C"`` tabs, their titles as short lines
    assert not any(line.lstrip().startswith(("===", "!!!", "???")) for line in lines)
    anchors = {c.anchor for c in chunks}
    assert {"grouping-code-blocks", "grouping-other-content", "embedded-content"} <= anchors


def test_explicit_attribute_ids_of_a_real_page() -> None:
    path = FIXTURES / "mkdocs-material-docs" / "conventions.md"
    document = parse_document("conventions.md", path.read_bytes())
    headings = [h for h in outline(document.content, False, "mkdocs").items if isinstance(h, Heading)]
    by_title = {h.title: h.anchor for h in headings}
    assert by_title["– Default value"] == "default"  # ``{ #default data-toc-label=… }``
    assert by_title["– Version"] == "version"  # no id: the slug of the rendered text
    assert by_title["– Metadata property"] == "metadata"


def test_chunk_spans_name_the_files_lines() -> None:
    path = FIXTURES / "astro-docs-fr" / "guides" / "cms" / "spinal.mdx"
    lines = path.read_text(encoding="utf-8").split("\n")
    document = parse_document("guides/cms/spinal.mdx", path.read_bytes())
    for span in Chunker(300, 45).chunk_spans(document):
        first_words = span.chunk.content.split()[:2]
        source = "\n".join(lines[span.first_line - 1 : span.last_line])
        assert all(word.strip("*`[]()") in source for word in first_words), span
