"""Broken parent links found by an ingest: one ``missing_parent`` failure per document whose
``parent_source_file`` is not indexed (the document itself stays indexed)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import psycopg

from rag_pg.models import FailedDocument, IngestReport
from rag_pg.store.parents import missing_parents

MISSING_PARENT = "missing_parent"


def missing_parent_message(parent: str, collection: str) -> str:
    return (
        f"parent_source_file {parent!r} is not indexed in collection {collection!r}"
        " (the path is relative to the ingest root; the document itself was indexed)"
    )


def record_missing_parents(
    conn: psycopg.Connection[Any],
    schema: str,
    collection: str,
    report: IngestReport,
    paths: Collection[str] | None = None,
) -> int:
    """Add one ``missing_parent`` failure per broken link to ``report``; returns how many.

    ``documents_failed`` is not incremented: the document was indexed (it is counted in
    ``documents_indexed`` or ``documents_skipped``), only its link is wrong. A non-empty
    ``failures`` list still makes the run ``partial`` and the CLI exit 1.
    """
    broken = missing_parents(conn, schema, collection, paths=paths)
    for path, parent in broken:
        report.failures.append(
            FailedDocument(path=path, error=missing_parent_message(parent, collection),
                           kind=MISSING_PARENT)
        )
    return len(broken)
