"""Writes and reads the index tables: document replacement in one transaction, bulk by COPY."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.types.json import Jsonb

from .config import IndexSettings
from .errors import DimensionMismatch, StoreError
from .models import Chunk, Document
from .queries import Queries

if TYPE_CHECKING:
    import numpy as np

HALFVEC_THRESHOLD = 2000  # pgvector's HNSW limit for vector; above it the index uses halfvec


@dataclass(frozen=True, slots=True)
class StoredState:
    content_hash: str
    fingerprint: str
    chunk_count: int
    embed: bool = True


@dataclass(slots=True)
class PreparedDocument:
    """A document ready to be written: parsed, chunked and (when it embeds) vectorised."""

    document: Document
    chunks: list[Chunk]
    vectors: np.ndarray | None
    language: str
    fingerprint: str
    source_root: str | None = None

    @property
    def token_count(self) -> int:
        return sum(c.token_count for c in self.chunks)


def fingerprint(size: int, overlap: int, model: str | None) -> str:
    """What, besides the file's bytes, decides a document's chunks and vectors."""
    return f"chunk={size}/{overlap};model={model or 'none'};v1"


def vector_kind(dimension: int, configured: str = "vector") -> str:
    """The type an index casts to: halfvec when asked, or past pgvector's 2,000-d HNSW limit."""
    return "halfvec" if configured == "halfvec" or dimension > HALFVEC_THRESHOLD else "vector"


def vector_index_name(model: str) -> str:
    return "chunk_vector_hnsw_" + hashlib.sha256(model.encode()).hexdigest()[:12]


class Store:
    """Table access for one schema. Methods take a psycopg connection: the caller owns it."""

    def __init__(self, schema: str = "ragpg", index: IndexSettings | None = None):
        self.schema = schema
        self.q = Queries(schema)
        self.index = index or IndexSettings()

    # -- reads -------------------------------------------------------------------------

    def document_states(self, conn: psycopg.Connection[Any], collection: str) -> dict[str, StoredState]:
        """Every stored document's hash and fingerprint: one query per run, not per file."""
        rows = conn.execute(self.q("document_states"), {"collection": collection}).fetchall()
        return {r[0]: StoredState(r[1], r[2], r[3], bool(r[4])) for r in rows}

    def collection_model(
        self, conn: psycopg.Connection[Any], collection: str
    ) -> tuple[str | None, int | None] | None:
        row = conn.execute(self.q("collection_get"), {"collection": collection}).fetchone()
        return None if row is None else (row[1], row[2])

    # -- collection / model ------------------------------------------------------------

    def bind_model(
        self, conn: psycopg.Connection[Any], collection: str, model: str | None, dimension: int | None,
        *, create_index: bool = True,
    ) -> None:
        """Record the collection's model, or refuse when it is indexed with another one."""
        current = self.collection_model(conn, collection)
        if current is not None and current[0] is not None:
            if model is None:
                raise DimensionMismatch(
                    f"collection {collection!r} is indexed with vectors of {current[0]!r} but no"
                    " embedding provider is available: configure that model, or run"
                    " `ragpg reembed` to change it"
                )
            if current[0] != model or (dimension is not None and current[1] != dimension):
                raise DimensionMismatch(
                    f"collection {collection!r} is indexed with model {current[0]!r} ({current[1]} d);"
                    f" the configured provider gives {model!r} ({dimension} d): ragpg will not mix"
                    f" them. Run `ragpg reembed --collection {collection} --model {model}`"
                    " to switch, or configure the original model"
                )
            return
        if current is None or model is not None:
            with conn.transaction():
                conn.execute(
                    self.q("collection_upsert"),
                    {"collection": collection, "model": model, "dimension": dimension},
                )
        if create_index and model is not None and dimension is not None:
            self.ensure_vector_index(conn, model, dimension)

    def vector_index_exists(self, conn: psycopg.Connection[Any], model: str) -> bool:
        return self.vector_index_kind(conn, model) is not None

    def ensure_vector_index(self, conn: psycopg.Connection[Any], model: str, dimension: int) -> None:
        """A partial HNSW index per model on the typed cast of the untyped column, built with
        ``[index]``'s parameters and memory (an existing one is kept as it is)."""
        from psycopg import sql

        kind = vector_kind(dimension, self.index.vector_type)
        stmt = sql.SQL(
            "CREATE INDEX IF NOT EXISTS {name} ON {schema}.chunk_vector USING hnsw"
            " ((embedding::{kind}({dim})) {ops}) WITH (m = {m}, ef_construction = {efc})"
            " WHERE model = {model}"
        ).format(
            name=sql.Identifier(vector_index_name(model)),
            schema=sql.Identifier(self.schema),
            kind=sql.SQL(kind),
            dim=sql.Literal(dimension),
            ops=sql.SQL(f"{kind}_cosine_ops"),
            m=sql.Literal(self.index.hnsw_m),
            efc=sql.Literal(self.index.hnsw_ef_construction),
            model=sql.Literal(model),
        )
        with conn.transaction():
            conn.execute("SELECT set_config('maintenance_work_mem', %s, true)",
                         (self.index.build_memory.replace(" ", ""),))
            conn.execute(stmt)

    def refresh_statistics(self, conn: psycopg.Connection[Any]) -> None:
        """ANALYZE the tables an ingest filled. Until autovacuum gets to them the planner may
        take a freshly loaded collection for a tiny one and search it exactly, a sequential
        scan instead of the HNSW index. Best effort: autovacuum does it later anyway."""
        try:
            with conn.transaction():  # a savepoint inside a caller's transaction
                conn.execute(self.q("analyze_tables"))
        except psycopg.Error:
            pass

    def vector_index_kind(self, conn: psycopg.Connection[Any], model: str) -> str | None:
        """``vector`` or ``halfvec``: the type the model's index casts to (searches must cast to
        the same to use it); None when the index does not exist (yet)."""
        row = conn.execute(
            "SELECT pg_get_indexdef(to_regclass(%s))",
            (f'"{self.schema}".{vector_index_name(model)}',),
        ).fetchone()
        if not row or not row[0]:
            return None
        return "halfvec" if "::halfvec" in row[0] else "vector"

    # -- writes ------------------------------------------------------------------------

    def replace_documents(
        self,
        conn: psycopg.Connection[Any],
        collection: str,
        prepared: Sequence[PreparedDocument],
        model: str | None,
    ) -> int:
        """Replace whole documents in one transaction (a savepoint in a caller's transaction).

        Old chunks and vectors go, new ones come in by COPY; nothing about a document is ever
        committed half-way. Returns the number of chunks written.
        """
        for p in prepared:
            if p.vectors is not None and len(p.vectors) != len(p.chunks):
                raise StoreError(
                    f"{p.document.path}: {len(p.chunks)} chunks but {len(p.vectors)} vectors"
                )
        written = 0
        with conn.transaction():
            ids: list[int] = []
            with conn.cursor() as cur:
                # One pipelined batch for the group's documents, not a round trip each.
                cur.executemany(
                    self.q("document_upsert"),
                    [
                        {
                            "collection": collection,
                            "path": p.document.path,
                            "title": p.document.title,
                            "content_hash": p.document.content_hash,
                            "front_matter": Jsonb(p.document.front_matter),
                            "parent_path": p.document.parent_path,
                            "level": p.document.level,
                            "node_type": p.document.node_type,
                            "embed": p.document.embed,
                            "language": p.language,
                            "fingerprint": p.fingerprint,
                            "chunk_count": len(p.chunks),
                            "token_count": p.token_count,
                            "source_root": p.source_root,
                        }
                        for p in prepared
                    ],
                    returning=True,
                )
                for _ in prepared:  # one result set per document, in order
                    row = cur.fetchone()
                    assert row is not None
                    ids.append(int(row[0]))
                    cur.nextset()
                cur.execute(
                    self.q("chunks_delete_for_documents"), {"collection": collection, "ids": ids}
                )
                total = sum(len(p.chunks) for p in prepared)
                if total == 0:
                    return 0
                cur.execute(
                    self.q("chunk_ids_allocate"), {"table": self.q.table("chunk"), "n": total}
                )
                chunk_ids = [int(r[0]) for r in cur.fetchall()]
                with cur.copy(self.q("chunk_copy")) as copy:
                    i = 0
                    for doc_id, p in zip(ids, prepared, strict=True):
                        config = self.q.config(p.language)
                        for c in p.chunks:
                            copy.write_row(
                                (
                                    chunk_ids[i], doc_id, collection, c.position, c.section,
                                    c.anchor,
                                    c.content, c.token_count, c.content_hash, config,
                                )
                            )
                            i += 1
                written = total
                if model is not None and any(p.vectors is not None for p in prepared):
                    with cur.copy(self.q("vector_copy")) as copy:
                        copy.set_types(["bigint", "text", "text", "vector"])
                        i = 0
                        for p in prepared:
                            if p.vectors is None:
                                i += len(p.chunks)
                                continue
                            for vec in p.vectors:
                                copy.write_row((chunk_ids[i], collection, model, vec))
                                i += 1
        return written

    def delete_documents(
        self, conn: psycopg.Connection[Any], collection: str, paths: Sequence[str]
    ) -> tuple[int, int]:
        """Delete documents (cascade to chunks and vectors); returns (documents, chunks)."""
        if not paths:
            return 0, 0
        with conn.transaction():
            rows = conn.execute(
                self.q("documents_prune"), {"collection": collection, "paths": list(paths)}
            ).fetchall()
        return len(rows), sum(int(r[1]) for r in rows)

    # -- runs --------------------------------------------------------------------------

    def start_run(
        self, conn: psycopg.Connection[Any], *, source_root: str, collection: str, mode: str,
        model: str | None,
    ) -> int:
        with conn.transaction():
            row = conn.execute(
                self.q("run_start"),
                {"source_root": source_root, "collection": collection, "mode": mode, "model": model},
            ).fetchone()
        assert row is not None
        return int(row[0])

    def finish_run(self, conn: psycopg.Connection[Any], run_id: int, status: str, report: Any) -> None:
        errors = [{"path": f.path, "error": f.error, "kind": f.kind} for f in report.failures]
        with conn.transaction():
            conn.execute(
                self.q("run_finish"),
                {
                    "id": run_id,
                    "status": status,
                    "documents_seen": report.documents_seen,
                    "documents_indexed": report.documents_indexed,
                    "documents_skipped": report.documents_skipped,
                    "documents_failed": report.documents_failed,
                    "documents_deleted": report.documents_deleted,
                    "chunks_upserted": report.chunks_upserted,
                    "chunks_unchanged": report.chunks_unchanged,
                    "chunks_deleted": report.chunks_deleted,
                    "embedding_calls": report.embedding_calls,
                    "tokens_embedded": report.tokens_embedded,
                    "errors": Jsonb(errors),
                },
            )

    # -- stats -------------------------------------------------------------------------

    def stats(self, conn: psycopg.Connection[Any], collection: str) -> dict[str, Any]:
        row = conn.execute(self.q("stats_totals"), {"collection": collection}).fetchone()
        assert row is not None
        models = conn.execute(self.q("stats_models"), {"collection": collection}).fetchall()
        coll = self.collection_model(conn, collection)
        last = conn.execute(self.q("stats_last_run"), {"collection": collection}).fetchone()
        return {
            "collection": collection,
            "documents": int(row[0]),
            "chunks": int(row[1]),
            "last_indexed_at": row[2].isoformat() if row[2] else None,
            "model": coll[0] if coll else None,
            "dimension": coll[1] if coll else None,
            "models": [{"model": m[0], "dimension": m[1], "vectors": int(m[2])} for m in models],
            "last_run": None
            if last is None
            else {
                "id": last[0],
                "started_at": last[1].isoformat(),
                "finished_at": last[2].isoformat() if last[2] else None,
                "status": last[3],
                "documents_seen": last[4],
                "documents_indexed": last[5],
                "documents_failed": last[6],
            },
        }

    # -- re-embedding (rag_pg/reembed.py) ---------------------------------------------------

    def pending_vectors(self, conn: psycopg.Connection[Any], collection: str, model: str) -> int:
        """Chunks of embedding documents that still lack a vector of ``model``."""
        row = conn.execute(
            self.q("reembed_pending_count"), {"collection": collection, "model": model}
        ).fetchone()
        assert row is not None
        return int(row[0])

    def chunks_without_vector(
        self, conn: psycopg.Connection[Any], collection: str, model: str, *, after: int,
        limit: int,
    ) -> list[tuple[int, Chunk]]:
        """The next ``limit`` chunks (by id, after ``after``) lacking a vector of ``model``.

        Rebuilt as :class:`Chunk` from the stored rows (title, section, content), so the text
        embedded is exactly what ingest embedded (``chunk.embedding_text``): no re-parse.
        """
        rows = conn.execute(
            self.q("reembed_pending_chunks"),
            {"collection": collection, "model": model, "after": after, "limit": limit},
        ).fetchall()
        return [
            (
                int(r[0]),
                Chunk(
                    document_path=r[1], document_title=r[2], section=r[3], anchor=r[4],
                    position=int(r[5]), content=r[6], token_count=int(r[7]),
                    content_hash=r[8],
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
            row = conn.execute(
                self.q("reembed_lock_collection"), {"collection": collection}
            ).fetchone()
            if row is None:
                raise StoreError(f"collection {collection!r} does not exist")
            missing = self.pending_vectors(conn, collection, model)
            if missing:
                return missing
            old = row[0]
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

    def drop_vector_index_if_unused(self, conn: psycopg.Connection[Any], model: str) -> bool:
        """Drop ``model``'s HNSW index once no vector and no collection uses that model."""
        from psycopg import sql

        with conn.transaction():
            row = conn.execute(self.q("reembed_model_in_use"), {"model": model}).fetchone()
            if row is None or row[0]:
                return False
            conn.execute(
                sql.SQL("DROP INDEX IF EXISTS {schema}.{name}").format(
                    schema=sql.Identifier(self.schema),
                    name=sql.Identifier(vector_index_name(model)),
                )
            )
        return True
