"""The ingest progress line: the embedder's rate and an ETA, on an injected clock."""

from __future__ import annotations

import itertools

from rag_pg.cli.progress import IngestProgress
from rag_pg.models import IngestReport

from .test_ingest import make_rag


def test_the_rate_counts_from_the_first_batch_and_the_eta_covers_what_is_queued():
    now = [100.0]
    lines: list[str] = []
    progress = IngestProgress(clock=lambda: now[0], write=lines.append, interval=0)
    report = IngestReport(source_root="/docs", documents_seen=7, documents_indexed=3)
    progress("embedded", {"count": 32, "embedded": 32, "total": 256, "report": report})
    assert "32/256 chunks embedded" in lines[-1] and "ETA" not in lines[-1]  # no rate yet
    now[0] = 110.0  # 64 more chunks in 10 s: 6.4/s, 160 left of those queued
    progress("embedded", {"count": 64, "embedded": 96, "total": 256, "report": report})
    assert lines[-1].startswith("\r7 documents seen, 3 indexed")
    assert "96/256 chunks embedded, 6.4 chunks/s, ETA 0:25" in lines[-1]
    now[0] = 3900.0 + 100.0  # 96 chunks in 3,900 s: a rate below one keeps two decimals
    progress("embedded", {"count": 32, "embedded": 128, "total": 100_000, "report": report})
    assert "128/100000 chunks embedded, 0.02 chunks/s, ETA 1127:" in lines[-1]

def test_redraws_wait_for_the_interval():
    now = [0.0]
    lines: list[str] = []
    progress = IngestProgress(clock=lambda: now[0], write=lines.append, interval=1.0)
    report = IngestReport(source_root="/docs")
    for t in (0.0, 0.5, 0.9, 1.0, 1.2):
        now[0] = t
        progress("document", {"path": "a.md", "status": "indexed", "report": report})
    assert len(lines) == 2
    progress.finish()
    assert lines[-1] == "\n"


def test_a_real_ingest_reports_every_chunk_embedded(db_url, embed_server, corpus):
    ticks = itertools.count(0.0, 0.5)
    lines: list[str] = []
    progress = IngestProgress(clock=lambda: next(ticks), write=lines.append, interval=0)
    with make_rag(db_url, embed_server) as rag:
        report = rag.ingest(corpus, progress=progress)
    done = report.chunks_upserted
    assert progress.embedded == progress.queued == embed_server.texts_embedded == done
    assert any(f"{done}/{done} chunks embedded" in line for line in lines)
    assert any("chunks/s, ETA " in line for line in lines)


def test_the_eta_covers_the_files_not_read_yet():
    """The queue alone is a few groups ahead of the embedder: an ETA over it reads 0:00 for
    most of a long run. The files counted before the walk, at the chunks per file read so
    far, are the rest of the work."""
    now = [0.0]
    lines: list[str] = []
    progress = IngestProgress(clock=lambda: now[0], write=lines.append, interval=0)
    report = IngestReport(source_root="/docs", documents_seen=10, documents_indexed=10)
    progress("planned", {"files": 100, "report": report})
    assert lines == []  # nothing to say before the walk starts
    progress("embedded", {"count": 10, "embedded": 10, "total": 50, "report": report})
    now[0] = 10.0  # 30 more in 10 s: 3/s; 10 queued + 90 files x 5 chunks = 460 left
    progress("embedded", {"count": 30, "embedded": 40, "total": 50, "report": report})
    assert lines[-1].startswith("\r10/~100 documents seen")
    assert "3.0 chunks/s, ETA 2:33" in lines[-1]
    report.documents_seen = 100  # the walk is done: only the queue is left
    progress("embedded", {"count": 4, "embedded": 44, "total": 50, "report": report})
    assert lines[-1].startswith("\r100 documents seen") and "ETA 0:0" in lines[-1]


def test_without_a_terminal_a_line_every_interval_and_nothing_redrawn():
    now = [0.0]
    lines: list[str] = []
    progress = IngestProgress(clock=lambda: now[0], write=lines.append, interval=10.0, redraw=False)
    report = IngestReport(source_root="/docs")
    for t in (0.0, 4.0, 9.9, 10.0, 15.0, 20.5):
        now[0] = t
        progress("document", {"path": "a.md", "status": "indexed", "report": report})
    assert len(lines) == 2 and all(line.endswith("\n") and "\r" not in line for line in lines)
    progress.finish()
    assert len(lines) == 2


def test_the_estimate_counts_the_files_a_walk_reads(tmp_path):
    from rag_pg.source.walk import WalkRules, estimate_documents, walk

    for rel in ("a.md", "docs/b.md", "docs/c.mdx", "notes.txt", ".git/x.md", "legacy/old.md",
                "private/secret.md", "docs/scratch.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("# T\n\nText.\n", encoding="utf-8")
    (tmp_path / ".aiignore").write_text("private/\n", encoding="utf-8")
    rules = WalkRules(excluded_paths=("docs/c.mdx",))
    read = [f for f in walk(tmp_path, rules) if not hasattr(f, "reason")]
    assert estimate_documents(tmp_path, rules) == len(read) == 2
