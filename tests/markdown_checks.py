"""What a chunk must never be: unbalanced code, code squeezed into prose, scaffolding only.

Shared by the tests and the real-documents benchmark, so both judge chunks the same way.
"""

from __future__ import annotations

import re

from rag_pg.source.markdown.clean import strip_markup
from rag_pg.source.markdown.dialects import markdown_parser

# Markup a title must not keep: id syntax, MDX comments, backslash escapes, emphasis markers.
# (A tag may be a title's own text — ``<Image />`` written as code — so tags are judged by
# comparing with the renderer's heading text instead.)
DIRTY_TITLE = re.compile(r"\{\s*[#:./]|\{/\*|\\[\\`*_{}\[\]()#+\-.!<>]|\*\*|__")
_LINE_PREFIX = re.compile(r"^\s*(?:(?:[-*+>]|\d+[.)])\s+)*")
_ESM_LINE = re.compile(r"^(?:import|export)\b.*$", re.MULTILINE)
_WORD = re.compile(r"\w")


def balanced(text: str, mdx: bool = False) -> bool:
    """Every fence markdown-it finds in the chunk is closed in it (containers understood)."""
    lines = text.split("\n")
    for token in markdown_parser(mdx).parse(text):
        if token.type != "fence" or token.map is None:
            continue
        start, end = token.map
        closing = lines[end - 1].strip().lstrip(">").strip() if end - 1 > start else ""
        if not closing or set(closing) != {token.markup[0]} or len(closing) < len(token.markup):
            return False
    return True


def mid_line_fences(text: str) -> int:
    """Lines where a fence run follows text on the same line: code squeezed into prose."""
    count = 0
    for line in text.split("\n"):
        rest = _LINE_PREFIX.sub("", line)
        position = rest.find("```")
        if position > 0 and rest[position - 1] not in "`\\":
            count += 1
    return count


def scaffolding_only(text: str, mdx: bool = False) -> bool:
    """Nothing a reader would see: only tags, comments or (MDX) import/export lines."""
    if mdx:
        text = _ESM_LINE.sub("", text)
    return _WORD.search(strip_markup(text)) is None


def prose_lines(text: str, mdx: bool = False) -> list[str]:
    """The chunk's lines outside code blocks (where markup examples are the text itself)."""
    lines = text.split("\n")
    code = bytearray(len(lines))
    for token in markdown_parser(mdx).parse(text):
        if token.type in ("fence", "code_block") and token.map is not None:
            start, end = token.map
            code[start:end] = b"\x01" * (end - start)
    return [line for line, in_code in zip(lines, code, strict=True) if not in_code]
