"""A page as headings and blocks, read from markdown-it's token tree, with source line spans.

Only what a renderer would show is kept: ``<script>``/``<style>`` blocks, tags and comments
(their inner text stays), MDX ``import``/``export`` statements and thematic breaks are page
scaffolding. In MDX, lines an HTML block held only as component tags (``<Steps>``,
``</TabItem>``) are blanked and the page parsed again, so the Markdown inside a component is
read as Markdown, as MDX reads it; in CommonMark (``.md``) an HTML block stays HTML, as
GitHub and VitePress render it. Blanking keeps every line where it was, so spans stay true
to the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from rag_pg.source.markdown.clean import (
    CONTAINER,
    anchor_id,
    is_anchor_only,
    is_script_or_style,
    only_markers,
    strip_all_tags,
    strip_markup,
    tag_only_lines,
)
from rag_pg.source.markdown.slugs import SlugStyle, assign_anchors

if TYPE_CHECKING:
    from markdown_it.tree import SyntaxTreeNode

_MAX_PASSES = 3
_ESM = re.compile(r"(?:import|export)\b")
_CONTAINER_TITLE = re.compile(r"\s*[A-Za-z][\w-]*\s*(?:\[(.*)\]|\{.*\})?\s*(.*)$")
_FENCE_LINE = re.compile(r"\s*(?:[-*+>]\s*|\d+[.)]\s*)*(`{3,}|~{3,})")
_BACKTICKS = re.compile(r"\s*(`{3,})")
_TRANSPARENT = frozenset({"admonition", "tab", CONTAINER})
_COMPOUND = {
    "bullet_list": "list",
    "ordered_list": "list",
    "list_item": "item",
    "blockquote": "quote",
    "dl": "list",
    "dt": "prose",
    "dd": "item",
}


@dataclass(frozen=True, slots=True)
class Block:
    """A run of the page's text: ``kind`` is prose, title, list, item, quote, table, row or code.

    ``start``/``end`` are 0-based body line indexes, end exclusive. A code block's ``head``
    and ``tail`` are its fence lines (always both, so any piece of it can be re-fenced); a
    table's ``head`` is its header and delimiter rows. ``parts`` are the boundaries a block
    too large for one chunk is split at.
    """

    kind: str
    start: int
    end: int
    text: str
    parts: tuple[Block, ...] = ()
    head: str = ""
    tail: str = ""


@dataclass(frozen=True, slots=True)
class Heading:
    level: int
    title: str
    anchor: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class _HeadingText:
    explicit: str | None
    text: str  # rendered text as github-slugger and Python-Markdown see it
    vitepress: str  # markdown-it-anchor's text: images count by their alt text


def _inline_texts(node: SyntaxTreeNode, plain: list[str], vite: list[str]) -> str | None:
    """Append the rendered text of an inline tree; return an ``<a id>`` found in it."""
    found: str | None = None
    for child in node.children:
        kind = child.type
        if kind in ("text", "code_inline"):
            plain.append(child.content)
            vite.append(child.content)
        elif kind in ("softbreak", "hardbreak"):
            plain.append("\n")
        elif kind == "html_inline":
            found = found or anchor_id(child.content)
        elif kind == "image":
            vite.append(child.content)
        else:
            found = _inline_texts(child, plain, vite) or found
    return found


def _heading_text(node: SyntaxTreeNode, before: str | None) -> _HeadingText:
    plain: list[str] = []
    vite: list[str] = []
    inline = node.children[0] if node.children else None
    inside = _inline_texts(inline, plain, vite) if inline is not None else None
    explicit = node.attrGet("id")
    identifier = str(explicit) if explicit else inside or before
    return _HeadingText(identifier, "".join(plain), "".join(vite))


def _walk(node: SyntaxTreeNode) -> Iterator[SyntaxTreeNode]:
    """Block nodes in document order (inline trees are not entered)."""
    for child in node.children:
        if child.type == "inline":
            continue
        yield child
        yield from _walk(child)


def _span(node: SyntaxTreeNode) -> tuple[int, int]:
    start, end = node.map or (0, 0)
    return start, max(end, start + 1)


def _blank_scaffolding(
    root: SyntaxTreeNode, lines: list[str], mdx: bool, anchors: dict[int, str]
) -> bool:
    changed = False
    for node in _walk(root):
        start, end = _span(node)
        if node.type == "paragraph" and mdx and node.level == 0 and _ESM.match(lines[start]):
            changed |= _blank(lines, range(start, end))
        if node.type not in ("html_block", "paragraph"):
            continue
        html = "\n".join(lines[start:end])
        if is_anchor_only(html):
            # An ``<a id>`` alone names the heading right after it (a paragraph the heading
            # interrupts, or an HTML block).
            target = anchor_id(html)
            after = next((i for i in range(end, len(lines)) if lines[i].strip()), None)
            if target and after is not None:
                anchors.setdefault(after, target)
        if node.type == "paragraph":
            continue
        if is_script_or_style(html):
            changed |= _blank(lines, range(start, end))
            continue
        if not mdx:
            continue  # CommonMark: an HTML block's lines are HTML, headings in it included
        in_fence = False
        for offset, tags_only in enumerate(tag_only_lines(html)):
            line = lines[start + offset]
            if _FENCE_LINE.match(line):
                in_fence = not in_fence
            elif tags_only and not in_fence:
                changed |= _blank(lines, (start + offset,))
    return changed


def _blank(lines: list[str], indexes: range | tuple[int, ...]) -> bool:
    """Lines emptied but for their indent, so an indented body (admonition, tab) goes on."""
    changed = False
    for index in indexes:
        line = lines[index]
        if line.strip():
            lines[index] = line[: len(line) - len(line.lstrip())]
            changed = True
    return changed


class _Reader:
    """Builds the outline of one page from its final token tree."""

    def __init__(self, lines: list[str], mdx: bool) -> None:
        self.lines = lines
        self.mdx = mdx
        self.dedent = [0] * len(lines)

    def raw(self, start: int, end: int) -> list[str]:
        return [self._line(i) for i in range(start, min(end, len(self.lines)))]

    def _line(self, index: int) -> str:
        line, cut = self.lines[index], self.dedent[index]
        if cut and line[:cut].strip() == "":
            return line[cut:]
        return line.lstrip(" ") if cut else line

    def body(self, node: SyntaxTreeNode, start: int, end: int) -> None:
        """An indented container body: its lines lose the indent they share."""
        indents = [
            len(line) - len(line.lstrip(" "))
            for line in self.lines[start:end]
            if line.strip()
        ]
        if indents:
            cut = min(indents)
            for index in range(start, end):
                self.dedent[index] = max(self.dedent[index], cut)

    def block(self, node: SyntaxTreeNode, nested: bool = False) -> Block | None:
        """``nested``: inside a list or quote, where a line's indent carries meaning."""
        kind = node.type
        start, end = _span(node)
        if kind in ("fence", "code_block"):
            return self._code(node, start, end)
        if kind == "table":
            return self._table(node, start, end)
        if kind == "html_block":
            html = "\n".join(self.raw(start, end))
            if is_script_or_style(html):
                return None
            text = strip_all_tags(html)
            return Block("prose", start, end, text) if text.strip() else None
        if kind == "heading":
            inline = node.children[0].content if node.children else ""
            text = strip_markup("#" * int(node.tag[1:]) + " " + inline)
            return Block("prose", start, end, text)
        if kind == "hr":
            return None
        if kind in _COMPOUND:
            parts = tuple(
                b for child in node.children if (b := self.block(child, nested=True)) is not None
            )
            if kind == "dt" or not node.children or node.children[0].type == "inline":
                return self._prose(start, end, "prose")
            if not parts:
                return None
            return Block(_COMPOUND[kind], start, end, _join(parts), parts)
        if kind in _TRANSPARENT:
            # Inside a list or quote, a heading in the container is a line of its text.
            parts = tuple(
                block
                for item in self.flatten([node])
                if (block := item if isinstance(item, Block) else self.block(item, True))
            )
            return Block("quote", start, end, _join(parts), parts) if parts else None
        return self._prose(start, end, "prose", flush=not nested)

    def _prose(self, start: int, end: int, kind: str, flush: bool = False) -> Block | None:
        """``flush``: a paragraph's indent says nothing (it would read as code once chunked)."""
        lines = self.raw(start, end)
        if flush:
            lines = [line.lstrip() for line in lines]
        text = strip_markup("\n".join(lines))
        if not text.strip() or only_markers(text):
            return None
        return Block(kind, start, end, text)

    def _code(self, node: SyntaxTreeNode, start: int, end: int) -> Block:
        raw = self.raw(start, end)
        if node.type == "code_block":
            indent = min((len(s) - len(s.lstrip(" ")) for s in raw if s.strip()), default=0)
            inner = [line[indent:] for line in raw]
            while inner and not inner[-1].strip():
                inner.pop()
            # A fence longer than any backtick run the code starts a line with.
            runs = [len(m.group(1)) for line in inner if (m := _BACKTICKS.match(line))]
            head = tail = "`" * max(3, max(runs, default=0) + 1)
        else:
            head = raw[0]
            prefix = head[: len(head) - len(head.lstrip(" -*+>0123456789.)"))]
            closing = raw[-1].strip() if len(raw) > 1 else ""
            closed = bool(closing) and set(closing) == {node.markup[0]} and len(closing) >= len(
                node.markup
            )
            inner = raw[1:-1] if closed else raw[1:]
            tail = raw[-1] if closed else " " * len(prefix) + node.markup
        text = "\n".join([head, *inner, tail])
        return Block("code", start, end, text, head=head, tail=tail)

    def _table(self, node: SyntaxTreeNode, start: int, end: int) -> Block:
        rows = [child for section in node.children for child in section.children]
        body_start = rows[1].map[0] if len(rows) > 1 and rows[1].map else end
        head = "\n".join(strip_markup(line) for line in self.raw(start, body_start))
        parts = tuple(
            Block("row", s, e, "\n".join(strip_markup(line) for line in self.raw(s, e)))
            for row in rows[1:]
            for s, e in (_span(row),)
        )
        text = "\n".join([head, *(part.text for part in parts)])
        return Block("table", start, end, text, parts, head=head)

    def flatten(self, nodes: list[SyntaxTreeNode]) -> Iterator[Block | SyntaxTreeNode]:
        """Top-level blocks, transparent containers opened into a title line and their body."""
        for node in nodes:
            if node.type == "heading":
                yield node
                continue
            if node.type in _TRANSPARENT:
                start, end = _span(node)
                title = _container_title(node)
                if title:
                    yield Block("title", start, start + 1, title)
                if node.type != CONTAINER:
                    self.body(node, start + 1, end)
                children = [c for c in node.children if c.type != "admonition_title"]
                yield from self.flatten(children)
                continue
            block = self.block(node)
            if block is not None:
                yield block


def _container_title(node: SyntaxTreeNode) -> str:
    if node.type == "admonition":
        return _admonition_title(node)
    if node.type == "tab":
        return str(node.info).strip()
    match = _CONTAINER_TITLE.match(node.info)
    if match is None:
        return ""
    return (match.group(1) or match.group(2) or "").strip()


def _admonition_title(node: SyntaxTreeNode) -> str:
    for child in node.children:
        if child.type == "admonition_title" and child.children:
            return " ".join(child.children[0].content.split())
    return ""


def _join(parts: tuple[Block, ...]) -> str:
    """Parts set apart as they were: a blank line where the source had one."""
    pieces: list[str] = []
    previous_end: int | None = None
    for part in parts:
        if previous_end is not None:
            pieces.append("\n\n" if part.start > previous_end else "\n")
        pieces.append(part.text)
        previous_end = part.end
    return "".join(pieces)


@dataclass(frozen=True, slots=True)
class Outline:
    """Section-level headings and blocks in order; ``first_h1`` is the first level-1 title."""

    items: tuple[Heading | Block, ...]
    first_h1: str | None


@lru_cache(maxsize=4)
def _parse(body: str, mdx: bool) -> tuple[SyntaxTreeNode, list[str], dict[int, str]]:
    """Cached apart from the anchors: parse's title and the chunker's anchor style share it.

    The tree, lines and anchors are read, never changed, by their callers.
    """
    # markdown-it loads with the first page parsed: a run that changes nothing parses none.
    from markdown_it.tree import SyntaxTreeNode

    from rag_pg.source.markdown.dialects import markdown_parser

    md = markdown_parser(mdx)
    lines = body.split("\n")
    anchors: dict[int, str] = {}
    root = SyntaxTreeNode(md.parse(body))
    for _ in range(_MAX_PASSES):
        if not _blank_scaffolding(root, lines, mdx, anchors):
            break
        root = SyntaxTreeNode(md.parse("\n".join(lines)))
    return root, lines, anchors


@lru_cache(maxsize=8)
def outline(body: str, mdx: bool = False, style: SlugStyle = "github") -> Outline:
    """Cached: parse (for the title) and the chunker read the same page one after the other."""
    root, lines, anchors_before = _parse(body, mdx)
    texts: dict[int, _HeadingText] = {}
    order: list[SyntaxTreeNode] = []
    for node in _walk(root):
        if node.type == "heading":
            start, _ = _span(node)
            texts[id(node)] = _heading_text(node, anchors_before.get(start))
            order.append(node)
    slugs = assign_anchors(
        [
            (texts[id(n)].explicit, texts[id(n)].vitepress if style == "vitepress" else texts[id(n)].text)
            for n in order
        ],
        style,
    )
    anchor_of = {id(node): slug for node, slug in zip(order, slugs, strict=True)}
    reader = _Reader(lines, mdx)
    items: list[Heading | Block] = []
    first_h1: str | None = None
    for item in reader.flatten(list(root.children)):
        if isinstance(item, Block):
            items.append(item)
            continue
        title = " ".join(texts[id(item)].text.split())
        level = int(item.tag[1:])
        start, end = _span(item)
        if not title:
            # An empty heading has no title to cite: its line stays text.
            items.append(Block("prose", start, end, "\n".join(reader.raw(start, end)).strip()))
            continue
        if level == 1 and first_h1 is None:
            first_h1 = title
        items.append(Heading(level, title, anchor_of[id(item)], start, end))
    return Outline(tuple(items), first_h1)
