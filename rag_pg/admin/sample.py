"""``ragpg check --sample N``: N chunks drawn at random are embedded again and compared with
their stored vectors. The SQL checks see a text that changed; only this sees a vector that is
not its chunk's (vectors swapped between two chunks, written for another text)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg.rows import class_row

from rag_pg.embed import serving
from rag_pg.embed.base import EmbeddingProvider
from rag_pg.models import Chunk
from rag_pg.source.tokens import embedding_text
from rag_pg.store.integrity import SAMPLE_UNCHECKED, Problem
from rag_pg.store.queries import Queries

#: Cosine similarity below which a stored vector is not its chunk's: the same text through
#: the same model gives the same vector up to float32 rounding (a service batching texts
#: differently moves it by far less than this).
SAME_TEXT = 0.99


@dataclass(frozen=True, slots=True)
class _Sampled:
    path: str
    title: str
    position: int
    section: str
    anchor: str
    content: str
    token_count: int
    content_hash: str
    model: str
    dimension: int
    embedding: list[float]


def sample_vectors(conn: psycopg.Connection[Any], q: Queries, provider: EmbeddingProvider,
                   n: int) -> list[Problem]:
    """The sampled chunks whose stored vector is not their text's, as problems."""
    with conn.cursor(row_factory=class_row(_Sampled)) as cur:
        rows = cur.execute(q("check_sample"), {"n": n}).fetchall()
    problems: list[Problem] = []
    for row in rows:
        model = serving(provider, row.model, row.dimension)
        if model is None:
            problems.append(Problem(SAMPLE_UNCHECKED, "the configured embedder does not make"
                                    " this collection's vectors", row.path, f"model {row.model}"))
            continue
        chunk = Chunk(document_path=row.path, document_title=row.title, section=row.section,
                      anchor=row.anchor, position=row.position, content=row.content,
                      token_count=row.token_count, content_hash=row.content_hash)
        fresh = model.embed("passage", [embedding_text(chunk)])[0]
        stored = np.asarray(row.embedding, dtype=np.float32)
        cosine = float(fresh @ stored / (np.linalg.norm(fresh) * np.linalg.norm(stored)))
        if cosine < SAME_TEXT:
            problems.append(Problem("vector_mismatch", "a chunk's stored vector is not its"
                                    " text's (embedded again)", row.path,
                                    f"chunk {row.position}: cosine {cosine:.3f}"))
    return problems
