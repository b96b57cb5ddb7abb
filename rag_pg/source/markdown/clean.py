"""Text without page scaffolding: HTML/JSX tags, comments and MDX comments, outside code.

Chunk content stays Markdown (lists, links, emphasis and fences keep their syntax, so the
model reads the structure); what goes is markup a reader never sees: tags (their inner
text is kept), ``<!-- comments -->``, MDX ``{/* comments */}``. Code spans and code blocks
are left exactly as written, since ``<div>`` inside backticks is the text itself.
"""

from __future__ import annotations

import re

# The token type of a ::: container block (markdown-it-py's container plugin, named "any").
CONTAINER = "container_any"

# A tag: a name, then attributes whose values may hold '>' inside quotes or JSX braces.
# Autolinks (``<https://…>``, ``<a@b.c>``) do not match: a name is followed by a space,
# '/' or '>'. A backslash-escaped '<' is literal text in Markdown and is kept.
_TAG = r"""(?<!\\)</?[A-Za-z][\w.:-]*(?:\s(?:"[^"]*"|'[^']*'|\{[^{}]*\}|[^<>"'{}])*)?/?>"""
_COMMENT = r"<!--[\s\S]*?-->"
_MDX_COMMENT = r"\{/\*[\s\S]*?\*/\}"
_CODE_SPAN = r"(`+)[^`]*\1(?!`)"
_MARKUP = re.compile(f"{_CODE_SPAN}|{_COMMENT}|{_MDX_COMMENT}|{_TAG}")
_TAG_ONLY = re.compile(f"{_COMMENT}|{_MDX_COMMENT}|{_TAG}")
_SCRIPT_OR_STYLE = re.compile(r"\s*<(script|style)\b", re.IGNORECASE)
_BLANK_RUNS = re.compile(r"\n[ \t]*(?:\n[ \t]*)+\n")
_ANCHOR_TAG = re.compile(
    r"""<a\s(?:[^<>]*?\s)?(?:id|name)\s*=\s*(?:"([^"]+)"|'([^']+)'|([^\s"'<>/]+))[^<>]*>""",
    re.IGNORECASE,
)
_ANCHOR_ONLY = re.compile(rf"\s*(?:{_ANCHOR_TAG.pattern})\s*(?:</a\s*>)?\s*", re.IGNORECASE)
_MARKERS_ONLY = re.compile(r"[\s>*+\-:|]*(?:\d+[.)])?[\s>*+\-:|]*")


def strip_markup(text: str) -> str:
    """``text`` without tags and comments; code spans kept; lines emptied by it removed."""
    if "<" not in text and "{/*" not in text:
        return text
    stripped = _MARKUP.sub(lambda m: m.group(0) if m.group(1) else "", text)
    if stripped == text:
        return text
    kept = [line for line in stripped.split("\n") if line.strip()]
    return "\n".join(line.rstrip() for line in kept)


def strip_all_tags(text: str) -> str:
    """An HTML block's text: every tag and comment removed, blank runs squeezed."""
    stripped = _TAG_ONLY.sub("", text)
    lines = [line.rstrip() for line in stripped.split("\n")]
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip("\n")


def is_script_or_style(html: str) -> bool:
    return _SCRIPT_OR_STYLE.match(html) is not None


def tag_only_lines(html: str) -> list[bool]:
    """For each line of an HTML block: nothing on it but tags, comments and spaces."""
    covered = bytearray(len(html))
    for match in _TAG_ONLY.finditer(html):
        covered[match.start() : match.end()] = b"\x01" * (match.end() - match.start())
    flags: list[bool] = []
    position = 0
    for line in html.split("\n"):
        end = position + len(line)
        flags.append(
            bool(line.strip())
            and all(covered[i] or html[i].isspace() for i in range(position, end))
        )
        position = end + 1
    return flags


def anchor_id(html: str) -> str | None:
    """The id (or name) of an ``<a id="…">`` / ``<a name="…">`` tag in ``html``."""
    match = _ANCHOR_TAG.search(html)
    if match is None:
        return None
    return match.group(1) or match.group(2) or match.group(3)


def is_anchor_only(html: str) -> bool:
    """An HTML block that is nothing but an ``<a id>`` target (it names the next heading)."""
    return _ANCHOR_ONLY.fullmatch(html) is not None


def only_markers(text: str) -> bool:
    """Nothing left but list, quote or table markers: the text said nothing."""
    return _MARKERS_ONLY.fullmatch(text) is not None
