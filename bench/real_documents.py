"""Measure ragpg's Markdown pipeline on real documentation trees, against the sites' renderers.

    .venv/bin/python bench/real_documents.py ROOT:STYLE [ROOT:STYLE ...] [--mdx-renderer DIR]

For each tree: pages indexed, heading anchors equal to the renderer's, titles with markup,
chunks over the cap, fences opened mid-line, unbalanced fences, scaffolding-only chunks.

Anchors are checked two ways. ``slug``: each heading's anchor against the renderer's own
slug function on the same text (Python-Markdown's ``toc.slugify`` for ``mkdocs``,
github-slugger through ``--mdx-renderer`` for ``github``). ``page``: against the ids the
renderer itself gives the page's headings — Python-Markdown with the site's core
extensions, or ``@mdx-js/mdx`` + ``rehype-slug`` for MDX. ``--mdx-renderer`` is a folder
where ``npm install @mdx-js/mdx rehype-slug remark-gfm remark-directive github-slugger
hast-util-to-string unist-util-visit`` was run; without it the MDX checks are left out.
"""

from __future__ import annotations

import argparse
import html.parser
import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rag_pg.models import SkippedFile
from rag_pg.source.chunk import Chunker, is_mdx
from rag_pg.source.markdown.outline import Heading, outline
from rag_pg.source.parse import parse_document
from rag_pg.source.walk import WalkRules, walk

# The chunk checks are the tests' own (tests/markdown_checks.py), so both judge chunks alike.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.markdown_checks import (  # noqa: E402
    DIRTY_TITLE,
    balanced,
    mid_line_fences,
    scaffolding_only,
)

HERE = Path(__file__).resolve().parent
MDX_SCRIPT = HERE / "mdx_heading_ids.mjs"
SIZE, OVERLAP = 300, 45  # the configuration defaults


@dataclass
class Figures:
    pages: int = 0
    indexed: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    headings: int = 0
    slug_equal: int = 0
    page_checked: int = 0
    page_equal: int = 0
    titles: int = 0
    dirty_titles: list[str] = field(default_factory=list)
    chunks: int = 0
    over_cap: int = 0
    mid_line_fences: int = 0
    unbalanced: int = 0
    scaffolding_only: int = 0
    largest_tokens: int = 0
    seconds: float = 0.0
    mismatches: list[str] = field(default_factory=list)
    title_equal: int = 0
    title_mismatches: list[str] = field(default_factory=list)


class _Ids(html.parser.HTMLParser):
    """Heading ids and their text, as the rendered page shows it."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: dict[str, str] = {}
        self._current: str | None = None
        self._text: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if re.fullmatch(r"h[1-6]", tag):
            self._current = next((v for n, v in attrs if n == "id" and v), None)
            self._text = []
        elif self._current is not None and tag == "a" and ("class", "headerlink") in attrs:
            self._skip += 1  # the permalink's pilcrow is not the heading's text

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._skip:
            self._skip -= 1
        elif re.fullmatch(r"h[1-6]", tag) and self._current is not None:
            self.ids[self._current] = "".join(self._text)
            self._current = None

    def handle_data(self, data: str) -> None:
        if self._current is not None and not self._skip:
            self._text.append(data)


def mkdocs_page_ids(body: str) -> dict[str, str]:
    """The site's Markdown extensions (mkdocs.yml), less those that need mkdocs-material."""
    import markdown

    extensions: list[str] = ["toc", "attr_list", "admonition", "def_list", "md_in_html",
                             "tables", "footnotes", "abbr"]
    try:
        import pymdownx  # noqa: F401
    except ImportError:
        extensions.append("fenced_code")
    else:
        extensions += ["pymdownx.superfences", "pymdownx.tabbed", "pymdownx.details",
                       "pymdownx.betterem", "pymdownx.caret", "pymdownx.mark",
                       "pymdownx.tilde", "pymdownx.keys", "pymdownx.smartsymbols",
                       "pymdownx.inlinehilite", "pymdownx.tasklist"]
    parser = _Ids()
    parser.feed(markdown.Markdown(extensions=extensions,
                                  extension_configs={"pymdownx.tabbed": {"alternate_style": True}}
                                  ).convert(body))
    return parser.ids


def mdx_page_ids(renderer: Path, bodies: dict[str, str]) -> dict[str, list[list[object]]]:
    shutil.copy(MDX_SCRIPT, renderer / MDX_SCRIPT.name)
    lines = "".join(json.dumps({"path": p, "body": b}) + "\n" for p, b in bodies.items())
    result = subprocess.run(["node", MDX_SCRIPT.name], cwd=renderer, input=lines,
                            capture_output=True, text=True, check=True)
    pages: dict[str, list[list[object]]] = {}
    for line in result.stdout.splitlines():
        page = json.loads(line)
        if page["error"] is None:
            pages[page["path"]] = page["headings"]
    return pages


def github_slugs(renderer: Path, texts: list[str]) -> list[str]:
    script = "import {slug} from 'github-slugger';import fs from 'node:fs';" \
             "const t=JSON.parse(fs.readFileSync(0,'utf8'));" \
             "process.stdout.write(JSON.stringify(t.map(x=>slug(x))))"
    result = subprocess.run(["node", "--input-type=module", "-e", script], cwd=renderer,
                            input=json.dumps(texts), capture_output=True, text=True, check=True)
    slugs: list[str] = json.loads(result.stdout)
    return slugs


def measure(root: Path, style: str, renderer: Path | None) -> Figures:
    figures = Figures()
    chunker = Chunker(SIZE, OVERLAP, slug_style=style)
    bodies: dict[str, str] = {}
    anchors: dict[str, list[Heading]] = {}
    started = time.perf_counter()
    for item in walk(root, WalkRules()):
        if isinstance(item, SkippedFile):
            figures.skipped[item.reason] += 1
            if item.path.lower().endswith((".md", ".mdx", ".markdown")):
                figures.pages += 1
            continue
        figures.pages += 1
        figures.indexed += 1
        document = parse_document(item.path, item.data, item.text)
        bodies[item.path] = document.content
        headings = [h for h in outline(document.content, is_mdx(item.path), style).items
                    if isinstance(h, Heading)]  # type: ignore[arg-type]
        anchors[item.path] = headings
        for title in [document.title, *(h.title for h in headings)]:
            figures.titles += 1
            if DIRTY_TITLE.search(title):
                figures.dirty_titles.append(f"{item.path}: {title}")
        for chunk in chunker.chunk(document):
            figures.chunks += 1
            figures.largest_tokens = max(figures.largest_tokens, chunk.token_count)
            figures.over_cap += chunk.token_count > chunker.max_tokens
            figures.mid_line_fences += mid_line_fences(chunk.content)
            figures.unbalanced += not balanced(chunk.content, is_mdx(item.path))
            figures.scaffolding_only += scaffolding_only(chunk.content, is_mdx(item.path))
    figures.seconds = time.perf_counter() - started
    _check_anchors(figures, style, renderer, bodies, anchors)
    return figures


def _check_anchors(figures: Figures, style: str, renderer: Path | None,
                   bodies: dict[str, str], anchors: dict[str, list[Heading]]) -> None:
    """Each heading's anchor among the rendered page's ids, its title equal to that text."""
    rendered: dict[str, dict[str, str]] = {}
    if style == "mkdocs":
        rendered = {path: mkdocs_page_ids(body) for path, body in bodies.items()}
    elif style == "github" and renderer is not None:
        pages = mdx_page_ids(renderer, bodies)
        rendered = {path: {str(e[2]): str(e[1]) for e in page} for path, page in pages.items()}
    for path, ids in rendered.items():
        for heading in anchors[path]:
            figures.page_checked += 1
            if heading.anchor not in ids:
                figures.mismatches.append(f"{path}: {heading.title!r} -> {heading.anchor}")
                continue
            figures.page_equal += 1
            if heading.title == " ".join(ids[heading.anchor].split()):
                figures.title_equal += 1
            else:
                figures.title_mismatches.append(
                    f"{path}: {heading.title!r} != {ids[heading.anchor]!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+", help="ROOT:STYLE (style: github, vitepress, mkdocs)")
    parser.add_argument("--mdx-renderer", type=Path, default=None)
    parser.add_argument("--show", type=int, default=10, help="mismatches and dirty titles shown")
    args = parser.parse_args()
    for spec in args.trees:
        root, _, style = spec.rpartition(":")
        figures = measure(Path(root), style, args.mdx_renderer)
        share = figures.page_equal / figures.page_checked if figures.page_checked else float("nan")
        print(f"## {root} ({style})")
        print(f"pages {figures.indexed}/{figures.pages} indexed; other entries skipped: "
              f"{dict(figures.skipped)}")
        print(f"anchors equal to the renderer's page ids: {figures.page_equal}/"
              f"{figures.page_checked} ({share:.2%})")
        print(f"titles with markup: {len(figures.dirty_titles)}/{figures.titles}; section titles "
              f"equal to the renderer's heading text: {figures.title_equal}/{figures.page_equal}")
        print(f"chunks {figures.chunks}: over the cap {figures.over_cap}, largest "
              f"{figures.largest_tokens} tokens, fences opened mid-line {figures.mid_line_fences}, "
              f"unbalanced fences {figures.unbalanced}, scaffolding only {figures.scaffolding_only}")
        print(f"parse + chunk: {figures.seconds:.1f} s")
        for line in figures.mismatches[: args.show]:
            print("  anchor:", line)
        for line in figures.dirty_titles[: args.show]:
            print("  title:", line)
        for line in figures.title_mismatches[: args.show]:
            print("  text:", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
