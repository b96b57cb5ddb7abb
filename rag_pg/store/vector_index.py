"""The partial HNSW index of each model: its name, the type it casts to, its build and its drop."""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import scalar_row

from rag_pg.config import IndexSettings
from rag_pg.store.boundary import translated
from rag_pg.store.queries import Queries

HALFVEC_THRESHOLD = 2000  # pgvector's HNSW limit for vector; above it the index uses halfvec


def vector_kind(dimension: int, configured: str = "vector") -> str:
    """The type an index casts to: halfvec when asked, or past pgvector's 2,000-d HNSW limit."""
    return "halfvec" if configured == "halfvec" or dimension > HALFVEC_THRESHOLD else "vector"


def vector_index_name(model: str) -> str:
    return "chunk_vector_hnsw_" + hashlib.sha256(model.encode()).hexdigest()[:12]


class VectorIndexes:
    """The index part of :class:`rag_pg.store.documents.Store`, which sets these attributes."""

    schema: str
    q: Queries
    index: IndexSettings

    def vector_index_exists(self, conn: psycopg.Connection[Any], model: str) -> bool:
        return self.vector_index_kind(conn, model) is not None

    def vector_index_statement(self, model: str, dimension: int) -> sql.Composed:
        """The CREATE INDEX of ``model``'s partial HNSW index (see ``ensure_vector_index``)."""
        kind = vector_kind(dimension, self.index.vector_type)
        return self.q.compose(
            "vector_index_create",
            index=sql.Identifier(vector_index_name(model)),
            kind=sql.SQL(kind),
            dim=sql.Literal(dimension),
            ops=sql.SQL(f"{kind}_cosine_ops"),
            m=sql.Literal(self.index.hnsw_m),
            efc=sql.Literal(self.index.hnsw_ef_construction),
            model=sql.Literal(model),
        )

    @translated
    def ensure_vector_index(self, conn: psycopg.Connection[Any], model: str, dimension: int) -> None:
        """A partial HNSW index per model on the typed cast of the untyped column, built with
        ``[index]``'s parameters (an existing one is kept as it is).

        ``index.build_memory`` raises ``maintenance_work_mem`` for the build, never lowers it:
        a graph that outgrows it is built on disk, several times slower, so a server or
        session configured with more keeps its own. An existing index is not even named to
        the server: CREATE INDEX checks ownership before IF NOT EXISTS, and a role that only
        writes rows (tenancy's runtime role) is no owner.
        """
        if self.vector_index_exists(conn, model):
            return
        try:
            with conn.transaction():
                conn.execute(self.q("vector_index_build_memory"),
                             {"memory": self.index.build_memory.replace(" ", "")})
                conn.execute(self.vector_index_statement(model, dimension))
        except psycopg.errors.InsufficientPrivilege:
            # Not the owner (tenancy's runtime role): searches are exact until an ingest by
            # the owner builds the index.
            return

    def vector_index_kind(self, conn: psycopg.Connection[Any], model: str) -> str | None:
        """``vector`` or ``halfvec``: the type the model's index casts to (searches must cast to
        the same to use it); None when the index does not exist (yet)."""
        with conn.cursor(row_factory=scalar_row) as cur:
            definition = cur.execute(
                self.q("vector_index_definition"), (self.q.table(vector_index_name(model)),)
            ).fetchone()
        if not definition:
            return None
        return "halfvec" if "::halfvec" in definition else "vector"

    def drop_vector_index_if_unused(self, conn: psycopg.Connection[Any], model: str) -> bool:
        """Drop ``model``'s HNSW index once no vector and no collection uses that model."""
        with conn.transaction():
            with conn.cursor(row_factory=scalar_row) as cur:
                in_use = cur.execute(self.q("reembed_model_in_use"), {"model": model}).fetchone()
            if in_use is None or in_use:
                return False
            conn.execute(self.q.compose("vector_index_drop",
                                        index=sql.Identifier(vector_index_name(model))))
        return True
