"""Writes and reads the index tables: document replacement in one transaction, bulk by COPY.

The per-model HNSW indexes are built and dropped by ``rag_pg.store.vector_index``, the run rows
written by ``rag_pg.store.runs``, a first load's term statistics rebuilt by
``rag_pg.store.term_stats``; :class:`Store` gathers them for its callers. The writes of
a model switch are ``rag_pg.admin.reembed_store``'s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row, scalar_row
from psycopg.types.json import Jsonb

from rag_pg.config import IndexSettings
from rag_pg.errors import DimensionMismatch, StoreError
from rag_pg.models import Chunk, Document
from rag_pg.source import markdown as markdown_parser
from rag_pg.store import distribution, retry
from rag_pg.store.boundary import translated
from rag_pg.store.queries import Queries
from rag_pg.store.runs import RunLog
from rag_pg.store.term_stats import SpreadStatistics, TermStatistics
from rag_pg.store.vector_index import VectorIndexes

if TYPE_CHECKING:
    import numpy as np


def shard_key(path: str) -> int:
    """Where a cluster distributed by document places a document: the first 32 bits of its
    path's MD5 as a signed integer (the document table's CHECK computes the same in SQL, and
    its chunks and vectors carry it through their foreign keys)."""
    return int.from_bytes(hashlib.md5(path.encode()).digest()[:4], "big", signed=True)


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
    # Who may read it (rag_pg.source.access): None, everyone who may read the collection.
    readers: tuple[str, ...] | None = None

    @property
    def token_count(self) -> int:
        return sum(c.token_count for c in self.chunks)


def fingerprint(
    size: int, overlap: int, model: str | None, *, max_tokens: int | None = None,
    anchor_style: str = "github", parser: str | None = None, convert: str = "",
    access: str = "",
) -> str:
    """What, besides the file's bytes, decides a document's chunks and vectors.

    The chunk settings and cap, the anchor style (the site's slugs), the Markdown parser's
    version (an upgrade that would chunk the same bytes otherwise re-indexes them, and only
    then), the model, for a converted file ``convert`` (its converter and library
    versions, ``rag_pg.source.convert.fingerprint_part``), and ``access``, what the tree's
    rules make of its readers (``rag_pg.source.access``: a rule change re-writes the document). ``;model=<m>;`` stays a whole segment:
    a reembed rewrites it in place.
    """
    cap = "auto" if max_tokens is None else str(max_tokens)
    parser = parser or markdown_parser.PARSER_VERSION  # read at each call, not at import
    return (f"chunk={size}/{overlap};max={cap};anchors={anchor_style};model={model or 'none'};"
            f"parser={parser};v1{convert}{access}")


class Store(VectorIndexes, RunLog, TermStatistics):
    """Table access for one schema. Methods take a psycopg connection: the caller owns it."""

    def __init__(self, schema: str = "ragpg", index: IndexSettings | None = None):
        self.schema = schema
        self.q = Queries(schema)
        self.index = index or IndexSettings()
        # A foreign writer's deadlock or lock wait on the same rows is replayed, not reported.
        self.retry = retry.DEFAULT
        self._distributed: bool | None = None
        self._layout: str | None = None

    # -- reads -------------------------------------------------------------------------

    def document_states(self, conn: psycopg.Connection[Any], collection: str) -> dict[str, StoredState]:
        """Every stored document's hash and fingerprint: one query per run, not per file."""
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(self.q("document_states"), {"collection": collection}).fetchall()
        return {r["path"]: StoredState(r["content_hash"], r["fingerprint"], r["chunk_count"],
                                       bool(r["embed"])) for r in rows}

    def collection_model(
        self, conn: psycopg.Connection[Any], collection: str
    ) -> tuple[str | None, int | None] | None:
        with conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(self.q("collection_get"), {"collection": collection}).fetchone()
        return None if row is None else (row["model"], row["dimension"])

    # -- collection / model ------------------------------------------------------------

    def bind_model(
        self, conn: psycopg.Connection[Any], collection: str, model: str | None, dimension: int | None,
        *, create_index: bool = True,
    ) -> None:
        """Record the collection's model, or refuse when it is indexed with another one."""
        current = self.collection_model(conn, collection)
        if current is not None and current[0] is not None:
            bound, bound_dimension = current
            if model is None:
                raise DimensionMismatch(
                    f"collection {collection!r} is indexed with vectors of {bound!r} but no"
                    " embedding provider is available: configure that model, or run"
                    " `ragpg reembed` to change it"
                )
            if bound != model or (dimension is not None and bound_dimension != dimension):
                raise DimensionMismatch(
                    f"collection {collection!r} is indexed with model {bound!r} ({bound_dimension} d);"
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

    def refresh_statistics(self, conn: psycopg.Connection[Any]) -> None:
        """ANALYZE the tables an ingest filled. Until autovacuum gets to them the planner may
        take a freshly loaded collection for a tiny one and search it exactly, a sequential
        scan instead of the HNSW index. Best effort: autovacuum does it later anyway."""
        try:
            with conn.transaction():  # a savepoint inside a caller's transaction
                conn.execute(self.q("analyze_tables"))
        except psycopg.Error:
            pass

    def distributed(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether the schema is distributed over a Citus cluster (rag_pg.store.distribution),
        read once. There the writer keeps the term statistics (no trigger on ``chunk`` does)
        and writes chunks by INSERT: Citus copies rows to the shards in binary, where a
        ``regconfig`` is the coordinator's object id, which means nothing on a worker."""
        if self._distributed is None:
            self._distributed = distribution.distributed(conn, self.schema)
        return self._distributed

    def layout(self, conn: psycopg.Connection[Any]) -> str | None:
        """How a cluster holds the schema: ``collection``, ``document``, or None (one server),
        read once (rag_pg.store.distribution)."""
        if self.distributed(conn) and self._layout is None:
            self._layout = distribution.layout(conn, self.schema)
        return self._layout

    def forget_layout(self) -> None:
        """Read the layout again (after ``ragpg init`` distributed the schema)."""
        self._distributed = None
        self._layout = None

    def _follow_statistics(self, cur: psycopg.Cursor[Any], direction: str, collection: str,
                           ids: list[int]) -> None:
        """Subtract (before a delete) or add (after a write) the documents' chunks to the term
        statistics, where the writer keeps them."""
        if self.layout(cur.connection) == "document":
            spread = SpreadStatistics(self.q)
            with cur.connection.cursor() as rows:  # tuples, whatever ``cur`` makes of rows
                counts = spread.counts(rows, collection, ids)
                (spread.add if direction == "add" else spread.subtract)(rows, collection, *counts)
            return
        params = {"collection": collection, "ids": ids}
        cur.execute(self.q(f"term_stats_{direction}_documents"), params)
        cur.execute(self.q(f"chunk_stats_{direction}_documents"), params)

    # -- writes ------------------------------------------------------------------------

    @translated
    def replace_documents(
        self,
        conn: psycopg.Connection[Any],
        collection: str,
        prepared: Sequence[PreparedDocument],
        model: str | None,
    ) -> int:
        """Replace whole documents in one transaction (a savepoint in a caller's transaction).

        Old chunks and vectors go, new ones come in by COPY; nothing about a document is ever
        committed half-way. A transaction a foreign writer aborted (a deadlock, a lock wait
        past lock_timeout, a serialization failure) is replayed: ``rag_pg.store.retry``. Returns the
        number of chunks written.
        """
        for p in prepared:
            if p.vectors is not None and len(p.vectors) != len(p.chunks):
                raise StoreError(
                    f"{p.document.path}: {len(p.chunks)} chunks but {len(p.vectors)} vectors"
                )
        return self.retry.run(conn, lambda: self._replace(conn, collection, prepared, model))

    def _replace(
        self,
        conn: psycopg.Connection[Any],
        collection: str,
        prepared: Sequence[PreparedDocument],
        model: str | None,
    ) -> int:
        distributed = self.distributed(conn)
        with conn.transaction(), conn.cursor(row_factory=scalar_row) as cur:
            ids = self._upsert_documents(cur, collection, prepared)
            if distributed:
                self._follow_statistics(cur, "subtract", collection, ids)
            cur.execute(self.q("chunks_delete_for_documents"), {"collection": collection, "ids": ids})
            total = sum(len(p.chunks) for p in prepared)
            if total == 0:
                return 0
            cur.execute(self.q("chunk_ids_allocate"), {"table": self.q.table("chunk"), "n": total})
            chunk_ids = [int(i) for i in cur.fetchall()]
            # Under row-level security (acting for a tenant, a runtime role on tables that hold
            # the reader policies) PostgreSQL refuses COPY: staged COPY.
            staged = not distributed and self._held_by_policies(cur)
            if distributed:
                self._insert_chunks(cur, collection, prepared, ids, chunk_ids)
            else:
                self._copy_chunks(cur, collection, prepared, ids, chunk_ids, staged=staged)
            if model is not None and any(p.vectors is not None for p in prepared):
                if distributed:
                    self._insert_vectors(cur, collection, prepared, chunk_ids, model)
                else:
                    self._copy_vectors(cur, collection, prepared, chunk_ids, model, staged=staged)
            if distributed:
                self._follow_statistics(cur, "add", collection, ids)
        return total

    def _held_by_policies(self, cur: psycopg.Cursor[Any]) -> bool:
        """Whether row-level security applies to this login on the chunk table."""
        cur.execute(self.q("row_security_active"), (self.q.table("chunk"),))
        return bool(cur.fetchone())

    def _upsert_documents(self, cur: psycopg.Cursor[Any], collection: str,
                          prepared: Sequence[PreparedDocument]) -> list[int]:
        """The documents' rows, in one pipelined batch (not a round trip each); their ids."""
        cur.executemany(self.q("document_upsert"), [{
            "collection": collection, "path": p.document.path,
            "shard_key": shard_key(p.document.path), "title": p.document.title,
            "content_hash": p.document.content_hash,
            "front_matter": Jsonb(p.document.front_matter),
            "parent_path": p.document.parent_path, "level": p.document.level,
            "node_type": p.document.node_type, "embed": p.document.embed,
            "language": p.language, "fingerprint": p.fingerprint,
            "chunk_count": len(p.chunks), "token_count": p.token_count,
            "source_root": p.source_root,
            "readers": None if p.readers is None else list(p.readers),
        } for p in prepared], returning=True)
        ids: list[int] = []
        for _ in prepared:  # one result set per document, in order
            document_id = cur.fetchone()
            assert document_id is not None
            ids.append(int(document_id))
            cur.nextset()
        return ids

    @staticmethod
    def _chunk_rows(collection: str, prepared: Sequence[PreparedDocument], ids: list[int],
                    chunk_ids: list[int], config: Callable[[str], str]) -> Iterator[tuple[Any, ...]]:
        chunk_id = iter(chunk_ids)
        for doc_id, p in zip(ids, prepared, strict=True):
            ts_config = config(p.language)
            readers = None if p.readers is None else list(p.readers)
            key = shard_key(p.document.path)
            for c in p.chunks:
                yield (next(chunk_id), doc_id, collection, key, c.position, c.section, c.anchor,
                       c.content, c.token_count, c.content_hash, ts_config, c.line_start,
                       c.line_end, readers)

    def _insert_chunks(self, cur: psycopg.Cursor[Any], collection: str,
                       prepared: Sequence[PreparedDocument], ids: list[int],
                       chunk_ids: list[int]) -> None:
        """The chunks by one pipelined batch of INSERTs (on a cluster: see :meth:`distributed`)."""
        cur.executemany(self.q("chunk_insert"),
                        list(self._chunk_rows(collection, prepared, ids, chunk_ids, self.q.config)))

    def _copy_chunks(self, cur: psycopg.Cursor[Any], collection: str,
                     prepared: Sequence[PreparedDocument], ids: list[int], chunk_ids: list[int],
                     *, staged: bool) -> None:
        stage = "_stage" if staged else ""
        if staged:
            cur.execute(self.q("chunk_stage_create"))
        with cur.copy(self.q(f"chunk{stage}_copy")) as copy:
            for row in self._chunk_rows(collection, prepared, ids, chunk_ids, self.q.config):
                copy.write_row(row)
        if staged:
            cur.execute(self.q("chunk_stage_insert"))
            cur.execute(self.q("chunk_stage_clear"))

    @staticmethod
    def _vector_rows(collection: str, prepared: Sequence[PreparedDocument], chunk_ids: list[int],
                     model: str) -> Iterator[tuple[Any, ...]]:
        i = 0
        for p in prepared:
            if p.vectors is None:
                i += len(p.chunks)
                continue
            readers = None if p.readers is None else list(p.readers)
            key = shard_key(p.document.path)
            for vec in p.vectors:
                yield (chunk_ids[i], collection, key, model, vec, readers)
                i += 1

    def _insert_vectors(self, cur: psycopg.Cursor[Any], collection: str,
                        prepared: Sequence[PreparedDocument], chunk_ids: list[int], model: str) -> None:
        """The vectors by one pipelined batch of INSERTs (on a cluster: a COPY of a table under
        row-level security is refused, and its staged form would pass through the coordinator)."""
        cur.executemany(self.q("vector_insert"), list(self._vector_rows(collection, prepared,
                                                                       chunk_ids, model)))

    def _copy_vectors(self, cur: psycopg.Cursor[Any], collection: str,
                      prepared: Sequence[PreparedDocument], chunk_ids: list[int], model: str,
                      *, staged: bool) -> None:
        stage = "_stage" if staged else ""
        if staged:
            cur.execute(self.q("vector_stage_create"))
        with cur.copy(self.q(f"vector{stage}_copy")) as copy:
            copy.set_types(["bigint", "text", "integer", "text", "vector", "text[]"])
            for row in self._vector_rows(collection, prepared, chunk_ids, model):
                copy.write_row(row)
        if staged:
            cur.execute(self.q("vector_stage_insert"))
            cur.execute(self.q("vector_stage_clear"))

    def delete_documents(
        self, conn: psycopg.Connection[Any], collection: str, paths: Sequence[str]
    ) -> tuple[int, int]:
        """Delete documents (cascade to chunks and vectors); returns (documents, chunks)."""
        if not paths:
            return 0, 0

        distributed = self.distributed(conn)

        def delete() -> list[dict[str, Any]]:
            with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
                if distributed:
                    found = cur.execute(self.q("documents_ids_for_paths"),
                                        {"collection": collection, "paths": list(paths)}).fetchall()
                    self._follow_statistics(cur, "subtract", collection, [int(r["id"]) for r in found])
                return cur.execute(
                    self.q("documents_prune"), {"collection": collection, "paths": list(paths)}
                ).fetchall()

        rows = self.retry.run(conn, delete)
        return len(rows), sum(int(r["chunk_count"]) for r in rows)
