"""F4: twenty clients searching in hybrid mode at once, against `ragpg serve` and a healthy
embedding service that answers in milliseconds: every request is answered (no 503), however
the clients retry. The embedding gate bounds the embedding call, not the search around it."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from ..conftest import run_cli
from ..test_server import Served, clean_env
from .conftest import counted, slow
from .harness import env_for
from .test_queries_under_load import percentile, versioned_tree

CLIENTS = 20
TOKEN = "tok-service-load-0123456789abcdef"


def hybrid_load(db_url: str, server: Any, tmp_path: Path, seconds: float) -> dict[str, Any]:
    tree = versioned_tree(tmp_path / "tree", 60, 0)
    assert run_cli(["ingest", str(tree)], env=env_for(db_url, server), cwd=tmp_path).returncode == 0
    served = Served(clean_env(RAGPG_DATABASE_URL=db_url, RAGPG_EMBEDDING_URL=server.url,
                              RAGPG_SERVER_TOKEN=TOKEN), tmp_path / "serve")
    statuses: dict[int, int] = {}
    latencies: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {TOKEN}"},
                          timeout=120) as http:
            while not stop.is_set():  # at once after each answer: no Retry-After honoured
                started = time.monotonic()
                answer = http.post("/search", json={"query": f"mot{rng.randrange(61)} document",
                                                    "k": 5, "mode": "hybrid"})
                with lock:
                    statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
                    latencies.append(time.monotonic() - started)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    try:
        for t in threads:
            t.start()
        stop.wait(seconds)
    finally:
        stop.set()
        for t in threads:
            t.join()
        served.stop()
    total = sum(statuses.values())
    return {"requests": total, "statuses": statuses, "busy": statuses.get(503, 0),
            "rps": round(total / seconds, 1),
            "p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 1)}


def f4_text(stats: dict[str, Any], seconds: float) -> str:
    return (f"{stats['requests']} hybrid searches from {CLIENTS} clients in {seconds:g} s"
            f" ({stats['rps']} req/s), 503 x {stats['busy']}, statuses {stats['statuses']},"
            f" p50/p99 {stats['p50_ms']}/{stats['p99_ms']} ms")


def test_f4_twenty_hybrid_clients_are_all_answered(db_url, embed_server, tmp_path, figure):
    stats = hybrid_load(db_url, embed_server, tmp_path, seconds=4)
    assert stats["requests"] > CLIENTS and stats["statuses"] == {200: stats["requests"]}, stats
    figure("F4", f4_text(stats, 4), **stats)


@slow
def test_f4_twenty_hybrid_clients_for_a_minute(db_url, embed_server, tmp_path, figure):
    seconds = counted(60, "F4")
    stats = hybrid_load(db_url, embed_server, tmp_path, seconds=seconds)
    assert stats["statuses"] == {200: stats["requests"]}, stats
    figure("F4", f4_text(stats, seconds), **stats)
