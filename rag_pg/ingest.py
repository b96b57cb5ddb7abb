"""Incremental ingest: walk, skip unchanged, chunk, embed outside transactions, replace per document."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from . import failpoints, hierarchy, language
from .chunk import Chunker, embedding_text
from .config import Settings
from .db import ConnectionSource
from .embed.base import EmbeddingProvider
from .embed.batching import embed_all
from .errors import ConfigError, DocumentError, EmbeddingError, RagError, StoreError
from .locks import collection_lock
from .models import FailedDocument, IngestReport, SkippedFile
from .parse import parse_document
from .store import PreparedDocument, Store, fingerprint
from .walk import WalkRules, walk

WRITE_GROUP_DOCUMENTS = 64  # documents per write transaction (each document stays atomic)

ProgressFn = Callable[[str, dict[str, Any]], None]


@dataclass(slots=True)
class _Pending:
    items: list[PreparedDocument] = field(default_factory=list)
    chunks: int = 0



class Ingestor:
    """Runs one ingest of a source tree into a collection."""

    def __init__(
        self,
        settings: Settings,
        source: ConnectionSource,
        provider: EmbeddingProvider,
        *,
        progress: ProgressFn | None = None,
        warn: Callable[[str], None] | None = None,
    ):
        self.settings = settings
        self.source = source
        self.provider = provider
        self.store = Store(settings.database.schema)
        self.chunker = Chunker(settings.chunk.size, settings.chunk.overlap)
        self.progress = progress or (lambda event, data: None)
        self.warn = warn or (lambda message: None)
        self._embed_total = 0  # chunks queued for embedding so far in this run
        self._embed_done = 0

    def run(
        self,
        root: str | Path,
        *,
        collection: str | None = None,
        full: bool = False,
        prune: bool = False,
        dry_run: bool = False,
    ) -> IngestReport:
        started = time.monotonic()
        root_path = Path(root).expanduser()
        if not root_path.is_dir():
            raise ConfigError(f"source root is not a directory: {root_path}")
        root_key = str(root_path.resolve())
        collection = collection or self.settings.collection
        report = IngestReport(source_root=root_key, collection=collection, dry_run=dry_run)
        model = self.provider.model
        dimension = self.provider.dimension
        rules = WalkRules(
            included_paths=self.settings.source.included_paths,
            excluded_paths=self.settings.source.excluded_paths,
            follow_symlinks=self.settings.source.follow_symlinks,
            max_file_bytes=self.settings.source.max_file_bytes,
        )
        with self.source.connection() as conn, self._lock(conn, collection, dry_run):
            states = self.store.document_states(conn, collection)
            # First bulk load of an empty collection: build the HNSW index once at the end
            # (in memory, in bulk) rather than maintaining it on every insert.
            defer_index = (not dry_run and not states and model is not None and dimension is not None
                           and not self.store.vector_index_exists(conn, model))
            if not dry_run:
                self.store.bind_model(conn, collection, model, dimension, create_index=not defer_index)
            else:
                current = self.store.collection_model(conn, collection)
                if current and current[0] and current[0] != model:
                    report.warnings.append(
                        f"collection is indexed with {current[0]!r}; configured model is {model!r}"
                    )
            if not dry_run:
                report.run_id = self.store.start_run(
                    conn, source_root=root_key, collection=collection,
                    mode="full" if full else "incremental", model=model,
                )
            status = "failed"
            try:
                seen = self._walk_and_write(conn, root_path, root_key, collection, rules, states,
                                            report, full=full, dry_run=dry_run, model=model)
                if prune:
                    gone = sorted(p for p in states if p not in seen)
                    report.deleted = gone
                    if not dry_run:
                        docs, chunks = self.store.delete_documents(conn, collection, gone)
                        report.documents_deleted, report.chunks_deleted = docs, chunks
                    else:
                        report.documents_deleted = len(gone)
                if not dry_run:
                    hierarchy.record_missing_parents(conn, self.store.schema, collection, report, seen)
                status = "partial" if report.failures else "completed"
            finally:
                if defer_index and model is not None and dimension is not None:
                    try:
                        self.store.ensure_vector_index(conn, model, dimension)
                    except psycopg.Error:
                        pass  # the next run creates it (IF NOT EXISTS); search is exact meanwhile
                report.duration_seconds = time.monotonic() - started
                if report.run_id is not None:
                    try:
                        self.store.finish_run(conn, report.run_id, status, report)
                    except psycopg.Error:
                        pass
        self.progress("done", {"report": report})
        return report

    # -- the walk --------------------------------------------------------------------------

    def _walk_and_write(
        self, conn: psycopg.Connection[Any], root: Path, root_key: str, collection: str,
        rules: WalkRules, states: dict[str, Any], report: IngestReport, *, full: bool,
        dry_run: bool, model: str | None,
    ) -> set[str]:
        seen: set[str] = set()
        pending = _Pending()
        size, overlap = self.settings.chunk.size, self.settings.chunk.overlap
        default_language = self.settings.source.language
        for item in walk(root, rules):
            if isinstance(item, SkippedFile):
                if item.reason == "unreadable":
                    seen.add(item.path)  # a transient read error must not prune the document
                report.skipped.append(item)
                report.files_skipped[item.reason] = report.files_skipped.get(item.reason, 0) + 1
                continue
            failpoints.hit("after_walk_item")
            seen.add(item.path)
            report.documents_seen += 1
            stored = states.get(item.path)
            if not full and stored is not None and self._unchanged(item.data, stored, model):
                report.documents_skipped += 1
                report.chunks_unchanged += stored.chunk_count
                self.progress("document", {"path": item.path, "status": "unchanged", "report": report})
                continue
            try:
                document = parse_document(item.path, item.data, item.text)
                embeds = model is not None and document.embed
                fp = fingerprint(size, overlap, model if embeds else None)
                chunks = self.chunker.chunk(document)
                prepared = PreparedDocument(
                    document=document,
                    chunks=chunks,
                    vectors=None,
                    language=language.detect(document.content, document.front_matter, default_language),
                    fingerprint=fp,
                    source_root=root_key,
                )
            except (RagError, ValueError, RecursionError, MemoryError) as exc:
                self._fail(report, item.path, f"cannot parse: {_first_line(exc)}", "parse")
                continue
            for warning in document.warnings:
                report.warnings.append(f"{item.path}: {warning}")
            (report.changed if stored is not None else report.added).append(item.path)
            if dry_run:
                if embeds:
                    report.tokens_embedded += prepared.token_count
                report.documents_indexed += 1
                continue
            pending.items.append(prepared)
            pending.chunks += len(chunks) if embeds else 0
            if (pending.chunks >= self._embed_group_chunks()
                    or len(pending.items) >= WRITE_GROUP_DOCUMENTS):
                self._flush(conn, collection, pending, report, model)
                pending = _Pending()
        if pending.items:
            self._flush(conn, collection, pending, report, model)
        return seen

    def _unchanged(self, data: bytes, stored: Any, model: str | None) -> bool:
        """Same bytes and same pipeline: decided from the raw bytes, without parsing."""
        if stored.content_hash != hashlib.sha256(data).hexdigest():
            return False
        size, overlap = self.settings.chunk.size, self.settings.chunk.overlap
        return bool(stored.fingerprint == fingerprint(size, overlap, model if stored.embed else None))

    # -- embed then write --------------------------------------------------------------------

    def _flush(
        self, conn: psycopg.Connection[Any], collection: str, pending: _Pending,
        report: IngestReport, model: str | None,
    ) -> None:
        ready = self._embed(pending.items, report, model)
        if not ready:
            return
        failpoints.hit("before_write")
        try:
            written = self.store.replace_documents(conn, collection, ready, model)
            self._count_written(report, ready, written)
        except psycopg.OperationalError as exc:
            raise StoreError(f"database connection lost while writing: {_first_line(exc)}") from None
        except psycopg.Error:
            for item in ready:  # isolate the document the database refused
                try:
                    written = self.store.replace_documents(conn, collection, [item], model)
                    self._count_written(report, [item], written)
                except psycopg.OperationalError as exc:
                    raise StoreError(f"database connection lost while writing: {_first_line(exc)}") from None
                except psycopg.Error as exc:
                    self._fail(report, item.document.path, f"database refused it: {_first_line(exc)}", "store")
        failpoints.hit("after_write")

    def _count_written(self, report: IngestReport, items: list[PreparedDocument], written: int) -> None:
        report.documents_indexed += len(items)
        report.chunks_upserted += written
        for item in items:
            self.progress("document", {"path": item.document.path, "status": "indexed", "report": report})

    def _embed_group_chunks(self) -> int:
        """Chunks gathered before embedding: enough batches to keep every request slot busy."""
        embedding = self.settings.embedding
        return embedding.batch_size * max(4, embedding.concurrency)

    def _embed(
        self, items: list[PreparedDocument], report: IngestReport, model: str | None
    ) -> list[PreparedDocument]:
        """Vectorise every chunk of the documents that embed; drop (and record) the ones refused."""
        needing = [p for p in items if model is not None and p.document.embed and p.chunks]
        if not needing:
            return items
        failpoints.hit("before_embed")
        try:
            self._embed_documents(needing, report)
            failpoints.hit("after_embed")
            return items
        except EmbeddingError as exc:
            if exc.kind == "unavailable":
                raise
        # one document at a time, to find the one the service refuses
        refused: set[int] = set()
        for item in needing:
            try:
                self._embed_documents([item], report)
            except EmbeddingError as error:
                if error.kind == "unavailable":
                    raise
                refused.add(id(item))
                self._fail(report, item.document.path, _embedding_message(error), error.kind)
        return [p for p in items if id(p) not in refused]

    def _embed_documents(self, items: list[PreparedDocument], report: IngestReport) -> None:
        """Embed every chunk of ``items`` (type passage), several batches in flight.

        Runs outside any transaction: a slow or failing service never holds a database lock.
        Batches are cut by count and by estimated tokens; progress gets one "embedded" event
        per batch with the running totals (``embedded`` of ``total`` queued so far).
        """
        texts = [embedding_text(chunk) for item in items for chunk in item.chunks]
        settings = self.settings.embedding
        self._embed_total += len(texts)

        def done(count: int) -> None:
            report.embedding_calls += 1
            self._embed_done += count
            self.progress("embedded", {"count": count, "embedded": self._embed_done,
                                       "total": self._embed_total, "report": report})

        stacked = embed_all(
            self.provider, "passage", texts, batch_size=settings.batch_size,
            batch_tokens=settings.batch_tokens, concurrency=settings.concurrency, on_batch=done,
        )
        offset = 0
        for item in items:
            n = len(item.chunks)
            item.vectors = stacked[offset:offset + n]
            offset += n
            report.tokens_embedded += item.token_count

    def _fail(self, report: IngestReport, path: str, message: str, kind: str) -> None:
        report.failures.append(FailedDocument(path=path, error=message, kind=kind))
        report.documents_failed += 1
        self.progress("document", {"path": path, "status": "failed", "report": report})

    # -- single writer -----------------------------------------------------------------------

    @contextmanager
    def _lock(self, conn: psycopg.Connection[Any], collection: str, dry_run: bool) -> Iterator[None]:
        """Hold the collection's advisory lock for the run; the second ingest waits, then fails."""
        if dry_run:
            yield
            return
        with collection_lock(conn, self.settings.database.schema, collection,
                             timeout=self.settings.database.lock_timeout, source=self.source,
                             warn=self.warn):
            yield


def _embedding_message(exc: EmbeddingError) -> str:
    return str(exc)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


__all__ = ["DocumentError", "Ingestor", "RagError"]
