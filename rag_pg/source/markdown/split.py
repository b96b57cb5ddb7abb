"""Blocks too large for one chunk, split at their own boundaries into pieces that fit.

A list splits between its items, a table between its rows (each piece keeps the header, so
it is still a table), a code block between its lines (each piece keeps its fence lines, so
it is still a code block), prose between sentences, and a sentence between words; a word
longer than the character cap is cut by characters. Pieces of one block are grouped back
up to the chunk size, joined as the source joined them. Characters are counted by their
``noise.weight``: a long URL or a blob weighs its short form, so it is neither cut up nor
left alone in a chunk.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rag_pg.source.markdown.noise import weight
from rag_pg.source.markdown.outline import Block

_SENTENCE_END = re.compile(r"(?<=[.!?…:;])[\"'»”)\]]*\s+|\n")
_WORD = re.compile(r"\S+\s*")
_FENCE_RUN = re.compile(r"\s*(?:(?:[-*+>]|\d+[.)])\s*)*(?:`{3,}|~{3,})")
_PROSE = frozenset({"prose", "title", "row"})


@dataclass(frozen=True, slots=True)
class Piece:
    """Text of one or more source lines; ``prose`` pieces may give a tail at a sentence."""

    text: str
    words: int
    start: int
    end: int
    prose: bool


@dataclass(frozen=True, slots=True)
class Budget:
    size: int  # words a packed chunk may hold
    cap: int  # words no chunk may pass
    chars: int  # characters no chunk may pass (a minified line is one huge "word")


def _piece(text: str, start: int, end: int, prose: bool) -> Piece:
    return Piece(text, len(text.split()), start, end, prose)


def split_block(block: Block, budget: Budget) -> Iterator[Piece]:
    """The block whole when it fits (prose up to the cap), else pieces of at most ``size``."""
    words = len(block.text.split())
    prose = block.kind in _PROSE
    limit = budget.cap if prose else budget.size
    if words <= limit and weight(block.text) <= budget.chars:
        yield Piece(block.text, words, block.start, block.end, prose)
    elif block.kind == "code":
        yield from map(_dedented, _code(block, budget))
    elif block.kind == "table":
        yield from _grouped(_rows(block, budget), budget, head=block.head)
    elif block.parts:
        inner = [piece for part in block.parts for piece in split_block(part, budget)]
        yield from map(_dedented, _grouped(inner, budget))
    else:
        yield from _prose(block.text, block.start, block.end, budget)


def _dedented(piece: Piece) -> Piece:
    """A piece cut out of a list item loses the indent it shared, or it would read as code."""
    text = textwrap.dedent(piece.text)
    return piece if text == piece.text else Piece(text, piece.words, piece.start, piece.end, piece.prose)


def _grouped(pieces: Sequence[Piece], budget: Budget, head: str = "") -> Iterator[Piece]:
    """Consecutive pieces joined while they fit ``size``; ``head`` opens every group."""
    head_words = len(head.split())
    group: list[Piece] = []
    words = head_words
    for piece in pieces:
        fits = words + piece.words <= budget.size and _chars(group, head) + weight(piece.text) < budget.chars
        if group and not fits:
            yield _merge(group, head)
            group, words = [], head_words
        if not group and head and (
            head_words + piece.words > budget.size or len(head) + weight(piece.text) >= budget.chars
        ):
            yield piece  # no room for the header beside this one: it goes alone
            continue
        group.append(piece)
        words += piece.words
    if group:
        yield _merge(group, head)


def _chars(group: list[Piece], head: str) -> int:
    return len(head) + sum(weight(piece.text) + 2 for piece in group)


def _merge(group: list[Piece], head: str) -> Piece:
    texts: list[str] = [head] if head else []
    for index, piece in enumerate(group):
        if index and piece.start > group[index - 1].end:
            texts.append("")  # the blank line the source had between them
        texts.append(piece.text)
    return _piece("\n".join(texts), group[0].start, group[-1].end, all(p.prose for p in group))


def _rows(block: Block, budget: Budget) -> list[Piece]:
    room = Budget(budget.size - len(block.head.split()), budget.cap, budget.chars - len(block.head))
    pieces: list[Piece] = []
    for row in block.parts:
        if len(row.text.split()) <= room.size and len(row.text) < room.chars:
            pieces.append(_piece(row.text, row.start, row.end, True))
        else:
            pieces.extend(_prose(row.text, row.start, row.end, budget))
    return pieces


def _code(block: Block, budget: Budget) -> Iterator[Piece]:
    """Groups of lines, each fenced by the block's own fence lines."""
    lines = block.text.split("\n")[1:-1]
    head, tail = block.head, block.tail
    if len(head.split()) + len(tail.split()) >= budget.cap or len(head) + len(tail) + 16 > budget.chars:
        match = _FENCE_RUN.match(head)
        head = match.group(0) if match else "```"  # the info string gives way to the code
    frame = len(head.split()) + len(tail.split())
    room = Budget(max(1, budget.size - frame), budget.cap, max(1, budget.chars - len(head) - len(tail) - 2))
    group: list[str] = []
    words = 0
    chars = 0
    first = block.start + 1

    def fenced(body: list[str], start: int, end: int) -> Piece:
        return _piece("\n".join([head, *body, tail]), start, end, False)

    for offset, line in enumerate(lines):
        line_number = block.start + 1 + offset
        line_words = len(line.split())
        if group and (words + line_words > room.size or chars + weight(line) + 1 > room.chars):
            yield fenced(group, first, line_number)
            group, words, chars = [], 0, 0
        if not group:
            first = line_number
        if line_words > room.size or weight(line) + 1 > room.chars:
            for part in _cut_words(line, room):
                yield fenced([part], line_number, line_number + 1)
            continue
        group.append(line)
        words += line_words
        chars += weight(line) + 1
    if group:
        yield fenced(group, first, block.end)


def _prose(text: str, start: int, end: int, budget: Budget) -> Iterator[Piece]:
    """Sentences grouped up to ``size``; a sentence too long, its words; a word, its characters."""
    sentences: list[str] = []
    position = 0
    for match in _SENTENCE_END.finditer(text):
        if match.end() > position:
            sentences.append(text[position : match.end()])
            position = match.end()
    if position < len(text):
        sentences.append(text[position:])
    group = ""
    group_words = group_chars = 0  # kept as sums, so a paragraph of many sentences stays linear
    for sentence in sentences:
        words, chars = len(sentence.split()), weight(sentence)
        if words > budget.size or chars > budget.chars:
            if group.strip():
                yield _piece(group.rstrip(), start, end, True)
            group, group_words, group_chars = "", 0, 0
            for part in _cut_words(sentence, budget):
                yield _piece(part, start, end, True)
            continue
        if group and (group_words + words > budget.size or group_chars + chars > budget.chars):
            yield _piece(group.rstrip(), start, end, True)
            group, group_words, group_chars = "", 0, 0
        group += sentence
        group_words += words
        group_chars += chars
    if group.strip():
        yield _piece(group.rstrip(), start, end, True)


def _cut_words(text: str, budget: Budget) -> Iterator[str]:
    """Runs of whole words of at most ``size`` words; a word over ``chars`` cut by characters."""
    group = ""
    count = chars = 0
    for match in _WORD.finditer(text):
        word = match.group(0)
        while weight(word.rstrip()) > budget.chars:
            if group.strip():
                yield group.rstrip()
            group, count, chars = "", 0, 0
            yield word[: budget.chars]
            word = word[budget.chars :]
        if group and (count + 1 > budget.size or chars + weight(word) > budget.chars):
            yield group.rstrip()
            group, count, chars = "", 0, 0
        group += word
        count += 1 if word.strip() else 0
        chars += weight(word)
    if group.strip():
        yield group.rstrip()


def trailing_sentences(text: str, words: int) -> str:
    """The last whole sentences of ``text`` within ``words`` words, as written (or '')."""
    if words <= 0:
        return ""
    starts = [0] + [match.end() for match in _SENTENCE_END.finditer(text) if match.end() < len(text)]
    for start in starts:
        tail = text[start:].strip()
        if tail and len(tail.split()) <= words:
            return tail
    return ""
