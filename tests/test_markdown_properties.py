"""Properties of chunking on generated pages that mix every construct ragpg reads.

Pages mix prose, ATX and setext headings with explicit ids, inline HTML, escapes and
emphasis, fenced and indented code, nested lists, tables, admonitions, content tabs,
fenced containers, HTML comments, ``<script>`` blocks and — in MDX — imports, components
and comments. Each content word is a unique marker, so the properties can say where it
went: every chunk is valid Markdown (fences balanced), the content comes back in order,
scaffolding never does, titles are plain text, and no chunk passes the cap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it.rules_core import StateCore
from markdown_it.rules_core.inline import inline as markdown_it_inline

from rag_pg.models import Document
from rag_pg.source.chunk import CHARS_PER_TOKEN_CAP, Chunker
from rag_pg.source.markdown import dialects
from rag_pg.source.markdown import outline as outline_module
from rag_pg.source.markdown.dialects import markdown_parser

from .markdown_checks import DIRTY_TITLE, balanced, mid_line_fences, prose_lines

PROPERTIES = settings(max_examples=80, deadline=None)
FILLER = ["alpha", "beta", "gamma", "déjà", "日本", "x-y", "42", "été", "z_z"]
SECRET = "SCAFFOLDING"  # a word only page scaffolding holds


@dataclass
class Page:
    mdx: bool
    lines: list[str] = field(default_factory=list)
    markers: list[str] = field(default_factory=list)
    count: int = 0

    def marker(self) -> str:
        self.count += 1
        name = f"m{self.count}q"
        self.markers.append(name)
        return name

    def block(self, *lines: str) -> None:
        self.lines.extend([*lines, ""])


@st.composite
def pages(draw: st.DrawFn) -> tuple[Page, str]:
    page = Page(mdx=draw(st.booleans()))

    def words(low: int = 0, high: int = 12) -> str:
        filler = draw(st.lists(st.sampled_from(FILLER), min_size=low, max_size=high))
        return " ".join([page.marker(), *filler])

    def sentences() -> str:
        count = draw(st.integers(min_value=1, max_value=4))
        return " ".join(words() + draw(st.sampled_from([".", " !", " ?", ";"])) for _ in range(count))

    if page.mdx:
        page.block(f"import {SECRET} from './x.astro';", "export const meta = { a: 1 };")

    def paragraph() -> None:
        text = sentences()
        decorated = draw(st.sampled_from([
            text, f"**{text}**", f"{text} <kbd>k</kbd>", f"{text} \\*", f"<span>{text}</span>",
        ]))
        page.block(decorated)

    def heading() -> None:
        title = draw(st.sampled_from(["Intro", "Élévation !", "`code` usage", "Props", "Props"]))
        suffix = draw(st.sampled_from(["", " {#custom-id}", " { #attr .c }", " {/*mdx-id*/}",
                                       ' <sup class="b" data-text="3.5+" />', " **bold**"]))
        if draw(st.booleans()):
            page.block(f"{'#' * draw(st.integers(1, 4))} {title}{suffix}")
        else:
            page.block(f"{title}{suffix}", draw(st.sampled_from(["===", "---"])))

    def fence() -> None:
        char = draw(st.sampled_from(["`", "~"]))
        length = draw(st.integers(3, 5))
        inner = [
            draw(st.sampled_from(["# not a heading", "", "x = 1", char * (length - 1) if length > 3
                                  else "y", ("~" if char == "`" else "`") * 3]))
            + " " + page.marker()
            for _ in range(draw(st.integers(0, 25)))
        ]
        page.block(f"{char * length} py", *inner, char * length)

    def items(depth: int) -> list[str]:
        lines: list[str] = []
        for _ in range(draw(st.integers(1, 5))):
            lines.append("  " * depth + draw(st.sampled_from(["- ", "* ", "1. "])) + words())
            if depth < 2 and draw(st.integers(0, 3)) == 0:
                lines.extend(items(depth + 1))
        return lines

    def table() -> None:
        rows = [f"| {words(0, 3)} | {words(0, 3)} |" for _ in range(draw(st.integers(1, 12)))]
        page.block("| Nom | Valeur |", "|---|---|", *rows)

    def admonition() -> None:
        title = draw(st.sampled_from(['"Attention"', '"À noter"', ""]))
        page.block(f"!!! note {title}".rstrip(), "", f"    {sentences()}")

    def tab() -> None:
        page.block('=== "Onglet"', "", f"    {sentences()}")

    def container() -> None:
        page.block(draw(st.sampled_from(["::: tip Conseil", ":::note[Note]", "::: details"])),
                   sentences(), ":::")

    def scaffolding() -> None:
        if page.mdx:
            choice = draw(st.sampled_from(["component", "self", "comment"]))
            if choice == "component":
                page.block("<Aside>", "", sentences(), "", "</Aside>")
            elif choice == "self":
                page.block(f'<Badge text="{SECRET}" />')
            else:
                page.block(f"{{/* {SECRET} */}}")
        else:
            choice = draw(st.sampled_from(["script", "comment", "indented"]))
            if choice == "script":
                page.block("<script setup>", f"const x = '{SECRET}'", "</script>")
            elif choice == "comment":
                page.block(f"<!-- {SECRET} -->")
            else:
                page.block(f"    indented code {page.marker()}")

    makers = [paragraph, paragraph, heading, fence, lambda: page.block(*items(0)), table,
              admonition, tab, container, scaffolding]
    for _ in range(draw(st.integers(1, 14))):
        draw(st.sampled_from(makers))()
    return page, "\n".join(page.lines)


BOUNDS = st.integers(min_value=6, max_value=80).flatmap(
    lambda size: st.tuples(
        st.just(size),
        st.integers(min_value=0, max_value=size - 1),
        st.none() | st.integers(min_value=max(size, 8), max_value=3 * size + 8),
    )
)


def page_document(page: Page, body: str) -> Document:
    path = "page.mdx" if page.mdx else "page.md"
    return Document(path=path, title="Page", content=body, content_hash="0" * 64)


def chunk_page(page: Page, body: str, bounds: tuple[int, int, int | None]) -> tuple[Chunker, list[str], list[str]]:
    chunker = Chunker(*bounds)
    chunks = chunker.chunk(page_document(page, body))
    return chunker, [c.content for c in chunks], [c.section for c in chunks]


@given(pages(), BOUNDS)
@PROPERTIES
def test_every_chunk_is_valid_markdown_within_the_cap(
    generated: tuple[Page, str], bounds: tuple[int, int, int | None]
) -> None:
    page, body = generated
    chunker, contents, _ = chunk_page(page, body, bounds)
    for content in contents:
        assert content.strip()
        assert len(content.split()) * 133 <= chunker.max_tokens * 100 + 99, "token cap"
        assert len(content) <= chunker.max_tokens * CHARS_PER_TOKEN_CAP, "character cap"
        assert balanced(content, page.mdx), content
        assert mid_line_fences(content) == 0, content


@given(pages(), BOUNDS)
@PROPERTIES
def test_content_comes_back_in_order_and_scaffolding_never(
    generated: tuple[Page, str], bounds: tuple[int, int, int | None]
) -> None:
    page, body = generated
    _, contents, _ = chunk_page(page, body, bounds)
    seen: list[str] = []
    for content in contents:
        for word in content.replace("*", " ").replace("|", " ").split():
            word = word.strip(".!?;`")
            if word.startswith("m") and word.endswith("q") and word not in seen:
                seen.append(word)
        assert SECRET not in "\n".join(prose_lines(content, page.mdx))
        assert not any(line.startswith(("import ", "export ")) for line in prose_lines(content, page.mdx))
    assert seen == page.markers


@given(pages(), BOUNDS)
@PROPERTIES
def test_titles_are_plain_text(
    generated: tuple[Page, str], bounds: tuple[int, int, int | None]
) -> None:
    page, body = generated
    _, _, sections = chunk_page(page, body, bounds)
    for title in sections:
        assert not DIRTY_TITLE.search(title), title
        assert "<" not in title.replace("<code>", ""), title
        assert "{" not in title, title


def _chunks_with_inline_stage(page: Page, body: str, bounds: tuple[int, int, int | None],
                              stage: Callable[[StateCore], None]) -> list[tuple[str, str, str]]:
    parser = markdown_parser(page.mdx)
    parser.core.ruler.at("inline", stage)
    outline_module.outline.cache_clear()
    outline_module._parse.cache_clear()
    try:
        chunks = Chunker(*bounds).chunk(page_document(page, body))
        return [(c.section, c.anchor, c.content) for c in chunks]
    finally:
        parser.core.ruler.at("inline", dialects._inline_headings)
        outline_module.outline.cache_clear()
        outline_module._parse.cache_clear()


@given(pages(), BOUNDS)
@PROPERTIES
def test_parsing_only_the_headings_inline_changes_no_chunk(
    generated: tuple[Page, str], bounds: tuple[int, int, int | None]
) -> None:
    # The parser skips the inline trees of every block but headings; markdown-it's own inline
    # stage, which parses them all, must give the same sections, anchors and texts.
    page, body = generated
    ours = _chunks_with_inline_stage(page, body, bounds, dialects._inline_headings)
    assert ours == _chunks_with_inline_stage(page, body, bounds, markdown_it_inline)
    assert ours
