"""Ingest embeds the next write group while it writes the previous one, and keeps its guarantees."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.errors import EmbeddingError
from rag_pg.store import checkpoints

from .invariants import violations
from .rows import value

DOCUMENTS = 8


def write_corpus(root: Path, n: int = DOCUMENTS) -> Path:
    """``n`` documents of four sections each: with batch size 2, about two documents a group."""
    for i in range(n):
        sections = "\n\n".join(
            f"## Section {s}\n\n" + " ".join(f"word{(i * 11 + s * 5 + w) % 89}" for w in range(60))
            for s in range(4)
        )
        (root / f"doc{i:02}.md").write_text(f"# Document {i}\n\n{sections}\n")
    return root


def make_rag(db_url: str, server: Any, **overrides: Any) -> RagPG:
    settings = Settings.load(environ={}, overrides={
        "embedding.url": server.url, "embedding.batch_size": 2, "embedding.concurrency": 4,
        "embedding.attempts": 1, **overrides})
    return RagPG(db_url, settings)


def stored_documents(db_url: str) -> int:
    with psycopg.connect(db_url) as conn:
        row = value(conn, "SELECT count(*) FROM ragpg.document")
    assert row is not None
    return int(row)


def test_next_group_is_embedded_while_the_previous_one_is_written(db_url, embed_server, tmp_path):
    totals: set[int] = set()  # one "total" per group handed to the embedder
    changed = threading.Condition()
    next_group_started: list[bool] = []

    def progress(event: str, data: dict[str, Any]) -> None:
        with changed:
            if event == "embedded":
                totals.add(data["total"])
                changed.notify_all()
            elif event == "document" and data["status"] == "indexed" and not next_group_started:
                # Group 1 is committed: group 2 must be on its way already. Written one after
                # the other, group 2 would only start after this callback returns (never, here).
                next_group_started.append(changed.wait_for(lambda: len(totals) >= 2, timeout=30))

    with make_rag(db_url, embed_server) as rag:
        report = rag.ingest(write_corpus(tmp_path), progress=progress)
    assert next_group_started == [True]
    assert report.documents_indexed == DOCUMENTS and report.documents_failed == 0
    assert len(totals) >= 3  # several groups, so the overlap was really exercised
    assert report.embedding_calls == embed_server.calls
    assert {d["encoding"] for d in embed_server.details} == {"base64"}
    assert violations(db_url) == []


def test_checkpoints_are_reached_in_order_for_every_group(db_url, embed_server, tmp_path):
    sites: list[str] = []
    lock = threading.Lock()

    def record(site: str) -> None:
        with lock:
            sites.append(site)

    previous = checkpoints.install(record)
    try:
        with make_rag(db_url, embed_server) as rag:
            report = rag.ingest(write_corpus(tmp_path))
    finally:
        checkpoints.install(previous)
    embeds = [s for s in sites if s.endswith("_embed")]
    writes = [s for s in sites if s.endswith("_write")]
    groups = len(writes) // 2
    assert groups >= 3 and report.documents_indexed == DOCUMENTS
    assert embeds == ["before_embed", "after_embed"] * groups
    assert writes == ["before_write", "after_write"] * groups
    embedded_at = [i for i, s in enumerate(sites) if s == "after_embed"]
    written_at = [i for i, s in enumerate(sites) if s == "before_write"]
    assert all(e < w for e, w in zip(embedded_at, written_at, strict=True))


def test_service_lost_mid_run_stops_with_only_whole_groups_written(db_url, embed_server, tmp_path):
    def progress(event: str, data: dict[str, Any]) -> None:
        if event == "document" and data["status"] == "indexed":
            embed_server.fault = "503"  # from the first commit on, every request fails

    with make_rag(db_url, embed_server) as rag, pytest.raises(EmbeddingError) as caught:
        rag.ingest(write_corpus(tmp_path), progress=progress)
    assert caught.value.kind == "unavailable"
    assert 0 < stored_documents(db_url) < DOCUMENTS
    assert violations(db_url) == []
    with psycopg.connect(db_url) as conn:
        status = conn.execute("SELECT status FROM ragpg.ingest_run ORDER BY id DESC LIMIT 1").fetchone()
    assert status == ("failed",)
    embed_server.fault = None
    with make_rag(db_url, embed_server) as rag:
        report = rag.ingest(tmp_path)
    assert report.documents_failed == 0 and stored_documents(db_url) == DOCUMENTS
    assert violations(db_url) == []


def test_refused_document_in_a_later_group_fails_alone(db_url, embed_server, tmp_path):
    corpus = write_corpus(tmp_path)
    target = corpus / f"doc{DOCUMENTS - 2:02}.md"
    target.write_text(target.read_text() + "\nA POISON paragraph.\n")
    embed_server.poison = "POISON"
    with make_rag(db_url, embed_server) as rag:
        report = rag.ingest(corpus)
    assert [(f.path, f.kind) for f in report.failures] == [(target.name, "invalid_input")]
    assert report.documents_indexed == DOCUMENTS - 1 == stored_documents(db_url)
    assert violations(db_url) == []
