"""Change a collection's embedding model: re-vectorise stored chunks beside the old vectors, switch.

The steps, each safe to kill::

    lock the collection (the ingest's advisory lock: no ingest runs meanwhile)
    record the run (reembed_run), or resume the unfinished one to the same model
    page through chunks lacking a vector of the new model: embed, add (old vectors stay)
    build the new model's HNSW index
    one transaction: check that no chunk lacks a new vector, point the collection at the new
        model, update the documents' fingerprints            <- searches switch here
    drop the other models' vectors (unless --keep) and their unused indexes

Until the switch, searches serve the old model with all of its vectors; after it, the new
one with all of its own. A killed run leaves only complete rows: the next one embeds what is
still missing and goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import psycopg
from psycopg.rows import dict_row

from rag_pg.admin.reembed_store import ReembedStore
from rag_pg.config import Settings
from rag_pg.embed import embed_all, make_provider, serving
from rag_pg.embed.base import EmbeddingProvider
from rag_pg.errors import ConfigError, EmbeddingError, SchemaMissing
from rag_pg.models import Chunk
from rag_pg.source.tokens import embedding_text
from rag_pg.store import checkpoints, records
from rag_pg.store.db import ConnectionSource, prepare
from rag_pg.store.locks import collection_lock

ProgressFn = Callable[[str, dict[str, Any]], None]
MAX_FAILURES_LISTED = 20


@dataclass(slots=True)
class ReembedReport:
    """What one ``ragpg reembed`` did."""

    collection: str
    target_model: str
    target_dimension: int
    source_model: str | None = None
    source_dimension: int | None = None
    run_id: int | None = None
    resumed: bool = False
    status: str = "running"  # completed | already | incomplete
    chunks_total: int = 0  # chunks lacking a vector of the target model at the start
    chunks_embedded: int = 0
    chunks_failed: int = 0
    embedding_calls: int = 0
    switched: bool = False
    kept_old: bool = False
    vectors_dropped: int = 0
    indexes_dropped: list[str] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    duration_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Reembedder:
    """Re-vectorises one collection with ``provider`` (which must serve the target model)."""

    def __init__(
        self,
        settings: Settings,
        source: ConnectionSource,
        provider: EmbeddingProvider,
        *,
        progress: ProgressFn | None = None,
        warn: Callable[[str], None] | None = None,
        drop_grace: float = 1.0,
    ) -> None:
        self.settings = settings
        self.source = source
        self.provider = provider
        # Seconds between the switch and dropping the old vectors: a search that read the
        # collection's model just before the switch still finds that model's vectors.
        self.drop_grace = drop_grace
        self.store = ReembedStore(settings.database.schema, settings.index)
        self.progress = progress or (lambda event, data: None)
        self.warn = warn or (lambda message: None)

    def run(self, collection: str | None = None, *, keep: bool = False) -> ReembedReport:
        """Re-embed ``collection`` to the provider's model; see the module docstring."""
        started = time.monotonic()
        collection = collection or self.settings.collection
        if self.provider.kind == "none":
            raise ConfigError("reembed needs an embedding provider (embedding.provider is none)")
        target_model = self.provider.model
        target_dim = self.provider.dimension
        if target_model is None or target_dim is None:
            raise ConfigError("the embedding provider does not say its model and dimension")
        report = ReembedReport(collection, target_model, target_dim, kept_old=keep)
        with self.source.connection() as conn:
            prepare(conn)
            self._check_schema(conn)
            with self._lock(conn, collection):
                self._run_locked(conn, report, keep)
        report.duration_seconds = time.monotonic() - started
        self.progress("done", {"report": report})
        return report

    # -- the run, under the collection's lock --------------------------------------------------

    def _run_locked(self, conn: psycopg.Connection[Any], report: ReembedReport, keep: bool) -> None:
        collection, model, dim = report.collection, report.target_model, report.target_dimension
        current = self.store.collection_model(conn, collection)
        if current is None:
            raise ConfigError(f"collection {collection!r} does not exist: run `ragpg ingest` first")
        report.source_model, report.source_dimension = current
        if report.source_model == model and report.source_dimension not in (None, dim):
            raise ConfigError(
                f"collection {collection!r} holds {model!r} vectors of {report.source_dimension} d"
                f" and the provider gives {dim} d under the same name: give the new vectors a"
                " model name of their own"
            )
        run = self._unfinished_run(conn, report)
        if report.source_model == model:  # switched already (maybe killed before the drop)
            report.status = "already"
            report.run_id = int(run["id"]) if run is not None else None
            self._finish(conn, report, keep)
            return
        report.chunks_total = self.store.pending_vectors(conn, collection, model)
        params = {"collection": collection, "source_model": report.source_model,
                  "source_dimension": report.source_dimension, "target_model": model,
                  "target_dimension": dim, "keep_old": keep, "chunks_total": report.chunks_total}
        with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            if run is not None:
                report.run_id, report.resumed = int(run["id"]), True
                cur.execute(self.store.q("reembed_run_resume"), {**params, "id": report.run_id})
            else:
                row = cur.execute(self.store.q("reembed_run_start"), params).fetchone()
                assert row is not None
                report.run_id = int(row["id"])
        if report.resumed:
            self.warn(f"resuming the re-embed of {collection!r} to {model!r}:"
                      f" {report.chunks_total} chunks left")
        try:
            self._embed_missing(conn, report)
        except EmbeddingError as exc:
            self._status(conn, report.run_id, "running", str(exc))  # resumable
            raise
        if report.chunks_failed:
            report.status = "incomplete"
            first = report.failures[0]
            self._status(conn, report.run_id, "running",
                         f"{report.chunks_failed} chunks failed; first: {first['error']}")
            return
        checkpoints.reach("reembed_before_switch")
        self.store.ensure_vector_index(conn, model, dim)
        missing = self.store.switch_model(conn, collection, model, dim)
        if missing:  # only if something wrote chunks without holding the lock
            report.status = "incomplete"
            self._status(conn, report.run_id, "running", f"{missing} chunks still lack a vector")
            return
        report.switched = True
        self._status(conn, report.run_id, "switched", None)
        checkpoints.reach("reembed_after_switch")
        self._finish(conn, report, keep)

    def _unfinished_run(self, conn: psycopg.Connection[Any],
                        report: ReembedReport) -> dict[str, Any] | None:
        """The collection's unfinished run toward the same model (resumed), once a run toward
        another model is closed: completed when it had switched, else abandoned."""
        collection, model = report.collection, report.target_model
        with conn.cursor(row_factory=dict_row) as cur:
            run = cur.execute(self.store.q("reembed_run_current"), {"collection": collection}).fetchone()
        if run is None or run["target_model"] == model:
            return run
        if run["status"] == "switched" or run["target_model"] == report.source_model:
            # It switched the collection and was stopped before dropping: this run drops.
            self._status(conn, int(run["id"]), "completed", None)
        else:
            self.warn(f"abandoning the unfinished re-embed of {collection!r}"
                      f" to {run['target_model']!r}")
            self._status(conn, int(run["id"]), "abandoned", f"superseded by a re-embed to {model!r}")
        return None

    def _embed_missing(self, conn: psycopg.Connection[Any], report: ReembedReport) -> None:
        """Page through the chunks lacking a target vector; embed each page, then add it."""
        embedding = self.settings.embedding
        page = embedding.batch_size * max(4, embedding.concurrency)
        after = 0
        while True:
            rows = self.store.chunks_without_vector(
                conn, report.collection, report.target_model, after=after, limit=page
            )
            if not rows:
                return
            after, _ = rows[-1]
            ids, vectors = self._embed_page(rows, report)
            if ids:
                self.store.add_vectors(conn, report.target_model, ids, vectors)
            report.chunks_embedded += len(ids)
            assert report.run_id is not None
            with conn.transaction():
                conn.execute(
                    self.store.q("reembed_run_progress"),
                    {"id": report.run_id, "embedded": len(ids), "failed": report.chunks_failed},
                )
            checkpoints.reach("reembed_after_batch")

    def _embed_page(
        self, rows: list[tuple[int, Chunk]], report: ReembedReport
    ) -> tuple[list[int], np.ndarray]:
        """Vectors for a page; when the provider refuses some text, embed one chunk at a time."""
        embedding = self.settings.embedding
        texts = [embedding_text(chunk) for _, chunk in rows]

        page_done = 0

        def done(count: int) -> None:
            nonlocal page_done
            page_done += count
            report.embedding_calls += 1
            self.progress("reembedded", {"count": count, "report": report,
                                         "embedded": report.chunks_embedded + page_done,
                                         "total": report.chunks_total})

        try:
            vectors = embed_all(
                self.provider, "passage", texts, batch_size=embedding.batch_size,
                batch_tokens=embedding.batch_tokens, concurrency=embedding.concurrency,
                on_batch=done,
            )
            return [chunk_id for chunk_id, _ in rows], vectors
        except EmbeddingError as exc:
            if exc.kind == "unavailable":
                raise
        ids: list[int] = []
        kept: list[np.ndarray] = []
        for (chunk_id, chunk), text in zip(rows, texts, strict=True):
            try:
                kept.append(self.provider.embed("passage", [text])[0])
                ids.append(chunk_id)
                report.embedding_calls += 1
            except EmbeddingError as error:
                if error.kind == "unavailable":
                    raise
                report.chunks_failed += 1
                if len(report.failures) < MAX_FAILURES_LISTED:
                    report.failures.append({"chunk_id": chunk_id, "path": chunk.document_path,
                                            "position": chunk.position, "kind": error.kind,
                                            "error": str(error)})
        return ids, (np.stack(kept) if kept else np.zeros((0, 0), dtype=np.float32))

    def _finish(self, conn: psycopg.Connection[Any], report: ReembedReport, keep: bool) -> None:
        """After the switch: drop the other models' vectors (unless ``keep``) and idle indexes."""
        if not keep:
            if report.switched and self.drop_grace > 0:
                time.sleep(self.drop_grace)
            with conn.cursor(row_factory=dict_row) as cur:
                models = cur.execute(self.store.q("reembed_models"),
                                     {"collection": report.collection}).fetchall()
            others = [r["model"] for r in models if r["model"] != report.target_model]
            report.vectors_dropped = self.store.drop_other_vectors(
                conn, report.collection, report.target_model
            )
            for other in others:
                if self.store.drop_vector_index_if_unused(conn, other):
                    report.indexes_dropped.append(other)
        if report.status != "already":
            report.status = "completed"
        if report.run_id is not None:
            self._status(conn, report.run_id, "completed", None)

    # -- bookkeeping ---------------------------------------------------------------------------

    def _status(
        self, conn: psycopg.Connection[Any], run_id: int | None, status: str, error: str | None
    ) -> None:
        if run_id is None:
            return
        with conn.transaction():
            conn.execute(self.store.q("reembed_run_status"),
                         {"id": run_id, "status": status, "error": error})

    def _check_schema(self, conn: psycopg.Connection[Any]) -> None:
        if not records.table_exists(conn, self.store.q, "reembed_run"):
            raise SchemaMissing.out_of_date(self.settings.database.schema)

    @contextmanager
    def _lock(self, conn: psycopg.Connection[Any], collection: str) -> Iterator[None]:
        """The ingest's advisory lock on the collection: ingest and reembed exclude each other."""
        with collection_lock(conn, self.settings.database.schema, collection,
                             timeout=self.settings.database.lock_timeout, source=self.source,
                             warn=self.warn, what="re-embed"):
            yield


def target_provider(
    settings: Settings,
    model: str | None,
    *,
    provider: EmbeddingProvider | None = None,
    warn: Callable[[str], None] | None = None,
) -> tuple[EmbeddingProvider, bool]:
    """The provider of the target model, and whether the caller must close it.

    Without ``model``: the configured provider. With it: the configured chain restricted to
    that model, or, when no configured provider serves it, the configuration with
    ``embedding.model`` set to it (an OpenAI or Ollama endpoint serves any model it has).
    """
    base = provider if provider is not None else make_provider(settings.embedding, warn=warn)
    owned = provider is None
    if model is None:
        return base, owned
    found = serving(base, model, None)
    if found is not None and _serves(found, model):
        return found, owned
    if owned:
        base.close()
    other = make_provider(settings.with_overrides(**{"embedding.model": model}).embedding, warn=warn)
    found = serving(other, model, None)
    if found is None or not _serves(found, model):
        other.close()
        raise ConfigError(
            f"no configured embedding provider serves model {model!r} (they serve another"
            " model, or cannot be reached to say which)"
        )
    return found, True


def _serves(provider: EmbeddingProvider, model: str) -> bool:
    """Whether ``provider`` makes vectors of ``model`` with a known dimension (asks it)."""
    try:
        return (provider.model == model and provider.dimension is not None
                and provider.health().get("model") in (None, model))
    except EmbeddingError:
        return False


def reembed(
    rag: Any,
    *,
    collection: str | None = None,
    model: str | None = None,
    keep: bool = False,
    progress: ProgressFn | None = None,
) -> ReembedReport:
    """Re-embed a :class:`~rag_pg.RagPG`'s collection to ``model`` (default: the configured one)."""
    provider, owned = target_provider(rag.settings, model, warn=rag.warn)
    try:
        return Reembedder(rag.settings, rag.source, provider, progress=progress,
                          warn=rag.warn).run(collection, keep=keep)
    finally:
        if owned:
            provider.close()
