"""Every heading of a page with the text each renderer slugs: what the anchor tests compare."""

from __future__ import annotations

from dataclasses import dataclass

from rag_pg.source.markdown.outline import _heading_text, _parse, _span, _walk


@dataclass(frozen=True, slots=True)
class HeadingText:
    """Every heading of a page, at any depth: its explicit id and the text each renderer slugs."""

    level: int
    explicit: str | None
    text: str
    vitepress: str


def heading_texts(body: str, mdx: bool = False) -> list[HeadingText]:
    root, _, anchors_before = _parse(body, mdx)
    found: list[HeadingText] = []
    for node in _walk(root):
        if node.type == "heading":
            text = _heading_text(node, anchors_before.get(_span(node)[0]))
            found.append(HeadingText(int(node.tag[1:]), text.explicit, text.text, text.vitepress))
    return found
