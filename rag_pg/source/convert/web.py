"""HTML: the page's main content as Markdown, its headings' ids kept as ``{#id}`` anchors.

A site's links point at its own ids (``page.html#install``); ragpg's parser reads an
explicit ``{#id}`` after a heading (or an ``<a id>`` inside it, for ids with dots or
colons) as the section's anchor, so a hit's anchor opens the same place on the site. A heading's id is its own ``id``, else the ``id``/``name`` of an
``<a>`` inside it or just before it (DocBook, Javadoc), else the id of the section or div
it opens (Sphinx, Pandoc ``<section id>``). Navigation, scripts, forms and site chrome are
dropped (tables of contents too: links, not content); ``<main>``, ``[role=main]`` or a lone ``<article>`` is the content when present.
BeautifulSoup reads the bytes (``<meta charset>``, else detection); markdownify writes
the Markdown. Images are lost (their alt text stays); relative links keep their text only.
"""

from __future__ import annotations

import html
import re
import warnings
from importlib.util import find_spec
from typing import Any

from rag_pg.source.convert.base import Converted, LibraryConverter, clean_text

_DROP_TAGS = frozenset({
    "script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form", "svg",
    "iframe", "button", "select", "input", "textarea", "canvas", "object", "embed", "dialog",
})
_DROP_ROLES = frozenset({"navigation", "banner", "contentinfo", "search"})
# Site chrome of DocBook, Sphinx and common themes; tables of contents are links, not content.
_DROP_CLASSES = frozenset({
    "navheader", "navfooter", "sphinxsidebar", "related", "breadcrumbs", "headerlink",
    "header-anchor", "toc", "list-of-tables", "list-of-figures", "list-of-examples",
})
_ID = re.compile(r'^[^\s"<>{}]+$')  # what an HTML id may hold and Markdown can carry
_PLAIN_ID = re.compile(r"^[^\W\d][\w-]*$")  # what the ``{#id}`` syntax reads whole
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_MARK = "data-ragpg-id"
_BLANK_RUNS = re.compile(r"\n{3,}")
_PERMALINK_TEXT = frozenset({"", "¶", "#", "§", "🔗", "link"})


def _parser() -> str:
    return "lxml" if find_spec("lxml") is not None else "html.parser"


def _usable(value: Any) -> str | None:
    text = value if isinstance(value, str) else None
    return text if text and _ID.match(text) else None


def _element_children(tag: Any) -> list[Any]:
    return [child for child in tag.children if getattr(child, "name", None)]


def heading_id(heading: Any) -> str | None:
    """See the module's note for the order; an id the attrs syntax cannot hold is ignored."""
    own = _usable(heading.get("id"))
    if own:
        return own
    for link in heading.find_all("a"):
        found = _usable(link.get("id")) or _usable(link.get("name"))
        if found:
            return found
    before = heading.find_previous_sibling()
    if before is not None and before.name == "a" and not before.get_text(strip=True):
        found = _usable(before.get("id")) or _usable(before.get("name"))
        if found:
            return found
    parent = heading.parent
    while parent is not None and parent.name in ("section", "div", "article", "header"):
        children = _element_children(parent)
        if not children or children[0] is not heading and heading not in children[:1]:
            break
        found = _usable(parent.get("id"))
        if found:
            return found
        heading, parent = parent, parent.parent
    return None


def _markdown_converter() -> Any:
    from markdownify import STRIP, MarkdownConverter

    base: Any = MarkdownConverter  # its stubs do not declare the per-tag methods

    class _Converter(MarkdownConverter):
        def convert_hN(self, n: int, el: Any, text: str, parent_tags: set[str]) -> str:
            out = str(base.convert_hN(self, n, el, text, parent_tags))
            anchor = el.get(_MARK)
            if not anchor or not out.strip() or "_inline" in parent_tags:
                return out
            if _PLAIN_ID.match(anchor):
                return out.rstrip("\n") + f" {{#{anchor}}}\n\n"
            # ``{#sec.3.1}`` would read as id ``sec`` and class ``3``: an inline anchor instead.
            hashes, _, title = out.strip().partition(" ")
            return f'\n\n{hashes} <a id="{html.escape(anchor)}"></a>{title}\n\n'

        def convert_img(self, el: Any, text: str, parent_tags: set[str]) -> str:
            return str(el.get("alt") or "")

        def convert_a(self, el: Any, text: str, parent_tags: set[str]) -> str:
            href = str(el.get("href") or "")
            if href.startswith(("http://", "https://")) and text.strip():
                return str(base.convert_a(self, el, text, parent_tags))
            return text

    return _Converter(
        heading_style="ATX", bullets="-", escape_underscores=False, escape_asterisks=False,
        table_infer_header=True, strip_document=STRIP,
    )


def soup_to_markdown(root: Any) -> str:
    """Markdown of a parsed tree whose headings carry their anchor in ``data-ragpg-id``."""
    text = clean_text(str(_markdown_converter().convert_soup(root)))
    lines = [line.rstrip() for line in text.split("\n")]
    markdown = _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip("\n")
    if markdown.startswith(("---", "+++")):
        markdown = "\\" + markdown  # a leading rule would be read as front-matter
    return markdown + "\n" if markdown else ""


def is_chrome(tag: Any) -> bool:
    """Checked in one pass over the tree (a CSS selector engine took half the time)."""
    if tag.name in _DROP_TAGS or tag.get("role") in _DROP_ROLES or tag.has_attr("hidden"):
        return True
    classes = tag.get("class") or ()
    return any(name in _DROP_CLASSES for name in classes)


def drop_chrome(soup: Any) -> None:
    for tag in [tag for tag in soup.find_all(True) if is_chrome(tag)]:
        if not tag.decomposed:
            tag.decompose()


def main_content(soup: Any) -> Any:
    for found in (soup.find("main"), soup.find(attrs={"role": "main"})):
        if found is not None:
            return found
    articles = soup.find_all("article")
    if len(articles) == 1:
        return articles[0]
    return soup.body or soup


def mark_heading_ids(root: Any) -> None:
    for heading in root.find_all(_HEADINGS):
        anchor = heading_id(heading)
        if anchor:
            heading[_MARK] = anchor
        for link in heading.find_all("a"):  # permalink widgets, not title text
            if str(link.get("href") or "").startswith("#") and link.get_text(strip=True) in _PERMALINK_TEXT:
                link.decompose()


def html_title(soup: Any) -> str | None:
    """The first ``<h1>``, else ``<title>`` (which often ends with the site's name)."""
    for candidate in (soup.find("h1"), soup.title):
        if candidate is not None:
            title = " ".join(candidate.get_text(" ").split())
            if title:
                return title
    return None


class HtmlConverter(LibraryConverter):
    name = "html-markdownify"
    label = "HTML"
    extensions = (".html", ".htm", ".xhtml")
    modules = ("bs4", "markdownify")
    distributions = ("beautifulsoup4", "markdownify")

    def convert(self, data: bytes, name: str) -> Converted:
        from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning

        with warnings.catch_warnings():
            # XHTML read as HTML is what browsers do too; the warning would fail strict runs.
            warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
            soup = BeautifulSoup(data, _parser())
        title = html_title(soup)
        drop_chrome(soup)
        root = main_content(soup)
        mark_heading_ids(root)
        return Converted(
            markdown=soup_to_markdown(root), converter=self.name, version=self.version, title=title,
        )
