"""C5, C7, D5 and F2: queries while documents are rewritten, leaks under failing operations,
fuzzed query text, and HTTP load during an ingest."""

from __future__ import annotations

import os
import random
import re
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.conninfo import conninfo_to_dict

from rag_pg import RagPG, Settings
from rag_pg.errors import RagError

from ..conftest import run_cli
from ..rows import value
from ..test_server import Served, clean_env
from ..waiting import eventually
from .conftest import counted, slow
from .harness import env_for, spawned

REV = re.compile(r"rev(\d+)x")


def versioned_tree(root: Path, docs: int, rev: int, only: set[int] | None = None) -> Path:
    """Documents whose every paragraph names their revision: a response mixing two versions of
    one document shows two revisions for one path."""
    for i in range(docs):
        if only is not None and i not in only:
            continue
        folder = root / f"part{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        body = "\n\n".join(f"Paragraph {j} of document {i} rev{rev}x: "
                           + " ".join(f"mot{(i * 5 + j * 3 + w) % 61}" for w in range(30)) for j in range(6))
        (folder / f"doc{i:03}.md").write_text(f"# Document {i}\n\n{body}\n")
    return root


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def settings_for(server: Any) -> Settings:
    return Settings().with_overrides(**{"embedding.url": server.url, "embedding.batch_size": 16})


def readers_during_writes(db_url: str, server: Any, tmp_path: Path, seconds: float) -> dict[str, Any]:
    docs = 40
    tree = versioned_tree(tmp_path / "tree", docs, 0)
    env = env_for(db_url, server)
    assert run_cli(["ingest", str(tree)], env=env, cwd=tmp_path).returncode == 0
    stop = threading.Event()
    stats: dict[str, Any] = {"queries": 0, "errors": 0, "mixed": 0, "writes": 0}
    latencies: list[float] = []
    lock = threading.Lock()
    failures: list[str] = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        with RagPG(db_url, settings_for(server)) as rag:
            while not stop.is_set():
                mode = rng.choice(["hybrid", "vector", "keyword"])
                started = time.monotonic()
                try:
                    hits = rag.search(f"mot{rng.randrange(61)} mot{rng.randrange(61)} document", 10, mode=mode)
                except Exception as exc:  # noqa: BLE001 - every error is counted and shown
                    with lock:
                        stats["errors"] += 1
                        failures.append(f"{mode}: {exc}")
                    continue
                took = time.monotonic() - started
                revs: dict[str, set[str]] = {}
                for hit in hits:
                    revs.setdefault(hit.path, set()).update(REV.findall(hit.chunk.content))
                with lock:
                    stats["queries"] += 1
                    stats["mixed"] += sum(len(found) > 1 for found in revs.values())
                    latencies.append(took)

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(3)]
    for t in threads:
        t.start()
    rng = random.Random(1)
    deadline = time.monotonic() + seconds
    rev = 0
    try:
        while time.monotonic() < deadline:
            rev += 1
            versioned_tree(tree, docs, rev, only=set(rng.sample(range(docs), 8)))
            gone = tree / "part1" / f"doc{rng.randrange(1, docs, 4):03}.md"
            gone.unlink(missing_ok=True)  # deleted, then back at the next revision
            with spawned(["ingest", str(tree), "--prune"], env, tmp_path) as writer:
                _, err = writer.communicate(timeout=300)
            assert writer.returncode == 0, err
            versioned_tree(tree, docs, rev, only={int(gone.stem[3:])})
            stats["writes"] += 1
    finally:
        stop.set()
        for t in threads:
            t.join()
    stats["p95_ms"] = round(percentile(latencies, 0.95) * 1000, 1)
    stats["failures"] = failures[:5]
    return stats


def check_c5(stats: dict[str, Any]) -> None:
    assert stats["writes"] >= 1 and stats["queries"] > 0, stats
    assert stats["errors"] == stats["mixed"] == 0, stats


def c5_text(stats: dict[str, Any], seconds: float) -> str:
    return (f"{stats['queries']} queries in {seconds:g} s across {stats['writes']} rewriting ingests,"
            f" 0 errors, 0 mixed-version responses, p95 {stats['p95_ms']} ms")


def test_c5_readers_during_writes(db_url, embed_server, tmp_path, figure):
    stats = readers_during_writes(db_url, embed_server, tmp_path, seconds=4)
    check_c5(stats)
    figure("C5", c5_text(stats, 4), **stats)


@slow
def test_c5_readers_during_writes_for_a_minute(db_url, embed_server, tmp_path, figure):
    seconds = counted(60, "C5")
    stats = readers_during_writes(db_url, embed_server, tmp_path, seconds=seconds)
    check_c5(stats)
    figure("C5", c5_text(stats, seconds), **stats)


# -- D5: fuzzed query text ---------------------------------------------------------------------

NASTY = list("'&|!:*()<>\\\"-~^@#$%;`") + ["\u02bc", "\uff07", "\u00a0", "\u200b", "\t", "\n", "\x01", "\x7f",
                                             "мир", "東京", "é", "ß", "👍", "le", "la", "the", "and", "NOT", "OR"]


def fuzzed_query(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.01:
        return "".join(rng.choice(NASTY) for _ in range(20)) * 5000  # ~100 KB
    if roll < 0.03:
        return "mot1\x00mot2"
    if roll < 0.05:
        return rng.choice(["", " ", "le la les", "the and of", "'", "!!", "&|!"])
    words = [rng.choice(NASTY) if rng.random() < 0.5 else f"mot{rng.randrange(97)}"
             for _ in range(rng.randint(1, 12))]
    return rng.choice(["", " "]).join(words)


def fuzz_queries(db_url: str, server: Any, corpus: Path, count: int) -> dict[str, Any]:
    stats: dict[str, Any] = {"queries": count, "sql_errors": 0, "other_errors": 0, "refused": 0}
    latencies: list[float] = []
    rng = random.Random(20)
    examples: list[str] = []
    with RagPG(db_url, settings_for(server)) as rag:
        rag.ingest(corpus)
        for _ in range(count):
            text = fuzzed_query(rng)
            mode = rng.choice(["hybrid", "keyword", "vector"])
            started = time.monotonic()
            try:
                rag.search(text, rng.choice([1, 5, 10]), mode=mode)  # type: ignore[arg-type]
            except psycopg.Error as exc:
                stats["sql_errors"] += 1
                examples.append(f"{text[:40]!r}: {exc}")
            except RagError:
                stats["refused"] += 1  # a clean refusal (the NUL byte, an over-long query)
            except Exception as exc:  # noqa: BLE001 - counted and shown
                stats["other_errors"] += 1
                examples.append(f"{text[:40]!r}: {type(exc).__name__}: {exc}")
            latencies.append(time.monotonic() - started)
    stats["p99_ms"] = round(percentile(latencies, 0.99) * 1000, 1)
    stats["examples"] = examples[:5]
    return stats


def test_d5_fuzzed_query_text(db_url, embed_server, corpus, figure):
    stats = fuzz_queries(db_url, embed_server, corpus, 300)
    assert stats["sql_errors"] == stats["other_errors"] == 0, stats
    figure("D5", f"{stats['queries']} fuzzed queries, 0 SQL errors, {stats['refused']} clean refusals,"
                 f" p99 {stats['p99_ms']} ms", **stats)


@slow
def test_d5_ten_thousand_fuzzed_queries(db_url, embed_server, corpus, figure):
    stats = fuzz_queries(db_url, embed_server, corpus, counted(10_000, "D5"))
    assert stats["sql_errors"] == stats["other_errors"] == 0, stats
    figure("D5", f"{stats['queries']} fuzzed queries, 0 SQL errors, {stats['refused']} clean refusals,"
                 f" p99 {stats['p99_ms']} ms", **stats)


# -- C7: leaks under failing operations ----------------------------------------------------------

def ragpg_backends(admin_url: str, db_url: str) -> int:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = value(conn, "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = 'ragpg'", (conninfo_to_dict(db_url)["dbname"],))
    return int(row) if row else 0


def leak_loop(db_url: str, admin_url: str, server: Any, corpus: Path, ops: int) -> dict[str, Any]:
    rng = random.Random(9)
    settings = settings_for(server).with_overrides(**{"embedding.attempts": 1, "embedding.cooldown": 0.01,
                                                      "database.pool_size": 3})
    stats: dict[str, Any] = {"ops": ops, "failed": 0, "max_connections": 0}
    with RagPG(db_url, settings) as rag:
        rag.ingest(corpus)
        rag.search("warm up", 3)
        fds_before = len(os.listdir("/proc/self/fd"))
        baseline = ragpg_backends(admin_url, db_url)
        actions: list[Callable[[], object]] = [
            lambda: rag.search("sauvegarde pg_dump", 5),
            lambda: rag.search("sauvegarde", 5, mode="keyword"),
            lambda: rag.get_document("en/ops/incident-response.md"),
            lambda: rag.ingest(corpus),
            lambda: rag.stats(),
        ]
        failing: list[Callable[[], object]] = [
            lambda: rag.search("x", 5, filters={"a": object()}),  # refused before SQL
            lambda: rag.search("x", -1),
            lambda: rag.search("x", 5, collection="no-such-collection"),
        ]
        for _ in range(ops):
            fault = rng.random() < 0.3
            server.fault = "503" if fault and rng.random() < 0.5 else None
            action = rng.choice(failing) if fault and server.fault is None else rng.choice(actions)
            try:
                action()
            except (RagError, ValueError, TypeError):
                stats["failed"] += 1
            stats["max_connections"] = max(stats["max_connections"], ragpg_backends(admin_url, db_url))
        server.fault = None
        rag.search("after", 3)
        stats["connections_before"] = baseline
        stats["connections_after"] = ragpg_backends(admin_url, db_url)
        stats["fd_delta"] = len(os.listdir("/proc/self/fd")) - fds_before
    # closed, the library leaves no connection behind (backends exit a moment after their client)
    eventually(lambda: not ragpg_backends(admin_url, db_url), "every ragpg backend gone",
               limit=60)
    stats["connections_after_close"] = ragpg_backends(admin_url, db_url)
    return stats


def check_c7(stats: dict[str, Any]) -> None:
    assert stats["failed"] > 0, stats
    # the pool (3) grows on demand and stays within its size, plus the lock's own connection
    assert stats["max_connections"] <= 3 + 1 and stats["connections_after"] <= 3, stats
    # a connection the pool opened on demand holds its socket: that fd is not a leak
    grown = max(stats["connections_after"] - stats["connections_before"], 0)
    assert stats["connections_after_close"] == 0 and stats["fd_delta"] <= grown, stats


def c7_text(stats: dict[str, Any]) -> str:
    return (f"{stats['ops']} operations, {stats['failed']} failed; connections {stats['connections_before']}"
            f" before, {stats['connections_after']} after (pool of 3, max {stats['max_connections']}), 0 after"
            f" close; fd delta {stats['fd_delta']} (pool grown by"
            f" {max(stats['connections_after'] - stats['connections_before'], 0)})")


def test_c7_failing_operations_leak_nothing(db_url, pg_server_url, embed_server, corpus, figure):
    stats = leak_loop(db_url, pg_server_url, embed_server, corpus, 100)
    check_c7(stats)
    figure("C7", c7_text(stats), **stats)


@slow
def test_c7_thousand_failing_operations_leak_nothing(db_url, pg_server_url, embed_server, corpus, figure):
    stats = leak_loop(db_url, pg_server_url, embed_server, corpus, counted(1000, "C7"))
    check_c7(stats)
    figure("C7", c7_text(stats), **stats)


# -- F2: HTTP load while an ingest rewrites a tenth of the documents ---------------------------

TOKEN = "tok-reliability-0123456789abcdef"


def http_load(db_url: str, server: Any, tmp_path: Path, seconds: float, clients: int = 16) -> dict[str, Any]:
    docs = 60
    tree = versioned_tree(tmp_path / "tree", docs, 0)
    env = env_for(db_url, server)
    assert run_cli(["ingest", str(tree)], env=env, cwd=tmp_path).returncode == 0
    served = Served(clean_env(RAGPG_DATABASE_URL=db_url, RAGPG_EMBEDDING_URL=server.url, RAGPG_SERVER_TOKEN=TOKEN),
                    tmp_path / "serve")
    statuses: dict[int, int] = {}
    latencies: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()
    bodies: list[str] = []

    def client(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as http:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    answer = http.post("/search", json={"query": f"mot{rng.randrange(61)} document",
                                                        "k": 5, "mode": rng.choice(["hybrid", "keyword"])})
                    code = answer.status_code
                except httpx.HTTPError as exc:
                    code, answer = -1, None
                    bodies.append(str(exc))
                if answer is not None and code == 503 and answer.headers.get("retry-after") \
                        and "embedding_busy" in answer.text:
                    code = 0  # load shed by design: the gate in front of the embedder is full
                elif answer is not None and code != 200 and len(bodies) < 5:
                    bodies.append(f"{code} {answer.text[:300]}")
                with lock:
                    statuses[code] = statuses.get(code, 0) + 1
                    latencies.append(time.monotonic() - started)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    rewrites = 0
    try:
        for t in threads:
            t.start()
        rng = random.Random(2)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            rewrites += 1
            versioned_tree(tree, docs, rewrites, only=set(rng.sample(range(docs), docs // 10)))
            with spawned(["ingest", str(tree)], env, tmp_path) as writer:
                _, err = writer.communicate(timeout=300)
            assert writer.returncode == 0, err
    finally:
        stop.set()
        for t in threads:
            t.join()
        served.stop()
    total = sum(statuses.values())
    return {"requests": total, "errors": total - statuses.get(200, 0) - statuses.get(0, 0),
            "shed": statuses.get(0, 0), "statuses": statuses,
            "rewrites": rewrites, "p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
            "p95_ms": round(percentile(latencies, 0.95) * 1000, 1),
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
            "rps": round(total / seconds, 1), "refusals": bodies[:5], "mean_ms": round(statistics.fmean(latencies) * 1000, 1)}


def f2_text(stats: dict[str, Any], seconds: float) -> str:
    return (f"{stats['requests']} requests from 16 clients in {seconds:g} s during {stats['rewrites']} ingests"
            f" rewriting 10 %, errors {stats['errors']}, {stats['shed']} shed at once (503 + Retry-After:"
            f" more hybrid searches than the embedding gate's slots and queue), p50/p95/p99 {stats['p50_ms']}/{stats['p95_ms']}/"
            f"{stats['p99_ms']} ms")


def test_f2_http_load_while_ingesting(db_url, embed_server, tmp_path, figure):
    stats = http_load(db_url, embed_server, tmp_path, seconds=4)
    assert stats["requests"] > 0 and stats["errors"] == 0, stats["refusals"]
    figure("F2", f2_text(stats, 4), **stats)


@slow
def test_f2_http_load_for_a_minute(db_url, embed_server, tmp_path, figure):
    seconds = counted(60, "F2")
    stats = http_load(db_url, embed_server, tmp_path, seconds=seconds)
    assert stats["requests"] > 0 and stats["errors"] == 0, stats["refusals"]
    figure("F2", f2_text(stats, seconds), **stats)
