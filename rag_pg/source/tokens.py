"""Token counts as the chunker estimates them, and the text a chunk is embedded as: the light
part of chunking that the embedding clients and the services need, without the parser."""

from __future__ import annotations

import hashlib

from rag_pg.models import Chunk
from rag_pg.source.markdown.noise import quiet

SEPARATOR = "\n\n"  # between a chunk's pieces, and between its context and its content
_CONTEXT_SEPARATOR = " › "


def estimate_tokens(text: str) -> int:
    """Integer arithmetic so that ``ceil(words × 1.33)`` never drifts with float rounding."""
    return tokens_for_words(len(text.split()))


def tokens_for_words(words: int) -> int:
    return (words * 133 + 99) // 100


def max_words_within(tokens: int) -> int:
    """Largest word count ``w`` with ``ceil(w × 1.33) <= tokens`` (0 when tokens < 2)."""
    if tokens <= 0:
        return 0
    words = tokens * 100 // 133
    while tokens_for_words(words + 1) <= tokens:
        words += 1
    while words > 0 and tokens_for_words(words) > tokens:
        words -= 1
    return words


def context_prefix(chunk: Chunk) -> str:
    """Where the chunk sits, so that its vector knows the document and section it belongs to."""
    if chunk.section == chunk.document_title:
        return chunk.document_title
    return f"{chunk.document_title}{_CONTEXT_SEPARATOR}{chunk.section}"


def embedding_text(chunk: Chunk) -> str:
    """The text sent to the embedder; the stored ``content`` stays the chunk alone, as written.
    Long URLs, data URIs and blobs go in their short form (``noise.quiet``): they are not
    what the passage means, and a model would spend its window on them."""
    return f"{context_prefix(chunk)}{SEPARATOR}{quiet(chunk.content)}"


def chunk_hash(section: str, content: str) -> str:
    """A chunk's ``content_hash``: its section and its text, what its vector and keywords are
    made of with the document's title (``ragpg check`` recomputes it in SQL)."""
    return hashlib.sha256(f"{section}\n{content}".encode()).hexdigest()
