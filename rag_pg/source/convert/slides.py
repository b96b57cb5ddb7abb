"""PPTX: one ``## Slide N: title {#slide-N}`` section per slide, read with python-pptx.

The anchor is the slide number, the one thing a reader can open (a deck has no ids).
A slide's text comes shape by shape from top to bottom, then left to right (the order a
reader's eye takes); a text box of several paragraphs is a list, indented by level;
tables become Markdown tables; the speaker notes close the slide. Pictures, charts and
the slide's layout are lost.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from rag_pg.source.convert.base import (
    Converted,
    LibraryConverter,
    MarkdownBuilder,
    cell_text,
    clean_text,
    escape_line,
    markdown_table,
)
from rag_pg.source.convert.zipguard import check_archive


def _one_line(text: str) -> str:
    return " ".join(clean_text(text).split())


def _ordered(shapes: Any) -> list[Any]:
    return sorted(shapes, key=lambda shape: (shape.top or 0, shape.left or 0))


def _shape_blocks(shape: Any) -> Iterator[str]:
    from pptx.shapes.group import GroupShape

    if isinstance(shape, GroupShape):
        for inner in _ordered(shape.shapes):  # a group: its members in reading order
            yield from _shape_blocks(inner)
        return
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = [[cell_text(cell.text) for cell in row.cells] for row in shape.table.rows]
        if rows:
            yield markdown_table(rows[0], rows[1:])
        return
    if not getattr(shape, "has_text_frame", False) or not shape.has_text_frame:
        return
    paragraphs = [(p.level, _one_line("".join(run.text for run in p.runs) or p.text))
                  for p in shape.text_frame.paragraphs]
    paragraphs = [(level, text) for level, text in paragraphs if text]
    if len(paragraphs) == 1:
        yield escape_line(paragraphs[0][1])
    elif paragraphs:
        yield "\n".join("  " * level + "- " + text for level, text in paragraphs)


class PptxConverter(LibraryConverter):
    name = "pptx-python-pptx"
    label = "PPTX"
    extensions = (".pptx",)
    modules = ("pptx",)
    distributions = ("python-pptx",)

    def convert(self, data: bytes, name: str) -> Converted:
        from pptx import Presentation

        check_archive(data, name, self.label)
        try:
            deck = Presentation(io.BytesIO(data))
        except (KeyError, ValueError, OSError) as error:
            raise self.fail(name, "corrupt", f"{type(error).__name__}: {error}") from error
        builder = MarkdownBuilder()
        first_title: str | None = None
        for number, slide in enumerate(deck.slides, start=1):
            title_shape = slide.shapes.title
            title = _one_line(title_shape.text) if title_shape is not None and title_shape.has_text_frame else ""
            first_title = first_title or title or None
            builder.begin("slide", number, title)
            heading = f"Slide {number}: {title}" if title else f"Slide {number}"
            builder.add(f"## {heading} {{#slide-{number}}}")
            for shape in _ordered(slide.shapes):
                if title_shape is not None and shape.shape_id == title_shape.shape_id:
                    continue
                for block in _shape_blocks(shape):
                    builder.add(block)
            if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
                notes = _one_line(slide.notes_slide.notes_text_frame.text)
                if notes:
                    builder.add(f"Notes: {notes}")
        return Converted(
            markdown=builder.markdown(), converter=self.name, version=self.version,
            title=_one_line(deck.core_properties.title or "") or first_title,
            regions=builder.regions(),
        )
