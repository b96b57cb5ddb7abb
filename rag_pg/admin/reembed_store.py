"""The table access of a model switch: the chunks still lacking the new model's vectors, the
vectors added beside the old ones, the switch itself and the old vectors' removal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row, scalar_row

from rag_pg.errors import StoreError
from rag_pg.models import Chunk
from rag_pg.store.documents import Store

if TYPE_CHECKING:
    import numpy as np


class ReembedStore(Store):
    """A :class:`Store` with the writes of ``ragpg reembed`` (``rag_pg.admin.reembed``)."""

    def pending_vectors(self, conn: psycopg.Connection[Any], collection: str, model: str) -> int:
        """Chunks of embedding documents that still lack a vector of ``model``."""
        with conn.cursor(row_factory=scalar_row) as cur:
            count = cur.execute(
                self.q("reembed_pending_count"), {"collection": collection, "model": model}
            ).fetchone()
        assert count is not None
        return int(count)

    def chunks_without_vector(
        self, conn: psycopg.Connection[Any], collection: str, model: str, *, after: int,
        limit: int,
    ) -> list[tuple[int, Chunk]]:
        """The next ``limit`` chunks (by id, after ``after``) lacking a vector of ``model``.

        Rebuilt as :class:`Chunk` from the stored rows (title, section, content), so the text
        embedded is exactly what ingest embedded (``tokens.embedding_text``): no re-parse.
        """
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(
                self.q("reembed_pending_chunks"),
                {"collection": collection, "model": model, "after": after, "limit": limit},
            ).fetchall()
        return [
            (
                int(r["id"]),
                Chunk(
                    document_path=r["path"], document_title=r["title"], section=r["section"],
                    anchor=r["anchor"], position=int(r["position"]), content=r["content"],
                    token_count=int(r["token_count"]), content_hash=r["content_hash"],
                ),
            )
            for r in rows
        ]

    def add_vectors(
        self, conn: psycopg.Connection[Any], model: str, chunk_ids: Sequence[int],
        vectors: np.ndarray,
    ) -> int:
        """Add vectors of ``model`` beside the existing ones, in one transaction (binary COPY).

        Staged in a temporary table first, so a chunk deleted meanwhile is skipped instead of
        failing the batch, and a vector already present is kept. Returns the rows added.
        """
        if len(chunk_ids) != len(vectors):
            raise StoreError(f"{len(chunk_ids)} chunks but {len(vectors)} vectors")
        if not chunk_ids:
            return 0
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(self.q("reembed_stage_create"))
            with cur.copy(self.q("reembed_stage_copy")) as copy:
                copy.set_types(["bigint", "vector"])
                for chunk_id, vec in zip(chunk_ids, vectors, strict=True):
                    copy.write_row((chunk_id, vec))
            cur.execute(self.q("reembed_stage_insert"), {"model": model})
            added = cur.rowcount
            cur.execute(self.q("reembed_stage_clear"))
        return int(added)

    def switch_model(
        self, conn: psycopg.Connection[Any], collection: str, model: str, dimension: int
    ) -> int:
        """Point the collection at ``model`` if every chunk has its vector; else change nothing.

        One transaction: the collection row is locked, completeness is checked, the model and
        the documents' fingerprints are updated together, so a search sees either the old
        model with all its vectors or the new one with all of its own. Returns the number of
        chunks still missing a vector (0 when the switch happened).
        """
        with conn.transaction():
            with conn.cursor(row_factory=dict_row) as cur:
                row = cur.execute(
                    self.q("reembed_lock_collection"), {"collection": collection}
                ).fetchone()
            if row is None:
                raise StoreError(f"collection {collection!r} does not exist")
            missing = self.pending_vectors(conn, collection, model)
            if missing:
                return missing
            old = row["model"]
            conn.execute(
                self.q("reembed_set_model"),
                {"collection": collection, "model": model, "dimension": dimension},
            )
            conn.execute(
                self.q("reembed_refingerprint"),
                {
                    "collection": collection,
                    "old_part": f";model={old or 'none'};",
                    "new_part": f";model={model};",
                },
            )
        return 0

    def drop_other_vectors(self, conn: psycopg.Connection[Any], collection: str, model: str) -> int:
        """Delete the collection's vectors of every model but ``model``; returns the rows."""
        with conn.transaction():
            cur = conn.execute(
                self.q("reembed_drop_other_vectors"), {"collection": collection, "model": model}
            )
            return int(cur.rowcount)
