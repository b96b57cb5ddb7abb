"""The embedding of an ingest's write groups: the vectors a group can keep, the texts sent to
the model, and the documents the service refuses, found one by one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg

from rag_pg.config import EmbeddingSettings
from rag_pg.embed.base import EmbeddingProvider
from rag_pg.embed.batching import embed_all
from rag_pg.errors import DatabaseRefused, EmbeddingError
from rag_pg.ingest import reuse
from rag_pg.models import FailedDocument, IngestReport
from rag_pg.store import checkpoints
from rag_pg.store.boundary import database_errors
from rag_pg.store.documents import PreparedDocument
from rag_pg.store.queries import Queries

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

KnownVectors = dict[reuse.ReuseKey, "npt.NDArray[np.float32]"]


@dataclass(slots=True)
class EmbeddedGroup:
    """A group after embedding: what to write, and the counts the main thread adds to the report.

    Embedding runs on a worker thread (see ``Ingestor._flush``); it never updates the report
    itself, so no counter is written from two threads.
    """

    ready: list[PreparedDocument]
    refused: list[FailedDocument] = field(default_factory=list)
    tokens: int = 0
    reused: int = 0
    # The vectors this group got from the model, by key: the next group, planned before
    # this one is written, takes its repeated texts from here (see ``known_vectors``).
    fresh: KnownVectors = field(default_factory=dict)


class GroupEmbedder:
    """Gives the chunks of one run's write groups their vectors."""

    def __init__(
        self, provider: EmbeddingProvider, settings: EmbeddingSettings, queries: Queries,
        progress: Callable[[str, dict[str, Any]], None],
    ):
        self.provider = provider
        # Every call made to the provider, answered or failed (a run reports its share).
        self.calls = 0
        self.settings = settings
        self.q = queries
        self.progress = progress
        # Stored vectors are reused from chunks numbered above this: all of them in an
        # incremental run; in a --full run only those it wrote itself, so that every text goes
        # to the model again, once.
        self.reuse_after = 0
        self._total = 0  # chunks queued for embedding so far in this run
        self._done = 0

    def group_chunks(self) -> int:
        """Chunks gathered before embedding: enough batches to keep every request slot busy."""
        return self.settings.batch_size * max(4, self.settings.concurrency)

    def known_vectors(
        self, conn: psycopg.Connection[Any], collection: str, items: list[PreparedDocument],
        model: str | None, previous: EmbeddedGroup | None,
    ) -> KnownVectors:
        """The vectors the group's chunks can keep: embedded by the group before (not yet
        written), else stored in the collection (the edited documents' previous versions,
        other documents, the groups already written; see ``reuse_after``). One query, on the
        ingest's thread, before the group goes to the embedding worker; the collection's lock
        keeps them current."""
        if model is None:
            return {}
        keys = reuse.group_keys([p for p in items if p.document.embed])
        recent = previous.fresh if previous is not None else {}
        known = {k: recent[k] for k in keys if k in recent}
        missing = [k for k in keys if k not in known]
        if missing:
            try:
                with database_errors(conn, schema=self.q.schema):
                    known.update(reuse.stored_vectors(conn, self.q, collection, model, missing,
                                                      after=self.reuse_after))
            except DatabaseRefused:
                pass  # embed them: reuse only saves work (a lost connection still stops the run)
        return known

    def embed(
        self, items: list[PreparedDocument], report: IngestReport, model: str | None,
        known: KnownVectors,
    ) -> EmbeddedGroup:
        """Vectorise every chunk of the documents that embed; drop (and list) the ones refused.

        A chunk whose key is in ``known`` keeps that vector; only the other texts are sent.

        Runs on the embedding worker (``Ingestor._flush``): ``report`` is only read, for
        progress events; the counts and refusals go back in the result, for the main thread
        to record.
        """
        embedded = EmbeddedGroup(ready=items)
        needing = [p for p in items if model is not None and p.document.embed and p.chunks]
        if not needing:
            return embedded
        checkpoints.reach("before_embed")
        try:
            self._embed_documents(needing, report, embedded, known)
            checkpoints.reach("after_embed")
            return embedded
        except EmbeddingError as exc:
            if exc.kind == "unavailable":
                raise
        # one document at a time, to find the one the service refuses
        refused: set[int] = set()
        for item in needing:
            try:
                self._embed_documents([item], report, embedded, {**known, **embedded.fresh})
            except EmbeddingError as error:
                if error.kind == "unavailable":
                    raise
                refused.add(id(item))
                embedded.refused.append(FailedDocument(
                    path=item.document.path, error=str(error), kind=error.kind))
        if len(needing) > 1 and all(f.kind == "malformed" for f in embedded.refused) \
                and len(embedded.refused) == len(needing):
            # Every document alone got a malformed answer: the service is at fault, not them,
            # and every later group would fail the same way.
            raise EmbeddingError.unavailable(
                f"the embedding service answers malformed: a group of {len(needing)} documents"
                f" failed, then each of them alone ({embedded.refused[0].error})")
        embedded.ready = [p for p in items if id(p) not in refused]
        return embedded

    def _embed_documents(
        self, items: list[PreparedDocument], report: IngestReport, embedded: EmbeddedGroup,
        known: KnownVectors,
    ) -> None:
        """Give every chunk of ``items`` a vector: a known one, else the model's (type passage).

        Each distinct text not known is sent once, several batches in flight, outside any
        transaction: a slow or failing service never holds a database lock. Batches are cut
        by count and by estimated tokens; progress gets one "embedded" event per batch with
        the running totals (``embedded`` of ``total`` queued so far), from the embedding
        worker thread (the only one that touches these totals).
        """
        plan = reuse.EmbedPlan.of(items, known)
        texts = plan.texts
        settings = self.settings
        self._total += len(texts)

        def done(count: int) -> None:
            self.calls += 1
            self._done += count
            self.progress("embedded", {"count": count, "embedded": self._done,
                                       "total": self._total, "report": report})

        try:
            stacked = embed_all(
                self.provider, "passage", texts, batch_size=settings.batch_size,
                batch_tokens=settings.batch_tokens, concurrency=settings.concurrency, on_batch=done,
            )
        except EmbeddingError:
            self.calls += 1  # the call that failed was made too
            raise
        embedded.fresh.update(plan.assign(items, known, stacked))
        embedded.tokens += plan.tokens
        embedded.reused += plan.reused
