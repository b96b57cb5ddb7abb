"""Incremental ingest: walk, skip unchanged, chunk, embed outside transactions, replace per document."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from . import failpoints, language
from .chunk import Chunker, embedding_text
from .config import Settings
from .db import ConnectionSource
from .embed.base import EmbeddingProvider
from .embed.batching import embed_all
from .errors import ConfigError, DocumentError, EmbeddingError, RagError, StoreError
from .locks import collection_lock
from .models import FailedDocument, IngestReport, SkippedFile
from .store import PreparedDocument, Store, fingerprint
from .walk import WalkRules, walk

WRITE_GROUP_DOCUMENTS = 64  # documents per write transaction (each document stays atomic)
# Planner statistics are refreshed after a run that wrote at least this many chunks and at
# least a tenth of the collection (autovacuum's own analyze threshold is a tenth of a table).
STATISTICS_MIN_CHUNKS = 500
STATISTICS_SHARE = 0.1

ProgressFn = Callable[[str, dict[str, Any]], None]


@dataclass(slots=True)
class _Pending:
    items: list[PreparedDocument] = field(default_factory=list)
    chunks: int = 0


@dataclass(slots=True)
class _Embedded:
    """A group after embedding: what to write, and the counts the main thread adds to the report.

    Embedding runs on a worker thread (see ``_flush``); it never updates the report itself,
    so no counter is written from two threads.
    """

    ready: list[PreparedDocument]
    refused: list[FailedDocument] = field(default_factory=list)
    calls: int = 0
    tokens: int = 0



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
        self.store = Store(settings.database.schema, settings.index)
        self.chunker = Chunker(settings.chunk.size, settings.chunk.overlap)
        self.progress = progress or (lambda event, data: None)
        self.warn = warn or (lambda message: None)
        self._embed_total = 0  # chunks queued for embedding so far in this run
        self._embed_done = 0
        self._model_confirmed = True  # False while the run relies on the collection's bound model

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
        rules = WalkRules(
            included_paths=self.settings.source.included_paths,
            excluded_paths=self.settings.source.excluded_paths,
            follow_symlinks=self.settings.source.follow_symlinks,
            max_file_bytes=self.settings.source.max_file_bytes,
        )
        with self.source.connection() as conn, self._lock(conn, collection, dry_run):
            states = self.store.document_states(conn, collection)
            bound = self.store.collection_model(conn, collection) if states and not dry_run else None
            model: str | None
            dimension: int | None
            if bound is not None and bound[0] is not None and self._model_needs_a_call():
                # Documents stored with a bound model: "unchanged" is decided against it, and the
                # service is asked for its model (a /health request) only when something must be
                # written: a no-change run never contacts it. A swapped model behind the same URL
                # is refused at the first changed document, or by the next search.
                model, dimension = bound
                self._model_confirmed = False
            else:
                model, dimension = self.provider.model, self.provider.dimension
                self._model_confirmed = True
            # First bulk load of an empty collection: build the HNSW index once at the end
            # (in memory, in bulk) rather than maintaining it on every insert.
            defer_index = (not dry_run and not states and model is not None and dimension is not None
                           and not self.store.vector_index_exists(conn, model))
            if not dry_run and self._model_confirmed:
                self.store.bind_model(conn, collection, model, dimension, create_index=not defer_index)
            elif dry_run:
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
                    from . import hierarchy

                    hierarchy.record_missing_parents(conn, self.store.schema, collection, report, seen)
                status = "partial" if report.failures else "completed"
            finally:
                if defer_index and model is not None and dimension is not None:
                    try:
                        self.store.ensure_vector_index(conn, model, dimension)
                    except psycopg.Error:
                        pass  # the next run creates it (IF NOT EXISTS); search is exact meanwhile
                if not dry_run and changed_much(report, states):
                    self.store.refresh_statistics(conn)
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
        # One worker embeds the next group while this thread writes the previous one (_flush).
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragpg-ingest-embed") as pool:
            ahead: Future[_Embedded] | None = None
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
                    # Parsing (YAML, Markdown) is imported here: a no-change run never parses.
                    from .parse import parse_document

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
                if not self._model_confirmed:
                    self._confirm_model(conn, collection)
                pending.items.append(prepared)
                pending.chunks += len(chunks) if embeds else 0
                if (pending.chunks >= self._embed_group_chunks()
                        or len(pending.items) >= WRITE_GROUP_DOCUMENTS):
                    ahead = self._flush(conn, collection, pending, report, model,
                                        pool=pool, ahead=ahead)
                    pending = _Pending()
            ahead = self._flush(conn, collection, pending, report, model, pool=pool, ahead=ahead)
            self._flush(conn, collection, None, report, model, pool=pool, ahead=ahead)
        return seen

    def _model_needs_a_call(self) -> bool:
        """Only a remote service without a configured model must be asked for its model; a
        configured one, the local model and ``none`` are checked at once (no I/O)."""
        return self.provider.kind not in ("local", "none") and not self.settings.embedding.model

    def _confirm_model(self, conn: psycopg.Connection[Any], collection: str) -> None:
        """Before the first write: the provider's model must be the collection's (else refuse)."""
        self.store.bind_model(conn, collection, self.provider.model, self.provider.dimension)
        self._model_confirmed = True

    def _unchanged(self, data: bytes, stored: Any, model: str | None) -> bool:
        """Same bytes and same pipeline: decided from the raw bytes, without parsing."""
        if stored.content_hash != hashlib.sha256(data).hexdigest():
            return False
        size, overlap = self.settings.chunk.size, self.settings.chunk.overlap
        return bool(stored.fingerprint == fingerprint(size, overlap, model if stored.embed else None))

    # -- embed then write --------------------------------------------------------------------

    def _flush(
        self, conn: psycopg.Connection[Any], collection: str, pending: _Pending | None,
        report: IngestReport, model: str | None, *, pool: ThreadPoolExecutor,
        ahead: Future[_Embedded] | None,
    ) -> Future[_Embedded] | None:
        """Hand ``pending`` to the embedding worker, then write ``ahead``, the group before it.

        Group N+1 is embedded while group N is written (and while this thread walks on), so
        a cold ingest costs about the slower of embedding and writing, not their sum. One
        group at most waits in the worker: memory stays flat in corpus size. ``result()``
        re-raises the worker's error (an unavailable service, a failpoint) before anything
        of that group is written, and no further group is handed over. Returns the future of
        ``pending`` (None when there is nothing to hand over).
        """
        embedded = ahead.result() if ahead is not None else None
        following = None
        if pending is not None and pending.items:
            following = pool.submit(self._embed, pending.items, report, model)
        if embedded is not None:
            self._write(conn, collection, embedded, report, model)
        return following

    def _write(
        self, conn: psycopg.Connection[Any], collection: str, embedded: _Embedded,
        report: IngestReport, model: str | None,
    ) -> None:
        """Count what embedding did, then write the group's documents in one transaction."""
        report.embedding_calls += embedded.calls
        report.tokens_embedded += embedded.tokens
        for refused in embedded.refused:
            self._fail(report, refused.path, refused.error, refused.kind)
        ready = embedded.ready
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
    ) -> _Embedded:
        """Vectorise every chunk of the documents that embed; drop (and list) the ones refused.

        Runs on the embedding worker (``_flush``): ``report`` is only read, for progress
        events; the counts and refusals go back in the result, for the main thread to record.
        """
        embedded = _Embedded(ready=items)
        needing = [p for p in items if model is not None and p.document.embed and p.chunks]
        if not needing:
            return embedded
        failpoints.hit("before_embed")
        try:
            self._embed_documents(needing, report, embedded)
            failpoints.hit("after_embed")
            return embedded
        except EmbeddingError as exc:
            if exc.kind == "unavailable":
                raise
        # one document at a time, to find the one the service refuses
        refused: set[int] = set()
        for item in needing:
            try:
                self._embed_documents([item], report, embedded)
            except EmbeddingError as error:
                if error.kind == "unavailable":
                    raise
                refused.add(id(item))
                embedded.refused.append(FailedDocument(
                    path=item.document.path, error=_embedding_message(error), kind=error.kind))
        embedded.ready = [p for p in items if id(p) not in refused]
        return embedded

    def _embed_documents(
        self, items: list[PreparedDocument], report: IngestReport, embedded: _Embedded
    ) -> None:
        """Embed every chunk of ``items`` (type passage), several batches in flight.

        Runs outside any transaction: a slow or failing service never holds a database lock.
        Batches are cut by count and by estimated tokens; progress gets one "embedded" event
        per batch with the running totals (``embedded`` of ``total`` queued so far), from the
        embedding worker thread (the only one that touches these totals).
        """
        texts = [embedding_text(chunk) for item in items for chunk in item.chunks]
        settings = self.settings.embedding
        self._embed_total += len(texts)

        def done(count: int) -> None:
            embedded.calls += 1
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
            embedded.tokens += item.token_count

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


def changed_much(report: IngestReport, states: Mapping[str, Any]) -> bool:
    """Whether a run wrote enough of its collection for the planner's statistics to be stale."""
    written = report.chunks_upserted + report.chunks_deleted
    before = sum(state.chunk_count for state in states.values())
    return written >= STATISTICS_MIN_CHUNKS and written >= STATISTICS_SHARE * before


def _embedding_message(exc: EmbeddingError) -> str:
    return str(exc)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


__all__ = ["DocumentError", "Ingestor", "RagError"]
