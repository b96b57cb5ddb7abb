"""Chunks that fit the model's window: a document with a chunk too long for it is chunked again, smaller.

The chunker counts estimated tokens (words × 1.33); the model counts its own, and French, code
and URLs hold up to several model tokens per estimated one. A text past the window is not
refused by the local engine: it is split into windows whose vectors are averaged, a hidden
extra cost and a blurrier vector. So when the model can count (``token_count``), every
embedded text of a document is counted, and a document with one over the window is chunked
again with size and cap scaled down until each fits (the same bytes and model always give
the same chunks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from rag_pg.models import Chunk, Document
from rag_pg.source.chunk import MIN_MAX_TOKENS, Chunker
from rag_pg.source.tokens import embedding_text

# Scaled a little below the measured need: token density is uneven across a document.
_MARGIN = 0.9


@runtime_checkable
class CountsTokens(Protocol):
    """A provider that knows its model's window and tokenizer (the local model does)."""

    @property
    def window(self) -> int: ...

    def token_count(self, text: str) -> int: ...


def longest(chunks: list[Chunk], count: Callable[[str], int]) -> int:
    """The most model tokens any chunk of ``chunks`` embeds (0 for none)."""
    return max((count(embedding_text(c)) for c in chunks), default=0)


def fit(
    chunker: Chunker, document: Document, chunks: list[Chunk], *, count: Callable[[str], int],
    window: int,
) -> list[Chunk]:
    """``chunks`` when each embedded text fits ``window``; else the document chunked smaller.

    Stops at the chunker's smallest cap: a text that still does not fit then (one enormous
    token-dense word) keeps its extra windows rather than being cut mid-word.
    """
    need = longest(chunks, count)
    size, overlap, cap = chunker.size, chunker.overlap, chunker.max_tokens
    while need > window and cap > MIN_MAX_TOKENS:
        cap = max(MIN_MAX_TOKENS, min(cap - 1, int(cap * window / need * _MARGIN)))
        size = min(size, cap)
        overlap = min(overlap, size - 1)
        smaller = Chunker(size, overlap, max_tokens=cap, slug_style=chunker.slug_style)
        chunks = smaller.chunk(document)
        need = longest(chunks, count)
    return chunks


__all__ = ["CountsTokens", "fit", "longest"]
