"""Embedding throughput with several requests in flight (issue 3): 4 concurrent vs 1.

A loopback embedding service that takes 50 ms per request stands in for a remote GPU:
the time goes into waiting, which only overlapping requests can hide. The texts go through
the same path as an ingest: ``make_provider`` (a chain, with retries) and ``embed_all``
(batches by count and tokens, ``concurrency`` requests in flight).

    .venv/bin/python bench/embed_concurrency.py [--texts 1024] [--batch 16] [--delay 0.05]

Prints one JSON line per concurrency and the speed-up; exits 1 when 4 in flight is not at
least 3x faster than 1 (the issue's bar). A benchmark, not a test: timings vary by machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from rag_pg.config import EmbeddingSettings
from rag_pg.embed import embed_all, make_provider
from rag_pg.testing.embedserver import FakeEmbeddingServer


def measure(url: str, texts: list[str], *, batch: int, concurrency: int, dim: int) -> float:
    """Seconds to embed ``texts`` with ``concurrency`` requests in flight (best of 3)."""
    settings = EmbeddingSettings(url=url, dimension=dim, batch_size=batch, concurrency=concurrency)
    provider = make_provider(settings, environ={})
    try:
        embed_all(provider, "passage", texts[:batch], batch_size=batch, batch_tokens=1 << 20,
                  concurrency=1)  # warm-up: connection, identity
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            vectors = embed_all(provider, "passage", texts, batch_size=batch,
                                batch_tokens=settings.batch_tokens, concurrency=concurrency)
            best = min(best, time.perf_counter() - started)
            assert vectors.shape == (len(texts), dim)
        return best
    finally:
        provider.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds per request")
    parser.add_argument("--dim", type=int, default=384)
    args = parser.parse_args(argv)
    texts = [f"chunk {i}: a paragraph about backups, restores and connection pools"
             for i in range(args.texts)]
    results: dict[int, float] = {}
    with FakeEmbeddingServer(dim=args.dim, delay=args.delay) as server:
        for concurrency in (1, 4):
            seconds = measure(server.url, texts, batch=args.batch, concurrency=concurrency,
                              dim=args.dim)
            results[concurrency] = seconds
            print(json.dumps({
                "concurrency": concurrency, "texts": args.texts, "batch": args.batch,
                "delay_s": args.delay, "seconds": round(seconds, 3),
                "chunks_per_s": round(args.texts / seconds, 1),
            }), flush=True)
    speedup = results[1] / results[4]
    print(f"speed-up with 4 requests in flight: {speedup:.2f}x (bar: >= 3x)")
    return 0 if speedup >= 3.0 else 1


if __name__ == "__main__":
    sys.exit(main())
