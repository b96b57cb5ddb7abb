"""The markdown-it parser ragpg reads documents with, and the site dialects it knows.

CommonMark with GFM tables and strikethrough, definition lists, Python-Markdown /
mkdocs-material admonitions (``!!! note "Title"``, ``??? details``), fenced containers
(VitePress ``::: tip Title``, Docusaurus and Starlight ``:::note[Title]``), and two rules of
our own that no plugin provides: pymdownx content tabs (``=== "Tab"`` + an indented body)
and trailing heading attributes (``## Title {#id}``, ``{ #id .class }``, MDX ``{/*id*/}``),
which markdown-it-attrs, Python-Markdown's attr_list and react.dev's MDX all read as the
heading's id rather than as its text.
"""

from __future__ import annotations

import re
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.rules_block import StateBlock
from markdown_it.rules_core import StateCore
from mdit_py_plugins.admon import admon_plugin
from mdit_py_plugins.container import container_plugin
from mdit_py_plugins.deflist import deflist_plugin
from mdit_py_plugins.utils import is_code_block

_CONTAINER_NAME = re.compile(r"\s*[A-Za-z][\w-]*")
_TAB_LINE = re.compile(r'===[+!]?[ \t]+"(.*)"[ \t]*$')
_TRAILING_ATTRS = re.compile(r"[ \t]*\{([^{}\n]*)\}[ \t]*$")
# An id runs to the next space or brace: ``{#vue.js-privacy-policy}`` is that whole id, as
# markdown-it-attrs (VitePress) and Python-Markdown's attr_list read it, not id ``vue`` and
# class ``js-privacy-policy``.
_ATTR_TOKEN = re.compile(r"""\s*(#[^\s"'#]+|\.[^\s"'#.]+|[\w:-]+=(?:"[^"]*"|'[^']*'|[^\s"']+)|[\w:-]+)""")


def _container_validate(params: str, _markup: str) -> bool:
    """Any named fence: the site defines its own container names (tip, warning, details…)."""
    return _CONTAINER_NAME.match(params) is not None


def _tabbed(state: StateBlock, start_line: int, end_line: int, silent: bool) -> bool:
    """``=== "Label"`` followed by its body indented under it (pymdownx.tabbed)."""
    if is_code_block(state, start_line):
        return False
    start = state.bMarks[start_line] + state.tShift[start_line]
    line = state.src[start : state.eMarks[start_line]]
    match = _TAB_LINE.match(line)
    if match is None:
        return False
    if silent:
        return True
    old_parent, old_line_max, old_indent = state.parentType, state.lineMax, state.blkIndent
    state.parentType = "tab"
    state.blkIndent = state.sCount[start_line] + 4
    next_line, was_empty = start_line, False
    while True:
        next_line += 1
        if next_line >= end_line:
            break
        is_empty = state.sCount[next_line] < state.blkIndent
        if is_empty and was_empty:
            break
        was_empty = is_empty
        has_text = state.bMarks[next_line] + state.tShift[next_line] < state.eMarks[next_line]
        if has_text and state.sCount[next_line] < state.blkIndent:
            break
    state.lineMax = next_line
    token = state.push("tab_open", "div", 1)
    token.block = True
    token.markup = "==="
    token.info = match.group(1)
    token.map = [start_line, next_line]
    state.md.block.tokenize(state, start_line + 1, next_line)
    token = state.push("tab_close", "div", -1)
    token.block = True
    state.parentType, state.lineMax, state.blkIndent = old_parent, old_line_max, old_indent
    state.line = next_line
    return True


def parse_attributes(inner: str) -> tuple[bool, str | None]:
    """(is an attribute list, its id) for the text between a heading's trailing braces.

    ``/*id*/`` is an MDX comment used as the id; an empty comment is no id but still no text.
    """
    inner = inner.strip()
    if inner.startswith("/*") and inner.endswith("*/") and len(inner) >= 4:
        comment = inner[2:-2].strip()
        return True, comment if comment and not any(c.isspace() for c in comment) else None
    inner = inner.removeprefix(":").strip()  # Python-Markdown also reads ``{: #id }``
    if not inner:
        return False, None
    identifier: str | None = None
    position = 0
    while position < len(inner):
        match = _ATTR_TOKEN.match(inner, position)
        if match is None:
            return False, None
        token = match.group(1)
        if token.startswith("#"):
            identifier = token[1:]
        elif token.startswith("id="):
            identifier = token[3:].strip("\"'")
        position = match.end()
        while position < len(inner) and inner[position].isspace():
            position += 1
    return True, identifier


def _heading_attributes(state: StateCore) -> None:
    """Move a heading's trailing ``{…}`` into its token before inline parsing sees it as text."""
    tokens = state.tokens
    for index in range(1, len(tokens)):
        token = tokens[index]
        if token.type != "inline" or tokens[index - 1].type != "heading_open":
            continue
        match = _TRAILING_ATTRS.search(token.content)
        if match is None or match.start() > 0 and token.content[match.start() - 1] == "\\":
            continue
        is_attrs, identifier = parse_attributes(match.group(1))
        if not is_attrs:
            continue
        token.content = token.content[: match.start()].rstrip()
        if identifier:
            tokens[index - 1].attrSet("id", identifier)


def _inline_headings(state: StateCore) -> None:
    """markdown-it's inline stage, for headings only. A heading's text is read from its inline
    tree (its title, its slug); every other block is read from its source lines, so parsing
    the inline trees of paragraphs, lists and tables would cost half of a page's parse for
    nothing. The other inline tokens keep their content and get no children."""
    tokens = state.tokens
    for index, token in enumerate(tokens):
        if token.type != "inline":
            continue
        token.children = []
        if index and tokens[index - 1].type == "heading_open":
            state.md.inline.parse(token.content, state.md, state.env, token.children)


@lru_cache(maxsize=2)
def markdown_parser(mdx: bool = False) -> MarkdownIt:
    """Built once per dialect: plugin set-up costs more than parsing a page.

    MDX has no indented code (indentation there is JSX layout), so it is off for ``.mdx``.
    """
    md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    if mdx:
        md.disable("code")
    md.use(deflist_plugin)
    md.use(admon_plugin)
    md.use(container_plugin, name="any", validate=_container_validate)
    md.block.ruler.before(
        "fence", "tabbed", _tabbed, {"alt": ["paragraph", "reference", "blockquote", "list"]}
    )
    md.core.ruler.before("inline", "heading_attributes", _heading_attributes)
    md.core.ruler.at("inline", _inline_headings)
    return md
