"""Heading anchors the way each site renderer makes them, so ``path#anchor`` opens the section.

Three renderers cover most documentation sites:

- ``github``: github-slugger (GitHub, Docusaurus, Astro/Starlight, rehype-slug). Lower-cased,
  every code point outside the package's kept set removed, each space turned to ``-``, no
  trimming; a repeated slug gets ``-1``, ``-2``…; explicit ids are not counted.
- ``vitepress``: ``@mdit-vue/shared``'s slugify under markdown-it-anchor. NFKD, accents and
  control characters removed, runs of punctuation and spaces become one ``-``, trimmed, a
  leading digit prefixed with ``_``, lower-cased; repeats get ``-1``, ``-2``…, and explicit ids
  take part in the count.
- ``mkdocs``: Python-Markdown's ``toc.slugify`` (MkDocs, mkdocs-material). Reduced to ASCII,
  ``[^\\w\\s-]`` removed, trimmed and lower-cased, runs of ``-`` and spaces become one ``-``;
  repeats get ``_1``, ``_2``…, and a computed slug never takes an id given explicitly anywhere
  in the page.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import Literal

from rag_pg.source.markdown._github_kept import KEPT_RANGES

SlugStyle = Literal["github", "vitepress", "mkdocs"]
SLUG_STYLES: tuple[SlugStyle, ...] = ("github", "vitepress", "mkdocs")

_KEPT_STARTS = tuple(start for start, _ in KEPT_RANGES)


def _github_kept(char: str) -> bool:
    code = ord(char)
    if code < 128:  # the common case, without a search
        return char.isalnum() or char in "-_ "
    index = bisect.bisect_right(_KEPT_STARTS, code) - 1
    return index >= 0 and code <= KEPT_RANGES[index][1]


def github_slug(text: str) -> str:
    return "".join(char for char in text.lower() if _github_kept(char)).replace(" ", "-")


_VP_CONTROL = re.compile("[\u0000-\u001f]")
_VP_SPECIAL = re.compile(r"[\s~`!@#$%^&*()\-_+=\[\]{}|\\;:\"'“”‘’<>,.?/]+")
_VP_COMBINING = re.compile("[\u0300-\u036f]")
_VP_DASHES = re.compile("-{2,}")
_VP_EDGES = re.compile("^-+|-+$")
_VP_LEADING_DIGIT = re.compile(r"^(\d)")


def vitepress_slug(text: str) -> str:
    # JavaScript's \s and \d: Python's str patterns agree on the characters headings use.
    value = unicodedata.normalize("NFKD", text)
    value = _VP_COMBINING.sub("", value)
    value = _VP_CONTROL.sub("", value)
    value = _VP_SPECIAL.sub("-", value)
    value = _VP_DASHES.sub("-", value)
    value = _VP_EDGES.sub("", value)
    value = _VP_LEADING_DIGIT.sub(r"_\1", value, count=1)
    return value.lower()


_MK_STRIP = re.compile(r"[^\w\s-]")
_MK_SEPARATORS = re.compile(r"[-\s]+")
_MK_COUNTED = re.compile(r"^(.*)_([0-9]+)$")


def mkdocs_slug(text: str) -> str:
    value = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    value = _MK_STRIP.sub("", value).strip().lower()
    return _MK_SEPARATORS.sub("-", value)


SLUGIFIERS: dict[SlugStyle, Callable[[str], str]] = {
    "github": github_slug,
    "vitepress": vitepress_slug,
    "mkdocs": mkdocs_slug,
}


def check_style(style: str) -> SlugStyle:
    """The style itself, or ValueError naming the ones that exist."""
    for known in SLUG_STYLES:
        if style == known:
            return known
    raise ValueError(f"unknown anchor style {style!r} (expected one of {', '.join(SLUG_STYLES)})")


def _dash_unique(slug: str, seen: dict[str, int]) -> str:
    """github-slugger and markdown-it-anchor: ``slug``, then ``slug-1``, ``slug-2``…"""
    result = slug
    count = seen.get(slug, 0)
    while result in seen:
        count += 1
        result = f"{slug}-{count}"
    seen[slug] = count
    seen.setdefault(result, 0)
    return result


def _anchor_unique(slug: str, seen: dict[str, int]) -> str:
    """markdown-it-anchor: ``slug``, else the first free ``slug-1``, ``slug-2``…"""
    result, index = slug, 1
    while result in seen:
        result, index = f"{slug}-{index}", index + 1
    seen[result] = 0
    return result


def _underscore_unique(slug: str, used: set[str]) -> str:
    """Python-Markdown's ``toc.unique``: ``slug_1``, then ``slug_2``…; never empty."""
    while slug in used or not slug:
        match = _MK_COUNTED.match(slug)
        slug = f"{match.group(1)}_{int(match.group(2)) + 1}" if match else f"{slug}_1"
    used.add(slug)
    return slug


def assign_anchors(headings: Sequence[tuple[str | None, str]], style: SlugStyle) -> list[str]:
    """The anchor of every heading of one page, in order: (explicit id or None, rendered text).

    All of a page's headings must be given, deepest levels included, since each one takes
    its place in the renderer's count of repeated slugs.
    """
    slugify = SLUGIFIERS[style]
    anchors: list[str] = []
    if style == "mkdocs":
        used = {explicit for explicit, _ in headings if explicit}
        for explicit, text in headings:
            anchors.append(explicit or _underscore_unique(slugify(text), used))
        return anchors
    seen: dict[str, int] = {}
    for explicit, text in headings:
        if explicit:
            if style == "vitepress":
                seen.setdefault(explicit, 0)
            anchors.append(explicit)
        elif style == "vitepress":
            anchors.append(_anchor_unique(slugify(text), seen))
        else:
            anchors.append(_dash_unique(slugify(text), seen))
    return anchors
