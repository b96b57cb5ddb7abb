"""PDF: the text layer of each page with PDFium (pypdfium2), one region per page.

PDFium reads the text in reading order and marks soft hyphens (``\\x02``), so words cut at
a line end come back whole. Lines are joined into paragraphs: a line clearly shorter than
the page's full lines ends one (a paragraph's last line, a title, a list item). A line
that starts or ends most pages, the same or but for its page number (a running header,
a page number), is dropped: it would otherwise be the most common text of every chunk.
Each page with text is a ``## Page N {#page=N}`` section (see ``page_heading``). Nothing
is rendered and no OCR is run: a scanned page has no text, no section and no region.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from rag_pg.source.convert.base import (
    Converted,
    LibraryConverter,
    MarkdownBuilder,
    clean_text,
    escape_line,
)

_SHORT_LINE = 0.6  # of a full line's length: shorter ends the paragraph
_EDGE_LINES = 2  # how many lines at a page's top and bottom may be running headers
_DIGITS = re.compile(r"\d+")
_RUNNING_MAX = 100  # characters: longer lines are body text, never running heads


def _lines(text: str) -> list[str]:
    return [" ".join(line.split()) for line in clean_text(text).split("\n")]


def paragraphs(lines: list[str]) -> list[str]:
    """Lines joined into paragraphs (see the module's note); blank lines always split."""
    lengths = sorted(len(line) for line in lines if line)
    full = lengths[int(len(lengths) * 0.8)] if lengths else 0
    out: list[str] = []
    current: list[str] = []
    for line in lines:
        if line:
            current.append(line)
        if current and (not line or len(line) < _SHORT_LINE * full):
            out.append(escape_line(" ".join(current)))
            current = []
    if current:
        out.append(escape_line(" ".join(current)))
    return out


def _edge_positions(lines: list[str]) -> list[int]:
    """Indexes of the first and last ``_EDGE_LINES`` non-blank lines of a page."""
    filled = [index for index, line in enumerate(lines) if line]
    return sorted(set(filled[:_EDGE_LINES] + filled[-_EDGE_LINES:]))


def _short(line: str) -> bool:
    return len(line) <= _RUNNING_MAX


@dataclass(frozen=True, slots=True)
class Running:
    """Edge lines seen on at least half of the pages (of 4+): the same text, or the same
    text but for its digits. The second kind is dropped only where it holds its page's
    number or label, which is what a running header or footer does and a form's
    ``Total: 4 200`` at every page's foot does not."""

    exact: frozenset[str] = frozenset()
    numbered: frozenset[str] = frozenset()

    def drops(self, line: str, number: int, label: str) -> bool:
        if line in self.exact:
            return True
        if _DIGITS.sub("#", line) not in self.numbered:
            return False
        tokens = set(re.findall(r"\w+", line))
        return str(number) in tokens or label in tokens


def running_lines(pages: list[list[str]]) -> Running:
    if len(pages) < 4:
        return Running()
    exact: Counter[str] = Counter()
    numbered: Counter[str] = Counter()
    for page in pages:
        edges = {page[index] for index in _edge_positions(page) if _short(page[index])}
        exact.update(edges)
        numbered.update({_DIGITS.sub("#", line) for line in edges})
    half = len(pages) / 2
    return Running(
        frozenset(line for line, count in exact.items() if count >= half),
        frozenset(line for line, count in numbered.items() if count >= half),
    )


def without_running_lines(lines: list[str], running: Running, number: int, label: str) -> list[str]:
    """The page less its running lines, at its edges only (the same text mid-page stays)."""
    drop = {index for index in _edge_positions(lines) if running.drops(lines[index], number, label)}
    return [line for index, line in enumerate(lines) if index not in drop]


def _page_lines(pdf: Any, index: int, unreadable: list[int]) -> list[str]:
    """One page's lines; a page PDFium cannot load is noted and read as empty (the rest of
    the document is still worth having)."""
    import pypdfium2 as pdfium

    try:
        page = pdf[index]
    except pdfium.PdfiumError:
        unreadable.append(index + 1)
        return []
    try:
        textpage = page.get_textpage()
        try:
            return _lines(textpage.get_text_bounded())
        finally:
            textpage.close()
    except pdfium.PdfiumError:
        unreadable.append(index + 1)
        return []
    finally:
        page.close()


def _label(pdf: Any, index: int, error: type[Exception]) -> str:
    try:
        return str(pdf.get_page_label(index) or index + 1)
    except (error, ValueError, UnicodeError):
        return str(index + 1)


def _title(pdf: Any, error: type[Exception]) -> str | None:
    try:
        return " ".join(str(pdf.get_metadata_dict().get("Title") or "").split()) or None
    except (error, ValueError, UnicodeError):
        return None


def page_heading(number: int, label: str) -> str:
    """Each page is a section anchored ``page=N``: a chunk never spans two pages, and
    ``file.pdf#page=N``, the citation, is what PDF viewers open at that page."""
    shown = f"Page {number}" if label in ("", str(number)) else f"Page {number} ({label})"
    return f"## {shown} {{#page={number}}}"


class PdfConverter(LibraryConverter):
    name = "pdf-pdfium"
    label = "PDF"
    extensions = (".pdf",)
    modules = ("pypdfium2",)
    distributions = ("pypdfium2",)

    def convert(self, data: bytes, name: str) -> Converted:
        import pypdfium2 as pdfium  # in the worker only

        try:
            pdf = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as error:
            detail = str(error).splitlines()[0] if str(error) else type(error).__name__
            if "password" in detail.lower():
                raise self.fail(name, "encrypted", "it needs a password to open") from error
            raise self.fail(name, "corrupt", detail) from error
        unreadable: list[int] = []
        try:
            pages: list[list[str]] = []
            labels: list[str] = []
            for index in range(len(pdf)):
                pages.append(_page_lines(pdf, index, unreadable))
                labels.append(_label(pdf, index, pdfium.PdfiumError))
            title = _title(pdf, pdfium.PdfiumError)
        finally:
            pdf.close()
        running = running_lines(pages)
        builder = MarkdownBuilder()
        for number, (lines, label) in enumerate(zip(pages, labels, strict=True), start=1):
            text = paragraphs(without_running_lines(lines, running, number, label))
            if not text:
                continue
            builder.begin("page", number, label)
            builder.add(page_heading(number, label))
            for paragraph in text:
                builder.add(paragraph)
        warnings: list[str] = []
        if unreadable:
            shown = ", ".join(map(str, unreadable[:10])) + (", ..." if len(unreadable) > 10 else "")
            warnings.append(f"{len(unreadable)} page(s) could not be read: {shown}")
        if not builder.regions() and len(pages) > len(unreadable):
            warnings.append(f"no text layer in {len(pages)} page(s): scanned pages need OCR, not included")
        return Converted(
            markdown=builder.markdown(), converter=self.name, version=self.version, title=title,
            regions=builder.regions(), warnings=tuple(warnings),
        )
