"""Vectors kept across edits: a chunk whose embedded text and model are unchanged is not embedded again.

The text a chunk sends to the model (``tokens.embedding_text``) is its document's title, its
section and its content, and nothing else; the content is known by its SHA-256. Those three
and the model decide the vector, so any stored chunk of the collection with the same three
(in the edited document's previous version, or in another document) already holds it. A
group's texts are planned here: known vectors are taken as they are, each distinct new text
is sent once (a repeated passage is embedded once), and the vectors are put back in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from psycopg.rows import dict_row, scalar_row

from rag_pg.models import Chunk
from rag_pg.source.markdown.noise import quiet
from rag_pg.source.tokens import embedding_text
from rag_pg.store.queries import Queries

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import psycopg

    from rag_pg.store.documents import PreparedDocument

ReuseKey = tuple[str, str, str]  # (content hash, section, document title)


def reuse_key(chunk: Chunk) -> ReuseKey:
    """What decides the text ``chunk`` embeds (see ``tokens.embedding_text``)."""
    return (chunk.content_hash, chunk.section, chunk.document_title)


def chunk_watermark(conn: psycopg.Connection[Any], queries: Queries) -> int:
    """The highest chunk id now: the chunks written from here on are numbered above it."""
    with conn.cursor(row_factory=scalar_row) as cur:
        return int(cur.execute(queries("reuse_chunk_watermark")).fetchone() or 0)


def stored_vectors(
    conn: psycopg.Connection[Any], queries: Queries, collection: str, model: str,
    keys: Sequence[ReuseKey], *, after: int = 0,
) -> dict[ReuseKey, npt.NDArray[np.float32]]:
    """The stored vector of ``model`` for each key that has one in ``collection``, from a
    chunk numbered above ``after``: one query.

    Read in binary: the float32 values exactly as stored, no decimal round trip.
    """
    if not keys:
        return {}
    import numpy as np  # only once something is written: a no-change run never loads it

    params = {
        "collection": collection, "model": model, "after": after,
        "hashes": [k[0] for k in keys], "sections": [k[1] for k in keys],
        "titles": [k[2] for k in keys],
    }
    # In a transaction of its own (a savepoint in a caller's): a failed lookup costs only
    # the embeddings it would have saved, never the caller's transaction.
    with conn.transaction(), conn.cursor(binary=True, row_factory=dict_row) as cur:
        rows = cur.execute(queries("reuse_vectors"), params).fetchall()
    return {keys[int(row["i"]) - 1]: np.asarray(row["embedding"].to_numpy(), dtype=np.float32)
            for row in rows}


def group_keys(items: Sequence[PreparedDocument]) -> list[ReuseKey]:
    """The distinct keys of the chunks of ``items`` to look up among the stored vectors, in
    order of first appearance. A chunk holding a long URL or a blob is left out: a vector
    stored before such spans were embedded in their short form (parser version 3) was made
    of another text, and nothing stored tells the two apart; it is embedded again."""
    return list(dict.fromkeys(reuse_key(c) for item in items for c in item.chunks
                              if quiet(c.content) == c.content))


@dataclass(slots=True)
class EmbedPlan:
    """A group's chunks split into those whose vector is known and the texts to send."""

    texts: list[str] = field(default_factory=list)  # each distinct new text once, in order
    keys: list[ReuseKey] = field(default_factory=list)  # the key of each text
    tokens: int = 0  # estimated tokens of the chunks whose text is sent
    reused: int = 0  # chunks given a known vector, or the vector of a text sent for another

    @classmethod
    def of(
        cls, items: Sequence[PreparedDocument], known: Mapping[ReuseKey, Any]
    ) -> EmbedPlan:
        plan = cls()
        queued: set[ReuseKey] = set()
        for item in items:
            for chunk in item.chunks:
                key = reuse_key(chunk)
                if key in known or key in queued:
                    plan.reused += 1
                    continue
                queued.add(key)
                plan.keys.append(key)
                plan.texts.append(embedding_text(chunk))
                plan.tokens += chunk.token_count
        return plan

    def assign(
        self, items: Sequence[PreparedDocument], known: Mapping[ReuseKey, npt.NDArray[np.float32]],
        vectors: npt.NDArray[np.float32],
    ) -> dict[ReuseKey, npt.NDArray[np.float32]]:
        """Give every chunk of ``items`` its vector (``vectors`` answer ``texts`` in order);
        returns the new vectors by key, for the next group to reuse."""
        if len(vectors) != len(self.texts):
            raise ValueError(f"{len(self.texts)} texts but {len(vectors)} vectors")
        import numpy as np

        fresh = {key: vectors[n] for n, key in enumerate(self.keys)}
        for item in items:
            keys = (reuse_key(c) for c in item.chunks)
            item.vectors = np.stack([fresh[k] if k in fresh else known[k] for k in keys])
        return fresh


__all__ = ["EmbedPlan", "ReuseKey", "chunk_watermark", "group_keys", "reuse_key", "stored_vectors"]
