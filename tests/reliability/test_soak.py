"""F1 and F3: bulk ingest throughput and memory, and a soak of edits, ingests and queries
against a long-running server (its memory, descriptors, connections, the index's size)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg

from rag_pg import RagPG, Settings

from ..rows import records
from ..test_server import Served, clean_env
from .conftest import counted, slow
from .harness import child_env, env_for, write_tree
from .test_queries_under_load import ragpg_backends

TOKEN = "tok-soak-0123456789abcdef0123"


def bulk_ingest(db_url: str, server: Any, root: Path, docs: int) -> dict[str, Any]:
    """One cold ``ragpg ingest`` of ``docs`` documents: time, bytes and the process's peak RSS."""
    tree = write_tree(root, docs, paragraphs=12)
    size = sum(p.stat().st_size for p in tree.rglob("*.md"))
    calls_before = server.calls
    argv = [sys.executable, "-m", "rag_pg", "ingest", str(tree), "--json"]
    proc = subprocess.Popen(argv, env=child_env(env_for(db_url, server, RAGPG_EMBEDDING_BATCH_SIZE="32")),
                            cwd=root.parent, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    started = time.monotonic()
    try:
        out = proc.stdout.read() if proc.stdout else ""
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
    seconds = time.monotonic() - started
    assert proc.returncode == 0, out
    report = json.loads(out)
    assert report["documents_indexed"] == docs
    return {"docs": docs, "mb": round(size / 2**20, 1), "seconds": round(seconds, 1),
            "docs_per_s": round(docs / seconds, 1), "mb_per_s": round(size / 2**20 / seconds, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "embed_calls": server.calls - calls_before}


def throughput(db_url: str, pg_server_url: str, pg_template: str, server: Any, tmp_path: Path,
               small: int, large: int) -> dict[str, Any]:
    from ..conftest import drop_database, new_database

    server.delay = 0.005  # the 5 ms a fast embedding service takes per request
    other = new_database(pg_server_url, pg_template)
    try:
        low = bulk_ingest(other, server, tmp_path / "small" / "tree", small)
        high = bulk_ingest(db_url, server, tmp_path / "large" / "tree", large)
    finally:
        server.delay = 0.0
        drop_database(pg_server_url, other)
    # Streaming: the peak does not follow the corpus (a few MB of slack for allocator noise).
    assert high["peak_rss_mb"] <= low["peak_rss_mb"] * 1.25 + 16, (low, high)
    return {"small": low, "large": high}


def f1_text(stats: dict[str, Any]) -> str:
    low, high = stats["small"], stats["large"]
    return (f"{high['docs']} docs ({high['mb']} MB): {high['docs_per_s']} docs/s, {high['mb_per_s']} MB/s,"
            f" {high['embed_calls']} embed calls, peak RSS {high['peak_rss_mb']} MB"
            f" (vs {low['peak_rss_mb']} MB for {low['docs']} docs)")


def test_f1_bulk_ingest_memory_does_not_follow_the_corpus(db_url, pg_server_url, pg_template, embed_server,
                                                          tmp_path, figure):
    stats = throughput(db_url, pg_server_url, pg_template, embed_server, tmp_path, 100, 400)
    figure("F1", f1_text(stats), **stats)


@slow
def test_f1_counted_bulk_ingest(db_url, pg_server_url, pg_template, embed_server, tmp_path, figure):
    stats = throughput(db_url, pg_server_url, pg_template, embed_server, tmp_path,
                       counted(10_000, "F1") // 4, counted(10_000, "F1"))
    figure("F1", f1_text(stats), **stats)


def sizes(db_url: str) -> tuple[int, int]:
    """The chunk and vector tables' bytes on disk (indexes and TOAST included) and live rows."""
    with psycopg.connect(db_url) as conn:
        [row] = records(conn, "SELECT pg_total_relation_size('ragpg.chunk')"
                              " + pg_total_relation_size('ragpg.chunk_vector') AS bytes,"
                              " (SELECT count(*) FROM ragpg.chunk)"
                              " + (SELECT count(*) FROM ragpg.chunk_vector) AS live_rows")
    return int(row["bytes"]), int(row["live_rows"])


def over_limit_latency(url: str) -> float:
    """The slowest answer to over-limit requests (huge k, 1 MB query, a huge body): each a 4xx."""
    worst = 0.0
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http:
        for body in ({"query": "x", "k": 10**9}, {"query": "y" * 2**20}, {"query": "z", "pad": "p" * 8 * 2**20}):
            started = time.monotonic()
            code = http.post("/search", json=body).status_code
            worst = max(worst, time.monotonic() - started)
            assert 400 <= code < 500, (code, list(body))
    return worst


def soak(db_url: str, admin_url: str, server: Any, tmp_path: Path, *, seconds: float | None = None,
         cycles: int | None = None) -> dict[str, Any]:
    """Edit+ingest cycles under constant queries, for ``seconds`` or a number of ``cycles``
    (the same work on any machine)."""
    assert seconds is not None or cycles is not None
    docs = 80
    tree = write_tree(tmp_path / "tree", docs)
    settings = Settings().with_overrides(**{"embedding.url": server.url, "embedding.batch_size": 16})
    with RagPG(db_url, settings) as rag:
        rag.ingest(tree)
    served = Served(clean_env(RAGPG_DATABASE_URL=db_url, RAGPG_EMBEDDING_URL=server.url, RAGPG_SERVER_TOKEN=TOKEN),
                    tmp_path / "serve")
    proc = psutil.Process(served.proc.pid)
    samples: list[tuple[float, float, int, int, int]] = []
    stop = threading.Event()
    errors: list[str] = []

    def querier() -> None:
        rng = random.Random(4)
        with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http:
            while not stop.is_set():
                answer = http.post("/search", json={"query": f"mot{rng.randrange(97)}", "k": 5,
                                                    "mode": rng.choice(["hybrid", "keyword", "vector"])})
                if answer.status_code != 200:
                    errors.append(f"{answer.status_code} {answer.text[:200]}")

    thread = threading.Thread(target=querier)
    rng = random.Random(8)
    done = 0
    started = time.monotonic()

    def more() -> bool:
        return ((cycles is None or done < cycles)
                and (seconds is None or time.monotonic() - started < seconds))

    try:
        thread.start()
        worst_4xx = over_limit_latency(served.url)
        with RagPG(db_url, settings) as rag:
            while more():
                for f in rng.sample(sorted(tree.rglob("*.md")), docs // 20):
                    f.write_text(f.read_text() + f"\nSoak edit {done}.\n")
                rag.ingest(tree)
                done += 1
                samples.append((time.monotonic() - started, proc.memory_info().rss / 2**20, proc.num_fds(),
                                ragpg_backends(admin_url, db_url), *sizes(db_url)))
        worst_4xx = max(worst_4xx, over_limit_latency(served.url))
    finally:
        stop.set()
        thread.join()
        served.stop()
    third = max(1, len(samples) // 3)
    early, late = samples[third - 1], samples[-1]
    return {"seconds": round(time.monotonic() - started), "cycles": done, "errors": len(errors),
            "error_examples": errors[:3],
            "rss_early_mb": round(early[1], 1), "rss_late_mb": round(late[1], 1),
            "rss_slope_mb_per_min": round((late[1] - early[1]) / max(1e-9, late[0] - early[0]) * 60, 2),
            "fds_early": early[2], "fds_late": late[2], "connections_max": max(s[3] for s in samples),
            "index_mb_early": round(early[4] / 2**20, 2), "index_mb_late": round(late[4] / 2**20, 2),
            "rows_early": early[5], "rows_late": late[5],
            "worst_4xx_ms": round(worst_4xx * 1000, 1)}


def check_soak(stats: dict[str, Any], *, autovacuumed: bool) -> None:
    assert stats["cycles"] >= 2 and stats["errors"] == 0, stats
    assert stats["fds_late"] <= stats["fds_early"] + 2, stats  # a socket may be mid-handshake
    assert stats["connections_max"] <= 4 + 4 + 1, stats  # the server's pool, this test's, a lock
    # the server's memory settles rather than growing with every cycle
    assert stats["rss_late_mb"] <= stats["rss_early_mb"] * 1.2 + 10, stats
    # a rewritten document leaves no row behind: the live rows follow the corpus (its edits
    # add a line each, a chunk now and then), not the number of cycles
    assert stats["rows_late"] <= stats["rows_early"] * 1.2 + 10, stats
    if autovacuumed:
        # and the space of the rows it replaced is reused: the tables do not grow without
        # bound once autovacuum has run (a short run ends before its first round: dead rows
        # then pile up however fast the machine cycles, so only a long run can tell)
        assert stats["index_mb_late"] <= stats["index_mb_early"] * 2 + 1, stats


def f3_text(stats: dict[str, Any]) -> str:
    return (f"{stats['seconds']} s soak, {stats['cycles']} edit+ingest cycles under constant queries: 0 errors,"
            f" live rows {stats['rows_early']}→{stats['rows_late']},"
            f" server RSS {stats['rss_early_mb']}→{stats['rss_late_mb']} MB (slope {stats['rss_slope_mb_per_min']}"
            f" MB/min), fds {stats['fds_early']}→{stats['fds_late']}, connections max {stats['connections_max']},"
            f" chunk+vector tables {stats['index_mb_early']}→{stats['index_mb_late']} MB;"
            f" over-limit requests 4xx in ≤ {stats['worst_4xx_ms']} ms")


def test_f3_short_soak(db_url, pg_server_url, embed_server, tmp_path, figure):
    stats = soak(db_url, pg_server_url, embed_server, tmp_path, cycles=120)
    check_soak(stats, autovacuumed=False)
    figure("F3", f3_text(stats), **stats)


@slow
def test_f3_soak(db_url, pg_server_url, embed_server, tmp_path, figure):
    stats = soak(db_url, pg_server_url, embed_server, tmp_path,
                 seconds=counted(3600, "F3"))
    check_soak(stats, autovacuumed=stats["seconds"] >= 5 * 60)  # several autovacuum rounds (1 min apart)
    figure("F3", f3_text(stats), **stats)
