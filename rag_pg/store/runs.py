"""The ``ingest_run`` table: a run's start, its progress after each write group, its end, and
the runs a dead process left ``running``."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import scalar_row
from psycopg.types.json import Jsonb

from rag_pg.models import IngestReport
from rag_pg.store.boundary import translated
from rag_pg.store.queries import Queries


class RunLog:
    """The run part of :class:`rag_pg.store.documents.Store`, which sets these attributes."""

    schema: str
    q: Queries

    @translated
    def start_run(
        self, conn: psycopg.Connection[Any], *, source_root: str, collection: str, mode: str,
        model: str | None,
    ) -> int:
        with conn.transaction(), conn.cursor(row_factory=scalar_row) as cur:
            run_id = cur.execute(
                self.q("run_start"),
                {"source_root": source_root, "collection": collection, "mode": mode, "model": model},
            ).fetchone()
        assert run_id is not None
        return int(run_id)

    @translated
    def record_progress(self, conn: psycopg.Connection[Any], run_id: int, report: IngestReport) -> None:
        """The run's counters so far, in its row (one short transaction per write group)."""
        with conn.transaction():
            conn.execute(self.q("runs_progress"), {
                "id": run_id, "seen": report.documents_seen,
                "indexed": report.documents_indexed, "skipped": report.documents_skipped,
                "failed": report.documents_failed, "chunks": report.chunks_upserted,
                "calls": report.embedding_calls, "tokens": report.tokens_embedded,
            })

    @translated
    def finish_run(self, conn: psycopg.Connection[Any], run_id: int, status: str, report: Any) -> None:
        # Warnings (a front-matter value dropped, ...) are kept beside the failures: a BI reader
        # of ingest_runs_v sees what a run left out, not only what it could not index.
        errors = [{"path": f.path, "error": f.error, "kind": f.kind} for f in report.failures]
        errors += [{"path": w.partition(": ")[0], "error": w.partition(": ")[2] or w, "kind": "warning"}
                   for w in report.warnings]
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


def abort_stale_runs(conn: psycopg.Connection[Any], schema: str, collection: str) -> int:
    """Mark ``aborted`` the runs left ``running`` by a dead process; call with the lock held."""
    with conn.transaction():
        cur = conn.execute(Queries(schema)("runs_abort_stale"),
                           {"collection": collection})
    return cur.rowcount
