"""Cut a parsed document into sections, paragraphs and packed, overlapping chunks (SPEC §2.3)."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

from rag_pg.errors import ConfigError
from rag_pg.models import Chunk, Document

# CommonMark allows up to three spaces before a heading or a fence; four make indented code.
_HEADING = re.compile(r" {0,3}(#{1,3})[ \t]+(.*)$")
_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})(.*)$")
# A closing sequence of '#' only counts when separated from the text by a space (`# C#` keeps '#').
_CLOSING_HASHES = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_SEPARATOR = "\n\n"
_CONTEXT_SEPARATOR = " › "


def estimate_tokens(text: str) -> int:
    """Integer arithmetic so that ``ceil(words × 1.33)`` never drifts with float rounding."""
    return _tokens_for_words(len(text.split()))


def _tokens_for_words(words: int) -> int:
    return (words * 133 + 99) // 100


def _max_words_within(tokens: int) -> int:
    """Largest word count ``w`` with ``ceil(w × 1.33) <= tokens`` (0 when tokens < 2)."""
    if tokens <= 0:
        return 0
    words = tokens * 100 // 133
    while _tokens_for_words(words + 1) <= tokens:
        words += 1
    while words > 0 and _tokens_for_words(words) > tokens:
        words -= 1
    return words


def slugify(heading: str) -> str:
    """GitHub-compatible anchor with accents kept, so links written by hand keep working.

    Letters (with their combining marks), decimal digits, ``-``, ``_`` and ASCII spaces
    survive; every other character is removed; the result is trimmed and each space
    becomes ``-`` (two spaces give ``--``, as on GitHub).
    """
    kept = []
    for char in heading.lower():
        if char in "-_ ":
            kept.append(char)
            continue
        category = unicodedata.category(char)
        if category[0] in "LM" or category == "Nd":
            kept.append(char)
    return "".join(kept).strip(" ").replace(" ", "-")


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    anchor: str
    paragraphs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Heading:
    level: int
    text: str


def _heading(line: str) -> _Heading | None:
    match = _HEADING.match(line)
    if match is None:
        return None
    text = _CLOSING_HASHES.sub("", match.group(2)).strip()
    if not text:
        # An empty heading has no title to cite and no anchor: keep it as text.
        return None
    return _Heading(len(match.group(1)), text)


def _fence_opening(line: str) -> str | None:
    match = _FENCE_OPEN.match(line)
    if match is None:
        return None
    fence = match.group(1)
    if fence[0] == "`" and "`" in match.group(2):
        return None  # CommonMark: a backtick fence's info string may not contain a backtick.
    return fence


def _closes(line: str, fence: str) -> bool:
    stripped = line.lstrip(" ")
    if len(line) - len(stripped) > 3:
        return False
    run = len(stripped) - len(stripped.lstrip(fence[0]))
    return run >= len(fence) and not stripped[run:].strip(" \t")


def _blocks(body: str) -> Iterator[_Heading | str]:
    """Headings and paragraphs in order; a fenced block, fences included, is one paragraph.

    A fence left open runs to the end of the body, so no ``#`` line after it is a heading.
    """
    lines: list[str] = []
    fence: str | None = None
    for line in body.split("\n"):
        if fence is not None:
            lines.append(line)
            if _closes(line, fence):
                yield "\n".join(lines)
                lines, fence = [], None
            continue
        marker = line[:4].lstrip(" ")[:1]  # only '#', '`' and '~' can open a block
        opening = _fence_opening(line) if marker in ("`", "~") else None
        if opening is not None:
            if lines:
                yield "\n".join(lines)
            lines, fence = [line], opening
            continue
        heading = _heading(line) if marker == "#" else None
        if heading is not None:
            if lines:
                yield "\n".join(lines)
                lines = []
            yield heading
        elif line.strip():
            lines.append(line)
        elif lines:
            yield "\n".join(lines)
            lines = []
    if lines:
        yield "\n".join(lines)


def first_h1(body: str) -> str | None:
    """The text of the first level-1 heading outside fenced code (the title fallback of parse)."""
    for block in _blocks(body):
        if isinstance(block, _Heading) and block.level == 1:
            return block.text
    return None


class _Anchors:
    """GitHub's slugger: a repeated slug gets ``-1``, ``-2``…; '' is the preamble's."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {"": 0}

    def unique(self, slug: str) -> str:
        result = slug
        while result in self._seen:
            self._seen[slug] += 1
            result = f"{slug}-{self._seen[slug]}"
        self._seen[result] = 0
        return result


def split_sections(body: str, document_title: str) -> list[Section]:
    """Sections in document order, the preamble first (possibly with no paragraphs)."""
    anchors = _Anchors()
    sections: list[Section] = []
    title, anchor = document_title, ""
    paragraphs: list[str] = []
    for block in _blocks(body):
        if isinstance(block, _Heading):
            sections.append(Section(title, anchor, tuple(paragraphs)))
            title, anchor, paragraphs = block.text, anchors.unique(slugify(block.text)), []
        else:
            paragraphs.append(block)
    sections.append(Section(title, anchor, tuple(paragraphs)))
    return sections


def _join(tail: list[str], paragraphs: list[str]) -> str:
    # The tail is set apart by a blank line so that a following fence still opens a line.
    parts = ([" ".join(tail)] if tail else []) + paragraphs
    return _SEPARATOR.join(parts)


class Chunker:
    """Packs paragraphs greedily; token counts are kept as word sums so packing stays linear."""

    def __init__(self, size: int, overlap: int):
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ConfigError(f"chunk.size must be a positive integer, got {size!r}")
        if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < size:
            raise ConfigError(
                f"chunk.overlap must be an integer with 0 <= overlap < chunk.size ({size}), "
                f"got {overlap!r}"
            )
        self.size = size
        self.overlap = overlap
        self._size_words = _max_words_within(size)
        self._overlap_words = _max_words_within(overlap)

    def __repr__(self) -> str:
        return f"Chunker(size={self.size}, overlap={self.overlap})"

    def chunk(self, document: Document) -> list[Chunk]:
        contents: list[tuple[Section, str, int]] = []
        for section in split_sections(document.content, document.title):
            contents.extend((section, *packed) for packed in self._pack(section.paragraphs))
        return [
            Chunk(
                document_path=document.path,
                document_title=document.title,
                section=section.title,
                anchor=section.anchor,
                position=position,
                content=text,
                token_count=_tokens_for_words(words),
                content_hash=hashlib.sha256(text.encode("utf-8")).hexdigest(),
            )
            for position, (section, text, words) in enumerate(contents)
        ]

    def _pack(self, paragraphs: tuple[str, ...]) -> Iterator[tuple[str, int]]:
        """(content, word count) of each chunk of one section."""
        previous: list[str] = []  # words of the last emitted chunk, the source of the next tail
        tail: list[str] = []
        current: list[str] = []
        current_words = 0  # words of tail + current
        for paragraph in paragraphs:
            words = paragraph.split()
            if current and current_words + len(words) <= self._size_words:
                current.append(paragraph)
                current_words += len(words)
                continue
            if current:
                emitted = _join(tail, current)
                yield emitted, current_words
                previous, current = emitted.split(), []
            if len(words) > self._size_words:
                # Oversized: a chunk of its own, never cut, with no tail in front of it.
                yield paragraph, len(words)
                previous = words
                continue
            tail = self._tail(previous, len(words))
            current, current_words = [paragraph], len(tail) + len(words)
        if current:
            yield _join(tail, current), current_words

    def _tail(self, previous: list[str], next_words: int) -> list[str]:
        """Last words of the previous chunk, shrunk so that tail + next paragraph fits ``size``."""
        count = min(self._overlap_words, len(previous), max(0, self._size_words - next_words))
        return previous[len(previous) - count :] if count else []


def context_prefix(chunk: Chunk) -> str:
    """Where the chunk sits, so that its vector knows the document and section it belongs to."""
    if chunk.section == chunk.document_title:
        return chunk.document_title
    return f"{chunk.document_title}{_CONTEXT_SEPARATOR}{chunk.section}"


def embedding_text(chunk: Chunk) -> str:
    """The text sent to the embedder; the stored ``content`` stays the chunk alone."""
    return f"{context_prefix(chunk)}{_SEPARATOR}{chunk.content}"
