"""Incremental ingest: walk, skip unchanged, convert, chunk, embed outside transactions, replace per document.

A PDF, DOCX, ... is decided unchanged on its raw bytes and fingerprint before anything
converts it; a conversion runs in the run's one worker process (``ConversionPool``), and a
file it cannot convert fails alone, its stored version kept.

A group's embedding is ``rag_pg.ingest.embed_groups``'s, the run's row ``rag_pg.store.runs``'s, and
which database errors stop the run ``rag_pg.ingest.failures``' to say.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from rag_pg.config import Settings
from rag_pg.embed.base import EmbeddingProvider
from rag_pg.errors import ConfigError, DatabaseRefused, DocumentError, RagError, StoreError
from rag_pg.ingest import parents, reuse
from rag_pg.ingest.embed_groups import EmbeddedGroup, GroupEmbedder
from rag_pg.ingest.prepare import Failed, Preparer, Unchanged, read_ahead
from rag_pg.models import FailedDocument, IngestReport, SkippedFile
from rag_pg.source.access import AccessRules
from rag_pg.source.chunk import Chunker
from rag_pg.source.convert import DEFAULT_REGISTRY, ConversionPool
from rag_pg.source.markdown.sites import detect_style
from rag_pg.source.walk import WalkRules, estimate_documents
from rag_pg.store import checkpoints, tenancy
from rag_pg.store.db import ConnectionSource
from rag_pg.store.documents import PreparedDocument, Store, StoredState
from rag_pg.store.locks import collection_lock
from rag_pg.store.runs import abort_stale_runs

WRITE_GROUP_DOCUMENTS = 64  # documents per write transaction (each document stays atomic)
# Files that are no document (not_markdown) or of a format not read are all counted in
# files_skipped, but only this many are listed in report.skipped: a tree of images or build
# output would otherwise make the report (and `ingest -v --json`) as long as the tree.
LISTED_NON_DOCUMENTS = 1000
_NON_DOCUMENTS = frozenset({"not_markdown", "unsupported_format"})
# Planner statistics are refreshed after a run that wrote at least this many chunks and at
# least a tenth of the collection (autovacuum's own analyze threshold is a tenth of a table).
STATISTICS_MIN_CHUNKS = 500
STATISTICS_SHARE = 0.1
ProgressFn = Callable[[str, dict[str, Any]], None]


@contextmanager
def _embedding_worker() -> Iterator[ThreadPoolExecutor]:
    """The thread that embeds the next group while this one writes. On an interrupt (Ctrl-C,
    SIGTERM) it is not waited for: its batch is abandoned (nothing of it was written) and
    the command stops at once instead of after a slow model's batch."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragpg-ingest-embed")
    try:
        yield pool
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


@dataclass(slots=True)
class _Pending:
    items: list[PreparedDocument] = field(default_factory=list)
    chunks: int = 0


def _cheap(event: object) -> bool:
    """An event that holds no document to write: passed between threads in batches."""
    return isinstance(event, Unchanged | SkippedFile)


@dataclass(frozen=True, slots=True)
class _Opened:
    """What a run starts from (see :meth:`Ingestor._open`)."""

    states: dict[str, StoredState]
    model: str | None
    dimension: int | None
    defer_stats: bool  # a first load: its term statistics are counted once, at its end
    defer_index: bool  # a first load: its HNSW index is built once, at its end


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
        self.chunker = self._chunker(None)
        self.progress = progress or (lambda event, data: None)
        self.warn = warn or (lambda message: None)
        self.embedder = GroupEmbedder(provider, settings.embedding, self.store.q, self.progress)
        self._calls_before = 0  # the embedder's calls when the current run began
        self._model_confirmed = True  # False while the run relies on the collection's bound model

    def _chunker(self, root: Path | None) -> Chunker:
        """The chunker of a run: ``auto`` anchors slug as the site built from ``root`` does."""
        style = self.settings.source.anchor_style
        if style == "auto":
            style = detect_style(root) if root is not None else "github"
        chunk = self.settings.chunk
        return Chunker(chunk.size, chunk.overlap, max_tokens=chunk.max_tokens, slug_style=style)

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
        self.chunker = self._chunker(root_path)
        rules = self._walk_rules()
        self.progress("planned", {"files": estimate_documents(root_path, rules), "report": report})
        with self.source.connection() as conn, self._lock(conn, collection, dry_run):
            opened = self._open(conn, collection, report, full=full, dry_run=dry_run)
            status = "failed"
            try:
                seen = self._walk_and_write(conn, root_path, root_key, collection, rules,
                                            opened.states, report, full=full, dry_run=dry_run,
                                            model=opened.model)
                if prune:
                    self._prune(conn, collection, sorted(p for p in opened.states if p not in seen),
                                report, dry_run=dry_run)
                if not dry_run:
                    parents.record_missing_parents(conn, self.store.schema, collection, report, seen)
                status = "partial" if report.failures else "completed"
            except (KeyboardInterrupt, SystemExit):
                status = "aborted"  # interrupted or terminated: the run stopped, nothing failed
                raise
            finally:
                self._close(conn, collection, opened, report, status, started, dry_run=dry_run)
        self.progress("done", {"report": report})
        return report

    def _walk_rules(self) -> WalkRules:
        source = self.settings.source
        return WalkRules(
            included_paths=source.included_paths,
            excluded_paths=source.excluded_paths,
            follow_symlinks=source.follow_symlinks,
            max_file_bytes=source.max_file_bytes,
            read_hardlinks=source.read_hardlinks,
            formats=DEFAULT_REGISTRY.resolve_formats(source.formats),
            max_document_bytes=source.max_document_bytes,
        )

    def _open(self, conn: psycopg.Connection[Any], collection: str, report: IngestReport, *,
              full: bool, dry_run: bool) -> _Opened:
        """What the run starts from: the stored documents, the model to write with, what is
        left for its end (term statistics, the vector index), and its ``ingest_run`` row."""
        with conn.transaction() if tenancy.active() else nullcontext():  # names the tenant
            states = self.store.document_states(conn, collection)
            bound = (self.store.collection_model(conn, collection)
                     if states and not dry_run else None)
            # A first load counts its term statistics once at its end (rag_pg.store.term_stats);
            # so does the run after a first load that was killed before counting them.
            defer_stats = not dry_run and (
                not states or self.store.term_stats_pending(conn, collection))
        model, dimension = self._write_model(bound)
        # First bulk load of an empty collection: build the HNSW index once at the end
        # (in memory, in bulk) rather than maintaining it on every insert.
        defer_index = (not dry_run and not states and model is not None and dimension is not None
                       and not self.store.vector_index_exists(conn, model))
        if not dry_run and self._model_confirmed:
            self.store.bind_model(conn, collection, model, dimension, create_index=not defer_index)
        if defer_stats:
            self.store.defer_term_stats(conn, collection)
        elif dry_run:
            with conn.transaction() if tenancy.active() else nullcontext():
                current_model, _ = self.store.collection_model(conn, collection) or (None, None)
            if current_model and current_model != model:
                report.warnings.append(
                    f"collection is indexed with {current_model!r}; configured model is {model!r}"
                )
        if not dry_run:
            self.embedder.reuse_after = reuse.chunk_watermark(conn, self.store.q) if full else 0
            report.run_id = self.store.start_run(
                conn, source_root=report.source_root, collection=collection,
                mode="full" if full else "incremental", model=model,
            )
        self._calls_before = self.embedder.calls
        return _Opened(states, model, dimension, defer_stats, defer_index)

    def _write_model(self, bound: tuple[str | None, int | None] | None) -> tuple[str | None, int | None]:
        """The model and dimension documents are written with."""
        bound_model, bound_dimension = bound or (None, None)
        if bound_model is not None and self._model_needs_a_call():
            # Documents stored with a bound model: "unchanged" is decided against it, and the
            # service is asked for its model (a /health request) only when something must be
            # written: a no-change run never contacts it. A swapped model behind the same URL
            # is refused at the first changed document, or by the next search.
            self._model_confirmed = False
            return bound_model, bound_dimension
        self._model_confirmed = True
        return self.provider.model, self.provider.dimension

    def _prune(self, conn: psycopg.Connection[Any], collection: str, gone: list[str],
               report: IngestReport, *, dry_run: bool) -> None:
        report.deleted = gone
        if dry_run:
            report.documents_deleted = len(gone)
            return
        report.documents_deleted, report.chunks_deleted = self.store.delete_documents(
            conn, collection, gone)

    def _close(self, conn: psycopg.Connection[Any], collection: str, opened: _Opened,
               report: IngestReport, status: str, started: float, *, dry_run: bool) -> None:
        """The run's end, whatever stopped it: what was left for it, then its row."""
        report.embedding_calls = self.embedder.calls - self._calls_before
        if opened.defer_stats:
            try:
                self.store.rebuild_term_stats(conn, collection)
            except StoreError:
                pass  # still pending: the next run rebuilds; searches do without meanwhile
        if opened.defer_index and opened.model is not None and opened.dimension is not None:
            try:
                self.store.ensure_vector_index(conn, opened.model, opened.dimension)
            except StoreError:
                pass  # the next run creates it (IF NOT EXISTS); search is exact meanwhile
        if not dry_run and changed_much(report, opened.states):
            self.store.refresh_statistics(conn)
        report.duration_seconds = time.monotonic() - started
        if report.run_id is not None:
            try:
                self.store.finish_run(conn, report.run_id, status, report)
            except StoreError:
                pass  # the run's row stays 'running'; the next run marks it aborted

    # -- the walk --------------------------------------------------------------------------

    def _walk_and_write(
        self, conn: psycopg.Connection[Any], root: Path, root_key: str, collection: str,
        rules: WalkRules, states: dict[str, Any], report: IngestReport, *, full: bool,
        dry_run: bool, model: str | None,
    ) -> set[str]:
        seen: set[str] = set()
        pending = _Pending()
        limits = self.settings.convert
        preparer = Preparer(self.settings, self.chunker, self.provider,
                            AccessRules.load(root, self.settings.permissions.default))
        # Three stages at once: a thread reads and parses the next files (read_ahead), one
        # worker embeds the next group, and this thread writes the group before (_flush). The
        # conversion pool starts its worker process at the first file to convert.
        with _embedding_worker() as pool, \
                ConversionPool(time_limit=limits.time_limit,
                               memory_limit=limits.memory_limit_mb * 2**20) as converter, \
                closing(read_ahead(preparer.events(root, rules, states, converter, full=full,
                                                   model=model, root_key=root_key),
                                   WRITE_GROUP_DOCUMENTS, cheap=_cheap)) as events:
            ahead: Future[EmbeddedGroup] | None = None
            non_documents = 0
            for event in events:
                if isinstance(event, SkippedFile):
                    if event.reason == "unreadable":
                        seen.add(event.path)  # a transient read error must not prune the document
                    if event.reason not in _NON_DOCUMENTS or non_documents < LISTED_NON_DOCUMENTS:
                        report.skipped.append(event)
                    non_documents += event.reason in _NON_DOCUMENTS
                    report.files_skipped[event.reason] = report.files_skipped.get(event.reason, 0) + 1
                    continue
                seen.add(event.path)
                report.documents_seen += 1
                if isinstance(event, Unchanged):
                    report.documents_skipped += 1
                    report.chunks_unchanged += event.stored.chunk_count
                    self.progress("document", {"path": event.path, "status": "unchanged", "report": report})
                    continue
                # A file that fails to convert keeps what is stored: its path is in ``seen``.
                report.documents_converted += event.converted
                if isinstance(event, Failed):
                    self._fail(report, event.path, event.message, event.kind)
                    continue
                prepared = event.prepared
                for warning in prepared.document.warnings:
                    report.warnings.append(f"{event.path}: {warning}")
                (report.changed if event.stored is not None else report.added).append(event.path)
                if dry_run:
                    if event.embeds:
                        report.tokens_embedded += prepared.token_count
                    report.documents_indexed += 1
                    continue
                if not self._model_confirmed:
                    self._confirm_model(conn, collection)
                pending.items.append(prepared)
                pending.chunks += len(prepared.chunks) if event.embeds else 0
                if (pending.chunks >= self.embedder.group_chunks()
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

    # -- embed then write --------------------------------------------------------------------

    def _flush(
        self, conn: psycopg.Connection[Any], collection: str, pending: _Pending | None,
        report: IngestReport, model: str | None, *, pool: ThreadPoolExecutor,
        ahead: Future[EmbeddedGroup] | None,
    ) -> Future[EmbeddedGroup] | None:
        """Hand ``pending`` to the embedding worker, then write ``ahead``, the group before it.

        Group N+1 is embedded while group N is written (and while this thread walks on), so
        a cold ingest costs about the slower of embedding and writing, not their sum. One
        group at most waits in the worker: memory stays flat in corpus size. ``result()``
        re-raises the worker's error (an unavailable service, a fault injected by a test) before anything
        of that group is written, and no further group is handed over. Returns the future of
        ``pending`` (None when there is nothing to hand over).
        """
        embedded = ahead.result() if ahead is not None else None
        following = None
        if pending is not None and pending.items:
            known = self.embedder.known_vectors(conn, collection, pending.items, model, embedded)
            following = pool.submit(self.embedder.embed, pending.items, report, model, known)
        if embedded is not None:
            self._write(conn, collection, embedded, report, model)
        return following

    def _write(
        self, conn: psycopg.Connection[Any], collection: str, embedded: EmbeddedGroup,
        report: IngestReport, model: str | None,
    ) -> None:
        """Count what embedding did, then write the group's documents in one transaction."""
        report.embedding_calls = self.embedder.calls - self._calls_before
        report.tokens_embedded += embedded.tokens
        report.chunks_reused += embedded.reused
        for refused in embedded.refused:
            self._fail(report, refused.path, refused.error, refused.kind)
        ready = embedded.ready
        if not ready:
            return
        checkpoints.reach("before_write")
        try:
            written = self.store.replace_documents(conn, collection, ready, model)
            self._count_written(report, ready, written)
        except DatabaseRefused:
            for item in ready:  # isolate the document the database refused
                try:
                    written = self.store.replace_documents(conn, collection, [item], model)
                    self._count_written(report, [item], written)
                except DatabaseRefused as error:
                    # A limit of the server (a tsvector over 1 MB, a path longer than a btree
                    # entry), on a connection that is fine: that document fails alone.
                    self._fail(report, item.document.path, str(error), "store")
        checkpoints.reach("after_write")
        if report.run_id is not None:
            self.store.record_progress(conn, report.run_id, report)

    def _count_written(self, report: IngestReport, items: list[PreparedDocument], written: int) -> None:
        report.documents_indexed += len(items)
        report.chunks_upserted += written
        for item in items:
            self.progress("document", {"path": item.document.path, "status": "indexed", "report": report})

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
            abort_stale_runs(conn, self.settings.database.schema, collection)
            yield


def changed_much(report: IngestReport, states: Mapping[str, Any]) -> bool:
    """Whether a run wrote enough of its collection for the planner's statistics to be stale."""
    written = report.chunks_upserted + report.chunks_deleted
    before = sum(state.chunk_count for state in states.values())
    return written >= STATISTICS_MIN_CHUNKS and written >= STATISTICS_SHARE * before


__all__ = ["DocumentError", "Ingestor", "RagError"]
