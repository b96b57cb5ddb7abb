"""Cut a parsed document into sections and packed, overlapping chunks the model can read.

Sections start at level 1–3 headings read from markdown-it's tokens (``rag_pg.source.markdown``);
deeper headings stay in the text. Blocks accumulate until the next would pass
``chunk.size``; a prose block larger than that is a chunk of its own up to the hard cap
``max_tokens``, and any other block (list, table, code) too large — or prose over the cap —
is split at its own boundaries. No chunk passes the cap, in estimated tokens or in
characters. The next chunk starts with an overlap tail: the previous chunk's last blocks or
sentences as written, line breaks kept, never a piece of a code block.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from rag_pg.errors import ConfigError
from rag_pg.models import Chunk, Document
from rag_pg.source.markdown import PARSER_VERSION
from rag_pg.source.markdown.noise import weight
from rag_pg.source.markdown.outline import Block, Heading, outline
from rag_pg.source.markdown.slugs import SlugStyle, check_style, github_slug
from rag_pg.source.markdown.split import Budget, Piece, split_block, trailing_sentences
from rag_pg.source.tokens import SEPARATOR, chunk_hash, estimate_tokens, max_words_within

__all__ = [
    "PARSER_VERSION",
    "ChunkSpan",
    "Chunker",
    "Section",
    "first_h1",
    "is_mdx",
    "slugify",
    "split_sections",
]

_SECTION_LEVELS = 3
# No real tokenizer gets fewer than ~3 characters a token; 6 leaves prose its word budget
# and still stops a minified line (one huge "word") from reaching the embedder whole.
CHARS_PER_TOKEN_CAP = 6
# The least cap that still holds one line of code between its two fence lines.
MIN_MAX_TOKENS = 8


def slugify(heading: str) -> str:
    """github-slugger's slug of a heading's text (the default anchor style)."""
    return github_slug(heading)


def is_mdx(path: str) -> bool:
    return path.lower().endswith(".mdx")


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    anchor: str
    paragraphs: tuple[str, ...]


def first_h1(body: str, mdx: bool = False) -> str | None:
    """The plain text of the first level-1 heading (the title fallback of parse)."""
    return outline(body, mdx).first_h1


def _sections(
    body: str, document_title: str, mdx: bool, style: SlugStyle
) -> list[tuple[str, str, list[Block]]]:
    sections: list[tuple[str, str, list[Block]]] = []
    title, anchor = document_title, ""
    blocks: list[Block] = []
    for item in outline(body, mdx, style).items:
        if isinstance(item, Heading):
            if item.level <= _SECTION_LEVELS:
                sections.append((title, anchor, blocks))
                title, anchor, blocks = item.title, item.anchor, []
                continue
            # A deeper heading is a line of its section's text.
            item = Block("prose", item.start, item.end, f"{'#' * item.level} {item.title}")
        blocks.append(item)
    sections.append((title, anchor, blocks))
    return sections


def split_sections(
    body: str, document_title: str, mdx: bool = False, style: SlugStyle = "github"
) -> list[Section]:
    """Sections in document order, the preamble first (possibly with no paragraphs)."""
    return [
        Section(title, anchor, tuple(block.text for block in blocks))
        for title, anchor, blocks in _sections(body, document_title, mdx, style)
    ]


@dataclass(frozen=True, slots=True)
class ChunkSpan:
    """A chunk and the file lines it was read from (1-based, inclusive)."""

    chunk: Chunk
    first_line: int
    last_line: int


@dataclass(slots=True)
class _Pack:
    tail: str
    tail_words: int
    tail_start: int
    pieces: list[Piece]
    words: int = 0
    chars: int = 0

    def add(self, piece: Piece) -> None:
        self.pieces.append(piece)
        self.words += piece.words
        self.chars += weight(piece.text) + len(SEPARATOR)

    def text(self) -> str:
        parts = ([self.tail] if self.tail else []) + [piece.text for piece in self.pieces]
        return SEPARATOR.join(parts)

    def span(self) -> tuple[int, int]:
        start = self.pieces[0].start
        if self.tail:
            start = min(start, self.tail_start)
        return start, max(piece.end for piece in self.pieces)


class Chunker:
    """Packs pieces greedily; token counts are kept as word sums so packing stays linear."""

    def __init__(
        self,
        size: int,
        overlap: int,
        max_tokens: int | None = None,
        slug_style: str = "github",
    ):
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ConfigError(f"chunk.size must be a positive integer, got {size!r}")
        if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < size:
            raise ConfigError(
                f"chunk.overlap must be an integer with 0 <= overlap < chunk.size ({size}), "
                f"got {overlap!r}"
            )
        cap = max(2 * size, MIN_MAX_TOKENS) if max_tokens is None else max_tokens
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < max(size, MIN_MAX_TOKENS):
            raise ConfigError(
                f"chunk.max_tokens must be an integer >= chunk.size ({size}) and >= "
                f"{MIN_MAX_TOKENS}, got {max_tokens!r}"
            )
        try:
            self.slug_style = check_style(slug_style)
        except ValueError as error:
            raise ConfigError(f"source.anchor_style: {error}") from None
        self.size = size
        self.overlap = overlap
        self.max_tokens = cap
        self._budget = Budget(
            max(1, max_words_within(size)), max(1, max_words_within(cap)), cap * CHARS_PER_TOKEN_CAP
        )
        self._overlap_words = max_words_within(overlap)

    def __repr__(self) -> str:
        return (
            f"Chunker(size={self.size}, overlap={self.overlap}, max_tokens={self.max_tokens}, "
            f"slug_style={self.slug_style!r})"
        )

    def chunk(self, document: Document) -> list[Chunk]:
        return [span.chunk for span in self.chunk_spans(document)]

    def chunk_spans(self, document: Document) -> list[ChunkSpan]:
        """Chunks with the lines of the file they were read from (``body_line`` counts the
        front-matter)."""
        first_line = document.body_line
        sections = _sections(document.content, document.title, is_mdx(document.path), self.slug_style)
        spans: list[ChunkSpan] = []
        for title, anchor, blocks in sections:
            for pack in self._pack(blocks):
                text = pack.text()
                start, end = pack.span()
                chunk = Chunk(
                    document_path=document.path,
                    document_title=document.title,
                    section=title,
                    anchor=anchor,
                    position=len(spans),
                    content=text,
                    token_count=estimate_tokens(text),
                    content_hash=chunk_hash(title, text),
                    line_start=first_line + start, line_end=first_line + end - 1,
                )
                spans.append(ChunkSpan(chunk, first_line + start, first_line + end - 1))
        return spans

    def _pack(self, blocks: list[Block]) -> Iterator[_Pack]:
        size = self._budget.size
        current: _Pack | None = None
        for block in blocks:
            for piece in split_block(block, self._budget):
                if current is not None and current.words + piece.words <= size and (
                    current.chars + weight(piece.text) <= self._budget.chars
                ):
                    current.add(piece)
                    continue
                if current is not None:
                    yield current
                tail, tail_words, tail_start = self._tail(current, piece)
                current = _Pack(tail, tail_words, tail_start, [], tail_words, weight(tail) + 2)
                current.add(piece)
        if current is not None:
            yield current

    def _tail(self, previous: _Pack | None, piece: Piece) -> tuple[str, int, int]:
        """The previous chunk's last pieces or sentences, as written, that fit before ``piece``.

        Only whole pieces (a code piece carries both its fence lines) or whole sentences of
        prose, so a tail never opens a fence it does not close.
        """
        if previous is None or piece.words > self._budget.size:
            return "", 0, 0
        room = min(self._overlap_words, self._budget.size - piece.words)
        room_chars = self._budget.chars - weight(piece.text) - 2
        taken: list[Piece] = []
        words = 0
        for candidate in reversed(previous.pieces):
            if words + candidate.words <= room and sum(weight(p.text) for p in taken) + weight(
                candidate.text
            ) <= room_chars - 2 * len(taken):
                taken.insert(0, candidate)
                words += candidate.words
                continue
            if candidate.prose and not taken:
                sentences = trailing_sentences(candidate.text, room)
                if sentences and weight(sentences) <= room_chars:
                    return sentences, len(sentences.split()), candidate.end - 1
            break
        if not taken:
            return "", 0, 0
        text = SEPARATOR.join(p.text for p in taken)
        return text, words, taken[0].start
